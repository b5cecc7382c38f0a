//! A simulated gardenlet on a real Gardener API: it watches the Shoots of one project namespace
//! on gardener-apiserver (aggregated behind kube-apiserver, [`crate::controlplane`]) and does
//! what a gardenlet and its seed do for them, with real runtime clusters (kube-apiserver and
//! etcd, [`ControlPlane`]) in place of the cloud's.
//!
//! For a Shoot that is not being deleted:
//! - adds the finalizer `gardener` (the API server does not);
//! - on a new Shoot, a new generation (`metadata.generation > status.observedGeneration`), an
//!   `Error`, or the annotation `gardener.cloud/operation: retry` (removed when taken; on a
//!   `Failed` Shoot gardener-apiserver itself turns it into a new generation and removes it,
//!   measured 2026-12-02 on v1.140.1): writes
//!   `shoots/status` `lastOperation` `Create` (or `Reconcile` once a `Create` succeeded)
//!   `Processing 0` with `observedGeneration` and `technicalID`, then ends the operation with the
//!   next [`Outcome`] of the Shoot's [`ShootScript`] (default: `Succeeded`);
//! - on success, before the status says so: a runtime cluster for the Shoot ([`Clusters`]),
//!   whose single RSA CA signs its serving and every client certificate, the admin
//!   kubeconfigs' groups ([`ADMINS_GROUPS`]) bound to `cluster-admin` there, the InternalSecret `<shoot>.ca-client` (`ca.crt`, `ca.key` PKCS#1)
//!   and the ConfigMap `<shoot>.ca-cluster` (`ca.crt`) that `shoots/adminkubeconfig` signs
//!   with; then `Succeeded 100`, conditions, `advertisedAddresses` (`external` = the cluster's
//!   URL);
//! - `Failed` is terminal until a new generation or the retry annotation; `Error` is retried at
//!   once (Gardener retries errors on its own), so a script's list of outcomes is consumed.
//!
//! For a Shoot with `deletionTimestamp`: `Delete Processing 0`, then the runtime cluster of a
//! [`Clusters::PerShoot`] gardenlet is stopped, the CA objects deleted, `Delete Succeeded 100`
//! written (Gardener's FinalizerRemoval admission keeps the finalizer until then) and the
//! finalizer removed, so the Shoot disappears.
//!
//! Every step is taken as soon as the watch delivers the Shoot, from a fresh read of it (the
//! watch cache may not hold this gardenlet's own last write yet); [`Gardenlet::pause`] holds
//! every Shoot where it is until [`Gardenlet::resume`]. What was done is appended to a
//! [`History`] that tests wait on ([`Gardenlet::wait_for`]), instead of sampling the API.
//!
//! ```no_run
//! # async fn demo(garden: kube::Client) -> Result<(), String> {
//! use std::time::Duration;
//! use testenv::gardener::ShootScript;
//! use testenv::gardenlet::{Clusters, Event, Gardenlet, GardenletConfig, Operation};
//! let gardenlet = Gardenlet::start(
//!     garden,
//!     GardenletConfig::new("garden-kyma-dev").clusters(Clusters::PerShoot),
//! );
//! gardenlet.set_script("broken", ShootScript::create_fails(&["ERR_INFRA_UNAUTHORIZED"]));
//! // ... the code under test creates Shoot `ok` ...
//! gardenlet
//!     .wait_for(Duration::from_secs(60), |h| {
//!         h.find("ok", |e| matches!(e, Event::Succeeded(Operation::Create)))
//!     })
//!     .await?;
//! let cluster = gardenlet.cluster("ok").await.expect("its runtime cluster");
//! # let _ = cluster; Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::controlplane::{ControlPlane, Options, RsaCa, create_or_keep};
use crate::gardener::{OPERATION_ANNOTATION, Outcome, SHOOT_FINALIZER, ShootScript};

/// The group (client certificate O) of the admin kubeconfig `shoots/adminkubeconfig` hands a
/// garden user who may list Secrets cluster-wide (a Gardener operator).
pub const SYSTEM_ADMINS_GROUP: &str = "gardener.cloud:system:admins";
/// The group of the admin kubeconfig it hands every other user (a project member, as kim is):
/// Gardener decides by a SubjectAccessReview (`list secrets` at cluster scope) of the requester.
pub const PROJECT_ADMINS_GROUP: &str = "gardener.cloud:project:admins";
/// The groups bound to `cluster-admin` in each runtime cluster, as Gardener binds them in a
/// Shoot (one ClusterRoleBinding per group, named as the group).
pub const ADMINS_GROUPS: [&str; 2] = [SYSTEM_ADMINS_GROUP, PROJECT_ADMINS_GROUP];
/// Name of the advertised address `shoots/adminkubeconfig` puts into the kubeconfig.
pub const EXTERNAL_ADDRESS: &str = "external";

/// A Gardener operation (`status.lastOperation.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `Create`.
    Create,
    /// `Reconcile`.
    Reconcile,
    /// `Delete`.
    Delete,
}

impl Operation {
    /// As Gardener spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "Create",
            Operation::Reconcile => "Reconcile",
            Operation::Delete => "Delete",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "Create" => Some(Operation::Create),
            "Reconcile" => Some(Operation::Reconcile),
            "Delete" => Some(Operation::Delete),
            _ => None,
        }
    }
}

/// Where the runtime clusters come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clusters {
    /// A control plane and RSA CA of its own per Shoot, started at its first successful
    /// `Create`, stopped at its successful `Delete` (~3 s and ~300 MiB each).
    PerShoot,
    /// At most this many control planes (at least one) sharing one RSA CA, started when first
    /// needed and handed to Shoots in turn; stopped with the gardenlet. For tests with many
    /// Shoots: bindings made in a shared cluster are seen by every Shoot of it.
    Pool(usize),
}

/// What the gardenlet is told.
#[derive(Clone, Debug)]
pub struct GardenletConfig {
    /// The project namespace whose Shoots it takes (e.g. `garden-kyma-dev`).
    pub namespace: String,
    /// Runtime clusters (default [`Clusters::PerShoot`]).
    pub clusters: Clusters,
    /// Scripts by Shoot name (a Shoot without one: everything succeeds).
    pub scripts: HashMap<String, ShootScript>,
}

impl GardenletConfig {
    /// For the Shoots of `namespace`, clusters per Shoot, everything succeeding.
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            clusters: Clusters::PerShoot,
            scripts: HashMap::new(),
        }
    }

    /// With these runtime clusters.
    #[must_use]
    pub fn clusters(mut self, clusters: Clusters) -> Self {
        self.clusters = clusters;
        self
    }

    /// With this script for Shoot `name`.
    #[must_use]
    pub fn script(mut self, name: &str, script: ShootScript) -> Self {
        self.scripts.insert(name.to_string(), script);
        self
    }
}

/// One thing the gardenlet did to a Shoot (in [`Record`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The finalizer `gardener` was added.
    FinalizerAdded,
    /// The retry annotation was taken (removed) to start an operation again.
    RetryTaken,
    /// `lastOperation` `Processing 0` of this operation was written.
    Started(Operation),
    /// A runtime cluster was started for the Shoot (or a pool's handed to it), at this URL.
    ClusterStarted(String),
    /// The operation ended `Succeeded 100` (for `Create`/`Reconcile` after the cluster, its
    /// admins' binding and the CA objects are in place).
    Succeeded(Operation),
    /// The operation ended `Failed` or `Error` (the outcome written).
    Ended(Operation, Outcome),
    /// The Shoot's own runtime cluster was stopped.
    ClusterStopped,
    /// The finalizer was removed after `Delete Succeeded`: the API server deletes the Shoot.
    FinalizerRemoved,
    /// An API call or a cluster start failed; the Shoot is taken again after a second.
    Error(String),
}

/// An [`Event`] of Shoot `shoot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The Shoot's name.
    pub shoot: String,
    /// What happened.
    pub event: Event,
}

/// Everything the gardenlet did, in order.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The records, oldest first.
    pub records: Vec<Record>,
}

impl History {
    /// The first record of `shoot` that `f` matches, mapped by `f`'s match (for
    /// [`Gardenlet::wait_for`]).
    pub fn find(&self, shoot: &str, f: impl Fn(&Event) -> bool) -> Option<Event> {
        self.records
            .iter()
            .find(|r| r.shoot == shoot && f(&r.event))
            .map(|r| r.event.clone())
    }

    /// The events of `shoot`, in order.
    pub fn of(&self, shoot: &str) -> Vec<Event> {
        self.records
            .iter()
            .filter(|r| r.shoot == shoot)
            .map(|r| r.event.clone())
            .collect()
    }

    /// How many records match `f`.
    pub fn count(&self, f: impl Fn(&Record) -> bool) -> usize {
        self.records.iter().filter(|r| f(r)).count()
    }
}

/// A runtime cluster and the CA it trusts and serves with.
struct Cluster {
    cp: Arc<ControlPlane>,
    ca: Arc<RsaCa>,
}

#[derive(Default)]
struct ClusterSet {
    /// By Shoot name.
    assigned: HashMap<String, Cluster>,
    /// The pool's, in start order.
    pool: Vec<Arc<ControlPlane>>,
    pool_ca: Option<Arc<RsaCa>>,
    handed_out: usize,
}

impl ClusterSet {
    /// Cluster `i` of the pool (at most the next one to start) and the pool's CA, each
    /// started or made when first needed.
    async fn pool_member(
        &mut self,
        i: usize,
    ) -> Result<(Arc<ControlPlane>, Arc<RsaCa>), StepError> {
        let ca = match &self.pool_ca {
            Some(ca) => ca.clone(),
            None => self.pool_ca.insert(Arc::new(generate_ca().await?)).clone(),
        };
        if let Some(cp) = self.pool.get(i) {
            return Ok((cp.clone(), ca));
        }
        let cp = Arc::new(start_cluster(ca.clone()).await?);
        self.pool.push(cp.clone());
        Ok((cp, ca))
    }
}

struct Inner {
    config: Mutex<GardenletConfig>,
    shoots: Api<DynamicObject>,
    secrets: Api<DynamicObject>,
    configmaps: Api<ConfigMap>,
    project: String,
    history: watch::Sender<History>,
    paused: watch::Sender<bool>,
    clusters: tokio::sync::Mutex<ClusterSet>,
}

/// The simulated gardenlet; stops (and stops every runtime cluster it started) when dropped.
pub struct Gardenlet {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Gardenlet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gardenlet")
            .field("project", &self.inner.project)
            .finish()
    }
}

/// `core.gardener.cloud/v1beta1` `Shoot`.
pub fn shoot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.gardener.cloud", "v1beta1", "Shoot"),
        "shoots",
    )
}

/// Why a step failed (logged into the [`History`]; the Shoot is taken again).
#[derive(Debug)]
struct StepError(String);

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StepError {}

fn api_err(what: impl fmt::Display) -> impl FnOnce(kube::Error) -> StepError {
    move |e| StepError(format!("{what}: {e}"))
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Gardenlet {
    /// Starts watching the Shoots of `config.namespace` with `garden` (a client of the Gardener
    /// API allowed to update Shoots and their status, write InternalSecrets and ConfigMaps
    /// there). Must be called inside a tokio runtime.
    pub fn start(garden: Client, config: GardenletConfig) -> Gardenlet {
        let ns = config.namespace.clone();
        let project = ns.strip_prefix("garden-").unwrap_or(&ns).to_string();
        let shoots: Api<DynamicObject> =
            Api::namespaced_with(garden.clone(), &ns, &shoot_resource());
        let inner = Arc::new(Inner {
            config: Mutex::new(config),
            shoots: shoots.clone(),
            secrets: Api::namespaced_with(
                garden.clone(),
                &ns,
                &ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("core.gardener.cloud", "v1beta1", "InternalSecret"),
                    "internalsecrets",
                ),
            ),
            configmaps: Api::namespaced(garden, &ns),
            project,
            history: watch::Sender::new(History::default()),
            paused: watch::Sender::new(false),
            clusters: tokio::sync::Mutex::default(),
        });
        let resumed = tokio_stream_of_resumes(inner.paused.subscribe());
        let ctx = inner.clone();
        let task = tokio::spawn(async move {
            Controller::new_with(shoots, watcher::Config::default(), shoot_resource())
                .reconcile_all_on(resumed)
                .run(reconcile, error_policy, ctx)
                .for_each(|_| async {})
                .await;
        });
        Gardenlet { inner, task }
    }

    /// Sets the script of Shoot `name` (its outcomes not consumed yet are replaced).
    pub fn set_script(&self, name: &str, script: ShootScript) {
        lock(&self.inner.config)
            .scripts
            .insert(name.to_string(), script);
    }

    /// Holds every Shoot where it is: no step is taken until [`Gardenlet::resume`] (a step
    /// already under way finishes).
    pub fn pause(&self) {
        self.inner.paused.send_replace(true);
    }

    /// Takes every Shoot again after [`Gardenlet::pause`].
    pub fn resume(&self) {
        self.inner.paused.send_replace(false);
    }

    /// A copy of the history so far.
    pub fn history(&self) -> History {
        self.inner.history.borrow().clone()
    }

    /// Waits (at most `limit`) until `f` returns `Some` for the history, and returns that.
    ///
    /// # Errors
    /// Not within `limit`: the message carries the history.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        mut f: impl FnMut(&History) -> Option<T>,
    ) -> Result<T, String> {
        let mut rx = self.inner.history.subscribe();
        let mut out = None;
        let waited = tokio::time::timeout(
            limit,
            rx.wait_for(|h| {
                out = f(h);
                out.is_some()
            }),
        )
        .await;
        match (waited, out) {
            (Ok(Ok(_)), Some(v)) => Ok(v),
            _ => Err(format!(
                "not within {limit:?}; the gardenlet's history: {:#?}",
                self.history().records
            )),
        }
    }

    /// The first cluster of a [`Clusters::Pool`] gardenlet, started now (its admins bound) if
    /// no Shoot needed one yet: the first Shoot is handed this one. Lets a caller prepare the
    /// cluster before any client of a Shoot reaches it (a benchmark counting requests there
    /// from the first one). `Ok(None)` for [`Clusters::PerShoot`].
    ///
    /// # Errors
    /// Generating the CA, starting the cluster or binding its admins failed.
    pub async fn pool_cluster(&self) -> Result<Option<Arc<ControlPlane>>, String> {
        if lock(&self.inner.config).clusters == Clusters::PerShoot {
            return Ok(None);
        }
        let mut clusters = self.inner.clusters.lock().await;
        let new = clusters.pool.is_empty();
        let (cp, _) = clusters.pool_member(0).await.map_err(|e| e.0)?;
        if new {
            bind_admins(&cp).await.map_err(|e| e.0)?;
        }
        Ok(Some(cp))
    }

    /// The runtime cluster of Shoot `name`, once its `Create` succeeded (until its `Delete`
    /// succeeded); waits while a cluster is being started.
    pub async fn cluster(&self, name: &str) -> Option<Arc<ControlPlane>> {
        self.inner
            .clusters
            .lock()
            .await
            .assigned
            .get(name)
            .map(|c| c.cp.clone())
    }
}

impl Drop for Gardenlet {
    fn drop(&mut self) {
        self.task.abort();
        // The clusters stop when their last handle goes (ControlPlane's Drop); a test may
        // still hold one.
        if let Ok(mut c) = self.inner.clusters.try_lock() {
            c.assigned.clear();
            c.pool.clear();
        }
    }
}

/// A stream that yields once each time `paused` turns false.
fn tokio_stream_of_resumes(rx: watch::Receiver<bool>) -> impl futures::Stream<Item = ()> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if !*rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn error_policy(shoot: Arc<DynamicObject>, e: &StepError, ctx: Arc<Inner>) -> Action {
    ctx.record(&shoot.name_any(), Event::Error(e.0.clone()));
    Action::requeue(Duration::from_secs(1))
}

impl Inner {
    fn record(&self, shoot: &str, event: Event) {
        tracing::debug!(shoot, ?event, "gardenlet");
        self.history.send_modify(|h| {
            h.records.push(Record {
                shoot: shoot.to_string(),
                event,
            })
        });
    }

    /// The next outcome of `op` for Shoot `name` (consumed): only a `Create` has scripted ones.
    fn outcome(&self, name: &str, op: Operation) -> Outcome {
        let mut config = lock(&self.config);
        match (op, config.scripts.get_mut(name)) {
            (Operation::Create, Some(script)) => script.create.pop_front(),
            _ => None,
        }
        .unwrap_or(Outcome::Succeeded)
    }

    async fn patch_status(&self, name: &str, status: Value) -> Result<(), StepError> {
        self.shoots
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map(|_| ())
            .map_err(api_err(format!("writing the status of Shoot {name}")))
    }

    async fn set_finalizers(
        &self,
        shoot: &DynamicObject,
        list: Vec<String>,
    ) -> Result<(), StepError> {
        // The resourceVersion read: a concurrent change of the list is not overwritten.
        let patch = json!({"metadata": {
            "finalizers": list,
            "resourceVersion": shoot.resource_version(),
        }});
        self.shoots
            .patch(
                &shoot.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
            .map_err(api_err(format!(
                "writing the finalizers of Shoot {}",
                shoot.name_any()
            )))
    }

    /// A runtime cluster for Shoot `name`: its own, the one it has, or one of the pool.
    async fn ensure_cluster(
        &self,
        name: &str,
    ) -> Result<(Arc<ControlPlane>, Arc<RsaCa>), StepError> {
        let mode = lock(&self.config).clusters;
        // Held while a cluster starts: starts are one at a time (two kube-apiservers starting
        // at once on 2 cores only slow each other down).
        let mut clusters = self.clusters.lock().await;
        if let Some(c) = clusters.assigned.get(name) {
            return Ok((c.cp.clone(), c.ca.clone()));
        }
        let (cp, ca) = match mode {
            Clusters::PerShoot => {
                let ca = Arc::new(generate_ca().await?);
                (Arc::new(start_cluster(ca.clone()).await?), ca)
            }
            Clusters::Pool(n) => {
                let i = clusters.handed_out % n.max(1);
                let member = clusters.pool_member(i).await?;
                clusters.handed_out += 1;
                member
            }
        };
        bind_admins(&cp).await?;
        clusters.assigned.insert(
            name.to_string(),
            Cluster {
                cp: cp.clone(),
                ca: ca.clone(),
            },
        );
        self.record(name, Event::ClusterStarted(cp.url().to_string()));
        Ok((cp, ca))
    }

    /// Writes `<shoot>.ca-client` (InternalSecret) and `<shoot>.ca-cluster` (ConfigMap) for
    /// `ca` (server-side apply: created or brought back to this CA).
    async fn write_ca_objects(&self, shoot: &DynamicObject, ca: &RsaCa) -> Result<(), StepError> {
        let name = shoot.name_any();
        let ns = shoot.namespace().unwrap_or_default();
        let apply = PatchParams::apply("gardenlet").force();
        let b64 = |s: &str| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(s)
        };
        let secret = json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "InternalSecret",
            "metadata": {"name": format!("{name}.ca-client"), "namespace": ns},
            "type": "Opaque",
            "data": {"ca.crt": b64(&ca.cert_pem), "ca.key": b64(&ca.key_pkcs1_pem)},
        });
        self.secrets
            .patch(&format!("{name}.ca-client"), &apply, &Patch::Apply(&secret))
            .await
            .map_err(api_err(format!("writing InternalSecret {name}.ca-client")))?;
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("{name}.ca-cluster"), "namespace": ns},
            "data": {"ca.crt": ca.cert_pem},
        });
        self.configmaps
            .patch(&format!("{name}.ca-cluster"), &apply, &Patch::Apply(&cm))
            .await
            .map_err(api_err(format!("writing ConfigMap {name}.ca-cluster")))?;
        Ok(())
    }

    async fn delete_ca_objects(&self, name: &str) -> Result<(), StepError> {
        let gone = |r: Result<(), kube::Error>| match r {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other,
        };
        gone(
            self.secrets
                .delete(&format!("{name}.ca-client"), &DeleteParams::default())
                .await
                .map(|_| ()),
        )
        .map_err(api_err(format!("deleting InternalSecret {name}.ca-client")))?;
        gone(
            self.configmaps
                .delete(&format!("{name}.ca-cluster"), &DeleteParams::default())
                .await
                .map(|_| ()),
        )
        .map_err(api_err(format!("deleting ConfigMap {name}.ca-cluster")))
    }

    /// Stops the Shoot's own runtime cluster ([`Clusters::PerShoot`]); a pool's stays.
    async fn release_cluster(&self, name: &str) {
        let mode = lock(&self.config).clusters;
        let taken = self.clusters.lock().await.assigned.remove(name);
        if let (Clusters::PerShoot, Some(c)) = (mode, taken) {
            let cp = c.cp;
            // Stopping waits for the processes (seconds): off the runtime's threads.
            let _ = tokio::task::spawn_blocking(move || cp.stop()).await;
            self.record(name, Event::ClusterStopped);
        }
    }
}

async fn generate_ca() -> Result<RsaCa, StepError> {
    tokio::task::spawn_blocking(|| RsaCa::generate("simulated Shoot CA"))
        .await
        .map_err(|e| StepError(format!("generating a CA: {e}")))?
        .map_err(|e| StepError(format!("generating a CA: {e}")))
}

async fn start_cluster(ca: Arc<RsaCa>) -> Result<ControlPlane, StepError> {
    tokio::task::spawn_blocking(move || {
        ControlPlane::start_with(Options {
            ca: Some((*ca).clone()),
            ..Options::default()
        })
    })
    .await
    .map_err(|e| StepError(format!("starting a runtime cluster: {e}")))?
    .map_err(|e| StepError(format!("starting a runtime cluster: {e}")))
}

/// Binds each of [`ADMINS_GROUPS`] to `cluster-admin` in `cp` (an existing binding is fine).
async fn bind_admins(cp: &ControlPlane) -> Result<(), StepError> {
    let api: Api<ClusterRoleBinding> = Api::all(cp.admin().await);
    for group in ADMINS_GROUPS {
        let binding = json!({
            "metadata": {"name": group},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        });
        create_or_keep(&api, binding)
            .await
            .map_err(api_err(format!("binding {group} in the runtime cluster")))?;
    }
    Ok(())
}

/// What a Shoot's status says, as far as the gardenlet decides on it.
struct Seen {
    generation: i64,
    observed: i64,
    op: Option<Operation>,
    state: String,
    retry: bool,
    deleting: bool,
    has_finalizer: bool,
}

impl Seen {
    fn of(shoot: &DynamicObject) -> Seen {
        let status = &shoot.data["status"];
        Seen {
            generation: shoot.metadata.generation.unwrap_or(1),
            observed: status["observedGeneration"].as_i64().unwrap_or(0),
            op: status["lastOperation"]["type"]
                .as_str()
                .and_then(Operation::parse),
            state: status["lastOperation"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            retry: shoot
                .annotations()
                .get(OPERATION_ANNOTATION)
                .map(String::as_str)
                == Some("retry"),
            deleting: shoot.metadata.deletion_timestamp.is_some(),
            has_finalizer: shoot.finalizers().iter().any(|f| f == SHOOT_FINALIZER),
        }
    }

    /// The operation to run now, if any.
    fn next(&self) -> Option<Operation> {
        if self.deleting {
            let deleted = self.op == Some(Operation::Delete) && self.state == "Succeeded";
            return (!deleted).then_some(Operation::Delete);
        }
        match (self.op, self.state.as_str()) {
            (None, _) => Some(Operation::Create),
            // Processing: a step cut short (a pause or a failed write) is taken again.
            (Some(op), "Processing" | "Pending" | "Error") => Some(op),
            (Some(op), s) if self.generation > self.observed || self.retry => {
                if op == Operation::Create && s != "Succeeded" {
                    Some(Operation::Create)
                } else {
                    Some(Operation::Reconcile)
                }
            }
            _ => None,
        }
    }
}

async fn reconcile(cached: Arc<DynamicObject>, ctx: Arc<Inner>) -> Result<Action, StepError> {
    if *ctx.paused.borrow() {
        return Ok(Action::await_change());
    }
    let name = cached.name_any();
    let Some(shoot) = ctx
        .shoots
        .get_opt(&name)
        .await
        .map_err(api_err(format!("reading Shoot {name}")))?
    else {
        return Ok(Action::await_change());
    };
    let seen = Seen::of(&shoot);
    if seen.deleting
        && seen.op == Some(Operation::Delete)
        && seen.state == "Succeeded"
        && seen.has_finalizer
    {
        // Deleted, finalizer not yet removed (a write cut short).
        remove_finalizer(&ctx, &shoot).await?;
        return Ok(Action::await_change());
    }
    if !seen.deleting && !seen.has_finalizer {
        let mut list = shoot.finalizers().to_vec();
        list.push(SHOOT_FINALIZER.to_string());
        ctx.set_finalizers(&shoot, list).await?;
        ctx.record(&name, Event::FinalizerAdded);
        // The write is seen again (with the finalizer) before going on.
        return Ok(Action::await_change());
    }
    let Some(op) = seen.next() else {
        return Ok(Action::await_change());
    };
    run(&ctx, &shoot, &seen, op).await?;
    Ok(Action::await_change())
}

async fn remove_finalizer(ctx: &Inner, shoot: &DynamicObject) -> Result<(), StepError> {
    let list: Vec<String> = shoot
        .finalizers()
        .iter()
        .filter(|f| *f != SHOOT_FINALIZER)
        .cloned()
        .collect();
    ctx.set_finalizers(shoot, list).await?;
    ctx.record(&shoot.name_any(), Event::FinalizerRemoved);
    Ok(())
}

/// Runs operation `op` of `shoot` to its outcome.
async fn run(
    ctx: &Inner,
    shoot: &DynamicObject,
    seen: &Seen,
    op: Operation,
) -> Result<(), StepError> {
    let name = shoot.name_any();
    if seen.retry {
        ctx.shoots
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {OPERATION_ANNOTATION: null}}})),
            )
            .await
            .map_err(api_err(format!(
                "removing the retry annotation of Shoot {name}"
            )))?;
        ctx.record(&name, Event::RetryTaken);
    }
    let at = now();
    ctx.patch_status(
        &name,
        json!({
            "observedGeneration": seen.generation,
            "technicalID": format!("shoot--{}--{name}", ctx.project),
            "uid": shoot.uid(),
            "lastOperation": {
                "type": op.as_str(), "state": "Processing", "progress": 0,
                "description": format!("{} of Shoot cluster in progress", op.as_str()),
                "lastUpdateTime": at,
            },
        }),
    )
    .await?;
    ctx.record(&name, Event::Started(op));
    let outcome = ctx.outcome(&name, op);
    let (state, codes, description) = match &outcome {
        Outcome::Succeeded => {
            match op {
                Operation::Delete => finish_delete(ctx, shoot).await?,
                _ => finish_create(ctx, shoot, op).await?,
            }
            return Ok(());
        }
        Outcome::Failed { codes, description } => ("Failed", codes, description),
        Outcome::Error { codes, description } => ("Error", codes, description),
    };
    let at = now();
    ctx.patch_status(
        &name,
        json!({
            "lastOperation": {
                "type": op.as_str(), "state": state, "progress": 0,
                "description": description, "lastUpdateTime": at,
            },
            "lastErrors": [{"description": description, "codes": codes, "lastUpdateTime": at}],
        }),
    )
    .await?;
    ctx.record(&name, Event::Ended(op, outcome.clone()));
    Ok(())
}

fn conditions(status: &str, at: &str) -> Value {
    let c = |t: &str| {
        json!({"type": t, "status": status, "reason": "SimulatedGardenlet",
               "message": "simulated", "lastTransitionTime": at, "lastUpdateTime": at})
    };
    json!([
        c("APIServerAvailable"),
        c("ControlPlaneHealthy"),
        c("ObservabilityComponentsHealthy"),
        c("EveryNodeReady"),
        c("SystemComponentsHealthy"),
    ])
}

async fn finish_create(ctx: &Inner, shoot: &DynamicObject, op: Operation) -> Result<(), StepError> {
    let name = shoot.name_any();
    let (cp, ca) = ctx.ensure_cluster(&name).await?;
    ctx.write_ca_objects(shoot, &ca).await?;
    let at = now();
    ctx.patch_status(
        &name,
        json!({
            "lastOperation": {
                "type": op.as_str(), "state": "Succeeded", "progress": 100,
                "description": "Shoot cluster has been successfully reconciled.",
                "lastUpdateTime": at,
            },
            "lastErrors": null,
            "hibernated": false,
            "conditions": conditions("True", &at),
            "advertisedAddresses": [{"name": EXTERNAL_ADDRESS, "url": cp.url()}],
        }),
    )
    .await?;
    ctx.record(&name, Event::Succeeded(op));
    Ok(())
}

async fn finish_delete(ctx: &Inner, shoot: &DynamicObject) -> Result<(), StepError> {
    let name = shoot.name_any();
    ctx.release_cluster(&name).await;
    ctx.delete_ca_objects(&name).await?;
    let at = now();
    ctx.patch_status(
        &name,
        json!({
            "lastOperation": {
                "type": "Delete", "state": "Succeeded", "progress": 100,
                "description": "Shoot cluster has been successfully deleted.",
                "lastUpdateTime": at,
            },
            "lastErrors": null,
            "advertisedAddresses": null,
        }),
    )
    .await?;
    ctx.record(&name, Event::Succeeded(Operation::Delete));
    // Read again: the status write changed the resourceVersion the finalizer patch names.
    let fresh = ctx
        .shoots
        .get(&name)
        .await
        .map_err(api_err(format!("reading Shoot {name}")))?;
    remove_finalizer(ctx, &fresh).await
}
