//! `kim controller` through faults of the real control cluster: 50 Runtimes provisioned (as
//! [`crate::real_lifecycle`] provisions one: the real webhook, the shipped RBAC, the real
//! Gardener API aggregated behind the same kube-apiserver, with the simulated gardenlet and a
//! pool of two real runtime clusters) by two controller replicas under leader election on a
//! real Lease, while kube-apiserver (and with it the Gardener API) is killed with SIGKILL and
//! started again (twice, at different points), then etcd (which gardener-apiserver shares),
//! and the leading replica is killed with SIGKILL mid-provisioning.
//!
//! What must hold: every Runtime reaches `Ready`; exactly one Shoot per Runtime was ever
//! created (one UID per name in a watch of the Shoots that resumes across the faults) and none
//! deleted, and exactly one
//! kubeconfig Secret per Runtime exists; the controllers' watches resume on their own (no
//! replica exits; Runtimes created after each fault are provisioned); the standby replica
//! takes the Lease within its duration plus one renew period of the killed leader's last
//! renewal, as the Lease's history read from the server shows; never do two replicas lead at
//! once (their logs); the webhook refuses none of the controllers' status writes.
//!
//! And a leader whose renewals fail (kube-apiserver down beyond the Lease's duration) stops
//! leading before its Lease expires.

use crate::support::real::NS;
use crate::support::real_controller::{LEASE, RealEnv};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use testenv::gardenlet::Clusters;
use testenv::process::Process;

/// `--lease-duration-seconds` of [`RealEnv::spawn_controller`].
const LEASE_SECONDS: u64 = 6;
/// How long before expiry the holder renews (`kim controller`: a third of the duration).
const GRACE_SECONDS: u64 = LEASE_SECONDS / 3;
/// The replicas' log filter: retries of Events are logged at debug level.
const RUST_LOG: &str = "info,kim::reconciler::events=debug";
/// Limit of each wait for progress through a fault.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

/// One version of the Lease as a watch on the server delivered it.
#[derive(Debug, Clone)]
struct LeaseSeen {
    holder: Option<String>,
    acquired: Option<SystemTime>,
    renewed: Option<SystemTime>,
}

fn micro(
    t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
) -> Option<SystemTime> {
    t.as_ref().map(|t| SystemTime::from(t.0))
}

/// Every version of the Lease the test's watch delivered (the watch resumes, relisting if it
/// must, across the faults; a version passed over while it was cut is missing, which can
/// only make the takeover measured below look later than it was).
fn record_lease(client: kube::Client) -> (Arc<Mutex<Vec<LeaseSeen>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    let seen: Arc<Mutex<Vec<LeaseSeen>>> = Arc::default();
    let api: Api<Lease> = Api::namespaced(client, LEASE.0);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", LEASE.1));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(item) = stream.next().await {
            let Ok(lease) = item else { continue };
            let spec = lease.spec.unwrap_or_default();
            out.lock().unwrap().push(LeaseSeen {
                holder: spec.holder_identity,
                acquired: micro(&spec.acquire_time),
                renewed: micro(&spec.renew_time),
            });
        }
    });
    (seen, task)
}

/// The `identity` field of the controller's "acquired the leader Lease" line, once logged.
fn acquired_identity(out: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        let msg = v["message"]
            .as_str()
            .or_else(|| v["fields"]["message"].as_str())?;
        msg.starts_with("acquired the leader Lease")
            .then(|| {
                v["identity"]
                    .as_str()
                    .or_else(|| v["fields"]["identity"].as_str())
            })
            .flatten()
            .map(String::from)
    })
}

/// When a replica led, from its log: `[start, end)` from each "acquired the leader Lease;
/// starting the controller" to the next "… stopping the controller" (`end` = `None`: still
/// leading when the log ends).
fn leading(out: &str) -> Vec<(Timestamp, Option<Timestamp>)> {
    let mut spans: Vec<(Timestamp, Option<Timestamp>)> = Vec::new();
    for l in out.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let (Some(msg), Some(at)) = (
            v["message"].as_str(),
            v["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok()),
        ) else {
            continue;
        };
        if msg.starts_with("acquired the leader Lease") {
            spans.push((at, None));
        } else if msg.ends_with("stopping the controller")
            && let Some(last) = spans.last_mut()
            && last.1.is_none()
        {
            last.1 = Some(at);
        }
    }
    spans
}

/// Whether two replicas' leading spans overlap (an open span ends at `a_end` or `b_end`).
fn overlap(
    a: &[(Timestamp, Option<Timestamp>)],
    b: &[(Timestamp, Option<Timestamp>)],
) -> Option<String> {
    for (s1, e1) in a {
        for (s2, e2) in b {
            let (e1, e2) = (e1.unwrap_or(Timestamp::MAX), e2.unwrap_or(Timestamp::MAX));
            if *s1 < e2 && *s2 < e1 {
                return Some(format!("[{s1}, {e1}) and [{s2}, {e2})"));
            }
        }
    }
    None
}

/// Lines of `out` logged at WARN or ERROR level.
fn warnings(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .is_some_and(|v| v["level"] == "WARN" || v["level"] == "ERROR")
        })
        .map(String::from)
        .collect()
}

/// The Runtimes of kcp-system (as the admin), or `None` while the server does not answer.
async fn runtimes(api: &Api<DynamicObject>) -> Option<Vec<DynamicObject>> {
    api.list(&ListParams::default()).await.ok().map(|l| l.items)
}

/// Waits until `f` holds of the Runtimes as listed (every 250 ms; a list that fails while a
/// server is down is tried again), at most [`PHASE_LIMIT`]; panics with `what` and the
/// controllers' output. What is waited for stays once reached (Shoots and Secrets are never
/// deleted here, a Runtime stays `Ready`).
async fn wait_for(
    what: &str,
    env: &RealEnv,
    controllers: &[&Process],
    mut f: impl FnMut(&[DynamicObject]) -> bool,
) {
    let api = env.runtimes().await;
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        if let Some(list) = runtimes(&api).await
            && f(&list)
        {
            return;
        }
        if Instant::now() > deadline {
            let states: BTreeMap<String, String> = runtimes(&api)
                .await
                .unwrap_or_default()
                .iter()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap_or_default(),
                        o.data["status"]["state"].to_string(),
                    )
                })
                .collect();
            let logs: Vec<String> = controllers
                .iter()
                .map(|p| format!("--- stdout\n{}\n--- stderr\n{}", p.stdout(), p.stderr()))
                .collect();
            panic!(
                "{what}: not within {PHASE_LIMIT:?}; states {states:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn ready(list: &[DynamicObject]) -> usize {
    list.iter()
        .filter(|o| o.data["status"]["state"] == "Ready")
        .count()
}

/// Every Shoot a watch of the project namespace saw, by name: the UIDs it had (one per
/// creation) and whether it was ever seen deleted. The watch relists after each fault, so
/// a Shoot created while it was cut is seen afterwards; one created and deleted while it was
/// cut would be missed, but nothing deletes Shoots here.
#[derive(Debug, Default, Clone)]
struct ShootsSeen {
    uids: BTreeMap<String, BTreeSet<String>>,
    deleted: BTreeSet<String>,
}

fn record_shoots(
    api: Api<DynamicObject>,
) -> (
    tokio::sync::watch::Receiver<ShootsSeen>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::watch::channel(ShootsSeen::default());
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(item) = stream.next().await {
            let Ok(event) = item else { continue };
            tx.send_modify(|seen| match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    if let (Some(name), Some(uid)) = (s.metadata.name, s.metadata.uid) {
                        seen.uids.entry(name).or_default().insert(uid);
                    }
                }
                watcher::Event::Delete(s) => {
                    seen.deleted.extend(s.metadata.name);
                }
                _ => {}
            });
        }
    });
    (rx, task)
}

/// Waits (at most [`PHASE_LIMIT`]) until `f` holds of the Shoots seen.
async fn wait_shoots(
    what: &str,
    seen: &tokio::sync::watch::Receiver<ShootsSeen>,
    f: impl FnMut(&ShootsSeen) -> bool,
) {
    let mut rx = seen.clone();
    match tokio::time::timeout(PHASE_LIMIT, rx.wait_for(f)).await {
        Ok(Ok(_)) => {}
        _ => panic!(
            "{what}: not within {PHASE_LIMIT:?}; seen {:?}",
            seen.borrow().uids.keys()
        ),
    }
}

/// Names of the Shoots stored in the Gardener project namespace.
async fn shoots(env: &RealEnv) -> BTreeSet<String> {
    env.shoots()
        .await
        .list(&ListParams::default())
        .await
        .expect("list Shoots")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect()
}

async fn kubeconfig_secrets(api: &Api<Secret>) -> Option<BTreeSet<String>> {
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .filter(|n| n.starts_with("kubeconfig-"))
            .collect(),
    )
}

/// Runs `f` (a blocking control-plane call) without stalling this runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_runtimes_are_provisioned_through_apiserver_and_etcd_restarts_and_a_killed_leader() {
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(2)).await;
    let webhook = env.stack.webhook.as_ref().expect("webhook");
    let denied_before = webhook.count("/validate", "denied").await;
    let (seen, shoots_task) = record_shoots(env.shoots().await);
    let (lease_history, lease_task) = record_lease(env.stack.cp.admin().await);
    let secrets: Api<Secret> = Api::namespaced(env.stack.cp.admin().await, NS);

    // Gardener moves only while the gardenlet runs: Shoot creation and the steps after it are
    // held apart, so that each fault hits the step it is meant for.
    env.gardenlet.pause();

    // Two replicas; the first leads.
    let mut first = env.spawn_controller(RUST_LOG);
    let leader_id = first
        .wait_output(PHASE_LIMIT, |out, _| acquired_identity(out))
        .await
        .unwrap_or_else(|e| panic!("the first replica never led: {e}"));
    let mut second = env.spawn_controller(RUST_LOG);
    second
        .wait_output(PHASE_LIMIT, |out, _| {
            out.contains("waiting for the leader Lease").then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("the second replica did not start: {e}"));

    let names: Vec<String> = (0..50).map(|i| format!("faults-{i:02}")).collect();
    let mut faults: Vec<String> = Vec::new();
    let mut downtime = |what: &str, from: Instant, ready_in: Duration| {
        faults.push(format!(
            "{what}: down {:.1} s (ready {:.1} s after its start)",
            from.elapsed().as_secs_f64(),
            ready_in.as_secs_f64()
        ));
    };

    // ---- wave 1 (30); kube-apiserver killed while the leader creates their Shoots ----
    for n in &names[..30] {
        env.create_runtime(n).await;
    }
    wait_shoots("10 Shoots created", &seen, |s| s.uids.len() >= 10).await;
    let shoots_at_kill = seen.borrow().uids.len();
    let down = Instant::now();
    env.stack.cp.kill_apiserver().expect("kill kube-apiserver");
    let ready_in = blocking(|| env.stack.cp.start_apiserver()).expect("kube-apiserver again");
    downtime(
        &format!("kube-apiserver SIGKILL with {shoots_at_kill} of 30 Shoots created"),
        down,
        ready_in,
    );
    let wave1: BTreeSet<String> = names[..30].iter().cloned().collect();
    wait_shoots("30 Shoots after kube-apiserver's restart", &seen, |s| {
        wave1.iter().all(|n| s.uids.contains_key(n))
    })
    .await;

    // ---- Gardener moves; etcd killed once the first kubeconfig Secret is written ----
    env.gardenlet.resume();
    let t = Instant::now();
    loop {
        if kubeconfig_secrets(&secrets)
            .await
            .is_some_and(|s| !s.is_empty())
        {
            break;
        }
        assert!(t.elapsed() < PHASE_LIMIT, "no kubeconfig Secret written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = Instant::now();
    env.stack.cp.kill_etcd().expect("kill etcd");
    let ready_in = blocking(|| env.stack.cp.start_etcd()).expect("etcd again");
    downtime(
        "etcd SIGKILL after the first kubeconfig Secret",
        down,
        ready_in,
    );

    // ---- wave 2 (15), created after both restarts; the leader killed mid-provisioning ----
    env.gardenlet.pause();
    for n in &names[30..45] {
        env.create_runtime(n).await;
    }
    let wave2: Vec<&String> = names[30..45].iter().collect();
    wait_shoots("5 Shoots of wave 2 created", &seen, |s| {
        wave2.iter().filter(|n| s.uids.contains_key(**n)).count() >= 5
    })
    .await;
    let ready_at_kill = ready(&runtimes(&env.runtimes().await).await.unwrap_or_default());
    // The leader got through kube-apiserver's and etcd's restarts without exiting.
    assert!(
        first.exited().is_none(),
        "the leader exited:\n{}\n{}",
        first.stdout(),
        first.stderr()
    );
    let killed_at = SystemTime::now();
    let (first_out, first_err) = first.kill();
    env.gardenlet.resume();
    let standby_id = second
        .wait_output(PHASE_LIMIT, |out, _| acquired_identity(out))
        .await
        .unwrap_or_else(|e| panic!("the standby never led: {e}"));
    assert_ne!(standby_id, leader_id);

    // ---- kube-apiserver killed again, while the new leader starts its Controller ----
    let down = Instant::now();
    env.stack.cp.kill_apiserver().expect("kill kube-apiserver");
    let ready_in = blocking(|| env.stack.cp.start_apiserver()).expect("kube-apiserver again");
    downtime(
        "kube-apiserver SIGKILL as the new leader starts its Controller",
        down,
        ready_in,
    );

    // ---- wave 3 (5), created after every fault ----
    for n in &names[45..] {
        env.create_runtime(n).await;
    }
    wait_for("all 50 Runtimes Ready", &env, &[&second], |list| {
        ready(list) == 50
    })
    .await;
    let all_ready = started.elapsed();

    // ---- one Shoot and one kubeconfig Secret per Runtime, none orphaned or duplicated ----
    let expected: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(
        shoots(&env).await,
        expected,
        "one Shoot per Runtime, no other"
    );
    // The watch has seen all 50 (each stored Shoot is Ready's precondition).
    wait_shoots("the watch saw all 50 Shoots", &seen, |s| s.uids.len() >= 50).await;
    shoots_task.abort();
    let seen = seen.borrow().clone();
    assert!(
        seen.deleted.is_empty(),
        "Shoots deleted during provisioning: {:?}",
        seen.deleted
    );
    assert!(
        seen.uids.values().all(|u| u.len() == 1) && seen.uids.len() == 50,
        "each Shoot created exactly once: {:?}",
        seen.uids
    );
    let expected_secrets: BTreeSet<String> =
        names.iter().map(|n| format!("kubeconfig-{n}")).collect();
    assert_eq!(
        kubeconfig_secrets(&secrets).await.expect("list Secrets"),
        expected_secrets,
        "one kubeconfig Secret per Runtime, no other"
    );

    // ---- the watches resumed in the running replica: it never exited ----
    assert!(
        second.exited().is_none(),
        "the standby replica exited:\n{}\n{}",
        second.stdout(),
        second.stderr()
    );
    let (second_out, second_err) = second.terminate(Duration::from_secs(20));

    // ---- the takeover, from the Lease's history ----
    lease_task.abort();
    let history = lease_history.lock().unwrap().clone();
    let last_renewal = history
        .iter()
        .filter(|l| l.holder.as_deref() == Some(leader_id.as_str()))
        .filter_map(|l| l.renewed)
        .max()
        .expect("the killed leader's renewals in the Lease's history");
    let acquired = history
        .iter()
        .find(|l| l.holder.as_deref() == Some(standby_id.as_str()))
        .and_then(|l| l.acquired)
        .expect("the standby's acquisition in the Lease's history");
    let since_renewal = acquired
        .duration_since(last_renewal)
        .expect("acquired after the last renewal");
    let since_kill = acquired.duration_since(killed_at).unwrap_or_default();
    let bound = Duration::from_secs(LEASE_SECONDS + (LEASE_SECONDS - GRACE_SECONDS));
    assert!(
        since_renewal <= bound,
        "the standby acquired the Lease {since_renewal:?} after the killed leader's last renewal, more than the duration plus one renew period ({bound:?}); history: {history:?}"
    );
    let holders: Vec<Option<&str>> =
        history
            .iter()
            .map(|l| l.holder.as_deref())
            .fold(Vec::new(), |mut v, h| {
                if v.last() != Some(&h) {
                    v.push(h);
                }
                v
            });

    // ---- never two leaders: the killed leader's last span ends at the kill ----
    let mut first_spans = leading(&first_out);
    if let Some(last) = first_spans.last_mut()
        && last.1.is_none()
    {
        last.1 = Some(Timestamp::try_from(killed_at).expect("kill time"));
    }
    let second_spans = leading(&second_out);
    assert_eq!(
        overlap(&first_spans, &second_spans),
        None,
        "two replicas led at once"
    );

    // ---- no status write refused ----
    // Every denial the webhook counted is in its log. A review whose body never arrived whole
    // (its kube-apiserver killed while sending it) is answered as a denial nobody receives; it
    // is no status write of a controller. Any other denial is one.
    let denied = webhook.count("/validate", "denied").await - denied_before;
    let webhook_log = format!("{}{}", webhook.proc.stdout(), webhook.proc.stderr());
    let mut logged: Vec<Value> = webhook_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l.get("fields").cloned().unwrap_or(l))
        .filter(|f| f["message"] == "admission review" && f["path"] == "/validate")
        .filter(|f| f["decision"] == "denied")
        .collect();
    // The denials before the test began (the readiness probe's) come first; that they are
    // found shows the log is read right.
    assert!(
        denied_before >= 1 && logged.len() as u64 >= denied_before,
        "the probe's denial is not in the webhook's log ({denied_before} counted, {} logged)",
        logged.len()
    );
    let logged = logged.split_off((denied_before as usize).min(logged.len()));
    let refused: Vec<&Value> = logged
        .iter()
        .filter(|f| {
            let detail = f["detail"].as_str().unwrap_or_default();
            !(detail.contains("cannot read the request body")
                || detail.contains("request body not received"))
        })
        .collect();
    let denials: Vec<&str> = [&first_out, &first_err, &second_out, &second_err]
        .iter()
        .flat_map(|o| o.lines())
        .filter(|l| l.to_lowercase().contains("denied"))
        .collect();
    assert!(
        refused.is_empty() && denied <= logged.len() as u64,
        "the webhook denied status writes ({denied} counted, {} logged); its denials:\n{logged:#?}\nthe replicas logged:\n{}",
        logged.len(),
        denials.join("\n")
    );
    for (who, out, err) in [
        ("first", &first_out, &first_err),
        ("standby", &second_out, &second_err),
    ] {
        // "cannot publish event": an Event lost (given up after its retries).
        for needle in [
            "StatusWriteDenied",
            "status write denied",
            "cannot publish event",
        ] {
            assert!(
                !out.contains(needle) && !err.contains(needle),
                "the {who} replica logged {needle:?}:\n{out}\n{err}"
            );
        }
    }
    let (w1, w2) = (warnings(&first_out), warnings(&second_out));
    let lost = |out: &str| out.matches("lost the leader Lease").count();
    let event_retries = |out: &str| {
        out.matches("creating an event failed; trying again")
            .count()
    };
    eprintln!(
        "real faults: 50 Runtimes Ready after {:.1} s in all; {}; leader killed with {ready_at_kill} Ready; \
         the standby acquired the Lease {:.2} s after the killed leader's last renewal ({:.2} s after the kill; bound {:.0} s); \
         Lease holders in order {holders:?}; lost-Lease lines: first {}, standby {}; \
         WARN/ERROR lines: first replica {}, standby {}; Event creates tried again: first {}, standby {}; \
         0 denied status writes, 0 Events lost",
        all_ready.as_secs_f64(),
        faults.join("; "),
        since_renewal.as_secs_f64(),
        since_kill.as_secs_f64(),
        bound.as_secs_f64(),
        lost(&first_out),
        lost(&second_out),
        w1.len(),
        w2.len(),
        event_retries(&first_out),
        event_retries(&second_out),
    );
    for l in w1.iter().chain(&w2) {
        eprintln!("  {l}");
    }
}

/// A leader whose Lease cannot be renewed (kube-apiserver killed, kept down beyond the
/// Lease's duration) stops leading before the Lease expires, and so before the standby can
/// take it; after kube-apiserver's restart exactly one replica leads. The lease manager alone
/// kept the old leader leading until it read the new holder: 15 s past its Lease's expiry and
/// 3.3 s beside the standby, measured before the Lease was checked by kim itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_before_its_lease_expires() {
    let env = RealEnv::start().await;
    let mut first = env.spawn_controller(RUST_LOG);
    first
        .wait_output(PHASE_LIMIT, |out, _| acquired_identity(out))
        .await
        .unwrap_or_else(|e| panic!("the first replica never led: {e}"));
    let mut second = env.spawn_controller(RUST_LOG);
    second
        .wait_output(PHASE_LIMIT, |out, _| {
            out.contains("waiting for the leader Lease").then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("the second replica did not start: {e}"));
    env.stack.cp.kill_apiserver().expect("kill kube-apiserver");
    // Down until the leader has stopped: at most the Lease's duration after its last renewal.
    let limit = Duration::from_secs(LEASE_SECONDS + 10);
    let stopped = first
        .wait_output(limit, |out, _| {
            out.contains(
                "the leader Lease was not renewed before its expiry; stopping the controller",
            )
            .then_some(())
        })
        .await;
    let ready_in = blocking(|| env.stack.cp.start_apiserver()).expect("kube-apiserver again");
    assert!(
        stopped.is_ok(),
        "the leader kept leading with kube-apiserver down beyond its Lease: {stopped:?}"
    );
    // Someone leads again: the standby (the Lease expired) or the old leader (it renewed
    // first).
    let t = Instant::now();
    loop {
        let (a, b) = (leading(&first.stdout()), leading(&second.stdout()));
        if a.iter().chain(&b).any(|(_, end)| end.is_none()) {
            break;
        }
        assert!(t.elapsed() < PHASE_LIMIT, "no replica leads again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (first_out, _) = first.terminate(Duration::from_secs(20));
    let (second_out, _) = second.terminate(Duration::from_secs(20));
    let (a, b) = (leading(&first_out), leading(&second_out));
    assert_eq!(overlap(&a, &b), None, "two replicas led at once");
    eprintln!(
        "renewal lost: kube-apiserver ready {:.1} s after its restart; leading spans: first {a:?}, second {b:?}",
        ready_in.as_secs_f64()
    );
}
