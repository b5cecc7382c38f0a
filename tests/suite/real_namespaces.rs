//! The guard's scope on a real kube-apiserver: the shipped webhook configurations
//! (`manifests/base`, pointed at a real `kim webhook`) and, alone, the shipped
//! ValidatingAdmissionPolicy (`manifests/overlays/policy`, no webhook) judge `runtimes/status`
//! writes in every namespace, not only in the Runtime namespace of the shipped RBAC. In each of
//! `kcp-system`, the cluster's own `default` and a namespace created only after the guard took
//! effect, a Runtime's illegal transition (∅ → Ready) and unknown reason are refused by the
//! guard under test, and a legal first status (Pending) is stored, so that refusing everything
//! cannot pass.

use crate::support::real::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testenv::controlplane::{ControlPlane, WebhookCerts};

/// A namespace every kube-apiserver creates itself: no one installs Runtimes there on purpose.
const SERVER_NS: &str = "default";
/// `lastTransitionTime` of the conditions written where no webhook defaults it.
const LTT: &str = "2026-01-01T00:00:00Z";

/// Which guard is installed, and how its denials read.
#[derive(Clone, Copy, Debug)]
enum Guard {
    /// kim's webhooks: the mutating one defaults `lastTransitionTime`, the validating one denies.
    Webhooks,
    /// The ValidatingAdmissionPolicy alone: no defaulting, so conditions are written whole.
    Policy,
}

impl Guard {
    /// Whether `message` (of a 403) is this guard's denial naming `rule`.
    fn denied(self, message: &str, rule: &str) -> bool {
        match self {
            Guard::Webhooks => {
                message.starts_with(&format!(
                    "admission webhook \"{VALIDATE_HOOK}\" denied the request: "
                )) && message.contains(&format!("[{rule}]"))
            }
            // The policy's message names the first failing rule only.
            Guard::Policy => message.contains(&format!(
                "is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: [{rule}]",
                name = kim::status::vap::DENY_NAME
            )),
        }
    }

    /// A condition as this guard needs it written: whole for the policy, without
    /// `lastTransitionTime` for the webhooks (their defaulting fills it in).
    fn cond(self, type_: &str, status: &str, reason: &str) -> Value {
        let mut c = json!({"type": type_, "status": status, "reason": reason, "message": "m"});
        if let Guard::Policy = self {
            c["lastTransitionTime"] = json!(LTT);
        }
        c
    }
}

/// The illegal status writes on a Runtime without status, each with the rule that refuses it.
fn illegal(guard: Guard) -> [(&'static str, Value, &'static str); 2] {
    [
        (
            "illegal transition ∅ -> Ready",
            json!({"status": {"state": "Ready", "conditions": [
                guard.cond("Provisioned", "True", "ShootCreationCompleted"),
                guard.cond("KubeconfigReady", "True", "KubeconfigCreated"),
                guard.cond("Configured", "True", "AdministratorsConfigured"),
            ]}}),
            "transition",
        ),
        (
            "unknown reason",
            json!({"status": {"state": "Pending", "conditions": [
                guard.cond("Provisioned", "Unknown", "NoSuchReason"),
            ]}}),
            "reason-unknown",
        ),
    ]
}

/// The legal first status: `Pending` with `Provisioned` Unknown/Pending.
fn legal(guard: Guard) -> Value {
    json!({"status": {"state": "Pending", "conditions": [
        guard.cond("Provisioned", "Unknown", "Pending"),
    ]}})
}

/// The Runtimes of `ns` as the cluster admin (`system:masters`, an allowed writer).
async fn runtimes(cp: &ControlPlane, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(cp.admin().await, ns, &runtime_resource())
}

/// Creates the sample `aws-minimal.yaml` as `name` in `ns`, without status.
async fn create_runtime(api: &Api<DynamicObject>, ns: &str, name: &str) {
    let text = std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml"))
        .expect("samples/runtimes/aws-minimal.yaml");
    let mut obj: Value = serde_saphyr::from_str(&text).expect("the sample parses");
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating Runtime {ns}/{name}: {e}"));
}

async fn stored(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get Runtime")).unwrap()
}

/// Waits (a watch, at most 60 s) until namespace `name` exists: kube-apiserver creates
/// `default` itself, shortly after it reports ready.
async fn wait_for_namespace(cp: &ControlPlane, name: &str) {
    let api: Api<Namespace> = Api::all(cp.admin().await);
    let exists =
        kube::runtime::wait::await_condition(api, name, |n: Option<&Namespace>| n.is_some());
    tokio::time::timeout(Duration::from_secs(60), exists)
        .await
        .unwrap_or_else(|_| panic!("namespace {name} does not exist after 60 s"))
        .expect("watch namespaces");
}

/// In each namespace of `namespaces`: creates a Runtime, sends each [`illegal`] write (each
/// must be `guard`'s 403 naming its rule, and store nothing), then the [`legal`] one (stored;
/// by the webhooks with `lastTransitionTime` defaulted). Returns one line per write.
async fn judge_in_every_namespace(
    cp: &ControlPlane,
    guard: Guard,
    namespaces: &[&str],
) -> Vec<String> {
    let name = "guarded";
    let pp = PatchParams::default();
    let mut report = Vec::new();
    for ns in namespaces {
        let api = runtimes(cp, ns).await;
        create_runtime(&api, ns, name).await;
        let created = stored(&api, name).await;
        for (what, status, rule) in illegal(guard) {
            let message = match api.patch_status(name, &pp, &Patch::Merge(&status)).await {
                Err(kube::Error::Api(s)) if s.code == 403 => s.message,
                other => panic!("{guard:?}, {ns}: {what} was not refused with 403: {other:?}"),
            };
            assert!(
                guard.denied(&message, rule),
                "{guard:?}, {ns}: {what} not refused by the guard with [{rule}]: {message}"
            );
            let now = stored(&api, name).await;
            assert_eq!(
                now["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
                "{guard:?}, {ns}: the refused {what} stored something"
            );
            assert!(now.get("status").is_none(), "{ns}: {}", now["status"]);
            report.push(format!("{ns}: {what}: refused [{rule}]"));
        }
        api.patch_status(name, &pp, &Patch::Merge(legal(guard)))
            .await
            .unwrap_or_else(|e| panic!("{guard:?}, {ns}: the legal first status was refused: {e}"));
        let now = stored(&api, name).await;
        assert_eq!(now["status"]["state"], "Pending", "{ns}: {}", now["status"]);
        let condition = &now["status"]["conditions"][0];
        assert_eq!(condition["reason"], "Pending", "{ns}: {condition}");
        match guard {
            // The mutating webhook answered too.
            Guard::Webhooks => assert!(
                condition["lastTransitionTime"].is_string(),
                "{ns}: lastTransitionTime not defaulted: {condition}"
            ),
            Guard::Policy => assert_eq!(condition["lastTransitionTime"], LTT, "{ns}"),
        }
        report.push(format!("{ns}: legal first status Pending: stored"));
    }
    report
}

/// `manifests/base` as shipped: the validating and the mutating webhook judge Runtime status
/// writes in `kcp-system`, in `default` and in a namespace created after they took effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_webhooks_guard_runtime_status_in_every_namespace() {
    // Returns once the validating webhook refused a write in kcp-system: the configurations,
    // which select no namespace, are in effect.
    let stack = Stack::start("base", &[]).await;
    wait_for_namespace(&stack.cp, SERVER_NS).await;
    let late = stack.cp.namespace("created-later").await;
    let report =
        judge_in_every_namespace(&stack.cp, Guard::Webhooks, &[NS, SERVER_NS, &late]).await;
    eprintln!("webhooks:\n{}", report.join("\n"));
}

/// `manifests/overlays/policy` alone (no webhook configuration, no kim process): kube-apiserver's
/// own ValidatingAdmissionPolicy judges Runtime status writes in `kcp-system`, in `default` and
/// in a namespace created after it took effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_policy_alone_guards_runtime_status_in_every_namespace() {
    let cp = ControlPlane::start().expect("control plane");
    cp.create_namespace(NS).await;
    let crd = std::fs::read_to_string(manifests("crd.yaml")).expect("manifests/crd.yaml");
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    // No webhook is configured: the address and CA are never used.
    let unused = WebhookCerts::generate();
    let installed = cp
        .install_kustomize(
            &manifests("overlays/policy"),
            "127.0.0.1:9".parse().unwrap(),
            &unused.ca_pem,
        )
        .await
        .expect("manifests/overlays/policy installs");
    let mut applied = installed.applied.clone();
    applied.sort();
    assert_eq!(
        applied,
        [
            format!("ValidatingAdmissionPolicy {}", kim::status::vap::DENY_NAME),
            format!(
                "ValidatingAdmissionPolicyBinding {}",
                kim::status::vap::DENY_NAME
            ),
        ],
        "the policy and its binding, nothing else"
    );
    assert!(installed.skipped.is_empty(), "{:?}", installed.skipped);

    // In effect once a first write of Ready (an illegal transition) on a fresh Runtime of
    // kcp-system is refused by the policy; one stored before is left behind.
    let api = runtimes(&cp, NS).await;
    let (_, ready_first, rule) = illegal(Guard::Policy).into_iter().next().unwrap();
    let started = Instant::now();
    for attempt in 0.. {
        let probe = format!("policy-probe-{attempt}");
        create_runtime(&api, NS, &probe).await;
        let answer = api
            .patch_status(&probe, &PatchParams::default(), &Patch::Merge(&ready_first))
            .await;
        let last = match answer {
            Err(kube::Error::Api(s)) if Guard::Policy.denied(&s.message, rule) => break,
            other => format!("{other:?}"),
        };
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the policy is not in effect after 30 s; last answer: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_namespace(&cp, SERVER_NS).await;
    let late = cp.namespace("created-later").await;
    let report = judge_in_every_namespace(&cp, Guard::Policy, &[NS, SERVER_NS, &late]).await;
    eprintln!("policy alone:\n{}", report.join("\n"));
}
