//! `kim controller` against a real control cluster and the REAL Gardener API ([`RealEnv`]): a
//! [`Stack`] (kube-apiserver with kim's CRD, `manifests/base` and the real `kim webhook`), the
//! controller process authenticated as its ServiceAccount `kim-system/kim-controller` with a
//! TokenRequest token and nothing but the RBAC the manifests ship ([`Kcp`]). The same
//! kube-apiserver serves the control cluster and, aggregated behind it, gardener-apiserver
//! ([`testenv::garden`]) with the project `kyma-dev`, its CloudProfiles,
//! ControllerRegistrations and credentials installed; the controller's `--gardener-kubeconfig`
//! is the garden user [`GARDEN_USER`] (a client certificate), whom a Role in `garden-kyma-dev`
//! lets do what kim does there; a simulated gardenlet ([`testenv::gardenlet`]) runs the Shoots
//! and starts REAL runtime clusters (kube-apiserver and etcd), so kim's kubeconfig comes from
//! the real `shoots/adminkubeconfig` and kim binds the administrators in a real cluster.
//!
//! Waits watch the real server (`await_condition`) for a state that stays once reached
//! (`Ready` until the test deletes the Runtime, a Runtime gone, an RBAC answer after a Role
//! change), read the controller's output, which only grows, or the gardenlet's history.

use crate::support::real::{NS, Stack, repo};
use crate::support::reconciler::{CONTROLLER_USER, GARDEN_NS};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use testenv::controlplane::{ClientCert, ControlPlane, Options};
use testenv::gardenlet::{Clusters, Gardenlet, GardenletConfig};
use testenv::process::Process;

/// The controller's ServiceAccount (namespace, name), as `manifests/base` creates it.
pub const CONTROLLER_SA: (&str, &str) = ("kim-system", "kim-controller");
/// The webhook's ServiceAccount.
pub const WEBHOOK_SA: (&str, &str) = ("kim-system", "kim-webhook");
/// The shipped Role in the Runtimes' namespace.
pub const ROLE: (&str, &str) = (NS, "kim-controller");
/// The shipped leader-election Role.
pub const LEADER_ROLE: (&str, &str) = ("kim-system", "kim-controller-leader-election");
/// Where the controller's leader-election Lease lives (its defaults, the shipped RBAC's).
pub const LEASE: (&str, &str) = ("kim-system", "kim-controller");
/// Generous limit of every wait on the real server and processes.
pub const LIMIT: Duration = Duration::from_secs(90);
/// The garden user kim runs as on the real Gardener API (a client certificate's CN); the
/// admin kubeconfigs Gardener hands it are for `gardener.cloud:admin:<this>`.
pub const GARDEN_USER: &str = "kim-gardener";
/// The Role (and RoleBinding) of [`GARDEN_USER`] in the project namespace.
pub const GARDEN_ROLE: &str = "kim-gardener";

/// The control cluster with kim installed, the controller's token and the files the controller
/// processes read ([`RealEnv`] dereferences to it).
pub struct Kcp {
    pub stack: Stack,
    /// Kubeconfig files and the configuration of the controller processes.
    pub dir: tempfile::TempDir,
    /// The controller ServiceAccount's token.
    pub token: String,
}

impl Kcp {
    async fn new(stack: Stack) -> Kcp {
        let token = stack
            .cp
            .service_account_token(CONTROLLER_SA.0, CONTROLLER_SA.1)
            .await;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("kcp.kubeconfig"),
            stack.cp.kubeconfig_with_token(&token),
        )
        .unwrap();
        Kcp { stack, dir, token }
    }

    /// `kim controller` as deployed (leader election on, `--namespace kcp-system`, the Lease
    /// in kim-system), as the ServiceAccount, with the garden kubeconfig and converter
    /// configuration of `dir`, `RUST_LOG=rust_log`.
    fn spawn(&self, config: &std::path::Path, rust_log: &str) -> Process {
        let args = testenv::process::kim_controller_args(
            &self.dir.path().join("kcp.kubeconfig"),
            &self.dir.path().join("garden.kubeconfig"),
            config,
            NS,
            true,
        );
        Process::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_kim"))
                .args(args)
                .args(["--lease-duration-seconds", "6"])
                .env_remove("KUBECONFIG")
                .env("RUST_LOG", rust_log),
        )
        .expect("spawn kim controller")
    }

    /// A client of the control cluster as the controller's ServiceAccount.
    pub async fn controller_client(&self) -> kube::Client {
        self.stack
            .cp
            .client_from_kubeconfig(&self.stack.cp.kubeconfig_with_token(&self.token))
            .await
    }

    /// The Runtimes API of kcp-system as the admin.
    pub async fn runtimes(&self) -> Api<DynamicObject> {
        self.stack.runtimes().await
    }

    /// Watches Runtime `name` until `cond` holds (at most [`LIMIT`]); panics with `what` and
    /// the controller's output.
    pub async fn wait_runtime(
        &self,
        name: &str,
        what: &str,
        cond: impl Condition<DynamicObject>,
        controller: &Process,
    ) -> Option<DynamicObject> {
        let api = self.runtimes().await;
        match tokio::time::timeout(LIMIT, await_condition(api.clone(), name, cond)).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => panic!("watching Runtime {name}: {e}"),
            Err(_) => panic!(
                "Runtime {name} not {what} within {LIMIT:?}; now: {:?}\ncontroller stdout:\n{}\nstderr:\n{}",
                api.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .map(|o| o.data["status"].clone()),
                controller.stdout(),
                controller.stderr()
            ),
        }
    }

    /// Removes the finalizers of Runtime `name` and deletes it as the admin (no controller
    /// involved), then watches until it is gone.
    pub async fn force_delete(&self, name: &str) {
        let api = self.runtimes().await;
        let Ok(Some(obj)) = api.get_opt(name).await else {
            return;
        };
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("removing the finalizers of {name}: {e}"));
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => panic!("deleting Runtime {name}: {e}"),
        }
        let gone = await_condition(api, name, kube::runtime::conditions::is_deleted(&uid));
        tokio::time::timeout(LIMIT, gone)
            .await
            .unwrap_or_else(|_| panic!("Runtime {name} not gone within {LIMIT:?}"))
            .unwrap_or_else(|e| panic!("watching Runtime {name}: {e}"));
    }

    /// The rules of Role `namespace/name` as installed.
    pub async fn role_rules(&self, (namespace, name): (&str, &str)) -> Vec<PolicyRule> {
        let api: Api<Role> = Api::namespaced(self.stack.cp.admin().await, namespace);
        api.get(name)
            .await
            .unwrap_or_else(|e| panic!("reading Role {namespace}/{name}: {e}"))
            .rules
            .unwrap_or_default()
    }

    /// Replaces the rules of Role `namespace/name` (as the admin).
    pub async fn set_role_rules(&self, (namespace, name): (&str, &str), rules: &[PolicyRule]) {
        let api: Api<Role> = Api::namespaced(self.stack.cp.admin().await, namespace);
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": rules})),
        )
        .await
        .unwrap_or_else(|e| panic!("patching Role {namespace}/{name}: {e}"));
    }

    /// Whether `client`'s user may `verb` `group/resource[/subresource]` (object `name`, if
    /// given) in `namespace`, by a SelfSubjectAccessReview.
    pub async fn can(client: &kube::Client, access: &Access<'_>) -> bool {
        let (resource, subresource) = match access.resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (access.resource, None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(access.group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource,
                    verb: Some(access.verb.to_string()),
                    namespace: Some(access.namespace.to_string()),
                    name: access.name.map(String::from),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .unwrap_or_else(|e| panic!("SelfSubjectAccessReview {access:?}: {e}"));
        answer.status.is_some_and(|s| s.allowed)
    }

    /// Polls [`Kcp::can`] as the controller (every 100 ms, at most [`LIMIT`]) until the
    /// answer is `allowed`: the RBAC authorizer sees a Role change a moment after it is stored.
    pub async fn wait_access(&self, access: &Access<'_>, allowed: bool) {
        let client = self.controller_client().await;
        let seen = crate::support::eventually(LIMIT, || {
            let client = client.clone();
            async move { (Self::can(&client, access).await == allowed).then_some(()) }
        })
        .await;
        assert!(
            seen.is_some(),
            "{CONTROLLER_USER} {} {access:?} within {LIMIT:?}",
            if allowed {
                "not allowed"
            } else {
                "still allowed"
            }
        );
    }
}

/// Sets the name, Shoot name and runtime ID of a sample Runtime to `name`.
fn name_sample(obj: &mut Value, name: &str) {
    obj["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!(name);
    obj["metadata"]["labels"]["kyma-project.io/shoot-name"] = json!(name);
    obj["spec"]["shoot"]["name"] = json!(name);
}

/// The control cluster WITH the real Gardener API, the simulated gardenlet and real runtime
/// clusters (module documentation).
pub struct RealEnv {
    /// The gardenlet on the project namespace [`GARDEN_NS`]. First: dropped (its watch
    /// stopped, its runtime clusters too) before the control plane it watches.
    pub gardenlet: Gardenlet,
    pub kcp: Kcp,
    /// [`GARDEN_USER`]'s client certificate (the controller's `--gardener-kubeconfig`).
    pub garden_user: ClientCert,
    /// The converter configuration the controllers run with.
    pub config: PathBuf,
}

impl std::ops::Deref for RealEnv {
    type Target = Kcp;
    fn deref(&self) -> &Kcp {
        &self.kcp
    }
}

/// Rules of [`GARDEN_ROLE`]: what kim does in the project namespace (Shoots, their admin
/// kubeconfigs, the structured-authentication ConfigMaps), and reading the Secrets a Shoot's
/// `spec.resources` names (Gardener's ResourceReferenceManager admission refuses a Shoot
/// referencing what its author may not `get`).
fn garden_rules() -> Value {
    json!([
        {"apiGroups": ["core.gardener.cloud"], "resources": ["shoots"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": ["core.gardener.cloud"], "resources": ["shoots/adminkubeconfig"],
         "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ])
}

impl RealEnv {
    /// [`RealEnv::start_with`] a runtime cluster per Shoot.
    pub async fn start() -> RealEnv {
        Self::start_with(Clusters::PerShoot).await
    }

    /// Starts the control plane with gardener-apiserver, installs kim (`manifests/base`, the
    /// webhook) and the Gardener fixtures, grants [`GARDEN_USER`] its Role, writes the
    /// kubeconfigs and the converter configuration, and starts the gardenlet with `clusters`.
    pub async fn start_with(clusters: Clusters) -> RealEnv {
        let _ = rustls::crypto::ring::default_provider().install_default();
        crate::support::logs::init();
        let cp = ControlPlane::start_with(Options {
            gardener: true,
            ..Options::default()
        })
        .expect("control plane with gardener-apiserver");
        let stack = Stack::start_on(cp, "base", &[]).await;
        let admin = stack.cp.admin().await;
        let project = GARDEN_NS.strip_prefix("garden-").expect("garden-<project>");
        testenv::garden::install_fixtures(&admin, project)
            .await
            .unwrap_or_else(|e| panic!("Gardener fixtures: {e}"));
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": GARDEN_ROLE, "namespace": GARDEN_NS},
            "rules": garden_rules(),
        }))
        .unwrap();
        Api::<Role>::namespaced(admin.clone(), GARDEN_NS)
            .create(&PostParams::default(), &role)
            .await
            .expect("the garden user's Role");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": GARDEN_ROLE, "namespace": GARDEN_NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GARDEN_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": GARDEN_USER}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(admin.clone(), GARDEN_NS)
            .create(&PostParams::default(), &binding)
            .await
            .expect("the garden user's RoleBinding");
        let garden_user = stack.cp.user(GARDEN_USER, &[]);
        let kcp = Kcp::new(stack).await;
        std::fs::write(
            kcp.dir.path().join("garden.kubeconfig"),
            kcp.stack.cp.kubeconfig(&garden_user),
        )
        .unwrap();
        let config = kcp.dir.path().join("config.yaml");
        std::fs::write(&config, converter_config()).unwrap();
        let gardenlet = Gardenlet::start(admin, GardenletConfig::new(GARDEN_NS).clusters(clusters));
        RealEnv {
            gardenlet,
            kcp,
            garden_user,
            config,
        }
    }

    /// `kim controller` as deployed (leader election on, `--namespace kcp-system`, the Lease
    /// in kim-system), as the ServiceAccount and [`GARDEN_USER`], with `RUST_LOG=rust_log`.
    pub fn spawn_controller(&self, rust_log: &str) -> Process {
        self.kcp.spawn(&self.config, rust_log)
    }

    /// A client of the garden (the same kube-apiserver) as [`GARDEN_USER`].
    pub async fn garden_client(&self) -> kube::Client {
        self.stack.cp.client(&self.garden_user).await
    }

    /// The Shoots of [`GARDEN_NS`] as the admin.
    pub async fn shoots(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.stack.cp.admin().await,
            GARDEN_NS,
            &testenv::gardenlet::shoot_resource(),
        )
    }

    /// Shoot `name` as stored, if any.
    pub async fn shoot(&self, name: &str) -> Option<DynamicObject> {
        self.shoots()
            .await
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading Shoot {name}: {e}"))
    }

    /// Creates the sample `aws-minimal.yaml` as `name`, with Shoot name and runtime ID `name`
    /// (as the admin, no status).
    pub async fn create_runtime(&self, name: &str) -> DynamicObject {
        self.create_sample("aws-minimal.yaml", name).await
    }

    /// Creates `samples/runtimes/<file>` as `name`, with Shoot name and runtime ID `name` and
    /// the fixtures' binding of its provider (`hyperscaler-<type>`: the samples' "hyperscaler
    /// secret" cannot be an object name), as the admin, no status.
    pub async fn create_sample(&self, file: &str, name: &str) -> DynamicObject {
        self.stack
            .create_sample(file, name, |obj| {
                name_sample(obj, name);
                let provider = obj["spec"]["shoot"]["provider"]["type"]
                    .as_str()
                    .unwrap_or("aws")
                    .to_string();
                obj["spec"]["shoot"]["secretBindingName"] =
                    json!(format!("hyperscaler-{provider}"));
            })
            .await
    }
}

impl RealEnv {
    /// Labels Runtime `name` (as the admin) while gardener-apiserver admits the creation of its
    /// Shoot, once: a ValidatingWebhookConfiguration for Shoot creation (gardener-apiserver
    /// runs the admission webhooks of the garden's configurations too) points at a webhook
    /// server of the test's own, which labels the Runtime before it allows. So the controller's
    /// status write after creating the Shoot conflicts (409) and it reads the Runtime again.
    /// Returns once the configuration takes effect (a dry-run Shoot creation reached it);
    /// [`ShootCreationHook::remove`] deletes it.
    pub async fn label_runtime_on_shoot_creation(&self, name: &str) -> ShootCreationHook {
        use axum::extract::State;
        use std::sync::atomic::{AtomicBool, Ordering};

        #[derive(Clone)]
        struct Hook {
            runtimes: Api<DynamicObject>,
            target: String,
            done: Arc<AtomicBool>,
            probed: Arc<AtomicBool>,
        }
        async fn review(
            State(hook): State<Hook>,
            axum::Json(review): axum::Json<Value>,
        ) -> axum::Json<Value> {
            let request = &review["request"];
            if request["dryRun"] == true {
                hook.probed.store(true, Ordering::SeqCst);
            } else if request["name"] == hook.target.as_str()
                && !hook.done.swap(true, Ordering::SeqCst)
            {
                let label =
                    json!({"metadata": {"labels": {"kim-test/changed": "during-shoot-creation"}}});
                hook.runtimes
                    .patch(&hook.target, &PatchParams::default(), &Patch::Merge(&label))
                    .await
                    .unwrap_or_else(|e| panic!("labelling Runtime {}: {e}", hook.target));
            }
            axum::Json(json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request["uid"], "allowed": true},
            }))
        }

        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs = testenv::controlplane::WebhookCerts::generate();
        let probed = Arc::new(AtomicBool::new(false));
        let hook = Hook {
            runtimes: self.runtimes().await,
            target: name.to_string(),
            done: Arc::default(),
            probed: probed.clone(),
        };
        let app = axum::Router::new()
            .route("/validate", axum::routing::post(review))
            .with_state(hook);
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
            certs.dir.path().join("tls.crt"),
            certs.dir.path().join("tls.key"),
        )
        .await
        .expect("the hook's serving certificate loads");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls).expect("listener");
        let task = tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
        let config_name = format!("kim-test-shoot-creation-{name}");
        let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": config_name},
            "webhooks": [{
                "name": "shoot-creation.kim-test.example.com",
                "rules": [{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"],
                           "resources": ["shoots"], "operations": ["CREATE"]}],
                "clientConfig": {
                    "url": format!("https://{addr}/validate"),
                    "caBundle": base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        &certs.ca_pem,
                    ),
                },
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                // A configuration still cached after its removal calls a stopped server:
                // ignored then.
                "failurePolicy": "Ignore",
                "timeoutSeconds": 10,
            }],
        }))
        .unwrap();
        let configurations: Api<ValidatingWebhookConfiguration> =
            Api::all(self.stack.cp.admin().await);
        configurations
            .create(&PostParams::default(), &configuration)
            .await
            .expect("the Shoot-creation hook's configuration");
        // A configuration takes effect a moment after it is stored (gardener-apiserver's
        // informer): dry-run creations of a valid Shoot until one reaches the hook.
        let mut runtime: kim::api::Runtime = serde_saphyr::from_str(
            &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml"))
                .expect("aws-minimal.yaml"),
        )
        .expect("the sample");
        runtime.spec.shoot.name = "hook-probe".to_string();
        runtime.spec.shoot.secret_binding_name = "hyperscaler-aws".to_string();
        let probe = kim::testing::gardener::runtime_to_shoot(
            &runtime,
            &crate::support::reconciler::config(),
        )
        .expect("the probe Shoot");
        // Only a probe: without the structured-authentication ConfigMap it would name (and
        // Gardener checks exists), since nothing creates that one for it.
        let mut probe = serde_json::to_value(&probe).expect("the probe Shoot as JSON");
        if let Some(api_server) = probe
            .pointer_mut("/spec/kubernetes/kubeAPIServer")
            .and_then(Value::as_object_mut)
        {
            api_server.remove("structuredAuthentication");
        }
        let probe: DynamicObject = serde_json::from_value(probe).expect("the probe Shoot");
        let shoots: Api<DynamicObject> = Api::namespaced_with(
            self.stack.cp.admin().await,
            GARDEN_NS,
            &testenv::gardenlet::shoot_resource(),
        );
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let reached = crate::support::eventually(LIMIT, || {
            let (shoots, probe, dry_run, probed) = (
                shoots.clone(),
                probe.clone(),
                dry_run.clone(),
                probed.clone(),
            );
            async move {
                if let Err(e) = shoots.create(&dry_run, &probe).await {
                    panic!("a dry-run creation of the probe Shoot: {e}");
                }
                probed.load(Ordering::SeqCst).then_some(())
            }
        })
        .await;
        assert!(
            reached.is_some(),
            "the Shoot-creation hook did not take effect within {LIMIT:?}"
        );
        ShootCreationHook {
            configurations,
            name: config_name,
            task,
        }
    }
}

/// What [`RealEnv::label_runtime_on_shoot_creation`] installed.
pub struct ShootCreationHook {
    configurations: Api<ValidatingWebhookConfiguration>,
    name: String,
    task: tokio::task::JoinHandle<()>,
}

impl ShootCreationHook {
    /// Deletes the configuration (Shoot creations no longer call the hook), then stops its
    /// server.
    pub async fn remove(self) {
        self.configurations
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {}: {e}", self.name));
        self.task.abort();
    }
}

/// The converter configuration of [`RealEnv`]'s controllers: `docs/config.example.yaml`, as
/// it is (the Gardener fixtures offer what it names).
fn converter_config() -> String {
    std::fs::read_to_string(repo().join("docs/config.example.yaml"))
        .expect("docs/config.example.yaml")
}

/// One verb on one resource, as RBAC and the API server's 403 message name it.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    /// `runtimes`, `runtimes/status`, …
    pub resource: &'a str,
    pub namespace: &'a str,
    /// An object name, for a rule limited by resourceNames.
    pub name: Option<&'a str>,
}

impl Access<'_> {
    /// The phrase of kube-apiserver's 403 for it: `cannot <verb> resource "<resource>" in API
    /// group "<group>"`.
    pub fn forbidden_phrase(&self) -> String {
        format!(
            "cannot {} resource \"{}\" in API group \"{}\"",
            self.verb, self.resource, self.group
        )
    }
}

/// The first line of `out` or `err` (JSON log lines decoded: level and fields)
/// containing `phrase` and `forbidden` (kube-apiserver's 403 message and reason) or `(403)`, as
/// text.
pub fn forbidden_line(out: &str, err: &str, phrase: &str) -> Option<String> {
    let decoded = |l: &str| -> String {
        let Ok(Value::Object(v)) = serde_json::from_str::<Value>(l) else {
            return l.to_string();
        };
        // kim's JSON lines are flat: level, message and the event's fields side by side.
        let fields = v
            .iter()
            .filter(|(k, _)| *k != "timestamp" && *k != "level")
            .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), String::from)));
        let level = v.get("level").and_then(Value::as_str).unwrap_or_default();
        std::iter::once(level.to_string())
            .chain(fields)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // A retry ("…; trying again") is not where the 403 ends: the line after the last try is.
    out.lines().chain(err.lines()).map(decoded).find(|l| {
        l.contains(phrase)
            && !l.contains("trying again")
            && (l.to_lowercase().contains("forbidden") || l.contains("(403)"))
    })
}

/// A Runtime `Ready` with every condition observed at `generation`: the controller has
/// reconciled that generation of the spec to the end.
pub fn ready_at_generation(generation: i64) -> impl Fn(Option<&DynamicObject>) -> bool + Copy {
    move |o| {
        o.is_some_and(|o| {
            o.data["status"]["state"] == "Ready"
                && o.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == generation))
        })
    }
}

/// What [`HeldShootWrite::answer`] tells gardener-apiserver about one held write.
#[derive(Debug, Clone)]
pub enum Admission {
    /// Allowed: stored as written.
    Allow,
    /// Refused with this HTTP code and message (as a failing admission webhook answers).
    Deny { code: u16, message: String },
}

/// One write of a Shoot that gardener-apiserver holds in admission ([`RealEnv::hold_shoot_writes`])
/// until the test answers it: the writer's request waits meanwhile.
pub struct HeldShootWrite {
    /// The AdmissionReview's `request` (`operation`, `subResource`, `object`, `oldObject`,
    /// `userInfo`, …).
    pub request: Value,
    answer: tokio::sync::oneshot::Sender<Admission>,
}

impl HeldShootWrite {
    /// Answers the write (dropping it unanswered allows it).
    pub fn answer(self, admission: Admission) {
        let _ = self.answer.send(admission);
    }
}

/// The writes a [`RealEnv::hold_shoot_writes`] hook holds, in the order gardener-apiserver sent
/// them.
pub struct ShootWriteHold {
    holds: ShootWriteHolds,
    shoot: String,
}

impl ShootWriteHold {
    /// The next held write; panics naming `what` if none comes within [`LIMIT`].
    pub async fn next(&mut self, what: &str) -> HeldShootWrite {
        self.holds
            .next(&self.shoot, what)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Deletes the configuration (writes no longer wait), then stops the hook's server; writes
    /// still held are allowed.
    pub async fn remove(self) {
        self.holds.remove().await
    }
}

impl RealEnv {
    /// Holds every write of Shoot `shoot` with one of `operations` (`CREATE`, `UPDATE`,
    /// `DELETE`) on `resource` (`shoots`, `shoots/status`) in gardener-apiserver's admission
    /// until the test answers it ([`ShootWriteHold::next`], [`HeldShootWrite::answer`]);
    /// [`RealEnv::hold_shoot_writes_of`] for one Shoot and every write the rule selects.
    pub async fn hold_shoot_writes(
        &self,
        shoot: &str,
        resource: &str,
        operations: &[&str],
    ) -> ShootWriteHold {
        let rules = json!([{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"],
                            "resources": [resource], "operations": operations}]);
        let holds = self
            .hold_shoot_writes_of(
                &format!("shoot-writes-{shoot}"),
                &[shoot.to_string()],
                rules,
                |_| true,
            )
            .await;
        ShootWriteHold {
            holds,
            shoot: shoot.to_string(),
        }
    }

    /// Dry-run creations of a valid Shoot until one reaches a hook (`probed` set): a
    /// configuration takes effect a moment after it is stored (gardener-apiserver's informer).
    async fn probe_shoot_hook(&self, probed: &Arc<std::sync::atomic::AtomicBool>) {
        let mut runtime: kim::api::Runtime = serde_saphyr::from_str(
            &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml"))
                .expect("aws-minimal.yaml"),
        )
        .expect("the sample");
        runtime.spec.shoot.name = "hook-probe".to_string();
        runtime.spec.shoot.secret_binding_name = "hyperscaler-aws".to_string();
        let probe = kim::testing::gardener::runtime_to_shoot(
            &runtime,
            &crate::support::reconciler::config(),
        )
        .expect("the probe Shoot");
        // Without the structured-authentication ConfigMap it would name (and Gardener checks
        // exists), since nothing creates that one for a probe.
        let mut probe = serde_json::to_value(&probe).expect("the probe Shoot as JSON");
        if let Some(api_server) = probe
            .pointer_mut("/spec/kubernetes/kubeAPIServer")
            .and_then(Value::as_object_mut)
        {
            api_server.remove("structuredAuthentication");
        }
        let probe: DynamicObject = serde_json::from_value(probe).expect("the probe Shoot");
        let shoots = self.shoots().await;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let reached = crate::support::eventually(LIMIT, || {
            let (shoots, probe, dry_run, probed) = (
                shoots.clone(),
                probe.clone(),
                dry_run.clone(),
                probed.clone(),
            );
            async move {
                if let Err(e) = shoots.create(&dry_run, &probe).await {
                    panic!("a dry-run creation of the probe Shoot: {e}");
                }
                probed
                    .load(std::sync::atomic::Ordering::SeqCst)
                    .then_some(())
            }
        })
        .await;
        assert!(
            reached.is_some(),
            "the Shoot hook did not take effect within {LIMIT:?}"
        );
    }
}

impl Kcp {
    /// [`Kcp::spawn`] with `extra` flags after the usual ones (`--resync-seconds 1`, …).
    fn spawn_with(&self, config: &std::path::Path, rust_log: &str, extra: &[&str]) -> Process {
        let args = testenv::process::kim_controller_args(
            &self.dir.path().join("kcp.kubeconfig"),
            &self.dir.path().join("garden.kubeconfig"),
            config,
            NS,
            true,
        );
        Process::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_kim"))
                .args(args)
                .args(["--lease-duration-seconds", "6"])
                .args(extra)
                .env_remove("KUBECONFIG")
                .env("RUST_LOG", rust_log),
        )
        .expect("spawn kim controller")
    }
}

impl RealEnv {
    /// [`RealEnv::spawn_controller`] with `extra` flags after the usual ones (later flags
    /// win: `--resync-seconds 1`, `--transient-error-grace-seconds 2`, …).
    pub fn spawn_controller_with(&self, rust_log: &str, extra: &[&str]) -> Process {
        self.kcp.spawn_with(&self.config, rust_log, extra)
    }
}

/// A test admission webhook installed on a kube-apiserver ([`install_admission_hook`]): every
/// write matching its rules is answered by the test's decision, as a failing webhook of a
/// real installation answers (`status.code` passes through kube-apiserver to the writer: a
/// denial with 409 is the writer's Conflict, with 500 an internal error).
pub struct AdmissionHook {
    configurations: Api<ValidatingWebhookConfiguration>,
    name: String,
    task: tokio::task::JoinHandle<()>,
    seen: Arc<std::sync::Mutex<Vec<(Value, Admission)>>>,
}

impl AdmissionHook {
    /// The writes judged so far (the AdmissionReview's `request`, and the answer), in order;
    /// dry-run probes left out.
    pub fn seen(&self) -> Vec<(Value, Admission)> {
        self.seen.lock().unwrap().clone()
    }

    /// Deletes the configuration (writes are no longer judged), then stops the hook's server.
    pub async fn remove(self) {
        match self
            .configurations
            .delete(&self.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting {}: {e}", self.name),
        }
        self.task.abort();
    }
}

/// Installs a ValidatingWebhookConfiguration `kim-test-<id>` on the kube-apiserver of `admin`
/// for the writes `rules` (admissionregistration `rules`) select, pointing at a webhook server
/// of the test's own that answers each (non-dry-run) write with `decide(request)`
/// (`request`: the AdmissionReview's, with `operation`, `subResource`, `name`, `object`,
/// `userInfo`, …). `failurePolicy: Ignore` (a configuration still cached after
/// [`AdmissionHook::remove`] calls a stopped server), timeout 10 s. Returns once the
/// configuration takes effect: a second webhook of the configuration, selecting only ConfigMaps
/// labelled `kim-test/hook-probe=<id>`, has seen a dry-run creation of one in `default`.
pub async fn install_admission_hook(
    admin: kube::Client,
    id: &str,
    rules: Value,
    decide: impl Fn(&Value) -> Admission + Send + Sync + 'static,
) -> AdmissionHook {
    use axum::extract::State;
    use std::sync::atomic::{AtomicBool, Ordering};

    type Decide = dyn Fn(&Value) -> Admission + Send + Sync;
    #[derive(Clone)]
    struct Hook {
        decide: Arc<Decide>,
        seen: Arc<std::sync::Mutex<Vec<(Value, Admission)>>>,
        probed: Arc<AtomicBool>,
    }
    async fn review(
        State(hook): State<Hook>,
        axum::Json(review): axum::Json<Value>,
    ) -> axum::Json<Value> {
        let request = review["request"].clone();
        let uid = request["uid"].clone();
        let response = if request["dryRun"] == true {
            hook.probed.store(true, Ordering::SeqCst);
            json!({"uid": uid, "allowed": true})
        } else {
            let answer = (hook.decide)(&request);
            hook.seen.lock().unwrap().push((request, answer.clone()));
            match answer {
                Admission::Allow => json!({"uid": uid, "allowed": true}),
                Admission::Deny { code, message } => {
                    let reason = match code {
                        403 => "Forbidden",
                        409 => "Conflict",
                        429 => "TooManyRequests",
                        500 => "InternalError",
                        503 => "ServiceUnavailable",
                        _ => "",
                    };
                    json!({"uid": uid, "allowed": false,
                           "status": {"code": code, "reason": reason, "message": message}})
                }
            }
        };
        axum::Json(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }))
    }

    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = testenv::controlplane::WebhookCerts::generate();
    let probed = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = Hook {
        decide: Arc::new(decide),
        seen: seen.clone(),
        probed: probed.clone(),
    };
    let app = axum::Router::new()
        .route("/validate", axum::routing::post(review))
        .with_state(hook);
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
        certs.dir.path().join("tls.crt"),
        certs.dir.path().join("tls.key"),
    )
    .await
    .expect("the hook's serving certificate loads");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls).expect("listener");
    let task = tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    let name = format!("kim-test-{id}");
    let client_config = json!({
        "url": format!("https://{addr}/validate"),
        "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &certs.ca_pem),
    });
    let probe_label = "kim-test/hook-probe";
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "hook.kim-test.example.com",
                "rules": rules,
                "clientConfig": client_config,
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
                "timeoutSeconds": 10,
            },
            {
                "name": "probe.kim-test.example.com",
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"], "operations": ["CREATE"]}],
                "objectSelector": {"matchLabels": {probe_label: id}},
                "clientConfig": client_config,
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
                "timeoutSeconds": 10,
            },
        ],
    }))
    .expect("a ValidatingWebhookConfiguration");
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    configurations
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin, "default");
    let probe: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("kim-test-probe-{id}"), "labels": {probe_label: id}},
    }))
    .expect("a ConfigMap");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let reached = crate::support::eventually(LIMIT, || {
        let (config_maps, probe, dry_run, probed) = (
            config_maps.clone(),
            probe.clone(),
            dry_run.clone(),
            probed.clone(),
        );
        async move {
            if let Err(e) = config_maps.create(&dry_run, &probe).await {
                panic!("a dry-run creation of the probe ConfigMap: {e}");
            }
            probed.load(Ordering::SeqCst).then_some(())
        }
    })
    .await;
    assert!(
        reached.is_some(),
        "the admission hook {name} did not take effect within {LIMIT:?}"
    );
    AdmissionHook {
        configurations,
        name,
        task,
        seen,
    }
}

impl RealEnv {
    /// [`RealEnv::spawn_controller_with`] on the converter configuration `config` instead of
    /// [`RealEnv::config`] (`--config` cannot be given twice).
    pub fn spawn_controller_on(
        &self,
        config: &std::path::Path,
        rust_log: &str,
        extra: &[&str],
    ) -> Process {
        self.kcp.spawn_with(config, rust_log, extra)
    }
}

/// Requests that kube-apiserver's flow control (API Priority and Fairness) sends to a
/// FlowSchema of the test's own ([`count_requests`], [`hold_requests`]): the requests of the
/// chosen users, verbs and resources, counted by kube-apiserver as it takes them in. Requests
/// to an aggregated API (Gardener's) are counted too: flow control runs before the aggregator
/// proxies them.
pub struct FlowRule {
    /// The FlowSchema's name (and, for [`hold_requests`], its PriorityLevelConfiguration's).
    name: String,
    admin: kube::Client,
    metrics: reqwest::Client,
    url: String,
    /// Whether a PriorityLevelConfiguration of its own was created.
    own_level: bool,
}

impl FlowRule {
    /// The samples of `metric` (a family of kube-apiserver's `/metrics`) labelled with this
    /// rule's FlowSchema, summed.
    async fn sum(&self, metric: &str) -> u64 {
        let text = self
            .metrics
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("scrape kube-apiserver")
            .text()
            .await
            .expect("kube-apiserver's metrics");
        let label = format!("flow_schema=\"{}\"", self.name);
        text.lines()
            .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
            .filter(|l| l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v.round() as u64)
            .sum()
    }

    /// Requests of the rule that kube-apiserver dispatched (began to serve) so far.
    pub async fn dispatched(&self) -> u64 {
        self.sum("apiserver_flowcontrol_dispatched_requests_total")
            .await
    }

    /// Requests of the rule that waited in a queue so far.
    pub async fn queued(&self) -> u64 {
        self.sum("apiserver_flowcontrol_request_queue_length_after_enqueue_count")
            .await
    }

    /// Deletes the FlowSchema (and its own priority level, if any): the requests are
    /// classified as before.
    pub async fn remove(self) {
        use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
        let gone = |r: kube::Result<()>, what: &str| match r {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting the {what} {}: {e}", self.name),
        };
        gone(
            Api::<FlowSchema>::all(self.admin.clone())
                .delete(&self.name, &DeleteParams::default())
                .await
                .map(|_| ()),
            "FlowSchema",
        );
        if self.own_level {
            gone(
                Api::<PriorityLevelConfiguration>::all(self.admin.clone())
                    .delete(&self.name, &DeleteParams::default())
                    .await
                    .map(|_| ()),
                "PriorityLevelConfiguration",
            );
        }
    }
}

/// Counts the requests of `subjects` matching `resource_rules` (both as a FlowSchema's
/// `spec.rules[0]` has them) on the kube-apiserver of `cp`: a FlowSchema `kim-test-count-<id>`
/// matched before every shipped one but `exempt`, sending them to the shipped priority level
/// `workload-low` (served as before, only counted under this schema). Returns once
/// kube-apiserver has taken the schema in.
pub async fn count_requests(
    cp: &ControlPlane,
    id: &str,
    subjects: Value,
    resource_rules: Value,
) -> FlowRule {
    let name = format!("kim-test-count-{id}");
    install_flow_rule(cp, &name, "workload-low", 50, subjects, resource_rules).await;
    flow_rule(cp, name, false).await
}

/// Holds the requests of `subjects` matching `resource_rules` on the kube-apiserver of `cp`
/// without serving them: a FlowSchema `kim-test-hold-<id>` sending them to a priority level of
/// its own with no seats and nothing to borrow, where they wait in its queue until they time
/// out (kube-apiserver answers 429 then), as requests wait behind a saturated priority level.
/// Returns once kube-apiserver has taken the schema in; [`FlowRule::remove`] lets them through
/// again.
pub async fn hold_requests(
    cp: &ControlPlane,
    id: &str,
    subjects: Value,
    resource_rules: Value,
) -> FlowRule {
    use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration;
    let name = format!("kim-test-hold-{id}");
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue",
                              "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 50}},
        }},
    }))
    .expect("a PriorityLevelConfiguration");
    Api::<PriorityLevelConfiguration>::all(cp.admin().await)
        .create(&PostParams::default(), &level)
        .await
        .unwrap_or_else(|e| panic!("creating the priority level {name}: {e}"));
    install_flow_rule(cp, &name, &name, 40, subjects, resource_rules).await;
    flow_rule(cp, name, true).await
}

async fn flow_rule(cp: &ControlPlane, name: String, own_level: bool) -> FlowRule {
    FlowRule {
        name,
        admin: cp.admin().await,
        metrics: cp.http_client(cp.admin_cert()).expect("an HTTPS client"),
        url: cp.url().to_string(),
        own_level,
    }
}

/// Creates FlowSchema `name` and waits until kube-apiserver's flow control has taken it in
/// (it writes the schema's `Dangling` condition, `False`, once it has digested it).
async fn install_flow_rule(
    cp: &ControlPlane,
    name: &str,
    level: &str,
    precedence: u32,
    subjects: Value,
    resource_rules: Value,
) {
    use k8s_openapi::api::flowcontrol::v1::FlowSchema;
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": subjects, "resourceRules": resource_rules}],
        },
    }))
    .expect("a FlowSchema");
    let schemas = Api::<FlowSchema>::all(cp.admin().await);
    schemas
        .create(&PostParams::default(), &schema)
        .await
        .unwrap_or_else(|e| panic!("creating the FlowSchema {name}: {e}"));
    let digested = crate::support::eventually(LIMIT, || {
        let schemas = schemas.clone();
        async move {
            let fs = schemas.get(name).await.ok()?;
            // As JSON: the condition's field types differ between Kubernetes versions.
            let status = serde_json::to_value(&fs.status).unwrap_or_default();
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Dangling" && c["status"] == "False")
                .then_some(())
        }
    })
    .await;
    assert!(
        digested.is_some(),
        "kube-apiserver did not take in the FlowSchema {name} within {LIMIT:?}"
    );
}

/// The FlowSchema subject of the controller's ServiceAccount ([`CONTROLLER_SA`]).
pub fn controller_subject() -> Value {
    json!({"kind": "ServiceAccount",
           "serviceAccount": {"namespace": CONTROLLER_SA.0, "name": CONTROLLER_SA.1}})
}

/// The FlowSchema subject of the user `name`.
pub fn user_subject(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

impl RealEnv {
    /// [`RealEnv::create_sample`] with `edit` applied after the naming (administrators, worker
    /// limits, …).
    pub async fn create_sample_with(
        &self,
        file: &str,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> DynamicObject {
        self.stack
            .create_sample(file, name, |obj| {
                name_sample(obj, name);
                let provider = obj["spec"]["shoot"]["provider"]["type"]
                    .as_str()
                    .unwrap_or("aws")
                    .to_string();
                obj["spec"]["shoot"]["secretBindingName"] =
                    json!(format!("hyperscaler-{provider}"));
                edit(obj);
            })
            .await
    }

    /// Holds the writes of Shoots `shoots` that admission `rules` select (admissionregistration
    /// `rules` on `core.gardener.cloud` `v1beta1`) and `hold(request)` picks, each in
    /// gardener-apiserver's admission until the test answers it ([`ShootWriteHolds::next`],
    /// [`HeldShootWrite::answer`]): one ValidatingWebhookConfiguration `kim-test-hold-<id>`
    /// pointing at a webhook server of the test's own, with the longest timeout kube allows
    /// (30 s; a write not answered by then is allowed). Every other write it is called for is
    /// allowed at once. Returns once the configuration takes effect (a dry-run Shoot creation
    /// reached the hook).
    pub async fn hold_shoot_writes_of(
        &self,
        id: &str,
        shoots: &[String],
        rules: Value,
        hold: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> ShootWriteHolds {
        use axum::extract::State;
        use std::collections::HashMap;
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

        type Pick = dyn Fn(&Value) -> bool + Send + Sync;
        #[derive(Clone)]
        struct Hook {
            writes: Arc<HashMap<String, UnboundedSender<HeldShootWrite>>>,
            hold: Arc<Pick>,
            probed: Arc<AtomicBool>,
        }
        async fn review(
            State(hook): State<Hook>,
            axum::Json(review): axum::Json<Value>,
        ) -> axum::Json<Value> {
            let request = review["request"].clone();
            let uid = request["uid"].clone();
            let mut response = json!({"uid": uid, "allowed": true});
            let target = request["name"]
                .as_str()
                .and_then(|n| hook.writes.get(n))
                .cloned();
            if request["dryRun"] == true {
                hook.probed.store(true, Ordering::SeqCst);
            } else if let Some(tx) = target
                && (hook.hold)(&request)
            {
                let (answer, rx) = tokio::sync::oneshot::channel();
                if tx.send(HeldShootWrite { request, answer }).is_ok()
                    && let Ok(Admission::Deny { code, message }) = rx.await
                {
                    response = json!({"uid": uid, "allowed": false,
                                      "status": {"code": code, "message": message}});
                }
            }
            axum::Json(json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": response,
            }))
        }

        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs = testenv::controlplane::WebhookCerts::generate();
        let probed = Arc::new(AtomicBool::new(false));
        let mut senders = HashMap::new();
        let mut receivers = HashMap::new();
        for shoot in shoots {
            let (tx, rx) = unbounded_channel();
            senders.insert(shoot.clone(), tx);
            receivers.insert(shoot.clone(), tokio::sync::Mutex::new(rx));
        }
        let hook = Hook {
            writes: Arc::new(senders),
            hold: Arc::new(hold),
            probed: probed.clone(),
        };
        let app = axum::Router::new()
            .route("/validate", axum::routing::post(review))
            .with_state(hook);
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
            certs.dir.path().join("tls.crt"),
            certs.dir.path().join("tls.key"),
        )
        .await
        .expect("the hook's serving certificate loads");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls).expect("listener");
        let task = tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
        let config_name = format!("kim-test-hold-{id}");
        let mut rules = rules.as_array().cloned().expect("a list of rules");
        // The probe below: a dry-run creation.
        rules.push(
            json!({"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"],
                          "resources": ["shoots"], "operations": ["CREATE"]}),
        );
        let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": config_name},
            "webhooks": [{
                "name": "hold-shoot-writes.kim-test.example.com",
                "rules": rules,
                "clientConfig": {
                    "url": format!("https://{addr}/validate"),
                    "caBundle": base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        &certs.ca_pem,
                    ),
                },
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                // A configuration still cached after its removal calls a stopped server:
                // ignored then.
                "failurePolicy": "Ignore",
                "timeoutSeconds": 30,
            }],
        }))
        .unwrap();
        let configurations: Api<ValidatingWebhookConfiguration> =
            Api::all(self.stack.cp.admin().await);
        configurations
            .create(&PostParams::default(), &configuration)
            .await
            .unwrap_or_else(|e| panic!("creating {config_name}: {e}"));
        self.probe_shoot_hook(&probed).await;
        ShootWriteHolds {
            writes: receivers,
            configurations,
            name: config_name,
            task,
        }
    }
}

/// The writes a [`RealEnv::hold_shoot_writes_of`] hook holds, per Shoot in the order
/// gardener-apiserver sent them.
pub struct ShootWriteHolds {
    writes: std::collections::HashMap<
        String,
        tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<HeldShootWrite>>,
    >,
    configurations: Api<ValidatingWebhookConfiguration>,
    name: String,
    task: tokio::task::JoinHandle<()>,
}

impl ShootWriteHolds {
    /// The next held write of Shoot `shoot`; `Err` naming `what` if none comes within
    /// [`LIMIT`]. Panics for a Shoot the hook does not hold.
    pub async fn next(&self, shoot: &str, what: &str) -> Result<HeldShootWrite, String> {
        let mut rx = self
            .writes
            .get(shoot)
            .unwrap_or_else(|| panic!("the hook holds no write of Shoot {shoot}"))
            .lock()
            .await;
        match tokio::time::timeout(LIMIT, rx.recv()).await {
            Ok(Some(w)) => Ok(w),
            _ => Err(format!(
                "{what}: no such write of Shoot {shoot} held within {LIMIT:?}"
            )),
        }
    }

    /// Deletes the configuration (writes no longer wait), then stops the hook's server; writes
    /// still held are allowed.
    pub async fn remove(self) {
        self.configurations
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {}: {e}", self.name));
        self.task.abort();
    }
}
