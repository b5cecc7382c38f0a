//! The Runtime CustomResourceDefinition, generated from the types ([`crate::api`]) and the
//! status table ([`crate::status`]).
//!
//! [`crd`] starts from kube's derived `Runtime::crd()` and post-processes the OpenAPI v3 schema
//! so that it accepts every object upstream KIM's CRD accepts and stores it unchanged
//! (`manifests/README.md`, "kim's CRD and KIM's"; `tests/suite/crd.rs` compares the two):
//! - the root lists `apiVersion`, `kind` and `metadata` (as controller-gen does) and requires
//!   nothing (KIM's root requires nothing, not even `spec`);
//! - no `nullable` anywhere and no `format` on numbers (controller-gen writes neither): a `null`
//!   sent for an optional field is dropped by the API server, as under KIM's CRD;
//! - `status.state` becomes an enum of [`State::ALL`] and is required once `status` exists
//!   (docs/status-model.md §1);
//! - `status.conditions[]` gets the upstream `metav1.Condition` CRD shape (required fields,
//!   `type`/`reason` patterns and lengths from [`crate::status::policy`], `status` enum from
//!   [`CondStatus::ALL`], `observedGeneration >= 0`). The list is a plain list without
//!   `maxItems`, as in KIM's CRD: at most one condition per type (§4.1) and the evaluation's
//!   condition limit are the webhook's rules, not the schema's.
//!
//! `manifests/crd.yaml` is [`crd_yaml`]'s output; `KIM_UPDATE_CRD=1 cargo test --test suite crd`
//! regenerates it and `cargo test --test suite crd` fails when it is stale.

use crate::api::Runtime;
use crate::status::policy::{REASON_PATTERN, TYPE_PATTERN};
use crate::status::{CondStatus, State};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Map, Value, json};

/// `metadata.name` of the CRD: `runtimes.infrastructuremanager.kyma-project.io`.
pub const CRD_NAME: &str = "runtimes.infrastructuremanager.kyma-project.io";

/// Maximum length of a condition `type` (upstream `metav1.Condition`: 253 prefix + `/` + 62).
pub(crate) const CONDITION_TYPE_MAX_LENGTH: u64 = 316;
/// Maximum length of a condition `reason` (upstream `metav1.Condition`).
pub(crate) const CONDITION_REASON_MAX_LENGTH: u64 = 1024;
/// Maximum length of a condition `message` (upstream `metav1.Condition`, 32 KiB).
pub(crate) const CONDITION_MESSAGE_MAX_LENGTH: u64 = 32768;

/// Header written at the top of [`crd_yaml`].
const YAML_HEADER: &str = "# Generated from the kim crate (src/api, src/crd.rs, src/status): do not edit.\n\
# Regenerate with: KIM_UPDATE_CRD=1 cargo test --test suite crd\n";

/// The Runtime CRD (`apiextensions.k8s.io/v1`), with the status schema taken from the table.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = Runtime::crd();
    for version in &mut crd.spec.versions {
        let Some(validation) = version.schema.as_mut() else {
            continue;
        };
        let Some(props) = validation.open_api_v3_schema.take() else {
            continue;
        };
        let mut schema = serde_json::to_value(props).expect("JSONSchemaProps serialises");
        post_process(&mut schema);
        validation.open_api_v3_schema =
            Some(serde_json::from_value(schema).expect("post-processed schema is JSONSchemaProps"));
    }
    crd
}

/// The `openAPIV3Schema` of the served version of [`crd`], as JSON.
pub fn open_api_v3_schema() -> Value {
    let crd = crd();
    let schema = crd
        .spec
        .versions
        .into_iter()
        .find(|v| v.served)
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .expect("the Runtime CRD has a served version with a schema");
    serde_json::to_value(schema).expect("JSONSchemaProps serialises")
}

/// [`crd`] as YAML (serde-saphyr), with a header comment; the content of `manifests/crd.yaml`.
pub fn crd_yaml() -> String {
    let body = serde_saphyr::to_string(&crd()).expect("the CRD serialises to YAML");
    format!("{YAML_HEADER}{body}")
}

/// Applies the status-model constraints to the derived schema (see the module docs).
fn post_process(schema: &mut Value) {
    strip_nullable_and_number_formats(schema);
    if let Some(root) = schema.as_object_mut() {
        root.remove("required");
    }
    // The apiserver always accepts these at the root; list them as controller-gen does so that
    // a plain JSON-schema validator sees the whole object.
    let root = object_at(schema, "/properties");
    root.insert(
        "apiVersion".into(),
        json!({
            "description": "APIVersion defines the versioned schema of this representation of an object.",
            "type": "string",
        }),
    );
    root.insert(
        "kind".into(),
        json!({
            "description": "Kind is a string value representing the REST resource this object represents.",
            "type": "string",
        }),
    );
    root.insert("metadata".into(), json!({ "type": "object" }));

    let status = object_at(schema, "/properties/status");
    status.insert("required".into(), json!(["state"]));

    let state = object_at_map(status, "/properties/state");
    state.remove("nullable");
    state.insert("type".into(), json!("string"));
    state.insert("enum".into(), json!(State::ALL.map(State::as_str)));

    let conditions = object_at_map(status, "/properties/conditions");
    let item = object_at_map(conditions, "/items");
    item.insert("type".into(), json!("object"));
    item.insert(
        "required".into(),
        json!(["lastTransitionTime", "message", "reason", "status", "type"]),
    );
    let props = object_at_map(item, "/properties");
    let mut set = |name: &str, fields: Value| {
        let prop = props
            .entry(name)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap_or_else(|| panic!("condition property {name} is an object schema"));
        prop.remove("nullable");
        if let Value::Object(fields) = fields {
            prop.extend(fields);
        }
    };
    set(
        "type",
        json!({
            "type": "string",
            "maxLength": CONDITION_TYPE_MAX_LENGTH,
            "pattern": TYPE_PATTERN,
        }),
    );
    set(
        "reason",
        json!({
            "type": "string",
            "minLength": 1,
            "maxLength": CONDITION_REASON_MAX_LENGTH,
            "pattern": REASON_PATTERN,
        }),
    );
    set(
        "message",
        json!({ "type": "string", "maxLength": CONDITION_MESSAGE_MAX_LENGTH }),
    );
    set(
        "status",
        json!({ "type": "string", "enum": CondStatus::ALL.map(CondStatus::as_str) }),
    );
    set(
        "observedGeneration",
        json!({ "type": "integer", "format": "int64", "minimum": 0 }),
    );
    set(
        "lastTransitionTime",
        json!({ "type": "string", "format": "date-time" }),
    );
}

/// Removes `nullable` from every schema node, and `format` from `number` nodes (schemars writes
/// `double`/`float` for Rust floats; the API server checks no format on numbers).
fn strip_nullable_and_number_formats(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    map.remove("nullable");
    if map.get("type").and_then(Value::as_str) == Some("number") {
        map.remove("format");
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props
            .values_mut()
            .for_each(strip_nullable_and_number_formats);
    }
    for key in ["additionalProperties", "items", "not"] {
        if let Some(child) = map.get_mut(key) {
            strip_nullable_and_number_formats(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children
                .iter_mut()
                .for_each(strip_nullable_and_number_formats);
        }
    }
}

/// The object schema at `pointer` under `root`; panics (a generator bug) when it is missing.
fn object_at<'a>(root: &'a mut Value, pointer: &str) -> &'a mut Map<String, Value> {
    root.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("derived Runtime schema has no object at {pointer}"))
}

/// [`object_at`] starting from a map.
fn object_at_map<'a>(
    root: &'a mut Map<String, Value>,
    pointer: &str,
) -> &'a mut Map<String, Value> {
    let mut cur = root;
    for token in pointer.split('/').skip(1) {
        cur = cur
            .get_mut(token)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("derived Runtime schema has no object at {pointer}"));
    }
    cur
}
