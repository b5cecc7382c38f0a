//! `runtimes/status` AdmissionReviews as kube-apiserver sends them (docs/admission-protocol.md),
//! and the decoding of kim's answers.

use super::runtime::Rt;
use serde_json::{Value, json};

/// An AdmissionReview v1 for a `runtimes/status` UPDATE shaped like a real apiserver's: `uid`,
/// kind/resource/requestKind/subResource, userInfo (`user`, `groups`), object (`new`) and
/// oldObject (`old`) with managedFields and a creationTimestamp, options (UpdateOptions with
/// fieldManager), `dryRun`.
pub fn status_review(
    uid: &str,
    old: &Rt,
    new: &Rt,
    user: &str,
    groups: &[&str],
    dry_run: bool,
) -> Value {
    update_status_review(
        uid,
        json!({"username": user, "uid": "4a0f6a4e-7d8c-4c6e-9d8e-000000000001", "groups": groups}),
        as_stored(&new.obj, "kim"),
        as_stored(&old.obj, "kim"),
        dry_run,
    )
}

/// The envelope of a `runtimes/status` UPDATE review as kube-apiserver sends it
/// (docs/admission-protocol.md): `kind`/`resource`/`requestKind`/`requestResource` of Runtime v1,
/// `subResource` `status`, `name`/`namespace` from `object` (namespace `kcp-system` when it has
/// none), `userInfo` as given, `options` UpdateOptions with fieldManager `kim`.
pub fn update_status_review(
    uid: &str,
    user_info: Value,
    object: Value,
    old_object: Value,
    dry_run: bool,
) -> Value {
    let name = object["metadata"]["name"].clone();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("kcp-system")
        .to_string();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
            "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
            "subResource": "status",
            "requestKind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
            "requestResource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
            "requestSubResource": "status",
            "name": name,
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": user_info,
            "object": object,
            "oldObject": old_object,
            "dryRun": dry_run,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kim"}
        }
    })
}

/// Decodes a response review; asserts the envelope (`admission.k8s.io/v1` AdmissionReview,
/// `response.uid` = `uid`, a boolean `allowed`) and returns `response`.
pub fn response_of(body: &[u8], uid: &str) -> Value {
    let v: Value = serde_json::from_slice(body).expect("response is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    let r = v["response"].clone();
    assert_eq!(r["uid"], json!(uid), "{v}");
    assert!(r["allowed"].is_boolean(), "{v}");
    r
}

/// Decodes `response.patch` (standard base64 of a JSON Patch array, `patchType` `JSONPatch`);
/// `None` when the response has no patch.
pub fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    use base64::Engine as _;
    let p = response
        .get("patch")?
        .as_str()
        .expect("patch is a base64 string");
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(p)
        .expect("standard base64 with padding");
    Some(serde_json::from_slice(&bytes).expect("patch is a JSON Patch array"))
}

/// `o` as the apiserver stores it: a creationTimestamp, and managedFields of the broker (labels,
/// spec) and of `manager`'s status writes.
fn as_stored(o: &Value, manager: &str) -> Value {
    let mut o = o.clone();
    o["metadata"]["managedFields"] = json!([
        {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:kyma-project.io/runtime-id": {}, "f:kyma-project.io/shoot-name": {}}}, "f:spec": {".": {}, "f:shoot": {".": {}, "f:name": {}, "f:provider": {".": {}, "f:type": {}}}}},
         "manager": "kyma-environment-broker", "operation": "Update", "time": "2026-11-01T09:59:00Z"},
        {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:state": {}}},
         "manager": manager, "operation": "Update", "subresource": "status", "time": "2026-11-01T10:00:00Z"}
    ]);
    o["metadata"]["creationTimestamp"] = json!("2026-11-01T09:59:00Z");
    o
}
