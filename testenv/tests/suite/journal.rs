//! The journal of committed changes (`ServerHandle::journal`): every change in commit order with
//! the object as committed, however quickly the next overtook it; unaffected by compaction of
//! the watch history; waiters woken by a new change.

use std::time::Duration;

use serde_json::{Value, json};
use testenv::{EventType, Gvr, ServerConfig};

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "ns"}, "data": {"v": value}})
}

#[tokio::test]
async fn every_committed_change_is_kept_in_order_and_survives_compaction() {
    let server = testenv::start(ServerConfig::default().history_limit(2))
        .await
        .unwrap();
    let cms = Gvr::new("", "v1", "configmaps");
    server.put(&cms, configmap("before", "0")).unwrap();
    let journal = server.journal();
    assert!(
        journal.is_empty(),
        "opened after the first write: {journal:?}"
    );
    for v in ["1", "2", "3"] {
        server.put(&cms, configmap("c", v)).unwrap();
    }
    server.compact_history();
    // A write that changes nothing is no change.
    server.put(&cms, configmap("c", "3")).unwrap();
    server.delete(&cms, Some("ns"), "c").unwrap();

    let changes = journal.changes();
    let seen: Vec<(EventType, &str, &str)> = changes
        .iter()
        .map(|c| (c.kind, c.name(), c.object["data"]["v"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            (EventType::Added, "c", "1"),
            (EventType::Modified, "c", "2"),
            (EventType::Modified, "c", "3"),
            (EventType::Deleted, "c", "3"),
        ]
    );
    assert!(changes.windows(2).all(|w| w[0].rv < w[1].rv), "{changes:?}");
    assert!(
        changes
            .iter()
            .all(|c| c.gvr == cms && c.namespace() == Some("ns"))
    );
    assert_eq!(
        changes[1].object["metadata"]["resourceVersion"],
        changes[1].rv.to_string(),
        "the object as committed"
    );
    assert_eq!(journal.since(3).len(), 1);
    assert!(journal.since(9).is_empty());
}

#[tokio::test]
async fn grown_wakes_on_the_next_change_over_http() {
    let server = testenv::start(ServerConfig::default()).await.unwrap();
    let journal = server.journal();
    let waiter = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.grown(0).await })
    };
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(server.client(), "ns");
    let cm = serde_json::from_value(configmap("http", "1")).unwrap();
    api.create(&Default::default(), &cm).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the create")
        .unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal.changes()[0].kind, EventType::Added);
    // Already past: returns at once.
    tokio::time::timeout(Duration::from_secs(10), journal.grown(0))
        .await
        .expect("no wait");
}
