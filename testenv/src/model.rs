//! Builders of Runtime objects with statuses the way the reconciler writes them
//! (docs/reconciler.md), from the real samples in `samples/runtimes/`, and of
//! the `runtimes/status` AdmissionReviews that carry them (for kim's tests and benches; plain
//! JSON, no kim types).

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};
use std::path::PathBuf;

/// The repository's `samples/` (real inputs from public projects; its README names each file's
/// origin). This crate is the repository's `testenv/`.
pub fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

/// Every sample Runtime as (file name, JSON object).
pub fn sample_runtimes() -> Vec<(String, Value)> {
    let dir = samples_dir().join("runtimes");
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    entries.sort();
    for p in entries {
        let text = std::fs::read_to_string(&p).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        out.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
    }
    assert!(out.len() >= 6, "expected the six sample runtimes");
    out
}

/// The reconciler's service account (default allowed writer).
pub const RECONCILER: &str = "system:serviceaccount:kim-system:kim-controller";

/// The clock of a new [`Rt`]: 2026-11-01T10:00:00Z.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 10, 0, 0).unwrap()
}

/// A Runtime as stored: generation, uid, and optionally a status and a deletionTimestamp.
#[derive(Clone, Debug)]
pub struct Rt {
    /// The Runtime object (JSON).
    pub obj: Value,
    /// The time of its last write (condition `lastTransitionTime`s are taken from it).
    pub clock: DateTime<Utc>,
}

impl Rt {
    /// A stored Runtime from a manifest: generation 1, a fixed uid and resourceVersion.
    pub fn new(mut obj: Value) -> Rt {
        obj["metadata"]["generation"] = json!(1);
        obj["metadata"]["uid"] = json!("0b7b6a8c-1111-2222-3333-444455556666");
        obj["metadata"]["resourceVersion"] = json!("1000");
        Rt { obj, clock: t0() }
    }

    /// Its `status`, if any.
    pub fn status(&self) -> Option<&Value> {
        self.obj.get("status")
    }

    /// Advances the clock by `secs` and returns the next Runtime with `state` and the condition
    /// (type, status, reason) set the way `meta.SetStatusCondition` does: lastTransitionTime
    /// changes only when status changes.
    pub fn write(&self, state: &str, conds: &[(&str, &str, &str)]) -> Rt {
        let mut next = self.clone();
        next.clock = self.clock + Duration::seconds(10);
        let now = next
            .clock
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let generation = next.obj["metadata"]["generation"].clone();
        let status = next
            .obj
            .as_object_mut()
            .unwrap()
            .entry("status")
            .or_insert_with(|| json!({}));
        status["state"] = json!(state);
        let list = status
            .as_object_mut()
            .unwrap()
            .entry("conditions")
            .or_insert_with(|| json!([]));
        for (ctype, cstatus, reason) in conds {
            let arr = list.as_array_mut().unwrap();
            let msg = format!("{ctype} {reason}");
            match arr.iter_mut().find(|c| c["type"] == json!(ctype)) {
                Some(c) => {
                    if c["status"] != json!(cstatus) {
                        c["lastTransitionTime"] = json!(now);
                    }
                    c["status"] = json!(cstatus);
                    c["reason"] = json!(reason);
                    c["message"] = json!(msg);
                    c["observedGeneration"] = generation.clone();
                }
                None => arr.push(json!({
                    "type": ctype, "status": cstatus, "reason": reason, "message": msg,
                    "lastTransitionTime": now, "observedGeneration": generation,
                })),
            }
        }
        next
    }

    /// A copy with `f` applied to the object.
    pub fn with(&self, f: impl FnOnce(&mut Value)) -> Rt {
        let mut next = self.clone();
        f(&mut next.obj);
        next
    }

    /// A copy with `status.provisioningCompleted: true`.
    pub fn completed(&self) -> Rt {
        self.with(|o| o["status"]["provisioningCompleted"] = json!(true))
    }

    /// A copy with `metadata.deletionTimestamp` set (2026-11-02T00:00:00Z).
    pub fn deleting(&self) -> Rt {
        self.with(|o| o["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z"))
    }

    /// A copy with `metadata.generation` one higher (a spec change).
    pub fn bump_generation(&self) -> Rt {
        self.with(|o| {
            let g = o["metadata"]["generation"].as_i64().unwrap();
            o["metadata"]["generation"] = json!(g + 1);
        })
    }
}

/// The full create → update → delete status sequence of docs/reconciler.md for one Runtime.
/// Returns the successive objects, starting with the Runtime without status.
pub fn lifecycle(sample: Value) -> Vec<Rt> {
    let mut seq = vec![Rt::new(sample)];
    let mut push = |f: &dyn Fn(&Rt) -> Rt| {
        let next = f(seq.last().unwrap());
        seq.push(next);
    };
    // Create (steps 2–6).
    push(&|r| r.write("Pending", &[("Provisioned", "Unknown", "Initialised")]));
    push(&|r| r.write("Pending", &[("Provisioned", "Unknown", "Pending")]));
    push(&|r| {
        r.write(
            "Pending",
            &[("Provisioned", "True", "ShootCreationCompleted")],
        )
    });
    push(&|r| {
        r.write(
            "Pending",
            &[("KubeconfigReady", "True", "KubeconfigCreated")],
        )
    });
    push(&|r| {
        r.write(
            "Ready",
            &[("Configured", "True", "AdministratorsConfigured")],
        )
        .completed()
    });
    // Update (generation bumped by the spec change).
    push(&|r| {
        r.bump_generation()
            .write("Pending", &[("Provisioned", "Unknown", "Processing")])
    });
    push(&|r| {
        r.write(
            "Pending",
            &[("Provisioned", "True", "ConfigurationCompleted")],
        )
    });
    push(&|r| {
        r.write(
            "Ready",
            &[
                ("KubeconfigReady", "True", "KubeconfigCreated"),
                ("Configured", "True", "AdministratorsConfigured"),
            ],
        )
    });
    // Delete.
    push(&|r| {
        r.deleting().write(
            "Terminating",
            &[("Deprovisioned", "Unknown", "GardenerShootDeleted")],
        )
    });
    push(&|r| {
        r.write(
            "Terminating",
            &[("Deprovisioned", "True", "KubeconfigDeleted")],
        )
    });
    seq
}

/// An AdmissionReview v1 for a `runtimes/status` UPDATE shaped like a real apiserver's: fresh
/// uid, kind/resource/requestKind/subResource, userInfo, object and oldObject with
/// managedFields, options (UpdateOptions with fieldManager), dryRun.
pub fn status_review(
    uid: &str,
    old: &Rt,
    new: &Rt,
    user: &str,
    groups: &[&str],
    dry_run: bool,
) -> Value {
    let with_fields = |o: &Value, manager: &str| -> Value {
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
    };
    update_status_review(
        uid,
        json!({"username": user, "uid": "4a0f6a4e-7d8c-4c6e-9d8e-000000000001", "groups": groups}),
        with_fields(&new.obj, "kim"),
        with_fields(&old.obj, "kim"),
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

/// Every file of `samples/admission/` as (file name, bytes).
pub fn sample_reviews() -> Vec<(String, Vec<u8>)> {
    let dir = samples_dir().join("admission");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert_eq!(out.len(), 5);
    out
}

/// Decodes a response review; asserts the envelope and returns `response`.
pub fn response_of(body: &[u8], uid: &str) -> Value {
    let v: Value = serde_json::from_slice(body).expect("response is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    let r = v["response"].clone();
    assert_eq!(r["uid"], json!(uid), "{v}");
    assert!(r["allowed"].is_boolean(), "{v}");
    r
}

/// Decodes `response.patch` (standard base64 of a JSON Patch array).
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
