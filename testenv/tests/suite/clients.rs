//! What generic clients send and read beyond what kube-rs needs, over real HTTP: the core/v1
//! view of `events.k8s.io/v1` Events and YAML apply bodies.

use std::time::Duration;

use crate::support::code;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::{Gvr, ServerConfig};

async fn server() -> testenv::ServerHandle {
    testenv::start(ServerConfig::default())
        .await
        .expect("server")
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn events_api(client: &kube::Client, group: &str) -> Api<DynamicObject> {
    let gvk = if group.is_empty() {
        GroupVersionKind::gvk("", "v1", "Event")
    } else {
        GroupVersionKind::gvk(group, "v1", "Event")
    };
    Api::namespaced_with(
        client.clone(),
        "kcp-system",
        &ApiResource::from_gvk_with_plural(&gvk, "events"),
    )
}

#[tokio::test]
async fn core_events_are_a_view_of_events_k8s_io() {
    let s = server().await;
    let client = s.client();
    let new_api = events_api(&client, "events.k8s.io");
    let core_api = events_api(&client, "");
    let mut watch = core_api
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let ev: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "kcp-system"},
        "eventTime": "2026-11-30T10:00:00.000000Z", "reportingController": "kim-controller",
        "reportingInstance": "kim-1", "action": "Provision", "reason": "ShootCreated",
        "type": "Normal", "note": "created", "deprecatedCount": 2,
        "regarding": {"kind": "Runtime", "name": "r1", "namespace": "kcp-system"},
    }))
    .unwrap();
    new_api.create(&PostParams::default(), &ev).await.unwrap();

    let listed = core_api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let core = &listed.items[0].data;
    assert_eq!(core["message"], "created");
    assert_eq!(core["involvedObject"]["name"], "r1");
    assert_eq!(core["reportingComponent"], "kim-controller");
    assert_eq!(core["count"], 2);
    assert!(core.get("note").is_none() && core.get("regarding").is_none());
    // Field selectors see the view's fields.
    let sel = ListParams::default().fields("involvedObject.kind=Runtime,involvedObject.name=r1");
    assert_eq!(core_api.list(&sel).await.unwrap().items.len(), 1);
    let sel = ListParams::default().fields("involvedObject.name=r2");
    assert_eq!(core_api.list(&sel).await.unwrap().items.len(), 0);
    match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Added(o)))) => assert_eq!(o.data["message"], "created"),
        other => panic!("expected ADDED through the view, got {other:?}"),
    }

    // Written through the view, stored (and read back) as events.k8s.io.
    let ev2: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e2", "namespace": "kcp-system"},
        "message": "by core", "reason": "R", "type": "Warning",
        "involvedObject": {"kind": "Runtime", "name": "r2"},
    }))
    .unwrap();
    let created = core_api.create(&PostParams::default(), &ev2).await.unwrap();
    assert_eq!(created.data["message"], "by core");
    let stored = new_api.get("e2").await.unwrap();
    assert_eq!(stored.data["note"], "by core");
    assert_eq!(stored.data["regarding"]["name"], "r2");
    assert_eq!(
        s.get(&Gvr::new("", "v1", "events"), Some("kcp-system"), "e2")
            .unwrap()["message"],
        "by core"
    );
    // A merge patch through the view changes the stored field.
    core_api
        .patch(
            "e2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"message": "patched"})),
        )
        .await
        .unwrap();
    assert_eq!(new_api.get("e2").await.unwrap().data["note"], "patched");
    assert_eq!(code(core_api.get("e3").await.unwrap_err()), 404);
}

#[tokio::test]
async fn apply_accepts_yaml_bodies() {
    let s = server().await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\n  namespace: kcp-system\ndata:\n  a: \"1\"\n";
    let url = format!(
        "{}/api/v1/namespaces/kcp-system/configmaps/c1?fieldManager=me",
        s.url()
    );
    let resp = http()
        .patch(&url)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(yaml)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let stored = s
        .get(&Gvr::new("", "v1", "configmaps"), Some("kcp-system"), "c1")
        .unwrap();
    assert_eq!(stored["data"]["a"], "1");
    assert_eq!(stored["metadata"]["managedFields"][0]["manager"], "me");
    let resp = http()
        .patch(&url)
        .header("Content-Type", "application/apply-patch+yaml")
        .body("data: [unclosed")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("not valid YAML"),
        "{body}"
    );
}
