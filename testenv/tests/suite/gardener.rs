//! The simulated Gardener, driven step by step, observed through `kube::Api` and a watcher.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use serde_json::{Value, json};
use support::{code, shoot, shoots, status};
use testenv::{
    ServerConfig, ServerHandle,
    gardener::{GardenerConfig, GardenerSim, Outcome, ShootScript},
};

const NS: &str = "garden-kyma";

async fn setup(config: GardenerConfig) -> (ServerHandle, GardenerSim, Api<DynamicObject>) {
    let server = testenv::start(ServerConfig::default()).await.unwrap();
    let sim = GardenerSim::new(&server, config);
    let api = shoots(&server.client(), NS);
    (server, sim, api)
}

async fn create(api: &Api<DynamicObject>, name: &str) -> DynamicObject {
    api.create(
        &PostParams::default(),
        &shoot(name, NS, json!({"spec": {"region": "eu-west-1"}})),
    )
    .await
    .unwrap()
}

async fn last_op(api: &Api<DynamicObject>, name: &str) -> (String, String, i64) {
    let s = api.get(name).await.unwrap();
    let lo = &s.data["status"]["lastOperation"];
    (
        lo["type"].as_str().unwrap().to_string(),
        lo["state"].as_str().unwrap().to_string(),
        lo["progress"].as_i64().unwrap(),
    )
}

fn op(t: &str, s: &str, p: i64) -> (String, String, i64) {
    (t.to_string(), s.to_string(), p)
}

#[tokio::test]
async fn create_progresses_to_succeeded() {
    let (_server, sim, api) = setup(GardenerConfig::default()).await;
    let created = create(&api, "s1").await;
    assert_eq!(
        created.finalizers(),
        ["gardener"],
        "finalizer added on create"
    );

    let t0 = sim.now();
    assert_eq!(sim.step(), 1);
    assert_eq!(last_op(&api, "s1").await, op("Create", "Processing", 0));
    sim.step();
    assert_eq!(last_op(&api, "s1").await, op("Create", "Processing", 33));
    sim.step();
    assert_eq!(last_op(&api, "s1").await, op("Create", "Processing", 66));
    sim.step();
    assert_eq!(last_op(&api, "s1").await, op("Create", "Succeeded", 100));
    let s = api.get("s1").await.unwrap();
    assert_eq!(s.data["status"]["observedGeneration"], 1);
    let updated = s.data["status"]["lastOperation"]["lastUpdateTime"]
        .as_str()
        .unwrap();
    let expected = t0 + chrono::Duration::seconds(4 * 30);
    assert_eq!(updated, expected.format("%Y-%m-%dT%H:%M:%SZ").to_string());
    // nothing left to do
    assert_eq!(sim.step(), 0);

    // a spec change → Reconcile
    api.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"region": "eu-west-2"}})),
    )
    .await
    .unwrap();
    sim.step();
    assert_eq!(last_op(&api, "s1").await, op("Reconcile", "Processing", 0));
    assert_eq!(
        api.get("s1").await.unwrap().data["status"]["observedGeneration"],
        2
    );
    assert_eq!(sim.settle(10), 4);
    assert_eq!(last_op(&api, "s1").await, op("Reconcile", "Succeeded", 100));
}

#[tokio::test]
async fn failures_carry_error_codes() {
    let (_server, sim, api) = setup(GardenerConfig {
        steps: 1,
        ..Default::default()
    })
    .await;
    sim.set_script(
        "bad",
        ShootScript::create_fails(&["ERR_INFRA_UNAUTHORIZED"]),
    );
    sim.set_script(
        "quota",
        ShootScript::default().then_create(Outcome::error(&["ERR_INFRA_QUOTA_EXCEEDED"])),
    );
    create(&api, "bad").await;
    create(&api, "quota").await;
    create(&api, "good").await;
    sim.advance(2);
    assert_eq!(last_op(&api, "good").await, op("Create", "Succeeded", 100));
    assert_eq!(last_op(&api, "bad").await, op("Create", "Failed", 0));
    assert_eq!(last_op(&api, "quota").await, op("Create", "Error", 0));
    let bad = api.get("bad").await.unwrap();
    assert_eq!(
        bad.data["status"]["lastErrors"][0]["codes"],
        json!(["ERR_INFRA_UNAUTHORIZED"])
    );
    let quota = api.get("quota").await.unwrap();
    assert_eq!(
        quota.data["status"]["lastErrors"][0]["codes"],
        json!(["ERR_INFRA_QUOTA_EXCEEDED"])
    );

    // Error is retried by itself; Failed stays failed
    sim.advance(2);
    assert_eq!(last_op(&api, "quota").await, op("Create", "Succeeded", 100));
    assert!(
        api.get("quota").await.unwrap().data["status"]
            .get("lastErrors")
            .is_none()
    );
    assert_eq!(last_op(&api, "bad").await, op("Create", "Failed", 0));

    // a fixed spec retries the failed Create (still type Create: it never succeeded)
    api.patch(
        "bad",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"secretBindingName": "fixed"}})),
    )
    .await
    .unwrap();
    sim.step();
    assert_eq!(last_op(&api, "bad").await, op("Create", "Processing", 0));
    sim.step();
    assert_eq!(last_op(&api, "bad").await, op("Create", "Succeeded", 100));

    // the retry annotation restarts a failed operation too
    sim.set_script(
        "good",
        ShootScript::default().then_reconcile(Outcome::failed(&["ERR_CONFIGURATION_PROBLEM"])),
    );
    api.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"x": 1}})),
    )
    .await
    .unwrap();
    sim.advance(2);
    assert_eq!(last_op(&api, "good").await, op("Reconcile", "Failed", 0));
    api.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"gardener.cloud/operation": "retry"}}})),
    )
    .await
    .unwrap();
    sim.step();
    let good = api.get("good").await.unwrap();
    assert_eq!(good.data["status"]["lastOperation"]["state"], "Processing");
    assert!(!good.annotations().contains_key("gardener.cloud/operation"));
    sim.step();
    assert_eq!(
        last_op(&api, "good").await,
        op("Reconcile", "Succeeded", 100)
    );
}

#[tokio::test]
async fn deletion_needs_confirmation_then_removes_the_shoot() {
    let (server, sim, api) = setup(GardenerConfig::default()).await;
    create(&api, "s1").await;
    sim.settle(10);

    let err = status(
        api.delete("s1", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert!(
        err.message
            .contains("must have a \"confirmation.gardener.cloud/deletion\" annotation"),
        "{}",
        err.message
    );
    api.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"confirmation.gardener.cloud/deletion": "true"}}}),
        ),
    )
    .await
    .unwrap();

    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut next = async || -> watcher::Event<DynamicObject> {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("event")
            .expect("open")
            .expect("ok")
    };
    assert!(matches!(next().await, watcher::Event::Init));
    assert!(matches!(next().await, watcher::Event::InitApply(_)));
    assert!(matches!(next().await, watcher::Event::InitDone));

    let deleted = api.delete("s1", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted
            .left()
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert!(matches!(next().await, watcher::Event::Apply(_)));
    sim.step();
    assert_eq!(last_op(&api, "s1").await, op("Delete", "Processing", 0));
    let mut states: Vec<Value> = Vec::new();
    for _ in 0..3 {
        sim.step();
    }
    loop {
        match next().await {
            watcher::Event::Apply(o) => {
                states.push(o.data["status"]["lastOperation"]["progress"].clone())
            }
            watcher::Event::Delete(o) => {
                assert_eq!(o.data["status"]["lastOperation"]["state"], "Succeeded");
                assert_eq!(o.data["status"]["lastOperation"]["type"], "Delete");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(states, [json!(0), json!(33), json!(66)]);
    assert_eq!(code(api.get("s1").await.unwrap_err()), 404);
    assert!(server.list(&testenv::Gvr::shoots(), None).is_empty());
}

#[tokio::test]
async fn run_every_steps_in_real_time() {
    let (_server, sim, api) = setup(GardenerConfig {
        steps: 2,
        ..Default::default()
    })
    .await;
    create(&api, "s1").await;
    let task = sim.run_every(Duration::from_millis(20));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if api.get("s1").await.unwrap().data["status"]["lastOperation"]["state"] == "Succeeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "shoot never succeeded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    assert!(sim.steps_taken() >= 3);
}
