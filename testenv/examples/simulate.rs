//! SIMULATION of kim's whole chain on one machine, with one command:
//!
//! ```sh
//! cargo run -p testenv --example simulate                     # in-memory control cluster
//! cargo run -p testenv --example simulate -- --real-apiserver # etcd + kube-apiserver
//! ```
//!
//! Starts a control cluster, a Gardener and runtime clusters (by mode, below), runs the real
//! `kim webhook` and `kim controller` binaries against them, creates the sample Runtimes of `samples/runtimes` (or the directory
//! given as argument), prints each Runtime's status as it changes, tries two illegal status
//! writes (both denied), deletes the Runtimes and prints a summary. Nothing real is touched: no
//! cluster, no Gardener, no cloud account; everything listens on 127.0.0.1 and is gone at exit.
//!
//! The clusters, by mode:
//! - **default**: testenv's in-memory API servers: the control cluster, a Gardener cluster
//!   driven by testenv's simulated Gardener, one runtime cluster per Shoot. A CA and a serving certificate made with
//!   `certs/gen-certs.sh` (needs `bash` and `openssl`) for a temporary copy of `manifests/`;
//!   every `runtimes/status` write goes through testenv's [`WebhookStage`], which calls the
//!   webhooks over HTTPS as kube-apiserver would (the configurations of the static-ca
//!   overlay). The controller and the rogue client authenticate with the server's static
//!   tokens; status changes are read from the server's journal of committed changes.
//! - **`--real-apiserver`**: etcd + kube-apiserver from [`testenv::controlplane`] (built by
//!   `scripts/install-control-plane.sh`; kubectl from `scripts/install-tools.sh` builds the
//!   manifests), with the real Gardener API: gardener-apiserver aggregated behind the same
//!   kube-apiserver ([`testenv::garden`], its fixtures: project `kyma-dev`, CloudProfiles,
//!   credentials; the samples' binding becomes the fixtures' `hyperscaler-<provider>`), a
//!   simulated gardenlet ([`testenv::gardenlet`]) and a pool of two real runtime clusters
//!   (kube-apiserver + etcd) that kim reaches with the real `shoots/adminkubeconfig`; the
//!   controller's `--gardener-kubeconfig` is the admin's. kim is installed as a user installs it: namespace `kcp-system`,
//!   `manifests/crd.yaml`, then `manifests/base` (kubectl kustomize) with its webhook
//!   configurations pointed at the `kim webhook` process, which serves a certificate for
//!   127.0.0.1; kube-apiserver itself calls the webhooks. The controller authenticates as
//!   ServiceAccount `kim-system/kim-controller` with a TokenRequest token and nothing but the
//!   shipped RBAC; the rogue client is user `rogue` (a client certificate) whom the example
//!   grants `patch` on `runtimes/status` in `kcp-system`, so that its write reaches the webhook.
//!   Status changes are read from a watch of the Runtimes, the denials from kube-apiserver's
//!   answers.
//!
//! The `kim` binary: `KIM_BIN` if set, else `cargo build --bin kim` of this workspace (same
//! profile as the example), located through cargo's JSON messages (so `CARGO_TARGET_DIR` and
//! `--release` work). The processes' logs go to a temporary directory, removed at every exit
//! (success, failure, panic, Ctrl-C, SIGTERM or SIGHUP), as is the real control plane; on a
//! failure the logs' last lines are printed on stderr first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::error::Error;
use std::future::Future;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use testenv::controlplane::{ControlPlane, Options, WebhookCerts};
use testenv::gardener::{GardenerConfig, GardenerSim};
use testenv::gardenlet::{Clusters, Gardenlet, GardenletConfig};
use testenv::webhook_stage::StageResult;
use testenv::{
    AdmissionDecision, EventType, Gvr, ServerConfig, ServerHandle, UserInfo, WebhookConfigurations,
    WebhookStage,
};

type Res<T> = Result<T, Box<dyn Error>>;

const NS: &str = "kcp-system";
const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";
/// The controller's ServiceAccount (namespace, name), as `manifests/base` creates it.
const CONTROLLER_SA: (&str, &str) = ("kim-system", "kim-controller");
const CONTROLLER_TOKEN: &str = "kim-controller-token";
const ROGUE_USER: &str = "system:serviceaccount:other:rogue";
const ROGUE_TOKEN: &str = "rogue-token";
/// The rogue client of `--real-apiserver`: a client-certificate user.
const REAL_ROGUE_USER: &str = "rogue";
/// The Role (and RoleBinding) letting [`REAL_ROGUE_USER`] patch `runtimes/status`.
const ROGUE_ROLE: &str = "rogue-status-patcher";
/// The validating webhook of `manifests/base/webhook-configurations.yaml`.
const VALIDATE_HOOK: &str = "runtime-status.validate.kim.kyma-project.io";
/// The Runtime whose status writes wait for the real apiserver's webhooks to take effect.
const PROBE: &str = "webhook-ready-probe";
const GROUP: &str = "infrastructuremanager.kyma-project.io";
const DEADLINE: Duration = Duration::from_secs(180);

/// Which control cluster kim runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// testenv's in-memory API server, admission through a [`WebhookStage`].
    InMemory,
    /// etcd + kube-apiserver ([`testenv::controlplane`]) with gardener-apiserver, kim's
    /// manifests installed, the simulated gardenlet and real runtime clusters.
    RealApiserver,
}

/// The command line: `[--real-apiserver] [SAMPLES_DIR]`.
fn parse_args() -> Res<(Mode, Option<PathBuf>)> {
    let mut mode = Mode::InMemory;
    let mut samples = None;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--real-apiserver") => mode = Mode::RealApiserver,
            Some(a) if a.starts_with('-') => {
                return Err(format!(
                    "unknown option {a}; usage: simulate [--real-apiserver] [SAMPLES_DIR]"
                )
                .into());
            }
            _ if samples.is_none() => samples = Some(PathBuf::from(arg)),
            _ => return Err("usage: simulate [--real-apiserver] [SAMPLES_DIR]".into()),
        }
    }
    Ok((mode, samples))
}

/// Seconds since the run started, as the output's `[  1.2s]` stamps.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn stamp(&self) -> String {
        format!("[{:>5.1}s]", self.0.elapsed().as_secs_f64())
    }
}

/// A child process killed when dropped (also on errors and panics).
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// SIGTERM, then wait up to 20 s (SIGKILL after that).
    fn stop(&mut self) {
        testenv::capture::terminate(&mut self.child, Duration::from_secs(20));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testenv lives in the kim workspace")
        .to_path_buf()
}
/// `KIM_BIN`, or the `kim` binary `cargo build --bin kim` produces for this workspace.
fn kim_binary(root: &Path) -> Res<PathBuf> {
    if let Some(p) = std::env::var_os("KIM_BIN") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(format!("KIM_BIN={} is not a file", p.display()).into());
        }
        return Ok(p);
    }
    // Without the variables `cargo run` set for this example (see `cargo_command`).
    let mut cmd = testenv::process::cargo_command();
    cmd.args([
        "build",
        "--bin",
        "kim",
        "--message-format=json-render-diagnostics",
    ])
    .arg("--manifest-path")
    .arg(root.join("Cargo.toml"));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    println!("building the kim binary (cargo build --bin kim; set KIM_BIN to skip) …");
    let out = cmd.stderr(Stdio::inherit()).output()?;
    if !out.status.success() {
        return Err("cargo build --bin kim failed".into());
    }
    for line in out.stdout.lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        if v["reason"] == "compiler-artifact"
            && v["target"]["name"] == "kim"
            && let Some(exe) = v["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    Err("cargo build --bin kim reported no kim executable".into())
}

fn copy_dir(from: &Path, to: &Path) -> Res<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// Waits for `field` in the first JSON log line of `log` that has it.
async fn logged_field(p: &mut Proc, field: &str) -> Res<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        if let Some(v) = text.lines().find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?[field]
                .as_str()
                .map(String::from)
        }) {
            return Ok(v);
        }
        if let Some(status) = p.child.try_wait()? {
            return Err(format!("{} exited ({status}) at start-up", p.log.display()).into());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("no {field} in {} within 60 s", p.log.display()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn<S: AsRef<std::ffi::OsStr>>(kim: &Path, args: &[S], log: PathBuf) -> Res<Proc> {
    let file = std::fs::File::create(&log)?;
    let child = Command::new(kim)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()?;
    Ok(Proc { child, log })
}

/// One line per Runtime status: state, conditions, Gardener's last operation.
fn summary(rt: &Value) -> String {
    let st = &rt["status"];
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let conds: Vec<String> = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}/{}", s(&c["type"]), s(&c["status"]), s(&c["reason"])))
        .collect();
    let op = st
        .get("shootLastOperation")
        .map(|o| format!("  (Gardener: {} {})", s(&o["type"]), s(&o["state"])))
        .unwrap_or_default();
    format!("{:<11} [{}]{op}", s(&st["state"]), conds.join(", "))
}

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

/// The last `n` lines of each process log in `dir`, for stderr.
fn log_tails(dir: &Path, n: usize) -> String {
    let mut out = String::new();
    for name in ["webhook.log", "controller.log"] {
        let Ok(text) = std::fs::read_to_string(dir.join(name)) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {name} (last {n} lines)\n"));
        for line in &lines[lines.len().saturating_sub(n)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before anything runs, so that a signal during a blocking step (the cargo
    // build of kim) is not lost: it ends the run at its next await instead of the process.
    let handler = |kind| signal(kind).expect("signal handler");
    let mut interrupt = handler(SignalKind::interrupt());
    let mut terminate = handler(SignalKind::terminate());
    let mut hangup = handler(SignalKind::hangup());
    let dir = tempfile::Builder::new()
        .prefix("kim-simulate-")
        .tempdir()
        .expect("temp dir");
    // Every way out below drops `dir` (which removes it) before the process ends; `run`'s
    // processes are killed when its future is dropped.
    let outcome = tokio::select! {
        r = run(dir.path()) => r.map_err(|e| (e.to_string(), 1)),
        _ = interrupt.recv() => Err(("interrupted (SIGINT)".to_string(), 130)),
        _ = terminate.recv() => Err(("terminated (SIGTERM)".to_string(), 143)),
        _ = hangup.recv() => Err(("hung up (SIGHUP)".to_string(), 129)),
    };
    if let Err((e, code)) = outcome {
        eprintln!("\nSIMULATION FAILED: {e}\n{}", log_tails(dir.path(), 40));
        drop(dir);
        std::process::exit(code);
    }
}

async fn run(tmp: &Path) -> Res<()> {
    let (mode, samples) = parse_args()?;
    println!("==================================================================================");
    match mode {
        Mode::InMemory => {
            println!(" SIMULATION — kim on in-memory API servers with a simulated Gardener.");
        }
        Mode::RealApiserver => {
            println!(
                " SIMULATION — kim on a real etcd + kube-apiserver (the control cluster), with the"
            );
            println!(
                " real Gardener API (gardener-apiserver), a simulated gardenlet and real runtime"
            );
            println!(" clusters (kube-apiserver + etcd).");
        }
    }
    println!(" No real cloud account, no real Gardener landscape: everything runs on 127.0.0.1");
    println!(" and is gone when this program exits. The kim binaries are the real ones.");
    println!("==================================================================================");
    let root = repo_root();
    let samples = samples.unwrap_or_else(|| root.join("samples/runtimes"));
    let kim = kim_binary(&root)?;
    println!("kim binary: {}", kim.display());
    let clock = Clock(Instant::now());

    // The clusters.
    let mut control = Control::start(mode, &root, tmp).await?;
    let mut runtimes = read_samples(&samples)?;
    let garden = match &control.kind {
        Kind::InMemory { kcp, .. } => {
            let garden = testenv::start(ServerConfig::default().name("garden")).await?;
            let sim = GardenerSim::new(&garden, GardenerConfig::default());
            let clusters = runtime_clusters(&garden, &runtimes).await?;
            println!(
                "in-memory clusters: control {}, Gardener {}, {} runtime clusters",
                kcp.url(),
                garden.url(),
                clusters.len()
            );
            Garden::InMemory {
                garden,
                sim,
                _clusters: clusters,
            }
        }
        Kind::Real { cp, .. } => {
            let admin = cp.admin().await;
            testenv::garden::install_fixtures(&admin, testenv::garden::DEFAULT_PROJECT).await?;
            for rt in &mut runtimes {
                let provider = rt["spec"]["shoot"]["provider"]["type"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                rt["spec"]["shoot"]["secretBindingName"] = json!(format!("hyperscaler-{provider}"));
            }
            let gardenlet = Gardenlet::start(
                admin,
                GardenletConfig::new(&format!("garden-{}", testenv::garden::DEFAULT_PROJECT))
                    .clusters(Clusters::Pool(2)),
            );
            println!(
                "control cluster: kube-apiserver {} (etcd {}, RBAC) serving the Gardener API \
                 (gardener-apiserver, project {}); a simulated gardenlet starts real runtime \
                 clusters (a pool of 2); the samples bind hyperscaler-<provider>",
                cp.url(),
                cp.etcd_url(),
                testenv::garden::DEFAULT_PROJECT
            );
            Garden::Real {
                kubeconfig: cp.kubeconfig(cp.admin_cert()),
                _gardenlet: gardenlet,
            }
        }
    };

    // kim webhook, and the control cluster's admission calling it.
    let mut args = testenv::process::kim_webhook_args(&control.cert_dir(), false);
    args.extend(["--log-format".into(), "json".into()]);
    let mut webhook = spawn(&kim, &args, tmp.join("webhook.log"))?;
    let addr: SocketAddr = logged_field(&mut webhook, "addr").await?.parse()?;
    let metrics_addr = logged_field(&mut webhook, "metrics_addr").await?;
    let served_as = match mode {
        Mode::InMemory => format!("kim-webhook.kim-system.svc → {addr}"),
        Mode::RealApiserver => "certificate for 127.0.0.1".to_string(),
    };
    println!(
        "{} kim webhook serving on {addr} ({served_as})",
        clock.stamp()
    );
    control
        .wire_admission(&root, addr, &runtimes[0], clock)
        .await?;

    // kim controller.
    let kcp_kubeconfig = tmp.join("kcp.kubeconfig");
    let garden_kubeconfig = tmp.join("garden.kubeconfig");
    std::fs::write(&kcp_kubeconfig, control.controller_kubeconfig().await)?;
    std::fs::write(&garden_kubeconfig, garden.kubeconfig())?;
    let config = root.join("docs/config.example.yaml");
    let args = testenv::process::kim_controller_args(
        &kcp_kubeconfig,
        &garden_kubeconfig,
        &config,
        NS,
        false,
    );
    let mut controller = spawn(&kim, &args, tmp.join("controller.log"))?;
    logged_field(&mut controller, "metrics_addr").await?;
    let identity = match mode {
        Mode::InMemory => CONTROLLER_USER.to_string(),
        Mode::RealApiserver => format!(
            "{CONTROLLER_USER}: a TokenRequest token, the RBAC of manifests/base/rbac-controller.yaml"
        ),
    };
    println!("{} kim controller running (as {identity})", clock.stamp());

    let before = webhook_counters(&metrics_addr).await?;
    let printer = control.print_changes(clock).await?;
    let stepper = match &garden {
        Garden::InMemory { sim, .. } => Some(sim.run_every(Duration::from_millis(500))),
        Garden::Real { .. } => None,
    };

    // ---- provisioning ----
    let api = control.runtimes.clone();
    println!(
        "{} --- creating {} sample Runtimes ---",
        clock.stamp(),
        runtimes.len()
    );
    let mut names = Vec::new();
    for rt in &runtimes {
        let obj: DynamicObject = serde_json::from_value(rt.clone())?;
        names.push(obj.metadata.name.clone().unwrap_or_default());
        api.create(&PostParams::default(), &obj).await?;
    }
    let (names, control_ref) = (&names, &control);
    wait("every Runtime Ready", || async move {
        for n in names {
            let state = control_ref.stored(n).await?;
            if state.as_ref().and_then(|r| r["status"]["state"].as_str()) != Some("Ready") {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    println!("{} --- every Runtime is Ready ---", clock.stamp());

    // ---- the rogue client ----
    let victim = names[0].clone();
    let (rogue_user, rogue) = control.rogue().await;
    println!(
        "{} --- a rogue client ({rogue_user}) rewrites {victim}'s status to Failed ---",
        clock.stamp()
    );
    let r = rogue
        .patch_status(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": "Failed"}})),
        )
        .await;
    report("the rogue client's write", r)?;
    let leaked = match mode {
        Mode::InMemory => "the controller's own token (say, leaked)",
        Mode::RealApiserver => "a second token of the controller's ServiceAccount (say, leaked)",
    };
    println!(
        "{} --- {leaked} writes a reason the model does not know ---",
        clock.stamp()
    );
    let impostor = control.impostor().await;
    let mut obj = impostor.get(&victim).await?;
    obj.data["status"]["conditions"][0]["reason"] = json!("BecauseISaidSo");
    let r = impostor
        .replace_status(&victim, &PostParams::default(), &obj)
        .await;
    report("the write with an unknown reason", r)?;

    // ---- deletion ----
    println!("{} --- deleting every Runtime ---", clock.stamp());
    for n in names {
        api.delete(n, &DeleteParams::default()).await?;
    }
    wait("every Runtime deleted", || async move {
        for n in names {
            if control_ref.stored(n).await?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    if let Some(stepper) = stepper {
        stepper.abort();
    }
    printer.finish().await?;

    // ---- summary ----
    let after = webhook_counters(&metrics_addr).await?;
    let (writes, denied) = control.admission_summary(&before, &after);
    controller.stop();
    webhook.stop();
    println!("==================================================================================");
    println!(
        " SIMULATION done in {:.1} s: {} Runtimes provisioned and deleted.",
        clock.0.elapsed().as_secs_f64(),
        names.len()
    );
    println!(" {writes}");
    println!(" kim webhook's own counters:");
    for c in &after {
        println!("   {c}");
    }
    if mode == Mode::RealApiserver {
        println!("   (one /validate denial is the probe's, before the Runtimes were created)");
    }
    println!("==================================================================================");
    if denied != 2 {
        return Err(format!("expected the 2 rogue writes denied, {denied} were").into());
    }
    Ok(())
}

/// The sample Runtimes of `dir` (`*.yaml`, sorted by file name), each in `kcp-system` with
/// runtime id = its name.
fn read_samples(dir: &Path) -> Res<Vec<Value>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("samples {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut runtimes = Vec::new();
    for f in &files {
        let mut rt: Value = serde_saphyr::from_str(&std::fs::read_to_string(f)?)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let name = rt["metadata"]["name"].as_str().unwrap_or("").to_string();
        rt["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!(name);
        rt["metadata"]["namespace"] = json!(NS);
        runtimes.push(rt);
    }
    if runtimes.is_empty() {
        return Err(format!("no sample Runtime (*.yaml) in {}", dir.display()).into());
    }
    Ok(runtimes)
}

/// One in-memory runtime cluster per Runtime's Shoot, whose admin kubeconfig Gardener hands
/// out.
async fn runtime_clusters(garden: &ServerHandle, runtimes: &[Value]) -> Res<Vec<ServerHandle>> {
    let mut kubeconfigs = HashMap::new();
    let mut clusters = Vec::new();
    for rt in runtimes {
        let shoot = rt["spec"]["shoot"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let token = format!("admin-{shoot}");
        let cluster = testenv::start(
            ServerConfig::default()
                .name(&shoot)
                .user(&token, UserInfo::new("shoot-admin", &["system:masters"])),
        )
        .await?;
        kubeconfigs.insert(shoot, cluster.kubeconfig_yaml(Some(&token)));
        clusters.push(cluster);
    }
    garden.set_admin_kubeconfig(move |req| kubeconfigs.get(&req.name).cloned().unwrap_or_default());
    Ok(clusters)
}

/// Gardener and the runtime clusters, by mode.
enum Garden {
    /// testenv's in-memory Gardener cluster, stepped by the simulated Gardener; in-memory
    /// runtime clusters (kept until the end).
    InMemory {
        garden: ServerHandle,
        sim: GardenerSim,
        _clusters: Vec<ServerHandle>,
    },
    /// The Gardener API of the real control plane; the gardenlet (stopped, with its runtime
    /// clusters, when dropped).
    Real {
        /// The admin's kubeconfig of the control plane, which serves the Gardener API.
        kubeconfig: String,
        _gardenlet: Gardenlet,
    },
}

impl Garden {
    /// The controller's `--gardener-kubeconfig`.
    fn kubeconfig(&self) -> String {
        match self {
            Garden::InMemory { garden, .. } => garden.kubeconfig_yaml(None),
            Garden::Real { kubeconfig, .. } => kubeconfig.clone(),
        }
    }
}

/// The control cluster: Runtimes live there, kim's controller and webhook serve it.
struct Control {
    /// The Runtimes of `kcp-system` as a cluster administrator.
    runtimes: Api<DynamicObject>,
    kind: Kind,
}

enum Kind {
    InMemory {
        kcp: ServerHandle,
        /// The webhook configurations of the static-ca overlay (with their caBundle).
        configs: WebhookConfigurations,
        /// Set by [`Control::wire_admission`].
        stage: Option<WebhookStage>,
        /// `certs/gen-certs.sh`'s output: the webhook's serving certificate.
        cert_dir: PathBuf,
    },
    Real {
        cp: Box<ControlPlane>,
        /// The webhook's serving certificate for 127.0.0.1, and its CA (the caBundle).
        certs: Box<WebhookCerts>,
    },
}

impl Control {
    /// Starts the control cluster and makes the webhook's serving certificate.
    async fn start(mode: Mode, root: &Path, tmp: &Path) -> Res<Control> {
        match mode {
            Mode::InMemory => Self::in_memory(root, tmp).await,
            Mode::RealApiserver => Self::real().await,
        }
    }

    async fn in_memory(root: &Path, tmp: &Path) -> Res<Control> {
        // Certificates for the webhook Service, caBundle into a copy of the static-ca overlay.
        copy_dir(&root.join("manifests"), &tmp.join("manifests"))?;
        let out = Command::new("bash")
            .arg(root.join("certs/gen-certs.sh"))
            .arg("--out")
            .arg(tmp.join("certs"))
            .arg("--overlay")
            .arg(tmp.join("manifests/overlays/static-ca"))
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "certs/gen-certs.sh failed (bash and openssl are needed): {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let configs =
            WebhookConfigurations::from_kustomization(&tmp.join("manifests/overlays/static-ca"))?;
        println!(
            "webhook configurations (manifests/overlays/static-ca): {}",
            configs
                .webhooks
                .iter()
                .map(|w| format!("{} → {}", w.name, w.call_url()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let kcp = testenv::start(
            ServerConfig::default()
                .name("kcp")
                .user(CONTROLLER_TOKEN, UserInfo::new(CONTROLLER_USER, &[]))
                .user(
                    ROGUE_TOKEN,
                    UserInfo::new(ROGUE_USER, &["system:authenticated"]),
                ),
        )
        .await?;
        Ok(Control {
            runtimes: Api::namespaced_with(kcp.client(), NS, &runtime_resource()),
            kind: Kind::InMemory {
                kcp,
                configs,
                stage: None,
                cert_dir: tmp.join("certs"),
            },
        })
    }

    async fn real() -> Res<Control> {
        let kubectl = testenv::tools::dir().join("kubectl");
        if !kubectl.is_file() {
            return Err(format!(
                "--real-apiserver builds manifests/base with kubectl kustomize: {} is missing; \
                 install it with `bash scripts/install-tools.sh`",
                kubectl.display()
            )
            .into());
        }
        // Blocks until /readyz answers; on a thread of its own so that signals are heard.
        let cp = tokio::task::spawn_blocking(|| {
            ControlPlane::start_with(Options {
                gardener: true,
                ..Options::default()
            })
        })
        .await??;
        let certs = WebhookCerts::generate();
        let admin = cp.admin().await;
        Ok(Control {
            runtimes: Api::namespaced_with(admin, NS, &runtime_resource()),
            kind: Kind::Real {
                cp: Box::new(cp),
                certs: Box::new(certs),
            },
        })
    }

    /// The directory with the webhook's `tls.crt` and `tls.key` (`kim webhook --cert-dir`).
    fn cert_dir(&self) -> PathBuf {
        match &self.kind {
            Kind::InMemory { cert_dir, .. } => cert_dir.clone(),
            Kind::Real { certs, .. } => certs.dir.path().to_path_buf(),
        }
    }

    /// Sends the control cluster's `runtimes/status` writes to the webhook on `addr`.
    /// In-memory: testenv's admission stage, printing each denied status write. Real: kim's
    /// CRD and `manifests/base` installed with the webhooks pointed at `addr`, the rogue
    /// client's RBAC, and a wait (with a probe Runtime made from `sample`) until
    /// kube-apiserver calls the webhook.
    async fn wire_admission(
        &mut self,
        root: &Path,
        addr: SocketAddr,
        sample: &Value,
        clock: Clock,
    ) -> Res<()> {
        match &mut self.kind {
            Kind::InMemory {
                kcp,
                configs,
                stage,
                ..
            } => {
                let s = WebhookStage::new(configs.clone(), addr);
                s.install(kcp);
                let admit = s.clone();
                kcp.set_admission_async(move |req| {
                    let stage = admit.clone();
                    async move {
                        let (user, name) = (req.user.username.clone(), req.name.clone());
                        let status = req.subresource.as_deref() == Some("status");
                        let decision = stage.admit(req).await;
                        if status && let AdmissionDecision::Deny { code, message } = &decision {
                            println!(
                                "{} ✗ {name}: status write by {user} DENIED ({code}): {message}",
                                clock.stamp()
                            );
                        }
                        decision
                    }
                });
                *stage = Some(s);
            }
            Kind::Real { cp, certs } => {
                cp.create_namespace(NS).await;
                let crd = std::fs::read_to_string(root.join("manifests/crd.yaml"))?;
                cp.install_crds(&crd).await?;
                let installed = cp
                    .install_kustomize(&root.join("manifests/base"), addr, &certs.ca_pem)
                    .await?;
                let skipped = if installed.skipped.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (not served here, skipped: {})",
                        installed.skipped.join(", ")
                    )
                };
                println!(
                    "{} installed: namespace {NS}, manifests/crd.yaml, manifests/base ({} objects{skipped}); \
                     webhooks → https://{addr}/validate, /mutate",
                    clock.stamp(),
                    installed.applied.len()
                );
                grant_rogue(cp).await?;
                println!(
                    "{} Role + RoleBinding {NS}/{ROGUE_ROLE}: user {REAL_ROGUE_USER} may patch runtimes/status",
                    clock.stamp()
                );
                wait_until_judged(&self.runtimes, sample).await?;
                println!(
                    "{} admission in effect: kube-apiserver sent a model-breaking status write of \
                     probe Runtime {PROBE} to kim webhook, which refused it (probe deleted)",
                    clock.stamp()
                );
            }
        }
        Ok(())
    }

    /// The controller's kubeconfig: the in-memory server's static token, or a TokenRequest
    /// token of ServiceAccount `kim-system/kim-controller`.
    async fn controller_kubeconfig(&self) -> String {
        match &self.kind {
            Kind::InMemory { kcp, .. } => kcp.kubeconfig_yaml(Some(CONTROLLER_TOKEN)),
            Kind::Real { cp, .. } => {
                let token = cp
                    .service_account_token(CONTROLLER_SA.0, CONTROLLER_SA.1)
                    .await;
                cp.kubeconfig_with_token(&token)
            }
        }
    }

    /// Runtime `name` of `kcp-system` as stored now (`None`: gone).
    async fn stored(&self, name: &str) -> Res<Option<Value>> {
        Ok(match &self.kind {
            Kind::InMemory { kcp, .. } => kcp.get(&Gvr::runtimes(), Some(NS), name),
            Kind::Real { .. } => self.runtimes.get_opt(name).await?.map(|o| o.data),
        })
    }

    /// The rogue client's user name and its Runtimes API.
    async fn rogue(&self) -> (String, Api<DynamicObject>) {
        let (user, client) = match &self.kind {
            Kind::InMemory { kcp, .. } => (ROGUE_USER, kcp.client_as(Some(ROGUE_TOKEN))),
            Kind::Real { cp, .. } => {
                let cert = cp.user(REAL_ROGUE_USER, &["system:authenticated"]);
                (REAL_ROGUE_USER, cp.client(&cert).await)
            }
        };
        let api = Api::namespaced_with(client, NS, &runtime_resource());
        (user.to_string(), api)
    }

    /// The Runtimes API with a token of the controller's identity other than the running
    /// controller's: the same static token in memory, a second TokenRequest token for real.
    async fn impostor(&self) -> Api<DynamicObject> {
        let client = match &self.kind {
            Kind::InMemory { kcp, .. } => kcp.client_as(Some(CONTROLLER_TOKEN)),
            Kind::Real { cp, .. } => {
                let token = cp
                    .service_account_token(CONTROLLER_SA.0, CONTROLLER_SA.1)
                    .await;
                cp.client_from_kubeconfig(&cp.kubeconfig_with_token(&token))
                    .await
            }
        };
        Api::namespaced_with(client, NS, &runtime_resource())
    }

    /// Prints every status change of the Runtimes of `kcp-system` until
    /// [`Printer::finish`]: from the in-memory server's journal of committed changes (a state
    /// that lasted one write is printed too), or from a watch of the real apiserver (opened,
    /// its first list done, before this returns).
    async fn print_changes(&self, clock: Clock) -> Res<Printer> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = match &self.kind {
            Kind::InMemory { kcp, .. } => {
                tokio::spawn(print_journal(kcp.journal(), clock, stopped))
            }
            Kind::Real { .. } => {
                let (listed, first_list) = tokio::sync::oneshot::channel();
                let task = tokio::spawn(print_watch(self.runtimes.clone(), clock, listed, stopped));
                tokio::time::timeout(Duration::from_secs(30), first_list)
                    .await
                    .map_err(|_| "the watch of Runtimes listed nothing within 30 s")?
                    .map_err(|_| "the watch of Runtimes ended before its first list")?;
                task
            }
        };
        Ok(Printer { stop, task })
    }

    /// The summary line of the status writes, and how many were denied: from the admission
    /// stage's log (in memory), or from the webhook's counters `after` minus `before` (real:
    /// the probe's denial came before `before`).
    fn admission_summary(&self, before: &[String], after: &[String]) -> (String, usize) {
        match &self.kind {
            Kind::InMemory { stage, .. } => {
                let log = stage.as_ref().map(|s| s.log()).unwrap_or_default();
                let status: Vec<_> = log
                    .iter()
                    .filter(|r| r.subresource.as_deref() == Some("status"))
                    .collect();
                let admitted = status
                    .iter()
                    .filter(|r| matches!(r.result, StageResult::Allowed { .. }))
                    .count();
                let denied = status.len() - admitted;
                let calls: usize = status.iter().map(|r| r.calls.len()).sum();
                (
                    format!(
                        "runtimes/status writes through the admission stage: {admitted} admitted, \
                         {denied} denied; {calls} webhook calls over HTTPS."
                    ),
                    denied,
                )
            }
            Kind::Real { .. } => {
                let (before, after) = (parse_counters(before), parse_counters(after));
                let delta = |path: &str, decision: &str| -> usize {
                    let sum = |c: &BTreeMap<String, f64>| -> f64 {
                        c.iter()
                            .filter(|(labels, _)| {
                                labels.contains(&format!("path=\"{path}\""))
                                    && labels.contains(&format!("decision=\"{decision}\""))
                            })
                            .map(|(_, v)| v)
                            .sum()
                    };
                    (sum(&after) - sum(&before)).round() as usize
                };
                let (admitted, denied) =
                    (delta("/validate", "allowed"), delta("/validate", "denied"));
                let calls =
                    admitted + denied + delta("/mutate", "allowed") + delta("/mutate", "denied");
                (
                    format!(
                        "runtimes/status writes kube-apiserver sent to kim webhook's /validate: \
                         {admitted} admitted, {denied} denied; {calls} webhook calls over HTTPS."
                    ),
                    denied,
                )
            }
        }
    }
}

/// Lets [`REAL_ROGUE_USER`] patch `runtimes/status` in `kcp-system` (a Role and a RoleBinding,
/// created as the admin), and waits until the RBAC authorizer says so: its write then reaches
/// the webhook, whose writer rule is what refuses it.
async fn grant_rogue(cp: &ControlPlane) -> Res<()> {
    let admin = cp.admin().await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": ROGUE_ROLE, "namespace": NS},
        "rules": [{"apiGroups": [GROUP], "resources": ["runtimes/status"], "verbs": ["patch"]}],
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": ROGUE_ROLE, "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROGUE_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": REAL_ROGUE_USER}],
    }))?;
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &role)
        .await?;
    Api::<RoleBinding>::namespaced(admin, NS)
        .create(&PostParams::default(), &binding)
        .await?;
    let rogue = cp
        .client(&cp.user(REAL_ROGUE_USER, &["system:authenticated"]))
        .await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(rogue);
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some("runtimes".into()),
                subresource: Some("status".into()),
                verb: Some("patch".into()),
                namespace: Some(NS.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{REAL_ROGUE_USER} not allowed to patch runtimes/status within 30 s"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A new webhook configuration takes effect a moment after it is created: polls (every
/// 200 ms, at most 30 s) until a status write that the model refuses but the CRD's schema
/// accepts (`Ready` without conditions, on Runtime [`PROBE`] made from `sample`) is refused by
/// the validating webhook, then deletes the probe.
async fn wait_until_judged(api: &Api<DynamicObject>, sample: &Value) -> Res<()> {
    let mut probe = sample.clone();
    probe["metadata"]["name"] = json!(PROBE);
    probe["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!(PROBE);
    if let Some(m) = probe["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    if let Some(o) = probe.as_object_mut() {
        o.remove("status");
    }
    let probe: DynamicObject = serde_json::from_value(probe)?;
    api.create(&PostParams::default(), &probe).await?;
    let bad = json!({"status": {"state": "Ready"}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = match api
            .patch_status(PROBE, &PatchParams::default(), &Patch::Merge(&bad))
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains(VALIDATE_HOOK) => break,
            // Stored before the configuration took effect: a second `Ready` would be ratcheted
            // (allowed), so start again from a Runtime without status.
            Ok(_) => {
                api.delete(PROBE, &DeleteParams::default()).await?;
                api.create(&PostParams::default(), &probe).await?;
                "stored".to_string()
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(format!(
                "kube-apiserver did not call kim webhook within 30 s; last answer to the probe: {last}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.delete(PROBE, &DeleteParams::default()).await?;
    Ok(())
}

/// The status-change printer of [`Control::print_changes`].
struct Printer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Printer {
    /// Tells the printer to end (after printing what it has been told of by then) and waits.
    async fn finish(self) -> Res<()> {
        let _ = self.stop.send(());
        Ok(self.task.await??)
    }
}

/// One line per status change of a Runtime (its [`summary`]), and one per deletion.
struct Changes {
    seen: BTreeMap<String, String>,
    clock: Clock,
}

impl Changes {
    fn new(clock: Clock) -> Changes {
        Changes {
            seen: BTreeMap::new(),
            clock,
        }
    }

    /// `object` (a Runtime) was created or changed.
    fn applied(&mut self, name: &str, object: &Value) {
        let s = if object.get("status").is_some() {
            summary(object)
        } else {
            "(no status yet)".to_string()
        };
        if self.seen.get(name) != Some(&s) {
            println!("{} {name:<14} {s}", self.clock.stamp());
            self.seen.insert(name.to_string(), s);
        }
    }

    fn deleted(&mut self, name: &str) {
        self.seen.remove(name);
        println!("{} {name:<14} deleted", self.clock.stamp());
    }
}

/// Prints the Runtimes' changes of the in-memory server's journal; once `stopped`, prints
/// what the journal holds by then and ends.
async fn print_journal(
    journal: testenv::Journal,
    clock: Clock,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), String> {
    let mut changes = Changes::new(clock);
    let mut pos = 0;
    let mut done = false;
    loop {
        for change in journal.since(pos) {
            pos += 1;
            if change.gvr != Gvr::runtimes() || change.namespace() != Some(NS) {
                continue;
            }
            if change.kind == EventType::Deleted {
                changes.deleted(change.name());
            } else {
                changes.applied(change.name(), &change.object);
            }
        }
        if done {
            return Ok(());
        }
        tokio::select! {
            _ = journal.grown(pos) => {}
            _ = &mut stopped => done = true,
        }
    }
}

/// Prints the Runtimes' changes a watch of `api` reports (kube-runtime's watcher: a list,
/// then a watch, listed again after an expired resourceVersion); sends `listed` after the
/// first list. Once `stopped`, goes on until every Runtime it printed was printed deleted too
/// (at most 30 s: the caller has seen them gone).
async fn print_watch(
    api: Api<DynamicObject>,
    clock: Clock,
    listed: tokio::sync::oneshot::Sender<()>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), String> {
    let mut changes = Changes::new(clock);
    let mut listed = Some(listed);
    let mut relisted = BTreeSet::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut until: Option<tokio::time::Instant> = None;
    loop {
        let event = match until {
            None => tokio::select! {
                e = events.next() => e,
                _ = &mut stopped => {
                    until = Some(tokio::time::Instant::now() + Duration::from_secs(30));
                    continue;
                }
            },
            Some(_) if changes.seen.is_empty() => return Ok(()),
            Some(t) => tokio::time::timeout_at(t, events.next())
                .await
                .map_err(|_| {
                    format!(
                        "the watch reported no deletion of {:?} within 30 s",
                        changes.seen.keys()
                    )
                })?,
        };
        let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
        match event.ok_or("the watch of Runtimes ended".to_string())? {
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(o)) => {
                relisted.insert(name(&o));
                changes.applied(&name(&o), &o.data);
            }
            Ok(watcher::Event::InitDone) => {
                // Gone while the watch was being re-established.
                let gone: Vec<String> = changes
                    .seen
                    .keys()
                    .filter(|n| !relisted.contains(*n))
                    .cloned()
                    .collect();
                for n in gone {
                    changes.deleted(&n);
                }
                if let Some(l) = listed.take() {
                    let _ = l.send(());
                }
            }
            Ok(watcher::Event::Apply(o)) => changes.applied(&name(&o), &o.data),
            Ok(watcher::Event::Delete(o)) => changes.deleted(&name(&o)),
            // Retried by the watcher (with backoff); say so.
            Err(e) => eprintln!("{} watch of Runtimes: {e} (retrying)", clock.stamp()),
        }
    }
}

/// The `kim_webhook_requests_total{…}` lines of the webhook's `/metrics`.
async fn webhook_counters(metrics_addr: &str) -> Res<Vec<String>> {
    let metrics = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("kim_webhook_requests_total{"))
        .map(String::from)
        .collect())
}

/// Counter lines as `labels → value`.
fn parse_counters(lines: &[String]) -> BTreeMap<String, f64> {
    lines
        .iter()
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Polls `done` (every 50 ms) until it holds, for at most [`DEADLINE`].
async fn wait<F, Fut>(what: &str, mut done: F) -> Res<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Res<bool>>,
{
    let start = Instant::now();
    while !done().await? {
        if start.elapsed() > DEADLINE {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Prints the apiserver's answer to a write that should be denied; it must come from kim's
/// validating webhook (not, say, from RBAC).
fn report(what: &str, r: Result<DynamicObject, kube::Error>) -> Res<()> {
    match r {
        Err(kube::Error::Api(s)) => {
            println!(
                "    → {what} was refused: HTTP {} {}: {}",
                s.code, s.reason, s.message
            );
            if !s
                .message
                .contains(&format!("admission webhook \"{VALIDATE_HOOK}\" denied"))
            {
                return Err(format!("{what} was refused, but not by {VALIDATE_HOOK}").into());
            }
            Ok(())
        }
        Err(e) => Err(format!("{what}: unexpected error: {e}").into()),
        Ok(_) => Err(format!("{what} was admitted — it should not have been").into()),
    }
}
