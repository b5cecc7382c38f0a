//! Failure paths of `kim controller` on the real servers ([`RealEnv`]: kube-apiserver and etcd
//! with kim's CRD, `manifests/base` and the real `kim webhook`; gardener-apiserver aggregated
//! behind the same kube-apiserver; the simulated gardenlet with a real runtime cluster per
//! Shoot) and the real `kim controller` binary, as its ServiceAccount and garden user with the
//! shipped RBAC: conversion errors, terminal and retryable Gardener failures, API errors, a
//! `Failed` Runtime fixed by a spec change, Runtimes without spec, structured authentication,
//! transient errors of a `Ready` Runtime and their grace, a failed initial list, and a status
//! the model denies.
//!
//! Each fault is made where it happens in production:
//! - Gardener's error codes: the gardenlet's scripts (`Create` `Failed` with
//!   `ERR_INFRA_UNAUTHORIZED` or `ERR_INFRA_QUOTA_EXCEEDED`);
//! - Gardener API errors (500 on the Shoot's creation): a test admission webhook on
//!   gardener-apiserver denying with `status.code: 500` ([`RealEnv::hold_shoot_writes`]);
//! - a status write's Conflict: a test admission webhook on kube-apiserver denying the
//!   controller's `runtimes/status` writes with 409 ([`install_admission_hook`]);
//! - runtime-cluster errors: the Shoot's runtime cluster's kube-apiserver killed (connection
//!   refused) and started again, during provisioning (the gardenlet's `Create Succeeded` held in
//!   admission until it is down) and while the Runtime is `Ready`;
//! - a 403 on a `Ready` Runtime's resync: the shipped Role without `get` on Secrets;
//! - a failed initial list: the controller started while gardener-apiserver is killed (the
//!   aggregator answers 503), and while the Role lacks `list` on Runtimes (403);
//! - a stored status the model denies: written by the admin while kim's webhook configurations
//!   are removed;
//! - a Kubernetes version raised out of band, a spec removed, a second binding: admin writes.
//!
//! Tests wait for what happened: a watch of the Runtimes (every version in order), the
//! gardenlet's history, the controller's output and its counters (which only grow). Every
//! status write the controller sent passed the real webhook (none denied) and none was denied
//! by its own check, except where the test is about that check.
//!
//! The tests share one environment ([`turn`]): started by the first, used by one test at a time
//! (each starts a controller of its own, and stops it, releasing the Lease), stopped after the
//! last. Each test names its Runtimes (and so Shoots, Secrets and runtime clusters) on its own.

use crate::support::real::NS;
use crate::support::real_controller::*;
use crate::support::real_shared::*;
use crate::support::reconciler::GARDEN_NS;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kim::status::table::{reasons, types};
use kim::status::{CondStatus, State};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use testenv::gardener::{Outcome, ShootScript};
use testenv::gardenlet::{Event as Did, Operation};

// ---- the environment the tests share ----

/// How many tests this module has: the shared environment stops after the last of them.
const TESTS: usize = 18;

static ENV: SharedEnv = SharedEnv::new(TESTS, "real-failures-env");

/// Waits for the turn of the calling test ([`SharedEnv::turn`]); the Runtime of
/// [`a_status_the_model_denies_is_never_sent`], which no controller can delete, is removed
/// first ([`remove_denied`]).
async fn turn() -> Turn {
    ENV.turn(remove_denied).await
}

// ---- the writes the tests expect ----

/// The status writes among `versions` of one Runtime: each version whose status differs from
/// the one before (a version without status, or with the same status, is a metadata change).
fn writes(versions: &[DynamicObject]) -> Vec<DynamicObject> {
    let mut out: Vec<DynamicObject> = Vec::new();
    let mut last = Value::Null;
    for o in versions {
        let s = o.data.get("status").cloned().unwrap_or(Value::Null);
        if !s.is_null() && s != last {
            out.push(o.clone());
        }
        last = s;
    }
    out
}

/// A [`short`] without Gardener's operation.
fn without_op(short: &str) -> String {
    short.split(" op ").next().unwrap_or_default().to_string()
}

/// The [`short`] of each of `versions`.
fn shorts(versions: &[DynamicObject]) -> Vec<String> {
    versions.iter().map(short).collect()
}

/// Asserts that no version of `versions` is `Failed`.
fn never_failed(versions: &[DynamicObject]) {
    assert!(
        !versions.iter().any(|o| is(o, State::Failed)),
        "a transient error must never produce Failed: {:#?}",
        shorts(&writes(versions))
    );
}

/// kube-apiserver's answers with `code` to writes of `runtimes/status` so far
/// (`apiserver_request_total`, every verb).
async fn runtime_status_answers(env: &RealEnv, code: u16) -> f64 {
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
    let code = format!("code=\"{code}\"");
    sum_samples(&text, "apiserver_request_total", |l| {
        l.contains(&code)
            && l.contains("resource=\"runtimes\"")
            && l.contains("subresource=\"status\"")
    })
}

// ---- the objects around a Runtime ----

/// Creates `samples/runtimes/<file>` as `name` with Shoot name and runtime ID `name` and the
/// fixtures' binding of its provider, after `edit`; as the admin, no status.
async fn create(env: &RealEnv, file: &str, name: &str, edit: impl FnOnce(&mut Value)) {
    env.stack
        .create_sample(file, name, |obj| {
            obj["metadata"]["labels"][kim::api::LABEL_RUNTIME_ID] = json!(name);
            obj["metadata"]["labels"][kim::api::LABEL_SHOOT_NAME] = json!(name);
            obj["spec"]["shoot"]["name"] = json!(name);
            let provider = obj["spec"]["shoot"]["provider"]["type"]
                .as_str()
                .unwrap_or("aws")
                .to_string();
            obj["spec"]["shoot"]["secretBindingName"] = json!(format!("hyperscaler-{provider}"));
            edit(obj);
        })
        .await;
}

/// Patches Runtime `name` as the admin (a JSON merge patch).
async fn patch(env: &RealEnv, name: &str, patch: Value) -> DynamicObject {
    env.runtimes()
        .await
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching Runtime {name}: {e}"))
}

/// Waits until an Event of `type_`/`reason` regarding Runtime `name` is stored.
async fn wait_event(env: &RealEnv, name: &str, type_: &str, reason: &str, note: &str) {
    let events: Api<K8sEvent> = Api::namespaced(env.stack.cp.admin().await, NS);
    let seen = crate::support::eventually(LIMIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some(type_)
                        && e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.note.as_deref().unwrap_or_default().contains(note)
                })
                .then_some(())
        }
    })
    .await;
    assert!(
        seen.is_some(),
        "no {type_} Event {reason} for Runtime {name} (note containing {note:?}) within {LIMIT:?}"
    );
}

async fn garden_config_maps(env: &RealEnv) -> Api<ConfigMap> {
    Api::namespaced(env.stack.cp.admin().await, GARDEN_NS)
}

fn structured_auth_config_map(name: &str) -> String {
    format!("structured-auth-config-{name}")
}

/// The shipped Role of the controller with `verb` removed from the rule on `resource`.
async fn role_without(env: &RealEnv, resource: &str, verbs: &[&str]) -> Vec<PolicyRule> {
    let rules = env.role_rules(ROLE).await;
    let without: Vec<PolicyRule> = rules
        .iter()
        .cloned()
        .map(|mut r| {
            if r.resources.iter().flatten().any(|res| res == resource) {
                r.verbs.retain(|v| !verbs.contains(&v.as_str()));
            }
            r
        })
        .collect();
    assert_ne!(without, rules, "the Role grants {verbs:?} on {resource}");
    without
}

/// Decoded JSON log lines of the controller (level, message and fields as text).
fn log_lines(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(v)) => v
                .iter()
                .filter(|(k, _)| *k != "timestamp")
                .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), String::from)))
                .collect::<Vec<_>>()
                .join(" "),
            _ => l.to_string(),
        })
        .collect()
}

/// How many of the controller's log lines say its watch `what` (`Runtimes`, `Shoots`) failed.
fn failed_watches(out: &str, what: &str) -> usize {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "watch failed; retrying with backoff" && v["watch"] == what)
        .count()
}

/// The next write `hold` holds; panics naming `what`, with the Runtimes and the controller's
/// output, if none comes.
async fn held(hold: &mut ShootWriteHold, run: &Run<'_>, what: &str) -> HeldShootWrite {
    tokio::select! {
        w = hold.next(what) => w,
        () = tokio::time::sleep(LIMIT - Duration::from_secs(5)) => {
            panic!("{what}: no such write held\n{}", run.context())
        }
    }
}

/// Runs a blocking control-plane command (kill, start) off the async worker.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// gardener-apiserver killed; started again when dropped (also when the test fails).
struct GardenerDown<'a> {
    env: &'a RealEnv,
    up: bool,
}

impl<'a> GardenerDown<'a> {
    fn kill(env: &'a RealEnv) -> Self {
        blocking(|| env.stack.cp.kill_gardener()).expect("kill gardener-apiserver");
        GardenerDown { env, up: false }
    }

    fn start(&mut self) -> Duration {
        self.up = true;
        blocking(|| self.env.stack.cp.start_gardener()).expect("start gardener-apiserver")
    }
}

impl Drop for GardenerDown<'_> {
    fn drop(&mut self) {
        if !self.up {
            let _ = blocking(|| self.env.stack.cp.start_gardener());
        }
    }
}

// ---- the tests ----

/// A Runtime whose region has no audit-log tenant is `Failed` with
/// `Provisioned=False/AuditLogErr` and KIM's message naming the region; no Shoot is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_without_audit_log_tenant_fails_with_audit_log_err_as_kim() {
    let env = turn().await;
    let name = "f-auditlog";
    let run = Run::start(&env).await;
    create(&env, "aws-minimal.yaml", name, |o| {
        o["spec"]["shoot"]["region"] = json!("ap-south-1");
    })
    .await;
    let audit_log = row(types::PROVISIONED, reasons::AUDIT_LOG_ERR);
    let (_, failed) = run
        .version(name, 0, "Failed with AuditLogErr", |o| {
            is(o, State::Failed) && has_condition(o, audit_log, CondStatus::False)
        })
        .await;
    let message = message(&failed, audit_log.0);
    assert!(
        message.starts_with("Failed to configure audit logs: spec.shoot.region: ")
            && message.contains("ap-south-1"),
        "KIM's message, naming the region: {message}"
    );
    assert!(env.shoot(name).await.is_none(), "no Shoot created");
    run.finish(&[name]).await;
}

/// A Runtime without its region label fails with one status write (`Failed`,
/// `Provisioned=False/ConversionErr` naming the label) and a Warning Event, without a Shoot;
/// once the label is set, it goes on: `Pending` once its Shoot is created, then `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_error_fails_without_a_shoot_and_recovers_when_fixed() {
    let env = turn().await;
    let name = "f-conversion";
    let label = "kyma-project.io/region";
    let run = Run::start(&env).await;
    let mut value = Value::Null;
    create(&env, "aws-minimal.yaml", name, |o| {
        value = o["metadata"]["labels"][label].take();
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(label);
    })
    .await;
    assert!(value.is_string(), "the sample has the label {label}");
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    let (_, failed) = run
        .version(name, 0, "Failed with ConversionErr", |o| {
            is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
        })
        .await;
    let text = message(&failed, conversion.0);
    assert!(text.contains(label), "the message names the label: {text}");
    wait_event(&env, name, "Warning", conversion.1, "").await;
    assert!(env.shoot(name).await.is_none(), "no Shoot created");
    // One write: the pass accepts the Runtime (`Initialised`, merged away) and fails it.
    let before_fix = writes(&run.versions_since(name, 0).await);
    assert_eq!(
        shorts(&before_fix),
        [w(State::Failed, &[(conversion, CondStatus::False)], None)]
    );
    let mark = run.runtimes.len();
    patch(&env, name, json!({"metadata": {"labels": {label: value}}})).await;
    run.ready(name, mark).await;
    let all = writes(&run.versions_since(name, 0).await);
    let after = all[before_fix.len()..].to_vec();
    assert_eq!(
        shorts(&after).first(),
        Some(&w(
            State::Pending,
            &[(
                row(types::PROVISIONED, reasons::PENDING),
                CondStatus::Unknown
            )],
            None
        )),
        "Failed → Pending once the Shoot is created: {:#?}",
        shorts(&after)
    );
    run.finish(&[name]).await;
}

/// A `Failed` Runtime that never got a Shoot is released at once when deleted (its finalizer
/// removed), without a status write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_without_shoot_is_released_at_once() {
    let env = turn().await;
    let name = "f-noshoot";
    let run = Run::start(&env).await;
    create(&env, "aws-trial.yaml", name, |o| {
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kyma-project.io/broker-plan-id");
    })
    .await;
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    run.version(name, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    let versions = run.versions_since(name, 0).await;
    let now = versions.last().expect("a version");
    assert_eq!(
        now.metadata.finalizers.as_deref(),
        Some(&[kim::status::table::FINALIZER.to_string()][..])
    );
    let written = writes(&versions).len();
    run.delete(name).await;
    let all = run
        .runtimes
        .since(0)
        .iter()
        .filter_map(Seen::applied)
        .filter(|o| o.name_any() == name)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(
        writes(&all).len(),
        written,
        "released without a status write: {:#?}",
        shorts(&writes(&all))
    );
    assert!(env.shoot(name).await.is_none(), "no Shoot");
    run.finish(&[]).await;
}

/// A terminal Gardener code (`ERR_INFRA_UNAUTHORIZED`) fails the Runtime (`CreationErr` with
/// Gardener's code, the last errors and operation copied) and is not retried; a spec change (a
/// new credentials binding) is: the Shoot is updated, the Runtime `Pending` again with the
/// failed operation, then `Ready` on the new credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_and_a_spec_fix_recovers() {
    let env = turn().await;
    let name = "f-unauth";
    let code = "ERR_INFRA_UNAUTHORIZED";
    env.gardenlet
        .set_script(name, ShootScript::create_fails(&[code]));
    let run = Run::start(&env).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (_, failed) = run
        .version(name, 0, "Failed", |o| is(o, State::Failed))
        .await;
    let creation = row(types::PROVISIONED, reasons::CREATION_ERR);
    assert!(
        has_condition(&failed, creation, CondStatus::False),
        "{}",
        summary(&failed)
    );
    assert!(
        message(&failed, creation.0).contains(code),
        "{}",
        summary(&failed)
    );
    assert_eq!(
        failed.data["status"]["shootLastErrors"][0]["codes"][0],
        code
    );
    assert_eq!(
        failed.data["status"]["shootLastOperation"]["state"],
        "Failed"
    );
    // Terminal: a further reconcile asks Gardener for nothing.
    run.settle(name).await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.metadata.generation,
        Some(1),
        "no retry of a terminal failure"
    );
    assert!(
        shoot
            .annotations()
            .get(testenv::gardener::OPERATION_ANNOTATION)
            .is_none(),
        "no retry of a terminal failure"
    );
    assert!(is(
        &run.versions_since(name, 0).await.pop().unwrap(),
        State::Failed
    ));
    // New credentials: a second binding of the provider, as an operator adds one.
    let fixed = "f-fixed-credentials";
    let bindings: Api<DynamicObject> = Api::namespaced_with(
        env.stack.cp.admin().await,
        GARDEN_NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "security.gardener.cloud",
            "v1alpha1",
            "CredentialsBinding",
        )),
    );
    let mut binding = bindings
        .get("hyperscaler-aws")
        .await
        .expect("the aws binding");
    binding.metadata = kube::api::ObjectMeta {
        name: Some(fixed.into()),
        namespace: Some(GARDEN_NS.into()),
        ..Default::default()
    };
    match bindings.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the binding {fixed}: {e}"),
    }
    // Gardener held: the controller's first write after the change is made before Gardener
    // takes the new generation.
    env.gardenlet.pause();
    let mark = run.runtimes.len();
    patch(
        &env,
        name,
        json!({"spec": {"shoot": {"secretBindingName": fixed}}}),
    )
    .await;
    let processing = row(types::PROVISIONED, reasons::PROCESSING);
    let (_, first) = run
        .version(name, mark, "Pending after the spec change", |o| {
            !is(o, State::Failed) && o.data.get("status").is_some()
        })
        .await;
    assert_eq!(
        short(&first),
        w(
            State::Pending,
            &[(processing, CondStatus::Unknown)],
            Some((Operation::Create, "Failed"))
        ),
        "{}",
        run.context()
    );
    env.gardenlet.resume();
    let (_, ready) = run.ready(name, mark).await;
    assert_eq!(
        condition(&ready, types::PROVISIONED).map(|c| c["reason"].clone()),
        Some(json!(
            row(types::PROVISIONED, reasons::SHOOT_CREATION_COMPLETED).1
        ))
    );
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(shoot.data["spec"]["credentialsBindingName"], fixed);
    run.finish(&[name]).await;
}

/// A retryable Gardener code (`ERR_INFRA_QUOTA_EXCEEDED`) keeps the Runtime `Pending`
/// (`Provisioned=Unknown/Pending` with Gardener's code, the failed operation copied), the
/// controller asks Gardener to retry (the Shoot's generation 2), and the Runtime is `Ready`;
/// never `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_exceeded_stays_pending_and_recovers() {
    let env = turn().await;
    let name = "f-quota";
    let code = "ERR_INFRA_QUOTA_EXCEEDED";
    env.gardenlet.set_script(
        name,
        ShootScript::default().then_create(Outcome::failed(&[code])),
    );
    let run = Run::start(&env).await;
    create(&env, "azure-fremium.yaml", name, |_| {}).await;
    let pending = row(types::PROVISIONED, reasons::PENDING);
    let (_, reported) = run
        .version(name, 0, "the quota error reported", |o| {
            message(o, pending.0).contains(code)
        })
        .await;
    assert!(
        is(&reported, State::Pending) && has_condition(&reported, pending, CondStatus::Unknown),
        "{}",
        summary(&reported)
    );
    run.ready(name, 0).await;
    let versions = run.versions_since(name, 0).await;
    never_failed(&versions);
    assert!(
        writes(&versions).iter().any(|o| is(o, State::Pending)
            && o.data["status"]["shootLastOperation"]["state"] == "Failed"),
        "the failed operation was copied while Pending: {:#?}",
        shorts(&writes(&versions))
    );
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.metadata.generation,
        Some(2),
        "the Shoot was annotated for a retry (gardener-apiserver's new generation)"
    );
    run.finish(&[name]).await;
}

/// Two of the controller's status writes answered 409 Conflict (a test admission webhook on
/// kube-apiserver): retried, with no other conflict (the controller's writes stay on top of
/// its cache) and no extra or different status: at most the provisioning's three writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_on_a_status_write_is_retried() {
    let env = turn().await;
    let name = "f-conflict";
    let denied = Arc::new(AtomicUsize::new(0));
    let hook = {
        let denied = denied.clone();
        install_admission_hook(
            env.stack.cp.admin().await,
            "conflict-on-status",
            json!([{"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                    "resources": ["runtimes/status"], "operations": ["UPDATE"]}]),
            move |request| {
                if request["name"] == name
                    && denied
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                            (n < 2).then_some(n + 1)
                        })
                        .is_ok()
                {
                    Admission::Deny {
                        code: 409,
                        message: "the object has been modified; please apply your changes to \
                                  the latest version and try again"
                            .into(),
                    }
                } else {
                    Admission::Allow
                }
            },
        )
        .await
    };
    let conflicts_before = runtime_status_answers(&env, 409).await;
    let run = Run::start(&env).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    run.ready(name, 0).await;
    let conflicts = runtime_status_answers(&env, 409).await - conflicts_before;
    hook.remove().await;
    assert_eq!(
        denied.load(Ordering::SeqCst),
        2,
        "both conflicts were answered"
    );
    assert_eq!(conflicts, 2.0, "the injected conflicts were hit, no other");
    let versions = run.versions_since(name, 0).await;
    let written = shorts(&writes(&versions));
    // The first write's state and conditions; Gardener's operation is wherever the gardenlet
    // is by then (the conflicts cost the controller time).
    assert_eq!(
        written.first().map(|s| without_op(s)),
        Some(&w(
            State::Pending,
            &[(
                row(types::PROVISIONED, reasons::PENDING),
                CondStatus::Unknown
            )],
            None
        ))
        .map(|s| without_op(s)),
        "{written:#?}"
    );
    assert!(written.len() <= 3, "{written:#?}");
    assert_eq!(
        written.last(),
        Some(&w(
            State::Ready,
            &[
                (
                    row(types::PROVISIONED, reasons::SHOOT_CREATION_COMPLETED),
                    CondStatus::True
                ),
                (
                    row(types::KUBECONFIG_READY, reasons::KUBECONFIG_CREATED),
                    CondStatus::True
                ),
                (
                    row(types::CONFIGURED, reasons::ADMINISTRATORS_CONFIGURED),
                    CondStatus::True
                ),
            ],
            Some((Operation::Create, "Succeeded"))
        ))
    );
    never_failed(&versions);
    run.finish(&[name]).await;
}

/// The Shoot's creation answered 500 twice by gardener-apiserver (a test admission webhook):
/// `Pending` with `Provisioned=False/GardenerErr`, retried, `Ready`, one Shoot created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_api_errors_are_retried_with_gardener_err() {
    let env = turn().await;
    let name = "f-garden-500";
    let run = Run::start(&env).await;
    let mut hold = env.hold_shoot_writes(name, "shoots", &["CREATE"]).await;
    create(&env, "aws-trial.yaml", name, |_| {}).await;
    for attempt in ["first", "second"] {
        held(
            &mut hold,
            &run,
            &format!("the {attempt} creation of the Shoot"),
        )
        .await
        .answer(Admission::Deny {
            code: 500,
            message: "etcdserver: request timed out".into(),
        });
    }
    held(&mut hold, &run, "the third creation of the Shoot")
        .await
        .answer(Admission::Allow);
    hold.remove().await;
    let gardener = row(types::PROVISIONED, reasons::GARDENER_ERR);
    run.version(name, 0, "Pending with GardenerErr", |o| {
        is(o, State::Pending) && has_condition(o, gardener, CondStatus::False)
    })
    .await;
    run.ready(name, 0).await;
    never_failed(&run.versions_since(name, 0).await);
    let creates = env
        .gardenlet
        .history()
        .of(name)
        .iter()
        .filter(|e| **e == Did::Started(Operation::Create))
        .count();
    assert_eq!(creates, 1, "one Shoot, created once");
    run.finish(&[name]).await;
}

/// The Shoot's new runtime cluster does not answer when the controller first binds the
/// administrators there (its kube-apiserver killed before Gardener says the Shoot is created):
/// `Configured=False/ConfigurationError`, retried, and `Ready` once the cluster is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_cluster_errors_are_retried_with_configuration_error() {
    let env = turn().await;
    let name = "f-rt-down";
    let run = Run::start(&env).await;
    let mut hold = env
        .hold_shoot_writes(name, "shoots/status", &["UPDATE"])
        .await;
    create(&env, "azure.yaml", name, |_| {}).await;
    let cluster = loop {
        let write = held(&mut hold, &run, "the gardenlet's Create Succeeded").await;
        let op = &write.request["object"]["status"]["lastOperation"];
        if op["type"] == "Create" && op["state"] == "Succeeded" {
            let cluster = env
                .gardenlet
                .cluster(name)
                .await
                .expect("the runtime cluster");
            blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
            write.answer(Admission::Allow);
            break cluster;
        }
        write.answer(Admission::Allow);
    };
    hold.remove().await;
    let configuration = row(types::CONFIGURED, reasons::CONFIGURATION_ERROR);
    run.version(name, 0, "Configured=False/ConfigurationError", |o| {
        has_condition(o, configuration, CondStatus::False)
    })
    .await;
    blocking(|| cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    run.ready(name, 0).await;
    never_failed(&run.versions_since(name, 0).await);
    run.finish(&[name]).await;
}

/// A Runtime on Kubernetes 1.32+ gets the structured-authentication ConfigMap (main and
/// additional OIDC issuers) in the project namespace, named by its Shoot; it is deleted with
/// the Runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_authentication_config_map_lives_and_dies_with_the_shoot() {
    let env = turn().await;
    let name = "f-sauth";
    let run = Run::start(&env).await;
    create(&env, "aws.yaml", name, |o| {
        o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
    })
    .await;
    run.ready(name, 0).await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot.data["spec"]["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]["configMapName"],
        structured_auth_config_map(name)
    );
    let cm = garden_config_maps(&env)
        .await
        .get(&structured_auth_config_map(name))
        .await
        .expect("the ConfigMap");
    let content: Value = serde_json::from_str(
        cm.data
            .as_ref()
            .and_then(|d| d.get("config.yaml"))
            .expect("config.yaml"),
    )
    .expect("JSON");
    assert_eq!(content["kind"], "AuthenticationConfiguration");
    assert_eq!(
        content["jwt"].as_array().map(Vec::len),
        Some(2),
        "main + additional"
    );
    run.delete(name).await;
    assert!(
        garden_config_maps(&env)
            .await
            .get_opt(&structured_auth_config_map(name))
            .await
            .expect("reading the ConfigMap")
            .is_none(),
        "the ConfigMap is gone with the Runtime"
    );
    run.finish(&[name]).await;
}

/// A Shoot's Kubernetes version raised out of band (Gardener's auto-update, an operator: here
/// the admin, after adding 1.29.3 to the CloudProfile) is kept when the Runtime's spec changes:
/// the update does not downgrade (gardener-apiserver would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_never_downgrades_kubernetes() {
    let env = turn().await;
    let name = "f-nodowngrade";
    let raised = "1.29.3";
    let run = Run::start(&env).await;
    create(&env, "aws.yaml", name, |_| {}).await; // Kubernetes 1.28.7
    run.ready(name, 0).await;
    let admin = env.stack.cp.admin().await;
    let profiles: Api<DynamicObject> = Api::all_with(
        admin,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "core.gardener.cloud",
            "v1beta1",
            "CloudProfile",
        )),
    );
    let aws = profiles.get("aws").await.expect("the aws CloudProfile");
    let offered = aws.data["spec"]["kubernetes"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .any(|v| v["version"] == raised);
    if !offered {
        let add = json!([{"op": "add", "path": "/spec/kubernetes/versions/-",
                          "value": {"version": raised}}]);
        profiles
            .patch(
                "aws",
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(add).unwrap()),
            )
            .await
            .expect("add the version to the CloudProfile");
    }
    // gardener-apiserver validates against its informer's CloudProfile: taken once it sees it.
    let shoots = env.shoots().await;
    let raise = json!({"spec": {"kubernetes": {"version": raised}}});
    let accepted = crate::support::eventually(LIMIT, || {
        let shoots = shoots.clone();
        let raise = raise.clone();
        async move {
            match shoots
                .patch(name, &PatchParams::default(), &Patch::Merge(&raise))
                .await
            {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => None,
                Err(e) => panic!("raising the Shoot's version: {e}"),
            }
        }
    })
    .await;
    assert!(
        accepted.is_some(),
        "the raised version was not accepted within {LIMIT:?}"
    );
    let rt = env.runtimes().await.get(name).await.expect("the Runtime");
    let mut workers = rt.data["spec"]["shoot"]["provider"]["workers"].clone();
    let max = workers[0]["maximum"].as_i64().expect("maximum");
    workers[0]["maximum"] = json!(max + 1);
    let generation = patch(
        &env,
        name,
        json!({"spec": {"shoot": {"provider": {"workers": workers}}}}),
    )
    .await
    .metadata
    .generation
    .expect("a generation");
    let completed = row(types::PROVISIONED, reasons::CONFIGURATION_COMPLETED);
    let at = ready_at_generation(generation);
    run.version(name, 0, "Ready with the update", |o| {
        at(Some(o)) && has_condition(o, completed, CondStatus::True)
    })
    .await;
    let shoot = env.shoot(name).await.expect("the Shoot");
    assert_eq!(
        shoot
            .annotations()
            .get("infrastructuremanager.kyma-project.io/runtime-generation")
            .map(String::as_str),
        Some(generation.to_string().as_str())
    );
    assert_eq!(
        shoot.data["spec"]["kubernetes"]["version"], raised,
        "not downgraded"
    );
    assert_eq!(
        shoot.data["spec"]["provider"]["workers"][0]["maximum"],
        max + 1
    );
    never_failed(&run.versions_since(name, 0).await);
    run.finish(&[name]).await;
}

/// Flags of the controllers of the resync tests: a resync every second, no runtime-cluster
/// client kept (each administrators' sync reads the kubeconfig Secret and connects anew), and
/// `grace` seconds before a transient error of a `Ready` Runtime is written.
fn resync_flags(grace: &'static str) -> [&'static str; 6] {
    [
        "--resync-seconds",
        "1",
        "--runtime-client-cache",
        "0",
        "--transient-error-grace-seconds",
        grace,
    ]
}

/// A `Ready` Runtime stays `Ready` through transient errors of its resyncs — its runtime
/// cluster's kube-apiserver down (killed: connection refused) for less than the grace, then
/// back: each failed reconcile is counted and retried, none is written (no `Ready` →
/// `Pending` → `Ready` flip for a blip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_of_a_ready_runtime_are_retried_without_status_writes() {
    let env = turn().await;
    let name = "f-blip";
    let run = Run::start_with(&env, &resync_flags("60")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    run.settle(name).await;
    let writes_before = run.metric("kim_controller_status_writes_total").await;
    let errors_before = run.metric("kim_controller_reconcile_errors_total").await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
    let errors = run
        .metric_reaches(
            "kim_controller_reconcile_errors_total",
            "two failed resyncs",
            |v| v >= errors_before + 2.0,
        )
        .await;
    blocking(|| cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    // Complete resyncs after the cluster is back: the error counter stops, reconciles go on.
    let reconciles = run.metric("kim_controller_reconciles_total").await;
    run.metric_reaches(
        "kim_controller_reconciles_total",
        "two reconciles after the cluster is back",
        |v| v >= reconciles + 2.0,
    )
    .await;
    run.settle(name).await;
    let versions = run.versions_since(name, ready_at).await;
    assert!(
        versions.iter().all(|o| is(o, State::Ready)),
        "transient errors of a Ready Runtime were written: {:#?}",
        shorts(&writes(&versions))
    );
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        writes_before,
        "no status write"
    );
    println!(
        "Ready Runtime under transient errors: {} failed reconciles, 0 status writes",
        errors - errors_before
    );
    run.finish(&[name]).await;
}

/// A transient error of a `Ready` Runtime that lasts longer than the grace (its runtime
/// cluster's kube-apiserver down) is reported as the spec says for the step (`Pending`,
/// `Configured=False/ConfigurationError`), not before the grace; `Ready` again once the
/// cluster is back. Exactly these two writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_transient_error_of_a_ready_runtime_is_reported_after_the_grace() {
    const GRACE: Duration = Duration::from_secs(3);
    let env = turn().await;
    let name = "f-lasting";
    let run = Run::start_with(&env, &resync_flags("3")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the runtime cluster");
    let start = Instant::now();
    blocking(|| cluster.kill_apiserver()).expect("kill the runtime cluster's apiserver");
    let down = Down {
        cluster: &cluster,
        up: false,
    };
    let reported = lasting_error_is_reported(&run, name, ready_at, start, GRACE, down).await;
    println!(
        "lasting transient error of a Ready Runtime: reported after {:.1} s (grace {GRACE:?})",
        reported.as_secs_f64()
    );
    run.finish(&[name]).await;
}

/// A runtime cluster's kube-apiserver killed; started again when dropped.
struct Down<'a> {
    cluster: &'a testenv::controlplane::ControlPlane,
    up: bool,
}

impl Down<'_> {
    fn start(&mut self) {
        self.up = true;
        blocking(|| self.cluster.start_apiserver()).expect("start the runtime cluster's apiserver");
    }
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if !self.up {
            let _ = blocking(|| self.cluster.start_apiserver());
        }
    }
}

/// What ends a lasting error: the runtime cluster started again, or the Role restored.
trait Ends {
    async fn end(self);
}

impl Ends for Down<'_> {
    async fn end(mut self) {
        self.start();
    }
}

/// The Role restored to `rules`.
struct Restore<'a>(&'a RealEnv, Vec<PolicyRule>);

impl Ends for Restore<'_> {
    async fn end(self) {
        self.0.set_role_rules(ROLE, &self.1).await;
        self.0.wait_access(&secret_get(), true).await;
    }
}

/// Waits until the lasting error that began at `start` is written (`Pending`,
/// `Configured=False/ConfigurationError`, not before `grace`), ends it, waits for `Ready`, and
/// checks the writes from `ready_at` on: exactly those two (the first repeated only with a new
/// message). Returns how long the report took.
async fn lasting_error_is_reported(
    run: &Run<'_>,
    name: &str,
    ready_at: usize,
    start: Instant,
    grace: Duration,
    ends: impl Ends,
) -> Duration {
    let configuration = row(types::CONFIGURED, reasons::CONFIGURATION_ERROR);
    let (at, _) = run
        .version(name, ready_at, "Pending with ConfigurationError", |o| {
            is(o, State::Pending) && has_condition(o, configuration, CondStatus::False)
        })
        .await;
    let reported = start.elapsed();
    assert!(
        reported >= grace,
        "reported after {reported:?}, before the grace {grace:?}"
    );
    ends.end().await;
    run.ready(name, at).await;
    let versions = run.versions_since(name, ready_at).await;
    let mut after: Vec<String> = shorts(&writes(&versions)).into_iter().skip(1).collect();
    // While the error lasts its condition's message follows it: a runtime cluster's
    // kube-apiserver that comes back answers 403 until its RBAC cache is loaded, after the
    // refused connections (measured 2026-12-03). Such writes differ from the one before in the
    // message only (`writes` drops a status equal to the one before), so they count as one.
    after.dedup();
    let done = (
        row(types::PROVISIONED, reasons::SHOOT_CREATION_COMPLETED),
        CondStatus::True,
    );
    let kubeconfig = (
        row(types::KUBECONFIG_READY, reasons::KUBECONFIG_CREATED),
        CondStatus::True,
    );
    let op = Some((Operation::Create, "Succeeded"));
    assert_eq!(
        after,
        [
            w(
                State::Pending,
                &[done, kubeconfig, (configuration, CondStatus::False)],
                op
            ),
            w(
                State::Ready,
                &[
                    done,
                    kubeconfig,
                    (
                        row(types::CONFIGURED, reasons::ADMINISTRATORS_CONFIGURED),
                        CondStatus::True
                    )
                ],
                op
            ),
        ],
        "{}",
        run.context()
    );
    never_failed(&versions);
    reported
}

/// A 403 on a `Ready` Runtime's resync — what a kube-apiserver that has just started answers
/// until its RBAC cache is loaded, or a Role being rolled out — is retried without a status
/// write, like a transient error; one that lasts past the grace (a missing RBAC rule) is
/// reported as the step's failure, and the Runtime is `Ready` again once the 403s stop. The
/// read that meets it is the kubeconfig Secret's GET, made at each resync's administrators'
/// sync when no runtime-cluster client is kept (`--runtime-client-cache 0`); the 403 is the
/// shipped Role without `get` on Secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_resync_of_a_ready_runtime_waits_for_the_grace_before_it_is_written() {
    const GRACE: Duration = Duration::from_secs(3);
    let env = turn().await;
    let name = "f-forbidden";
    let rules = env.role_rules(ROLE).await;
    let without_get = role_without(&env, "secrets", &["get"]).await;
    let phrase = secret_get().forbidden_phrase();
    // A burst shorter than the grace (60 s): two failed resyncs, nothing written.
    let run = Run::start_with(&env, &resync_flags("60")).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    run.settle(name).await;
    let writes_before = run.metric("kim_controller_status_writes_total").await;
    let errors_before = run.metric("kim_controller_reconcile_errors_total").await;
    env.set_role_rules(ROLE, &without_get).await;
    env.wait_access(&secret_get(), false).await;
    run.metric_reaches(
        "kim_controller_reconcile_errors_total",
        "two forbidden resyncs",
        |v| v >= errors_before + 2.0,
    )
    .await;
    assert!(
        log_lines(&run.controller.stdout())
            .iter()
            .any(|l| l.contains(&phrase)),
        "the controller met the 403 ({phrase})\n{}",
        run.context()
    );
    env.set_role_rules(ROLE, &rules).await;
    env.wait_access(&secret_get(), true).await;
    let reconciles = run.metric("kim_controller_reconciles_total").await;
    run.metric_reaches(
        "kim_controller_reconciles_total",
        "two reconciles after the 403s",
        |v| v >= reconciles + 2.0,
    )
    .await;
    run.settle(name).await;
    let versions = run.versions_since(name, ready_at).await;
    assert!(
        versions.iter().all(|o| is(o, State::Ready)),
        "a 403 of a Ready Runtime's resync was written at once: {:#?}",
        shorts(&writes(&versions))
    );
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        writes_before,
        "no status write"
    );
    run.stop(true).await;
    // A 403 that lasts past the grace (3 s) is reported.
    let run = Run::start_with(&env, &resync_flags("3")).await;
    run.settle(name).await;
    let ready_at = run.runtimes.len() - 1;
    let start = Instant::now();
    env.set_role_rules(ROLE, &without_get).await;
    let reported =
        lasting_error_is_reported(&run, name, ready_at, start, GRACE, Restore(&env, rules)).await;
    println!(
        "lasting 403 of a Ready Runtime: reported after {:.1} s (grace {GRACE:?})",
        reported.as_secs_f64()
    );
    run.finish(&[name]).await;
}

/// The controller's first list of Shoots fails (started while gardener-apiserver is down: the
/// aggregator answers 503), and its first list of Runtimes fails (the Role without `list` on
/// Runtimes, nor `watch`, which a streaming first list is: 403): each is retried with backoff and the Runtime is provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_initial_list_is_retried() {
    let env = turn().await;
    // Shoots.
    let name = "f-list-shoots";
    let mut down = GardenerDown::kill(&env);
    let mut run = Run::start(&env).await;
    run.controller
        .wait_output(LIMIT, |out, _| {
            (failed_watches(out, "Shoots") >= 1).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("a failed Shoot list: {e}"));
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let took = down.start();
    println!("gardener-apiserver back after {took:?}");
    run.ready(name, 0).await;
    run.finish(&[name]).await;
    // Runtimes.
    let name = "f-list-rts";
    let rules = env.role_rules(ROLE).await;
    // With streaming lists the first list is a watch (`sendInitialEvents`): both refused.
    env.set_role_rules(
        ROLE,
        &role_without(&env, "runtimes", &["list", "watch"]).await,
    )
    .await;
    env.wait_access(&runtime_list(), false).await;
    env.wait_access(
        &Access {
            verb: "watch",
            ..runtime_list()
        },
        false,
    )
    .await;
    let mut run = Run::start(&env).await;
    run.controller
        .wait_output(LIMIT, |out, _| {
            (failed_watches(out, "Runtimes") >= 1).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("a failed Runtime list: {e}"));
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    env.set_role_rules(ROLE, &rules).await;
    env.wait_access(&runtime_list(), true).await;
    run.ready(name, 0).await;
    run.finish(&[name]).await;
}

/// The controller's own pre-write check (`kim::reconciler::status::check`, the webhook's
/// evaluation run before every status write): a Runtime whose stored status is `Terminating`
/// although it is not being deleted (written by the admin while kim's webhook configurations
/// were removed) can only get writes the model denies. The controller sends none of them: no
/// status write reaches kube-apiserver (kim's webhooks judge none), the stored status stays,
/// each denial is counted (`kim_controller_status_denied_total`, reconcile errors of kind
/// `denied`) and the Runtime gets a Warning Event `StatusWriteDenied` naming the broken rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_model_denies_is_never_sent() {
    let env = turn().await;
    let name = DENIED;
    let admin = env.stack.cp.admin().await;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let config_name = "kim-runtime-status";
    let mut v = validating
        .get(config_name)
        .await
        .expect("kim's validating webhook");
    let mut m = mutating
        .get(config_name)
        .await
        .expect("kim's mutating webhook");
    for meta in [&mut v.metadata, &mut m.metadata] {
        *meta = kube::api::ObjectMeta {
            name: meta.name.clone(),
            labels: meta.labels.clone(),
            ..Default::default()
        };
    }
    validating
        .delete(config_name, &DeleteParams::default())
        .await
        .expect("remove kim's validating webhook");
    mutating
        .delete(config_name, &DeleteParams::default())
        .await
        .expect("remove kim's mutating webhook");
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let status = json!({
        "state": State::Terminating.as_str(),
        "conditions": [{
            "type": types::DEPROVISIONED, "status": CondStatus::Unknown.as_str(),
            "reason": reasons::GARDENER_SHOOT_DELETED,
            "message": "deleting", "lastTransitionTime": "2026-11-02T00:00:10Z",
            "observedGeneration": 1
        }]
    });
    let runtimes = env.runtimes().await;
    // kube-apiserver drops the configurations from its cache a moment after their deletion.
    let stored = crate::support::eventually(LIMIT, || {
        let (runtimes, status) = (runtimes.clone(), status.clone());
        async move {
            runtimes
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
                .ok()
        }
    })
    .await
    .expect("the status stored past admission");
    assert_eq!(stored.data["status"]["state"], State::Terminating.as_str());
    validating
        .create(&PostParams::default(), &v)
        .await
        .expect("restore kim's validating webhook");
    mutating
        .create(&PostParams::default(), &m)
        .await
        .expect("restore kim's mutating webhook");
    env.stack.wait_until_judged().await;
    let reviews_before = reviews(&env).await;
    let run = Run::start(&env).await;
    let addr = run.metrics_addr.clone();
    let denied_errors = || {
        let addr = addr.clone();
        async move {
            let text = reqwest::get(format!("http://{addr}/metrics"))
                .await
                .expect("scrape")
                .text()
                .await
                .expect("metrics");
            sum_samples(&text, "kim_controller_reconcile_errors_total", |l| {
                l.contains("kind=\"denied\"")
            })
        }
    };
    // A denial is counted when the write is refused, its reconcile's error when the reconcile
    // returns: both are waited for.
    run.metric_reaches(
        "kim_controller_status_denied_total",
        "two denied status writes",
        |v| v >= 2.0,
    )
    .await;
    let errors = crate::support::eventually(LIMIT, || {
        let f = denied_errors();
        async move { Some(f.await).filter(|v| *v >= 2.0) }
    })
    .await;
    assert!(
        errors.is_some(),
        "two reconciles failed by the denials\n{}",
        run.context()
    );
    wait_event(
        &env,
        name,
        "Warning",
        "StatusWriteDenied",
        "[transition] status.state: transition Terminating -> Pending",
    )
    .await;
    assert_eq!(
        run.metric("kim_controller_status_writes_total").await,
        0.0,
        "no status write sent"
    );
    assert_eq!(
        reviews(&env).await,
        reviews_before,
        "no status write reached kube-apiserver (kim's webhooks judged one)"
    );
    let now = run
        .versions_since(name, 0)
        .await
        .pop()
        .expect("the Runtime");
    assert_eq!(
        now.data["status"], stored.data["status"],
        "the stored status stays"
    );
    run.stop(false).await;
    remove_denied(&env).await;
}

/// The Runtime of [`a_status_the_model_denies_is_never_sent`] (no controller can delete it:
/// every status it would write is denied) and its Shoot, if any, deleted as the admin.
const DENIED: &str = "f-denied";

async fn remove_denied(env: &RealEnv) {
    env.force_delete(DENIED).await;
    if env.shoot(DENIED).await.is_some() {
        let shoots = env.shoots().await;
        let confirm =
            json!({"metadata": {"annotations": {testenv::gardener::CONFIRM_DELETION: "true"}}});
        shoots
            .patch(DENIED, &PatchParams::default(), &Patch::Merge(&confirm))
            .await
            .expect("confirm the Shoot's deletion");
        shoots
            .delete(DENIED, &DeleteParams::default())
            .await
            .expect("delete the Shoot");
    }
}

/// Every answer kim's webhook process gave so far (`/validate` and `/mutate`).
async fn reviews(env: &RealEnv) -> u64 {
    let mut n = 0;
    for (path, decision) in [
        ("/validate", "allowed"),
        ("/validate", "denied"),
        ("/mutate", "allowed"),
        ("/mutate", "denied"),
    ] {
        n += webhook_count(env, path, decision).await;
    }
    n
}

/// Creates a Runtime `name` from `aws-trial.yaml` without `spec` (the CRD, like KIM's, does
/// not require one), with runtime ID `runtime_id`.
async fn create_without_spec(env: &RealEnv, name: &str, runtime_id: &str) {
    env.stack
        .create_sample("aws-trial.yaml", name, |obj| {
            obj.as_object_mut().unwrap().remove("spec");
            obj["metadata"]["labels"][kim::api::LABEL_RUNTIME_ID] = json!(runtime_id);
        })
        .await;
}

/// A Runtime without `spec` stored next to a good Runtime: the good one is provisioned; the one
/// without spec is `Failed` with `Provisioned=False/ConversionErr` naming the missing field (and
/// a Warning Event) in one write, gets no Shoot, is never given a spec, and is released when
/// deleted; the good one's Shoot stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_spec_fails_alone_and_is_released() {
    let env = turn().await;
    let (good, bare) = ("f-good", "f-nospec");
    let run = Run::start(&env).await;
    create_without_spec(&env, bare, bare).await;
    create(&env, "aws-minimal.yaml", good, |_| {}).await;
    let (ready_at, _) = run.ready(good, 0).await;
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    let (_, failed) = run
        .version(bare, 0, "Failed with ConversionErr", |o| {
            is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
        })
        .await;
    let text = message(&failed, conversion.0);
    assert!(
        text.contains("spec") && text.contains("required"),
        "the message names the missing field: {text}"
    );
    wait_event(&env, bare, "Warning", conversion.1, "").await;
    let versions = run.versions_since(bare, 0).await;
    assert!(
        versions.iter().all(|o| o.data.get("spec").is_none()),
        "the controller's writes give it no spec"
    );
    assert_eq!(
        shorts(&writes(&versions)),
        [w(State::Failed, &[(conversion, CondStatus::False)], None)]
    );
    assert!(
        env.shoot(bare).await.is_none(),
        "no Shoot for the Runtime without spec"
    );
    run.delete(bare).await;
    let shoot = env
        .shoot(good)
        .await
        .expect("the good Runtime's Shoot stays");
    assert!(shoot.metadata.deletion_timestamp.is_none());
    let since = run.versions_since(good, ready_at).await;
    assert!(
        since.iter().all(|o| is(o, State::Ready)),
        "{:#?}",
        shorts(&since)
    );
    run.finish(&[good]).await;
}

/// A provisioned Runtime whose spec is removed (the CRD allows it) is `Failed` with
/// `Provisioned=False/ConversionErr`, its Shoot kept; deleting it then deletes the Shoot it no
/// longer names (found by the runtime ID), the kubeconfig Secret and the
/// structured-authentication ConfigMap: nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_whose_spec_is_removed_fails_and_its_deletion_leaves_nothing() {
    let env = turn().await;
    let name = "f-specgone";
    let run = Run::start(&env).await;
    create(&env, "aws.yaml", name, |o| {
        o["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.5");
    })
    .await;
    run.ready(name, 0).await;
    let config_maps = garden_config_maps(&env).await;
    let secrets = secrets(&env).await;
    assert!(
        config_maps
            .get_opt(&structured_auth_config_map(name))
            .await
            .unwrap()
            .is_some()
    );
    assert!(secrets.get_opt(&secret_name(name)).await.unwrap().is_some());
    let remove = json!([{"op": "remove", "path": "/spec"}]);
    env.runtimes()
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
        )
        .await
        .expect("remove the spec");
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    run.version(name, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    let shoot = env.shoot(name).await.expect("the Shoot is kept");
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "the Shoot is kept"
    );
    run.delete(name).await;
    assert!(env.shoot(name).await.is_none(), "no Shoot left");
    assert!(
        secrets.get_opt(&secret_name(name)).await.unwrap().is_none(),
        "no kubeconfig Secret left"
    );
    assert!(
        config_maps
            .get_opt(&structured_auth_config_map(name))
            .await
            .unwrap()
            .is_none(),
        "no structured-authentication ConfigMap left"
    );
    run.finish(&[]).await;
}

/// Deleting a Runtime without spec never deletes a Shoot another Runtime names, even one that
/// carries the same runtime ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_runtime_without_spec_spares_the_shoot_another_runtime_names() {
    let env = turn().await;
    let (name, bare) = ("f-spared", "f-spared-nospec");
    let run = Run::start(&env).await;
    create(&env, "aws-minimal.yaml", name, |_| {}).await;
    let (ready_at, _) = run.ready(name, 0).await;
    create_without_spec(&env, bare, name).await;
    let conversion = row(types::PROVISIONED, reasons::CONVERSION_ERR);
    run.version(bare, 0, "Failed with ConversionErr", |o| {
        is(o, State::Failed) && has_condition(o, conversion, CondStatus::False)
    })
    .await;
    run.delete(bare).await;
    let shoot = env.shoot(name).await.expect("the other Runtime's Shoot");
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "not being deleted: {:?}",
        shoot.metadata
    );
    let since = run.versions_since(name, ready_at).await;
    assert!(
        since.iter().all(|o| is(o, State::Ready)),
        "{:#?}",
        shorts(&since)
    );
    run.finish(&[name]).await;
}
