//! Gardener's failures on the REAL Gardener API ([`crate::support::real_controller::RealEnv`]:
//! gardener-apiserver, the simulated gardenlet's scripted outcomes, real runtime clusters), as
//! the controller meets them:
//!
//! - a `Create` that fails with a retryable code (`ERR_INFRA_QUOTA_EXCEEDED`): the controller
//!   keeps the Runtime `Pending` and annotates the Shoot `gardener.cloud/operation: retry`,
//!   which gardener-apiserver turns into the Shoot's generation 2; the gardenlet creates it
//!   again and the Runtime becomes `Ready`;
//! - a `Create` that fails with a terminal code (`ERR_INFRA_UNAUTHORIZED`): the Runtime is
//!   `Failed` with Gardener's description, and the Shoot is not retried;
//! - a `Create` that ends in `Error` (Gardener retries it on its own): `Ready` without the
//!   controller asking for anything;
//! - the Events a user acts on: `Ready` for the two that made it, `Failed` and the condition
//!   that turned `False` (`CreationErr`) for the terminal one, each a `Warning`; no status
//!   write of the controller denied by the model.

use crate::support::real::NS;
use crate::support::real_controller::{LIMIT, RealEnv};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::runtime::conditions::is_deleted;
use serde_json::json;
use std::time::Instant;
use testenv::gardener::{Outcome, ShootScript};
use testenv::gardenlet::{Clusters, Event, Operation};

fn state_is(state: &'static str) -> impl Fn(Option<&DynamicObject>) -> bool {
    move |o| o.is_some_and(|o| o.data["status"]["state"] == state)
}

/// Whether the controller's JSON log `out` says it asked Gardener to retry the operation of
/// Runtime `kcp-system/<name>`.
fn asked_retry(out: &str, name: &str) -> bool {
    let runtime = format!("kcp-system/{name}");
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|l| {
            l["message"] == "asked Gardener to retry the failed operation"
                && l["runtime"] == runtime.as_str()
        })
}

/// The operations the gardenlet ran for `shoot`: starts and ends, in order.
fn operations(env: &RealEnv, shoot: &str) -> Vec<Event> {
    env.gardenlet
        .history()
        .of(shoot)
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                Event::Started(_) | Event::Ended(..) | Event::Succeeded(_)
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_failures_are_retried_or_final_as_their_codes_say() {
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(1)).await;
    let quota = Outcome::failed(&["ERR_INFRA_QUOTA_EXCEEDED"]);
    let unauthorized = Outcome::failed(&["ERR_INFRA_UNAUTHORIZED"]);
    let throttled = Outcome::error(&["ERR_INFRA_RATE_LIMITS_EXCEEDED"]);
    env.gardenlet
        .set_script("quota", ShootScript::default().then_create(quota.clone()));
    env.gardenlet.set_script(
        "unauth",
        ShootScript::default().then_create(unauthorized.clone()),
    );
    env.gardenlet.set_script(
        "throttled",
        ShootScript::default().then_create(throttled.clone()),
    );
    let mut controller = env.spawn_controller("info,kim=debug");
    controller
        .logged("metrics_addr", LIMIT)
        .await
        .unwrap_or_else(|e| panic!("kim controller: {e}"));
    for name in ["quota", "unauth", "throttled"] {
        env.create_runtime(name).await;
    }

    // ---- retryable: the controller's retry annotation, Gardener's new generation ----
    env.wait_runtime("quota", "Ready", state_is("Ready"), &controller)
        .await;
    assert_eq!(
        operations(&env, "quota"),
        [
            Event::Started(Operation::Create),
            Event::Ended(Operation::Create, quota),
            Event::Started(Operation::Create),
            Event::Succeeded(Operation::Create),
        ]
    );
    let shoot = env.shoot("quota").await.expect("the Shoot");
    assert_eq!(
        shoot.metadata.generation,
        Some(2),
        "gardener-apiserver turned the controller's retry annotation into a generation"
    );
    assert_eq!(shoot.data["status"]["observedGeneration"], json!(2));
    assert!(
        asked_retry(&controller.stdout(), "quota"),
        "the controller asked for the retry"
    );

    // ---- Error: retried by Gardener alone ----
    env.wait_runtime("throttled", "Ready", state_is("Ready"), &controller)
        .await;
    assert_eq!(
        operations(&env, "throttled"),
        [
            Event::Started(Operation::Create),
            Event::Ended(Operation::Create, throttled),
            Event::Started(Operation::Create),
            Event::Succeeded(Operation::Create),
        ]
    );
    assert_eq!(
        env.shoot("throttled")
            .await
            .expect("the Shoot")
            .metadata
            .generation,
        Some(1),
        "nobody asked for a retry"
    );

    // ---- terminal: Failed, and the Shoot left alone ----
    let failed = env
        .wait_runtime("unauth", "Failed", state_is("Failed"), &controller)
        .await
        .expect("the Runtime");
    let message = failed.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("ERR_INFRA_UNAUTHORIZED"),
        "Gardener's description in the condition: {message:?}"
    );
    let shoot = env.shoot("unauth").await.expect("the Shoot");
    assert_eq!(shoot.metadata.generation, Some(1), "no retry asked for");
    assert_eq!(
        shoot.data["status"]["lastErrors"][0]["codes"],
        json!(["ERR_INFRA_UNAUTHORIZED"])
    );

    // ---- the Events a user acts on: Ready for the two that made it; Failed and the
    // condition that turned False for the terminal one ----
    let events: Api<K8sEvent> = Api::namespaced(env.stack.cp.admin().await, NS);
    let wanted = [
        ("quota", "Normal", "Ready"),
        ("throttled", "Normal", "Ready"),
        ("unauth", "Warning", "Failed"),
        ("unauth", "Warning", "CreationErr"),
    ];
    let seen = crate::support::eventually(LIMIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let has = |(name, type_, reason): (&str, &str, &str)| {
                list.items.iter().any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.type_.as_deref() == Some(type_)
                        && e.reason.as_deref() == Some(reason)
                })
            };
            wanted.into_iter().all(has).then_some(list.items)
        }
    })
    .await;
    assert!(seen.is_some(), "the Events {wanted:?} within {LIMIT:?}");

    // ---- all deleted through Gardener ----
    let api = env.runtimes().await;
    for name in ["quota", "unauth", "throttled"] {
        let uid = api
            .get(name)
            .await
            .expect("the Runtime")
            .metadata
            .uid
            .expect("uid");
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete the Runtime");
        env.wait_runtime(name, "gone", is_deleted(&uid), &controller)
            .await;
        assert!(env.shoot(name).await.is_none(), "the Shoot {name} is gone");
    }
    let (out, err) = controller.terminate(std::time::Duration::from_secs(20));
    for needle in ["status write denied", "StatusWriteDenied"] {
        assert!(
            !out.contains(needle) && !err.contains(needle),
            "the controller logged {needle:?}:\n{out}\n{err}"
        );
    }
    assert!(
        !asked_retry(&out, "unauth"),
        "no retry of the terminal failure"
    );
    assert!(!asked_retry(&out, "throttled"), "no retry of an Error");
    eprintln!(
        "real Gardener failures: retried, Error and terminal Runtimes settled and deleted in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
