//! The admission chain as shipped, on a real kube-apiserver: `manifests/base` (or an overlay)
//! installed with its webhook configurations pointed at a real `kim webhook`
//! ([`crate::support::real::Stack`]).

use crate::support::real::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// The mutating webhook's JSONPatch reaches the stored object: a condition written without
/// `lastTransitionTime` and `observedGeneration` is stored with both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutating_webhooks_defaults_are_stored() {
    let stack = Stack::start("base", &[]).await;
    stack.create_runtime("defaulted").await;
    let api = stack.runtimes().await;
    let status = json!({"status": {
        "state": "Pending",
        "conditions": [{
            "type": "Provisioned",
            "status": "Unknown",
            "reason": "Pending",
            "message": "Shoot creation in progress"
        }]
    }});
    let written = api
        .patch_status("defaulted", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("a legal status write is allowed");
    let stored = serde_json::to_value(api.get("defaulted").await.unwrap()).unwrap();
    let cond = &stored["status"]["conditions"][0];
    assert!(cond["lastTransitionTime"].is_string(), "{cond}");
    assert_eq!(cond["observedGeneration"], json!(1), "{cond}");
    assert_eq!(
        serde_json::to_value(written).unwrap()["status"],
        stored["status"]
    );
}
