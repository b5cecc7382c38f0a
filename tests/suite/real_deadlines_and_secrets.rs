//! The request deadline of `kim controller`'s clients and the secret material it handles, on
//! the real servers ([`RealEnv`]: kube-apiserver and etcd with kim's CRD, `manifests/base` and
//! the real `kim webhook`; gardener-apiserver aggregated behind the same kube-apiserver; the
//! simulated gardenlet with a real runtime cluster per Shoot):
//! - the binary gets past a Gardener call that never returns (the Shoot's creation held
//!   unanswered in gardener-apiserver's admission by a test webhook);
//! - idle watches outlive the request deadline (calls counted by a layer on the in-process
//!   controller's clients, [`crate::support::faults`]), and so do calls on a pooled
//!   connection that sat idle longer than the runtime-cluster deadline (counted by that
//!   cluster's kube-apiserver);
//! - no secret material of the kubeconfigs reaches logs (the in-process controller's at TRACE,
//!   the binary's output), statuses, Events or metrics, through error paths of the kubeconfig
//!   (its Secret refused by a test webhook on kube-apiserver, the administrators' bindings
//!   refused by one on the runtime cluster);
//! - the deadline layer alone, on a service whose answers the test hands over itself.
//!
//! The tests share one environment ([`turn`]); they wait for what happened: watches of the
//! Runtimes, the gardenlet's history, the controller's output and counters, the servers'
//! request counters.

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
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use testenv::gardenlet::{Event as Did, Operation};

/// How many tests of this module take a [`turn`] of the shared environment.
const TESTS: usize = 5;

static ENV: SharedEnv = SharedEnv::new(TESTS, "real-deadlines-env");

/// Waits for the turn of the calling test ([`SharedEnv::turn`]); Runtimes an earlier test
/// left behind (its controller gone) are removed first.
async fn turn() -> Turn {
    ENV.turn(async |env: &RealEnv| remove_left_runtimes(env).await)
        .await
}

/// `kim controller` (the binary, with the clients it builds itself, `--request-timeout-seconds
/// 2`) gets past a Gardener call that never returns: the Shoot's creation is held in
/// gardener-apiserver's admission (a test webhook that does not answer), the call times out,
/// the failure is written (`Provisioned=False/GardenerErr` naming the Shoot's creation and the
/// request timeout), and the retried creation, allowed, makes the Runtime `Ready`, with one
/// Shoot. The held creation is refused once the controller has given up on it: it is never
/// carried out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_gets_past_a_hung_gardener_call() {
    let env = turn().await;
    let name = "af-hang";
    let mut hold = env.hold_shoot_writes(name, "shoots", &["CREATE"]).await;
    let run = Run::start_with(&env, &["--request-timeout-seconds", "2"]).await;
    env.create_runtime(name).await;
    let first = hold.next("the Shoot's creation").await;
    let timed_out = |o: &DynamicObject| {
        condition(o, "Provisioned").is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "GardenerErr"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("creating Shoot") && m.contains("request timeout"))
        })
    };
    run.version(
        name,
        0,
        "Provisioned=False/GardenerErr naming the request timeout",
        timed_out,
    )
    .await;
    first.answer(Admission::Deny {
        code: 500,
        message: "held by the test until its client gave up".into(),
    });
    let retried = hold.next("the retried creation").await;
    retried.answer(Admission::Allow);
    hold.remove().await;
    run.ready(name, 0).await;
    let creates = env
        .gardenlet
        .history()
        .count(|r| r.shoot == name && r.event == Did::Started(Operation::Create));
    assert_eq!(creates, 1, "one Shoot created, once");
    run.finish(&[name]).await;
}

// ---- no secret material anywhere ----

/// The secret material of the kubeconfig Secrets of `names` (as the admin), as `(what,
/// string)` needles: each user's token and client key (base64 and its PEM lines), and
/// 32-character pieces of the whole kubeconfig, base64-encoded as the Secret stores it. Read
/// on a thread of its own, so that no log line of the reading client lands in a log the test
/// searches.
fn needles(env: &RealEnv, names: &[&str]) -> Vec<(String, String)> {
    use base64::Engine as _;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let kubeconfig = env.stack.cp.kubeconfig(env.stack.cp.admin_cert());
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let secrets: Vec<(String, Vec<u8>)> = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap();
            let api: Api<Secret> = Api::namespaced(
                kube::Client::try_from(config).unwrap(),
                crate::support::real::NS,
            );
            let mut out = Vec::new();
            for name in names {
                let secret = api
                    .get(&secret_name(&name))
                    .await
                    .expect("the kubeconfig Secret");
                let data = secret.data.unwrap_or_default();
                out.push((name, data.get("config").expect("the kubeconfig").0.clone()));
            }
            out
        })
    })
    .join()
    .expect("reading the kubeconfig Secrets");
    let pieces = |s: &str| -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        (0..chars.len().saturating_sub(32))
            .step_by(64)
            .map(|i| chars[i..i + 32].iter().collect())
            .collect()
    };
    let mut out = Vec::new();
    for (name, config) in secrets {
        let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&config).unwrap())
            .expect("the Secret holds a kubeconfig");
        for auth in kc.auth_infos.iter().filter_map(|a| a.auth_info.as_ref()) {
            use secrecy::ExposeSecret as _;
            if let Some(token) = &auth.token {
                out.push((format!("{name}: token"), token.expose_secret().to_string()));
            }
            if let Some(key) = &auth.client_key_data {
                let key = key.expose_secret().to_string();
                for p in pieces(&key) {
                    out.push((format!("{name}: client-key-data"), p));
                }
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(&key)
                    .expect("the key is base64");
                let pem = String::from_utf8_lossy(&pem).into_owned();
                for line in pem
                    .lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                {
                    out.push((format!("{name}: private key line"), line.to_string()));
                }
            }
        }
        for p in pieces(&b64(&config)) {
            out.push((format!("{name}: kubeconfig, base64"), p));
        }
        // The search finds a copy of the kubeconfig as text, and as the Secret stores it.
        let text = String::from_utf8_lossy(&config);
        let b64_config = b64(&config);
        let found = |haystack: &str| {
            out.iter()
                .filter(|(w, n)| w.starts_with(name.as_str()) && haystack.contains(n.as_str()))
                .count()
        };
        assert!(
            found(&text) >= 2 && found(&b64_config) >= 2,
            "the needles of {name} are found in its kubeconfig"
        );
    }
    assert!(
        out.iter().any(|(w, _)| w.ends_with("private key line")),
        "the kubeconfigs carry a private key: {:?}",
        out.iter().map(|(w, _)| w).collect::<BTreeSet<_>>()
    );
    out
}

/// Asserts that no needle is in any haystack `(where, text)`.
fn assert_no_secret_material(haystacks: &[(String, String)], needles: &[(String, String)]) {
    let mut leaks = Vec::new();
    for (where_, text) in haystacks {
        for (what, needle) in needles {
            if let Some(at) = text.find(needle.as_str()) {
                let from = text[..at]
                    .char_indices()
                    .rev()
                    .nth(120)
                    .map_or(0, |(i, _)| i);
                let to = (at + needle.len() + 80..=text.len())
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(text.len());
                leaks.push(format!("{what} in {where_}: …{}…", &text[from..to]));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "secret material found:\n{}",
        leaks.join("\n")
    );
}

/// Two Runtimes, each through an error path of its kubeconfig: `<prefix>-0`'s kubeconfig
/// Secret refused twice (500, a test webhook on kube-apiserver), `<prefix>-1`'s administrators'
/// bindings refused in its runtime cluster (403, a test webhook there) after a new
/// administrator was added to it; both `Ready` in the end, then deleted. Returns the needles
/// (read while they exist) and everything but the logs that the controller wrote: every
/// status version, condition messages, Events.
async fn secret_scenario(
    env: &RealEnv,
    prefix: &str,
) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let (n0, n1) = (format!("{prefix}-0"), format!("{prefix}-1"));
    let runtimes = Recorder::start(env.runtimes().await, watcher::Config::default()).await;
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let secret0 = secret_name(&n0);
    let counter = refused.clone();
    let secret_hook = install_admission_hook(
        env.stack.cp.admin().await,
        &format!("{prefix}-secret"),
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
                "operations": ["CREATE"]}]),
        move |req| {
            use std::sync::atomic::Ordering;
            if req["name"] == secret0.as_str() && counter.fetch_add(1, Ordering::SeqCst) < 2 {
                Admission::Deny {
                    code: 500,
                    message: "kubeconfig Secret refused by the test".into(),
                }
            } else {
                Admission::Allow
            }
        },
    )
    .await;
    env.create_runtime(&n0).await;
    env.create_runtime(&n1).await;
    let context = || {
        runtimes
            .since(0)
            .iter()
            .filter_map(Seen::applied)
            .map(summary)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let false_with = |t: &'static str, r: &'static str| {
        move |o: &DynamicObject| {
            condition(o, t).is_some_and(|c| c["status"] == "False" && c["reason"] == r)
        }
    };
    version(
        &runtimes,
        &n0,
        "KubeconfigReady=False/KubernetesErr",
        false_with("KubeconfigReady", "KubernetesErr"),
    )
    .await;
    version(&runtimes, &n0, "Ready", |o| is(o, State::Ready)).await;
    version(&runtimes, &n1, "Ready", |o| is(o, State::Ready)).await;
    secret_hook.remove().await;

    let cluster = env
        .gardenlet
        .cluster(&n1)
        .await
        .expect("the runtime cluster");
    let binding_hook = install_admission_hook(
        cluster.admin().await,
        &format!("{prefix}-bindings"),
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"],
                "resources": ["clusterrolebindings"],
                "operations": ["CREATE", "UPDATE", "DELETE"]}]),
        |_| Admission::Deny {
            code: 403,
            message: "bindings refused by the test".into(),
        },
    )
    .await;
    env.runtimes()
        .await
        .patch(
            &n1,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"security": {"administrators":
                ["admin@myorg.com", "late@myorg.com"]}}})),
        )
        .await
        .expect("a new administrator");
    version(
        &runtimes,
        &n1,
        "Configured=False/ConfigurationError",
        false_with("Configured", "ConfigurationError"),
    )
    .await;
    binding_hook.remove().await;
    version(&runtimes, &n1, "Ready at generation 2", |o| {
        is(o, State::Ready)
            && o.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == 2))
    })
    .await;

    let needles = needles(env, &[&n0, &n1]);
    for name in [&n0, &n1] {
        env.runtimes()
            .await
            .delete(name, &Default::default())
            .await
            .expect("deleting a Runtime");
    }
    runtimes
        .wait_for(
            "both Runtimes gone",
            |h| {
                let gone: BTreeSet<String> = h
                    .iter()
                    .filter_map(|s| match s {
                        Seen::Deleted(o) => Some(o.name_any()),
                        Seen::Applied(_) => None,
                    })
                    .collect();
                (gone.contains(&n0) && gone.contains(&n1)).then_some(())
            },
            context,
        )
        .await;

    let ours = |o: &DynamicObject| o.name_any() == n0 || o.name_any() == n1;
    let versions: Vec<serde_json::Value> = runtimes
        .since(0)
        .iter()
        .filter_map(Seen::applied)
        .filter(|o| ours(o))
        .map(|o| o.data["status"].clone())
        .collect();
    let messages: Vec<String> = versions
        .iter()
        .flat_map(|s| s["conditions"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["message"].as_str().map(String::from))
        .collect();
    let events: Vec<K8sEvent> =
        Api::<K8sEvent>::namespaced(env.stack.cp.admin().await, crate::support::real::NS)
            .list(&ListParams::default())
            .await
            .expect("the Events")
            .items
            .into_iter()
            .filter(|e| {
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.as_deref())
                    .is_some_and(|n| n == n0 || n == n1)
            })
            .collect();
    let messages = messages.join("\n");
    assert!(
        messages.matches("refused by the test").count() >= 2,
        "both error paths are in the status messages:\n{messages}"
    );
    assert!(
        events.iter().any(|e| e.type_.as_deref() == Some("Warning")),
        "Warning Events were published: {events:?}"
    );
    let haystacks = vec![
        (
            "status versions".to_string(),
            serde_json::to_string(&versions).unwrap(),
        ),
        ("condition messages".to_string(), messages),
        (
            "events".to_string(),
            serde_json::to_string(&events).unwrap(),
        ),
    ];
    (needles, haystacks)
}

/// The in-process controller with a tracing subscriber that writes every event (TRACE, all
/// targets, text and JSON) to a buffer; the test runs on one thread so that every task the
/// controller spawns logs there. Through the error paths of [`secret_scenario`], no secret
/// material of the kubeconfigs reaches the logs, the statuses, the Events or the metrics.
#[test]
fn no_secret_material_in_logs_events_status_or_metrics() {
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    use tracing_subscriber::layer::SubscriberExt as _;
    let logs = Buffer::default();
    let (text, json_logs) = (logs.clone(), logs.clone());
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::TRACE)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || text.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || json_logs.clone()),
        );
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let env = turn().await;
        let mut settings = settings(
            &env,
            kube::Client::try_from(kcp_config(&env).await).unwrap(),
            kube::Client::try_from(garden_config(&env).await).unwrap(),
        );
        settings.backoff_max = Duration::from_secs(5);
        let controller = InProcess::start(settings);
        let metrics = controller.metrics.clone();
        let (needles, mut haystacks) = secret_scenario(&env, "af-sec").await;
        controller.stop().await;
        let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
        for expected in ["status written", "reconcile failed", "kubeconfig Secret written"] {
            assert!(logs.contains(expected), "the logs hold {expected:?}");
        }
        let metrics_text = metrics.encode();
        assert!(metrics_text.contains("kim_controller_status_writes_total"));
        haystacks.push(("metrics".into(), metrics_text));
        haystacks.push(("logs".into(), logs.clone()));
        assert_no_secret_material(&haystacks, &needles);
        eprintln!(
            "secrets (in-process): {} needles searched in {} B of logs (TRACE, {} lines) and {} B of statuses, Events and metrics; none found; {:.1} s",
            needles.len(),
            logs.len(),
            logs.lines().count(),
            haystacks.iter().map(|(_, t)| t.len()).sum::<usize>() - logs.len(),
            started.elapsed().as_secs_f64()
        );
    });
}

/// The same with the `kim` binary as deployed: its stdout and stderr (JSON logs,
/// `RUST_LOG=info,kim=debug`) and its `/metrics` endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_emits_no_secret_material() {
    let env = turn().await;
    let run = Run::start(&env).await;
    let (needles, mut haystacks) = secret_scenario(&env, "af-bin").await;
    let metrics_text = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://{}/metrics", run.metrics_addr))
        .send()
        .await
        .expect("scrape /metrics")
        .text()
        .await
        .expect("the metrics");
    assert!(metrics_text.contains("kim_controller_status_writes_total"));
    let (stdout, stderr) = (run.controller.stdout(), run.controller.stderr());
    for expected in [
        "status written",
        "reconcile failed",
        "kubeconfig Secret written",
    ] {
        assert!(
            stdout.contains(expected),
            "stdout holds {expected:?}:\n{stdout}"
        );
    }
    haystacks.push(("metrics".into(), metrics_text));
    haystacks.push(("stdout".into(), stdout.clone()));
    haystacks.push(("stderr".into(), stderr.clone()));
    assert_no_secret_material(&haystacks, &needles);
    run.stop(true).await;
    eprintln!(
        "secrets (kim binary): {} needles searched in {} B of stdout, {} B of stderr; none found",
        needles.len(),
        stdout.len(),
        stderr.len()
    );
}

// ---- the request deadline and idle watches ----

/// Watches that see no event for five request deadlines are not cut by the deadline of the
/// controller's clients (only non-watch answers must be complete within it): neither the
/// Runtime watch nor the Shoot watch is opened again (no new watch or list, counted by the
/// client layer), and both still deliver an event afterwards (the resync is 10 min, so only
/// a watch can bring the change): a new administrator is bound, an annotation on the Shoot
/// starts a reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watches_outlive_the_request_timeout() {
    const DEADLINE: Duration = Duration::from_secs(1);
    let env = turn().await;
    let name = "af-idle";
    let runtimes = record_runtime(&env, name).await;
    let calls = Faults::new();
    let controller = InProcess::start(faulty_settings(&env, &calls, DEADLINE).await);
    let metrics = controller.metrics.clone();
    env.create_runtime(name).await;
    version(&runtimes, name, "Ready", |o| is(o, State::Ready)).await;
    let counts = || {
        let of = |cluster: &str, resource: &str, watch: bool| {
            calls.calls_where(cluster, |c| {
                c.watch == watch
                    && c.method == http::Method::GET
                    && c.resource() == (Some(resource), None)
                    && (watch || !c.path.ends_with(name))
            })
        };
        [
            of("kcp", "runtimes", true),
            of("kcp", "runtimes", false),
            of("garden", "shoots", true),
            of("garden", "shoots", false),
        ]
    };
    // The reconciles the Ready write and the Secret and Shoot events started have ended once
    // one more, started by an annotation, has (one reconcile of a Runtime at a time).
    let settle = |touch: &'static str| {
        let (env, metrics) = (&env, &metrics);
        async move {
            let before = metrics.reconciles();
            env.runtimes()
                .await
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(
                        json!({"metadata": {"annotations": {"example.com/touched": touch}}}),
                    ),
                )
                .await
                .expect("annotate the Runtime");
            let moved = crate::support::eventually(LIMIT, || {
                let m = metrics.clone();
                async move { (m.reconciles() > before).then_some(()) }
            })
            .await;
            assert!(moved.is_some(), "a reconcile after the annotation");
        }
    };
    settle("1").await;
    let before = counts();
    let quiet = metrics.reconciles();
    // The stimulus is time itself: five deadlines without an event.
    tokio::time::sleep(5 * DEADLINE).await;
    let idle = counts();
    assert_eq!(
        idle, before,
        "watches (and lists) of Runtimes and Shoots [watch, list, watch, list] opened again while idle"
    );
    let idle_reconciles = metrics.reconciles() - quiet;

    // The Runtime watch still delivers: a new administrator is bound.
    env.runtimes()
        .await
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"security": {"administrators":
                ["admin@myorg.com", "late@myorg.com"]}}})),
        )
        .await
        .expect("a new administrator");
    version(&runtimes, name, "Ready at generation 2", |o| {
        is(o, State::Ready)
            && o.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == 2))
    })
    .await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    let bound: Vec<String> = Api::<ClusterRoleBinding>::all(cluster.admin().await)
        .list(&ListParams::default().labels(BINDING_LABEL))
        .await
        .expect("the bindings")
        .items
        .iter()
        .map(|b| b.name_any())
        .collect();
    assert!(
        bound.contains(&binding_name("late@myorg.com")),
        "the new administrator is bound: {bound:?}"
    );
    // The Shoot watch still delivers: an annotation on the Shoot starts a reconcile.
    settle("2").await;
    let settled = metrics.reconciles();
    env.shoots()
        .await
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"test.kim/poke": "1"}}})),
        )
        .await
        .expect("annotate the Shoot");
    let moved = crate::support::eventually(LIMIT, || {
        let m = metrics.clone();
        async move { (m.reconciles() > settled).then_some(()) }
    })
    .await;
    assert!(moved.is_some(), "a reconcile caused by the Shoot event");
    let after = counts();
    delete(&env, &runtimes, name).await;
    controller.stop().await;
    eprintln!(
        "idle watches: request deadline {DEADLINE:?}, idle {:?} ({idle_reconciles} reconciles meanwhile); [Runtime watches, Runtime lists, Shoot watches, Shoot lists] before {before:?}, after idle {idle:?}, after two events {after:?}",
        5 * DEADLINE
    );
    assert_eq!(
        after, before,
        "the events came over the watches opened before the idle time"
    );
}

/// Binding lists kube-apiserver of `cluster` answered 200 so far (`apiserver_request_total`).
async fn binding_lists(cluster: &testenv::controlplane::ControlPlane) -> f64 {
    let text = cluster
        .http_client(cluster.admin_cert())
        .expect("an HTTPS client")
        .get(format!("{}/metrics", cluster.url()))
        .send()
        .await
        .expect("scrape the runtime cluster")
        .text()
        .await
        .expect("its metrics");
    sum_samples(&text, "apiserver_request_total", |l| {
        l.contains("resource=\"clusterrolebindings\"")
            && l.contains("verb=\"LIST\"")
            && l.contains("code=\"200\"")
    })
}

/// Runtime-cluster calls get their whole `Settings::runtime_timeout` (1 s) on a pooled
/// connection that sat idle for longer than that: a `Ready` Runtime resynced every 2 s lists
/// its cluster's bindings on the kept client each time (counted by that kube-apiserver), and
/// every resync succeeds: with no transient-error grace, a failed call would be written at once,
/// and the Runtime stays `Ready` without a status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_cluster_calls_get_their_whole_timeout_on_a_reused_connection() {
    let env = turn().await;
    let name = "af-reuse";
    let runtimes = record_runtime(&env, name).await;
    let mut settings = settings(
        &env,
        kube::Client::try_from(kcp_config(&env).await).unwrap(),
        kube::Client::try_from(garden_config(&env).await).unwrap(),
    );
    settings.runtime_timeout = Duration::from_secs(1);
    settings.resync = Duration::from_secs(2);
    settings.transient_error_grace = Duration::ZERO;
    let controller = InProcess::start(settings);
    let metrics = controller.metrics.clone();
    env.create_runtime(name).await;
    version(&runtimes, name, "Ready", |o| is(o, State::Ready)).await;
    runtimes.caught_up(name, String::new).await;
    let mark = runtimes.len();
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    let lists_before = binding_lists(&cluster).await;
    let reconciles = metrics.reconciles();
    let resynced = crate::support::eventually(LIMIT, || {
        let (m, cluster) = (metrics.clone(), cluster.clone());
        async move {
            (m.reconciles() >= reconciles + 5
                && binding_lists(&cluster).await >= lists_before + 5.0)
                .then_some(())
        }
    })
    .await;
    assert!(
        resynced.is_some(),
        "five resyncs listing the bindings: {} reconciles, {} lists",
        metrics.reconciles() - reconciles,
        binding_lists(&cluster).await - lists_before
    );
    runtimes.caught_up(name, String::new).await;
    let after: Vec<String> = with_status(&runtimes.since(mark))
        .into_iter()
        .map(summary)
        .collect();
    let lists = binding_lists(&cluster).await - lists_before;
    delete(&env, &runtimes, name).await;
    controller.stop().await;
    eprintln!(
        "reused connection: {lists} binding lists on the kept client (timeout 1 s, resync 2 s), {} status writes after Ready",
        after.len()
    );
    assert!(
        after.is_empty(),
        "a runtime-cluster call on a pooled idle connection failed within its timeout: {after:#?}"
    );
}

// ---- the deadline layer alone ----

/// A request whose future is held without being polled for longer than the request timeout
/// still gets the whole timeout once it is polled (its clock starts when it is sent), and so
/// does its body, read well after its answer arrived. kube-runtime's Controller holds its
/// watchers' requests like this: after an error from one watcher it stops polling all of them
/// for the trigger backoff (0.8 s and more). Before the fix the clock started when the client
/// service was called, so the request another watcher had made in the same poll ran out unsent
/// during the backoff; its error started the next backoff, during which the first watcher's
/// retry ran out in turn, and so on forever: the stall the random-fault
/// test of `real_api_faults` once met (1 control-cluster call, 1 Gardener call, then none).
///
/// The deadline layer of the controller's clients (`kim::reconciler::client`) runs over a
/// service whose answer and body frames the test hands over itself, so that what happens first
/// is decided by the test, not by how fast a loaded machine answers an HTTP request (the same
/// test over HTTP with a 400 ms deadline failed when the answer took longer under load). The
/// deadline's own firing is ordered against an outer timer of three times the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_unpolled_past_its_timeout_still_gets_its_whole_timeout() {
    use futures::FutureExt as _;
    use http_body_util::BodyExt as _;
    use kim::reconciler::deadline::RequestTimedOut;
    use kim::testing::reconciler::RequestTimeoutLayer;
    use tower::{Layer as _, Service as _};
    const TIMEOUT: Duration = Duration::from_millis(400);
    type Frames = std::pin::Pin<
        Box<
            dyn futures::Stream<
                    Item = Result<http_body::Frame<axum::body::Bytes>, std::convert::Infallible>,
                > + Send,
        >,
    >;
    type Body = http_body_util::StreamBody<Frames>;
    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// The answer of its one call comes when the test sends it.
    struct Answering(Option<tokio::sync::oneshot::Receiver<http::Response<Body>>>);
    impl tower::Service<http::Request<kube::client::Body>> for Answering {
        type Response = http::Response<Body>;
        type Error = BoxError;
        type Future = futures::future::BoxFuture<'static, Result<Self::Response, BoxError>>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), BoxError>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<kube::client::Body>) -> Self::Future {
            let answer = self.0.take().expect("one call");
            async move { Ok(answer.await?) }.boxed()
        }
    }
    /// A body whose frames come from `rx`.
    fn body(rx: tokio::sync::mpsc::Receiver<&'static str>) -> Body {
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            let chunk = rx.recv().await?;
            Some((
                Ok(http_body::Frame::data(axum::body::Bytes::from(chunk))),
                rx,
            ))
        });
        http_body_util::StreamBody::new(Box::pin(frames) as Frames)
    }
    let request = || {
        http::Request::get("/apis/infrastructuremanager.kyma-project.io/v1/runtimes")
            .body(kube::client::Body::empty())
            .expect("request")
    };
    let timed_out =
        |e: &BoxError| e.downcast_ref::<RequestTimedOut>() == Some(&RequestTimedOut(TIMEOUT));

    // Called, then held for three timeouts, then polled: the clock starts at that first poll,
    // and an answer that comes after it, within the timeout, is taken.
    let (answer, answered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(answered)));
    let held = service.call(request());
    tokio::time::sleep(3 * TIMEOUT).await;
    let mut held = std::pin::pin!(held);
    if let Some(early) = held.as_mut().now_or_never() {
        panic!(
            "a request held unpolled failed with its deadline: {:?}",
            early.err()
        );
    }
    let (frames, frames_rx) = tokio::sync::mpsc::channel(4);
    answer
        .send(http::Response::new(body(frames_rx)))
        .ok()
        .expect("the request is waiting");
    let response = held.await.expect("answered after its first poll");

    // Its body, whose frames arrived, read three timeouts later: delivered.
    frames.send("all of it").await.unwrap();
    drop(frames);
    tokio::time::sleep(3 * TIMEOUT).await;
    let read = response.into_body().collect().await;
    match read {
        Ok(b) => assert_eq!(b.to_bytes(), "all of it"),
        Err(e) => panic!("a body read late failed with the deadline: {e}"),
    }

    // The deadline still holds for a request that is polled and never answered, and for a
    // body whose frames never come: each fails with it before an outer timer of three times
    // the timeout runs out.
    let (_never, unanswered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(unanswered)));
    let started = Instant::now();
    let hung = tokio::time::timeout(3 * TIMEOUT, service.call(request())).await;
    let took = started.elapsed();
    let Err(err) = hung.expect("the deadline fires first") else {
        panic!("a hung request was answered");
    };
    assert!(
        timed_out(&err),
        "the hung request failed with the deadline: {err}"
    );
    assert!(
        took >= TIMEOUT,
        "the hung request failed after {took:?} (timeout {TIMEOUT:?})"
    );
    let (answer, answered) = tokio::sync::oneshot::channel();
    let mut service = RequestTimeoutLayer::new(TIMEOUT).layer(Answering(Some(answered)));
    let (_silent, silent_rx) = tokio::sync::mpsc::channel(1);
    answer
        .send(http::Response::new(body(silent_rx)))
        .ok()
        .unwrap();
    let response = service.call(request()).await.expect("answered");
    let read = tokio::time::timeout(3 * TIMEOUT, response.into_body().collect()).await;
    let err = read
        .expect("the deadline fires first")
        .expect_err("a silent body fails");
    assert!(
        timed_out(&err),
        "the silent body failed with the deadline: {err}"
    );
}
