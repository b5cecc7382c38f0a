//! `kim controller` under faults of its API calls and of its own process, on the real servers
//! ([`RealEnv`]: kube-apiserver and etcd with kim's CRD, `manifests/base` and the real `kim
//! webhook`; gardener-apiserver aggregated behind the same kube-apiserver; the simulated
//! gardenlet with real runtime clusters). Faults are made where they happen in production:
//! - on the controller's clients: the controller runs in-process (`kim::reconciler::run_with`,
//!   the settings of the binary, as its ServiceAccount and garden user) on clients whose calls
//!   meet a fault layer ([`crate::support::faults`]) under kim's own request deadline: 409,
//!   429, 500, 403, a hang only the deadline ends, an answer lost after the server carried the
//!   call out; the layer's log says what was injected;
//! - in front of the servers: test admission webhooks on gardener-apiserver (the gardenlet's
//!   status writes held) and on a runtime cluster (the administrators' bindings refused);
//! - on the process: `kim controller` killed with SIGKILL and started again.
//!
//! What must hold: under random faults every Runtime is `Ready` with one Shoot, one kubeconfig
//! Secret and its administrators bound, never `Failed`, never back from `Ready`; Runtimes
//! deleted mid-provisioning leave nothing behind; a lost first status write does not leave
//! the Runtime stuck; Events whose creation fails are sent again; a killed controller's
//! successor goes on without duplicates or a step taken back. The request deadline and the
//! secret material are `real_deadlines_and_secrets`'.
//!
//! The tests of one Runtime or a few share one environment ([`turn`], a runtime cluster per
//! Shoot); the random-fault and the restart tests have one of their own each, whose Runtimes
//! share two runtime clusters. Tests wait for what happened: watches of the Runtimes and Shoots
//! (every version in order), the gardenlet's history, the fault layer's log, the controller's
//! output and counters.
//!
//! # Environment
//!
//! - `KIM_FAULTS_N`: Runtimes of the random-fault test (default 20; the restart test takes at
//!   most 12).
//! - `KIM_FAULTS_SEED`: seed of the fault generator and of the kill points (default
//!   `0x6b696d2d6661756c`).
//!
//! Figures are printed with `eprintln!` (`-- --nocapture`).

use crate::support::faults::*;
use crate::support::real_controller::*;
use crate::support::real_shared::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kim::status::State;
use kim::testing::reconciler::binding_name;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use testenv::gardenlet::{Clusters, Event as Did, Operation};

/// Request deadline of the controllers of the placed-fault tests (the production default).
const DEADLINE: Duration = Duration::from_secs(30);
/// Share of the controller's calls that fail in the random-fault test.
const RATE: f64 = 0.2;
/// Request deadline of the controller's clients: a hung or lost call fails after it.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The administrators of every Runtime of the random-fault test (Runtimes share runtime
/// clusters there, so they must agree on who is bound).
const ADMINS: [&str; 2] = ["admin@myorg.com", "owner@myorg.com"];

/// How many tests of this module take a [`turn`] of the shared environment.
const TESTS: usize = 4;

static ENV: SharedEnv = SharedEnv::new(TESTS, "real-api-faults-env");

/// Waits for the turn of the calling test ([`SharedEnv::turn`]); Runtimes an earlier test
/// left behind (its controller gone) are removed first.
async fn turn() -> Turn {
    ENV.turn(async |env: &RealEnv| remove_left_runtimes(env).await)
        .await
}

/// Limit of the waits for every Runtime `Ready` (or gone) under faults: the time grows with the faults'
/// retries and the machine's load (61–70 s for 20 Runtimes on 2 idle cores, more than 90 s
/// beside a benchmark, 2026-12-03); the waits end as soon as the state is reached.
const UNDER_FAULTS: Duration = Duration::from_secs(300);

fn n_runtimes() -> usize {
    std::env::var("KIM_FAULTS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(20)
}

fn seed() -> u64 {
    std::env::var("KIM_FAULTS_SEED")
        .ok()
        .and_then(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(0x6b69_6d2d_6661_756c)
}

/// Under random faults of 20 % of the controller's calls to the control cluster and Gardener,
/// N Runtimes (the samples `aws-minimal`, `aws` on Kubernetes 1.32 and so with a
/// structured-authentication ConfigMap, `azure`, in turn) all reach `Ready` and are all
/// `Ready` at once while the faults go on; none is ever `Failed`, none goes from `Ready` back
/// (a transient error of a `Ready` Runtime is retried within the grace, not written); each
/// Shoot is created once (one UID per name in a watch of the Shoots) and never deleted; there
/// is exactly one kubeconfig Secret per Runtime, and the administrators are bound in each
/// runtime cluster; neither the webhook nor the controller's own check denied a status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_reach_ready_under_random_api_faults() {
    let n = n_runtimes();
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(2)).await;
    let env_ready = started.elapsed();
    let denied_before = webhook_count(&env, "/validate", "denied").await;
    let runtimes = Recorder::start(env.runtimes().await, watcher::Config::default()).await;
    let shoots = Recorder::start(env.shoots().await, watcher::Config::default()).await;

    let faults = Faults::new();
    faults.random(seed(), RATE);
    let mut settings = faulty_settings(&env, &faults, TIMEOUT).await;
    settings.concurrency = 32;
    settings.backoff_min = Duration::from_millis(200);
    settings.backoff_max = Duration::from_secs(5);
    let controller = InProcess::start(settings);
    let metrics = controller.metrics.clone();

    let names: Vec<String> = (0..n).map(|i| format!("rnd-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        let file = ["aws-minimal.yaml", "aws.yaml", "azure.yaml"][i % 3];
        create(&env, file, name, |o| {
            o["spec"]["security"]["administrators"] = json!(ADMINS);
            if i % 3 == 1 {
                o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
            }
        })
        .await;
    }
    let context = || {
        format!(
            "states: {:?}\nfaults: {}\ncontroller: {} reconciles, task ended: {}",
            state_counts(&runtimes.since(0)),
            faults.summary(),
            metrics.reconciles(),
            controller.finished(),
        )
    };
    runtimes
        .wait_for_within(
            UNDER_FAULTS,
            "every Runtime Ready under faults",
            |h| {
                let ready: BTreeSet<String> = h
                    .iter()
                    .filter_map(Seen::applied)
                    .filter(|o| is(o, State::Ready))
                    .map(|o| o.name_any())
                    .collect();
                names.iter().all(|n| ready.contains(n)).then_some(())
            },
            context,
        )
        .await;
    let each_ready = started.elapsed();
    runtimes
        .wait_for_within(
            UNDER_FAULTS,
            "all Runtimes Ready at once, faults still on",
            |h| {
                let l = latest(h);
                (l.len() == n && l.values().all(|o| is(o, State::Ready))).then_some(())
            },
            context,
        )
        .await;
    let all_ready = started.elapsed();
    faults.off();
    let injected = faults.injected();
    let fault_summary = faults.summary();
    assert!(!controller.finished(), "the controller ended under faults");
    // Everything the controller wrote is in the histories once it has stopped and the
    // watches have caught up with each object as stored now.
    controller.stop().await;
    let context = || {
        format!(
            "states: {:?}\nfaults: {fault_summary}",
            state_counts(&runtimes.since(0))
        )
    };
    for name in &names {
        runtimes.caught_up(name, context).await;
        shoots.caught_up(name, context).await;
    }

    // ---- the status: never Failed, never back from Ready, nothing denied ----
    let history = runtimes.since(0);
    let failed: Vec<String> = history
        .iter()
        .filter_map(Seen::applied)
        .filter(|o| is(o, State::Failed))
        .map(summary)
        .collect();
    assert!(
        failed.is_empty(),
        "Runtimes Failed under transient faults: {failed:#?}"
    );
    let mut was_ready: BTreeSet<String> = BTreeSet::new();
    let mut regressions = Vec::new();
    for o in history.iter().filter_map(Seen::applied) {
        if is(o, State::Ready) {
            was_ready.insert(o.name_any());
        } else if was_ready.contains(&o.name_any()) {
            regressions.push(summary(o));
        }
    }
    assert!(
        regressions.is_empty(),
        "a transient error flipped a Ready Runtime within the grace: {regressions:#?}"
    );
    let denied = webhook_count(&env, "/validate", "denied").await - denied_before;
    assert_eq!(denied, 0, "the webhook denied {denied} status writes");
    assert_eq!(
        metrics.status_denials(),
        0,
        "writes the controller's own model check denied"
    );

    // ---- one Shoot, one Secret per Runtime; the administrators bound ----
    let mut uids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut deleted = Vec::new();
    for s in shoots.since(0) {
        match s {
            Seen::Applied(o) => {
                uids.entry(o.name_any())
                    .or_default()
                    .insert(o.uid().unwrap_or_default());
            }
            Seen::Deleted(o) => deleted.push(o.name_any()),
        }
    }
    assert!(deleted.is_empty(), "Shoots deleted: {deleted:?}");
    let want: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(
        uids.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "a Shoot per Runtime, no other"
    );
    assert!(
        uids.values().all(|u| u.len() == 1),
        "each Shoot created exactly once: {uids:?}"
    );
    let secrets: Api<Secret> = secrets(&env).await;
    let stored: BTreeSet<String> = secrets
        .list(&ListParams::default())
        .await
        .expect("the Secrets")
        .items
        .iter()
        .map(|s| s.name_any())
        .filter(|s| s.starts_with("kubeconfig-"))
        .collect();
    let want_secrets: BTreeSet<String> = names.iter().map(|n| secret_name(n)).collect();
    assert_eq!(stored, want_secrets, "one kubeconfig Secret per Runtime");
    let want_bindings: Vec<String> = {
        let mut b: Vec<String> = ADMINS.iter().map(|a| binding_name(a)).collect();
        b.sort();
        b
    };
    let mut clusters = BTreeSet::new();
    for name in &names {
        let cluster = env
            .gardenlet
            .cluster(name)
            .await
            .unwrap_or_else(|| panic!("no runtime cluster for Shoot {name}"));
        if !clusters.insert(cluster.url().to_string()) {
            continue;
        }
        let mut bound: Vec<String> = Api::<ClusterRoleBinding>::all(cluster.admin().await)
            .list(&ListParams::default().labels(BINDING_LABEL))
            .await
            .expect("the runtime cluster's ClusterRoleBindings")
            .items
            .iter()
            .map(|b| b.name_any())
            .collect();
        bound.sort();
        assert_eq!(
            bound, want_bindings,
            "kim's bindings in the runtime cluster of {name}: one per administrator"
        );
    }

    // ---- the faults were injected, of every kind, into both clusters ----
    let count = |f: &dyn Fn(&Injected) -> bool| injected.iter().filter(|i| f(i)).count();
    for cluster in ["kcp", "garden"] {
        assert!(
            count(&|i| i.cluster == cluster) > 0,
            "no fault injected into the {cluster} calls: {fault_summary}"
        );
    }
    for fault in [
        Fault::Status(409),
        Fault::Status(429),
        Fault::Status(500),
        Fault::Hang,
        Fault::Lost,
    ] {
        assert!(
            count(&|i| i.fault == fault) > 0,
            "no {} fault injected: {fault_summary}",
            fault.label()
        );
    }
    let mut last: BTreeMap<String, &serde_json::Value> = BTreeMap::new();
    let mut writes = 0;
    for o in history.iter().filter_map(Seen::applied) {
        let status = &o.data["status"];
        if !status.is_null() && last.insert(o.name_any(), status) != Some(status) {
            writes += 1;
        }
    }
    eprintln!(
        "real API faults: {n} Runtimes, seed {:#x}, rate {RATE}, deadline {TIMEOUT:?}: environment up after {:.1} s, \
         every one Ready after {:.1} s, all Ready at once after {:.1} s; {} faults injected ({fault_summary}); \
         {writes} status writes seen ({:.1} per Runtime); {} reconciles; 0 Failed, 0 Ready→Pending, 0 denied",
        seed(),
        env_ready.as_secs_f64(),
        each_ready.as_secs_f64(),
        all_ready.as_secs_f64(),
        injected.len(),
        writes as f64 / n as f64,
        metrics.reconciles(),
    );
}

/// A pass whose first status write is lost (here: every status write of the controller
/// answered 500 until Gardener has finished the Shoot; in production a timeout, or a
/// controller killed between the Shoot's creation and the write) leaves a Runtime without
/// status whose Shoot exists. The next pass finds the Shoot done and every step complete; its
/// writes must still be transitions the model allows (none → `Pending` → `Ready`, never none →
/// `Ready`), or the Runtime is stuck with every write denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_first_status_write_does_not_leave_the_runtime_stuck() {
    let env = turn().await;
    let name = "af-lost";
    let denied_before = webhook_count(&env, "/validate", "denied").await;
    let runtimes = record_runtime(&env, name).await;
    let faults = Faults::new();
    faults.rule("kcp", Fault::Status(500), None, |c| {
        c.method != http::Method::GET && c.resource() == (Some("runtimes"), Some("status"))
    });
    let controller = InProcess::start(faulty_settings(&env, &faults, DEADLINE).await);
    let metrics = controller.metrics.clone();
    env.create_runtime(name).await;
    env.gardenlet
        .wait_for(LIMIT, |h| {
            h.find(name, |e| *e == Did::Succeeded(Operation::Create))
        })
        .await
        .unwrap_or_else(|e| panic!("the Shoot's Create: {e}"));
    faults
        .wait_for("a status write refused", |log| !log.is_empty())
        .await;
    let context = || {
        format!(
            "versions: {:#?}\nfaults: {}",
            runtimes
                .since(0)
                .iter()
                .filter_map(Seen::applied)
                .map(summary)
                .collect::<Vec<_>>(),
            faults.summary()
        )
    };
    runtimes.caught_up(name, context).await;
    assert!(
        with_status(&runtimes.since(0)).is_empty(),
        "no status stored while every status write is refused\n{}",
        context()
    );
    faults.off();
    let refused = faults.injected().len();
    runtimes
        .wait_for(
            "Ready once the status writes go through",
            |h| {
                with_status(h)
                    .iter()
                    .any(|o| is(o, State::Ready))
                    .then_some(())
            },
            context,
        )
        .await;
    let statuses: Vec<String> = with_status(&runtimes.since(0))
        .into_iter()
        .map(short)
        .collect();
    assert!(
        statuses.first().is_some_and(|s| s.starts_with("Pending")),
        "the first status stored is Pending: {statuses:#?}"
    );
    delete(&env, &runtimes, name).await;
    controller.stop().await;
    let denied = webhook_count(&env, "/validate", "denied").await - denied_before;
    assert_eq!(denied, 0, "the webhook denied {denied} status writes");
    assert_eq!(
        metrics.status_denials(),
        0,
        "the controller's own check denied a write"
    );
    eprintln!(
        "lost first status write: {refused} status writes refused until the Shoot was created; then {statuses:?}"
    );
}

/// `(action, reason)` of the Events the controller publishes for a Runtime, from the versions
/// of it a watch delivered, in order: `(Reconcile, <state>)` when the state turns `Ready`,
/// `Failed` or `Terminating`, and `(<type>, <reason>)` when a condition turns `False` or
/// changes its reason while `False` (docs/reconciler.md, "Events for what a user acts on").
fn published_transitions(versions: &[&DynamicObject]) -> Vec<(String, String)> {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut events = Vec::new();
    let mut state_before = String::new();
    let mut before: Vec<(String, String, String)> = Vec::new();
    for o in versions {
        let st = s(&o.data["status"]["state"]);
        if st != state_before && ["Ready", "Failed", "Terminating"].contains(&st.as_str()) {
            events.push(("Reconcile".to_string(), st.clone()));
        }
        let now: Vec<(String, String, String)> = o.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (s(&c["type"]), s(&c["status"]), s(&c["reason"])))
            .collect();
        for c in now.iter().filter(|c| c.1 == "False") {
            if !before.contains(c) {
                events.push((c.0.clone(), c.2.clone()));
            }
        }
        state_before = st;
        before = now;
    }
    events.sort();
    events
}

/// An Event whose create fails transiently is sent again: with the first three Event creates
/// answered 500 (as a restarting kube-apiserver or etcd answers), every Event of a provisioning
/// (a `Warning` for the kubeconfig Secret that could not be written at first, then `Ready`) is
/// still stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_create_fails_transiently_is_sent_again() {
    event_creates_answered(500, "af-evt-500").await;
}

/// As [`an_event_whose_create_fails_transiently_is_sent_again`] with 403: a kube-apiserver
/// that has just started answers 403 until its RBAC cache is loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_refused_with_403_is_sent_again() {
    event_creates_answered(403, "af-evt-403").await;
}

/// The first three Event creates answered `code`, the first kubeconfig Secret create 500 (so
/// the provisioning publishes two Events: `KubeconfigReady` turning `False`, then `Ready`);
/// every Event is stored.
async fn event_creates_answered(code: u16, name: &str) {
    let env = turn().await;
    let runtimes = record_runtime(&env, name).await;
    let events = Recorder::start(
        Api::<K8sEvent>::namespaced(env.stack.cp.admin().await, crate::support::real::NS),
        watcher::Config::default(),
    )
    .await;
    let faults = Faults::new();
    faults.rule("kcp", Fault::Status(code), Some(3), |c| {
        c.is("POST", "events", None)
    });
    faults.rule("kcp", Fault::Status(500), Some(1), |c| {
        c.is("POST", "secrets", None)
    });
    let controller = InProcess::start(faulty_settings(&env, &faults, DEADLINE).await);
    env.create_runtime(name).await;
    let context = || {
        format!(
            "versions: {:#?}\nfaults: {}",
            runtimes
                .since(0)
                .iter()
                .filter_map(Seen::applied)
                .map(summary)
                .collect::<Vec<_>>(),
            faults.summary()
        )
    };
    runtimes
        .wait_for(
            "Ready",
            |h| {
                with_status(h)
                    .iter()
                    .any(|o| is(o, State::Ready))
                    .then_some(())
            },
            context,
        )
        .await;
    let expected = published_transitions(&with_status(&runtimes.since(0)));
    assert_eq!(
        expected,
        [("KubeconfigReady", "KubernetesErr"), ("Reconcile", "Ready")]
            .map(|(a, r)| (a.to_string(), r.to_string())),
        "the transitions users act on: the Secret write failure, then Ready\n{}",
        context()
    );
    let stored = |h: &[Seen<K8sEvent>]| {
        let mut got: Vec<(String, String)> = h
            .iter()
            .filter_map(Seen::applied)
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.action.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                )
            })
            .collect();
        got.sort();
        got.dedup();
        got
    };
    events
        .wait_for(
            "an Event per transition users act on",
            |h| (stored(h) == expected).then_some(()),
            || {
                format!(
                    "stored: {:?}\nfaults: {}",
                    stored(&events.since(0)),
                    faults.summary()
                )
            },
        )
        .await;
    let refused = |resource: &str, code: u16| {
        faults
            .injected()
            .iter()
            .filter(|i| i.fault == Fault::Status(code) && i.call.is("POST", resource, None))
            .count()
    };
    assert_eq!(
        refused("events", code),
        3,
        "three Event creates answered {code}"
    );
    assert_eq!(
        refused("secrets", 500),
        1,
        "the first Secret create answered 500"
    );
    let stored_now = stored(&events.since(0)).len();
    delete(&env, &runtimes, name).await;
    controller.stop().await;
    eprintln!(
        "event retry ({code}): {stored_now} Events stored for {} transitions; faults: {}",
        expected.len(),
        faults.summary()
    );
}

/// Under random faults of the controller's calls, Runtimes deleted at four points of their
/// provisioning leave nothing behind (no Shoot, kubeconfig Secret or structured-authentication
/// ConfigMap), none is `Failed` on the way and each got at most one Shoot:
/// - `af-del-0` right after its creation;
/// - `af-del-1` before its Shoot exists (every Shoot creation answered 500 meanwhile: its
///   status shows `Provisioned=False/GardenerErr`);
/// - `af-del-2` while Gardener is `Processing` its creation (the gardenlet's next status write
///   held in gardener-apiserver's admission until the Runtime is deleted);
/// - `af-del-3` after its kubeconfig Secret exists and before `Ready` (the administrators'
///   bindings refused with 500 by a test webhook on its runtime cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_deleted_mid_provisioning_leave_nothing_behind() {
    let env = turn().await;
    let [g0, g1, g2, g3] = ["af-del-0", "af-del-1", "af-del-2", "af-del-3"];
    let denied_before = webhook_count(&env, "/validate", "denied").await;
    let runtimes = Recorder::start(env.runtimes().await, watcher::Config::default()).await;
    let shoots = Recorder::start(env.shoots().await, watcher::Config::default()).await;
    let faults = Faults::new();
    faults.random(seed() ^ 0xde1e7e, RATE);
    let mut hold2 = env
        .hold_shoot_writes(g2, "shoots/status", &["UPDATE"])
        .await;
    let mut hold3 = env
        .hold_shoot_writes(g3, "shoots/status", &["UPDATE"])
        .await;
    let controller = InProcess::start(faulty_settings(&env, &faults, TIMEOUT).await);
    let metrics = controller.metrics.clone();
    let context = || {
        format!(
            "versions: {:#?}\nfaults: {}",
            runtimes
                .since(0)
                .iter()
                .map(|s| match s {
                    Seen::Applied(o) => summary(o),
                    Seen::Deleted(o) => format!("{} deleted", o.name_any()),
                })
                .collect::<Vec<_>>(),
            faults.summary()
        )
    };
    let gone = |name: &'static str| {
        let runtimes = &runtimes;
        async move {
            // A deletion retries each faulted Gardener call with the Runtime's backoff: a few
            // faults in a row took it past 90 s in a CI run (2026-12-03).
            runtimes
                .wait_for_within(
                    UNDER_FAULTS,
                    &format!("Runtime {name} gone"),
                    |h| {
                        h.iter()
                            .any(|s| matches!(s, Seen::Deleted(o) if o.name_any() == name))
                            .then_some(())
                    },
                    context,
                )
                .await
        }
    };
    let delete_now = |name: &'static str| {
        let env = &env;
        async move {
            env.runtimes()
                .await
                .delete(name, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("deleting Runtime {name}: {e}"));
        }
    };

    // ---- 0: deleted right after creation; 1: before its Shoot exists ----
    faults.rule("garden", Fault::Status(500), None, |c| {
        c.is("POST", "shoots", None)
    });
    env.create_runtime(g0).await;
    delete_now(g0).await;
    env.create_runtime(g1).await;
    let (_, blocked) = runtimes
        .wait_for(
            "af-del-1 blocked before its Shoot",
            |h| {
                h.iter().enumerate().find_map(|(i, s)| {
                    let o = s.applied()?;
                    (o.name_any() == g1
                        && condition(o, "Provisioned").is_some_and(|c| {
                            c["status"] == "False" && c["reason"] == "GardenerErr"
                        }))
                    .then(|| (i, o.clone()))
                })
            },
            context,
        )
        .await;
    assert!(env.shoot(g1).await.is_none(), "af-del-1 has no Shoot");
    assert_eq!(
        blocked.metadata.finalizers.as_deref(),
        Some(&[kim::status::table::FINALIZER.to_string()][..]),
        "af-del-1 carries kim's finalizer"
    );
    delete_now(g1).await;
    gone(g0).await;
    gone(g1).await;
    faults.clear_rules();

    // ---- 2: deleted while Gardener is Processing its creation ----
    create(&env, "aws.yaml", g2, |o| {
        o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
    })
    .await;
    let processing = hold2
        .next("the gardenlet's first status write of af-del-2")
        .await;
    processing.answer(Admission::Allow);
    let next = hold2
        .next("the gardenlet's next status write of af-del-2")
        .await;
    runtimes
        .wait_for(
            "af-del-2 with Create/Processing in its status",
            |h| {
                h.iter()
                    .filter_map(Seen::applied)
                    .any(|o| {
                        o.name_any() == g2
                            && o.data["status"]["shootLastOperation"]["type"] == "Create"
                            && o.data["status"]["shootLastOperation"]["state"] == "Processing"
                    })
                    .then_some(())
            },
            context,
        )
        .await;
    delete_now(g2).await;
    next.answer(Admission::Allow);
    hold2.remove().await;

    // ---- 3: deleted after its kubeconfig Secret exists, before Ready ----
    env.create_runtime(g3).await;
    let hook = loop {
        let write = hold3
            .next("the gardenlet's Create Succeeded of af-del-3")
            .await;
        let op = &write.request["object"]["status"]["lastOperation"];
        if op["type"] == "Create" && op["state"] == "Succeeded" {
            // The runtime cluster runs (and nobody has been told of it): its bindings refused.
            let cluster = env
                .gardenlet
                .cluster(g3)
                .await
                .expect("the runtime cluster of af-del-3");
            let hook = install_admission_hook(
                cluster.admin().await,
                "af-del-3-bindings",
                json!([{"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"],
                        "resources": ["clusterrolebindings"],
                        "operations": ["CREATE", "UPDATE", "DELETE"]}]),
                |_| Admission::Deny {
                    code: 500,
                    message: "bindings refused by the test".into(),
                },
            )
            .await;
            write.answer(Admission::Allow);
            break hook;
        }
        write.answer(Admission::Allow);
    };
    hold3.remove().await;
    let secrets_api = secrets(&env).await;
    let secret = secret_name(g3);
    let written = crate::support::eventually(LIMIT, || {
        let (api, secret) = (secrets_api.clone(), secret.clone());
        async move { api.get_opt(&secret).await.ok().flatten().map(|_| ()) }
    })
    .await;
    assert!(
        written.is_some(),
        "the kubeconfig Secret of af-del-3 written\n{}",
        context()
    );
    let now = env.runtimes().await.get(g3).await.expect("af-del-3");
    assert!(
        !is(&now, State::Ready),
        "af-del-3 is held before Ready: {}",
        summary(&now)
    );
    delete_now(g3).await;
    let refused_bindings = hook.seen().len();
    hook.remove().await;
    gone(g2).await;
    gone(g3).await;
    faults.off();
    let fault_summary = faults.summary();
    controller.stop().await;

    // ---- nothing left, nothing Failed, at most one Shoot each ----
    let names = [g0, g1, g2, g3];
    for name in names {
        assert!(
            env.shoot(name).await.is_none(),
            "the Shoot of {name} is gone"
        );
        assert!(
            secrets_api
                .get_opt(&secret_name(name))
                .await
                .expect("reading a Secret")
                .is_none(),
            "the kubeconfig Secret of {name} is gone"
        );
    }
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(
        env.stack.cp.admin().await,
        crate::support::reconciler::GARDEN_NS,
    );
    assert!(
        config_maps
            .get_opt(&format!("structured-auth-config-{g2}"))
            .await
            .expect("reading the ConfigMap")
            .is_none(),
        "the structured-authentication ConfigMap of af-del-2 is gone"
    );
    let mut uids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in shoots.since(0) {
        if let Seen::Applied(o) = s {
            uids.entry(o.name_any())
                .or_default()
                .insert(o.uid().unwrap_or_default());
        }
    }
    assert!(
        uids.values().all(|u| u.len() == 1),
        "at most one Shoot created per Runtime: {uids:?}"
    );
    for name in [g2, g3] {
        assert!(uids.contains_key(name), "{name} had a Shoot");
    }
    let failed: Vec<String> = runtimes
        .since(0)
        .iter()
        .filter_map(Seen::applied)
        .filter(|o| names.contains(&o.name_any().as_str()) && is(o, State::Failed))
        .map(summary)
        .collect();
    assert!(
        failed.is_empty(),
        "Failed under transient faults: {failed:#?}"
    );
    let denied = webhook_count(&env, "/validate", "denied").await - denied_before;
    assert_eq!(denied, 0, "the webhook denied {denied} status writes");
    assert_eq!(
        metrics.status_denials(),
        0,
        "the controller's own check denied a write"
    );
    assert!(
        !faults.injected().is_empty(),
        "random faults were injected: {fault_summary}"
    );
    eprintln!(
        "deletions mid-provisioning: 4 Runtimes gone, nothing left; Shoots created: {:?}; \
         {refused_bindings} binding writes refused in af-del-3's cluster; faults: {fault_summary}",
        uids.keys().collect::<Vec<_>>()
    );
}

// ---- the controller killed and started again ----

/// The webhook's `/validate` denials after the first `before` (from its log): those of a
/// status write, and those of a review whose body never arrived whole (its writer killed while
/// sending it: answered as a denial nobody receives, no status write of a controller).
fn webhook_denials(env: &RealEnv, before: u64) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let webhook = env.stack.webhook.as_ref().expect("the webhook runs");
    let log = format!("{}{}", webhook.proc.stdout(), webhook.proc.stderr());
    let mut denied: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|l| l.get("fields").cloned().unwrap_or(l))
        .filter(|f| f["message"] == "admission review" && f["path"] == "/validate")
        .filter(|f| f["decision"] == "denied")
        .collect();
    // The denials before (the readiness probe's) come first; that they are found shows the
    // log is read right.
    assert!(
        before >= 1 && denied.len() as u64 >= before,
        "the probe's denial is not in the webhook's log ({before} counted, {} logged)",
        denied.len()
    );
    let denied = denied.split_off(before as usize);
    denied.into_iter().partition(|f| {
        let detail = f["detail"].as_str().unwrap_or_default();
        !(detail.contains("cannot read the request body")
            || detail.contains("request body not received"))
    })
}

/// How many status writes a history of Runtimes holds: versions whose status differs from the
/// version of the same Runtime before.
fn status_writes(h: &[Seen<DynamicObject>]) -> usize {
    let mut last: BTreeMap<String, &serde_json::Value> = BTreeMap::new();
    let mut writes = 0;
    for o in h.iter().filter_map(Seen::applied) {
        let status = &o.data["status"];
        if !status.is_null() && last.insert(o.name_any(), status) != Some(status) {
            writes += 1;
        }
    }
    writes
}

/// How far a status has got in a provisioning: 0 accepted (`Provisioned` `Initialised`, or
/// none), 1 Shoot created (no Gardener operation yet), 2 Gardener's operation copied,
/// 3 `Provisioned=True`, 4 `Ready`.
fn progress(o: &DynamicObject) -> u8 {
    let provisioned = condition(o, "Provisioned");
    if is(o, State::Ready) {
        4
    } else if provisioned.is_some_and(|c| c["status"] == "True") {
        3
    } else if o.data["status"]["shootLastOperation"].is_object() {
        2
    } else if provisioned.is_none_or(|c| c["reason"] == "Initialised") {
        0
    } else {
        1
    }
}

/// `kim controller` as deployed (leader election on a 6 s Lease, which the next one takes once
/// it expired) killed with SIGKILL at seeded random points of the provisioning of N Runtimes —
/// after 1 to 6 more status writes each — and started again, five times: every Runtime reaches `Ready`; each Shoot is created
/// once (one UID per name in a watch of the Shoots) and never deleted; one kubeconfig Secret
/// per Runtime; each Runtime's statuses only move forward (accepted, Shoot created, Gardener's
/// operation, Shoot done, `Ready`): a restarted controller goes on from the status its
/// predecessor wrote; the webhook denied no status write (a review whose body never arrived,
/// the write of a controller killed while sending it, is none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_flow_resumes_without_duplicates() {
    const KILLS: usize = 5;
    let n = n_runtimes().min(12);
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(2)).await;
    let denied_before = webhook_count(&env, "/validate", "denied").await;
    let runtimes = Recorder::start(env.runtimes().await, watcher::Config::default()).await;
    let shoots = Recorder::start(env.shoots().await, watcher::Config::default()).await;
    let names: Vec<String> = (0..n).map(|i| format!("rst-{i:02}")).collect();
    for name in &names {
        create(&env, "aws-minimal.yaml", name, |o| {
            o["spec"]["security"]["administrators"] = json!(ADMINS);
        })
        .await;
    }
    let all_ready = |h: &[Seen<DynamicObject>]| {
        let l = latest(h);
        l.len() == n && l.values().all(|o| is(o, State::Ready))
    };
    let mut rng = XorShift::new(seed() ^ 0x00c0_ffee);
    let mut kill_points = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..KILLS {
        let mut controller = env.spawn_controller("info,kim=debug");
        let mark = status_writes(&runtimes.since(0));
        let more = 1 + (rng.next_f64() * 6.0) as usize;
        let (reached, done) = runtimes
            .wait_for(
                "more status writes before the kill",
                |h| {
                    let w = status_writes(h);
                    (w >= mark + more || all_ready(h)).then(|| (w, all_ready(h)))
                },
                || {
                    format!(
                        "states: {:?}\ncontroller (exited: {:?}):\n{}\n{}",
                        state_counts(&runtimes.since(0)),
                        controller.exited(),
                        controller.stdout(),
                        controller.stderr()
                    )
                },
            )
            .await;
        assert!(
            controller.exited().is_none(),
            "the controller exited before its kill:\n{}",
            controller.stderr()
        );
        outputs.push(controller.kill());
        kill_points.push(format!("after write {reached}"));
        if done {
            break;
        }
    }
    let mut last = env.spawn_controller("info,kim=debug");
    runtimes
        .wait_for(
            "all Runtimes Ready after the restarts",
            |h| all_ready(h).then_some(()),
            || {
                format!(
                    "states: {:?}\ncontroller:\n{}",
                    state_counts(&runtimes.since(0)),
                    last.stdout()
                )
            },
        )
        .await;
    for name in &names {
        runtimes.caught_up(name, String::new).await;
        shoots.caught_up(name, String::new).await;
    }
    outputs.push(last.terminate(Duration::from_secs(20)));

    let history = runtimes.since(0);
    for name in &names {
        let versions: Vec<&DynamicObject> = with_status(&history)
            .into_iter()
            .filter(|o| o.name_any() == *name)
            .collect();
        let ranks: Vec<u8> = versions.iter().map(|o| progress(o)).collect();
        assert!(
            ranks.windows(2).all(|p| p[0] <= p[1]),
            "{name}: a step taken back after a restart (progress {ranks:?}): {:#?}",
            versions.iter().map(|o| summary(o)).collect::<Vec<_>>()
        );
    }
    let mut uids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut deleted = Vec::new();
    for s in shoots.since(0) {
        match s {
            Seen::Applied(o) => {
                uids.entry(o.name_any())
                    .or_default()
                    .insert(o.uid().unwrap_or_default());
            }
            Seen::Deleted(o) => deleted.push(o.name_any()),
        }
    }
    assert!(deleted.is_empty(), "Shoots deleted: {deleted:?}");
    assert_eq!(uids.len(), n, "a Shoot per Runtime: {uids:?}");
    assert!(
        uids.values().all(|u| u.len() == 1),
        "each Shoot created exactly once: {uids:?}"
    );
    let stored: BTreeSet<String> = secrets(&env)
        .await
        .list(&ListParams::default())
        .await
        .expect("the Secrets")
        .items
        .iter()
        .map(|s| s.name_any())
        .filter(|s| s.starts_with("kubeconfig-"))
        .collect();
    let want: BTreeSet<String> = names.iter().map(|n| secret_name(n)).collect();
    assert_eq!(stored, want, "one kubeconfig Secret per Runtime");
    let (refused, unreceived) = webhook_denials(&env, denied_before);
    assert!(
        refused.is_empty(),
        "the webhook denied status writes: {refused:#?}"
    );
    for (out, err) in &outputs {
        for needle in ["status write denied", "StatusWriteDenied"] {
            assert!(
                !out.contains(needle) && !err.contains(needle),
                "a controller logged {needle:?}:\n{out}\n{err}"
            );
        }
    }
    eprintln!(
        "restarts: {n} Runtimes, {} SIGKILLs (seed {:#x}; {}), all Ready after {:.1} s in all; {} status writes ({:.1} per Runtime); \
         reviews whose body never arrived (a killed controller's write): {}",
        kill_points.len(),
        seed() ^ 0x00c0_ffee,
        kill_points.join(", "),
        started.elapsed().as_secs_f64(),
        status_writes(&history),
        status_writes(&history) as f64 / n as f64,
        unreceived.len(),
    );
}
