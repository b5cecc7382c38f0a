//! Every Runtime sample of `samples/runtimes` through its whole life on the real servers
//! ([`RealEnv`]: kube-apiserver and etcd with kim's CRD, `manifests/base` and the real `kim
//! webhook`; gardener-apiserver aggregated behind it; the simulated gardenlet with a pool of two
//! real runtime clusters) and the real `kim controller` binary as its ServiceAccount with the
//! shipped RBAC: provisioned to `Ready`, updated (an administrator removed, the worker maximum
//! raised) back to `Ready`, and deleted with nothing left, all samples side by side.
//!
//! Each phase is checked against docs/reconciler.md ("Status sequences"):
//! - the exact status writes, from a watch of the Runtimes (every version in order). The
//!   gardenlet's writes of each Shoot (its `lastOperation` and, at the end, the removal of its
//!   finalizer) are held in gardener-apiserver's admission
//!   ([`RealEnv::hold_shoot_writes_of`]) until the controller has written what it saw before,
//!   so each Gardener step is seen by the controller on its own, as a slow real Gardener is;
//! - the one Event of the phase, from the events API;
//! - the Shoot as gardener-apiserver stored it (provider, workers, zones, the provider configs
//!   the converter makes, region, credentials binding, kim's annotations), the kubeconfig
//!   Secret, and the administrators' ClusterRoleBindings in the runtime cluster;
//! - the requests of the phase as the API servers counted them (`apiserver_request_total` and
//!   API Priority and Fairness's dispatch counts, scraped from `/metrics`): the ones only the
//!   controller sends are asserted per Runtime, the others printed.
//!
//! Meanwhile a rogue client's illegal status writes are denied with kube-apiserver's 403 and the
//! webhook's message: a user RBAC lets write status but the model does not (PUT and merge
//! patch), and the controller's own identity writing an unknown reason, removing the status,
//! and taking a `Terminating` Runtime back to `Ready` (nothing stored).

use crate::support::real::NS;
use crate::support::real_controller::*;
use crate::support::real_shared;
use crate::support::reconciler::GARDEN_NS;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kim::status::table::{reasons, types};
use kim::status::{CondStatus, State};
use kim::testing::reconciler::{SECRET_KEY, binding_name};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testenv::controlplane::ControlPlane;
use testenv::gardenlet::{Clusters, Operation};
use testenv::process::Process;

/// The files of `samples/runtimes`, each run through its life by
/// [`every_sample_is_provisioned_updated_and_deleted_while_a_rogue_client_is_denied`]
/// ([`every_sample_has_a_lifecycle_test`] keeps the list whole).
const SAMPLES: [&str; 6] = [
    "aws-minimal.yaml",
    "aws-trial.yaml",
    "aws.yaml",
    "azure-fremium.yaml",
    "azure.yaml",
    "infrastructuremanager_v1_runtime.yaml",
];
/// The administrator each Runtime is created with besides its sample's, removed by the update.
const SECOND_ADMIN: &str = "second-admin@myorg.com";
/// A user of the control cluster that RBAC lets write Runtime status but that is no allowed
/// writer of the status model.
const ROGUE_USER: &str = "rogue-operator";
const RT_GROUP: &str = "infrastructuremanager.kyma-project.io";
/// Gardener's `lastOperation.state` of an operation under way, and of one that succeeded.
const PROCESSING: &str = "Processing";
const SUCCEEDED: &str = "Succeeded";
/// The label and value of the ClusterRoleBindings kim manages in a runtime cluster.
const MANAGED_BY: (&str, &str) = (
    "reconciler.kyma-project.io/managed-by",
    "infrastructure-manager",
);
/// A binding to `cluster-admin` in the runtime clusters that kim did not make (no label).
const MANUAL_BINDING: &str = "kim-admin-manual";

// ---- the status the phases write ----

/// A condition as [`w`] takes it: `((type, reason), status)`.
type C = ((&'static str, &'static str), CondStatus);

fn c(condition_type: &'static str, status: CondStatus, reason: &'static str) -> C {
    ((condition_type, reason), status)
}

/// `provisioningCompleted`, as [`short`] and [`w`] print it.
fn completed(done: bool) -> &'static str {
    if done { " provisioningCompleted" } else { "" }
}

/// One status write as [`short`] prints it.
fn w(state: State, conditions: &[C], op: Option<(Operation, &str)>, done: bool) -> String {
    format!(
        "{}{}",
        real_shared::w(state, conditions, op),
        completed(done)
    )
}

/// A Runtime's status: [`real_shared::short`] and `provisioningCompleted`.
fn short(o: &DynamicObject) -> String {
    let done = o.data["status"]["provisioningCompleted"] == true;
    format!("{}{}", real_shared::short(o), completed(done))
}

/// The provisioning's writes: the pass that creates the Shoot (`Initialised` set and merged
/// away), the pass that copies Gardener's running operation, the pass that finds it done,
/// stores the kubeconfig and binds the administrators.
fn provisioning_writes() -> Vec<String> {
    let pending = c(types::PROVISIONED, CondStatus::Unknown, reasons::PENDING);
    vec![
        w(State::Pending, std::slice::from_ref(&pending), None, false),
        w(
            State::Pending,
            &[pending],
            Some((Operation::Create, PROCESSING)),
            false,
        ),
        w(
            State::Ready,
            &[
                c(
                    types::PROVISIONED,
                    CondStatus::True,
                    reasons::SHOOT_CREATION_COMPLETED,
                ),
                kubeconfig_ready(),
                configured(),
            ],
            Some((Operation::Create, SUCCEEDED)),
            true,
        ),
    ]
}

fn kubeconfig_ready() -> C {
    c(
        types::KUBECONFIG_READY,
        CondStatus::True,
        reasons::KUBECONFIG_CREATED,
    )
}

fn configured() -> C {
    c(
        types::CONFIGURED,
        CondStatus::True,
        reasons::ADMINISTRATORS_CONFIGURED,
    )
}

fn configuration_completed() -> C {
    c(
        types::PROVISIONED,
        CondStatus::True,
        reasons::CONFIGURATION_COMPLETED,
    )
}

/// The update's writes: the pass that applies the Shoot, the one that copies Gardener's
/// `Reconcile`, the one that finds it done (every condition at the new generation).
fn update_writes() -> Vec<String> {
    let processing = [
        c(types::PROVISIONED, CondStatus::Unknown, reasons::PROCESSING),
        kubeconfig_ready(),
        configured(),
    ];
    vec![
        w(
            State::Pending,
            &processing,
            Some((Operation::Create, SUCCEEDED)),
            true,
        ),
        w(
            State::Pending,
            &processing,
            Some((Operation::Reconcile, PROCESSING)),
            true,
        ),
        w(
            State::Ready,
            &[configuration_completed(), kubeconfig_ready(), configured()],
            Some((Operation::Reconcile, SUCCEEDED)),
            true,
        ),
    ]
}

/// The deletion's writes: the pass that confirms and deletes the Shoot, the one that copies
/// Gardener's `Delete`, and the one that sees it succeeded while the Shoot still exists
/// (Gardener writes `Delete Succeeded`, then removes its finalizer; the test holds the removal
/// until the controller has seen the first). The pass that finds the Shoot gone releases the
/// Runtime without a write.
fn deletion_writes() -> Vec<String> {
    let terminating = [
        configuration_completed(),
        kubeconfig_ready(),
        configured(),
        c(
            types::DEPROVISIONED,
            CondStatus::Unknown,
            reasons::GARDENER_SHOOT_DELETED,
        ),
    ];
    [
        (Operation::Reconcile, SUCCEEDED),
        (Operation::Delete, PROCESSING),
        (Operation::Delete, SUCCEEDED),
    ]
    .into_iter()
    .map(|op| w(State::Terminating, &terminating, Some(op), true))
    .collect()
}

/// The Event of each phase, as `type reason action`.
fn event(state: State) -> String {
    format!("Normal {} Reconcile", state.as_str())
}

// ---- a watch of the Runtimes ----

/// One version a watch delivered: the object, or `None` for its deletion.
type Seen = (String, Option<DynamicObject>);

/// Every version of the Runtimes one watch delivered, in order (it resumes, listing again if it
/// must, after an error: a version passed over meanwhile would be missing from the writes, and
/// the sequences compared would show it).
struct Versions {
    seen: tokio::sync::watch::Receiver<Vec<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Versions {
    /// Starts watching and returns once the first list is in.
    async fn start(api: Api<DynamicObject>) -> Versions {
        use futures::StreamExt as _;
        use kube::runtime::WatchStreamExt as _;
        let (tx, seen) = tokio::sync::watch::channel(Vec::new());
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        tx.send_modify(|h| h.push((o.name_any(), Some(o))))
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        tx.send_modify(|h| h.push((o.name_any(), None)))
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(l) = listed_tx.take() {
                            let _ = l.send(());
                        }
                    }
                    Ok(watcher::Event::Init) | Err(_) => {}
                }
            }
        });
        tokio::time::timeout(LIMIT, listed)
            .await
            .unwrap_or_else(|_| panic!("no first list of the Runtimes' watch within {LIMIT:?}"))
            .expect("the Runtimes' watch");
        Versions { seen, task }
    }

    /// The versions of Runtime `name` so far, and whether it is gone.
    fn of(&self, name: &str) -> (Vec<DynamicObject>, bool) {
        of(&self.seen.borrow(), name)
    }

    /// Every state any Runtime was stored in.
    fn states(&self) -> BTreeSet<String> {
        self.seen
            .borrow()
            .iter()
            .filter_map(|(_, o)| o.as_ref()?.data["status"]["state"].as_str())
            .map(String::from)
            .collect()
    }

    /// Waits (at most [`LIMIT`]) until `f` holds for the versions of `name`; `Err` naming
    /// `what`, with those versions.
    async fn wait(
        &self,
        name: &str,
        what: &str,
        f: impl Fn(&[DynamicObject], bool) -> bool,
    ) -> Result<Vec<DynamicObject>, String> {
        let mut rx = self.seen.clone();
        // The answer of `wait_for` holds the channel's read lock: dropped here, before the
        // versions are read again (a second read behind the watch's waiting write would block).
        let reached = tokio::time::timeout(
            LIMIT,
            rx.wait_for(|h| {
                let (versions, gone) = of(h, name);
                f(&versions, gone)
            }),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        let (versions, gone) = self.of(name);
        if reached {
            return Ok(versions);
        }
        Err(format!(
            "Runtime {name}: {what}: not within {LIMIT:?}; its versions{}:\n  {}",
            if gone { " (gone)" } else { "" },
            versions.iter().map(short).collect::<Vec<_>>().join("\n  ")
        ))
    }
}

fn of(history: &[Seen], name: &str) -> (Vec<DynamicObject>, bool) {
    let mut versions = Vec::new();
    let mut gone = false;
    for (_, o) in history.iter().filter(|(n, _)| n == name) {
        match o {
            Some(o) => {
                versions.push(o.clone());
                gone = false;
            }
            None => gone = true,
        }
    }
    (versions, gone)
}

/// The status writes among `versions` of one Runtime from position `mark` on: each version
/// whose status differs from the one before it (a version without status, or with the same
/// one, is a change of metadata or spec).
fn writes(versions: &[DynamicObject], mark: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut last = &Value::Null;
    for (i, o) in versions.iter().enumerate() {
        let s = o.data.get("status").unwrap_or(&Value::Null);
        if i >= mark && !s.is_null() && s != last {
            out.push(short(o));
        }
        last = s;
    }
    out
}

// ---- one Runtime's life ----

/// One sample's Runtime (named `name`, its Shoot and runtime ID too) and what its phases read.
struct Life<'a> {
    env: &'a RealEnv,
    versions: &'a Versions,
    holds: &'a ShootWriteHolds,
    controller: &'a Process,
    file: &'static str,
    name: String,
}

/// What a phase of one [`Life`] wrote: its status writes.
type Written = Vec<String>;

impl Life<'_> {
    /// Panics with `what`, naming the Runtime and its sample, and the controller's output.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{} ({}): {what}\ncontroller stdout:\n{}\nstderr:\n{}",
            self.name,
            self.file,
            self.controller.stdout(),
            self.controller.stderr()
        )
    }

    /// Waits until the Runtime's versions from `mark` on hold `n` status writes.
    async fn written(&self, mark: usize, n: usize, what: &str) {
        if let Err(e) = self
            .versions
            .wait(&self.name, what, |v, _| writes(v, mark).len() >= n)
            .await
        {
            self.fail(&e)
        }
    }

    /// Waits until a version from `mark` on satisfies `f`; the phase's writes.
    async fn reached(
        &self,
        mark: usize,
        what: &str,
        f: impl Fn(&DynamicObject) -> bool,
    ) -> Written {
        match self
            .versions
            .wait(&self.name, what, |v, _| v.iter().skip(mark).any(&f))
            .await
        {
            Ok(v) => writes(&v, mark),
            Err(e) => self.fail(&e),
        }
    }

    /// The next held write of the Shoot, which must be the gardenlet's status write of `op`
    /// in `state`.
    async fn gardener(&self, op: Operation, state: &str) -> HeldShootWrite {
        let what = format!("the gardenlet's {} {state}", op.as_str());
        let held = match self.holds.next(&self.name, &what).await {
            Ok(h) => h,
            Err(e) => self.fail(&e),
        };
        let last = &held.request["object"]["status"]["lastOperation"];
        if held.request["subResource"] != "status"
            || last["type"] != op.as_str()
            || last["state"] != state
        {
            self.fail(&format!(
                "{what} expected, held: {} {} {last}",
                held.request["operation"], held.request["subResource"]
            ));
        }
        held
    }

    /// The next held write of the Shoot, which must be the gardenlet's removal of its
    /// finalizer.
    async fn finalizer_removal(&self) -> HeldShootWrite {
        let what = "the gardenlet's removal of the Shoot's finalizer";
        let held = match self.holds.next(&self.name, what).await {
            Ok(h) => h,
            Err(e) => self.fail(&e),
        };
        if !removes_finalizer(&held.request) {
            self.fail(&format!("{what} expected, held: {}", held.request));
        }
        held
    }

    /// Creates the Runtime with [`SECOND_ADMIN`] added and steps Gardener's `Create` until
    /// the Runtime is `Ready`.
    async fn provision(&self) -> Written {
        let mark = self.versions.of(&self.name).0.len();
        self.env
            .create_sample_with(self.file, &self.name, |o| {
                o["spec"]["security"]["administrators"]
                    .as_array_mut()
                    .expect("administrators")
                    .push(json!(SECOND_ADMIN));
            })
            .await;
        self.written(mark, 1, "Pending once its Shoot is created")
            .await;
        self.gardener(Operation::Create, PROCESSING)
            .await
            .answer(Admission::Allow);
        self.written(mark, 2, "Gardener's Create/Processing copied")
            .await;
        self.gardener(Operation::Create, SUCCEEDED)
            .await
            .answer(Admission::Allow);
        self.reached(mark, "Ready", |o| {
            o.data["status"]["state"] == State::Ready.as_str()
        })
        .await
    }

    /// Removes [`SECOND_ADMIN`] and raises the worker maximum by 5 (from a fresh read, again
    /// while a write of the controller conflicts), steps Gardener's `Reconcile` until the
    /// Runtime is `Ready` at generation 2; the writes and the old maximum.
    async fn update(&self) -> (Written, i64) {
        let mark = self.versions.of(&self.name).0.len();
        let api = self.env.runtimes().await;
        let mut tries = 0;
        let (stored, old_max) = loop {
            let mut obj = api.get(&self.name).await.expect("read the Runtime");
            let worker = &mut obj.data["spec"]["shoot"]["provider"]["workers"][0];
            let max = worker["maximum"].as_i64().expect("a worker maximum");
            worker["maximum"] = json!(max + 5);
            obj.data["spec"]["security"]["administrators"]
                .as_array_mut()
                .expect("administrators")
                .retain(|a| a != SECOND_ADMIN);
            match api.replace(&self.name, &PostParams::default(), &obj).await {
                Err(kube::Error::Api(s)) if s.code == 409 && tries < 20 => tries += 1,
                Ok(stored) => break (stored, max),
                Err(e) => self.fail(&format!("updating the Runtime: {e}")),
            }
        };
        assert_eq!(stored.metadata.generation, Some(2), "{}", self.name);
        self.written(mark, 1, "Pending once the Shoot is applied")
            .await;
        self.gardener(Operation::Reconcile, PROCESSING)
            .await
            .answer(Admission::Allow);
        self.written(mark, 2, "Gardener's Reconcile/Processing copied")
            .await;
        self.gardener(Operation::Reconcile, SUCCEEDED)
            .await
            .answer(Admission::Allow);
        let ready_at_2 = ready_at_generation(2);
        let written = self
            .reached(mark, "Ready at generation 2", |o| ready_at_2(Some(o)))
            .await;
        (written, old_max)
    }

    /// Deletes the Runtime and steps Gardener's `Delete` until the Runtime is gone; while its
    /// Shoot is being deleted and held at `Delete Processing`, checks the Shoot and runs
    /// `rogue`'s Terminating → Ready attempt, if given (its denial message returned).
    async fn delete(&self, rogue: Option<&Rogue>) -> (Written, Option<String>) {
        let mark = self.versions.of(&self.name).0.len();
        self.env
            .runtimes()
            .await
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| self.fail(&format!("deleting the Runtime: {e}")));
        self.written(
            mark,
            1,
            "Terminating once the Shoot's deletion is requested",
        )
        .await;
        let shoot = self.env.shoot(&self.name).await.expect("the Shoot");
        assert!(
            shoot.metadata.deletion_timestamp.is_some(),
            "Shoot {} is being deleted",
            self.name
        );
        assert_eq!(
            shoot
                .annotations()
                .get(kim::api::ANNOTATION_CONFIRM_DELETION)
                .map(String::as_str),
            Some("true"),
            "Shoot {}: its deletion confirmed",
            self.name
        );
        let held = self.gardener(Operation::Delete, PROCESSING).await;
        let denied = match rogue {
            Some(rogue) => Some(rogue.terminating_to_ready(&self.name).await),
            None => None,
        };
        held.answer(Admission::Allow);
        self.written(mark, 2, "Gardener's Delete/Processing copied")
            .await;
        self.gardener(Operation::Delete, SUCCEEDED)
            .await
            .answer(Admission::Allow);
        let removal = self.finalizer_removal().await;
        self.written(mark, 3, "Gardener's Delete/Succeeded copied")
            .await;
        removal.answer(Admission::Allow);
        match self.versions.wait(&self.name, "gone", |_, gone| gone).await {
            Ok(v) => (writes(&v, mark), denied),
            Err(e) => self.fail(&e),
        }
    }

    /// The Events about the Runtime as `type reason action`, sorted, once there are `n`
    /// (they are sent in the background; read every 100 ms, at most [`LIMIT`]).
    async fn events(&self, n: usize) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.env.stack.cp.admin().await, NS);
        let deadline = Instant::now() + LIMIT;
        loop {
            let list = api
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| self.fail(&format!("listing Events: {e}")));
            let mut ours: Vec<String> = list
                .items
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&self.name)
                })
                .map(|e| {
                    let s = |v: &Option<String>| v.clone().unwrap_or_default();
                    format!("{} {} {}", s(&e.type_), s(&e.reason), s(&e.action))
                })
                .collect();
            ours.sort();
            if ours.len() >= n {
                return ours;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "{n} Events expected within {LIMIT:?}, got {ours:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Runtime as stored, as kim's type.
    async fn runtime(&self) -> kim::api::Runtime {
        let obj = self
            .env
            .runtimes()
            .await
            .get(&self.name)
            .await
            .expect("the Runtime");
        serde_json::from_value(serde_json::to_value(&obj).unwrap()).expect("a Runtime")
    }

    /// The Shoot as gardener-apiserver stored it matches the converter's output and the
    /// Runtime, field by field where it matters, with kim's annotations for `generation`.
    async fn check_shoot(&self, generation: &str) -> DynamicObject {
        let rt = self.runtime().await;
        let shoot = self.env.shoot(&self.name).await.expect("the Shoot");
        let spec = &shoot.data["spec"];
        let p = &spec["provider"];
        let provider_type = rt.spec.shoot.provider.type_.as_str();
        let at = format!("Shoot {} ({})", self.name, self.file);
        assert_eq!(p["type"], provider_type, "{at}");
        let workers = p["workers"].as_array().expect("workers");
        assert_eq!(workers.len(), 1, "{at}: one main worker");
        let want = &rt.spec.shoot.provider.workers[0];
        assert_eq!(workers[0]["name"], want.name.as_str(), "{at}");
        assert_eq!(workers[0]["maximum"], want.maximum, "{at}");
        assert_eq!(workers[0]["minimum"], want.minimum, "{at}");
        assert_eq!(
            workers[0]["machine"]["type"],
            want.machine.type_.as_str(),
            "{at}"
        );
        let zones = want.zones.clone().unwrap_or_default();
        assert_eq!(workers[0]["zones"], json!(zones), "{at}");
        let api_version = format!("{provider_type}.provider.extensions.gardener.cloud/v1alpha1");
        let infra = &p["infrastructureConfig"];
        assert_eq!(infra["apiVersion"], api_version.as_str(), "{at}");
        assert_eq!(infra["kind"], "InfrastructureConfig", "{at}");
        assert_eq!(zone_names(infra), zones, "{at}: infrastructureConfig zones");
        assert_eq!(
            p["controlPlaneConfig"]["apiVersion"],
            api_version.as_str(),
            "{at}"
        );
        assert_eq!(
            p["controlPlaneConfig"]["kind"], "ControlPlaneConfig",
            "{at}"
        );
        // The provider configs are what the converter makes of the Runtime.
        let expected =
            kim::testing::gardener::runtime_to_shoot(&rt, &crate::support::reconciler::config())
                .expect("converts");
        let expected = serde_json::to_value(&expected).unwrap();
        for config in ["infrastructureConfig", "controlPlaneConfig"] {
            assert_eq!(
                p[config], expected["spec"]["provider"][config],
                "{at}: {config}"
            );
        }
        assert_eq!(spec["region"], rt.spec.shoot.region.as_str(), "{at}");
        assert_eq!(
            spec["credentialsBindingName"],
            rt.spec.shoot.secret_binding_name.as_str(),
            "{at}"
        );
        let annotations = shoot.annotations();
        let annotation = |k: &str| annotations.get(k).map(String::as_str);
        assert_eq!(
            annotation(kim::api::ANNOTATION_RUNTIME_ID),
            Some(self.name.as_str()),
            "{at}"
        );
        assert_eq!(
            annotation(kim::api::ANNOTATION_RUNTIME_GENERATION),
            Some(generation),
            "{at}"
        );
        shoot
    }

    /// The kubeconfig Secret: only the kubeconfig, pointing at the runtime cluster (`url`),
    /// kim's labels, synced within the last two minutes.
    async fn check_secret(&self, url: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.env.stack.cp.admin().await, NS);
        let secret = secrets
            .get(&format!("kubeconfig-{}", self.name))
            .await
            .unwrap_or_else(|e| panic!("the kubeconfig Secret of {}: {e}", self.name));
        let data = secret.data.as_ref().expect("data");
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            [SECRET_KEY],
            "{}",
            self.name
        );
        let kubeconfig = String::from_utf8(data[SECRET_KEY].0.clone()).expect("UTF-8");
        let parsed = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("a kubeconfig");
        let servers: Vec<String> = parsed
            .clusters
            .iter()
            .filter_map(|c| c.cluster.as_ref()?.server.clone())
            .collect();
        assert_eq!(servers, [url], "{}: the runtime cluster's URL", self.name);
        let labels = secret.metadata.labels.as_ref().expect("labels");
        for (k, v) in [
            (kim::api::LABEL_RUNTIME_ID, self.name.as_str()),
            (
                "operator.kyma-project.io/managed-by",
                "infrastructure-manager",
            ),
            ("operator.kyma-project.io/cluster-name", self.name.as_str()),
        ] {
            assert_eq!(
                labels.get(k).map(String::as_str),
                Some(v),
                "{}: {k}",
                self.name
            );
        }
        let synced = &secret.metadata.annotations.as_ref().expect("annotations")["operator.kyma-project.io/last-sync"];
        let t = chrono::DateTime::parse_from_rfc3339(synced).expect("last-sync is RFC 3339");
        let age = chrono::Utc::now().signed_duration_since(t);
        assert!(
            age.num_seconds().abs() < 120,
            "last-sync is recent: {synced}"
        );
    }
}

/// Whether admission `request` is an update of a Shoot that removes Gardener's finalizer.
fn removes_finalizer(request: &Value) -> bool {
    let has = |o: &Value| {
        o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|f| f == testenv::gardener::SHOOT_FINALIZER))
    };
    request["operation"] == "UPDATE"
        && request["subResource"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        && has(&request["oldObject"])
        && !has(&request["object"])
}

fn zone_names(infra: &Value) -> Vec<String> {
    infra["networks"]["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|z| match &z["name"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// The ClusterRoleBindings kim manages in `cluster`, as (name, user); each binds a User to
/// `cluster-admin`.
async fn managed_bindings(cluster: &ControlPlane) -> BTreeSet<(String, String)> {
    Api::<ClusterRoleBinding>::all(cluster.admin().await)
        .list(&ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)))
        .await
        .expect("the runtime cluster's ClusterRoleBindings")
        .items
        .into_iter()
        .map(|b| {
            assert_eq!(
                (b.role_ref.kind.as_str(), b.role_ref.name.as_str()),
                ("ClusterRole", "cluster-admin")
            );
            let subjects = b.subjects.unwrap_or_default();
            assert_eq!(subjects.len(), 1, "{:?}", b.metadata.name);
            assert_eq!(subjects[0].kind, "User");
            (
                b.metadata.name.unwrap_or_default(),
                subjects[0].name.clone(),
            )
        })
        .collect()
}

/// The bindings of `admins`, as kim names them.
fn bindings_of<'a>(admins: impl IntoIterator<Item = &'a str>) -> BTreeSet<(String, String)> {
    admins
        .into_iter()
        .map(|a| (binding_name(a), a.to_string()))
        .collect()
}

/// The administrators of `samples/runtimes/<file>`.
fn sample_admins(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(
        crate::support::real::repo()
            .join("samples/runtimes")
            .join(file),
    )
    .unwrap_or_else(|e| panic!("{file}: {e}"));
    let rt: kim::api::Runtime = serde_saphyr::from_str(&text).expect("a Runtime");
    rt.spec.security.administrators
}

// ---- the requests the servers counted ----

/// `apiserver_request_total` (verb, group, resource, subresource, code) of one server.
type Rows = BTreeMap<[String; 5], i64>;

/// One server's counters: `apiserver_request_total` and API Priority and Fairness's
/// `apiserver_flowcontrol_dispatched_requests_total` by flow schema.
#[derive(Default, Clone)]
struct Counts {
    requests: Rows,
    flows: BTreeMap<String, i64>,
}

impl Counts {
    /// The two series of a `/metrics` text (label values here hold no comma or quote).
    fn parse(text: &str) -> Counts {
        let mut out = Counts::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Some((name, labels)) = series.split_once('{') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let labels: BTreeMap<&str, &str> = labels
                .trim_end_matches('}')
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            let get = |k: &str| labels.get(k).copied().unwrap_or_default().to_string();
            let n = value.round() as i64;
            match name {
                "apiserver_request_total" => {
                    let key = ["verb", "group", "resource", "subresource", "code"].map(get);
                    *out.requests.entry(key).or_default() += n;
                }
                "apiserver_flowcontrol_dispatched_requests_total" => {
                    *out.flows.entry(get("flow_schema")).or_default() += n;
                }
                _ => {}
            }
        }
        out
    }

    fn add(&mut self, other: &Counts) {
        for (k, v) in &other.requests {
            *self.requests.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.flows {
            *self.flows.entry(k.clone()).or_default() += v;
        }
    }

    /// `self - before`, only what moved.
    fn since(&self, before: &Counts) -> Counts {
        fn delta<K: Ord + Clone>(a: &BTreeMap<K, i64>, b: &BTreeMap<K, i64>) -> BTreeMap<K, i64> {
            a.iter()
                .map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0)))
                .filter(|(_, d)| *d != 0)
                .collect()
        }
        Counts {
            requests: delta(&self.requests, &before.requests),
            flows: delta(&self.flows, &before.flows),
        }
    }

    /// Successful (2xx) requests with `verb` on `resource` (`runtimes/status`, …).
    fn ok(&self, verb: &str, resource: &str) -> i64 {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        self.requests
            .iter()
            .filter(|([v, _, r, s, code], _)| {
                v == verb && r == resource && s == sub && code.starts_with('2')
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// The rows on `resources`, WATCHes left out, one `VERB resource[/sub] code: n` each.
    fn rows(&self, resources: &[&str]) -> String {
        self.requests
            .iter()
            .filter(|([v, _, r, _, _], _)| v != "WATCH" && resources.contains(&r.as_str()))
            .map(|([v, _, r, s, code], n)| {
                let sub = if s.is_empty() {
                    String::new()
                } else {
                    format!("/{s}")
                };
                format!("{v} {r}{sub} {code}: {n}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// kube-apiserver's, gardener-apiserver's and the runtime clusters' (summed) counters.
struct Snapshot {
    kube: Counts,
    gardener: Counts,
    runtime: Counts,
}

async fn scrape(client: &reqwest::Client, url: &str) -> Counts {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("scraping {url}/metrics: {e}"))
        .text()
        .await
        .expect("the metrics");
    Counts::parse(&text)
}

/// Scrapes the control plane's two API servers and `clusters` as their admins.
async fn snapshot(cp: &ControlPlane, clusters: &[Arc<ControlPlane>]) -> Snapshot {
    let client = cp.http_client(cp.admin_cert()).expect("an HTTPS client");
    let gardener = cp.gardener_url().expect("gardener-apiserver runs");
    let mut runtime = Counts::default();
    for cluster in clusters {
        let client = cluster
            .http_client(cluster.admin_cert())
            .expect("an HTTPS client");
        runtime.add(&scrape(&client, cluster.url()).await);
    }
    Snapshot {
        kube: scrape(&client, cp.url()).await,
        gardener: scrape(&client, gardener).await,
        runtime,
    }
}

/// What the servers counted in one phase of all samples.
struct Window {
    kube: Counts,
    gardener: Counts,
    runtime: Counts,
}

impl Window {
    fn between(before: &Snapshot, after: &Snapshot) -> Window {
        Window {
            kube: after.kube.since(&before.kube),
            gardener: after.gardener.since(&before.gardener),
            runtime: after.runtime.since(&before.runtime),
        }
    }

    /// Asserts the requests only the controller sends in `phase`: per Runtime, `expected`
    /// `(server, verb, resource, count)` rows, and `writes` status writes in all (the writes
    /// the watch saw: none of the controller's was a no-op, none missed by the watch).
    fn check(&self, phase: &str, runtimes: i64, writes: i64, expected: &[(&str, &str, &str, i64)]) {
        assert_eq!(
            self.kube.ok("PUT", "runtimes/status"),
            writes,
            "{phase}: successful status writes counted by kube-apiserver, against the {writes} the watch saw\n{}",
            self.report()
        );
        for (server, verb, resource, per_runtime) in expected {
            let counts = if *server == "kube" {
                &self.kube
            } else {
                &self.gardener
            };
            assert_eq!(
                counts.ok(verb, resource),
                per_runtime * runtimes,
                "{phase}: {verb} {resource} on {server}, {per_runtime} per Runtime\n{}",
                self.report()
            );
        }
    }

    /// kim's requests by identity, and the rows of the resources it works on, as text.
    fn report(&self) -> String {
        let flow = |c: &Counts, f: &str| c.flows.get(f).copied().unwrap_or(0);
        format!(
            "    kim's requests by identity (APF flow schemas): control cluster {} (its \
             ServiceAccount, `service-accounts`: with its informers and leader election), \
             garden user {} (`global-default`), runtime clusters {} (`global-default`)\n    \
             kube-apiserver (every client: the test's Runtime writes and Event reads, the \
             gardenlet's ConfigMaps too): {}\n    gardener-apiserver (every client: the \
             gardenlet's too): {}\n    runtime clusters (every client): {}",
            flow(&self.kube, "service-accounts"),
            flow(&self.kube, "global-default"),
            flow(&self.runtime, "global-default"),
            self.kube
                .rows(&["runtimes", "secrets", "events", "configmaps"]),
            self.gardener.rows(&["shoots"]),
            self.runtime.rows(&["clusterrolebindings"]),
        )
    }
}

// ---- the rogue client ----

/// The rogue's clients: [`ROGUE_USER`], and the controller's identity used by someone else.
struct Rogue {
    user: Api<DynamicObject>,
    impostor: Api<DynamicObject>,
}

impl Rogue {
    /// The controller's identity taking Terminating Runtime `name` back to `Ready`: denied.
    async fn terminating_to_ready(&self, name: &str) -> String {
        let msg = expect_denied("Terminating -> Ready", || async {
            let mut obj = self.impostor.get(name).await?;
            obj.data["status"]["state"] = json!(State::Ready.as_str());
            self.impostor
                .replace_status(name, &PostParams::default(), &obj)
                .await
        })
        .await;
        assert!(msg.contains("Terminating -> Ready"), "{msg}");
        assert_eq!(
            self.impostor.get(name).await.unwrap().data["status"]["state"],
            State::Terminating.as_str(),
            "nothing stored"
        );
        msg
    }
}

/// Grants [`ROGUE_USER`] get/list of Runtimes and update/patch of their status in
/// kcp-system (a Role and RoleBinding, as the admin) and waits until RBAC answers so.
async fn let_the_rogue_write_status(env: &Kcp, rogue: &kube::Client) {
    let admin = env.stack.cp.admin().await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "rogue-status-writer", "namespace": NS},
        "rules": [
            {"apiGroups": [RT_GROUP], "resources": ["runtimes"], "verbs": ["get", "list"]},
            {"apiGroups": [RT_GROUP], "resources": ["runtimes/status"], "verbs": ["update", "patch"]}
        ]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the rogue's Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "rogue-status-writer", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rogue-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ROGUE_USER}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin, NS)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the rogue's Role");
    for verb in ["update", "patch"] {
        let access = Access {
            verb,
            group: RT_GROUP,
            resource: "runtimes/status",
            namespace: NS,
            name: None,
        };
        let seen = crate::support::eventually(LIMIT, || async {
            Kcp::can(rogue, &access).await.then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "{ROGUE_USER} may not {verb} runtimes/status"
        );
    }
}

/// Sends the write `attempt` makes (from a fresh read, again while the answer is a 409
/// conflict with a write of the controller) and expects the validating webhook's 403 with
/// kube-apiserver's message; returns the message.
async fn expect_denied<F, Fut>(what: &str, mut attempt: F) -> String
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<DynamicObject>>,
{
    let prefix = format!(
        "admission webhook \"{}\" denied the request: ",
        crate::support::real::VALIDATE_HOOK
    );
    for _ in 0..20 {
        match attempt().await {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403, "{what}: {s:?}");
                assert!(
                    s.message.starts_with(&prefix),
                    "{what}: the webhook's denial expected, got {:?}",
                    s.message
                );
                return s.message;
            }
            other => panic!("{what}: expected a 403 denial, got {other:?}"),
        }
    }
    panic!("{what}: a conflict 20 times in a row");
}

/// The names of the objects `api` lists.
async fn object_names<K>(api: &Api<K>) -> BTreeSet<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .expect("a list")
        .items
        .iter()
        .map(|o| o.name_any())
        .collect()
}

// ---- the test ----

/// Every sample of [`SAMPLES`] side by side (module documentation): provisioned, updated and
/// deleted with the exact status writes, Events, Shoot, Secret and bindings of each phase,
/// nothing left; the requests of each phase counted by the servers; the rogue's writes
/// denied, the controller's all admitted, none `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_is_provisioned_updated_and_deleted_while_a_rogue_client_is_denied() {
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(2)).await;
    let webhook = env.stack.webhook.as_ref().expect("webhook");
    let denied_before = webhook.count("/validate", "denied").await;
    let denied_403_before = webhook
        .requests()
        .await
        .get(&("/validate".into(), "denied".into(), 403))
        .copied()
        .unwrap_or(0);
    let validate_before = webhook.count("/validate", "allowed").await;
    let mutate_before = webhook.count("/mutate", "allowed").await;
    let admin = env.stack.cp.admin().await;
    let garden_config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), GARDEN_NS);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let before = (
        object_names(&garden_config_maps).await,
        object_names(&secrets).await,
        object_names(&env.shoots().await).await,
    );

    let names: Vec<String> = (0..SAMPLES.len()).map(|i| format!("sample-{i}")).collect();
    // The gardenlet's status writes of the samples' Shoots, and its removal of their
    // finalizer, wait for the test.
    let holds = env
        .hold_shoot_writes_of(
            "samples",
            &names,
            json!([{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"],
                    "resources": ["shoots", "shoots/status"], "operations": ["UPDATE"]}]),
            |r: &Value| r["subResource"] == "status" || removes_finalizer(r),
        )
        .await;
    let versions = Versions::start(env.runtimes().await).await;
    let mut controller = env.spawn_controller("info,kim=debug");
    let metrics_addr = controller
        .logged("metrics_addr", LIMIT)
        .await
        .unwrap_or_else(|e| panic!("kim controller: {e}"));
    let lives: Vec<Life<'_>> = SAMPLES
        .iter()
        .zip(&names)
        .map(|(file, name)| Life {
            env: &env,
            versions: &versions,
            holds: &holds,
            controller: &controller,
            file,
            name: name.clone(),
        })
        .collect();
    let n = lives.len() as i64;
    let count = |written: &[Written]| written.iter().map(Vec::len).sum::<usize>() as i64;
    let mut report = Vec::new();

    // ---- provisioning ----
    let t0 = snapshot(&env.stack.cp, &[]).await;
    let written = futures::future::join_all(lives.iter().map(Life::provision)).await;
    let provisioned = started.elapsed();
    for life in &lives {
        assert_eq!(life.events(1).await, [event(State::Ready)], "{}", life.name);
    }
    let mut clusters: Vec<Arc<ControlPlane>> = Vec::new();
    let mut cluster_of = Vec::new();
    for life in &lives {
        let cluster = env
            .gardenlet
            .cluster(&life.name)
            .await
            .expect("a runtime cluster");
        if !clusters.iter().any(|c| c.url() == cluster.url()) {
            clusters.push(cluster.clone());
        }
        cluster_of.push(cluster);
    }
    let t1 = snapshot(&env.stack.cp, &clusters).await;
    let window = Window::between(&t0, &t1);
    window.check(
        "provisioning",
        n,
        count(&written),
        &[
            ("kube", "PATCH", "runtimes", 1),
            ("kube", "POST", "secrets", 1),
            ("kube", "POST", "events", 1),
            ("gardener", "POST", "shoots", 1),
            ("gardener", "POST", "shoots/adminkubeconfig", 1),
        ],
    );
    report.push(format!(
        "  provisioning ({} status writes; the runtime clusters counted from their start, \
         their own bootstrap and the gardenlet's bindings of Gardener's groups included):\n{}",
        count(&written),
        window.report()
    ));
    for (life, written) in lives.iter().zip(&written) {
        assert_eq!(
            written,
            &provisioning_writes(),
            "{} ({}): the provisioning's status writes",
            life.name,
            life.file
        );
        life.check_shoot("1").await;
    }
    // A pool of runtime clusters: each holds the bindings of every Runtime it serves.
    for (cluster, life) in cluster_of.iter().zip(&lives) {
        life.check_secret(cluster.url()).await;
        let admins: Vec<String> = lives
            .iter()
            .zip(&cluster_of)
            .filter(|(_, c)| c.url() == cluster.url())
            .flat_map(|(l, _)| sample_admins(l.file))
            .chain([SECOND_ADMIN.to_string()])
            .collect();
        assert_eq!(
            managed_bindings(cluster).await,
            bindings_of(admins.iter().map(String::as_str)),
            "{}: one binding per administrator",
            life.name
        );
    }
    // A binding made by someone else, without the label: never touched.
    for cluster in &clusters {
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": MANUAL_BINDING},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": SECOND_ADMIN, "apiGroup": "rbac.authorization.k8s.io"}]
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(cluster.admin().await)
            .create(&PostParams::default(), &binding)
            .await
            .expect("the unlabelled binding");
    }

    // ---- update: an administrator removed, the worker maximum raised ----
    let t1 = snapshot(&env.stack.cp, &clusters).await;
    let updated = futures::future::join_all(lives.iter().map(Life::update)).await;
    for life in &lives {
        assert_eq!(
            life.events(2).await,
            [event(State::Ready), event(State::Ready)],
            "{}",
            life.name
        );
    }
    let t2 = snapshot(&env.stack.cp, &clusters).await;
    let written: Vec<Written> = updated.iter().map(|(w, _)| w.clone()).collect();
    let window = Window::between(&t1, &t2);
    window.check(
        "update",
        n,
        count(&written),
        &[
            ("kube", "PATCH", "runtimes", 0),
            ("kube", "POST", "events", 1),
            ("gardener", "POST", "shoots", 0),
            ("gardener", "POST", "shoots/adminkubeconfig", 0),
        ],
    );
    report.push(format!(
        "  update ({} status writes):\n{}",
        count(&written),
        window.report()
    ));
    for ((life, (written, old_max)), cluster) in lives.iter().zip(&updated).zip(&cluster_of) {
        assert_eq!(
            written,
            &update_writes(),
            "{} ({}): the update's status writes",
            life.name,
            life.file
        );
        let shoot = life.check_shoot("2").await;
        assert_eq!(
            shoot.data["spec"]["provider"]["workers"][0]["maximum"],
            json!(old_max + 5),
            "{}",
            life.name
        );
        // Gardener stored the update as the Shoot's generation 2 and reconciled it.
        assert_eq!(shoot.metadata.generation, Some(2), "Shoot {}", life.name);
        assert_eq!(
            shoot.data["status"]["observedGeneration"],
            json!(2),
            "Shoot {}",
            life.name
        );
        let admins = sample_admins(life.file);
        assert_eq!(
            managed_bindings(cluster).await,
            bindings_of(admins.iter().map(String::as_str)),
            "{}: the removed administrator's binding is gone",
            life.name
        );
        let manual = Api::<ClusterRoleBinding>::all(cluster.admin().await)
            .get_opt(MANUAL_BINDING)
            .await
            .expect("reading the unlabelled binding");
        assert!(manual.is_some(), "the unlabelled binding survives");
    }

    // ---- the rogue client, on a Ready Runtime ----
    let rogue_cert = env.stack.cp.user(ROGUE_USER, &[]);
    let rogue_client = env.stack.cp.client(&rogue_cert).await;
    let_the_rogue_write_status(&env, &rogue_client).await;
    let rogue = Rogue {
        user: Api::namespaced_with(rogue_client, NS, &crate::support::real::runtime_resource()),
        impostor: Api::namespaced_with(
            env.controller_client().await,
            NS,
            &crate::support::real::runtime_resource(),
        ),
    };
    let target = lives[1].name.as_str();
    let mut denied: Vec<(&str, String)> = Vec::new();
    // 1. A user that is no allowed writer, a Ready status unchanged but for a message (PUT).
    let msg = expect_denied("write by a user not allowed", || async {
        let mut obj = rogue.user.get(target).await?;
        obj.data["status"]["conditions"][0]["message"] = json!("rogue was here");
        rogue
            .user
            .replace_status(target, &PostParams::default(), &obj)
            .await
    })
    .await;
    assert!(msg.contains(ROGUE_USER), "the writer is named: {msg}");
    denied.push(("user not allowed (PUT)", msg));
    // 2. The same user, a merge patch.
    let msg = expect_denied("merge patch by a user not allowed", || async {
        let patch = Patch::Merge(json!({"status": {"state": State::Pending.as_str()}}));
        rogue
            .user
            .patch_status(target, &PatchParams::default(), &patch)
            .await
    })
    .await;
    denied.push(("user not allowed (merge patch)", msg));
    // 3. The controller's identity, a reason the model does not know.
    let msg = expect_denied("unknown reason", || async {
        let mut obj = rogue.impostor.get(target).await?;
        obj.data["status"]["conditions"][0]["reason"] = json!("TotallyMadeUp");
        rogue
            .impostor
            .replace_status(target, &PostParams::default(), &obj)
            .await
    })
    .await;
    assert!(msg.contains("TotallyMadeUp"), "{msg}");
    denied.push(("unknown reason", msg));
    // 4. The controller's identity removing the status (a PUT without one: the shipped Role
    //    grants no patch of the status).
    let msg = expect_denied("status removal", || async {
        let mut obj = rogue.impostor.get(target).await?;
        obj.data
            .as_object_mut()
            .expect("an object")
            .remove("status");
        rogue
            .impostor
            .replace_status(target, &PostParams::default(), &obj)
            .await
    })
    .await;
    denied.push(("status removal", msg));

    // ---- deletion; 5. Terminating -> Ready while the target's Shoot is being deleted ----
    let t2 = snapshot(&env.stack.cp, &clusters).await;
    let deleted = futures::future::join_all(
        lives
            .iter()
            .map(|l| l.delete((l.name == target).then_some(&rogue))),
    )
    .await;
    for life in &lives {
        assert_eq!(
            life.events(3).await,
            [
                event(State::Ready),
                event(State::Ready),
                event(State::Terminating)
            ],
            "{}",
            life.name
        );
    }
    let t3 = snapshot(&env.stack.cp, &clusters).await;
    let written: Vec<Written> = deleted.iter().map(|(w, _)| w.clone()).collect();
    let window = Window::between(&t2, &t3);
    window.check(
        "deletion",
        n,
        count(&written),
        &[
            ("kube", "PATCH", "runtimes", 1),
            ("kube", "DELETE", "secrets", 1),
            ("kube", "POST", "events", 1),
            ("gardener", "POST", "shoots/adminkubeconfig", 0),
        ],
    );
    // A pass that reads the Shoot cache before the watch delivered the controller's own DELETE
    // deletes the Shoot once more (answered 200: Gardener's finalizer still holds it; seen on
    // 1.37, 2026-12-03): one or two DELETEs per Runtime.
    let shoot_deletes = window.gardener.ok("DELETE", "shoots");
    assert!(
        (n..=2 * n).contains(&shoot_deletes),
        "deletion: {shoot_deletes} Shoot DELETEs for {n} Runtimes\n{}",
        window.report()
    );
    report.push(format!(
        "  deletion ({} status writes; with the rogue's attempt 5, a GET and a denied PUT \
         as the controller's ServiceAccount):\n{}",
        count(&written),
        window.report()
    ));
    for (life, (written, msg)) in lives.iter().zip(&deleted) {
        assert_eq!(
            written,
            &deletion_writes(),
            "{} ({}): the deletion's status writes",
            life.name,
            life.file
        );
        if let Some(msg) = msg {
            denied.push(("Terminating -> Ready", msg.clone()));
        }
        // The whole life: no write between the phases either.
        let (all, gone) = versions.of(&life.name);
        assert!(gone, "{}", life.name);
        assert_eq!(
            writes(&all, 0),
            [provisioning_writes(), update_writes(), deletion_writes()].concat(),
            "{}: every status write of its life",
            life.name
        );
    }
    assert_eq!(denied.len(), 5, "the five rogue writes");
    // Nothing left: no Shoot, no kubeconfig Secret, no ConfigMap in the project namespace
    // (structured authentication, the Shoots' CAs) beyond what was there before.
    let after = (
        object_names(&garden_config_maps).await,
        object_names(&secrets).await,
        object_names(&env.shoots().await).await,
    );
    assert_eq!(
        after, before,
        "(ConfigMaps in {GARDEN_NS}, Secrets in {NS}, Shoots) as before the Runtimes"
    );
    holds.remove().await;

    // ---- what the webhook saw ----
    let writes = real_shared::status_writes(&metrics_addr).await;
    let states = versions.states();
    let (out, err) = controller.terminate(Duration::from_secs(20));
    assert_eq!(
        webhook.count("/validate", "denied").await - denied_before,
        denied.len() as u64,
        "only the rogue's writes were denied\ncontroller stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(
        webhook
            .requests()
            .await
            .get(&("/validate".into(), "denied".into(), 403))
            .copied()
            .unwrap_or(0)
            - denied_403_before,
        denied.len() as u64,
        "each denial with 403"
    );
    // At least once per stored write (one that passed /validate can still lose the race for
    // etcd and be sent again), and every call to /validate follows one to /mutate.
    let validated = webhook.count("/validate", "allowed").await - validate_before;
    assert!(
        validated >= writes,
        "every status write of the controller was allowed by /validate: {validated} allowed for {writes} writes"
    );
    let mutated = webhook.count("/mutate", "allowed").await - mutate_before;
    assert!(
        mutated >= validated + denied.len() as u64,
        "every status write went through /mutate: {mutated} calls for {validated} allowed and {} denied",
        denied.len()
    );
    assert_eq!(
        forbidden_line(&out, &err, ""),
        None,
        "no request of the controller was forbidden"
    );
    assert!(
        !states.contains(State::Failed.as_str()),
        "never Failed: {states:?}"
    );
    eprintln!(
        "real samples: {} samples Ready after {:.1} s, updated and deleted, each with the \
         status writes of docs/reconciler.md and one Event per phase; {writes} status writes \
         of the controller admitted ({mutated} /mutate calls), {} rogue writes denied; \
         {:.1} s in all. Requests per phase, all samples:\n{}",
        names.len(),
        provisioned.as_secs_f64(),
        denied.len(),
        started.elapsed().as_secs_f64(),
        report.join("\n")
    );
    for (what, msg) in &denied {
        eprintln!("  denied: {what}: 403 {msg}");
    }
}

/// Every file of `samples/runtimes` is one of [`SAMPLES`], so none goes without its life on
/// the real servers.
#[test]
fn every_sample_has_a_lifecycle_test() {
    let mut files: Vec<String> =
        std::fs::read_dir(crate::support::real::repo().join("samples/runtimes"))
            .expect("samples/runtimes")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".yaml"))
            .collect();
    files.sort();
    assert_eq!(
        files, SAMPLES,
        "a sample was added or removed: add it to or remove it from SAMPLES"
    );
}
