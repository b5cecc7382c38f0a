//! SIMULATION of kim's whole chain on one machine, with one command:
//!
//! ```sh
//! cargo run -p testenv --example simulate
//! ```
//!
//! Starts in-memory API servers (a control cluster, a Gardener cluster driven by testenv's
//! simulated Gardener, one runtime cluster per Shoot), makes a CA and a serving certificate
//! with `certs/gen-certs.sh` (needs `bash` and `openssl`) for a temporary copy of
//! `manifests/`, runs the real `kim webhook` and `kim controller` binaries against them, and
//! sends every `runtimes/status` write of the control cluster through testenv's
//! [`WebhookStage`], which calls the webhooks over HTTPS as kube-apiserver would (the
//! configurations of the static-ca overlay). It creates the sample Runtimes of
//! `samples/runtimes` (or the directory given as the first argument), prints each
//! Runtime's status as it changes, tries two illegal status writes as a rogue client (both
//! denied), deletes the Runtimes and prints a summary. Nothing real is touched: no cluster, no
//! Gardener, no cloud account; everything listens on 127.0.0.1 and is gone at exit.
//!
//! The `kim` binary: `KIM_BIN` if set, else `cargo build --bin kim` of this workspace (same
//! profile as the example), located through cargo's JSON messages (so `CARGO_TARGET_DIR` and
//! `--release` work). The processes' logs go to a temporary directory, removed at every exit
//! (success, failure, panic, Ctrl-C, SIGTERM or SIGHUP); on a failure their last lines are
//! printed on stderr first.

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use testenv::gardener::{GardenerConfig, GardenerSim};
use testenv::webhook_stage::StageResult;
use testenv::{
    AdmissionDecision, EventType, Gvr, ServerConfig, UserInfo, WebhookConfigurations, WebhookStage,
};

type Res<T> = Result<T, Box<dyn Error>>;

const NS: &str = "kcp-system";
const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";
const CONTROLLER_TOKEN: &str = "kim-controller-token";
const ROGUE_USER: &str = "system:serviceaccount:other:rogue";
const ROGUE_TOKEN: &str = "rogue-token";
const DEADLINE: Duration = Duration::from_secs(180);

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
    println!("==================================================================================");
    println!(" SIMULATION — kim on in-memory API servers with a simulated Gardener.");
    println!(" No real cluster, no real Gardener, no cloud account: everything runs on 127.0.0.1");
    println!(" and is gone when this program exits. The kim binaries are the real ones.");
    println!("==================================================================================");
    let root = repo_root();
    let samples = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("samples/runtimes"));
    let kim = kim_binary(&root)?;
    println!("kim binary: {}", kim.display());
    let t0 = Instant::now();
    let stamp = move || format!("[{:>5.1}s]", t0.elapsed().as_secs_f64());

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

    // The clusters.
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
    let garden = testenv::start(ServerConfig::default().name("garden")).await?;
    let sim = GardenerSim::new(&garden, GardenerConfig::default());

    // The sample Runtimes, each with its own runtime id and runtime cluster.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&samples)
        .map_err(|e| format!("samples {}: {e}", samples.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut runtimes: Vec<Value> = Vec::new();
    let mut kubeconfigs = HashMap::new();
    let mut clusters = Vec::new();
    for f in &files {
        let mut rt: Value = serde_saphyr::from_str(&std::fs::read_to_string(f)?)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let name = rt["metadata"]["name"].as_str().unwrap_or("").to_string();
        let shoot = rt["spec"]["shoot"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        rt["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!(name);
        rt["metadata"]["namespace"] = json!(NS);
        let token = format!("admin-{shoot}");
        let cluster = testenv::start(
            ServerConfig::default()
                .name(&shoot)
                .user(&token, UserInfo::new("shoot-admin", &["system:masters"])),
        )
        .await?;
        kubeconfigs.insert(shoot, cluster.kubeconfig_yaml(Some(&token)));
        clusters.push(cluster);
        runtimes.push(rt);
    }
    garden.set_admin_kubeconfig(move |req| kubeconfigs.get(&req.name).cloned().unwrap_or_default());
    println!(
        "in-memory clusters: control {}, Gardener {}, {} runtime clusters",
        kcp.url(),
        garden.url(),
        clusters.len()
    );

    // kim webhook, and the admission stage calling it for the control cluster.
    let cert_dir = tmp.join("certs");
    let mut args = testenv::process::kim_webhook_args(&cert_dir, false);
    args.extend(["--log-format".into(), "json".into()]);
    let mut webhook = spawn(&kim, &args, tmp.join("webhook.log"))?;
    let addr: SocketAddr = logged_field(&mut webhook, "addr").await?.parse()?;
    let metrics_addr = logged_field(&mut webhook, "metrics_addr").await?;
    println!(
        "{} kim webhook serving on {addr} (kim-webhook.kim-system.svc → {addr})",
        stamp()
    );
    let stage = WebhookStage::new(configs, addr);
    stage.install(&kcp);
    {
        let stage = stage.clone();
        kcp.set_admission_async(move |req| {
            let stage = stage.clone();
            async move {
                let (user, name) = (req.user.username.clone(), req.name.clone());
                let status = req.subresource.as_deref() == Some("status");
                let decision = stage.admit(req).await;
                if status && let AdmissionDecision::Deny { code, message } = &decision {
                    println!(
                        "{} ✗ {name}: status write by {user} DENIED ({code}): {message}",
                        stamp()
                    );
                }
                decision
            }
        });
    }

    // kim controller.
    let kcp_kubeconfig = tmp.join("kcp.kubeconfig");
    let garden_kubeconfig = tmp.join("garden.kubeconfig");
    std::fs::write(&kcp_kubeconfig, kcp.kubeconfig_yaml(Some(CONTROLLER_TOKEN)))?;
    std::fs::write(&garden_kubeconfig, garden.kubeconfig_yaml(None))?;
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
    println!("{} kim controller running (as {CONTROLLER_USER})", stamp());

    // Print every status change, read from the control cluster's journal of committed
    // changes (a state that lasted one write is printed too). Opened before the first Runtime
    // is created; ends when told to, after printing what the journal holds by then.
    let journal = kcp.journal();
    let (printer_stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let printer = tokio::spawn(async move {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut pos = 0;
        let mut done = false;
        loop {
            for change in journal.since(pos) {
                pos += 1;
                if change.gvr != Gvr::runtimes() || change.namespace() != Some(NS) {
                    continue;
                }
                let name = change.name().to_string();
                if change.kind == EventType::Deleted {
                    seen.remove(&name);
                    println!("{} {name:<14} deleted", stamp());
                    continue;
                }
                let s = if change.object.get("status").is_some() {
                    summary(&change.object)
                } else {
                    "(no status yet)".to_string()
                };
                if seen.get(&name) != Some(&s) {
                    println!("{} {name:<14} {s}", stamp());
                    seen.insert(name, s);
                }
            }
            if done {
                return;
            }
            tokio::select! {
                _ = journal.grown(pos) => {}
                _ = &mut stopped => done = true,
            }
        }
    });
    let stepper = sim.run_every(Duration::from_millis(500));

    // ---- provisioning ----
    let api: Api<DynamicObject> = Api::namespaced_with(kcp.client(), NS, &runtime_resource());
    println!(
        "{} --- creating {} sample Runtimes ---",
        stamp(),
        runtimes.len()
    );
    let mut names = Vec::new();
    for rt in &runtimes {
        let obj: DynamicObject = serde_json::from_value(rt.clone())?;
        names.push(obj.metadata.name.clone().unwrap_or_default());
        api.create(&PostParams::default(), &obj).await?;
    }
    let state = |n: &str| {
        kcp.get(&Gvr::runtimes(), Some(NS), n)
            .and_then(|r| r["status"]["state"].as_str().map(String::from))
    };
    let all_ready = || names.iter().all(|n| state(n).as_deref() == Some("Ready"));
    wait("every Runtime Ready", all_ready).await?;
    println!("{} --- every Runtime is Ready ---", stamp());

    // ---- the rogue client ----
    let victim = names[0].clone();
    println!(
        "{} --- a rogue client ({ROGUE_USER}) rewrites {victim}'s status to Failed ---",
        stamp()
    );
    let rogue: Api<DynamicObject> =
        Api::namespaced_with(kcp.client_as(Some(ROGUE_TOKEN)), NS, &runtime_resource());
    let r = rogue
        .patch_status(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": "Failed"}})),
        )
        .await;
    report("the rogue client's write", r)?;
    println!(
        "{} --- the controller's own token (say, leaked) writes a reason the model does not know ---",
        stamp()
    );
    let impostor: Api<DynamicObject> = Api::namespaced_with(
        kcp.client_as(Some(CONTROLLER_TOKEN)),
        NS,
        &runtime_resource(),
    );
    let mut obj = impostor.get(&victim).await?;
    obj.data["status"]["conditions"][0]["reason"] = json!("BecauseISaidSo");
    let r = impostor
        .replace_status(&victim, &PostParams::default(), &obj)
        .await;
    report("the write with an unknown reason", r)?;

    // ---- deletion ----
    println!("{} --- deleting every Runtime ---", stamp());
    for n in &names {
        api.delete(n, &DeleteParams::default()).await?;
    }
    let all_gone = || {
        names
            .iter()
            .all(|n| kcp.get(&Gvr::runtimes(), Some(NS), n).is_none())
    };
    wait("every Runtime deleted", all_gone).await?;
    stepper.abort();
    let _ = printer_stop.send(());
    printer.await?;

    // ---- summary ----
    let log = stage.log();
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
    let metrics = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let counters: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kim_webhook_requests_total{"))
        .collect();
    controller.stop();
    webhook.stop();
    println!("==================================================================================");
    println!(
        " SIMULATION done in {:.1} s: {} Runtimes provisioned and deleted.",
        t0.elapsed().as_secs_f64(),
        names.len()
    );
    println!(
        " runtimes/status writes through the admission stage: {} admitted, {denied} denied; \
         {calls} webhook calls over HTTPS.",
        admitted
    );
    println!(" kim webhook's own counters:");
    for c in counters {
        println!("   {c}");
    }
    println!("==================================================================================");
    if denied != 2 {
        return Err(format!("expected the 2 rogue writes denied, {denied} were").into());
    }
    Ok(())
}

/// Polls `done` until it holds, for at most [`DEADLINE`].
async fn wait(what: &str, done: impl Fn() -> bool) -> Res<()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > DEADLINE {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Prints the apiserver's answer to a write that should be denied.
fn report(what: &str, r: Result<DynamicObject, kube::Error>) -> Res<()> {
    match r {
        Err(kube::Error::Api(s)) => {
            println!(
                "    → {what} was refused: HTTP {} {}: {}",
                s.code, s.reason, s.message
            );
            Ok(())
        }
        Err(e) => Err(format!("{what}: unexpected error: {e}").into()),
        Ok(_) => Err(format!("{what} was admitted — it should not have been").into()),
    }
}
