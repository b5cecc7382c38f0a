//! End to end: the real `kim webhook` (certificates from `certs/gen-certs.sh`, configured from
//! the static-ca overlay of `manifests/`) and the real `kim controller` binary against the
//! in-memory control cluster, Gardener (simulated) and runtime clusters. Every write to
//! `runtimes/status` goes through testenv's webhook stage, which calls the mutating and then
//! the validating webhook over HTTPS exactly as kube-apiserver does.
//!
//! The sample Runtimes are provisioned, updated and deleted; all the reconciler's status
//! writes pass both webhooks; a rogue client's illegal writes are denied with the
//! apiserver's 403 message; main-resource writes skip the webhooks.

use crate::support::reconciler;

use crate::support::e2e;

use e2e::*;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use reconciler::{CONTROLLER_USER, NS};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use testenv::Gvr;
use testenv::webhook_stage::{CallOutcome, StageResult, WebhookKind};

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

/// The Runtimes API of the control cluster as the holder of `token`.
fn api_as(e: &E2e, token: &str) -> Api<DynamicObject> {
    Api::namespaced_with(e.env.kcp.client_as(Some(token)), NS, &runtime_resource())
}

/// Expects a write to be denied by the validating webhook with the apiserver's 403 and
/// message; returns the message.
fn expect_denied<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{what}: {s:?}");
            let prefix = format!("admission webhook \"{VALIDATE_HOOK}\" denied the request: ");
            assert!(
                s.message.starts_with(&prefix),
                "{what}: apiserver-style message expected, got {:?}",
                s.message
            );
            s.message
        }
        other => panic!("{what}: expected a 403 denial, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_through_the_real_webhook_and_controller_with_a_rogue_client() {
    let started = Instant::now();
    let e = E2e::start().await;
    let rts = sample_runtimes("e2e");
    let names: Vec<String> = rts
        .iter()
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    e.runtime_clusters(&rts).await;
    let dir = tempfile::tempdir().unwrap();
    let mut controller = start_controller(&e.env, dir.path());
    let mut stepper = e.env.sim.run_every(Duration::from_millis(100));

    // ---- provisioning ----
    for rt in &rts {
        e.env.create(rt).await;
    }
    e.wait("every sample Ready", |s| {
        names.iter().all(|n| s.state(n) == Some("Ready"))
    })
    .await;
    let provisioned = Instant::now();

    // ---- update: worker maximum raised, an administrator added ----
    for n in &names {
        e.env
            .edit(n, |r| {
                r.spec.shoot.provider.workers[0].maximum += 5;
                r.spec
                    .security
                    .administrators
                    .push("second-admin@myorg.com".into());
            })
            .await;
    }
    e.wait("every sample Ready at generation 2", |s| {
        names.iter().all(|n| {
            s.runtime_json(n).is_some_and(|rt| {
                rt["status"]["state"] == "Ready"
                    && rt["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().all(|c| c["observedGeneration"] == 2))
            })
        })
    })
    .await;
    // A main-resource write (label) is not matched by the `runtimes/status` rules.
    let main_before = e.stage.log().len();
    e.env
        .edit(&names[0], |r| {
            r.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("e2e/touched".into(), "yes".into());
        })
        .await;

    // ---- the rogue client ----
    let rogue = api_as(&e, ROGUE_TOKEN);
    let impostor = api_as(&e, IMPOSTOR_TOKEN);
    let target = &names[1];
    let mut denied: Vec<(String, String)> = Vec::new();
    // 1. Another user rewriting a Ready status unchanged but for a message: not an allowed writer.
    let mut obj = rogue.get(target).await.unwrap();
    obj.data["status"]["conditions"][0]["message"] = json!("rogue was here");
    let msg = expect_denied(
        "write by a user not allowed",
        rogue
            .replace_status(target, &PostParams::default(), &obj)
            .await,
    );
    assert!(msg.contains(ROGUE_USER), "the writer is named: {msg}");
    denied.push(("user not allowed (PUT)".into(), msg));
    // 2. The same as a merge patch.
    let msg = expect_denied(
        "merge patch by a user not allowed",
        rogue
            .patch_status(
                target,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"state": "Pending"}})),
            )
            .await,
    );
    denied.push(("user not allowed (merge patch)".into(), msg));
    // 3. The controller's identity with a reason the model does not know.
    let mut obj = impostor.get(target).await.unwrap();
    obj.data["status"]["conditions"][0]["reason"] = json!("TotallyMadeUp");
    let msg = expect_denied(
        "unknown reason",
        impostor
            .replace_status(target, &PostParams::default(), &obj)
            .await,
    );
    assert!(msg.contains("TotallyMadeUp"), "{msg}");
    denied.push(("unknown reason".into(), msg));
    // 4. The controller's identity removing the status.
    let msg = expect_denied(
        "status removal",
        impostor
            .patch_status(
                target,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": null})),
            )
            .await,
    );
    denied.push(("status removal".into(), msg));
    // 5. Terminating -> Ready: hold a deletion in Terminating (Gardener not stepped), then try.
    stepper.abort();
    let _ = (&mut stepper).await;
    e.env.delete(target).await;
    e.wait("Terminating", |s| s.state(target) == Some("Terminating"))
        .await;
    let obj = impostor.get(target).await.unwrap();
    let mut ready_again = obj.clone();
    ready_again.data["status"]["state"] = json!("Ready");
    let msg = expect_denied(
        "Terminating -> Ready",
        impostor
            .replace_status(target, &PostParams::default(), &ready_again)
            .await,
    );
    assert!(msg.contains("Terminating -> Ready"), "{msg}");
    denied.push(("Terminating -> Ready".into(), msg));
    assert_eq!(
        e.env.state(target).as_deref(),
        Some("Terminating"),
        "nothing stored"
    );

    // ---- deletion of all ----
    let stepper = e.env.sim.run_every(Duration::from_millis(100));
    for n in names.iter().filter(|n| *n != target) {
        e.env.delete(n).await;
    }
    e.wait("every sample gone", |s| {
        names.iter().all(|n| s.runtime_json(n).is_none())
    })
    .await;
    stepper.abort();
    let (stdout, stderr) = controller.terminate(Duration::from_secs(20));

    // ---- what the webhooks saw ----
    let log = e.stage.log();
    let main_writes: Vec<_> = log[main_before..]
        .iter()
        .filter(|r| r.gvr == Gvr::runtimes() && r.subresource.is_none())
        .collect();
    assert!(!main_writes.is_empty(), "the label edit reached admission");
    for r in log.iter().filter(|r| r.subresource.is_none()) {
        assert_eq!(
            r.result,
            StageResult::NotMatched,
            "{} {}",
            r.operation,
            r.name
        );
        assert!(r.calls.is_empty());
    }
    let status: Vec<_> = log
        .iter()
        .filter(|r| r.gvr == Gvr::runtimes() && r.subresource.as_deref() == Some("status"))
        .collect();
    let controller_writes: Vec<_> = status
        .iter()
        .filter(|r| r.user == CONTROLLER_USER)
        .filter(|r| !matches!(r.result, StageResult::Rejected { .. }))
        .collect();
    let rejected: Vec<_> = status
        .iter()
        .filter(|r| matches!(r.result, StageResult::Rejected { .. }))
        .collect();
    assert_eq!(
        rejected.len(),
        denied.len(),
        "only the rogue writes were rejected: {:#?}\ncontroller stdout:\n{stdout}\nstderr:\n{stderr}",
        rejected
            .iter()
            .map(|r| (&r.user, &r.result))
            .collect::<Vec<_>>()
    );
    let mut uids = HashSet::new();
    for r in &status {
        assert_eq!(r.operation, "UPDATE");
        // Every status write went to the mutating webhook, then (unless that failed) to the
        // validating one; the denials all came from the validating webhook.
        assert_eq!(r.calls.len(), 2, "{:?}", r.calls);
        assert_eq!(r.calls[0].webhook, MUTATE_HOOK);
        assert_eq!(r.calls[0].kind, WebhookKind::Mutating);
        assert_eq!(r.calls[1].webhook, VALIDATE_HOOK);
        for c in &r.calls {
            assert!(uids.insert(c.uid.clone()), "fresh uid per call");
            assert!(
                c.url.starts_with("https://kim-webhook.kim-system.svc/"),
                "{}",
                c.url
            );
            assert!(c.url.ends_with("?timeout=5s"), "{}", c.url);
            let q = &c.review["request"];
            assert_eq!(c.review["apiVersion"], "admission.k8s.io/v1");
            assert_eq!(q["uid"], c.uid.as_str());
            assert_eq!(q["operation"], "UPDATE");
            assert_eq!(q["subResource"], "status");
            assert_eq!(q["requestSubResource"], "status");
            assert_eq!(
                q["resource"],
                json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"})
            );
            assert_eq!(q["requestResource"], q["resource"]);
            assert_eq!(
                q["kind"],
                json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"})
            );
            assert_eq!(q["namespace"], NS);
            assert_eq!(q["name"], r.name.as_str());
            assert_eq!(q["userInfo"]["username"], r.user.as_str());
            assert_eq!(q["options"]["kind"], "UpdateOptions");
            assert_eq!(q["dryRun"], false);
            assert!(q["oldObject"].is_object());
            assert!(c.response.is_some(), "answered: {:?}", c.outcome);
        }
    }
    for r in &controller_writes {
        assert!(
            matches!(r.calls[1].outcome, CallOutcome::Allowed { .. }),
            "{:?}",
            r.calls[1].outcome
        );
    }
    // The webhook's own counters agree with the stage's log.
    let validate_allowed = status
        .iter()
        .filter(|r| matches!(r.calls[1].outcome, CallOutcome::Allowed { .. }))
        .count() as u64;
    let validate_denied = status
        .iter()
        .filter(|r| matches!(r.calls[1].outcome, CallOutcome::Denied { .. }))
        .count() as u64;
    assert_eq!(
        e.webhook.count("/validate", "allowed").await,
        validate_allowed
    );
    assert_eq!(
        e.webhook.count("/validate", "denied").await,
        validate_denied
    );
    assert_eq!(
        e.webhook.count("/mutate", "allowed").await,
        status.len() as u64,
        "one /mutate call per status write"
    );
    let metrics = e.webhook.requests().await;
    assert_eq!(
        metrics
            .get(&("/validate".into(), "denied".into(), 403))
            .copied(),
        Some(denied.len() as u64),
        "{metrics:?}"
    );
    let patched = status
        .iter()
        .filter(|r| matches!(r.calls[0].outcome, CallOutcome::Allowed { patch: Some(_) }))
        .count();
    assert_eq!(patched, 0, "the reconciler writes complete conditions");
    let mut per_runtime: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &controller_writes {
        *per_runtime.entry(r.name.as_str()).or_default() += 1;
    }
    let states: HashSet<String> = e.env.writes().iter().map(|w| w.state.clone()).collect();
    assert!(!states.contains("Failed"), "never Failed: {states:?}");
    eprintln!(
        "e2e: {} samples provisioned in {:.1} s, updated and deleted; {} status writes by the \
         reconciler admitted ({per_runtime:?}), {} rogue writes denied, {} main-resource writes \
         not matched; webhook calls: {} (/mutate {}, /validate {} allowed + {} denied); {:.1} s in all",
        names.len(),
        (provisioned - started).as_secs_f64(),
        controller_writes.len(),
        denied.len(),
        log.iter().filter(|r| r.subresource.is_none()).count(),
        status.len() * 2,
        status.len(),
        validate_allowed,
        validate_denied,
        started.elapsed().as_secs_f64()
    );
    for (what, msg) in &denied {
        eprintln!("  denied: {what}: 403 {msg}");
    }
}
