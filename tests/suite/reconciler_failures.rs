//! Failure paths of `kim controller`, with the real kube-runtime Controller against in-memory
//! API servers over HTTP and the simulated Gardener: conversion errors, terminal and
//! retryable Gardener failures, API errors (409 on a status write, 500 from Gardener), a
//! `Failed` Runtime fixed by a spec change, deletion of a Runtime that never got a Shoot, and
//! structured authentication. Every status write is checked against the status model.

use crate::support::reconciler::*;
use kim::api::Runtime;
use std::collections::BTreeMap;
use std::time::Duration;
use testenv::gardener::ShootScript;
use testenv::{FaultAction, FaultRule, Gvr, Verb};

fn never_failed(env: &Env, name: &str) {
    let states: Vec<String> = env
        .writes_of(name)
        .iter()
        .map(|w| w.state.clone())
        .collect();
    assert!(
        !states.iter().any(|s| s == "Failed"),
        "a transient error must never produce Failed: {:#?}",
        shorts(&env.writes_of(name))
    );
}

fn without_label(mut rt: Runtime, label: &str) -> Runtime {
    rt.metadata.labels.as_mut().unwrap().remove(label);
    rt
}

/// Provisions `rt` to Ready by stepping Gardener.
async fn provision(env: &Env, rt: &Runtime) {
    let name = rt.metadata.name.clone().unwrap();
    env.create(rt).await;
    env.step_until(&format!("{name} Ready"), |s| {
        s.state(&name) == Some("Ready")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_without_audit_log_tenant_fails_with_audit_log_err_as_kim() {
    let env = Env::start().await;
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.region = "ap-south-1".into();
    env.create(&rt).await;
    env.wait_condition(
        "aws-minimal",
        "Failed",
        "Provisioned",
        "False",
        "AuditLogErr",
    )
    .await;
    let (_, _, message) = env.condition("aws-minimal", "Provisioned").unwrap();
    assert!(
        message.starts_with("Failed to configure audit logs: spec.shoot.region: ")
            && message.contains("ap-south-1"),
        "KIM's message, naming the region: {message}"
    );
    assert!(
        env.garden.list(&Gvr::shoots(), None).is_empty(),
        "no Shoot created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_error_fails_without_a_shoot_and_recovers_when_fixed() {
    let env = Env::start().await;
    let rt = without_label(sample("aws-minimal.yaml"), "kyma-project.io/region");
    env.create(&rt).await;
    env.wait_condition(
        "aws-minimal",
        "Failed",
        "Provisioned",
        "False",
        "ConversionErr",
    )
    .await;
    let (_, _, message) = env.condition("aws-minimal", "Provisioned").unwrap();
    assert!(
        message.contains("kyma-project.io/region"),
        "the message names the missing label: {message}"
    );
    assert!(env.shoot("aws-minimal").is_none(), "no Shoot created");
    env.wait("a Warning event for the False condition", |s| {
        s.env
            .kcp
            .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
            .iter()
            .any(|ev| ev["type"] == "Warning" && ev["reason"] == "ConversionErr")
    })
    .await;
    assert!(env.garden.list(&Gvr::shoots(), None).is_empty());
    // One write: the pass accepts the Runtime (`Initialised`, merged away) and fails it.
    assert_eq!(
        shorts(&env.writes_of("aws-minimal")),
        [w(
            "Failed",
            &[c("Provisioned", "False", "ConversionErr")],
            None,
            false
        )]
    );
    // Fixing the Runtime (the label) lets it go on.
    env.edit("aws-minimal", |r| {
        r.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("kyma-project.io/region".into(), "region".into());
    })
    .await;
    env.step_until("Ready", |s| s.state("aws-minimal") == Some("Ready"))
        .await;
    let writes = shorts(&env.writes_of("aws-minimal"));
    assert_eq!(
        writes[1],
        w(
            "Pending",
            &[c("Provisioned", "Unknown", "Pending")],
            None,
            false
        ),
        "Failed → Pending once the Shoot is created: {writes:#?}"
    );
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_without_shoot_is_released_at_once() {
    let env = Env::start().await;
    let rt = without_label(sample("aws-trial.yaml"), "kyma-project.io/broker-plan-id");
    env.create(&rt).await;
    env.wait_condition(
        "aws-trial",
        "Failed",
        "Provisioned",
        "False",
        "ConversionErr",
    )
    .await;
    let json = env.runtime_json("aws-trial").unwrap();
    assert_eq!(
        json["metadata"]["finalizers"][0],
        kim::status::table::FINALIZER
    );
    let before = env.writes_of("aws-trial").len();
    env.delete("aws-trial").await;
    env.wait("the Runtime is gone", |s| {
        s.runtime_json("aws-trial").is_none()
    })
    .await;
    assert_eq!(
        env.writes_of("aws-trial").len(),
        before,
        "released without a status write"
    );
    assert!(env.garden.list(&Gvr::shoots(), None).is_empty());
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_and_a_spec_fix_recovers() {
    let env = Env::start().await;
    env.sim.set_script(
        "aws-full",
        ShootScript::create_fails(&["ERR_INFRA_UNAUTHORIZED"]),
    );
    let rt = sample("aws.yaml");
    env.create(&rt).await;
    env.step_until("Failed", |s| s.state("aws-full") == Some("Failed"))
        .await;
    let (status, reason, message) = env.condition("aws-full", "Provisioned").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "CreationErr"));
    assert!(message.contains("ERR_INFRA_UNAUTHORIZED"), "{message}");
    let json = env.runtime_json("aws-full").unwrap();
    assert_eq!(
        json["status"]["shootLastErrors"][0]["codes"][0],
        "ERR_INFRA_UNAUTHORIZED"
    );
    assert_eq!(json["status"]["shootLastOperation"]["state"], "Failed");
    // Terminal: more Gardener steps change nothing and no retry is requested.
    let writes = env.writes_of("aws-full").len();
    env.sim.advance(3);
    env.wait_condition("aws-full", "Failed", "Provisioned", "False", "CreationErr")
        .await;
    let shoot = env.shoot("aws-full").unwrap();
    assert!(
        shoot["metadata"]["annotations"]
            .get("gardener.cloud/operation")
            .is_none(),
        "no retry of a terminal failure"
    );
    // A spec change (new credentials) is retried.
    env.edit("aws-full", |r| {
        r.spec.shoot.secret_binding_name = "fixed-credentials".into();
    })
    .await;
    env.step_until("Ready after the fix", |s| {
        s.state("aws-full") == Some("Ready")
    })
    .await;
    let after = shorts(&env.writes_of("aws-full")[writes..]);
    assert_eq!(
        after[0],
        w(
            "Pending",
            &[c("Provisioned", "Unknown", "Processing")],
            Some(("Create", "Failed")),
            false
        ),
        "{after:#?}"
    );
    assert!(after.last().unwrap().starts_with("Ready"), "{after:#?}");
    let shoot = env.shoot("aws-full").unwrap();
    assert_eq!(shoot["spec"]["credentialsBindingName"], "fixed-credentials");
    assert_eq!(
        env.condition("aws-full", "Provisioned").unwrap().1,
        "ShootCreationCompleted"
    );
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_exceeded_stays_pending_and_recovers() {
    let env = Env::start().await;
    env.sim.set_script(
        "azure-fremium",
        ShootScript::create_fails(&["ERR_INFRA_QUOTA_EXCEEDED"]),
    );
    let rt = sample("azure-fremium.yaml");
    env.create(&rt).await;
    env.step_until("the quota error is reported", |s| {
        s.condition("azure-fremium", "Provisioned")
            .is_some_and(|(_, _, m)| m.contains("ERR_INFRA_QUOTA_EXCEEDED"))
    })
    .await;
    let (status, reason, _) = env.condition("azure-fremium", "Provisioned").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "Pending"));
    assert_eq!(env.state("azure-fremium").as_deref(), Some("Pending"));
    env.step_until("Ready after Gardener's retry", |s| {
        s.state("azure-fremium") == Some("Ready")
    })
    .await;
    never_failed(&env, "azure-fremium");
    let retries = env
        .garden
        .count_requests(|r| r.verb == Some(Verb::Patch) && r.is("shoots", None) && r.code == 200);
    assert!(retries >= 1, "the Shoot was annotated for a retry");
    let writes = env.writes_of("azure-fremium");
    assert!(
        writes.iter().any(
            |w| w.last_op.as_ref().map(|o| o.1.as_str()) == Some("Failed") && w.state == "Pending"
        ),
        "the failed operation was copied while Pending: {:#?}",
        shorts(&writes)
    );
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_on_a_status_write_is_retried() {
    let env = Env::start().await;
    env.kcp.add_fault(
        FaultRule::new(FaultAction::fail(409))
            .verb(Verb::Update)
            .resource("runtimes")
            .subresource("status")
            .times(2),
    );
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let conflicts = env
        .kcp
        .count_requests(|r| r.is("runtimes", Some("status")) && r.code == 409);
    // The two injected ones and no other: the controller's own writes stay on top of its
    // cache, so no pass writes from a stale copy.
    assert_eq!(conflicts, 2, "the injected conflicts were hit, no other");
    // The conflicts cost retries, not extra or different statuses: at most the provisioning's
    // three writes (docs/reconciler.md, "Status sequences").
    let writes = env.writes_of("aws-minimal");
    let first = writes.first().unwrap();
    assert_eq!(
        (first.state.as_str(), &first.conditions[..]),
        (
            "Pending",
            &[("Provisioned".into(), "Unknown".into(), "Pending".into())][..]
        ),
        "{:#?}",
        shorts(&writes)
    );
    assert!(writes.len() <= 3, "{:#?}", shorts(&writes));
    assert_eq!(
        writes.last().unwrap().short(),
        w(
            "Ready",
            &[
                c("Provisioned", "True", "ShootCreationCompleted"),
                c("KubeconfigReady", "True", "KubeconfigCreated"),
                c("Configured", "True", "AdministratorsConfigured"),
            ],
            Some(("Create", "Succeeded")),
            true
        )
    );
    never_failed(&env, "aws-minimal");
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_api_errors_are_retried_with_gardener_err() {
    let env = Env::start().await;
    env.garden.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Create)
            .resource("shoots")
            .main_resource()
            .times(2),
    );
    let rt = sample("aws-trial.yaml");
    env.create(&rt).await;
    env.wait_condition(
        "aws-trial",
        "Pending",
        "Provisioned",
        "False",
        "GardenerErr",
    )
    .await;
    env.step_until("Ready", |s| s.state("aws-trial") == Some("Ready"))
        .await;
    never_failed(&env, "aws-trial");
    assert_eq!(env.garden.list(&Gvr::shoots(), None).len(), 1, "one Shoot");
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_cluster_errors_are_retried_with_configuration_error() {
    let env = Env::start().await;
    env.runtime.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .resource("clusterrolebindings")
            .times(3),
    );
    let rt = sample("azure.yaml");
    env.create(&rt).await;
    env.step_until("Configured=False/ConfigurationError", |s| {
        s.condition("azure-full", "Configured")
            .is_some_and(|c| c.0 == "False" && c.1 == "ConfigurationError")
    })
    .await;
    env.wait_ready("azure-full").await;
    never_failed(&env, "azure-full");
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_authentication_config_map_lives_and_dies_with_the_shoot() {
    let env = Env::start().await;
    let mut rt = sample("aws.yaml");
    rt.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.32.1".into());
    provision(&env, &rt).await;
    let shoot = env.shoot("aws-full").unwrap();
    assert_eq!(
        shoot["spec"]["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]["configMapName"],
        "structured-auth-config-aws-full"
    );
    let cm = env
        .garden
        .get(
            &Gvr::new("", "v1", "configmaps"),
            Some(GARDEN_NS),
            "structured-auth-config-aws-full",
        )
        .expect("ConfigMap created");
    let content: serde_json::Value =
        serde_json::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(content["kind"], "AuthenticationConfiguration");
    assert_eq!(
        content["jwt"].as_array().unwrap().len(),
        2,
        "main + additional"
    );
    env.delete("aws-full").await;
    env.step_until("gone", |s| s.runtime_json("aws-full").is_none())
        .await;
    assert!(
        env.garden
            .list(&Gvr::new("", "v1", "configmaps"), Some(GARDEN_NS))
            .is_empty()
    );
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_progress_independently() {
    // Shoot events reach the Runtime whose spec.shoot.name and runtime id match the Shoot.
    let env = Env::start().await;
    let a = sample("aws-minimal.yaml");
    let mut b = sample("azure-fremium.yaml");
    b.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kyma-project.io/runtime-id".into(), "runtime-id-b".into());
    env.create(&a).await;
    env.create(&b).await;
    env.step_until("both Ready", |s| {
        s.state("aws-minimal") == Some("Ready") && s.state("azure-fremium") == Some("Ready")
    })
    .await;
    let by_name: BTreeMap<String, String> = env
        .garden
        .list(&Gvr::shoots(), None)
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                s["spec"]["provider"]["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(by_name["aws-minimal"], "aws");
    assert_eq!(by_name["azure-fremium"], "azure");
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_never_downgrades_kubernetes() {
    let env = Env::start().await;
    let rt = sample("aws.yaml"); // Kubernetes 1.28.7
    provision(&env, &rt).await;
    // Gardener (auto-update) or an operator raised the version meanwhile.
    env.garden
        .modify(&Gvr::shoots(), Some(GARDEN_NS), "aws-full", |s| {
            s["spec"]["kubernetes"]["version"] = serde_json::json!("1.29.3");
        })
        .unwrap();
    env.edit("aws-full", |r| {
        r.spec.shoot.provider.workers[0].maximum += 1;
    })
    .await;
    env.step_until("Ready after the update", |s| {
        s.state("aws-full") == Some("Ready") && s.env.shoot("aws-full").is_some_and(|shoot| {
            shoot["metadata"]["annotations"]["infrastructuremanager.kyma-project.io/runtime-generation"]
                == "2"
        })
            && s.condition("aws-full", "Provisioned")
                .map(|c| c.1)
                .as_deref()
                == Some("ConfigurationCompleted")
    })
    .await;
    let shoot = env.shoot("aws-full").unwrap();
    assert_eq!(
        shoot["spec"]["kubernetes"]["version"], "1.29.3",
        "not downgraded"
    );
    assert_eq!(shoot["spec"]["provider"]["workers"][0]["maximum"], 21);
    never_failed(&env, "aws-full");
    env.assert_model_clean();
}

/// A `Ready` Runtime stays `Ready` through transient errors of a resync — a failed read of its
/// kubeconfig Secret, of its bindings in the runtime cluster: each is retried with backoff and
/// none is written (no `Ready` → `Pending` → `Ready` flip for a blip). A resync reads the
/// Runtime and its Shoot from the watch caches (no Shoot GET to fail); it syncs the
/// administrators (the resync is past 90 % of the period since their last sync), and with no
/// runtime-cluster client kept (`runtime_client_cache: 0`, as for a client evicted from the
/// cache) it reads the kubeconfig Secret for a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_of_a_ready_runtime_are_retried_without_status_writes() {
    let mut env = Env::start_with(Options {
        resync: Duration::from_millis(300),
        start_controller: false,
        ..Options::default()
    })
    .await;
    let mut settings = env.settings();
    settings.runtime_client_cache = 0;
    env.controller = Some(env.spawn(settings));
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let ready_writes = env.writes_of("aws-minimal").len();
    let metrics = env.metrics();
    let reconciles = metrics.reconciles();
    let api_errors = || {
        metrics
            .encode()
            .lines()
            .find(|l| l.starts_with("kim_controller_reconcile_errors_total{kind=\"api\"}"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_default()
    };
    let errors_before = api_errors();
    let shoot_gets = |e: &Env| {
        e.garden
            .count_requests(|r| r.verb == Some(Verb::Get) && r.is("shoots", None))
    };
    let shoot_gets_before = shoot_gets(&env);
    env.kcp.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Get)
            .resource("secrets")
            .times(2),
    );
    env.runtime.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::List)
            .resource("clusterrolebindings")
            .times(2),
    );
    let failed = |e: &Env| {
        let code = |s: &testenv::ServerHandle, verb: Verb, plural: &str, code: u16| {
            s.count_requests(|r| r.verb == Some(verb) && r.is(plural, None) && r.code == code)
        };
        (
            code(&e.kcp, Verb::Get, "secrets", 500),
            code(&e.runtime, Verb::List, "clusterrolebindings", 500),
        )
    };
    env.wait("every injected fault hit", |s| failed(s.env) == (2, 2))
        .await;
    // One more complete resync after the last fault.
    let now = metrics.reconciles();
    env.wait("a resync after the faults", |_| {
        metrics.reconciles() > now + 1
    })
    .await;
    let after: Vec<String> = shorts(&env.writes_of("aws-minimal")[ready_writes..]);
    assert!(
        after.is_empty(),
        "transient errors of a Ready Runtime were written: {after:#?}"
    );
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    // Two Secret GETs and two binding lists failed: one failed reconcile each (a 500 is not
    // retried inside the client).
    let errors = api_errors() - errors_before;
    assert!(
        errors >= 4.0,
        "the failed reconciles were counted: {errors}"
    );
    assert_eq!(
        shoot_gets(&env),
        shoot_gets_before,
        "a resync reads the Shoot from the cache"
    );
    println!(
        "Ready Runtime under transient errors: {} reconciles, {errors} API errors, 0 status writes",
        metrics.reconciles() - reconciles
    );
    env.assert_model_clean();
}

/// A transient error of a `Ready` Runtime that lasts longer than
/// `Settings::transient_error_grace` is reported as the spec says for the step (`Pending`,
/// `Configured=False/ConfigurationError` for the administrators' step), and the Runtime is
/// `Ready` again once the error is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_transient_error_of_a_ready_runtime_is_reported_after_the_grace() {
    const GRACE: Duration = Duration::from_secs(1);
    let mut env = Env::start_with(Options {
        resync: Duration::from_millis(300),
        start_controller: false,
        ..Options::default()
    })
    .await;
    let mut settings = env.settings();
    settings.transient_error_grace = GRACE;
    env.controller = Some(env.spawn(settings));
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let ready_writes = env.writes_of("aws-minimal").len();
    let fault = FaultRule::new(FaultAction::fail(500))
        .verb(Verb::List)
        .resource("clusterrolebindings");
    let (reported, after) =
        lasting_read_error_is_reported(&env, &env.runtime, fault, GRACE, ready_writes).await;
    println!(
        "lasting transient error of a Ready Runtime: reported after {:.1} s (grace {GRACE:?}); writes {after:#?}",
        reported.as_secs_f64()
    );
    env.assert_model_clean();
}

/// Adds `fault` (a lasting failure of one of the reads of aws-minimal's administrators' sync)
/// to `server` until the error is written (`Pending`, `Configured=False/ConfigurationError`,
/// not before `grace`), then clears it and waits for `Ready`. Returns how long the report took
/// and the writes after the first `ready_writes`.
async fn lasting_read_error_is_reported(
    env: &Env,
    server: &testenv::ServerHandle,
    fault: FaultRule,
    grace: Duration,
    ready_writes: usize,
) -> (Duration, Vec<String>) {
    server.add_fault(fault);
    let start = std::time::Instant::now();
    env.wait_condition(
        "aws-minimal",
        "Pending",
        "Configured",
        "False",
        "ConfigurationError",
    )
    .await;
    let reported = start.elapsed();
    assert!(reported >= grace, "reported after {reported:?}");
    server.clear_faults();
    env.wait_ready("aws-minimal").await;
    let after = shorts(&env.writes_of("aws-minimal")[ready_writes..]);
    let done = c("Provisioned", "True", "ShootCreationCompleted");
    let kubeconfig = c("KubeconfigReady", "True", "KubeconfigCreated");
    let op = Some(("Create", "Succeeded"));
    assert_eq!(
        after,
        [
            w(
                "Pending",
                &[
                    done.clone(),
                    kubeconfig.clone(),
                    c("Configured", "False", "ConfigurationError")
                ],
                op,
                true
            ),
            w(
                "Ready",
                &[
                    done,
                    kubeconfig,
                    c("Configured", "True", "AdministratorsConfigured")
                ],
                op,
                true
            ),
        ]
    );
    never_failed(env, "aws-minimal");
    (reported, after)
}

/// A 403 on a `Ready` Runtime's resync — what a kube-apiserver that has just started answers
/// until its RBAC cache is loaded — is retried without a status write, like a transient error;
/// one that lasts past `Settings::transient_error_grace` (a missing RBAC rule) is reported as
/// the step's failure, and the Runtime is `Ready` again once the 403s stop. The read that meets
/// it is the kubeconfig Secret's GET on the control cluster, made at each resync's
/// administrators' sync when no runtime-cluster client is kept (`runtime_client_cache: 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_resync_of_a_ready_runtime_waits_for_the_grace_before_it_is_written() {
    const GRACE: Duration = Duration::from_secs(2);
    let mut env = Env::start_with(Options {
        resync: Duration::from_millis(300),
        start_controller: false,
        ..Options::default()
    })
    .await;
    let mut settings = env.settings();
    settings.transient_error_grace = GRACE;
    settings.runtime_client_cache = 0;
    env.controller = Some(env.spawn(settings));
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let ready_writes = env.writes_of("aws-minimal").len();
    let forbidden_gets = |e: &Env| {
        e.kcp
            .count_requests(|r| r.verb == Some(Verb::Get) && r.is("secrets", None) && r.code == 403)
    };
    let secret_get = || {
        FaultRule::new(FaultAction::fail(403))
            .verb(Verb::Get)
            .resource("secrets")
    };
    // A short burst: two resyncs meet a 403 and nothing is written.
    env.kcp.add_fault(secret_get().times(2));
    env.wait("both 403s hit", |s| forbidden_gets(s.env) == 2)
        .await;
    let metrics = env.metrics();
    let now = metrics.reconciles();
    env.wait("a resync after the 403s", |_| {
        metrics.reconciles() > now + 1
    })
    .await;
    let after = shorts(&env.writes_of("aws-minimal")[ready_writes..]);
    assert!(
        after.is_empty(),
        "a 403 of a Ready Runtime's resync was written at once: {after:#?}"
    );
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    // A 403 that lasts is reported once the grace is over.
    lasting_read_error_is_reported(&env, &env.kcp, secret_get(), GRACE, ready_writes).await;
    env.assert_model_clean();
}

/// The controller's first list of Runtimes (the watcher's initial list) fails: kube-runtime's
/// trigger backoff retries it and the Runtime is still provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_initial_list_is_retried() {
    for (resource, env_of) in [("runtimes", 0), ("shoots", 1)] {
        let env = Env::without_controller().await;
        let server = if env_of == 0 { &env.kcp } else { &env.garden };
        server.add_fault(
            FaultRule::new(FaultAction::fail(500))
                .verb(Verb::List)
                .resource(resource)
                .times(1),
        );
        // The clients of `kim controller`: a deadline on every request, kube's retries off.
        let client = |mut c: kube::Config| {
            c.default_retry = false;
            kim::reconciler::deadline::build(c, Duration::from_secs(5)).expect("client")
        };
        let mut settings = env.settings();
        settings.kcp = client(env.controller_kube_config());
        settings.garden = client(env.garden.kube_config(None));
        let running = env.spawn(settings);
        let rt = sample("aws-minimal.yaml");
        env.create(&rt).await;
        env.step_until("Ready after a failed initial list", |s| {
            s.state("aws-minimal") == Some("Ready")
        })
        .await;
        let lists = server.count_requests(|r| r.is(resource, None) && r.code == 500);
        assert_eq!(lists, 1, "{resource}: the injected failure was hit");
        running.stop().await;
    }
}

/// The controller's own pre-write check (`kim::reconciler::status::check`, the webhook's
/// evaluation run before every status write): a Runtime whose stored status is `Terminating`
/// although it is not being deleted (written past admission) can only get writes the model
/// denies (nothing leads out of `Terminating`; `Terminating` again needs a deletion). The
/// controller must send none of them: no `runtimes/status` write reaches the control cluster,
/// the stored status stays as it was, each denial is counted
/// (`kim_controller_status_denied_total`, reconcile errors of kind `denied`) and the Runtime
/// gets a Warning Event `StatusWriteDenied` naming the broken rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_model_denies_is_never_sent() {
    let env = Env::start().await;
    let mut rt = serde_json::to_value(sample("aws-minimal.yaml")).unwrap();
    rt["metadata"]["namespace"] = NS.into();
    rt["status"] = serde_json::json!({
        "state": "Terminating",
        "conditions": [{
            "type": "Deprovisioned", "status": "Unknown", "reason": "GardenerShootDeleted",
            "message": "deleting", "lastTransitionTime": "2026-11-02T00:00:10Z",
            "observedGeneration": 1
        }]
    });
    env.kcp.put(&Gvr::runtimes(), rt).unwrap();
    let stored = env.runtime_json("aws-minimal").unwrap()["status"].clone();
    let metrics = env.metrics();
    let denied_errors = || {
        metrics
            .encode()
            .lines()
            .find_map(|l| {
                l.strip_prefix("kim_controller_reconcile_errors_total{kind=\"denied\"} ")?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_default()
    };
    // A denial is counted when the write is refused, its reconcile's error when the reconcile
    // returns: both are waited for.
    env.wait(
        "two denied status writes, two reconciles failed by them",
        |_| metrics.status_denials() >= 2 && denied_errors() >= 2.0,
    )
    .await;
    assert!(
        env.writes_of("aws-minimal").is_empty(),
        "a denied status was sent: {:#?}",
        shorts(&env.writes_of("aws-minimal"))
    );
    let status_requests = env
        .kcp
        .count_requests(|r| r.is("runtimes", Some("status")) && r.is_write());
    assert_eq!(
        status_requests, 0,
        "status write requests reached the server"
    );
    assert_eq!(env.runtime_json("aws-minimal").unwrap()["status"], stored);
    assert!(env.findings.lock().unwrap().is_empty());
    // The Runtime gets a Warning Event saying why (Events stay once written).
    env.wait("a StatusWriteDenied Event", |e| {
        e.env
            .kcp
            .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
            .iter()
            .any(|ev| {
                ev["type"] == "Warning"
                    && ev["reason"] == "StatusWriteDenied"
                    && ev["regarding"]["name"] == "aws-minimal"
                    && ev["note"].as_str().is_some_and(|n| {
                        n.contains("[transition] status.state: transition Terminating -> Pending")
                    })
            })
    })
    .await;
}

/// A Runtime without `spec` — the CRD, like KIM's, does not require one — stored next to a good
/// Runtime: the good one is provisioned as usual; the one without spec is `Failed` with
/// `Provisioned=False/ConversionErr` naming the missing field (and a Warning Event), gets no
/// Shoot, is never given a spec by the controller's writes, and is released when deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_spec_fails_alone_and_is_released() {
    let env = Env::start().await;
    let mut bare = serde_json::to_value(sample("aws-trial.yaml")).unwrap();
    bare.as_object_mut().unwrap().remove("spec");
    bare["metadata"]["name"] = "no-spec".into();
    bare["metadata"]["labels"]["kyma-project.io/runtime-id"] = "runtime-id-no-spec".into();
    env.kcp
        .put(&Gvr::runtimes(), bare)
        .expect("stored without spec");
    provision(&env, &sample("aws-minimal.yaml")).await;
    env.wait_condition("no-spec", "Failed", "Provisioned", "False", "ConversionErr")
        .await;
    let (_, _, message) = env.condition("no-spec", "Provisioned").unwrap();
    assert!(
        message.contains("spec") && message.contains("required"),
        "the message names the missing field: {message}"
    );
    assert!(
        env.runtime_json("no-spec").unwrap().get("spec").is_none(),
        "the controller's writes give it no spec"
    );
    env.wait("a Warning event for the Runtime without spec", |e| {
        e.env
            .kcp
            .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
            .iter()
            .any(|ev| {
                ev["type"] == "Warning"
                    && ev["reason"] == "ConversionErr"
                    && ev["regarding"]["name"] == "no-spec"
            })
    })
    .await;
    // One write: accepted (`Initialised`, merged away) and failed in the same pass.
    assert_eq!(
        shorts(&env.writes_of("no-spec")),
        [w(
            "Failed",
            &[c("Provisioned", "False", "ConversionErr")],
            None,
            false
        )]
    );
    let shoots = || -> Vec<String> {
        env.garden
            .list(&Gvr::shoots(), None)
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(shoots(), ["aws-minimal"]);
    env.delete("no-spec").await;
    env.wait("the Runtime without spec is released", |e| {
        e.runtime_json("no-spec").is_none()
    })
    .await;
    assert_eq!(shoots(), ["aws-minimal"], "the good Runtime's Shoot stays");
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    env.assert_model_clean();
}

/// A provisioned Runtime whose spec is removed (the CRD allows it) is `Failed` with
/// `Provisioned=False/ConversionErr`, its Shoot kept; deleting it then deletes the Shoot it no
/// longer names (found by the runtime ID), the kubeconfig Secret and the structured-authentication
/// ConfigMap: nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_whose_spec_is_removed_fails_and_its_deletion_leaves_nothing() {
    let env = Env::start().await;
    let mut rt = sample("aws.yaml");
    rt.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.32.1".into());
    provision(&env, &rt).await;
    let config_maps = Gvr::new("", "v1", "configmaps");
    let secrets = Gvr::new("", "v1", "secrets");
    assert!(env.garden.list(&config_maps, Some(GARDEN_NS)).len() == 1);
    assert!(env.kcp.list(&secrets, Some(NS)).len() == 1);
    env.kcp
        .modify(&Gvr::runtimes(), Some(NS), "aws-full", |rt| {
            rt.as_object_mut().unwrap().remove("spec");
        })
        .expect("spec removed");
    env.wait_condition(
        "aws-full",
        "Failed",
        "Provisioned",
        "False",
        "ConversionErr",
    )
    .await;
    assert!(env.shoot("aws-full").is_some(), "the Shoot is kept");
    env.delete("aws-full").await;
    env.step_until("gone", |e| e.runtime_json("aws-full").is_none())
        .await;
    assert!(
        env.garden.list(&Gvr::shoots(), None).is_empty(),
        "no Shoot left"
    );
    assert!(
        env.kcp.list(&secrets, Some(NS)).is_empty(),
        "no kubeconfig Secret left"
    );
    assert!(
        env.garden.list(&config_maps, Some(GARDEN_NS)).is_empty(),
        "no structured-authentication ConfigMap left"
    );
    env.assert_model_clean();
}

/// Deleting a Runtime without spec never deletes a Shoot another Runtime names, even one that
/// carries the same runtime ID (the samples share one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_runtime_without_spec_spares_the_shoot_another_runtime_names() {
    let env = Env::start().await;
    provision(&env, &sample("aws-minimal.yaml")).await;
    let mut bare = serde_json::to_value(sample("aws-trial.yaml")).unwrap();
    bare.as_object_mut().unwrap().remove("spec");
    bare["metadata"]["name"] = "no-spec".into();
    assert_eq!(
        bare["metadata"]["labels"]["kyma-project.io/runtime-id"],
        env.runtime_json("aws-minimal").unwrap()["metadata"]["labels"]["kyma-project.io/runtime-id"],
        "the same runtime ID"
    );
    env.kcp
        .put(&Gvr::runtimes(), bare)
        .expect("stored without spec");
    env.wait_condition("no-spec", "Failed", "Provisioned", "False", "ConversionErr")
        .await;
    env.delete("no-spec").await;
    env.wait("the Runtime without spec is released", |e| {
        e.runtime_json("no-spec").is_none()
    })
    .await;
    let shoot = env.shoot("aws-minimal").expect("the other Runtime's Shoot");
    assert!(
        shoot["metadata"].get("deletionTimestamp").is_none(),
        "not being deleted: {shoot}"
    );
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    env.assert_model_clean();
}
