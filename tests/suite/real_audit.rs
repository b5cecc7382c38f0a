//! `kim audit` as an operator runs it: the real binary as a process, reading Runtimes from a
//! real kube-apiserver and etcd ([`testenv::controlplane`], kim's CRD only, no webhook) through a
//! kubeconfig file (or `KUBECONFIG`, or `~/.kube/config`, with contexts and their namespaces),
//! with paged lists; the rows, the JSON document and the exit codes it gives for clean and broken
//! stored statuses in two namespaces; and the one-line errors (exit 2) for a cluster that cannot
//! be read.
//!
//! - **One control plane** for the module ([`turn`]): started by the first test, used by one test
//!   at a time (some change what every test sees: Runtimes outside the fixture, etcd's history,
//!   the server itself), stopped after the last. Each turn begins by putting back what a failed
//!   test may have left: exactly the fixture's Runtimes.
//! - **The fixture** ([`fixture`]): ten Runtimes in `kcp-system` and `kyma-dev`. Two carry
//!   statuses kim's CRD refuses (a state outside its enum, `conditions` an object), so they are
//!   stored as a cluster holds them from before: written under a CRD that left `status` open
//!   ([`open_status_crd`]), then kim's CRD installed over it. The API server never rewrites
//!   stored objects but prunes on read what the schema does not describe: the `conditions`
//!   object reads back as `{}`, which is what kim audits.
//! - **Who reads**: a ServiceAccount token with RBAC `list` on Runtimes and nothing else
//!   ([`AUDITOR`]), as the README says kim audit needs; the paging test reads as the admin
//!   (client certificate).
//! - **What kim sent**: a [`Front`], a TLS pass-through before kube-apiserver (as a load
//!   balancer), records the query of every Runtime list and can hold one request while the
//!   cluster changes.
//! - **Faults**, each made where it happens: a port nothing listens on, a CA that did not sign
//!   the server's certificate, a token kube-apiserver refuses (401), a ServiceAccount without
//!   RBAC (403), no Runtime CRD (404: the control plane as it started, read once by
//!   [`Shared::start`] before it installs the CRD), and an expired list: while the second page
//!   is held, a Runtime changes, etcd compacts its history past the first page's revision and
//!   kube-apiserver restarts, so the page is answered by a server whose watch cache began after
//!   the compaction (as another instance behind a load balancer would be): kube-apiserver's own
//!   `410 Expired`.

use crate::support::real::{repo, runtime_resource};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use testenv::controlplane::{ControlPlane, WebhookCerts};

const NS_A: &str = "kcp-system";
const NS_B: &str = "kyma-dev";
/// A token kube-apiserver does not know.
const TOKEN: &str = "audit-token-5f0c1e";
/// The ServiceAccount (in [`NS_A`]) kim audit reads as: RBAC `list` on Runtimes only.
const AUDITOR: &str = "kim-auditor";
/// The ClusterRole (and its binding) that gives [`AUDITOR`] that right.
const AUDITOR_ROLE: &str = "kim-audit";

// ---- the control plane the tests share ----

/// How many tests this module has: the control plane stops after the last of them.
const TESTS: usize = 12;

struct Shared {
    /// For the admin's requests from the (synchronous) tests and for the [`Front`]s.
    runtime: tokio::runtime::Runtime,
    cp: Arc<ControlPlane>,
    /// [`AUDITOR`]'s token.
    token: String,
    /// `kim audit -A` as [`AUDITOR`] on the control plane as it started: no Runtime CRD.
    without_crd: Run,
}

struct Slot {
    shared: Option<Arc<Shared>>,
    finished: usize,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    shared: None,
    finished: 0,
});

/// One test's use of the shared control plane: the others wait until it is dropped.
struct Turn {
    slot: MutexGuard<'static, Slot>,
    shared: Option<Arc<Shared>>,
}

impl std::ops::Deref for Turn {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        self.shared.as_ref().expect("the control plane")
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mine = self.shared.take();
        self.slot.finished += 1;
        if self.slot.finished < TESTS {
            return;
        }
        drop(mine);
        // The last one: stops the servers (a filtered run leaves that to the supervisor, which
        // stops them when this process exits).
        drop(self.slot.shared.take());
    }
}

/// Waits for the calling test's turn, starting the control plane if no test did yet, and puts
/// back what an earlier test may have left when it failed half-way.
fn turn() -> Turn {
    let mut slot = SLOT.lock().unwrap_or_else(PoisonError::into_inner);
    let shared = match &slot.shared {
        Some(s) => s.clone(),
        None => {
            let s = Arc::new(Shared::start());
            slot.shared = Some(s.clone());
            s
        }
    };
    shared.block_on(shared.settle());
    Turn {
        slot,
        shared: Some(shared),
    }
}

impl Shared {
    fn start() -> Shared {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("real-audit")
            .enable_all()
            .build()
            .expect("a runtime for the control plane's clients");
        let cp = Arc::new(ControlPlane::start().expect("control plane"));
        let token = runtime.block_on(auditor(&cp));
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = home.path().join("kubeconfig");
        let text = kubeconfig_yaml(cp.url(), cp.ca_pem(), &token, &[("audit", None)]);
        std::fs::write(&kubeconfig, text).unwrap();
        let args = ["--kubeconfig", kubeconfig.to_str().unwrap(), "-A"];
        let without_crd = kim_audit(home.path(), &args, &[]);
        runtime.block_on(seed(&cp));
        Shared {
            runtime,
            cp,
            token,
            without_crd,
        }
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// The Runtimes of `ns` as the admin.
    async fn runtimes(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.cp.admin().await, ns, &runtime_resource())
    }

    /// Every Runtime as the server returns it to the admin, in list order.
    async fn stored(&self) -> Vec<Value> {
        Api::<DynamicObject>::all_with(self.cp.admin().await, &runtime_resource())
            .list(&ListParams::default())
            .await
            .expect("list Runtimes")
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).expect("JSON"))
            .collect()
    }

    /// Exactly the fixture's Runtimes: stores the fixture again when one of its Runtimes is
    /// missing, deletes every other Runtime.
    async fn settle(&self) {
        let all = Api::<DynamicObject>::all_with(self.cp.admin().await, &runtime_resource());
        let stored: BTreeSet<(String, String)> = all
            .list(&ListParams::default())
            .await
            .expect("list Runtimes")
            .items
            .iter()
            .map(|o| {
                let m = &o.metadata;
                (m.namespace.clone().unwrap(), m.name.clone().unwrap())
            })
            .collect();
        let wanted: BTreeSet<(String, String)> = fixture().iter().map(key).collect();
        if !wanted.is_subset(&stored) {
            seed(&self.cp).await;
        }
        for (ns, name) in stored.difference(&wanted) {
            self.runtimes(ns)
                .await
                .delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting Runtime {ns}/{name}: {e}"));
        }
    }

    /// Creates each of `runtimes` (the sample `aws.yaml`) in `ns` and writes its status, eight
    /// at a time (the CRD's schema must accept them).
    async fn store(&self, ns: &str, runtimes: &[(String, Option<Value>)]) {
        self.cp.create_namespace(ns).await;
        let api = &self.runtimes(ns).await;
        futures::stream::iter(runtimes)
            .map(|(name, status)| async move {
                let obj = runtime(ns, name, Value::Null);
                create(api, &obj).await;
                if let Some(s) = status {
                    api.patch_status(name, &PatchParams::default(), &merge_status(s))
                        .await
                        .unwrap_or_else(|e| panic!("status of {ns}/{name}: {e}"));
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes every Runtime of `ns`.
    async fn clear(&self, ns: &str) {
        self.runtimes(ns)
            .await
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting the Runtimes of {ns}: {e}"));
    }
}

/// Stores the [`fixture`] as a cluster holds it from before kim's CRD: written under a CRD that
/// leaves `status` open, then `manifests/crd.yaml` installed over it. Returns once kim's schema
/// judges status writes.
async fn seed(cp: &ControlPlane) {
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).expect("the CRD");
    cp.install_crds(&open_status_crd(&crd))
        .await
        .expect("the CRD with an open status installs");
    for ns in [NS_A, NS_B] {
        cp.create_namespace(ns).await;
    }
    let client = cp.admin().await;
    for obj in fixture() {
        let (ns, name) = key(&obj);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &runtime_resource());
        create(&api, &obj).await;
        if !obj["status"].is_null() {
            // Over kim's CRD (a fixture put back): refused (422) until the open schema takes
            // effect, a moment after it is applied.
            let (patch, params) = (merge_status(&obj["status"]), PatchParams::default());
            retry_30s(&format!("status of {ns}/{name}"), || {
                api.patch_status(&name, &params, &patch)
            })
            .await;
        }
    }
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    // kim's schema in effect: a new state outside its enum is refused (dry run, nothing stored).
    let api: Api<DynamicObject> = Api::namespaced_with(client, NS_B, &runtime_resource());
    let probe = merge_status(&json!({"state": "Unknown"}));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api
            .patch_status(
                "rt-state-unknown",
                &PatchParams::default().dry_run(),
                &probe,
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 => return,
            other => assert!(
                Instant::now() < deadline,
                "kim's CRD not in effect 30 s after it was applied: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates [`AUDITOR`] with a ClusterRole that lists Runtimes and nothing else, waits until
/// RBAC allows it (whether or not the CRD is installed), and returns its token.
async fn auditor(cp: &ControlPlane) -> String {
    let token = cp.service_account_token(NS_A, AUDITOR).await;
    let client = cp.admin().await;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": AUDITOR_ROLE},
        "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"],
                   "resources": ["runtimes"], "verbs": ["list"]}]
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": AUDITOR_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AUDITOR_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": AUDITOR, "namespace": NS_A}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("the auditor's ClusterRole");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the auditor's ClusterRoleBinding");
    // RBAC is read from an informer: allowed a moment after the binding is stored.
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{NS_A}:{AUDITOR}"),
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": {"group": "infrastructuremanager.kyma-project.io",
                                   "resource": "runtimes", "verb": "list"}
        }
    }))
    .unwrap();
    let reviews = Api::<SubjectAccessReview>::all(client);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .expect("a SubjectAccessReview");
        if answer.status.is_some_and(|s| s.allowed) {
            return token;
        }
        assert!(
            Instant::now() < deadline,
            "the auditor may not list Runtimes 30 s after its binding"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `obj` without its status (which a create does not store: the status subresource
/// writes it); an existing one is left as it is.
async fn create(api: &Api<DynamicObject>, obj: &Value) {
    let mut obj = obj.clone();
    obj.as_object_mut().unwrap().remove("status");
    let obj: DynamicObject = serde_json::from_value(obj).expect("a Runtime");
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating Runtime {:?}: {e}", obj.metadata.name),
    }
}

/// Runs `f` every 100 ms until it succeeds, for at most 30 s.
async fn retry_30s<T, Fut, F>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{what}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- kim audit as a process ----

/// A test's turn on the control plane and a temp dir (`HOME` of every `kim audit`) with a
/// kubeconfig for [`AUDITOR`] on kube-apiserver.
struct Env {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    shared: Turn,
}

impl Env {
    fn new() -> Env {
        let shared = turn();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let cp = &shared.cp;
        let text = kubeconfig_yaml(cp.url(), cp.ca_pem(), &shared.token, &[("audit", None)]);
        std::fs::write(&kubeconfig, text).unwrap();
        Env {
            dir,
            kubeconfig,
            shared,
        }
    }

    fn cp(&self) -> &ControlPlane {
        &self.shared.cp
    }

    /// `text` as file `name` in the temp dir.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A kubeconfig for `server` with `ca_pem` and `token`, written as `name`.
    fn kubeconfig_at(&self, name: &str, server: &str, ca_pem: &str, token: &str) -> PathBuf {
        self.write(
            name,
            &kubeconfig_yaml(server, ca_pem, token, &[("audit", None)]),
        )
    }

    /// A [`Front`] before kube-apiserver and a kubeconfig for [`AUDITOR`] through it.
    fn front(&self) -> (Front, PathBuf) {
        let cp = self.cp();
        let front = self.shared.block_on(Front::start(cp.url(), cp.ca_pem()));
        let name = format!("front-{}", front.addr.port());
        let kc = self.kubeconfig_at(&name, &front.url(), &front.certs.ca_pem, &self.shared.token);
        (front, kc)
    }

    /// `kim audit --kubeconfig <the auditor's> ARGS` in an empty environment.
    fn audit(&self, args: &[&str]) -> Run {
        self.audit_with(&self.kubeconfig, args)
    }

    /// `kim audit --kubeconfig KUBECONFIG ARGS` in an empty environment.
    fn audit_with(&self, kubeconfig: &Path, args: &[&str]) -> Run {
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        self.audit_env(&all, &[])
    }

    /// `kim audit ARGS` with only `HOME` (the temp dir) and `env` set.
    fn audit_env(&self, args: &[&str], env: &[(&str, &Path)]) -> Run {
        kim_audit(self.dir.path(), args, env)
    }
}

/// `kim audit ARGS` with only `HOME` and `env` set: no `KUBECONFIG`, no `KIM_*`, no proxy.
fn kim_audit(home: &Path, args: &[&str], env: &[(&str, &Path)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
    cmd.arg("audit").args(args).env_clear().env("HOME", home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run(cmd.output().expect("run kim audit"))
}

/// A finished `kim audit`.
struct Run(Output);

impl Run {
    fn code(&self) -> Option<i32> {
        self.0.status.code()
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.0.stdout)
            .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {}", self.stdout()))
    }

    /// Exit 1 or 0 with the report on stdout and exactly the summary line on stderr (no
    /// progress line: stderr is a pipe).
    fn report(&self, code: i32, summary: &str) -> &Run {
        assert_eq!(
            self.code(),
            Some(code),
            "stdout: {} stderr: {}",
            self.stdout(),
            self.stderr()
        );
        assert_eq!(self.stderr(), format!("{summary}\n"));
        self
    }

    /// Exit 2, nothing on stdout, one line on stderr containing every one of `parts`.
    fn unreadable(&self, parts: &[&str]) -> String {
        let e = self.stderr();
        assert_eq!(
            self.code(),
            Some(2),
            "stdout: {} stderr: {e}",
            self.stdout()
        );
        assert_eq!(self.stdout(), "", "nothing reported");
        assert!(e.starts_with("kim audit: "), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for p in parts {
            assert!(e.contains(p), "{p:?} missing in: {e}");
        }
        e
    }
}

// ---- the front: what kim sends, and a page held ----

/// Runs once, before the request it is armed for is passed on.
type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

struct FrontState {
    upstream: String,
    client: reqwest::Client,
    /// The query parameters of each Runtime list, in order.
    lists: Mutex<Vec<Vec<String>>>,
    /// Run before the first Runtime list with a continue token is passed on.
    hook: Mutex<Option<Hook>>,
}

/// A TLS pass-through on 127.0.0.1 before kube-apiserver, as a load balancer: each request is
/// passed on as sent (`Authorization` included) and answered with kube-apiserver's answer
/// (status, headers, body). Serves with a certificate of its own CA ([`Front::certs`]); stops
/// when dropped.
struct Front {
    addr: SocketAddr,
    certs: WebhookCerts,
    state: Arc<FrontState>,
    handle: axum_server::Handle<SocketAddr>,
}

impl Front {
    async fn start(upstream: &str, upstream_ca: &str) -> Front {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs = WebhookCerts::generate();
        // No idle connections: kube-apiserver may restart between two requests.
        let client = reqwest::Client::builder()
            .no_proxy()
            .tls_certs_only([reqwest::Certificate::from_pem(upstream_ca.as_bytes()).unwrap()])
            .pool_max_idle_per_host(0)
            .build()
            .expect("an HTTPS client");
        let state = Arc::new(FrontState {
            upstream: upstream.to_string(),
            client,
            lists: Mutex::default(),
            hook: Mutex::default(),
        });
        let app = axum::Router::new().fallback(pass).with_state(state.clone());
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
            certs.dir.path().join("tls.crt"),
            certs.dir.path().join("tls.key"),
        )
        .await
        .expect("the front's certificate loads");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = axum_server::Handle::new();
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)
            .expect("listener")
            .handle(handle.clone());
        tokio::spawn(server.serve(app.into_make_service()));
        Front {
            addr,
            certs,
            state,
            handle,
        }
    }

    fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The Runtime lists passed on so far: the parameters of each, `key=value` in order.
    fn lists(&self) -> Vec<Vec<String>> {
        self.state.lists.lock().unwrap().clone()
    }

    /// Forgets the lists recorded so far.
    fn clear(&self) {
        self.state.lists.lock().unwrap().clear();
    }

    /// Arms `hook` for the first Runtime list with a continue token from now on.
    fn before_next_page(&self, hook: Hook) {
        *self.state.hook.lock().unwrap() = Some(hook);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.state.hook.lock().unwrap().take();
        self.handle.shutdown();
    }
}

/// The front's only handler.
async fn pass(
    axum::extract::State(front): axum::extract::State<Arc<FrontState>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    if parts.method == http::Method::GET && parts.uri.path().ends_with("/runtimes") {
        let params = query_params(parts.uri.query().unwrap_or_default());
        let continuing = params.iter().any(|p| p.starts_with("continue="));
        front.lists.lock().unwrap().push(params);
        let hook = if continuing {
            front.hook.lock().unwrap().take()
        } else {
            None
        };
        if let Some(hook) = hook {
            hook().await;
        }
    }
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let mut out = front
        .client
        .request(parts.method, format!("{}{target}", front.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name.as_str()) && name != http::header::HOST {
            out = out.header(name, value);
        }
    }
    let answer = match out.send().await {
        Ok(a) => a,
        Err(e) => {
            return axum::response::Response::builder()
                .status(502)
                .body(axum::body::Body::from(format!("front: {e}")))
                .unwrap();
        }
    };
    let mut reply = axum::response::Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !hop_by_hop(name.as_str()) {
            reply = reply.header(name, value);
        }
    }
    let body = answer.bytes().await.unwrap_or_default();
    reply.body(axum::body::Body::from(body)).unwrap()
}

// ---- the tests ----

#[test]
fn all_namespaces_table_has_one_row_per_violation_and_exit_1() {
    let env = Env::new();
    let r = env.audit(&["-A"]);
    r.report(1, SUMMARY_ALL);
    assert_eq!(r.stdout(), TABLE_ALL);
    // Every row is one line, the messages whole: the longest ends with the last type allowed.
    assert_eq!(r.stdout().lines().count(), 9);
    assert!(
        r.stdout()
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("AuditLogCredentialsCopied")
    );
    // One list request of 500, as kubectl pages by default.
    let (front, kc) = env.front();
    let through = env.audit_with(&kc, &["-A"]);
    through.report(1, SUMMARY_ALL);
    assert_eq!(through.stdout(), TABLE_ALL);
    assert_eq!(front.lists(), vec![vec!["limit=500".to_string()]]);
}

#[test]
fn one_namespace_drops_the_namespace_column() {
    let env = Env::new();
    let r = env.audit(&["-n", NS_A]);
    r.report(
        1,
        "kim audit: 5 Runtimes read in namespace kcp-system, 3 with violations; 4 violations (4 deny): condition-type-unknown 1, reason-unknown 1, ready-requires 2",
    );
    assert_eq!(r.stdout(), TABLE_NS_A);
    let r = env.audit(&["--namespace", "no-such-namespace"]);
    r.report(
        0,
        "kim audit: 0 Runtimes read in namespace no-such-namespace, no violations",
    );
    assert_eq!(r.stdout(), "");
}

#[test]
fn json_report_carries_every_field_of_every_violation() {
    let env = Env::new();
    let r = env.audit(&["-A", "-o", "json"]);
    r.report(1, SUMMARY_ALL);
    let doc = r.json();
    assert_eq!(json_rows(&doc), expect_rows(&all_rows(), "deny"));
    let states: Vec<Value> = rows_of(&doc).into_iter().map(|(_, _, s, _)| s).collect();
    assert_eq!(
        states,
        [
            "Ready",
            "Pending",
            "Ready",
            "Pending",
            "Failed",
            "Failed",
            "Provisioning"
        ]
        .map(|s| json!(s))
    );
    assert_eq!(
        doc["summary"],
        json!({
            "namespace": null, "allNamespaces": true, "runtimes": 10,
            "runtimesWithViolations": 7, "violations": 8,
            "byRule": {"malformed": 1, "state-unknown": 1, "condition-type-unknown": 1,
                       "reason-unknown": 2, "ready-requires": 2, "failed-requires-false": 1},
            "byAction": {"deny": 8}
        })
    );
    // Each violation as the model gives it for the object the server returns: value, allowed
    // and the whole message, not cut.
    let policy = kim::status::Policy::builtin();
    let stored = env.shared.block_on(env.shared.stored());
    for item in doc["items"].as_array().unwrap() {
        let obj = stored
            .iter()
            .find(|o| {
                o["metadata"]["name"] == item["name"]
                    && o["metadata"]["namespace"] == item["namespace"]
            })
            .unwrap();
        let want: Vec<Value> =
            kim::status::validate_stored(&policy, &kim::status::Snapshot::of_object(obj))
                .into_iter()
                .map(|v| {
                    json!({"rule": v.rule, "action": v.action, "path": v.path,
                           "value": v.value, "allowed": v.allowed, "message": v.message})
                })
                .collect();
        assert_eq!(item["violations"], json!(want), "{}", item["name"]);
    }
    // The table shows the same messages.
    let table = env.audit(&["-A"]).stdout();
    for m in doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["violations"].as_array().unwrap())
    {
        let m = m["message"].as_str().unwrap();
        assert!(table.lines().any(|l| l.ends_with(m)), "{m}");
    }
    // One namespace: the summary names it.
    let doc = env.audit(&["-n", NS_B, "-o", "json"]).json();
    assert_eq!(doc["summary"]["namespace"], NS_B);
    assert_eq!(doc["summary"]["allNamespaces"], false);
    assert_eq!(doc["summary"]["runtimes"], 5);
}

#[test]
fn kim_history_switch_makes_the_retired_names_clean() {
    let env = Env::new();
    let r = env.audit(&["-A", "--compat", "kimHistory", "-o", "json"]);
    r.report(
        1,
        "kim audit: 10 Runtimes read in all namespaces, 5 with violations; 6 violations (6 deny): malformed 1, state-unknown 1, reason-unknown 1, ready-requires 2, failed-requires-false 1",
    );
    let without_retired: Vec<_> = all_rows()
        .into_iter()
        .filter(|(_, name, _, _)| !name.starts_with("rt-kim-"))
        .collect();
    assert_eq!(json_rows(&r.json()), expect_rows(&without_retired, "deny"));
    // A namespace whose only broken Runtime speaks KIM's retired vocabulary is clean with it.
    let ns = "kim-history";
    let copies: Vec<(String, Option<Value>)> = fixture()
        .into_iter()
        .filter(|o| {
            let name = o["metadata"]["name"].as_str().unwrap();
            name == "rt-kim-2024-10" || name == "rt-clean-ready" || name == "rt-new"
        })
        .map(|o| {
            let status = Some(o["status"].clone()).filter(|s| !s.is_null());
            (o["metadata"]["name"].as_str().unwrap().to_string(), status)
        })
        .collect();
    env.shared.block_on(env.shared.store(ns, &copies));
    env.audit(&["-n", ns]).report(
        1,
        "kim audit: 3 Runtimes read in namespace kim-history, 1 with violations; 1 violation (1 deny): condition-type-unknown 1",
    );
    let r = env.audit(&["-n", ns, "--compat", "kimHistory"]);
    r.report(
        0,
        "kim audit: 3 Runtimes read in namespace kim-history, no violations",
    );
    assert_eq!(r.stdout(), "");
    env.shared.block_on(env.shared.clear(ns));
}

#[test]
fn warn_actions_are_reported_and_still_exit_1() {
    let env = Env::new();
    let r = env.audit(&["-A", "--enforcement", "warn", "-o", "json"]);
    r.report(1, &SUMMARY_ALL.replace("(8 deny)", "(8 warn)"));
    assert_eq!(json_rows(&r.json()), expect_rows(&all_rows(), "warn"));
    let r = env.audit(&["-A", "--rule-action", "reason-unknown=warn,malformed=warn"]);
    r.report(1, &SUMMARY_ALL.replace("(8 deny)", "(5 deny, 3 warn)"));
    let actions: Vec<(String, String)> = r
        .stdout()
        .lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[3].to_string(), cols[4].to_string())
        })
        .collect();
    for (rule, action) in &actions {
        let want = if rule == "reason-unknown" || rule == "malformed" {
            "warn"
        } else {
            "deny"
        };
        assert_eq!(action, want, "{rule}");
    }
    assert_eq!(actions.len(), 8);
}

#[test]
fn namespace_and_kubeconfig_are_found_as_kubectl_finds_them() {
    let env = Env::new();
    // Three contexts: `dev` (current, namespace kyma-dev), `empty` (namespace nothing-here)
    // and `plain` (no namespace).
    let cp = env.cp();
    let contexts = [
        ("dev", Some(NS_B)),
        ("empty", Some("nothing-here")),
        ("plain", None),
    ];
    let file = env.write(
        "contexts.yaml",
        &kubeconfig_yaml(cp.url(), cp.ca_pem(), &env.shared.token, &contexts),
    );
    let f = file.to_str().unwrap();
    let ns_b = "kim audit: 5 Runtimes read in namespace kyma-dev, 4 with violations; 4 violations (4 deny): malformed 1, state-unknown 1, reason-unknown 1, failed-requires-false 1";
    // The current context's namespace.
    let r = env.audit_env(&["--kubeconfig", f], &[]);
    r.report(1, ns_b);
    assert!(
        r.stdout()
            .lines()
            .skip(1)
            .all(|l| !l.starts_with("rt-kim-2024-10"))
    );
    // -n wins over the context's namespace.
    env.audit_env(&["--kubeconfig", f, "-n", NS_A], &[]).report(
        1,
        "kim audit: 5 Runtimes read in namespace kcp-system, 3 with violations; 4 violations (4 deny): condition-type-unknown 1, reason-unknown 1, ready-requires 2",
    );
    // --context picks another context; without a namespace it is `default`.
    env.audit_env(&["--kubeconfig", f, "--context", "empty"], &[])
        .report(
            0,
            "kim audit: 0 Runtimes read in namespace nothing-here, no violations",
        );
    env.audit_env(&["--kubeconfig", f, "--context", "plain"], &[])
        .report(
            0,
            "kim audit: 0 Runtimes read in namespace default, no violations",
        );
    // KUBECONFIG when there is no --kubeconfig, then ~/.kube/config.
    env.audit_env(&[], &[("KUBECONFIG", &file)]).report(1, ns_b);
    std::fs::create_dir(env.dir.path().join(".kube")).unwrap();
    std::fs::copy(&file, env.dir.path().join(".kube/config")).unwrap();
    env.audit_env(&[], &[]).report(1, ns_b);
    env.audit_env(&["--context", "empty"], &[]).report(
        0,
        "kim audit: 0 Runtimes read in namespace nothing-here, no violations",
    );
    // A context that is not there.
    env.audit_env(&["--kubeconfig", f, "--context", "prod"], &[])
        .unreadable(&["--kubeconfig", "prod"]);
}

#[test]
fn pages_of_chunk_size_report_every_runtime_exactly_once() {
    let env = Env::new();
    let ns = "paged";
    let broken: Vec<String> = (0..23).map(|i| format!("rt-broken-{i:02}")).collect();
    let mut runtimes: Vec<(String, Option<Value>)> = broken
        .iter()
        .map(|n| (n.clone(), Some(status("Failed", &[]))))
        .collect();
    for i in 0..4 {
        let clean = status("Pending", &[("Provisioned", "Unknown", "Pending")]);
        runtimes.push((format!("rt-clean-{i}"), Some(clean)));
    }
    env.shared.block_on(env.shared.store(ns, &runtimes));
    let summary = "kim audit: 27 Runtimes read in namespace paged, 23 with violations; 23 violations (23 deny): failed-requires-false 23";
    let (front, kc) = env.front();
    let r = env.audit_with(&kc, &["-n", ns, "--chunk-size", "5", "-o", "json"]);
    r.report(1, summary);
    let names: Vec<String> = rows_of(&r.json())
        .into_iter()
        .map(|(_, n, _, _)| n)
        .collect();
    assert_eq!(names, broken, "each broken Runtime once, in list order");
    // 27 Runtimes in pages of 5: six requests, each after the first with the token of the one
    // before.
    let lists = front.lists();
    assert_eq!(lists.len(), 6, "{lists:?}");
    assert_eq!(lists[0], ["limit=5"], "{lists:?}");
    let mut tokens = BTreeSet::new();
    for q in &lists[1..] {
        assert_eq!(q.len(), 2, "{q:?}");
        assert_eq!(q[0], "limit=5", "{q:?}");
        assert!(q[1].starts_with("continue="), "{q:?}");
        tokens.insert(q[1].clone());
    }
    assert_eq!(tokens.len(), 5, "a new token each page: {lists:?}");
    // --chunk-size 0: one request without a limit, the same report.
    front.clear();
    let r0 = env.audit_with(&kc, &["-n", ns, "--chunk-size", "0", "-o", "json"]);
    r0.report(1, summary);
    assert_eq!(r0.json(), r.json());
    assert_eq!(front.lists(), vec![Vec::<String>::new()]);
    // Paging across namespaces (-A, pages of 3) gives the report of one request.
    env.shared.block_on(env.shared.clear(ns));
    front.clear();
    let paged = env.audit_with(&kc, &["-A", "--chunk-size", "3", "-o", "json"]);
    paged.report(1, SUMMARY_ALL);
    assert_eq!(front.lists().len(), 4, "10 Runtimes in pages of 3");
    assert_eq!(
        paged.json(),
        env.audit(&["-A", "--chunk-size", "0", "-o", "json"]).json()
    );
}

#[test]
fn an_expired_list_is_reported_not_truncated() {
    let env = Env::new();
    let ns = "expiring";
    let runtimes: Vec<(String, Option<Value>)> = (0..12)
        .map(|i| (format!("rt-{i:02}"), Some(status("Failed", &[]))))
        .collect();
    env.shared.block_on(env.shared.store(ns, &runtimes));
    let (front, kc) = env.front();
    // While the second page is held: a Runtime changes, etcd compacts its history up to now
    // (past the first page's revision) and kube-apiserver restarts, so that no watch cache
    // holds the first page's snapshot any more.
    let cp = env.shared.cp.clone();
    front.before_next_page(Box::new(move || {
        Box::pin(async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(cp.admin().await, ns, &runtime_resource());
            api.patch(
                "rt-00",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {"audited": "changed"}}})),
            )
            .await
            .expect("change a Runtime");
            compact_etcd(cp.etcd_url()).await;
            tokio::task::spawn_blocking(move || {
                cp.kill_apiserver().expect("kill kube-apiserver");
                cp.start_apiserver().expect("start kube-apiserver");
            })
            .await
            .unwrap();
        })
    }));
    let r = env.audit_with(&kc, &["-n", ns, "--chunk-size", "5"]);
    r.unreadable(&["expired after 5 Runtimes", "410 Expired", "rerun kim audit"]);
    assert_eq!(front.lists().len(), 2, "{:?}", front.lists());
    // Rerun: the cluster is quiet again.
    env.audit_with(&kc, &["-n", ns, "--chunk-size", "5"]).report(
        1,
        "kim audit: 12 Runtimes read in namespace expiring, 12 with violations; 12 violations (12 deny): failed-requires-false 12",
    );
    env.shared.block_on(env.shared.clear(ns));
}

#[test]
fn a_cluster_that_cannot_be_read_is_exit_2_with_one_line() {
    let env = Env::new();
    let cp = env.cp();
    let url = cp.url().to_string();

    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = format!("https://127.0.0.1:{port}");
    let kc = env.kubeconfig_at("closed", &closed, cp.ca_pem(), &env.shared.token);
    env.audit_with(&kc, &["-A"])
        .unreadable(&["cannot reach", &closed]);

    // The kubeconfig's CA is not the one that signed the server's certificate: one of the same
    // name with another key (as after the cluster's CA was made anew).
    let other_ca = WebhookCerts::generate().ca_pem;
    let kc = env.kubeconfig_at("other-ca", &url, &other_ca, &env.shared.token);
    env.audit_with(&kc, &["-A"])
        .unreadable(&["cannot reach", &url, "invalid peer certificate"]);

    // 401: a token kube-apiserver does not know; the token is never printed.
    let kc = env.kubeconfig_at("stale", &url, cp.ca_pem(), TOKEN);
    let e = env
        .audit_with(&kc, &["-A"])
        .unreadable(&["answered 401", "credentials were not accepted"]);
    assert!(!e.contains(TOKEN), "{e}");

    // 403: a ServiceAccount without RBAC; kube-apiserver's message, and the permission kim
    // audit needs.
    let unbound = "kim-auditor-unbound";
    let token = env.shared.block_on(cp.service_account_token(NS_A, unbound));
    let kc = env.kubeconfig_at("unbound", &url, cp.ca_pem(), &token);
    let user = format!("system:serviceaccount:{NS_A}:{unbound}");
    let forbidden = format!(
        "runtimes.infrastructuremanager.kyma-project.io is forbidden: User \"{user}\" cannot list resource \"runtimes\" in API group \"infrastructuremanager.kyma-project.io\""
    );
    let e = env.audit_with(&kc, &["-A"]).unreadable(&[
        "answered 403 Forbidden",
        &format!("{forbidden} at the cluster scope"),
        "needs RBAC `list` on `runtimes.infrastructuremanager.kyma-project.io` in every namespace",
    ]);
    assert!(!e.contains(&token), "{e}");
    env.audit_with(&kc, &["-n", NS_A]).unreadable(&[
        &format!("{forbidden} in the namespace \"{NS_A}\""),
        "`list` on `runtimes.infrastructuremanager.kyma-project.io` in namespace kcp-system",
    ]);

    // 404: the Runtime CRD is not installed (the control plane as it started).
    env.shared.without_crd.unreadable(&[
        "answered 404",
        "/apis/infrastructuremanager.kyma-project.io/v1/runtimes",
        "Runtime CRD",
        "not installed",
    ]);
}

#[test]
fn bad_kubeconfig_and_flags_are_exit_2_without_secrets() {
    let env = Env::new();
    // Not YAML, with a token in it: only the position is given.
    let bad = env.write(
        "bad",
        &format!("apiVersion: v1\nusers:\n- name: x\n  user: {{token: [{TOKEN}}}\n"),
    );
    let e = env
        .audit_env(&["--kubeconfig", bad.to_str().unwrap()], &[])
        .unreadable(&["--kubeconfig", "not a valid kubeconfig", "line 4"]);
    assert!(!e.contains(TOKEN), "{e}");
    // YAML of the wrong shape, a key quoted in it.
    env.write(
        "bad",
        &format!("apiVersion: v1\nusers:\n- name: x\n  user:\n    token: {{secret: {TOKEN}}}\n"),
    );
    let e = env
        .audit_env(&["--kubeconfig", bad.to_str().unwrap()], &[])
        .unreadable(&["not a valid kubeconfig"]);
    assert!(!e.contains(TOKEN), "{e}");
    // The same through KUBECONFIG.
    let e = env
        .audit_env(&[], &[("KUBECONFIG", &bad)])
        .unreadable(&["KUBECONFIG file ", "not a valid kubeconfig"]);
    assert!(!e.contains(TOKEN), "{e}");
    // A file that is not there; no kubeconfig at all and not in a cluster.
    env.audit_env(&["--kubeconfig", "/nonexistent/kubeconfig"], &[])
        .unreadable(&["--kubeconfig /nonexistent/kubeconfig", "No such file"]);
    env.audit_env(&[], &[])
        .unreadable(&["no kubeconfig", "not running in a cluster"]);
    // A policy file that is not there, and -n with -A (clap's usage error, also 2).
    let (front, kc) = env.front();
    env.audit_with(&kc, &["--policy-file", "/nonexistent/policy.yaml"])
        .unreadable(&["/nonexistent/policy.yaml"]);
    // Not a namespace name: never sent as a path.
    for ns in ["", "kcp/system", "KCP"] {
        env.audit_with(&kc, &["-n", ns])
            .unreadable(&["--namespace", "is not a namespace name"]);
    }
    assert!(front.lists().is_empty(), "{:?}", front.lists());
    let r = env.audit_with(&kc, &["-n", NS_A, "-A"]);
    assert_eq!(r.code(), Some(2), "{}", r.stderr());
    assert!(r.stderr().contains("cannot be used with"), "{}", r.stderr());
}

/// The README's example ("Auditing stored Runtimes") is this fixture's output, as printed.
#[test]
fn readme_example_is_the_real_output() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let cmd = "```console\n$ kim audit -n kyma-dev\n";
    let at = readme
        .find(cmd)
        .expect("README shows kim audit -n kyma-dev")
        + cmd.len();
    let shown = &readme[at..at + readme[at..].find("```").unwrap()];
    let r = Env::new().audit(&["-n", NS_B]);
    assert_eq!(r.code(), Some(1));
    assert_eq!(
        shown,
        format!("{}{}", r.stdout(), r.stderr()),
        "README's kim audit example is stale"
    );
}

// ---- many Runtimes, read in pages as the admin ----

/// Runtimes in [`FLEET`]: more than two pages of [`PAGE`].
const COUNT: usize = 120;
const OTHER_COUNT: usize = 10;
const PAGE: u32 = 50;
const FLEET: &str = "fleet";
const OTHER_FLEET: &str = "fleet-dev";

/// More Runtimes than one page, some with stored statuses the status model denies (every one
/// valid under the CRD's schema), read through a kubeconfig file for the admin (a client
/// certificate): the report names every Runtime read and exactly the bad ones, exit 1; once
/// they are repaired, exit 0.
#[test]
fn kim_audit_reads_every_page_and_reports_exactly_the_bad_runtimes() {
    let env = Env::new();
    let shared = &env.shared;
    let t0 = Instant::now();
    let main = fleet("rt", COUNT);
    let other = fleet("dev", OTHER_COUNT);
    for (ns, runtimes) in [(FLEET, &main), (OTHER_FLEET, &other)] {
        let with_status: Vec<(String, Option<Value>)> = runtimes
            .iter()
            .map(|(name, status, _)| (name.clone(), status.clone()))
            .collect();
        shared.block_on(shared.store(ns, &with_status));
    }
    let want = expected(FLEET, &main);
    assert_eq!(want.len(), 7, "{want:?}");
    let want_other = expected(OTHER_FLEET, &other);
    assert_eq!(want_other.len(), 1);
    eprintln!(
        "real_audit: {} Runtimes stored in {:.1} s",
        COUNT + OTHER_COUNT,
        t0.elapsed().as_secs_f64()
    );

    // The server pages: a list of PAGE answers PAGE items and a continue token.
    let page = shared.block_on(async {
        shared
            .runtimes(FLEET)
            .await
            .list(&ListParams::default().limit(PAGE))
            .await
            .unwrap()
    });
    assert_eq!(page.items.len(), PAGE as usize);
    assert!(
        page.metadata
            .continue_
            .as_deref()
            .is_some_and(|c| !c.is_empty())
    );
    assert_eq!(
        page.metadata.remaining_item_count,
        Some((COUNT - PAGE as usize) as i64)
    );

    let cp = env.cp();
    let kubeconfig = env.write("admin.kubeconfig", &cp.kubeconfig(cp.admin_cert()));
    let audit = |args: &[&str]| shown(args, env.audit_with(&kubeconfig, args));
    let page = PAGE.to_string();

    // One namespace, pages of PAGE: every Runtime counted, exactly the bad ones reported.
    let run = audit(&["-n", FLEET, "--chunk-size", &page, "-o", "json"]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let doc = run.json();
    assert_eq!(doc["summary"]["runtimes"], json!(COUNT));
    assert_eq!(doc["summary"]["runtimesWithViolations"], json!(want.len()));
    assert_eq!(findings(&doc), want);
    let rows: usize = want.values().map(Vec::len).sum();
    let mut by_rule: BTreeMap<String, usize> = BTreeMap::new();
    for r in want.values().flatten() {
        *by_rule.entry(r.clone()).or_default() += 1;
    }
    let reported: BTreeMap<String, usize> =
        serde_json::from_value(doc["summary"]["byRule"].clone()).unwrap();
    assert_eq!(reported, by_rule);
    assert_eq!(
        run.stderr().trim_end(),
        format!(
            "kim audit: {COUNT} Runtimes read in namespace {FLEET}, {} with violations; {rows} violations ({rows} deny): {}",
            want.len(),
            summary_rules(&doc)
        )
    );

    // The table: one row per violation, the bad Runtimes in list order.
    let run = audit(&["-n", FLEET, "--chunk-size", &page]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let out = run.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATE", "RULE", "ACTION", "PATH", "MESSAGE"]
    );
    let table: Vec<(String, String)> = lines[1..]
        .iter()
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c[0].to_string(), c[2].to_string())
        })
        .collect();
    let in_order: Vec<(String, String)> = main
        .iter()
        .flat_map(|(name, _, rules)| rules.iter().map(|r| (name.clone(), r.to_string())))
        .collect();
    assert_eq!(table, in_order);

    // One request (no paging) and every namespace give the same findings; every namespace
    // holds the module's fixture too.
    let run = audit(&["-n", FLEET, "--chunk-size", "0", "-o", "json"]);
    assert_eq!(run.code(), Some(1));
    let doc = run.json();
    assert_eq!(doc["summary"]["runtimes"], json!(COUNT));
    assert_eq!(findings(&doc), want);
    let run = audit(&["-A", "--chunk-size", "7", "-o", "json"]);
    assert_eq!(run.code(), Some(1));
    let doc = run.json();
    let fixture_count = fixture().len();
    assert_eq!(
        doc["summary"]["runtimes"],
        json!(COUNT + OTHER_COUNT + fixture_count)
    );
    let mut all = want.clone();
    all.extend(want_other.clone());
    for (ns, name, rule, _) in all_rows() {
        all.entry((ns.to_string(), name.to_string()))
            .or_default()
            .push(rule.to_string());
    }
    assert_eq!(findings(&doc), all);

    // KIM's vocabulary switch makes the retired condition type clean, nothing else.
    let run = audit(&[
        "-n",
        FLEET,
        "--chunk-size",
        &page,
        "--compat",
        "kimHistory",
        "-o",
        "json",
    ]);
    assert_eq!(run.code(), Some(1));
    let without_retired: BTreeMap<_, _> = want
        .iter()
        .filter(|(_, rules)| rules != &&vec!["condition-type-unknown".to_string()])
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(findings(&run.json()), without_retired);

    // Repaired (as the controller would write them), the namespace is clean: exit 0.
    shared.block_on(async {
        let api = shared.runtimes(FLEET).await;
        for (_, name) in want.keys() {
            api.patch_status(
                name,
                &PatchParams::default(),
                &merge_status(&status("Ready", &READY)),
            )
            .await
            .unwrap();
        }
    });
    let run = audit(&["-n", FLEET, "--chunk-size", &page]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stdout(), "");
    assert_eq!(
        run.stderr().trim_end(),
        format!("kim audit: {COUNT} Runtimes read in namespace {FLEET}, no violations")
    );
    for ns in [FLEET, OTHER_FLEET] {
        shared.block_on(shared.clear(ns));
    }
    eprintln!("real_audit: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Prints what a `kim audit` as the admin wrote (the table, or the JSON's summary) and returns
/// it.
fn shown(args: &[&str], run: Run) -> Run {
    let out = if args.contains(&"json") {
        serde_json::from_slice::<Value>(&run.0.stdout)
            .map(|d| format!("(JSON) summary: {}\n", d["summary"]))
            .unwrap_or_else(|_| run.stdout())
    } else {
        run.stdout()
    };
    eprintln!(
        "$ kim audit --kubeconfig admin.kubeconfig {}   # exit {:?}\n{out}{}",
        args.join(" "),
        run.code(),
        run.stderr()
    );
    run
}

// ---- etcd ----

/// Compacts etcd's history up to its current revision, through its JSON gateway (`/v3/kv`):
/// every older revision is gone.
async fn compact_etcd(etcd_url: &str) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let head: Value = client
        .post(format!("{etcd_url}/v3/kv/range"))
        .json(&json!({"key": "AA=="}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("etcd's revision")
        .json()
        .await
        .expect("etcd's answer");
    let revision = head["header"]["revision"].clone();
    client
        .post(format!("{etcd_url}/v3/kv/compaction"))
        .json(&json!({"revision": revision, "physical": true}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("etcd compacts");
}

// ---- the fixture (pure) ----

/// The sample `aws.yaml` of KIM's documentation (a realistic spec), as `ns/name`, with
/// `status` (`Value::Null`: none).
fn runtime(ns: &str, name: &str, status: Value) -> Value {
    let text =
        std::fs::read_to_string(repo().join("samples/runtimes/aws.yaml")).expect("sample runtime");
    let mut obj: Value = serde_saphyr::from_str(&text).expect("sample parses");
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(ns);
    if !status.is_null() {
        obj["status"] = status;
    }
    obj
}

/// `(namespace, name)` of a Runtime.
fn key(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap().to_string(),
        m["name"].as_str().unwrap().to_string(),
    )
}

/// A merge patch setting `status`.
fn merge_status(status: &Value) -> Patch<Value> {
    Patch::Merge(json!({"status": status}))
}

/// A condition as KIM writes it.
fn cond(t: &str, s: &str, r: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": format!("{t} {r}"),
           "lastTransitionTime": "2026-11-02T10:00:00Z", "observedGeneration": 1})
}

fn status(state: &str, conds: &[(&str, &str, &str)]) -> Value {
    let conds: Vec<Value> = conds.iter().map(|(t, s, r)| cond(t, s, r)).collect();
    json!({"state": state, "conditions": conds})
}

const READY: [(&str, &str, &str); 3] = [
    ("Provisioned", "True", "ShootCreationCompleted"),
    ("KubeconfigReady", "True", "KubeconfigCreated"),
    ("Configured", "True", "AdministratorsConfigured"),
];

/// Clean and broken Runtimes in two namespaces (list order: namespace, then name).
fn fixture() -> Vec<Value> {
    vec![
        // Clean: Ready with the three conditions it needs.
        runtime(NS_A, "rt-clean-ready", status("Ready", &READY)),
        // Ready in KIM's 2024-10 vocabulary: OidcConfigured is a retired condition type.
        runtime(
            NS_A,
            "rt-kim-2024-10",
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "True", "GardenerClusterCRReady"),
                    ("OidcConfigured", "True", "OidcConfigured"),
                    ("Configured", "True", "ConfigurationCompleted"),
                ],
            ),
        ),
        // Clean: never reconciled, no status.
        runtime(NS_A, "rt-new", Value::Null),
        // A reason the model does not know.
        runtime(
            NS_A,
            "rt-reason",
            status("Pending", &[("Provisioned", "Unknown", "ShootCreating")]),
        ),
        // Ready with a False KubeconfigReady and without Configured: two rows.
        runtime(
            NS_A,
            "rt-unconfigured",
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "False", "KubernetesErr"),
                ],
            ),
        ),
        // conditions is an object, not a list (stored under the open schema; read back under
        // kim's as `{}`).
        runtime(
            NS_B,
            "rt-conditions-map",
            json!({"state": "Pending", "conditions": cond("Provisioned", "Unknown", "Pending")}),
        ),
        // Clean: Failed with the False condition that stopped it.
        runtime(
            NS_B,
            "rt-failed-clean",
            status("Failed", &[("Provisioned", "False", "GardenerErr")]),
        ),
        // Failed without any False condition.
        runtime(
            NS_B,
            "rt-failed-no-false",
            status("Failed", &[("Provisioned", "Unknown", "Pending")]),
        ),
        // Failed in KIM's 2024-12 vocabulary: SerializationErr is a retired reason.
        runtime(
            NS_B,
            "rt-kim-2024-12",
            status(
                "Failed",
                &[
                    ("Provisioned", "True", "ProcessingCompleted"),
                    ("KubeconfigReady", "False", "SerializationErr"),
                ],
            ),
        ),
        // A state the model does not know (outside the enum of kim's CRD: stored under the
        // open schema).
        runtime(
            NS_B,
            "rt-state-unknown",
            status("Provisioning", &[("Provisioned", "Unknown", "Pending")]),
        ),
    ]
}

/// `crd` (kim's CRD, YAML) with `status` an open object (`x-kubernetes-preserve-unknown-fields`),
/// as JSON: a Runtime CRD that accepts any status.
fn open_status_crd(crd: &str) -> String {
    let mut doc: Value = serde_saphyr::from_str(crd).expect("the CRD parses");
    for version in doc["spec"]["versions"].as_array_mut().expect("versions") {
        version["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    doc.to_string()
}

/// Clean statuses (`None`: never reconciled, no status).
fn clean(i: usize) -> Option<Value> {
    match i % 4 {
        0 => Some(status("Ready", &READY)),
        1 => Some(status("Pending", &[("Provisioned", "Unknown", "Pending")])),
        2 => Some(status("Failed", &[("Provisioned", "False", "GardenerErr")])),
        _ => None,
    }
}

/// Statuses the CRD's schema accepts and the model denies, with the rules the audit reports
/// for each (one per row, in order).
fn bad(k: usize) -> (Value, Vec<&'static str>) {
    match k % 4 {
        // A reason the model does not know.
        0 => (
            status("Pending", &[("Provisioned", "Unknown", "ShootCreating")]),
            vec!["reason-unknown"],
        ),
        // Ready with a False KubeconfigReady and no Configured.
        1 => (
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "False", "KubernetesErr"),
                ],
            ),
            vec!["ready-requires", "ready-requires"],
        ),
        // Failed without any False condition.
        2 => (
            status("Failed", &[("Provisioned", "Unknown", "Pending")]),
            vec!["failed-requires-false"],
        ),
        // KIM's retired condition type (only known with --compat kimHistory).
        _ => (
            status(
                "Ready",
                &[
                    READY[0],
                    READY[1],
                    ("OidcConfigured", "True", "OidcConfigured"),
                    READY[2],
                ],
            ),
            vec!["condition-type-unknown"],
        ),
    }
}

/// The Runtimes of a namespace: (name, status, rules it breaks; empty when clean). Every 17th
/// from the 6th is bad.
fn fleet(prefix: &str, count: usize) -> Vec<(String, Option<Value>, Vec<&'static str>)> {
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i:03}");
            if i % 17 == 5 {
                let (s, rules) = bad(i / 17);
                (name, Some(s), rules)
            } else {
                (name, clean(i), vec![])
            }
        })
        .collect()
}

fn expected(
    ns: &str,
    runtimes: &[(String, Option<Value>, Vec<&str>)],
) -> BTreeMap<(String, String), Vec<String>> {
    runtimes
        .iter()
        .filter(|(_, _, rules)| !rules.is_empty())
        .map(|(name, _, rules)| {
            (
                (ns.to_string(), name.clone()),
                rules.iter().map(|r| r.to_string()).collect(),
            )
        })
        .collect()
}

// ---- the expected reports (pure) ----

/// `kim audit -A` of [`fixture`]: one row per violation, list order, kubectl's alignment.
const TABLE_ALL: &str = r#"NAMESPACE    NAME                 STATE          RULE                     ACTION   PATH                          MESSAGE
kcp-system   rt-kim-2024-10       Ready          condition-type-unknown   deny     status.conditions[2].type     status.conditions[2].type: "OidcConfigured" was retired by KIM after 2025-05-19 (declared 2024-09-10 to 2025-05-19); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: Provisioned, KubeconfigReady, Configured, Deprovisioned, KymaSystemNSCreated, OidcAndConfigMapConfigured, RuntimeBootstrapperReady, RegistryCacheConfigured, CustomAuditLogConfigured, AuditLogCredentialsCopied
kcp-system   rt-reason            Pending        reason-unknown           deny     status.conditions[0].reason   status.conditions[0].reason: reason "ShootCreating" is not allowed for type Provisioned; allowed: Initialised, Pending, ShootCreationCompleted, Processing, ProcessingCompleted, ConfigurationCompleted, GardenerErr, SeedNotFound, CreationErr, ConversionErr, ProcessingErr, AuditLogErr, CustomAuditLogErr, OidcConfigurationErr, RegistryCacheConfigured
kcp-system   rt-unconfigured      Ready          ready-requires           deny     status.conditions[1].status   status.state: Ready requires condition KubeconfigReady with status True, found False (KubernetesErr)
kcp-system   rt-unconfigured      Ready          ready-requires           deny     status.conditions             status.state: Ready requires condition Configured with status True, but it is missing
kyma-dev     rt-conditions-map    Pending        malformed                deny     status.conditions             status.conditions: must be a list, got {}
kyma-dev     rt-failed-no-false   Failed         failed-requires-false    deny     status.conditions             status.state: Failed requires at least one condition with status False (the error that stopped the runtime); found none
kyma-dev     rt-kim-2024-12       Failed         reason-unknown           deny     status.conditions[1].reason   status.conditions[1].reason: "SerializationErr" was retired by KIM after 2025-01-13 (declared 2024-07-02 to 2025-01-13); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: KubeconfigCreated, GardenerClusterCRCreated, GardenerClusterCRReady, KubernetesErr
kyma-dev     rt-state-unknown     Provisioning   state-unknown            deny     status.state                  status.state: unknown state "Provisioning"; allowed: Pending, Ready, Failed, Terminating
"#;

/// `kim audit -n kcp-system` of [`fixture`]: no NAMESPACE column.
const TABLE_NS_A: &str = r#"NAME              STATE     RULE                     ACTION   PATH                          MESSAGE
rt-kim-2024-10    Ready     condition-type-unknown   deny     status.conditions[2].type     status.conditions[2].type: "OidcConfigured" was retired by KIM after 2025-05-19 (declared 2024-09-10 to 2025-05-19); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: Provisioned, KubeconfigReady, Configured, Deprovisioned, KymaSystemNSCreated, OidcAndConfigMapConfigured, RuntimeBootstrapperReady, RegistryCacheConfigured, CustomAuditLogConfigured, AuditLogCredentialsCopied
rt-reason         Pending   reason-unknown           deny     status.conditions[0].reason   status.conditions[0].reason: reason "ShootCreating" is not allowed for type Provisioned; allowed: Initialised, Pending, ShootCreationCompleted, Processing, ProcessingCompleted, ConfigurationCompleted, GardenerErr, SeedNotFound, CreationErr, ConversionErr, ProcessingErr, AuditLogErr, CustomAuditLogErr, OidcConfigurationErr, RegistryCacheConfigured
rt-unconfigured   Ready     ready-requires           deny     status.conditions[1].status   status.state: Ready requires condition KubeconfigReady with status True, found False (KubernetesErr)
rt-unconfigured   Ready     ready-requires           deny     status.conditions             status.state: Ready requires condition Configured with status True, but it is missing
"#;

const SUMMARY_ALL: &str = "kim audit: 10 Runtimes read in all namespaces, 7 with violations; 8 violations (8 deny): malformed 1, state-unknown 1, condition-type-unknown 1, reason-unknown 2, ready-requires 2, failed-requires-false 1";

/// `(namespace, name, rule, path)` of every row of [`TABLE_ALL`], for the reports that differ
/// from it only by messages or actions.
fn all_rows() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    vec![
        (
            NS_A,
            "rt-kim-2024-10",
            "condition-type-unknown",
            "status.conditions[2].type",
        ),
        (
            NS_A,
            "rt-reason",
            "reason-unknown",
            "status.conditions[0].reason",
        ),
        (
            NS_A,
            "rt-unconfigured",
            "ready-requires",
            "status.conditions[1].status",
        ),
        (
            NS_A,
            "rt-unconfigured",
            "ready-requires",
            "status.conditions",
        ),
        (NS_B, "rt-conditions-map", "malformed", "status.conditions"),
        (
            NS_B,
            "rt-failed-no-false",
            "failed-requires-false",
            "status.conditions",
        ),
        (
            NS_B,
            "rt-kim-2024-12",
            "reason-unknown",
            "status.conditions[1].reason",
        ),
        (NS_B, "rt-state-unknown", "state-unknown", "status.state"),
    ]
}

/// `(namespace, name, state, [(rule, action, path)])` of each item of a JSON report.
type Row = (String, String, Value, Vec<(String, String, String)>);

fn rows_of(doc: &Value) -> Vec<Row> {
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let vs = i["violations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    (
                        v["rule"].as_str().unwrap().to_string(),
                        v["action"].as_str().unwrap().to_string(),
                        v["path"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (
                i["namespace"].as_str().unwrap().to_string(),
                i["name"].as_str().unwrap().to_string(),
                i["state"].clone(),
                vs,
            )
        })
        .collect()
}

/// The same as [`all_rows`] from a JSON report, with each violation's action.
fn json_rows(doc: &Value) -> Vec<(String, String, String, String, String)> {
    rows_of(doc)
        .into_iter()
        .flat_map(|(ns, name, _, vs)| {
            vs.into_iter()
                .map(move |(rule, action, path)| (ns.clone(), name.clone(), rule, path, action))
        })
        .collect()
}

fn expect_rows(
    rows: &[(&str, &str, &str, &str)],
    action: &str,
) -> Vec<(String, String, String, String, String)> {
    rows.iter()
        .map(|(ns, name, rule, path)| {
            (
                ns.to_string(),
                name.to_string(),
                rule.to_string(),
                path.to_string(),
                action.to_string(),
            )
        })
        .collect()
}

/// (namespace, name) → rules of each item of a JSON report, in order.
fn findings(doc: &Value) -> BTreeMap<(String, String), Vec<String>> {
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let s = |k: &str| item[k].as_str().unwrap_or_default().to_string();
            let rules = item["violations"]
                .as_array()
                .expect("violations")
                .iter()
                .map(|v| v["rule"].as_str().unwrap_or_default().to_string())
                .collect();
            ((s("namespace"), s("name")), rules)
        })
        .collect()
}

/// `rule n, …` of a JSON report's `byRule`, in its order (the summary line's).
fn summary_rules(doc: &Value) -> String {
    doc["summary"]["byRule"]
        .as_object()
        .expect("byRule")
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters of a query string, `key=value` in order (kube's client starts it with `&`).
fn query_params(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// Headers that belong to one connection, not passed on.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "transfer-encoding" | "content-length" | "upgrade"
    )
}

/// A kubeconfig (YAML) for `server` trusting `ca_pem`, authenticating with bearer `token`, with
/// one context per `(name, namespace)` on that cluster and user; the first is current.
fn kubeconfig_yaml(
    server: &str,
    ca_pem: &str,
    token: &str,
    contexts: &[(&str, Option<&str>)],
) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: audit\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: auditor\n  user:\n    token: {token}\ncontexts:\n"
    );
    for (name, namespace) in contexts {
        let ns = namespace.map_or(String::new(), |n| format!(", namespace: {n}"));
        text.push_str(&format!(
            "- name: {name}\n  context: {{cluster: audit, user: auditor{ns}}}\n"
        ));
    }
    text.push_str(&format!("current-context: {}\n", contexts[0].0));
    text
}
