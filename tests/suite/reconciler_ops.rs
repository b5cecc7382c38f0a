//! Operating `kim controller`: a no-op resync writes nothing, leader election (only the Lease
//! holder reconciles; a standby takes over when the leader stops), the metrics endpoint, and
//! start-up validation of the configuration by the `kim` binary.

use crate::support::reconciler::*;
use std::process::Command;
use std::time::Duration;
use testenv::{Gvr, Verb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn status_writes(env: &Env) -> usize {
    env.kcp
        .count_requests(|r| r.is("runtimes", Some("status")) && r.is_write() && r.code < 300)
}

/// Waits until the request log has caught up with the writes the admission hook saw (a
/// request is logged when its answer is sent, after the object is stored).
async fn settle_log(env: &Env) {
    env.wait("the request log", |s| {
        status_writes(s.env) == s.env.writes().len()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_resync_writes_nothing() {
    let env = Env::start_with(Options {
        resync: Duration::from_millis(300),
        ..Options::default()
    })
    .await;
    let rt = sample("aws-minimal.yaml");
    env.create(&rt).await;
    env.step_until("Ready", |s| s.state("aws-minimal") == Some("Ready"))
        .await;
    let metrics = env.metrics();
    // Let the reconciles triggered by the last writes settle, then count from a quiet point.
    let settled = metrics.reconciles();
    env.wait("reconciles after Ready", |_| metrics.reconciles() > settled)
        .await;
    settle_log(&env).await;
    let writes_before = status_writes(&env);
    let garden_gets = |e: &Env| e.garden.count_requests(|r| r.verb == Some(Verb::Get));
    let secret_gets = |e: &Env| {
        e.kcp
            .count_requests(|r| r.verb == Some(Verb::Get) && r.is("secrets", None))
    };
    let binding_lists = |e: &Env| {
        e.runtime
            .count_requests(|r| r.verb == Some(Verb::List) && r.is("clusterrolebindings", None))
    };
    let (gets_before, secrets_before, lists_before) =
        (garden_gets(&env), secret_gets(&env), binding_lists(&env));
    let start = metrics.reconciles();
    env.wait("three resyncs", |_| metrics.reconciles() >= start + 3)
        .await;
    let resyncs = metrics.reconciles() - start;
    assert_eq!(
        status_writes(&env),
        writes_before,
        "a no-op resync writes no status"
    );
    // The Runtime, its Shoot and its kubeconfig Secret come from the watch caches, the
    // runtime-cluster client from its cache: a resync only lists the administrators' bindings
    // (resynced each time: the 300 ms resync is past 90 % of the period since the last sync).
    let gets = garden_gets(&env) - gets_before;
    let secrets = secret_gets(&env) - secrets_before;
    let lists = binding_lists(&env) - lists_before;
    assert_eq!((gets, secrets), (0, 0), "Shoot and Secret GETs of a resync");
    println!(
        "no-op resync: {resyncs} resyncs, 0 status writes, 0 Shoot GETs, 0 Secret GETs, {lists} binding lists ({:.1} per resync)",
        lists as f64 / resyncs as f64
    );
    env.assert_model_clean();
}

fn leader_gauge(text: &str) -> Option<i64> {
    text.lines()
        .find(|l| l.starts_with("kim_controller_leader "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() {
    let mut env = Env::start_with(Options {
        leader_election: true,
        ..Options::default()
    })
    .await;
    let a = env.metrics();
    env.wait("a leads", |_| leader_gauge(&a.encode()) == Some(1))
        .await;
    let mut settings = env.settings();
    settings.leader_election = Some(env.leader_election("b"));
    let b = env.spawn(settings);
    let b_metrics = b.metrics.clone();
    let rt = sample("aws-minimal.yaml");
    env.create(&rt).await;
    env.step_until("Ready", |s| s.state("aws-minimal") == Some("Ready"))
        .await;
    assert_eq!(leader_gauge(&b_metrics.encode()), Some(0), "b stands by");
    assert_eq!(b_metrics.reconciles(), 0, "the standby reconciles nothing");
    let lease = env
        .kcp
        .get(&Gvr::leases(), Some("kim-system"), "kim-controller")
        .expect("Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "a");

    // The leader stops (releasing the Lease); b takes over and provisions the next Runtime.
    env.stop().await;
    env.wait("b leads", |_| leader_gauge(&b_metrics.encode()) == Some(1))
        .await;
    let mut other = sample("azure-fremium.yaml");
    other
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kyma-project.io/runtime-id".into(), "runtime-id-2".into());
    env.create(&other).await;
    env.step_until("Ready under b", |s| {
        s.state("azure-fremium") == Some("Ready")
    })
    .await;
    assert!(b_metrics.reconciles() > 0);
    let lease = env
        .kcp
        .get(&Gvr::leases(), Some("kim-system"), "kim-controller")
        .expect("Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    b.stop().await;
    env.assert_model_clean();
    assert_eq!(b_metrics.status_denials(), 0);
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_the_controller_metrics() {
    let env = Env::start().await;
    let metrics = env.metrics();
    let server = kim::reconciler::metrics::serve("127.0.0.1:0".parse().unwrap(), metrics.clone())
        .await
        .unwrap();
    let rt = sample("aws-trial.yaml");
    env.create(&rt).await;
    env.step_until("Ready", |s| s.state("aws-trial") == Some("Ready"))
        .await;
    // The gauge follows the write the test just saw.
    env.wait("the state gauge", |_| {
        metrics
            .encode()
            .contains("kim_controller_runtimes{state=\"Ready\"} 1")
    })
    .await;
    let (code, body) = http_get(server.addr, "/metrics").await;
    assert_eq!(code, 200);
    for needle in [
        "kim_controller_runtimes{state=\"Ready\"} 1",
        "kim_controller_reconciles_total",
        "kim_controller_reconcile_errors_total{kind=\"api\"}",
        "kim_controller_reconcile_duration_seconds_bucket",
        "kim_controller_gardener_request_duration_seconds_count{operation=\"create\"} 1",
        "kim_controller_gardener_request_duration_seconds_count{operation=\"adminkubeconfig\"} 1",
        "kim_controller_status_writes_total 3",
        "kim_controller_status_denied_total 0",
        "kim_controller_leader 1",
    ] {
        assert!(body.contains(needle), "{needle} missing in:\n{body}");
    }
    assert_eq!(http_get(server.addr, "/healthz").await.0, 200);
    assert_eq!(http_get(server.addr, "/readyz").await.0, 200);
    metrics.set_ready(false);
    assert_eq!(http_get(server.addr, "/readyz").await.0, 503);
    server.stop();
    // One Event for the provisioning: the Runtime became Ready (progress is in the status).
    env.wait("events", |s| {
        !s.env
            .kcp
            .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
            .is_empty()
    })
    .await;
    let events: Vec<String> = env
        .kcp
        .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            format!(
                "{} {} {} {}",
                s("type"),
                s("reason"),
                s("action"),
                e["regarding"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(events, ["Normal Ready Reconcile aws-trial"]);
}

#[test]
fn invalid_configuration_stops_the_controller_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "gardener: {project: kyma-dev}\nkubernetes: {defaultVersion: latest}\nproviders:\n  aws:\n    cloudProfile: aws\n    machineImage: {name: gardenlinux, version: \"\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--leader-elect=false",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kubernetes.defaultVersion"), "{stderr}");
    assert!(
        stderr.contains("providers.aws.machineImage.version"),
        "{stderr}"
    );
    // A project override that is no DNS label is named as the flag.
    std::fs::copy(manifest_dir().join("docs/config.example.yaml"), &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--gardener-project",
            "Not_A_Label",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--gardener-project"), "{stderr}");
    // A valid configuration gets past validation to the (missing) kubeconfig.
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["controller", "--config"])
        .arg(&config)
        .args([
            "--gardener-kubeconfig",
            "/nonexistent",
            "--kubeconfig",
            "/nonexistent",
        ])
        .env("KIM_METRICS_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_is_rotated_without_status_writes() {
    let mut env = Env::without_controller().await;
    let mut settings = env.settings();
    let mut config = config();
    config.kubeconfig.expiration_seconds = 600;
    config.kubeconfig.rotation_fraction = 0.001; // renew after 0.6 s
    settings.config = std::sync::Arc::new(config);
    env.controller = Some(env.spawn(settings));
    let rt = sample("aws-minimal.yaml");
    env.create(&rt).await;
    env.step_until("Ready", |s| s.state("aws-minimal") == Some("Ready"))
        .await;
    let secret_rv = |e: &Env| {
        e.kcp
            .get(&Gvr::secrets(), Some(NS), "kubeconfig-runtime-id")
            .and_then(|s| s["metadata"]["resourceVersion"].as_str().map(String::from))
    };
    let first = secret_rv(&env);
    settle_log(&env).await;
    let writes = status_writes(&env);
    let requests = |e: &Env| {
        e.garden
            .count_requests(|r| r.is("shoots", Some("adminkubeconfig")))
    };
    let issued = requests(&env);
    let runtime_before = env
        .runtime
        .count_requests(|r| r.is("clusterrolebindings", None));
    // Each rotation's pass binds the administrators with the new kubeconfig (it may be for a
    // new cluster): one binding list per rotation.
    let lists = |e: &Env| {
        e.runtime
            .count_requests(|r| r.is("clusterrolebindings", None))
    };
    env.wait("two rotations, each with its bindings synced", |s| {
        requests(s.env) >= issued + 2
            && secret_rv(s.env) != first
            && lists(s.env) >= runtime_before + 2
    })
    .await;
    assert_eq!(status_writes(&env), writes, "a rotation changes no status");
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    env.assert_model_clean();
}

/// Runtime-cluster clients are kept in a bounded cache (`Settings::runtime_client_cache`), and a
/// changed kubeconfig Secret (a new resourceVersion: every write of it has one) gets a new
/// client: its requests go where the new kubeconfig points.
#[tokio::test]
async fn runtime_clients_are_bounded_and_follow_the_kubeconfig() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kim::testing::reconciler::SECRET_KEY;
    use kim::testing::reconciler::{runtime_client, sync};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    let env = Env::without_controller().await;
    let mut settings = env.settings();
    settings.runtime_client_cache = 3;
    let ctx = kim::testing::reconciler::Ctx::new(settings);
    let secret = |rv: &str, kubeconfig: &str| Secret {
        metadata: ObjectMeta {
            name: Some("kubeconfig-x".into()),
            namespace: Some(NS.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    let to_runtime = env.runtime.kubeconfig_yaml(Some("shoot-admin-token"));
    let to_garden = env.garden.kubeconfig_yaml(None);

    for i in 0..10 {
        runtime_client(&ctx, &format!("{NS}/rt{i}"), &secret("1", &to_runtime))
            .await
            .expect("client");
        assert!(ctx.cached_clients() <= 3, "{}", ctx.cached_clients());
    }
    assert_eq!(ctx.cached_clients(), 3);

    // One request through the client of rt9 and where it lands.
    let call = |rv: &'static str, kubeconfig: String| {
        let (ctx, env, secret) = (&ctx, &env, &secret);
        async move {
            let (r0, g0) = (env.runtime.request_count(), env.garden.request_count());
            let client = runtime_client(ctx, &format!("{NS}/rt9"), &secret(rv, &kubeconfig))
                .await
                .expect("client");
            let _ = sync(client, &[]).await;
            (
                env.runtime.request_count() - r0,
                env.garden.request_count() - g0,
            )
        }
    };
    assert_eq!(call("1", to_runtime.clone()).await, (1, 0));
    // Rotated (new resourceVersion, other cluster): a new client, not the cached one.
    assert_eq!(call("2", to_garden.clone()).await, (0, 1));
    assert_eq!(ctx.cached_clients(), 3, "replaced, not added");
}

/// A reconcile that starts from a stale copy of a new Runtime (another client changed it after
/// the controller's cache saw it, and the cache has not caught up: its watch hangs after the
/// first list) does not fail: the finalizer patch's guard (`test` of the resourceVersion read)
/// is answered 422, and the pass starts over from a fresh read. Before, this was a reconcile
/// error with an error backoff — the kind of all 156 errors of the 3 000-Runtime bench run.
#[tokio::test]
async fn a_stale_read_of_a_new_runtime_restarts_the_pass_instead_of_failing() {
    use kim::status::table::FINALIZER;
    use std::sync::Arc;

    let env = Env::without_controller().await;
    let settings = env.settings();
    let metrics = settings.metrics.clone();
    let ctx = Arc::new(kim::testing::reconciler::Ctx::new(settings));
    env.kcp.add_fault(
        testenv::FaultRule::new(testenv::FaultAction::Hang)
            .verb(Verb::Watch)
            .resource("runtimes"),
    );
    let stale = env.create(&sample("aws-minimal.yaml")).await;
    assert!(stale.metadata.finalizers.is_none());
    let name = stale.metadata.name.clone().unwrap();
    let watches = kim::testing::reconciler::fill_caches(&ctx);
    // The cache has listed the Runtime before the other client changes it.
    env.wait("the controller's list of the Runtimes", |s| {
        s.env
            .kcp
            .requests()
            .iter()
            .any(|r| r.verb == Some(Verb::List) && r.is("runtimes", None) && r.code == 200)
    })
    .await;
    env.edit(&name, |rt| {
        rt.metadata
            .labels
            .get_or_insert_default()
            .insert("edited-by".into(), "someone-else".into());
    })
    .await;

    let result = kim::testing::reconciler::reconcile(Arc::new(stale), ctx.clone()).await;
    assert!(result.is_ok(), "reconcile failed: {:?}", result.err());
    let patches: Vec<u16> = env
        .kcp
        .requests()
        .iter()
        .filter(|r| r.verb == Some(Verb::Patch) && r.is("runtimes", None))
        .map(|r| r.code)
        .collect();
    assert_eq!(
        patches,
        [422, 200],
        "the stale guard fails once, the retried patch applies"
    );
    let stored = env.runtime_json(&name).expect("Runtime");
    assert_eq!(
        stored["metadata"]["finalizers"],
        serde_json::json!([FINALIZER])
    );
    assert_eq!(
        stored["metadata"]["labels"]["edited-by"], "someone-else",
        "the other client's change is kept"
    );
    let text = metrics.encode();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kim_controller_reconcile_errors_total{"))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert_eq!(metrics.reconciles(), 1);
    assert!(errors.is_empty(), "reconcile errors counted: {errors:?}");
    watches.abort();
}

/// `kim controller --policy-file`: the file is in force in the running process (its
/// `allowedWriters` leave out the controller's own user, so the pre-write check denies every
/// status write: none reaches the control cluster, each is counted on `/metrics`), and an
/// invalid file stops start-up with a non-zero exit naming the offending field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_policy_file_is_in_force_and_an_invalid_one_stops_start_up() {
    let env = Env::without_controller().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "kind: StatusPolicy\nallowedWriters:\n  users: [\"system:serviceaccount:other:writer\"]\n",
    )
    .unwrap();
    let policy_arg = policy.to_str().unwrap();
    let mut kim = env.controller_process(dir.path(), false, &["--policy-file", policy_arg], "info");
    let metrics_addr: std::net::SocketAddr = kim
        .logged("metrics_addr", TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("kim controller: {e}"))
        .parse()
        .unwrap();
    env.create(&sample("aws-minimal.yaml")).await;
    let denied = crate::support::eventually(TIMEOUT, || async {
        let text = crate::support::scrape(metrics_addr).await;
        let n = crate::support::sample(&text, "kim_controller_status_denied_total")?;
        (n >= 2.0).then_some(n)
    })
    .await;
    let (stdout, stderr) = kim.terminate(Duration::from_secs(10));
    assert!(
        denied.is_some(),
        "no denial counted\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        env.writes_of("aws-minimal").is_empty(),
        "status written: {:#?}",
        shorts(&env.writes_of("aws-minimal"))
    );
    assert!(
        stdout.contains("writer"),
        "the denial names the rule: {stdout}"
    );

    std::fs::write(
        &policy,
        "conditionTypes:\n  - type: X\n    reasons:\n      - {reason: R, statuses: [Maybe]}\n",
    )
    .unwrap();
    let mut bad = env.controller_process(dir.path(), false, &["--policy-file", policy_arg], "info");
    let status = bad.exit(TIMEOUT).await.expect("kim controller exits");
    let stderr = bad.stderr();
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("policy.yaml")
            && stderr.contains("conditionTypes[0].reasons[0].statuses[0]"),
        "{stderr}"
    );
}

/// The metrics address a `kim controller` process logged at start-up.
async fn metrics_addr(p: &mut testenv::process::Process) -> std::net::SocketAddr {
    let addr = p.logged("metrics_addr", TIMEOUT).await;
    addr.unwrap_or_else(|e| panic!("kim controller: {e}"))
        .parse()
        .unwrap()
}

/// Two `kim controller` processes with leader election on a 2 s Lease; the leader is killed
/// with SIGKILL (no release, no clean-up). The standby takes over only once the Lease has
/// expired — read from the control cluster's history of the Lease: the standby's first
/// acquisition is at least one lease duration after the dead leader's last renewal — and then
/// reconciles a new Runtime to Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_once_its_lease_expires() {
    let env = Env::without_controller().await;
    let stepper = env.sim.run_every(Duration::from_millis(50));
    let lease_flags = ["--lease-duration-seconds", "2"];
    let start =
        |dir: &tempfile::TempDir| env.controller_process(dir.path(), true, &lease_flags, "info");
    let leads = |addr: std::net::SocketAddr, want: i64| async move {
        crate::support::eventually(TIMEOUT, || async {
            let text = crate::support::scrape(addr).await;
            (leader_gauge(&text) == Some(want)).then_some(())
        })
        .await
        .is_some()
    };
    let lease = || {
        env.kcp.get(
            &Gvr::new("coordination.k8s.io", "v1", "leases"),
            Some("kim-system"),
            "kim-controller",
        )
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let mut a = start(&dir_a);
    let a_metrics = metrics_addr(&mut a).await;
    assert!(leads(a_metrics, 1).await, "a leads: {}", a.stderr());
    let holder_a = lease().expect("Lease")["spec"]["holderIdentity"]
        .as_str()
        .expect("a holder")
        .to_string();
    let mut b = start(&dir_b);
    let b_metrics = metrics_addr(&mut b).await;
    assert!(leads(b_metrics, 0).await, "b stands by");
    let mut first = sample("aws-minimal.yaml");
    first.metadata.name = Some("under-a".into());
    env.create(&first).await;
    env.wait_ready("under-a").await;

    let (a_out, _) = a.kill();
    let mut second = sample("azure-fremium.yaml");
    second.metadata.name = Some("under-b".into());
    env.create(&second).await;
    env.wait_ready("under-b").await;
    assert!(leads(b_metrics, 1).await, "b leads");
    stepper.abort();
    let (b_out, b_err) = b.terminate(Duration::from_secs(10));

    // The Lease's history: a's last renewal, b's first acquisition.
    let micro = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a MicroTime")).expect("RFC 3339")
    };
    let leases: Vec<serde_json::Value> = env
        .journal
        .changes()
        .into_iter()
        .filter(|c| c.gvr.plural == "leases" && c.name() == "kim-controller")
        .map(|c| c.object)
        .collect();
    let holder = |l: &serde_json::Value| l["spec"]["holderIdentity"].as_str().map(String::from);
    let a_last = leases
        .iter()
        .rfind(|l| holder(l).as_deref() == Some(holder_a.as_str()))
        .expect("a held the Lease");
    let b_first = leases
        .iter()
        .find(|l| holder(l).is_some_and(|h| h != holder_a))
        .unwrap_or_else(|| panic!("b never took the Lease\n{b_out}\n{b_err}\n{a_out}"));
    let duration =
        chrono::Duration::seconds(a_last["spec"]["leaseDurationSeconds"].as_i64().unwrap());
    let expired_at = micro(&a_last["spec"]["renewTime"]) + duration;
    let taken_at = micro(&b_first["spec"]["acquireTime"]);
    assert!(
        taken_at >= expired_at,
        "b took the Lease at {taken_at}, before a's expired at {expired_at}: {leases:#?}"
    );
    env.assert_model_clean();
}
