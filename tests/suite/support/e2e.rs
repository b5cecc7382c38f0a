//! Helpers of the end-to-end tests (`e2e_admission`): certificates made by
//! `certs/gen-certs.sh` for a copy of `manifests/`, the real `kim webhook` and `kim controller`
//! processes, and the control cluster's admission going through testenv's
//! [`WebhookStage`] (the webhook configurations of the static-ca overlay, called over HTTPS as
//! kube-apiserver calls them).
#![allow(dead_code)]

use crate::support::reconciler::{CONTROLLER_USER, Env, NS, Seen, TIMEOUT, Write, manifest_dir};
use kim::api::Runtime;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testenv::process::Process;
use testenv::webhook_stage::{AdmissionRecord, StageResult};
use testenv::{
    AdmissionDecision, Gvr, ServerHandle, UserInfo, WebhookConfigurations, WebhookStage,
};

/// Token of the rogue user [`ROGUE_USER`] on the control cluster.
pub const ROGUE_TOKEN: &str = "rogue-token";
/// A service account that is not an allowed writer of Runtime status.
pub const ROGUE_USER: &str = "system:serviceaccount:other:rogue";
/// Token of the controller's identity (the same user as the controller) used by the rogue
/// client for writes the status model forbids to anyone.
pub const IMPOSTOR_TOKEN: &str = "controller-identity-token";
/// Name of the validating webhook in `manifests/base/webhook-configurations.yaml`.
pub const VALIDATE_HOOK: &str = "runtime-status.validate.kim.kyma-project.io";
/// Name of the mutating webhook.
pub const MUTATE_HOOK: &str = "runtime-status.mutate.kim.kyma-project.io";

/// A copy of `manifests/` with the static-ca overlay's caBundle filled in by
/// `certs/gen-certs.sh`, and the certificates it made (`out/`: `ca.crt`, `tls.crt`,
/// `tls.key`, …; private keys stay in the temp dir).
pub struct Certs {
    pub dir: tempfile::TempDir,
}

impl Certs {
    /// Copies `manifests/` to a temp dir and runs
    /// `certs/gen-certs.sh --out <tmp>/out --overlay <tmp>/manifests/overlays/static-ca`
    /// (needs `bash` and `openssl`).
    pub fn generate() -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(
            &manifest_dir().join("manifests"),
            &dir.path().join("manifests"),
        );
        let out = Command::new("bash")
            .arg(manifest_dir().join("certs/gen-certs.sh"))
            .arg("--out")
            .arg(dir.path().join("out"))
            .arg("--overlay")
            .arg(dir.path().join("manifests/overlays/static-ca"))
            .stdin(Stdio::null())
            .output()
            .expect("run certs/gen-certs.sh (bash)");
        assert!(
            out.status.success(),
            "certs/gen-certs.sh failed (is openssl installed?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs { dir }
    }

    /// The certificate directory for `kim webhook --cert-dir`.
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The static-ca overlay of the copy (with the generated caBundle).
    pub fn overlay(&self) -> PathBuf {
        self.dir.path().join("manifests/overlays/static-ca")
    }

    /// The webhook configurations of the overlay.
    pub fn configurations(&self) -> WebhookConfigurations {
        WebhookConfigurations::from_kustomization(&self.overlay())
            .expect("the static-ca overlay's webhook configurations load")
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("dir entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// Spawns `kim <args>` with `RUST_LOG` as given (or unset), output captured.
pub fn spawn_kim<S: AsRef<std::ffi::OsStr>>(args: &[S], rust_log: Option<&str>) -> Process {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
    cmd.args(args).env_remove("RUST_LOG");
    if let Some(l) = rust_log {
        cmd.env("RUST_LOG", l);
    }
    Process::spawn(&mut cmd).expect("spawn kim")
}

/// The string field `field` of the first JSON log line of `p` that has one (up to 60 s).
pub async fn logged(p: &mut Process, field: &str) -> String {
    p.logged(field, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("kim: {e}"))
}

/// `kim webhook --cert-dir <certs> --addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0
/// --log-format json` (no `--dev`: the certificates of gen-certs.sh, as in a cluster), with
/// the addresses it logged.
pub struct WebhookProc {
    pub proc: Process,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
}

impl WebhookProc {
    /// Starts it and waits for its "kim webhook serving" log line.
    pub async fn start(cert_dir: &Path) -> WebhookProc {
        WebhookProc::start_with(cert_dir, &[]).await
    }

    /// As [`WebhookProc::start`], with `extra` arguments after the usual ones.
    pub async fn start_with(cert_dir: &Path, extra: &[&str]) -> WebhookProc {
        let mut args = testenv::process::kim_webhook_args(cert_dir, false);
        args.extend(["--log-format".into(), "json".into()]);
        args.extend(extra.iter().map(|a| a.into()));
        let mut proc = spawn_kim(&args, None);
        let addr = logged(&mut proc, "addr").await.parse().expect("addr");
        let metrics_addr = logged(&mut proc, "metrics_addr")
            .await
            .parse()
            .expect("addr");
        WebhookProc {
            proc,
            addr,
            metrics_addr,
        }
    }

    /// `kim_webhook_requests_total` by (path, decision, code), from `/metrics`.
    pub async fn requests(&self) -> HashMap<(String, String, u16), u64> {
        let text = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("http://{}/metrics", self.metrics_addr))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("scrape /metrics")
            .text()
            .await
            .expect("metrics body");
        let mut out = HashMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("kim_webhook_requests_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let mut path = String::new();
            let mut decision = String::new();
            let mut code = 0;
            for kv in labels.split(',') {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                let v = v.trim_matches('"');
                match k {
                    "path" => path = v.to_string(),
                    "decision" => decision = v.to_string(),
                    "code" => code = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            out.insert((path, decision, code), value.trim().parse().unwrap_or(0));
        }
        out
    }

    /// Total answers on `path` (`/validate` or `/mutate`) with `decision`.
    pub async fn count(&self, path: &str, decision: &str) -> u64 {
        self.requests()
            .await
            .iter()
            .filter(|((p, d, _), _)| p == path && d == decision)
            .map(|(_, n)| *n)
            .sum()
    }
}

/// `kim controller` as a process against an [`Env`] ([`Env::controller_process`]), logging
/// at `info`.
pub fn start_controller(env: &Env, dir: &Path) -> Process {
    env.controller_process(dir, false, &[], "info")
}

/// The whole chain: the three in-memory clusters and the simulated Gardener ([`Env`], no
/// in-process controller), `kim webhook` with gen-certs.sh certificates, and the control
/// cluster's admission going through the [`WebhookStage`] of the static-ca overlay's
/// configurations, resolved to the webhook process. Status writes the stage allowed are
/// recorded in `env.writes` (as the final, possibly mutated, status).
pub struct E2e {
    pub env: Env,
    pub certs: Certs,
    pub webhook: WebhookProc,
    pub stage: WebhookStage,
    /// Runtime cluster per Shoot name.
    pub clusters: Arc<Mutex<HashMap<String, ServerHandle>>>,
}

impl E2e {
    /// Starts everything but the controller; `tune` may change the loaded configurations
    /// (e.g. `failurePolicy`) before the stage is built.
    pub async fn start_with(tune: impl FnOnce(&mut WebhookConfigurations)) -> E2e {
        let certs = Certs::generate();
        let env = Env::without_controller().await;
        env.kcp.add_user(
            ROGUE_TOKEN,
            UserInfo::new(ROGUE_USER, &["system:authenticated"]),
        );
        env.kcp.add_user(
            IMPOSTOR_TOKEN,
            UserInfo::new(CONTROLLER_USER, &["system:authenticated"]),
        );
        let webhook = WebhookProc::start(&certs.out()).await;
        let mut configs = certs.configurations();
        tune(&mut configs);
        let stage = WebhookStage::new(configs, webhook.addr);
        let e2e = E2e {
            env,
            certs,
            webhook,
            stage,
            clusters: Arc::default(),
        };
        e2e.install_stage();
        e2e
    }

    /// As [`E2e::start_with`] with the configurations as loaded.
    pub async fn start() -> E2e {
        E2e::start_with(|_| {}).await
    }

    /// Installs the stage on the control cluster (with the recording of allowed status
    /// writes into `env.writes`).
    pub fn install_stage(&self) {
        self.stage.install(&self.env.kcp);
        let stage = self.stage.clone();
        let writes = self.env.writes.clone();
        self.env.kcp.set_admission_async(move |req| {
            let stage = stage.clone();
            let writes = writes.clone();
            async move {
                let is_status = req.gvr == Gvr::runtimes()
                    && req.subresource.as_deref() == Some("status")
                    && req.object.is_some();
                let name = req.name.clone();
                let object = req.object.clone();
                let decision = stage.admit(req).await;
                if is_status {
                    let stored = match &decision {
                        AdmissionDecision::Mutate(o) => Some(o.clone()),
                        AdmissionDecision::Allow => object,
                        AdmissionDecision::Deny { .. } => None,
                    };
                    if let Some(o) = stored {
                        writes.lock().unwrap().push(write_of(&name, &o));
                    }
                }
                decision
            }
        });
    }

    /// Gives each of `rts`' Shoots its own runtime cluster ([`Env::runtime_clusters`]).
    pub async fn runtime_clusters(&self, rts: &[Runtime]) {
        let clusters = self.env.runtime_clusters(rts).await;
        self.clusters.lock().unwrap().extend(clusters);
    }

    /// The stage's records of `runtimes/status` writes of Runtime `name`.
    pub fn status_records(&self, name: &str) -> Vec<AdmissionRecord> {
        self.stage
            .log()
            .into_iter()
            .filter(|r| {
                r.gvr == Gvr::runtimes()
                    && r.subresource.as_deref() == Some("status")
                    && r.name == name
            })
            .collect()
    }

    /// [`Env::wait`] with 4 × [`TIMEOUT`] (real processes start slower); the panic message
    /// also lists the writes the admission stage rejected.
    pub async fn wait(&self, what: &str, check: impl FnMut(&Seen) -> bool) {
        let rejected = || {
            let rejected: Vec<String> = self
                .stage
                .log()
                .iter()
                .filter_map(|r| match &r.result {
                    StageResult::Rejected { code, message } => Some(format!(
                        "{} {} by {}: {code} {message}",
                        r.operation, r.name, r.user
                    )),
                    _ => None,
                })
                .collect();
            format!("rejected: {rejected:#?}")
        };
        self.env.wait_with(what, TIMEOUT * 4, check, rejected).await;
    }
}

/// A [`Write`] from a Runtime object.
pub fn write_of(name: &str, obj: &Value) -> Write {
    let status = obj.get("status").cloned().unwrap_or(Value::Null);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Write {
        name: name.to_string(),
        state: s(&status["state"]),
        conditions: status["conditions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| (s(&c["type"]), s(&c["status"]), s(&c["reason"])))
                    .collect()
            })
            .unwrap_or_default(),
        last_op: status
            .get("shootLastOperation")
            .map(|o| (s(&o["type"]), s(&o["state"]))),
        completed: status["provisioningCompleted"] == Value::Bool(true),
        status,
    }
}

/// The sample Runtimes (`samples/runtimes`), each with a unique name, Shoot name and
/// runtime id (`<prefix>-<n>`), so that all can live side by side.
pub fn sample_runtimes(prefix: &str) -> Vec<Runtime> {
    let mut files: Vec<String> = std::fs::read_dir(crate::support::reconciler::samples_dir())
        .expect("samples dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut rt = crate::support::reconciler::sample(f);
            let name = format!("{prefix}-{i}");
            rt.metadata.name = Some(name.clone());
            rt.metadata.namespace = Some(NS.to_string());
            let labels = rt.metadata.labels.get_or_insert_with(Default::default);
            labels.insert("kyma-project.io/runtime-id".into(), name.clone());
            labels.insert("kyma-project.io/shoot-name".into(), name.clone());
            rt.spec.shoot.name = name;
            rt
        })
        .collect()
}
