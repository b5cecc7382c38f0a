//! SIMULATION of kim's whole chain on one machine, with one command:
//!
//! ```sh
//! cargo run -p testenv --example simulate [-- SAMPLES_DIR]
//! ```
//!
//! Runs the real `kim webhook` and `kim controller` binaries on a real control cluster, creates
//! the sample Runtimes of `samples/runtimes` (or the directory given as argument), prints each
//! Runtime's status as it changes and the Events kim's controller publishes, tries two illegal
//! status writes (both denied), deletes the Runtimes and prints a summary. Nothing real is
//! touched: no cluster of yours, no Gardener landscape, no cloud account; everything listens
//! on 127.0.0.1 and is gone at exit. `--real-apiserver` is accepted and changes nothing: the
//! real control cluster below is the only one.
//!
//! The clusters: etcd + kube-apiserver from [`testenv::controlplane`] (built by
//! `scripts/install-control-plane.sh`; kubectl from `scripts/install-tools.sh` builds the
//! manifests), with the real Gardener API: gardener-apiserver aggregated behind the same
//! kube-apiserver ([`testenv::garden`], its fixtures: project `kyma-dev`, CloudProfiles,
//! credentials; the samples' binding becomes the fixtures' `hyperscaler-<provider>`). Only the
//! gardenlet and the cloud are simulated: the simulated gardenlet ([`testenv::gardenlet`])
//! writes the Shoots' status and starts a pool of two real runtime clusters (kube-apiserver +
//! etcd) that kim reaches with the real `shoots/adminkubeconfig`; the controller's
//! `--gardener-kubeconfig` is the admin's.
//!
//! kim is installed as a user installs it: namespace `kcp-system`, `manifests/crd.yaml`, then
//! `manifests/base` (kubectl kustomize) with its webhook configurations pointed at the
//! `kim webhook` process, which serves a certificate for 127.0.0.1; kube-apiserver itself
//! calls the webhooks. The controller authenticates as ServiceAccount
//! `kim-system/kim-controller` with a TokenRequest token and nothing but the shipped RBAC; the
//! rogue client is user `rogue` (a client certificate) whom the example grants `patch` on
//! `runtimes/status` in `kcp-system`, so that its write reaches the webhook. What is printed
//! comes from the real sources: status changes from a watch of the Runtimes, the denials from
//! kube-apiserver's answers and from the webhook's own log, the Events from the events API, the
//! counts from the webhook's `/metrics`.
//!
//! The `kim` binary: `KIM_BIN` if set, else `cargo build --bin kim` of this workspace (same
//! profile as the example), located through cargo's JSON messages (so `CARGO_TARGET_DIR` and
//! `--release` work). The processes' logs go to a temporary directory, removed at every exit
//! (success, failure, panic, Ctrl-C, SIGTERM or SIGHUP), as are the clusters; on a failure the
//! logs' last lines are printed on stderr first.

use std::collections::{BTreeMap, BTreeSet};
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
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use testenv::controlplane::{ControlPlane, Options, WebhookCerts};
use testenv::gardenlet::{Clusters, Gardenlet, GardenletConfig};

type Res<T> = Result<T, Box<dyn Error>>;

const NS: &str = "kcp-system";
const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";
/// The controller's ServiceAccount (namespace, name), as `manifests/base` creates it.
const CONTROLLER_SA: (&str, &str) = ("kim-system", "kim-controller");
/// The rogue client: a client-certificate user.
const ROGUE_USER: &str = "rogue";
/// The Role (and RoleBinding) letting [`ROGUE_USER`] patch `runtimes/status`.
const ROGUE_ROLE: &str = "rogue-status-patcher";
/// The validating webhook of `manifests/base/webhook-configurations.yaml`.
const VALIDATE_HOOK: &str = "runtime-status.validate.kim.kyma-project.io";
/// The Runtime whose status writes wait for the webhooks to take effect.
const PROBE: &str = "webhook-ready-probe";
const GROUP: &str = "infrastructuremanager.kyma-project.io";
/// `reportingController` of the Events kim's controller publishes.
const REPORTER: &str = "kim-controller";
const DEADLINE: Duration = Duration::from_secs(180);
/// The binaries the example starts or runs, and the script that installs each into
/// `target/tools/bin`.
const TOOLS: [&str; 4] = ["kube-apiserver", "etcd", "gardener-apiserver", "kubectl"];
const USAGE: &str = "usage: simulate [SAMPLES_DIR]";

/// The command line: `[SAMPLES_DIR]`; `--real-apiserver`, the name of the only mode, is
/// accepted (and said to change nothing) so that older command lines keep working.
fn parse_args() -> Res<Option<PathBuf>> {
    let mut samples = None;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--real-apiserver") => {
                println!(
                    "note: --real-apiserver changes nothing: kim always runs on a real kube-apiserver here"
                );
            }
            Some(a) if a.starts_with('-') => {
                return Err(format!("unknown option {a}; {USAGE}").into());
            }
            _ if samples.is_none() => samples = Some(PathBuf::from(arg)),
            _ => return Err(USAGE.into()),
        }
    }
    Ok(samples)
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

/// Fails, naming the install script, when a binary of [`TOOLS`] is missing (kube-apiserver
/// and etcd of the minor `KIM_KUBERNETES` selects, as [`testenv::tools::path`] finds them).
fn check_tools() -> Res<()> {
    let mut missing = Vec::new();
    for name in TOOLS {
        let path = testenv::tools::path(name)?;
        if !path.is_file() {
            let hint = testenv::tools::install_hint(name);
            missing.push(format!("{} ({hint})", path.display()));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!("missing: {}", missing.join(", ")).into())
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
    let samples = parse_args()?;
    println!("==================================================================================");
    println!(" SIMULATION — kim on a real etcd + kube-apiserver (the control cluster), with the");
    println!(" real Gardener API (gardener-apiserver), a simulated gardenlet and real runtime");
    println!(" clusters (kube-apiserver + etcd).");
    println!(" No real cloud account, no real Gardener landscape: everything runs on 127.0.0.1");
    println!(" and is gone when this program exits. The kim binaries are the real ones.");
    println!("==================================================================================");
    let root = repo_root();
    let samples = samples.unwrap_or_else(|| root.join("samples/runtimes"));
    let mut runtimes = read_samples(&samples)?;
    check_tools()?;
    let kim = kim_binary(&root)?;
    println!("kim binary: {}", kim.display());
    let clock = Clock(Instant::now());

    // The control cluster with the Gardener API, its fixtures, and the simulated gardenlet.
    let control = Control::start().await?;
    let admin = control.cp.admin().await;
    testenv::garden::install_fixtures(&admin, testenv::garden::DEFAULT_PROJECT).await?;
    for rt in &mut runtimes {
        let provider = rt["spec"]["shoot"]["provider"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        rt["spec"]["shoot"]["secretBindingName"] = json!(format!("hyperscaler-{provider}"));
    }
    // Stopped, with its runtime clusters, when dropped.
    let _gardenlet = Gardenlet::start(
        admin,
        GardenletConfig::new(&format!("garden-{}", testenv::garden::DEFAULT_PROJECT))
            .clusters(Clusters::Pool(2)),
    );
    println!(
        "{} control cluster: kube-apiserver {} (etcd {}, RBAC) serving the Gardener API \
         (gardener-apiserver, project {}); a simulated gardenlet starts real runtime \
         clusters (a pool of 2); the samples bind hyperscaler-<provider>",
        clock.stamp(),
        control.cp.url(),
        control.cp.etcd_url(),
        testenv::garden::DEFAULT_PROJECT
    );

    // kim webhook, and kim installed with kube-apiserver calling it.
    let mut args = testenv::process::kim_webhook_args(control.certs.dir.path(), false);
    args.extend(["--log-format".into(), "json".into()]);
    let mut webhook = spawn(&kim, &args, tmp.join("webhook.log"))?;
    let addr: SocketAddr = logged_field(&mut webhook, "addr").await?.parse()?;
    let metrics_addr = logged_field(&mut webhook, "metrics_addr").await?;
    println!(
        "{} kim webhook serving on {addr} (certificate for 127.0.0.1)",
        clock.stamp()
    );
    control
        .install_kim(&root, addr, &runtimes[0], clock)
        .await?;

    // kim controller.
    let kcp_kubeconfig = tmp.join("kcp.kubeconfig");
    let garden_kubeconfig = tmp.join("garden.kubeconfig");
    std::fs::write(&kcp_kubeconfig, control.controller_kubeconfig().await)?;
    std::fs::write(
        &garden_kubeconfig,
        control.cp.kubeconfig(control.cp.admin_cert()),
    )?;
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
    println!(
        "{} kim controller running (as {CONTROLLER_USER}: a TokenRequest token, the RBAC of \
         manifests/base/rbac-controller.yaml)",
        clock.stamp()
    );

    let before = webhook_counters(&metrics_addr).await?;
    let printer = control.print_changes(clock).await?;

    // ---- provisioning ----
    let api = control.runtimes.clone();
    println!(
        "{} --- creating {} sample Runtime{} ---",
        clock.stamp(),
        runtimes.len(),
        if runtimes.len() == 1 { "" } else { "s" }
    );
    let mut names = Vec::new();
    for rt in &runtimes {
        let obj: DynamicObject = serde_json::from_value(rt.clone())?;
        names.push(obj.metadata.name.clone().unwrap_or_default());
        api.create(&PostParams::default(), &obj).await?;
    }
    let (names, api_ref) = (&names, &api);
    wait("every Runtime Ready", || async move {
        for n in names {
            let state = api_ref.get_opt(n).await?.map(|o| o.data);
            if state.as_ref().and_then(|r| r["status"]["state"].as_str()) != Some("Ready") {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    println!("{} --- every Runtime is Ready ---", clock.stamp());
    control.print_ready_events(names, clock).await?;

    // ---- the rogue client ----
    let victim = names[0].clone();
    println!(
        "{} --- a rogue client ({ROGUE_USER}) rewrites {victim}'s status to Failed ---",
        clock.stamp()
    );
    let r = control
        .rogue()
        .await
        .patch_status(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": "Failed"}})),
        )
        .await;
    report("the rogue client's write", r)?;
    println!(
        "{} --- a second token of the controller's ServiceAccount (say, leaked) writes a reason \
         the model does not know ---",
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
            if api_ref.get_opt(n).await?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    printer.finish().await?;

    // ---- summary ----
    let after = webhook_counters(&metrics_addr).await?;
    controller.stop();
    webhook.stop();
    let (before, after_parsed) = (parse_counters(&before), parse_counters(&after));
    let delta = |path: &str, decision: &str| {
        counted(&after_parsed, path, decision) - counted(&before, path, decision)
    };
    let (admitted, denied) = (delta("/validate", "allowed"), delta("/validate", "denied"));
    let calls = admitted + denied + delta("/mutate", "allowed") + delta("/mutate", "denied");
    let logged = denials(&std::fs::read_to_string(&webhook.log)?);
    println!("==================================================================================");
    println!(
        " SIMULATION done in {:.1} s: {} Runtimes provisioned and deleted.",
        clock.0.elapsed().as_secs_f64(),
        names.len()
    );
    println!(
        " runtimes/status writes kube-apiserver sent to kim webhook's /validate: {admitted} \
         admitted, {denied} denied; {calls} webhook calls over HTTPS."
    );
    println!(" kim webhook's own counters:");
    for c in &after {
        println!("   {c}");
    }
    println!(" kim webhook's log of the reviews it denied (one line each, at level info):");
    for d in &logged {
        println!("   {d}");
    }
    println!("   (the probe's denial came before the Runtimes were created)");
    println!("==================================================================================");
    if denied != 2 {
        return Err(format!("expected the 2 rogue writes denied, {denied} were").into());
    }
    // The probe's and the two above: the log and the counters tell the same.
    let counted_denials = counted(&after_parsed, "/validate", "denied");
    if logged.len() != counted_denials {
        return Err(format!(
            "the webhook logged {} denials, its counters say {counted_denials}",
            logged.len()
        )
        .into());
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

/// The control cluster: Runtimes live there, kim's controller and webhook serve it.
struct Control {
    cp: ControlPlane,
    /// The webhook's serving certificate for 127.0.0.1, and its CA (the caBundle).
    certs: WebhookCerts,
    /// The Runtimes of `kcp-system` as a cluster administrator.
    runtimes: Api<DynamicObject>,
}

impl Control {
    /// Starts etcd, kube-apiserver and gardener-apiserver and makes the webhook's serving
    /// certificate.
    async fn start() -> Res<Control> {
        // Blocks until /readyz answers; on a thread of its own so that signals are heard.
        let cp = tokio::task::spawn_blocking(|| {
            ControlPlane::start_with(Options {
                gardener: true,
                ..Options::default()
            })
        })
        .await??;
        let admin = cp.admin().await;
        Ok(Control {
            cp,
            certs: WebhookCerts::generate(),
            runtimes: Api::namespaced_with(admin, NS, &runtime_resource()),
        })
    }

    /// Installs kim's CRD and `manifests/base` with the webhooks pointed at `addr`, the rogue
    /// client's RBAC, and waits (with a probe Runtime made from `sample`) until kube-apiserver
    /// calls the webhook.
    async fn install_kim(
        &self,
        root: &Path,
        addr: SocketAddr,
        sample: &Value,
        clock: Clock,
    ) -> Res<()> {
        let cp = &self.cp;
        cp.create_namespace(NS).await;
        let crd = std::fs::read_to_string(root.join("manifests/crd.yaml"))?;
        cp.install_crds(&crd).await?;
        let installed = cp
            .install_kustomize(&root.join("manifests/base"), addr, &self.certs.ca_pem)
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
            "{} Role + RoleBinding {NS}/{ROGUE_ROLE}: user {ROGUE_USER} may patch runtimes/status",
            clock.stamp()
        );
        wait_until_judged(&self.runtimes, sample).await?;
        println!(
            "{} admission in effect: kube-apiserver sent a model-breaking status write of \
             probe Runtime {PROBE} to kim webhook, which refused it (probe deleted)",
            clock.stamp()
        );
        Ok(())
    }

    /// The controller's kubeconfig: a TokenRequest token of ServiceAccount
    /// `kim-system/kim-controller`.
    async fn controller_kubeconfig(&self) -> String {
        let token = self
            .cp
            .service_account_token(CONTROLLER_SA.0, CONTROLLER_SA.1)
            .await;
        self.cp.kubeconfig_with_token(&token)
    }

    /// The Runtimes API of the rogue client ([`ROGUE_USER`], a client certificate).
    async fn rogue(&self) -> Api<DynamicObject> {
        let cert = self.cp.user(ROGUE_USER, &["system:authenticated"]);
        Api::namespaced_with(self.cp.client(&cert).await, NS, &runtime_resource())
    }

    /// The Runtimes API with a second TokenRequest token of the controller's ServiceAccount
    /// (not the running controller's).
    async fn impostor(&self) -> Api<DynamicObject> {
        let client = self
            .cp
            .client_from_kubeconfig(&self.controller_kubeconfig().await)
            .await;
        Api::namespaced_with(client, NS, &runtime_resource())
    }

    /// Waits until kim's controller has published a `Ready` Event about each Runtime of
    /// `names` (it publishes them in the background, after the status write), and prints them
    /// as `kubectl get events` would show them.
    async fn print_ready_events(&self, names: &[String], clock: Clock) -> Res<()> {
        let events: Api<K8sEvent> = Api::namespaced(self.cp.admin().await, NS);
        let start = Instant::now();
        let found = loop {
            let found = ready_events(&events.list(&ListParams::default()).await?.items, names);
            if found.len() == names.len() {
                break found;
            }
            if start.elapsed() > DEADLINE {
                return Err(format!(
                    "timed out waiting for a Ready Event about every Runtime; found: {found:?}"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        println!(
            "{} Events kim's controller published (events.k8s.io/v1, {NS}):",
            clock.stamp()
        );
        for e in &found {
            println!("    {e}");
        }
        Ok(())
    }

    /// Prints every status change of the Runtimes of `kcp-system` until [`Printer::finish`],
    /// from a watch of kube-apiserver (opened, its first list done, before this returns).
    async fn print_changes(&self, clock: Clock) -> Res<Printer> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (listed, first_list) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(print_watch(self.runtimes.clone(), clock, listed, stopped));
        tokio::time::timeout(Duration::from_secs(30), first_list)
            .await
            .map_err(|_| "the watch of Runtimes listed nothing within 30 s")?
            .map_err(|_| "the watch of Runtimes ended before its first list")?;
        Ok(Printer { stop, task })
    }
}

/// Lets [`ROGUE_USER`] patch `runtimes/status` in `kcp-system` (a Role and a RoleBinding,
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
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ROGUE_USER}],
    }))?;
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &role)
        .await?;
    Api::<RoleBinding>::namespaced(admin, NS)
        .create(&PostParams::default(), &binding)
        .await?;
    let rogue = cp
        .client(&cp.user(ROGUE_USER, &["system:authenticated"]))
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
            return Err(
                format!("{ROGUE_USER} not allowed to patch runtimes/status within 30 s").into(),
            );
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
            // The webhook's own denial (a failed call to it names the hook too).
            Err(kube::Error::Api(s)) if denied_by_webhook(&s.message) => break,
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
            if !denied_by_webhook(&s.message) {
                return Err(format!("{what} was refused, but not by {VALIDATE_HOOK}").into());
            }
            Ok(())
        }
        Err(e) => Err(format!("{what}: unexpected error: {e}").into()),
        Ok(_) => Err(format!("{what} was admitted — it should not have been").into()),
    }
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

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Runtime"), "runtimes")
}

// ---- pure rules ----

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

/// The `Ready` Events of [`REPORTER`] about the Runtimes of `names`, one line each
/// (`<type> <reason> runtime/<name>: <note>`), in the order of `names`; a Runtime without one
/// has no line.
fn ready_events(events: &[K8sEvent], names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter_map(|name| {
            let e = events.iter().find(|e| {
                e.reporting_controller.as_deref() == Some(REPORTER)
                    && e.reason.as_deref() == Some("Ready")
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("Runtime") && r.name.as_deref() == Some(name)
                    })
            })?;
            Some(format!(
                "{} {} runtime/{name}: {}",
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.note.as_deref().unwrap_or("")
            ))
        })
        .collect()
}

/// Whether kube-apiserver's answer `message` says kim's validating webhook denied the request.
fn denied_by_webhook(message: &str) -> bool {
    message.contains(&format!("admission webhook \"{VALIDATE_HOOK}\" denied"))
}

/// Counter lines (`name{labels} value`) as `labels → value`.
fn parse_counters(lines: &[String]) -> BTreeMap<String, f64> {
    lines
        .iter()
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the `counters` of webhook `path` with `decision` (`allowed`, `denied`).
fn counted(counters: &BTreeMap<String, f64>, path: &str, decision: &str) -> usize {
    let sum: f64 = counters
        .iter()
        .filter(|(labels, _)| {
            labels.contains(&format!("path=\"{path}\""))
                && labels.contains(&format!("decision=\"{decision}\""))
        })
        .map(|(_, v)| v)
        .sum();
    sum.round() as usize
}

/// The `admission review` lines of kim webhook's JSON log (`--log-format json`) that denied a
/// `/validate` review, one line each: `<timestamp> user=<user> code=<code> rules=<rules>:
/// <detail>` (`detail` is the message kube-apiserver relays).
fn denials(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["message"] == "admission review"
                && v["path"] == "/validate"
                && v["decision"] == "denied"
        })
        .map(|v| {
            let s = |k: &str| match &v[k] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!(
                "{} user={} code={} rules={}: {}",
                s("timestamp"),
                s("user"),
                s("code"),
                s("rules"),
                s("detail")
            )
        })
        .collect()
}
