//! The controller against a hostile operator and an unlucky cluster, on the real servers
//! ([`RealEnv`]: kube-apiserver and etcd with kim's CRD, `manifests/base` and the real `kim
//! webhook`; gardener-apiserver aggregated behind the same kube-apiserver; the simulated
//! gardenlet with a real runtime cluster per Shoot) and the real `kim controller` binary, as its
//! ServiceAccount and garden user with the shipped RBAC.
//!
//! Each fault is made where it happens in production:
//! - objects the controller owns deleted or changed by hand, as the admin (`system:masters`):
//!   the kubeconfig Secret (while the Runtime is `Ready`, and right after the controller wrote
//!   it), the Secret's `managed-by` label, the Shoot (deleted through Gardener's confirmation),
//!   the Runtime's status (another allowed writer's edit);
//! - a Runtime deleted and created again under its name, a second Runtime naming the Shoot of
//!   the first, a spec changed twice in a row while Gardener is held (the gardenlet paused);
//! - the new runtime cluster's kube-apiserver stopped (SIGSTOP) before the controller first
//!   talks to it, and continued (SIGCONT): "right after the Secret was written, before the
//!   controller read it again" is the provisioning pass that wrote the Secret and waits on that
//!   server (the gardenlet's `Create Succeeded` is held in gardener-apiserver's admission by a
//!   test webhook until the server is stopped, so nobody can reach it before);
//! - the garden user's Role without `list` on Shoots while the controller starts (an RBAC
//!   rule being rolled out);
//! - the garden user's Shoot watch stuck: kube-apiserver's API Priority and Fairness holds it
//!   in a priority level without seats (a "jail": `nominalConcurrencyShares: 0`, nothing to
//!   borrow), so the watch request waits in its queue and is never served, while every other
//!   request of that user is.
//!
//! The controller reads from watch caches with its own writes on top (`caches.rs`): each test
//! checks that what it does is right for the objects as they are, not as the caches last saw
//! them. Tests wait for what happened: a watch of the Runtimes (every version in order), of the
//! Secret, the gardenlet's history, the controller's output; every status write the controller
//! sent passed the real webhook (none denied) and none was denied by its own check.
//!
//! The tests share one environment ([`turn`]): started by the first, used by one test at a time
//! (each starts a controller of its own, and stops it, releasing the Lease), stopped after the
//! last. Each test names its Runtimes (and so Shoots, Secrets and runtime clusters) on its own,
//! and deletes them through the controller at its end.

use crate::support::real_controller::*;
use crate::support::real_shared::*;
use crate::support::reconciler::GARDEN_NS;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule};
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kim::status::table::{reasons, types};
use kim::status::{CondStatus, State};
use kim::testing::reconciler::binding_name;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use testenv::controlplane::ControlPlane;
use testenv::gardenlet::Event as Did;

// ---- the environment the tests share ----

/// How many tests this module has: the shared environment stops after the last of them.
const TESTS: usize = 10;

static ENV: SharedEnv = SharedEnv::new(TESTS, "real-adversarial-env");

/// Waits for the turn of the calling test ([`SharedEnv::turn`]); the flow-control jail of
/// [`a_runtime_deleted_while_the_shoot_watch_is_stuck_still_deletes_its_shoot`] is removed
/// first ([`remove_jail`]).
async fn turn() -> Turn {
    ENV.turn(remove_jail).await
}

// ---- the objects around a Runtime ----

/// The label the controller's kubeconfig Secret watch selects on, and its value.
const MANAGED_BY: (&str, &str) = (
    "operator.kyma-project.io/managed-by",
    "infrastructure-manager",
);
/// The label of the administrators' bindings kim makes in a runtime cluster.
const BINDING_LABEL: &str = "reconciler.kyma-project.io/managed-by";

/// Records the kubeconfig Secret of Runtime `name`.
async fn record_secret(env: &RealEnv, name: &str) -> Recorder<Secret> {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", secret_name(name)));
    Recorder::start(secrets(env).await, config).await
}

/// The server of the kubeconfig a Secret holds.
fn kubeconfig_server(secret: &Secret) -> Option<String> {
    let bytes = &secret.data.as_ref()?.get("config")?.0;
    let parsed = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(bytes).ok()?).ok()?;
    parsed.clusters.first()?.cluster.as_ref()?.server.clone()
}

fn managed_by(secret: &Secret) -> Option<&str> {
    secret.labels().get(MANAGED_BY.0).map(String::as_str)
}

/// The names of kim's administrators' bindings in a runtime cluster, sorted.
async fn bindings(cluster: &ControlPlane) -> Vec<String> {
    let mut names: Vec<String> = Api::<ClusterRoleBinding>::all(cluster.admin().await)
        .list(&ListParams::default().labels(BINDING_LABEL))
        .await
        .expect("the runtime cluster's ClusterRoleBindings")
        .items
        .into_iter()
        .map(|b| b.name_any())
        .collect();
    names.sort();
    names
}

/// The runtime cluster of Shoot `name`.
async fn cluster(env: &RealEnv, name: &str) -> Arc<ControlPlane> {
    env.gardenlet
        .cluster(name)
        .await
        .unwrap_or_else(|| panic!("no runtime cluster for Shoot {name}"))
}

/// The administrator of the sample `aws-minimal.yaml`.
const ADMIN: &str = "admin@myorg.com";

/// A process stopped with SIGSTOP; continued (SIGCONT) when dropped, also when the test fails.
struct Stopped {
    pid: u32,
    what: &'static str,
}

fn signal(pid: u32, name: &str) -> bool {
    std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

impl Stopped {
    fn stop(what: &'static str, pid: u32) -> Stopped {
        assert!(signal(pid, "STOP"), "SIGSTOP to {what} (pid {pid})");
        Stopped { pid, what }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !signal(self.pid, "CONT") && !std::thread::panicking() {
            panic!("SIGCONT to {} (pid {})", self.what, self.pid);
        }
    }
}

/// The pass of the controller that wrote the kubeconfig Secret of a Runtime being provisioned,
/// held in the runtime cluster ([`Run::provision_until_the_secret_is_written`]).
struct Held {
    secrets: Recorder<Secret>,
    /// The Secret the pass wrote.
    written: Secret,
    /// The Runtime's resourceVersion once the Secret was written: the pass writes the status
    /// when it ends (`Ready`, or `Configured=False` if the runtime cluster failed it), so while
    /// the Runtime is stored at this version the pass has not ended.
    runtime_version: Option<String>,
    /// The runtime cluster's kube-apiserver, stopped.
    stopped: Stopped,
    cluster: Arc<ControlPlane>,
}

impl Run<'_> {
    /// Creates Runtime `name` and provisions it until the pass that writes its kubeconfig
    /// Secret has written it, and holds that pass there: gardener-apiserver holds the
    /// gardenlet's status write `Create Succeeded` in admission ([`RealEnv::hold_shoot_writes`])
    /// while the test stops the kube-apiserver of the Shoot's new runtime cluster (SIGSTOP: it
    /// accepts connections and answers nothing, as a hung server does). The controller then
    /// sees the Shoot done, writes the Secret, and binds the administrators in that cluster,
    /// where its request waits. Returns once the watch shows the Secret and the Runtime has no
    /// status written since: whatever the test does now happens between the controller's write
    /// of the Secret and its next read of it.
    async fn provision_until_the_secret_is_written(&self, name: &str) -> Held {
        let env = self.env;
        let secrets = record_secret(env, name).await;
        let mut hold = env
            .hold_shoot_writes(name, "shoots/status", &["UPDATE"])
            .await;
        env.create_runtime(name).await;
        let (stopped, cluster) = loop {
            let write = hold.next("the gardenlet's Create Succeeded").await;
            let op = &write.request["object"]["status"]["lastOperation"];
            if op["type"] == "Create" && op["state"] == "Succeeded" {
                // The gardenlet started the cluster (and bound the admins' groups there)
                // before it writes this; nobody has been told of it yet.
                let cluster = cluster(env, name).await;
                let stopped =
                    Stopped::stop("the runtime cluster's kube-apiserver", cluster.pids().1);
                write.answer(Admission::Allow);
                break (stopped, cluster);
            }
            write.answer(Admission::Allow);
        };
        hold.remove().await;
        let written = secrets
            .wait_for(
                "the kubeconfig Secret written",
                |h| h.iter().find_map(Seen::applied).cloned(),
                || self.context(),
            )
            .await;
        let runtime = self
            .env
            .runtimes()
            .await
            .get(name)
            .await
            .expect("the Runtime");
        assert!(
            !is(&runtime, State::Ready),
            "the pass that wrote the Secret should wait on the stopped runtime cluster before \
             it writes Ready: {}\n{}",
            summary(&runtime),
            self.context()
        );
        Held {
            secrets,
            written,
            runtime_version: runtime.resource_version(),
            stopped,
            cluster,
        }
    }

    /// Asserts that the pass of `held` has not ended: the Runtime is stored as it was when the
    /// Secret was written (a quorum read).
    async fn still_held(&self, held: &Held, when: &str) {
        let runtime = self
            .env
            .runtimes()
            .await
            .get(&runtime_of(&held.written))
            .await;
        let runtime = runtime.expect("the Runtime");
        assert_eq!(
            runtime.resource_version(),
            held.runtime_version,
            "when {when}, the pass that wrote the Secret should still wait on the stopped \
             runtime cluster, but the Runtime was written: {}\n{}",
            summary(&runtime),
            self.context()
        );
    }
}

/// The Runtime a kubeconfig Secret belongs to (Runtime name = runtime ID here).
fn runtime_of(secret: &Secret) -> String {
    secret
        .name_any()
        .strip_prefix("kubeconfig-")
        .expect("a kubeconfig Secret")
        .to_string()
}

fn uid_precondition(uid: &str) -> kube::api::Preconditions {
    kube::api::Preconditions {
        uid: Some(uid.to_string()),
        resource_version: None,
    }
}

/// The newest version of Runtime `name` recorded, once the watch has caught up.
async fn current(run: &Run<'_>, name: &str) -> DynamicObject {
    run.versions_since(name, 0)
        .await
        .pop()
        .unwrap_or_else(|| panic!("no version of Runtime {name}"))
}

// ---- the tests ----

/// A kubeconfig Secret deleted by hand right after the controller wrote it (a pruning tool, an
/// operator's script), before the controller read it again: the next pass writes it again (the
/// Secret watch reports the deletion), it does not take its own earlier write for the Secret.
/// The Runtime is `Ready` with a kubeconfig Secret of its cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_deleted_right_after_it_was_written_is_written_again() {
    let env = turn().await;
    let name = "adv-written";
    let run = Run::start(&env).await;
    let held = run.provision_until_the_secret_is_written(name).await;
    let written = held.written.uid().expect("uid");
    secrets(&env)
        .await
        .delete(
            &secret_name(name),
            &DeleteParams::default().preconditions(uid_precondition(&written)),
        )
        .await
        .expect("delete the Secret just written");
    held.secrets
        .wait_for(
            "the deletion delivered",
            |h| {
                h.iter()
                    .any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_ref() == Some(&written)))
                    .then_some(())
            },
            || run.context(),
        )
        .await;
    run.still_held(&held, "the Secret was deleted").await;
    drop(held.stopped);
    run.ready(name, 0).await;
    let again = held
        .secrets
        .wait_for(
            "a new kubeconfig Secret",
            |h| {
                h.iter()
                    .filter_map(Seen::applied)
                    .find(|s| s.uid().is_some_and(|u| u != written))
                    .cloned()
            },
            || run.context(),
        )
        .await;
    assert_eq!(managed_by(&again), Some(MANAGED_BY.1), "kim's label");
    assert_eq!(
        kubeconfig_server(&again).as_deref(),
        Some(held.cluster.url()),
        "a kubeconfig of the Runtime's cluster is stored"
    );
    run.settle(name).await;
    let now = current(&run, name).await;
    assert!(is(&now, State::Ready), "{}", summary(&now));
    run.finish(&[name]).await;
}

/// A kubeconfig Secret deleted by hand a while after its Runtime became `Ready` is written
/// again; the Runtime stays `Ready` throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_deleted_by_hand_while_ready_is_written_again() {
    let env = turn().await;
    let name = "adv-by-hand";
    let run = Run::start(&env).await;
    env.create_runtime(name).await;
    let (ready_at, _) = run.ready(name, 0).await;
    // Reconciles of the Ready Runtime well after the Secret watch delivered the Secret (an
    // annotation on the Runtime each; no new generation), so the deletion below comes long
    // after the controller last wrote the Secret.
    for _ in 0..2 {
        run.settle(name).await;
    }
    let secrets_recorder = record_secret(&env, name).await;
    let old = secrets(&env)
        .await
        .get(&secret_name(name))
        .await
        .expect("the kubeconfig Secret")
        .uid()
        .expect("uid");
    secrets(&env)
        .await
        .delete(
            &secret_name(name),
            &DeleteParams::default().preconditions(uid_precondition(&old)),
        )
        .await
        .expect("delete the kubeconfig Secret");
    let again = secrets_recorder
        .wait_for(
            "a new kubeconfig Secret",
            |h| {
                h.iter()
                    .filter_map(Seen::applied)
                    .find(|s| s.uid().is_some_and(|u| u != old))
                    .cloned()
            },
            || run.context(),
        )
        .await;
    let cluster = cluster(&env, name).await;
    assert_eq!(kubeconfig_server(&again).as_deref(), Some(cluster.url()));
    assert_eq!(managed_by(&again), Some(MANAGED_BY.1));
    // The reconcile that wrote it has ended, with whatever status it wrote.
    run.settle(name).await;
    run.stayed_ready(name, ready_at).await;
    run.finish(&[name]).await;
}

/// A kubeconfig Secret whose `managed-by` label is removed by hand right after the controller
/// wrote it leaves the controller's Secret watch (a metadata watch on that label): the
/// controller writes it again under kim's labels (it exists, so it is replaced at the version
/// read, the same object), and the Runtime is `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_whose_label_is_removed_gets_kims_labels_back() {
    let env = turn().await;
    let name = "adv-label";
    let run = Run::start(&env).await;
    let held = run.provision_until_the_secret_is_written(name).await;
    let written = held.written.uid().expect("uid");
    let unlabel = json!({"metadata": {
        "labels": {MANAGED_BY.0: null},
        "resourceVersion": held.written.resource_version(),
    }});
    secrets(&env)
        .await
        .patch(
            &secret_name(name),
            &PatchParams::default(),
            &Patch::Merge(&unlabel),
        )
        .await
        .expect("remove the label of the Secret just written");
    let unlabelled_at = held
        .secrets
        .wait_for(
            "the label removal delivered",
            |h| {
                h.iter().position(|s| {
                    s.applied().is_some_and(|o| {
                        o.uid().as_ref() == Some(&written) && managed_by(o).is_none()
                    })
                })
            },
            || run.context(),
        )
        .await;
    run.still_held(&held, "the label was removed").await;
    drop(held.stopped);
    run.ready(name, 0).await;
    let back = held
        .secrets
        .wait_for(
            "the label back on the Secret",
            |h| {
                h[unlabelled_at..]
                    .iter()
                    .filter_map(Seen::applied)
                    .find(|o| managed_by(o) == Some(MANAGED_BY.1))
                    .cloned()
            },
            || run.context(),
        )
        .await;
    assert_eq!(
        back.uid().as_deref(),
        Some(written.as_str()),
        "the same Secret, renewed in place"
    );
    assert_eq!(
        kubeconfig_server(&back).as_deref(),
        Some(held.cluster.url())
    );
    run.settle(name).await;
    let now = current(&run, name).await;
    assert!(is(&now, State::Ready), "{}", summary(&now));
    run.finish(&[name]).await;
}

/// A Shoot deleted by hand while its Runtime is `Ready` (through Gardener: confirmed, deleted,
/// its cluster gone) is created again by the next reconcile. The new Shoot is a new cluster:
/// before the Runtime is `Ready` again, its kubeconfig Secret must hold a kubeconfig of the new
/// cluster and the administrators must be bound there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shoot_deleted_by_hand_is_created_again_and_its_new_cluster_is_configured() {
    let env = turn().await;
    let name = "adv-shoot";
    let run = Run::start(&env).await;
    env.create_runtime(name).await;
    let (ready_at, _) = run.ready(name, 0).await;
    let old_cluster = cluster(&env, name).await;
    let old_url = old_cluster.url().to_string();
    assert_eq!(bindings(&old_cluster).await, [binding_name(ADMIN)]);
    drop(old_cluster);
    let old_shoot = env
        .shoot(name)
        .await
        .expect("the Shoot")
        .uid()
        .expect("uid");

    let shoots = env.shoots().await;
    let confirm =
        json!({"metadata": {"annotations": {testenv::gardener::CONFIRM_DELETION: "true"}}});
    shoots
        .patch(name, &PatchParams::default(), &Patch::Merge(&confirm))
        .await
        .expect("confirm the Shoot's deletion");
    shoots
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Shoot");
    env.gardenlet
        .wait_for(LIMIT, |h| {
            h.of(name).contains(&Did::FinalizerRemoved).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("the Shoot deleted by Gardener: {e}"));

    let (left, _) = run
        .version(name, ready_at, "no longer Ready", |o| !is(o, State::Ready))
        .await;
    let (_, again) = run.ready(name, left).await;
    let new_shoot = env.shoot(name).await.expect("the Shoot created again");
    assert_ne!(
        new_shoot.uid().as_deref(),
        Some(old_shoot.as_str()),
        "a new Shoot"
    );
    let new_cluster = cluster(&env, name).await;
    assert_ne!(new_cluster.url(), old_url, "a new cluster");
    let stored = secrets(&env)
        .await
        .get(&secret_name(name))
        .await
        .expect("the kubeconfig Secret");
    let points_at = kubeconfig_server(&stored);
    let bound = bindings(&new_cluster).await;
    assert!(
        points_at.as_deref() == Some(new_cluster.url()) && bound == [binding_name(ADMIN)],
        "once Ready again ({}), the kubeconfig Secret must point at the new cluster {} (it \
         points at {points_at:?}; the old one was {old_url}) and the administrators must be \
         bound there (bindings: {bound:?})\n{}",
        summary(&again),
        new_cluster.url(),
        run.context()
    );
    run.finish(&[name]).await;
}

/// The flow-control "jail" of [`a_runtime_deleted_while_the_shoot_watch_is_stuck_still_deletes_its_shoot`]:
/// a priority level without seats of its own and nothing to borrow, whose requests wait in
/// its queue until they time out (kube-apiserver answers 429 then), and a FlowSchema that sends
/// the garden user's watches of Shoots there, before every shipped schema but `exempt`.
const JAIL: &str = "kim-test-stuck-shoot-watch";

fn jail_objects() -> (PriorityLevelConfiguration, FlowSchema) {
    let level = serde_json::from_value(json!({
        "metadata": {"name": JAIL},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue",
                              "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 50}},
        }},
    }))
    .expect("a PriorityLevelConfiguration");
    let schema = serde_json::from_value(json!({
        "metadata": {"name": JAIL},
        "spec": {
            "priorityLevelConfiguration": {"name": JAIL},
            "matchingPrecedence": 10,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": GARDEN_USER}}],
                "resourceRules": [{"verbs": ["watch"], "apiGroups": ["core.gardener.cloud"],
                                   "resources": ["shoots"], "namespaces": [GARDEN_NS]}],
            }],
        },
    }))
    .expect("a FlowSchema");
    (level, schema)
}

/// Deletes the jail's objects, if any.
async fn remove_jail(env: &RealEnv) {
    let admin = env.stack.cp.admin().await;
    let gone = |r: kube::Result<()>, what: &str| match r {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting the {what} {JAIL}: {e}"),
    };
    gone(
        Api::<FlowSchema>::all(admin.clone())
            .delete(JAIL, &DeleteParams::default())
            .await
            .map(|_| ()),
        "FlowSchema",
    );
    gone(
        Api::<PriorityLevelConfiguration>::all(admin)
            .delete(JAIL, &DeleteParams::default())
            .await
            .map(|_| ()),
        "PriorityLevelConfiguration",
    );
}

/// Creates the jail and waits until kube-apiserver's flow control has taken it in (it writes
/// the FlowSchema's `Dangling` condition, `False`, once it has digested it).
async fn install_jail(env: &RealEnv) {
    let admin = env.stack.cp.admin().await;
    let (level, schema) = jail_objects();
    Api::<PriorityLevelConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &level)
        .await
        .expect("create the jail's priority level");
    let schemas = Api::<FlowSchema>::all(admin);
    schemas
        .create(&PostParams::default(), &schema)
        .await
        .expect("create the jail's FlowSchema");
    let digested = crate::support::eventually(LIMIT, || {
        let schemas = schemas.clone();
        async move {
            let fs = schemas.get(JAIL).await.ok()?;
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
        "kube-apiserver did not take in the FlowSchema {JAIL} within {LIMIT:?}"
    );
}

/// The jail's counters of kube-apiserver's flow control: (requests queued, requests
/// dispatched) for the FlowSchema.
async fn jail_counts(env: &RealEnv) -> (u64, u64) {
    let cp = &env.stack.cp;
    let text = cp
        .http_client(cp.admin_cert())
        .expect("an HTTPS client")
        .get(format!("{}/metrics", cp.url()))
        .send()
        .await
        .expect("scrape kube-apiserver")
        .text()
        .await
        .expect("kube-apiserver's metrics");
    let label = format!("flow_schema=\"{JAIL}\"");
    let sum = |metric: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(metric) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v.round() as u64)
            .sum()
    };
    (
        sum("apiserver_flowcontrol_request_queue_length_after_enqueue_count{"),
        sum("apiserver_flowcontrol_dispatched_requests_total{"),
    )
}

/// A Runtime deleted while the controller's Shoot watch is stuck (its watch request waits and
/// is never served; the initial list worked, before the Shoot existed): the Shoot the Runtime
/// created exists in Gardener, the watch never showed it. The deletion must not release the
/// Runtime without asking Gardener to delete that Shoot (an orphaned cluster nobody deletes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_deleted_while_the_shoot_watch_is_stuck_still_deletes_its_shoot() {
    let env = turn().await;
    let name = "adv-stuck";
    install_jail(&env).await;
    let shoots = Recorder::start(
        env.shoots().await,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .await;
    let run = Run::start(&env).await;
    let rt = env.create_runtime(name).await;
    let pending = row(types::PROVISIONED, reasons::PENDING);
    run.version(name, 0, "Pending, its Shoot created", |o| {
        is(o, State::Pending) && has_condition(o, pending, CondStatus::Unknown)
    })
    .await;
    assert!(env.shoot(name).await.is_some(), "the Shoot was created");
    env.runtimes()
        .await
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Runtime");
    let uid = rt.uid().expect("uid");
    // Whichever comes first: the Shoot's deletion requested (or the Shoot gone), or the Runtime
    // released.
    let released = tokio::select! {
        () = shoots.wait_for("the Shoot's deletion requested", |h| {
            h.iter().any(|s| match s {
                Seen::Applied(o) => o.metadata.deletion_timestamp.is_some(),
                Seen::Deleted(_) => true,
            }).then_some(())
        }, || run.context()) => false,
        () = run.runtimes.wait_for("the Runtime released", |h| {
            h.iter().any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_ref() == Some(&uid))).then_some(())
        }, || run.context()) => true,
    };
    let shoot = env.shoot(name).await;
    assert!(
        shoot
            .as_ref()
            .is_none_or(|s| s.metadata.deletion_timestamp.is_some()),
        "the Runtime was {} while its Shoot exists and nobody asked Gardener to delete it \
         (an orphaned Shoot)\n{}",
        if released { "released" } else { "kept" },
        run.context()
    );
    // The controller's Shoot watch was held all along: queued, never served.
    let (queued, dispatched) = jail_counts(&env).await;
    assert!(
        queued >= 1 && dispatched == 0,
        "the controller's Shoot watches waited in the jail ({queued} queued) and none was \
         served ({dispatched} dispatched)"
    );
    eprintln!(
        "stuck Shoot watch: {queued} watch requests of the controller queued in the jail, \
         {dispatched} served; the Runtime was {} when the Shoot's deletion was seen",
        if released { "released" } else { "kept" }
    );
    // Released: the watch gets through again, and the deletion runs to its end.
    remove_jail(&env).await;
    run.finish(&[name]).await;
}

/// A Runtime deleted and created again under its name (same runtime ID, same Shoot name) right
/// after it was released: the new one is provisioned from the start (its first status
/// `Pending`), on a new Shoot, with a new kubeconfig Secret and its administrators; nothing the
/// controller remembered of the first (own writes keyed by name, administrators' sync) stands
/// in for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_created_again_under_its_name_is_provisioned_afresh() {
    let env = turn().await;
    let name = "adv-again";
    let run = Run::start(&env).await;
    let first = env.create_runtime(name).await.uid().expect("uid");
    run.ready(name, 0).await;
    let first_shoot = env.shoot(name).await.expect("the Shoot").uid();
    let first_secret = secrets(&env)
        .await
        .get(&secret_name(name))
        .await
        .expect("the kubeconfig Secret")
        .uid();
    env.runtimes()
        .await
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Runtime");
    run.runtimes
        .wait_for(
            "the first Runtime released",
            |h| {
                h.iter()
                    .any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_ref() == Some(&first)))
                    .then_some(())
            },
            || run.context(),
        )
        .await;
    assert!(env.shoot(name).await.is_none(), "the first Shoot is gone");
    assert!(
        secrets(&env)
            .await
            .get_opt(&secret_name(name))
            .await
            .expect("reading the Secret")
            .is_none(),
        "the first Secret is gone"
    );
    let mark = run.runtimes.len();
    let second = env.create_runtime(name).await.uid().expect("uid");
    run.version(name, mark, "Ready again", |o| {
        o.uid().as_ref() == Some(&second) && is(o, State::Ready)
    })
    .await;
    let written: Vec<DynamicObject> = run
        .versions_since(name, mark)
        .await
        .into_iter()
        .filter(|o| state(o).is_some())
        .collect();
    assert!(
        written.first().is_some_and(|o| is(o, State::Pending)),
        "the new Runtime's first status is Pending: {:#?}",
        written.iter().map(summary).collect::<Vec<_>>()
    );
    assert_ne!(env.shoot(name).await.expect("the Shoot").uid(), first_shoot);
    assert_ne!(
        secrets(&env)
            .await
            .get(&secret_name(name))
            .await
            .expect("the kubeconfig Secret")
            .uid(),
        first_secret
    );
    assert_eq!(
        bindings(&*cluster(&env, name).await).await,
        [binding_name(ADMIN)]
    );
    run.finish(&[name]).await;
}

/// Another allowed writer (an operator in `system:masters`) sets the status of a `Ready`
/// Runtime to `Pending` with `Configured=False` between two passes: the controller sees that
/// status, not its own last write, and brings the Runtime back to `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_edited_by_another_writer_is_reconciled_back() {
    let env = turn().await;
    let name = "adv-edit";
    let run = Run::start(&env).await;
    env.create_runtime(name).await;
    run.ready(name, 0).await;
    let configuration_error = row(types::CONFIGURED, reasons::CONFIGURATION_ERROR);
    let api = env.runtimes().await;
    let mut tries = 0;
    let edited = loop {
        let mut rt = api.get(name).await.expect("read the Runtime");
        rt.data["status"]["state"] = json!(State::Pending.as_str());
        let configured = rt.data["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .iter_mut()
            .find(|c| c["type"] == configuration_error.0)
            .expect("a Configured condition");
        configured["status"] = json!(CondStatus::False.as_str());
        configured["reason"] = json!(configuration_error.1);
        configured["message"] = json!("set by hand");
        // A transition time of its own, later than the stored one (the mutating webhook
        // would stamp one left unchanged: a change of this write, not of the controller's).
        let stored: Timestamp = configured["lastTransitionTime"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("a stored transition time");
        let later = stored
            .checked_add(SignedDuration::from_secs(1))
            .expect("a time")
            .max(Timestamp::now().round(Unit::Second).expect("a time"));
        configured["lastTransitionTime"] = json!(later.to_string());
        match api.replace_status(name, &PostParams::default(), &rt).await {
            Err(kube::Error::Api(s)) if s.code == 409 && tries < 10 => tries += 1,
            other => break other.expect("the operator's status write"),
        }
    };
    let edited_rv = edited.resource_version();
    let (at, stored) = run
        .version(name, 0, "as the operator wrote it", |o| {
            o.resource_version() == edited_rv
        })
        .await;
    assert!(
        is(&stored, State::Pending)
            && has_condition(&stored, configuration_error, CondStatus::False),
        "{}",
        summary(&stored)
    );
    run.ready(name, at).await;
    run.finish(&[name]).await;
}

/// A second Runtime (another runtime ID) naming the Shoot of a `Ready` Runtime fails with
/// `ConversionErr`; deleting it deletes neither that Shoot nor the first Runtime's kubeconfig
/// Secret, and the first stays `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_runtime_naming_the_same_shoot_fails_and_its_deletion_spares_the_first() {
    let env = turn().await;
    let (name, intruder) = ("adv-first", "adv-second");
    let run = Run::start(&env).await;
    env.create_runtime(name).await;
    let (ready_at, _) = run.ready(name, 0).await;
    env.stack
        .create_sample("aws-minimal.yaml", intruder, |obj| {
            obj["metadata"]["labels"][kim::api::LABEL_RUNTIME_ID] = json!(intruder);
            obj["metadata"]["labels"][kim::api::LABEL_SHOOT_NAME] = json!(name);
            obj["spec"]["shoot"]["name"] = json!(name);
            obj["spec"]["shoot"]["secretBindingName"] = json!("hyperscaler-aws");
        })
        .await;
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    run.version(intruder, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    let mark = run.runtimes.len();
    let uid = env
        .runtimes()
        .await
        .get(intruder)
        .await
        .expect("the intruder")
        .uid()
        .expect("uid");
    env.runtimes()
        .await
        .delete(intruder, &DeleteParams::default())
        .await
        .expect("delete the intruder");
    run.runtimes
        .wait_for(
            "the intruder released",
            |h| {
                h[mark..]
                    .iter()
                    .any(|s| matches!(s, Seen::Deleted(o) if o.uid().as_ref() == Some(&uid)))
                    .then_some(())
            },
            || run.context(),
        )
        .await;
    let shoot = env.shoot(name).await.expect("the first Runtime's Shoot");
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "the first Runtime's Shoot is not being deleted: {:?}",
        shoot.metadata
    );
    assert!(
        secrets(&env)
            .await
            .get_opt(&secret_name(name))
            .await
            .expect("reading the Secret")
            .is_some(),
        "the first Runtime's Secret is kept"
    );
    run.stayed_ready(name, ready_at).await;
    run.finish(&[name]).await;
}

/// The administrators changed twice in a row (generations 2 and 3, the second before Gardener
/// could apply the first: the gardenlet is held): the Runtime ends `Ready` for generation 3
/// with exactly the administrators of generation 3 bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_changed_twice_in_a_row_ends_with_the_last_one() {
    let env = turn().await;
    let name = "adv-twice";
    let run = Run::start(&env).await;
    env.create_runtime(name).await;
    let (ready_at, _) = run.ready(name, 0).await;
    env.gardenlet.pause();
    let api = env.runtimes().await;
    let mut generation = 0;
    for admins in [
        json!(["a@myorg.com", "b@myorg.com"]),
        json!(["c@myorg.com"]),
    ] {
        let patch = json!({"spec": {"security": {"administrators": admins}}});
        generation = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("change the administrators")
            .metadata
            .generation
            .expect("a generation");
    }
    assert_eq!(generation, 3);
    env.gardenlet.resume();
    let at_3 = ready_at_generation(generation);
    run.version(name, ready_at, "Ready for generation 3", |o| at_3(Some(o)))
        .await;
    assert_eq!(
        bindings(&*cluster(&env, name).await).await,
        [binding_name("c@myorg.com")]
    );
    run.finish(&[name]).await;
}

/// The controller's JSON log lines saying its Shoot watch failed with a 403.
fn forbidden_shoot_watches(out: &str) -> usize {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["message"] == "watch failed; retrying with backoff"
                && v["watch"] == "Shoots"
                && v["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("403") || e.to_lowercase().contains("forbidden"))
        })
        .count()
}

/// The controller's Shoot list is forbidden at the start (a missing RBAC rule being rolled
/// out): no reconcile acts on the empty Shoot cache (no Shoot created, no status written), none
/// hangs, and once the list is allowed the Runtime is provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_shoot_list_at_the_start_holds_reconciles_until_it_is_allowed() {
    let env = turn().await;
    let name = "adv-nolist";
    let rules = env.role_rules((GARDEN_NS, GARDEN_ROLE)).await;
    let without_list: Vec<PolicyRule> = rules
        .iter()
        .cloned()
        .map(|mut r| {
            if r.resources.iter().flatten().any(|res| res == "shoots") {
                r.verbs.retain(|v| v != "list");
            }
            r
        })
        .collect();
    assert_ne!(without_list, rules, "the garden Role lists Shoots");
    env.set_role_rules((GARDEN_NS, GARDEN_ROLE), &without_list)
        .await;
    wait_garden_access(&env, "list", false).await;
    env.create_runtime(name).await;
    let mut run = Run::start(&env).await;
    run.controller
        .wait_output(LIMIT, |out, _| {
            (forbidden_shoot_watches(out) >= 2).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("two forbidden Shoot lists: {e}"));
    let now = env.runtimes().await.get(name).await.expect("the Runtime");
    assert!(
        now.data.get("status").is_none_or(Value::is_null),
        "no status written: {}",
        summary(&now)
    );
    assert!(env.shoot(name).await.is_none(), "no Shoot created");
    assert!(
        run.controller.exited().is_none(),
        "the controller runs on\n{}",
        run.context()
    );
    env.set_role_rules((GARDEN_NS, GARDEN_ROLE), &rules).await;
    wait_garden_access(&env, "list", true).await;
    // Nothing written until now (a quorum read): every status is written after the list was
    // allowed again.
    let now = env.runtimes().await.get(name).await.expect("the Runtime");
    assert!(
        now.data.get("status").is_none_or(Value::is_null),
        "no status written before the list was allowed: {}",
        summary(&now)
    );
    run.version(name, 0, "Pending once the list is allowed", |o| {
        is(o, State::Pending)
    })
    .await;
    run.ready(name, 0).await;
    run.finish(&[name]).await;
}
