//! A real control plane for tests, as controller-runtime's envtest runs one: etcd and
//! kube-apiserver (built by `scripts/install-control-plane.sh`, found by
//! [`crate::tools::path`]) as child processes on free loopback ports, in a temporary directory
//! of their own; with [`Options::gardener`] also Gardener's gardener-apiserver, aggregated
//! behind kube-apiserver ([`crate::garden`]). How they are started and measured:
//! docs/control-plane.md, "Starting them" and "Gardener's API server".
//!
//! - **TLS and users**: one CA (throw-away, or [`Options::ca`]) signs the serving certificates
//!   and every user's client certificate (CN = user, O = groups): [`ControlPlane::admin`]
//!   (`system:masters`), [`ControlPlane::user`], [`ControlPlane::service_account_token`].
//!   Authorization is RBAC. kube-apiserver always has the aggregation layer's front-proxy
//!   client certificate (a CA of its own), which costs a key generation.
//! - **Lifetime**: the servers run under a `bash` supervisor whose standard input is a pipe from
//!   this process; when the pipe closes, however this process ends, the supervisor stops them
//!   and removes the directory. So no test leaves a process, a port or a directory behind, even
//!   from the static [`ControlPlane::shared`] instance, whose destructor never runs.
//! - **Faults**: [`ControlPlane::kill_apiserver`] / [`ControlPlane::kill_etcd`] /
//!   [`ControlPlane::kill_gardener`] SIGKILL one server; [`ControlPlane::start_apiserver`] /
//!   [`ControlPlane::start_etcd`] / [`ControlPlane::start_gardener`] start it again with the
//!   same ports, certificates and data, so clients made before reconnect to the same URL.
//! - **Start-up**: ports are taken free from the kernel and released, so one may be taken
//!   meanwhile: without `/readyz` = 200 (and, with Gardener, its APIs available) within 60 s
//!   the attempt is torn down and retried on new ports, three times at most.
//!
//! One shared control plane per test binary ([`ControlPlane::shared`], a namespace per test;
//! [`ControlPlane::shared_with_gardener`] with Gardener), and one of its own
//! ([`ControlPlane::start`], [`ControlPlane::start_with`]) for a test that changes what is
//! cluster-wide (webhook configurations, a different CRD) or kills a server.

use std::io::Write as _;
use std::io::{self, BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// How long one start attempt waits for `/readyz` (envtest's 20 s was too short on busy
/// runners; the measured start on 2 cores is about 2 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Start attempts before giving up.
const ATTEMPTS: u32 = 3;

/// The supervisor: starts etcd and kube-apiserver, prints their pids, then reads commands, one a
/// line, from its standard input until it closes (or until SIGINT, SIGHUP or SIGTERM, as from
/// Ctrl-C or a hangup of the test's terminal; bash runs the trap during `read`), then stops them
/// (gardener-apiserver first, then kube-apiserver, then etcd) and removes the directory. The
/// commands kill one server with SIGKILL and wait until it is gone (`kill-apiserver`,
/// `kill-etcd`, `kill-gardener`: answers `killed`) or start it (again) with the same script, so
/// on the same port, certificates and data directory (`start-apiserver`, `start-etcd`,
/// `start-gardener`: answers the new pid). gardener-apiserver is only started on command (once
/// kube-apiserver is ready, whose API it reads at start-up), and only where its script exists.
/// Every server is the supervisor's child, so it is stopped the same way.
const SUPERVISOR: &str = r#"set -u
dir=$1
gapi=
start_etcd() { "$dir/etcd.sh" </dev/null >>"$dir/etcd.log" 2>&1 & etcd=$!; }
start_api() { "$dir/kube-apiserver.sh" </dev/null >>"$dir/kube-apiserver.log" 2>&1 & api=$!; }
start_gapi() { "$dir/gardener-apiserver.sh" </dev/null >>"$dir/gardener-apiserver.log" 2>&1 & gapi=$!; }
stop() {
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
shutdown() {
  trap '' INT HUP TERM
  stop "$gapi"
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
    kill-gardener)
      if [ -n "$gapi" ]; then kill -KILL "$gapi" 2>/dev/null; wait "$gapi" 2>/dev/null; fi
      echo killed ;;
    start-apiserver) start_api; echo "$api" ;;
    start-etcd) start_etcd; echo "$etcd" ;;
    start-gardener)
      if [ -x "$dir/gardener-apiserver.sh" ]; then start_gapi; echo "$gapi"; else echo "no gardener-apiserver"; fi ;;
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

/// What [`ControlPlane::start_with`] starts besides etcd and kube-apiserver.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Also start gardener-apiserver (built by `scripts/install-control-plane.sh`), aggregated
    /// behind kube-apiserver: [`ControlPlane::start_with`] returns once every Gardener group
    /// version ([`crate::garden::GROUP_VERSIONS`]) is `Available` and listable.
    pub gardener: bool,
    /// The control plane's single CA (serving and client certificates) instead of a new one:
    /// for a simulated runtime cluster whose client CA is the Shoot's `<shoot>.ca-client`.
    pub ca: Option<RsaCa>,
}

/// An RSA CA (2048 bits), self-signed by rcgen, its key in the two encodings the tests need:
/// PKCS#1 (`RSA PRIVATE KEY`), the only one Gardener decodes in a Shoot's `<shoot>.ca-client`
/// secret (`ca.key`), and PKCS#8 (`PRIVATE KEY`), which rcgen signs with.
///
/// rcgen with ring cannot generate RSA keys, so [`RsaCa::generate`] has openssl (a prerequisite
/// of the tests) make the key. The CA keeps the parameters it was signed with: rcgen here
/// cannot read a certificate back, and an issued certificate's issuer name must equal the CA's
/// subject byte for byte.
#[derive(Clone)]
pub struct RsaCa {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// Its key, PEM, PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`).
    pub key_pkcs1_pem: String,
    /// The same key, PEM, PKCS#8 (`-----BEGIN PRIVATE KEY-----`).
    pub key_pkcs8_pem: String,
    params: CertificateParams,
}

impl std::fmt::Debug for RsaCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("RsaCa").finish_non_exhaustive()
    }
}

/// Runs `openssl ARGS` with `input` on its standard input; its standard output.
fn openssl(args: &[&str], input: &str) -> io::Result<String> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            other(format!(
                "openssl (a prerequisite of the tests) did not start: {e}"
            ))
        })?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| other("writing to openssl panicked"))??;
    if !out.status.success() {
        return Err(other(format!(
            "openssl {}: {}: {}",
            args.first().copied().unwrap_or_default(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    String::from_utf8(out.stdout).map_err(|_| other("openssl wrote no UTF-8 PEM"))
}

impl RsaCa {
    /// A new CA named `common_name`: `openssl genrsa -traditional 2048` makes the key (PKCS#1),
    /// `openssl pkcs8 -topk8 -nocrypt` re-encodes it (PKCS#8), rcgen self-signs the
    /// certificate (SHA-256 with RSA). The key passes through pipes only.
    ///
    /// # Errors
    /// openssl is missing or fails (its message), or rcgen refuses the key.
    pub fn generate(common_name: &str) -> io::Result<RsaCa> {
        let key_pkcs1_pem = openssl(&["genrsa", "-traditional", "2048"], "")?;
        if !key_pkcs1_pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
            return Err(other("openssl genrsa -traditional wrote no PKCS#1 key"));
        }
        let key_pkcs8_pem = openssl(&["pkcs8", "-topk8", "-nocrypt"], &key_pkcs1_pem)?;
        let key = KeyPair::from_pem(&key_pkcs8_pem).map_err(other)?;
        let mut params = ca_params().map_err(other)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.self_signed(&key).map_err(other)?;
        Ok(RsaCa {
            cert_pem: cert.pem(),
            key_pkcs1_pem,
            key_pkcs8_pem,
            params,
        })
    }

    /// A client certificate for `name` in `groups` signed by this CA (an ECDSA key).
    ///
    /// # Errors
    /// rcgen refuses (it does not for keys made by [`RsaCa::generate`]).
    pub fn client_cert(&self, name: &str, groups: &[&str]) -> io::Result<ClientCert> {
        let issuer = issuer(&self.params, &self.key_pkcs8_pem).map_err(other)?;
        client_cert(&issuer, name, groups).map_err(other)
    }
}

/// A running etcd + kube-apiserver pair (and gardener-apiserver with [`Options::gardener`]).
/// Dropping it stops them all and removes its directory.
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
    /// gardener-apiserver's `https://127.0.0.1:<port>`, with [`Options::gardener`].
    gardener_url: Option<String>,
    /// 0 until gardener-apiserver is started.
    gardener_pid: AtomicU32,
    started_in: Duration,
    /// From kube-apiserver ready to Gardener's APIs available, at start-up.
    gardener_ready_in: Duration,
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

/// Paths of the binaries (etcd, kube-apiserver, and gardener-apiserver when `gardener`), or
/// an error saying how to build them. etcd and kube-apiserver are those of the Kubernetes minor
/// `$KIM_KUBERNETES` selects ([`crate::tools::path`]); gardener-apiserver is one for every minor.
fn binaries(gardener: bool) -> io::Result<Vec<PathBuf>> {
    let mut names = vec!["etcd", "kube-apiserver"];
    if gardener {
        names.push("gardener-apiserver");
    }
    let mut paths = Vec::with_capacity(names.len());
    for name in names {
        let b = crate::tools::path(name)?;
        if !b.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} not found: build the control plane with `{}` (or run the tests with `bash scripts/test.sh`)",
                    b.display(),
                    crate::tools::install_hint(name)
                ),
            ));
        }
        paths.push(b);
    }
    Ok(paths)
}

/// A loopback port free now (the kernel's pick, released at once: it may be taken meanwhile).
pub(crate) fn free_port() -> io::Result<u16> {
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

/// The user (CN) of kube-apiserver's front-proxy client certificate, the only name
/// aggregated API servers accept `X-Remote-*` headers from (`--requestheader-allowed-names`).
const FRONT_PROXY_USER: &str = "front-proxy";

/// DNS names of gardener-apiserver's serving certificate besides `127.0.0.1` and `localhost`:
/// kube-apiserver verifies an aggregated server as `<service>.<namespace>.svc`
/// ([`crate::garden`] names its Service `gardener-apiserver` in `kube-system`).
const GARDENER_DNS_NAMES: &[&str] = &[
    "gardener-apiserver.kube-system.svc",
    "gardener-apiserver.kube-system.svc.cluster.local",
];

/// A serving certificate and key (PEM) named `common_name`, for `127.0.0.1`, `localhost` and
/// `dns_names`.
fn serving_cert(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    dns_names: &[&str],
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    names.extend(dns_names.iter().map(|n| n.to_string()));
    let mut serving = CertificateParams::new(names)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, common_name);
    serving.is_ca = IsCa::ExplicitNoCa;
    serving.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = serving.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A kubeconfig (YAML) for `url` trusting `ca_pem`, authenticating with `user`'s certificate.
fn kubeconfig_yaml(url: &str, ca_pem: &str, user: &ClientCert) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    kubeconfig(
        url,
        ca_pem,
        serde_json::json!({
            "client-certificate-data": b64(&user.cert_pem),
            "client-key-data": b64(&user.key_pem),
        }),
    )
}

/// A kubeconfig of one cluster (`url`, trusting `ca_pem`) and one user (its `user` entry),
/// written as JSON: every kubeconfig reader (client-go, kube-rs, kubectl) takes it, JSON being
/// YAML.
fn kubeconfig(url: &str, ca_pem: &str, user: serde_json::Value) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": {
            "server": url, "certificate-authority-data": ca}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": "user"}}],
        "current-context": "testenv",
    }))
    .expect("a kubeconfig serializes")
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

/// Whether process `pid` is alive (not exited, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|state| !state.starts_with('Z') && !state.starts_with('X'))
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
        Self::start_with(Options::default())
    }

    /// Starts a control plane of its own with [`Options`]: with `gardener`, gardener-apiserver
    /// too, aggregated behind kube-apiserver ([`crate::garden`]); with `ca`, every certificate
    /// signed by that CA. Blocks until kube-apiserver is ready (and every Gardener API is
    /// available and listable); may be called inside or outside a tokio runtime.
    ///
    /// # Errors
    /// As [`ControlPlane::start`]; with `gardener`, also when Gardener's APIs do not come up
    /// (the message carries the last lines of its log).
    pub fn start_with(options: Options) -> io::Result<ControlPlane> {
        // The readiness probe runs on a runtime of its own, which cannot be nested in the
        // caller's: start on a plain thread.
        std::thread::spawn(move || Self::start_blocking(&options))
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

    /// The control plane with gardener-apiserver ([`Options::gardener`]) shared by the tests of
    /// this process, started on first use; separate from [`ControlPlane::shared`], which stays
    /// as quick to start as before. Give each test Gardener objects of its own (Shoot names
    /// unique in the project).
    ///
    /// # Panics
    /// When it cannot start (see [`ControlPlane::start_with`]); every later call panics too.
    pub fn shared_with_gardener() -> &'static ControlPlane {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        let started = SHARED.get_or_init(|| {
            Self::start_with(Options {
                gardener: true,
                ca: None,
            })
            .map_err(|e| e.to_string())
        });
        match started {
            Ok(cp) => cp,
            Err(e) => panic!("the shared control plane with Gardener did not start: {e}"),
        }
    }

    fn start_blocking(options: &Options) -> io::Result<ControlPlane> {
        let binaries = binaries(options.gardener)?;
        let kubernetes = crate::tools::kubernetes()?;
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
            match Self::attempt(&binaries, options) {
                Ok(cp) => {
                    let gardener = match cp.gardener_pid() {
                        Some(pid) => format!(
                            ", gardener-apiserver pid {pid}, its APIs available {:.1} s after kube-apiserver",
                            cp.gardener_ready_in.as_secs_f64()
                        ),
                        None => String::new(),
                    };
                    let rss: Vec<String> = cp
                        .rss_by_process()
                        .iter()
                        .map(|(name, kib)| format!("{name} {}", kib / 1024))
                        .collect();
                    eprintln!(
                        "testenv control plane: Kubernetes {kubernetes} ready in {:.1} s at {} (attempt {attempt}; etcd pid {}, kube-apiserver pid {}{gardener}; RSS {} MiB: {})",
                        cp.started_in.as_secs_f64(),
                        cp.url,
                        cp.pids().0,
                        cp.pids().1,
                        cp.rss_kib() / 1024,
                        rss.join(", ")
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

    /// One start attempt: certificates, scripts, the supervisor, then the readiness waits.
    /// `binaries`: etcd, kube-apiserver and, with [`Options::gardener`], gardener-apiserver.
    fn attempt(binaries: &[PathBuf], options: &Options) -> io::Result<ControlPlane> {
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
        let (ca, ca_key_pem, ca_pem) = match &options.ca {
            Some(given) => (
                given.params.clone(),
                given.key_pkcs8_pem.clone(),
                given.cert_pem.clone(),
            ),
            None => {
                let ca = ca_params().map_err(other)?;
                let ca_key = KeyPair::generate().map_err(other)?;
                let ca_cert = ca.self_signed(&ca_key).map_err(other)?;
                (ca, ca_key.serialize_pem(), ca_cert.pem())
            }
        };
        let issuer = issuer(&ca, &ca_key_pem).map_err(other)?;
        let (api_cert, api_key) = serving_cert(&issuer, "kube-apiserver", &[]).map_err(other)?;
        let admin = client_cert(&issuer, "testenv-admin", &["system:masters"]).map_err(other)?;
        let sa_key = KeyPair::generate().map_err(other)?;
        // The aggregation layer's front proxy: kube-apiserver forwards the authenticated user
        // to aggregated API servers (gardener-apiserver) with this client certificate and
        // `X-Remote-*` headers, which they trust for the `front-proxy` name under this CA only.
        // A few milliseconds of key generation, so always made.
        let proxy_ca = ca_params().map_err(other)?;
        let proxy_ca_key = KeyPair::generate().map_err(other)?;
        let proxy_ca_cert = proxy_ca.self_signed(&proxy_ca_key).map_err(other)?;
        let proxy_client = client_cert(&Issuer::new(proxy_ca, proxy_ca_key), FRONT_PROXY_USER, &[])
            .map_err(other)?;

        let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
        (|| {
            std::fs::write(dir.join("ca.crt"), &ca_pem)?;
            std::fs::write(dir.join("serving.crt"), &api_cert)?;
            std::fs::write(dir.join("serving.key"), &api_key)?;
            std::fs::write(dir.join("service-account.key"), sa_key.serialize_pem())?;
            std::fs::write(dir.join("service-account.pub"), sa_key.public_key_pem())?;
            std::fs::write(dir.join("proxy-ca.crt"), proxy_ca_cert.pem())?;
            std::fs::write(dir.join("proxy-client.crt"), &proxy_client.cert_pem)?;
            std::fs::write(dir.join("proxy-client.key"), &proxy_client.key_pem)
        })()
        .map_err(cleanup)?;

        let (client, peer, secure, gardener_port) =
            (|| Ok::<_, io::Error>((free_port()?, free_port()?, free_port()?, free_port()?)))()
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
            format!("--requestheader-client-ca-file={}", p("proxy-ca.crt")),
            format!("--requestheader-allowed-names={FRONT_PROXY_USER}"),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!("--proxy-client-cert-file={}", p("proxy-client.crt")),
            format!("--proxy-client-key-file={}", p("proxy-client.key")),
            "--v=1".into(),
        ];
        let mut scripts = vec![
            ("etcd.sh", exec_line(&binaries[0], &etcd_args)),
            ("kube-apiserver.sh", exec_line(&binaries[1], &api_args)),
        ];
        let gardener_url = match binaries.get(2) {
            Some(gardener) => {
                let (cert, key) = serving_cert(&issuer, "gardener-apiserver", GARDENER_DNS_NAMES)
                    .map_err(other)?;
                // Its own user (as in Gardener's envtest), a cluster admin: it reads and
                // watches Namespaces, Secrets and more, and reviews access (delegated
                // authentication and authorization).
                let user = client_cert(&issuer, "gardener-apiserver", &["system:masters"])
                    .map_err(other)?;
                let kubeconfig = kubeconfig_yaml(&url, &ca_pem, &user);
                (|| {
                    std::fs::write(dir.join("gardener-apiserver.crt"), &cert)?;
                    std::fs::write(dir.join("gardener-apiserver.key"), &key)?;
                    std::fs::write(dir.join("gardener-apiserver.kubeconfig"), &kubeconfig)
                })()
                .map_err(cleanup)?;
                let args = vec![
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={gardener_port}"),
                    format!("--etcd-servers={etcd_url}"),
                    // Its own keys in kube-apiserver's etcd (Gardener's default, said aloud).
                    "--etcd-prefix=/registry-gardener".into(),
                    format!("--tls-cert-file={}", p("gardener-apiserver.crt")),
                    format!("--tls-private-key-file={}", p("gardener-apiserver.key")),
                    "--cluster-identity=testenv".into(),
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez".into(),
                    format!("--kubeconfig={}", p("gardener-apiserver.kubeconfig")),
                    format!(
                        "--authentication-kubeconfig={}",
                        p("gardener-apiserver.kubeconfig")
                    ),
                    format!(
                        "--authorization-kubeconfig={}",
                        p("gardener-apiserver.kubeconfig")
                    ),
                ];
                scripts.push(("gardener-apiserver.sh", exec_line(gardener, &args)));
                Some(format!("https://127.0.0.1:{gardener_port}"))
            }
            None => None,
        };
        use std::os::unix::fs::PermissionsExt;
        for (name, text) in scripts {
            let path = dir.join(name);
            std::fs::write(&path, &text).map_err(cleanup)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(cleanup)?;
        }

        // A shell cannot trap a signal it was started with ignored, and a test run started in
        // the background of a non-interactive shell (`nohup cargo test &`, some CI runners)
        // ignores SIGINT: coreutils' `env` resets the three the supervisor traps.
        let mut child = Command::new("env")
            .arg("--default-signal=HUP,INT,TERM")
            .arg("bash")
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
            ca_pem,
            admin,
            etcd_pid: AtomicU32::new(pids.first().copied().unwrap_or(0)),
            apiserver_pid: AtomicU32::new(pids.get(1).copied().unwrap_or(0)),
            gardener_url,
            gardener_pid: AtomicU32::new(0),
            started_in: Duration::ZERO,
            gardener_ready_in: Duration::ZERO,
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
        if let Err(e) = cp.wait_ready() {
            return Err(other(format!(
                "{e}\n--- kube-apiserver.log (last lines)\n{}\n--- etcd.log (last lines)\n{}",
                tail(&cp.dir.join("kube-apiserver.log"), 15),
                tail(&cp.dir.join("etcd.log"), 10)
            )));
        }
        if cp.gardener_url.is_some() {
            cp.gardener_ready_in = cp.start_gardener()?;
        }
        cp.started_in = t0.elapsed();
        Ok(cp)
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
                let (etcd, api) = self.pids();
                if !alive(etcd) || !alive(api) {
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

    /// Whether every server process is alive (not exited, not zombies): etcd, kube-apiserver
    /// and, once started, gardener-apiserver.
    pub fn running(&self) -> bool {
        self.server_pids().iter().all(|(_, pid)| alive(*pid))
    }

    /// (name, pid) of each server process: `etcd`, `kube-apiserver` and, once started,
    /// `gardener-apiserver`.
    fn server_pids(&self) -> Vec<(&'static str, u32)> {
        let (etcd, api) = self.pids();
        let mut pids = vec![("etcd", etcd), ("kube-apiserver", api)];
        if let Some(pid) = self.gardener_pid() {
            pids.push(("gardener-apiserver", pid));
        }
        pids
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

    /// Resident memory of all server processes now (etcd, kube-apiserver, gardener-apiserver
    /// when started), in KiB (from `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        self.rss_by_process().iter().map(|(_, kib)| kib).sum()
    }

    /// Resident memory of each server process now, in KiB: (`etcd` | `kube-apiserver` |
    /// `gardener-apiserver`, KiB); a process that is gone counts 0.
    fn rss_by_process(&self) -> Vec<(&'static str, u64)> {
        self.server_pids()
            .into_iter()
            .map(|(name, pid)| {
                let kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find_map(|l| l.strip_prefix("VmRSS:"))
                            .and_then(|v| {
                                v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
                            })
                    })
                    .unwrap_or(0);
                (name, kib)
            })
            .collect()
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
        kubeconfig_yaml(&self.url, &self.ca_pem, user)
    }

    /// A kubeconfig (YAML) that authenticates with a bearer `token` (a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        kubeconfig(&self.url, &self.ca_pem, serde_json::json!({"token": token}))
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

    /// Sends start `command`, stores the new `pid` and waits with `ready`.
    fn start_server(
        &self,
        command: &str,
        pid: &AtomicU32,
        ready: impl Fn() -> io::Result<()> + Send + Sync,
    ) -> io::Result<Duration> {
        let t0 = Instant::now();
        let answer = self.command(command)?;
        let new = answer
            .parse()
            .map_err(|_| other(format!("{command}: {answer:?}")))?;
        pid.store(new, Ordering::Relaxed);
        // The readiness probe runs on a runtime of its own: on a plain thread, so that this
        // may be called from inside a runtime (`tokio::task::block_in_place`).
        std::thread::scope(|scope| scope.spawn(ready).join())
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
        self.start_server("start-apiserver", &self.apiserver_pid, || self.wait_ready())
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
        self.start_server("start-etcd", &self.etcd_pid, || self.wait_ready())
    }

    /// gardener-apiserver's URL (`https://127.0.0.1:<port>`, its serving certificate signed by
    /// [`ControlPlane::ca_pem`]); `None` without [`Options::gardener`]. Clients reach its APIs
    /// through kube-apiserver ([`ControlPlane::url`]) as usual.
    pub fn gardener_url(&self) -> Option<&str> {
        self.gardener_url.as_deref()
    }

    /// Process id of gardener-apiserver, once started.
    pub fn gardener_pid(&self) -> Option<u32> {
        match self.gardener_pid.load(Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// Kills gardener-apiserver with SIGKILL and returns once it is gone; kube-apiserver and
    /// etcd keep running, and requests to Gardener's APIs fail (503) until
    /// [`ControlPlane::start_gardener`].
    ///
    /// # Errors
    /// The control plane has no gardener-apiserver, is stopped, or the supervisor does not
    /// answer.
    pub fn kill_gardener(&self) -> io::Result<()> {
        if self.gardener_url.is_none() {
            return Err(other("this control plane runs no gardener-apiserver"));
        }
        self.kill_server("kill-gardener")
    }

    /// Starts gardener-apiserver (again, after [`ControlPlane::kill_gardener`]) with the same
    /// flags, so the same port, certificates and etcd data. Blocks until its Service and one
    /// `APIService` per Gardener group version are in place ([`crate::garden`]), every one is
    /// `Available` and each group version lists through kube-apiserver (at most 60 s), and
    /// returns how long that took. In a tokio runtime, call it in
    /// `tokio::task::block_in_place`.
    ///
    /// # Errors
    /// The control plane has no gardener-apiserver, the supervisor does not answer, or the APIs
    /// do not come up in time (the message carries the last lines of its log).
    pub fn start_gardener(&self) -> io::Result<Duration> {
        if self.gardener_url.is_none() {
            return Err(other("this control plane runs no gardener-apiserver"));
        }
        // Registers its APIs and waits for them ([`crate::garden`]), on a runtime of its own.
        self.start_server("start-gardener", &self.gardener_pid, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(crate::garden::register(self, READY_TIMEOUT))
                .map_err(|e| {
                    other(format!(
                        "{e}\n--- gardener-apiserver.log (last lines)\n{}",
                        tail(&self.dir.join("gardener-apiserver.log"), 20)
                    ))
                })
        })
    }

    /// Stops every server and removes the directory; waits for the supervisor (at most about
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

    /// A `kube::Client` for the admin that answers 503, 429 and 504 as they come. kube's
    /// clients retry those by default (kube 5 `Config::default_retry`: 15 times with
    /// backoff up to 1000 s, minutes in all), so a test that expects a 503 (an aggregated
    /// API server down) or a probe with a deadline of its own uses this one.
    pub async fn admin_without_retries(&self) -> kube::Client {
        self.client_with_retries(&self.kubeconfig(&self.admin), false)
            .await
    }

    /// A `kube::Client` from kubeconfig YAML.
    ///
    /// # Panics
    /// When the YAML is not a kubeconfig kube accepts.
    pub async fn client_from_kubeconfig(&self, yaml: &str) -> kube::Client {
        self.client_with_retries(yaml, true).await
    }

    async fn client_with_retries(&self, yaml: &str, retry: bool) -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kc = kube::config::Kubeconfig::from_yaml(yaml).expect("kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kube config");
        config.default_retry = retry;
        kube::Client::try_from(config).expect("kube client")
    }

    /// Creates namespace `name` (as the admin); an existing one is fine.
    ///
    /// # Panics
    /// On any other API error.
    pub async fn create_namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.admin().await);
        create_or_keep(&api, serde_json::json!({"metadata": {"name": name}}))
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    }

    /// A fresh namespace for one test (`<prefix>-<pid>-<n>`), created.
    pub async fn namespace(&self, prefix: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
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
        create_or_keep(&sas, serde_json::json!({"metadata": {"name": name}}))
            .await
            .unwrap_or_else(|e| panic!("creating ServiceAccount {namespace}/{name}: {e}"));
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
        wait_established(&api, &names).await?;
        Ok(names)
    }

    /// Installs a kustomize directory as envtest installs webhooks: the output of
    /// `kubectl kustomize DIR`, every webhook pointed at `webhook` ([`point_webhooks_at`]), objects of
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
        for d in &mut docs {
            let (label, applied) = apply_served(&client, &discovery, d, None).await?;
            if !applied {
                installed.skipped.push(label);
                continue;
            }
            if d["kind"] == "CustomResourceDefinition" {
                crds.push(
                    d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
            installed.applied.push(label);
        }
        wait_established(&Api::all(client), &crds).await?;
        Ok(installed)
    }
}

/// Applies `doc` (server-side apply as `testenv`) as the kind `discovery` resolves it to, a
/// namespaced one in `namespace` (written into `doc`), else in `doc`'s, else in `default`.
/// Returns `Kind [namespace/]name` and whether the server serves the kind (else nothing is sent).
pub(crate) async fn apply_served(
    client: &kube::Client,
    discovery: &kube::discovery::Discovery,
    doc: &mut serde_json::Value,
    namespace: Option<&str>,
) -> Result<(String, bool), String> {
    use kube::discovery::Scope;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let label = |d: &serde_json::Value| match d["metadata"]["namespace"].as_str() {
        Some(n) => format!("{} {n}/{}", text(&d["kind"]), text(&d["metadata"]["name"])),
        None => format!("{} {}", text(&d["kind"]), text(&d["metadata"]["name"])),
    };
    let (api_version, kind) = (text(&doc["apiVersion"]), text(&doc["kind"]));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
    let Some((ar, caps)) = discovery.resolve_gvk(&gvk) else {
        return Ok((label(doc), false));
    };
    let client = client.clone();
    let api: Api<kube::api::DynamicObject> = match (caps.scope, namespace) {
        (Scope::Cluster, _) => Api::all_with(client, &ar),
        (Scope::Namespaced, Some(n)) => {
            doc["metadata"]["namespace"] = n.into();
            Api::namespaced_with(client, n, &ar)
        }
        (Scope::Namespaced, None) => match doc["metadata"]["namespace"].as_str() {
            Some(n) => Api::namespaced_with(client, n, &ar),
            None => Api::default_namespaced_with(client, &ar),
        },
    };
    let apply = PatchParams::apply("testenv").force();
    let name = text(&doc["metadata"]["name"]);
    let applied = api.patch(&name, &apply, &Patch::Apply(&*doc)).await;
    applied.map_err(|e| format!("applying {}: {e}", label(doc)))?;
    Ok((label(doc), true))
}

/// Creates `object` with `api`; one that exists already (409) is kept as it is.
pub(crate) async fn create_or_keep<K>(api: &Api<K>, object: serde_json::Value) -> kube::Result<()>
where
    K: Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize,
{
    let object: K = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Waits until each CRD of `names` is `Established` (at most 30 s each).
async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    names: &[String],
) -> Result<(), String> {
    for name in names {
        let established = await_condition(api.clone(), name, conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .map_err(|_| format!("CRD {name} not Established within 30 s"))?
            .map_err(|e| format!("waiting for CRD {name}: {e}"))?;
    }
    Ok(())
}
