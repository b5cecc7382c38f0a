//! kim installed on a real control plane ([`testenv::controlplane`]), as a user installs it:
//! `manifests/crd.yaml`, then a kustomize directory of `manifests/` (the base, or an overlay)
//! with its webhook configurations pointed at a real `kim webhook` process on 127.0.0.1
//! (envtest's rewrite: `clientConfig.url` and `caBundle`, everything else as shipped).
//!
//! Each [`Stack`] has a control plane of its own: webhook configurations and RBAC are
//! cluster-wide and the shipped ones name fixed namespaces (`kcp-system`, `kim-system`).

use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane, Installed, WebhookCerts};
use testenv::process::Process;

/// Where Runtimes live in the shipped manifests (the controller's RBAC; the webhooks judge
/// every namespace).
pub const NS: &str = "kcp-system";
/// The webhook configurations' name in `manifests/base/webhook-configurations.yaml`.
pub const CONFIG_NAME: &str = "kim-runtime-status";
/// Name of the validating webhook.
pub const VALIDATE_HOOK: &str = "runtime-status.validate.kim.kyma-project.io";
/// Name of the mutating webhook.
pub const MUTATE_HOOK: &str = "runtime-status.mutate.kim.kyma-project.io";

/// The Runtime whose status writes [`Stack::wait_until_judged`] sends until one is denied.
pub const PROBE: &str = "webhook-ready-probe";

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `manifests/<rel>`.
pub fn manifests(rel: &str) -> PathBuf {
    repo().join("manifests").join(rel)
}

/// The Runtime resource for dynamic clients.
pub fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

/// A control plane with kim's CRD and one kustomize directory of `manifests/` installed, and
/// the real `kim webhook` those configurations call.
pub struct Stack {
    pub cp: ControlPlane,
    pub certs: WebhookCerts,
    /// `None` after [`Stack::stop_webhook`].
    pub webhook: Option<WebhookProc>,
    /// Where the configurations point (the webhook's address, kept after it stops).
    pub addr: std::net::SocketAddr,
    pub installed: Installed,
}

impl Stack {
    /// Starts a control plane and `kim webhook` (with `extra` arguments), creates
    /// `kcp-system`, installs `manifests/crd.yaml` and then `manifests/<dir>` (e.g. `base`,
    /// `overlays/guard-kim`), and waits until the webhook judges status writes.
    pub async fn start(dir: &str, extra: &[&str]) -> Stack {
        let certs = WebhookCerts::generate();
        let webhook = WebhookProc::start_with(certs.dir.path(), extra).await;
        let cp = ControlPlane::start().expect("control plane");
        Stack::install(cp, dir, certs, webhook.addr, Some(webhook)).await
    }

    /// As [`Stack::start`], on a control plane the caller started (e.g. one serving the
    /// Gardener API too).
    pub async fn start_on(cp: ControlPlane, dir: &str, extra: &[&str]) -> Stack {
        let certs = WebhookCerts::generate();
        let webhook = WebhookProc::start_with(certs.dir.path(), extra).await;
        Stack::install(cp, dir, certs, webhook.addr, Some(webhook)).await
    }

    /// As [`Stack::start`], with the configurations pointed at a server of the caller's own
    /// on `addr`, serving with `certs` (their CA becomes the `caBundle`); no `kim webhook`
    /// runs. That server must deny, on `/validate`, a status write of Runtime [`PROBE`]: the
    /// stack waits for that denial before it is returned.
    pub async fn start_pointing_at(
        dir: &str,
        addr: std::net::SocketAddr,
        certs: WebhookCerts,
    ) -> Stack {
        let cp = ControlPlane::start().expect("control plane");
        Stack::install(cp, dir, certs, addr, None).await
    }

    async fn install(
        cp: ControlPlane,
        dir: &str,
        certs: WebhookCerts,
        addr: std::net::SocketAddr,
        webhook: Option<WebhookProc>,
    ) -> Stack {
        cp.create_namespace(NS).await;
        let crd = std::fs::read_to_string(manifests("crd.yaml")).expect("manifests/crd.yaml");
        cp.install_crds(&crd).await.expect("kim's CRD installs");
        let installed = cp
            .install_kustomize(&manifests(dir), addr, &certs.ca_pem)
            .await
            .unwrap_or_else(|e| panic!("installing manifests/{dir}: {e}"));
        let stack = Stack {
            cp,
            certs,
            webhook,
            addr,
            installed,
        };
        stack.wait_until_judged().await;
        stack
    }

    /// The Runtimes API of `kcp-system` as the admin (`system:masters`, an allowed writer).
    pub async fn runtimes(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.cp.admin().await, NS, &runtime_resource())
    }

    /// The Runtimes API of `kcp-system` as `user`.
    pub async fn runtimes_as(&self, user: &ClientCert) -> Api<DynamicObject> {
        Api::namespaced_with(self.cp.client(user).await, NS, &runtime_resource())
    }

    /// Creates the sample `aws-minimal.yaml` as `name` in `kcp-system` (no status).
    pub async fn create_runtime(&self, name: &str) -> DynamicObject {
        self.create_sample("aws-minimal.yaml", name, |_| {}).await
    }

    /// Creates `samples/runtimes/<file>` as `name` in `kcp-system` (as the admin, no status),
    /// after `edit` changed the object.
    pub async fn create_sample(
        &self,
        file: &str,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> DynamicObject {
        let text = std::fs::read_to_string(repo().join("samples/runtimes").join(file))
            .unwrap_or_else(|e| panic!("sample {file}: {e}"));
        let mut obj: Value = serde_saphyr::from_str(&text).expect("sample parses");
        obj["metadata"]["name"] = json!(name);
        obj["metadata"]["namespace"] = json!(NS);
        edit(&mut obj);
        let obj: DynamicObject = serde_json::from_value(obj).expect("dynamic object");
        self.runtimes()
            .await
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating Runtime {name}: {e}"))
    }

    /// Polls (every 200 ms, at most 30 s) until a status write that the model refuses but the
    /// CRD's schema accepts (`Ready` with no condition) is refused by the validating webhook:
    /// a new configuration takes effect a moment after it is created. The probe is Runtime
    /// [`PROBE`], deleted afterwards.
    pub async fn wait_until_judged(&self) {
        let name = PROBE;
        self.create_runtime(name).await;
        let api = self.runtimes().await;
        let bad = json!({"status": {"state": "Ready"}});
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let last = match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&bad))
                .await
            {
                Err(kube::Error::Api(s)) if s.message.contains(VALIDATE_HOOK) => break,
                // Stored before the configuration took effect: a second `Ready` would be
                // ratcheted (allowed), so start again from a Runtime without status.
                Ok(_) => {
                    api.delete(name, &DeleteParams::default())
                        .await
                        .expect("delete the probe");
                    self.create_runtime(name).await;
                    "stored".to_string()
                }
                other => format!("{other:?}"),
            };
            assert!(
                Instant::now() < deadline,
                "the webhook did not judge status writes within 30 s; last answer: {last}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete the probe");
    }

    /// Stops the webhook process (SIGTERM, 10 s grace); the configurations stay.
    pub async fn stop_webhook(&mut self) {
        if let Some(mut w) = self.webhook.take() {
            w.proc.terminate(Duration::from_secs(10));
        }
    }
}

/// Spawns `kim <args>` with `RUST_LOG` as given (or unset), output captured.
fn spawn_kim<S: AsRef<std::ffi::OsStr>>(args: &[S], rust_log: Option<&str>) -> Process {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
    cmd.args(args).env_remove("RUST_LOG");
    if let Some(l) = rust_log {
        cmd.env("RUST_LOG", l);
    }
    Process::spawn(&mut cmd).expect("spawn kim")
}

/// The string field `field` of the first JSON log line of `p` that has one (up to 60 s).
async fn logged(p: &mut Process, field: &str) -> String {
    p.logged(field, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("kim: {e}"))
}

/// `kim webhook --cert-dir <certs> --addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0
/// --log-format json` (no `--dev`: the certificates in `<certs>`, as in a cluster), with
/// the addresses it logged.
pub struct WebhookProc {
    pub proc: Process,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
}

impl WebhookProc {
    /// Starts it with `extra` arguments after the usual ones and waits for its "kim webhook
    /// serving" log line.
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
