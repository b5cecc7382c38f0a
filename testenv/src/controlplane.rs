//! A real control plane for tests, as controller-runtime's envtest runs one: etcd and
//! kube-apiserver (built by `scripts/install-control-plane.sh` into [`crate::tools::dir`]) as
//! child processes on free loopback ports, in a temporary directory of their own. How they are
//! started and measured: docs/control-plane.md, "Starting them".
//!
//! - **TLS and users**: one throw-away CA signs the serving certificate and every user's client
//!   certificate (CN = user, O = groups): [`ControlPlane::admin`] (`system:masters`),
//!   [`ControlPlane::user`], [`ControlPlane::service_account_token`]. Authorization is RBAC.
//! - **Lifetime**: both servers run under a `bash` supervisor whose standard input is a pipe from
//!   this process; when the pipe closes, however this process ends, the supervisor stops them
//!   and removes the directory. So no test leaves a process, a port or a directory behind, even
//!   from the static [`ControlPlane::shared`] instance, whose destructor never runs.
//! - **Faults**: [`ControlPlane::kill_apiserver`] / [`ControlPlane::kill_etcd`] SIGKILL one
//!   server; [`ControlPlane::start_apiserver`] / [`ControlPlane::start_etcd`] start it again with
//!   the same ports, certificates and data, so clients made before reconnect to the same URL.
//! - **Start-up**: ports are taken free from the kernel and released, so one may be taken
//!   meanwhile: without `/readyz` = 200 within 60 s the attempt is torn down and retried on new
//!   ports, three times at most.
//!
//! One shared control plane per test binary ([`ControlPlane::shared`], a namespace per test), and
//! one of its own ([`ControlPlane::start`]) for a test that changes what is cluster-wide (webhook
//! configurations, a different CRD).

use std::io::Write as _;
use std::io::{self, BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// How long one start attempt waits for `/readyz` (envtest's 20 s was too short on busy
/// runners; the measured start on 2 cores is about 2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Start attempts before giving up.
const ATTEMPTS: u32 = 3;

/// The supervisor: starts both servers, prints their pids, then reads commands, one a line,
/// from its standard input until it closes (or until SIGINT, SIGHUP or SIGTERM, as from Ctrl-C
/// or a hangup of the test's terminal; bash runs the trap during `read`), then stops them
/// (kube-apiserver first) and removes the directory. The commands kill one server with
/// SIGKILL and wait until it is gone (`kill-apiserver`, `kill-etcd`: answers `killed`) or
/// start it again with the same script, so on the same port, certificates and data directory
/// (`start-apiserver`, `start-etcd`: answers the new pid). A restarted server is the
/// supervisor's child like the first one, so it is stopped the same way.
const SUPERVISOR: &str = r#"set -u
dir=$1
start_etcd() { "$dir/etcd.sh" </dev/null >>"$dir/etcd.log" 2>&1 & etcd=$!; }
start_api() { "$dir/kube-apiserver.sh" </dev/null >>"$dir/kube-apiserver.log" 2>&1 & api=$!; }
stop() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
shutdown() {
  trap '' INT HUP TERM
  stop "$api"
  stop "$etcd"
  wait
  rm -rf "$dir"
  exit 0
}
trap shutdown INT HUP TERM
start_etcd
start_api
echo "$etcd $api"
while read -r cmd; do
  case $cmd in
    kill-apiserver) kill -KILL "$api" 2>/dev/null; wait "$api" 2>/dev/null; echo killed ;;
    kill-etcd) kill -KILL "$etcd" 2>/dev/null; wait "$etcd" 2>/dev/null; echo killed ;;
    start-apiserver) start_api; echo "$api" ;;
    start-etcd) start_etcd; echo "$etcd" ;;
    *) echo "unknown command" ;;
  esac
done
shutdown
"#;

/// A user's client certificate and key (PEM), signed by the control plane's CA.
#[derive(Clone, Debug)]
pub struct ClientCert {
    /// User name (the certificate's CN).
    pub name: String,
    /// Groups (its O entries).
    pub groups: Vec<String>,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
}

/// A running etcd + kube-apiserver pair. Dropping it stops both and removes its directory.
pub struct ControlPlane {
    url: String,
    etcd_url: String,
    dir: PathBuf,
    ca_params: CertificateParams,
    ca_key_pem: String,
    ca_pem: String,
    admin: ClientCert,
    etcd_pid: AtomicU32,
    apiserver_pid: AtomicU32,
    started_in: Duration,
    supervisor: Mutex<Option<Supervisor>>,
}

/// The supervisor process, the pipe to its standard input (commands; closing it stops
/// everything) and its standard output (the answers).
struct Supervisor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .field("pids", &self.pids())
            .finish()
    }
}

/// Paths of the two binaries, or an error saying how to build them.
fn binaries() -> io::Result<(PathBuf, PathBuf)> {
    let dir = crate::tools::dir();
    let (etcd, api) = (dir.join("etcd"), dir.join("kube-apiserver"));
    for b in [&etcd, &api] {
        if !b.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} not found: build the control plane with `bash scripts/install-control-plane.sh` (or run the tests with `bash scripts/test.sh`)",
                    b.display()
                ),
            ));
        }
    }
    Ok((etcd, api))
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The CA's parameters (kept to sign more users later).
fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "testenv control plane CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(ca)
}

fn issuer(
    params: &CertificateParams,
    key_pem: &str,
) -> Result<Issuer<'static, KeyPair>, rcgen::Error> {
    Ok(Issuer::new(params.clone(), KeyPair::from_pem(key_pem)?))
}

fn client_cert(
    issuer: &Issuer<'_, KeyPair>,
    name: &str,
    groups: &[&str],
) -> Result<ClientCert, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, name);
    for g in groups {
        p.distinguished_name.push(DnType::OrganizationName, *g);
    }
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, issuer)?;
    Ok(ClientCert {
        name: name.to_string(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn write(path: &Path, text: &str) -> io::Result<()> {
    std::fs::write(path, text)
}

/// `exec BINARY ARGS…` as a script line (arguments single-quoted).
///
/// The server gets SIGKILL when its parent, the supervisor, dies (`setpriv --pdeathsig`, from
/// util-linux, where installed): a supervisor killed with SIGKILL cannot stop it otherwise.
fn exec_line(binary: &Path, args: &[String]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut command = quote(&binary.to_string_lossy());
    for a in args {
        command.push_str(" \\\n  ");
        command.push_str(&quote(a));
    }
    format!(
        "#!/bin/sh\nif command -v setpriv >/dev/null 2>&1; then\n  exec setpriv --pdeathsig KILL -- {command}\nfi\nexec {command}\n"
    )
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl ControlPlane {
    /// Starts a control plane of its own (for a test that changes cluster-wide objects).
    /// Blocks until kube-apiserver is ready; may be called inside or outside a tokio runtime.
    ///
    /// # Errors
    /// The binaries are missing (the message says how to build them), or no attempt came up
    /// ready (the message carries the last lines of both logs).
    pub fn start() -> io::Result<ControlPlane> {
        // The readiness probe runs on a runtime of its own, which cannot be nested in the
        // caller's: start on a plain thread.
        std::thread::spawn(Self::start_blocking)
            .join()
            .map_err(|_| other("control plane start-up panicked"))?
    }

    /// The control plane shared by the tests of this process, started on first use. Give each
    /// test a namespace of its own ([`ControlPlane::namespace`]).
    ///
    /// # Panics
    /// When it cannot start (see [`ControlPlane::start`]); every later call panics too.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        match SHARED.get_or_init(|| Self::start().map_err(|e| e.to_string())) {
            Ok(cp) => cp,
            Err(e) => panic!("the shared control plane did not start: {e}"),
        }
    }

    fn start_blocking() -> io::Result<ControlPlane> {
        let (etcd, api) = binaries()?;
        // The paths go into the servers' flags as text: a lossy conversion would send etcd to
        // another directory, outside the one that is removed.
        let tmp = std::env::temp_dir();
        if tmp.to_str().is_none() {
            return Err(other(format!(
                "the temporary directory {} is not UTF-8; set TMPDIR to one that is",
                tmp.display()
            )));
        }
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            match Self::attempt(&etcd, &api) {
                Ok(cp) => {
                    eprintln!(
                        "testenv control plane: ready in {:.1} s at {} (attempt {attempt}; etcd pid {}, kube-apiserver pid {}; RSS {} MiB)",
                        cp.started_in.as_secs_f64(),
                        cp.url,
                        cp.pids().0,
                        cp.pids().1,
                        cp.rss_kib() / 1024
                    );
                    return Ok(cp);
                }
                Err(e) => {
                    eprintln!("testenv control plane: attempt {attempt} failed: {e}");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn attempt(etcd: &Path, api: &Path) -> io::Result<ControlPlane> {
        let t0 = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("testenv-control-plane-")
            .tempdir()?
            .keep();
        // Until the supervisor owns the directory, remove it ourselves on failure.
        let cleanup = |e: io::Error| {
            let _ = std::fs::remove_dir_all(&dir);
            e
        };
        let ca = ca_params().map_err(other)?;
        let ca_key = KeyPair::generate().map_err(other)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(other)?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca.clone(), ca_key);
        let serving_key = KeyPair::generate().map_err(other)?;
        let mut serving =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).map_err(other)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.is_ca = IsCa::ExplicitNoCa;
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &issuer).map_err(other)?;
        let admin = client_cert(&issuer, "testenv-admin", &["system:masters"]).map_err(other)?;
        let sa_key = KeyPair::generate().map_err(other)?;

        let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
        (|| {
            write(&dir.join("ca.crt"), &ca_cert.pem())?;
            write(&dir.join("serving.crt"), &serving_cert.pem())?;
            write(&dir.join("serving.key"), &serving_key.serialize_pem())?;
            write(&dir.join("service-account.key"), &sa_key.serialize_pem())?;
            write(&dir.join("service-account.pub"), &sa_key.public_key_pem())
        })()
        .map_err(cleanup)?;

        let (client, peer, secure) =
            (|| Ok::<_, io::Error>((free_port()?, free_port()?, free_port()?)))()
                .map_err(cleanup)?;
        let etcd_url = format!("http://127.0.0.1:{client}");
        let url = format!("https://127.0.0.1:{secure}");
        let etcd_args = vec![
            format!("--name=testenv"),
            format!("--data-dir={}", p("etcd")),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=testenv=http://127.0.0.1:{peer}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ];
        let api_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={secure}"),
            format!("--cert-dir={}", p("cert-dir")),
            format!("--tls-cert-file={}", p("serving.crt")),
            format!("--tls-private-key-file={}", p("serving.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-issuer={url}"),
            format!("--service-account-key-file={}", p("service-account.pub")),
            format!(
                "--service-account-signing-key-file={}",
                p("service-account.key")
            ),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--authorization-mode=RBAC".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--endpoint-reconciler-type=none".into(),
            "--v=1".into(),
        ];
        use std::os::unix::fs::PermissionsExt;
        for (name, text) in [
            ("etcd.sh", exec_line(etcd, &etcd_args)),
            ("kube-apiserver.sh", exec_line(api, &api_args)),
        ] {
            let path = dir.join(name);
            write(&path, &text).map_err(cleanup)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(cleanup)?;
        }

        let mut child = Command::new("bash")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("testenv-control-plane")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(cleanup)?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        stdout.read_line(&mut first)?;
        let pids: Vec<u32> = first
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        let mut cp = ControlPlane {
            url,
            etcd_url,
            dir,
            ca_params: ca,
            ca_key_pem,
            ca_pem: ca_cert.pem(),
            admin,
            etcd_pid: AtomicU32::new(pids.first().copied().unwrap_or(0)),
            apiserver_pid: AtomicU32::new(pids.get(1).copied().unwrap_or(0)),
            started_in: Duration::ZERO,
            supervisor: Mutex::new(Some(Supervisor {
                child,
                stdin,
                stdout,
            })),
        };
        if pids.len() != 2 {
            return Err(other(format!("supervisor printed {first:?}, not two pids")));
        }
        // From here on, dropping `cp` stops everything.
        match cp.wait_ready() {
            Ok(()) => {
                cp.started_in = t0.elapsed();
                Ok(cp)
            }
            Err(e) => Err(other(format!(
                "{e}\n--- kube-apiserver.log (last lines)\n{}\n--- etcd.log (last lines)\n{}",
                tail(&cp.dir.join("kube-apiserver.log"), 15),
                tail(&cp.dir.join("etcd.log"), 10)
            ))),
        }
    }

    fn wait_ready(&self) -> io::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let client = self.http_client(&self.admin).map_err(other)?;
            let deadline = Instant::now() + READY_TIMEOUT;
            let mut last = String::from("no answer");
            while Instant::now() < deadline {
                if !self.running() {
                    return Err(other("kube-apiserver or etcd exited"));
                }
                match client.get(format!("{}/readyz", self.url)).send().await {
                    Ok(r) if r.status() == 200 => return Ok(()),
                    Ok(r) => last = format!("/readyz {}", r.status()),
                    Err(e) => last = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other(format!(
                "not ready within {} s ({last})",
                READY_TIMEOUT.as_secs()
            )))
        })
    }

    /// Whether both server processes are alive (not exited, not zombies).
    pub fn running(&self) -> bool {
        let (etcd, api) = self.pids();
        [etcd, api].iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
                .is_some_and(|state| !state.starts_with('Z') && !state.starts_with('X'))
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// etcd's client URL (`http://127.0.0.1:<port>`).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The CA certificate (PEM) of the serving certificate and of every client certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The directory the servers run in (logs: `etcd.log`, `kube-apiserver.log`). Removed when
    /// the control plane stops.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Process ids: (etcd, kube-apiserver).
    pub fn pids(&self) -> (u32, u32) {
        (
            self.etcd_pid.load(Ordering::Relaxed),
            self.apiserver_pid.load(Ordering::Relaxed),
        )
    }

    /// Process id of the supervisor (see the module docs).
    pub fn supervisor_pid(&self) -> Option<u32> {
        self.supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.child.id())
    }

    /// How long the successful start attempt took, to `/readyz` 200.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Resident memory of etcd plus kube-apiserver now, in KiB (from `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let (etcd, api) = self.pids();
        [etcd, api]
            .iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .sum()
    }

    /// The admin user (`testenv-admin` in `system:masters`).
    pub fn admin_cert(&self) -> &ClientCert {
        &self.admin
    }

    /// A client certificate for `name` in `groups`, signed by the control plane's CA.
    ///
    /// # Panics
    /// When rcgen cannot sign (it does not for valid UTF-8 names).
    pub fn user(&self, name: &str, groups: &[&str]) -> ClientCert {
        let issuer = issuer(&self.ca_params, &self.ca_key_pem).expect("CA key");
        client_cert(&issuer, name, groups).expect("client certificate")
    }

    /// A kubeconfig (YAML) for `user`, the CA and the client certificate embedded.
    pub fn kubeconfig(&self, user: &ClientCert) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: user\ncurrent-context: testenv\n",
            url = self.url,
            ca = b64(&self.ca_pem),
            cert = b64(&user.cert_pem),
            key = b64(&user.key_pem),
        )
    }

    /// A kubeconfig (YAML) that authenticates with a bearer `token` (a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        crate::server::kubeconfig_yaml_with_ca(
            &self.url,
            "testenv",
            Some(token),
            Some(&self.ca_pem),
        )
    }

    /// A reqwest client that trusts the control plane's CA and presents `user`'s certificate.
    ///
    /// # Errors
    /// reqwest refuses the PEM (it does not for certificates made here).
    pub fn http_client(&self, user: &ClientCert) -> reqwest::Result<reqwest::Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let identity =
            reqwest::Identity::from_pem(format!("{}{}", user.cert_pem, user.key_pem).as_bytes())?;
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?])
            .identity(identity)
            .timeout(Duration::from_secs(30))
            .build()
    }

    /// A new namespace name, unique in this process (`<prefix>-<pid>-<n>`); not created.
    pub fn unique_name(prefix: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Sends `command` to the supervisor and returns its one-line answer.
    fn command(&self, command: &str) -> io::Result<String> {
        let mut guard = self.supervisor.lock().unwrap_or_else(|e| e.into_inner());
        let s = guard
            .as_mut()
            .ok_or_else(|| other("the control plane is stopped"))?;
        writeln!(s.stdin, "{command}")?;
        s.stdin.flush()?;
        let mut answer = String::new();
        if s.stdout.read_line(&mut answer)? == 0 {
            return Err(other(format!(
                "the supervisor exited before answering {command}"
            )));
        }
        Ok(answer.trim().to_string())
    }

    fn kill_server(&self, command: &str) -> io::Result<()> {
        match self.command(command)?.as_str() {
            "killed" => Ok(()),
            answer => Err(other(format!("{command}: {answer:?}"))),
        }
    }

    fn start_server(&self, command: &str, pid: &AtomicU32) -> io::Result<Duration> {
        let t0 = Instant::now();
        let answer = self.command(command)?;
        let new = answer
            .parse()
            .map_err(|_| other(format!("{command}: {answer:?}")))?;
        pid.store(new, Ordering::Relaxed);
        // The readiness probe runs on a runtime of its own: on a plain thread, so that this
        // may be called from inside a runtime (`tokio::task::block_in_place`).
        std::thread::scope(|scope| scope.spawn(|| self.wait_ready()).join())
            .map_err(|_| other("readiness probe panicked"))??;
        Ok(t0.elapsed())
    }

    /// Kills kube-apiserver with SIGKILL, as a crash or the OOM killer would (no graceful
    /// shutdown: open watches and requests are cut), and returns once it is gone. etcd keeps
    /// running. Until [`ControlPlane::start_apiserver`], connections are refused.
    ///
    /// # Errors
    /// The control plane is stopped, or the supervisor does not answer.
    pub fn kill_apiserver(&self) -> io::Result<()> {
        self.kill_server("kill-apiserver")
    }

    /// Starts kube-apiserver again after [`ControlPlane::kill_apiserver`]: the same flags,
    /// so the same URL, certificates and etcd; every client and kubeconfig made before keeps
    /// working. Blocks until `/readyz` answers 200 (at most 60 s) and returns how long that
    /// took. In a tokio runtime, call it in `tokio::task::block_in_place`.
    ///
    /// # Errors
    /// The supervisor does not answer, or the server is not ready in time.
    pub fn start_apiserver(&self) -> io::Result<Duration> {
        self.start_server("start-apiserver", &self.apiserver_pid)
    }

    /// Kills etcd with SIGKILL and returns once it is gone; kube-apiserver keeps running and
    /// answers errors (and `/readyz` 500) until [`ControlPlane::start_etcd`]. The data
    /// directory stays: nothing committed is lost (`--unsafe-no-fsync` only risks what the
    /// kernel has not written when the machine itself stops).
    ///
    /// # Errors
    /// The control plane is stopped, or the supervisor does not answer.
    pub fn kill_etcd(&self) -> io::Result<()> {
        self.kill_server("kill-etcd")
    }

    /// Starts etcd again on the same ports and data directory after
    /// [`ControlPlane::kill_etcd`]; blocks until kube-apiserver's `/readyz` (which checks
    /// etcd) answers 200 (at most 60 s) and returns how long that took. In a tokio runtime,
    /// call it in `tokio::task::block_in_place`.
    ///
    /// # Errors
    /// The supervisor does not answer, or kube-apiserver is not ready in time.
    pub fn start_etcd(&self) -> io::Result<Duration> {
        self.start_server("start-etcd", &self.etcd_pid)
    }

    /// Stops both servers and removes the directory; waits for the supervisor (at most about
    /// 20 s). Called by `Drop`; idempotent.
    pub fn stop(&self) {
        let taken = self
            .supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(Supervisor {
            mut child,
            stdin,
            stdout,
        }) = taken
        {
            drop(stdin);
            drop(stdout);
            let _ = child.wait();
            // Gone already, unless the supervisor was killed before it could remove it.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A serving certificate for a webhook server on this machine (`tls.crt`, `tls.key` in
/// `dir`, as a mounted `kubernetes.io/tls` Secret holds them), for `127.0.0.1` and
/// `localhost`, signed by a CA of its own: kube-apiserver calls a webhook URL by IP, so the
/// certificate needs that IP SAN (envtest makes one the same way).
pub struct WebhookCerts {
    /// The directory with `tls.crt` and `tls.key`.
    pub dir: tempfile::TempDir,
    /// The CA (PEM): the webhook configurations' `caBundle`.
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl WebhookCerts {
    /// Generates them.
    ///
    /// # Panics
    /// When rcgen fails or the temporary directory cannot be written.
    pub fn generate() -> WebhookCerts {
        let ca = ca_params().expect("CA params");
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(ca, ca_key);
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = WebhookCerts {
            dir,
            ca_pem: ca_cert.pem(),
            issuer,
        };
        let (cert, key) = certs.reissue();
        std::fs::write(certs.dir.path().join("tls.crt"), cert).expect("tls.crt");
        std::fs::write(certs.dir.path().join("tls.key"), key).expect("tls.key");
        certs
    }

    /// A new serving certificate and key (PEM) for the same names, signed by the same CA: a
    /// renewal, as cert-manager writes it into the Secret (the `caBundle` stays valid).
    ///
    /// # Panics
    /// When rcgen fails.
    pub fn reissue(&self) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).expect("params");
        leaf.distinguished_name
            .push(DnType::CommonName, "webhook on 127.0.0.1");
        leaf.is_ca = IsCa::ExplicitNoCa;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf
            .signed_by(&key, &self.issuer)
            .expect("serving certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// What [`ControlPlane::install_kustomize`] did: `Kind namespace/name` of each object.
#[derive(Debug, Default, Clone)]
pub struct Installed {
    /// Applied (server-side apply), in order.
    pub applied: Vec<String>,
    /// Of a kind this server does not serve (a cert-manager Certificate, a Prometheus
    /// Operator ServiceMonitor, …): named here, not applied.
    pub skipped: Vec<String>,
}

/// Rewrites every webhook of a Validating/MutatingWebhookConfiguration document from
/// `clientConfig.service` to `clientConfig.url: https://<addr><path>` with `caBundle` set to
/// `ca_pem`, as envtest does; nothing else changes. Other documents are left alone.
pub fn point_webhooks_at(doc: &mut serde_json::Value, addr: std::net::SocketAddr, ca_pem: &str) {
    let kind = doc["kind"].as_str().unwrap_or_default();
    if kind != "ValidatingWebhookConfiguration" && kind != "MutatingWebhookConfiguration" {
        return;
    }
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
        let cc = &mut hook["clientConfig"];
        if let Some(service) = cc.get("service").cloned() {
            let path = service["path"].as_str().unwrap_or("/");
            *cc = serde_json::json!({"url": format!("https://{addr}{path}")});
        }
        cc["caBundle"] = serde_json::json!(bundle);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(feature = "kube")]
mod kube_support {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use kube::runtime::wait::{await_condition, conditions};

    impl ControlPlane {
        /// A `kube::Client` authenticating as `user`. Must be called inside a tokio runtime.
        ///
        /// # Panics
        /// When kube refuses the generated kubeconfig (it does not).
        pub async fn client(&self, user: &ClientCert) -> kube::Client {
            self.client_from_kubeconfig(&self.kubeconfig(user)).await
        }

        /// A `kube::Client` for the admin (`system:masters`).
        pub async fn admin(&self) -> kube::Client {
            self.client(&self.admin).await
        }

        /// A `kube::Client` from kubeconfig YAML.
        ///
        /// # Panics
        /// When the YAML is not a kubeconfig kube accepts.
        pub async fn client_from_kubeconfig(&self, yaml: &str) -> kube::Client {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .expect("kube config");
            kube::Client::try_from(config).expect("kube client")
        }

        /// Creates namespace `name` (as the admin); an existing one is fine.
        ///
        /// # Panics
        /// On any other API error.
        pub async fn create_namespace(&self, name: &str) {
            let api: Api<Namespace> = Api::all(self.admin().await);
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                    .expect("namespace");
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating namespace {name}: {e}"),
            }
        }

        /// A fresh namespace for one test (`<prefix>-<pid>-<n>`), created.
        pub async fn namespace(&self, prefix: &str) -> String {
            let name = Self::unique_name(prefix);
            self.create_namespace(&name).await;
            name
        }

        /// A token of ServiceAccount `namespace/name` (created, with its namespace, when
        /// missing), minted with the TokenRequest API, valid for an hour.
        ///
        /// # Panics
        /// On an API error.
        pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
            self.create_namespace(namespace).await;
            let client = self.admin().await;
            let sas: Api<ServiceAccount> = Api::namespaced(client, namespace);
            let sa: ServiceAccount =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                    .expect("service account");
            match sas.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("creating ServiceAccount {namespace}/{name}: {e}"),
            }
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let answer = sas
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"));
            answer
                .status
                .and_then(|s| s.token)
                .expect("TokenRequest answered a token")
        }

        /// Installs the CustomResourceDefinitions of `yaml` (one or more documents; other
        /// kinds are refused) with server-side apply as the admin, and waits until each is
        /// `Established` (at most 30 s each). Returns their names.
        ///
        /// # Errors
        /// A document is not a CRD, the server refuses one (its message), or one is not
        /// established in time.
        pub async fn install_crds(&self, yaml: &str) -> Result<Vec<String>, String> {
            let docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(yaml).map_err(|e| format!("CRD YAML: {e}"))?;
            let api: Api<CustomResourceDefinition> = Api::all(self.admin().await);
            let mut names = Vec::new();
            for doc in docs.into_iter().filter(|d| !d.is_null()) {
                if doc["kind"] != "CustomResourceDefinition" {
                    return Err(format!("not a CustomResourceDefinition: {}", doc["kind"]));
                }
                let name = doc["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                api.patch(
                    &name,
                    &PatchParams::apply("testenv").force(),
                    &Patch::Apply(&doc),
                )
                .await
                .map_err(|e| format!("installing CRD {name}: {e}"))?;
                names.push(name);
            }
            for name in &names {
                let established =
                    await_condition(api.clone(), name, conditions::is_crd_established());
                match tokio::time::timeout(Duration::from_secs(30), established).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(format!("waiting for CRD {name}: {e}")),
                    Err(_) => return Err(format!("CRD {name} not Established within 30 s")),
                }
            }
            Ok(names)
        }

        /// Installs a kustomize directory as envtest installs webhooks: `kubectl kustomize
        /// <dir>` built, every webhook pointed at `webhook` ([`point_webhooks_at`]), objects of
        /// kinds this server does not serve named in [`Installed::skipped`], the rest applied
        /// with server-side apply as the admin (Namespaces and CRDs first), then each CRD
        /// waited for until `Established`.
        ///
        /// # Errors
        /// kubectl is missing or fails, discovery fails, or the server refuses an object (its
        /// message, with the object named).
        pub async fn install_kustomize(
            &self,
            dir: &Path,
            webhook: std::net::SocketAddr,
            ca_pem: &str,
        ) -> Result<Installed, String> {
            let kubectl = crate::tools::require("kubectl", "install_kustomize");
            let out = Command::new(kubectl)
                .arg("kustomize")
                .arg(dir)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("kubectl kustomize: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "kubectl kustomize {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let mut docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(&text).map_err(|e| format!("kustomize output: {e}"))?;
            docs.retain(|d| !d.is_null());
            for d in &mut docs {
                point_webhooks_at(d, webhook, ca_pem);
            }
            let rank = |d: &serde_json::Value| match d["kind"].as_str() {
                Some("Namespace") => 0,
                Some("CustomResourceDefinition") => 1,
                _ => 2,
            };
            docs.sort_by_key(rank);
            let client = self.admin().await;
            let discovery = kube::discovery::Discovery::new(client.clone())
                .run()
                .await
                .map_err(|e| format!("discovery: {e}"))?;
            let mut installed = Installed::default();
            let mut crds = Vec::new();
            for d in &docs {
                let (api_version, kind) = (
                    d["apiVersion"].as_str().unwrap_or_default(),
                    d["kind"].as_str().unwrap_or_default(),
                );
                let name = d["metadata"]["name"].as_str().unwrap_or_default();
                let ns = d["metadata"]["namespace"].as_str();
                let label = format!(
                    "{kind} {}{name}",
                    ns.map(|n| format!("{n}/")).unwrap_or_default()
                );
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
                let Some((ar, caps)) = discovery.resolve_gvk(&gvk) else {
                    installed.skipped.push(label);
                    continue;
                };
                let api: Api<kube::api::DynamicObject> = match (caps.scope, ns) {
                    (kube::discovery::Scope::Namespaced, Some(n)) => {
                        Api::namespaced_with(client.clone(), n, &ar)
                    }
                    (kube::discovery::Scope::Namespaced, None) => {
                        Api::default_namespaced_with(client.clone(), &ar)
                    }
                    (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
                };
                api.patch(
                    name,
                    &PatchParams::apply("testenv").force(),
                    &Patch::Apply(d),
                )
                .await
                .map_err(|e| format!("applying {label}: {e}"))?;
                if kind == "CustomResourceDefinition" {
                    crds.push(name.to_string());
                }
                installed.applied.push(label);
            }
            let crd_api: Api<CustomResourceDefinition> = Api::all(client);
            for name in crds {
                let established =
                    await_condition(crd_api.clone(), &name, conditions::is_crd_established());
                tokio::time::timeout(Duration::from_secs(30), established)
                    .await
                    .map_err(|_| format!("CRD {name} not Established within 30 s"))?
                    .map_err(|e| format!("waiting for CRD {name}: {e}"))?;
            }
            Ok(installed)
        }
    }
}
