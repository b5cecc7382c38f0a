//! The generated CRD: `manifests/crd.yaml` is current, the status schema comes from the table,
//! the schema is structural, and every sample Runtime (plus Runtimes with statuses) passes a
//! cheap validation against the `openAPIV3Schema`.
//!
//! Regenerate the manifest with `KIM_UPDATE_CRD=1 cargo test --test suite crd`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kim::crd::{CRD_NAME, crd, crd_yaml, open_api_v3_schema};
use kim::status::policy::{REASON_PATTERN, TYPE_PATTERN};
use kim::status::{CondStatus, State};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn manifest_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/crd.yaml")
}

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/samples/runtimes")
}

#[test]
fn manifest_is_up_to_date() {
    let path = manifest_path();
    let generated = crd_yaml();
    if std::env::var("KIM_UPDATE_CRD").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("manifests dir")).expect("mkdir manifests");
        std::fs::write(&path, &generated).expect("write manifests/crd.yaml");
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "manifests/crd.yaml is stale or missing; regenerate with: KIM_UPDATE_CRD=1 cargo test --test suite crd"
    );
}

/// The YAML reads back (as a plain YAML parser sees it) into exactly the CRD.
#[test]
fn yaml_parses_back_to_the_crd() {
    let yaml = crd_yaml();
    let parsed: Value = serde_saphyr::from_str(&yaml).expect("crd.yaml is YAML");
    assert_eq!(parsed, serde_json::to_value(crd()).expect("CRD serialises"));
    let typed: CustomResourceDefinition = serde_json::from_value(parsed).expect("a CRD");
    assert_eq!(typed, crd());
    assert_eq!(yaml.matches("\napiVersion:").count(), 1, "one document");
}

#[test]
fn crd_identity() {
    let crd = serde_json::to_value(crd()).expect("serialises");
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], CRD_NAME);
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "infrastructuremanager.kyma-project.io");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "Runtime");
    assert_eq!(
        spec["names"]["listKind"],
        Value::Null,
        "defaulted by the apiserver"
    );
    assert_eq!(spec["names"]["plural"], "runtimes");
    assert_eq!(spec["names"]["singular"], "runtime");
    assert_eq!(spec["names"]["shortNames"], json!(["rt"]));
    let versions = spec["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1);
    let v1 = &versions[0];
    assert_eq!(v1["name"], "v1");
    assert_eq!(
        (v1["served"].clone(), v1["storage"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(v1["subresources"], json!({ "status": {} }));
}

#[test]
fn printer_columns() {
    let crd = serde_json::to_value(crd()).expect("serialises");
    let cols: Vec<(String, String, String)> =
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .expect("printer columns")
            .iter()
            .map(|c| {
                let s = |k: &str| c[k].as_str().expect("string").to_owned();
                (s("name"), s("type"), s("jsonPath"))
            })
            .collect();
    let expected = [
        ("STATE", "string", ".status.state"),
        (
            "SHOOT-NAME",
            "string",
            ".metadata.labels.kyma-project\\.io/shoot-name",
        ),
        ("PROVIDER", "string", ".spec.shoot.provider.type"),
        ("REGION", "string", ".spec.shoot.region"),
        ("AGE", "date", ".metadata.creationTimestamp"),
    ]
    .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
    assert_eq!(cols, expected);
}

#[test]
fn state_enum_is_the_table() {
    let schema = open_api_v3_schema();
    let status = &schema["properties"]["status"];
    let expected: Vec<Value> = State::ALL.iter().map(|s| json!(s.as_str())).collect();
    assert_eq!(
        status["properties"]["state"]["enum"],
        Value::Array(expected)
    );
    assert_eq!(status["properties"]["state"]["type"], "string");
    assert_eq!(status["required"], json!(["state"]));
}

#[test]
fn conditions_have_the_metav1_condition_shape() {
    let schema = open_api_v3_schema();
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["type"], "array");
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    let item = &conditions["items"];
    let mut required: Vec<&str> = item["required"]
        .as_array()
        .expect("required")
        .iter()
        .map(|v| v.as_str().expect("string"))
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["lastTransitionTime", "message", "reason", "status", "type"]
    );
    let p = &item["properties"];
    assert_eq!(p["type"]["maxLength"], 316);
    assert_eq!(p["type"]["pattern"], TYPE_PATTERN);
    assert_eq!(p["reason"]["minLength"], 1);
    assert_eq!(p["reason"]["maxLength"], 1024);
    assert_eq!(p["reason"]["pattern"], REASON_PATTERN);
    assert_eq!(p["message"]["maxLength"], 32768);
    let statuses: Vec<Value> = CondStatus::ALL.iter().map(|s| json!(s.as_str())).collect();
    assert_eq!(p["status"]["enum"], Value::Array(statuses));
    assert_eq!(p["observedGeneration"]["type"], "integer");
    assert_eq!(p["observedGeneration"]["format"], "int64");
    assert_eq!(p["observedGeneration"]["minimum"], 0.0);
    assert_eq!(p["lastTransitionTime"]["type"], "string");
    assert_eq!(p["lastTransitionTime"]["format"], "date-time");
    for (name, prop) in p.as_object().expect("properties") {
        assert!(
            prop.get("nullable").is_none(),
            "conditions[].{name} is nullable"
        );
    }
}

#[test]
fn spec_required_fields_follow_upstream() {
    let schema = open_api_v3_schema();
    let req = |ptr: &str| -> Vec<String> {
        let mut r: Vec<String> = schema
            .pointer(ptr)
            .unwrap_or_else(|| panic!("no schema at {ptr}"))["required"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().expect("str").to_owned())
                    .collect()
            })
            .unwrap_or_default();
        r.sort();
        r
    };
    assert_eq!(req(""), ["spec"]);
    assert_eq!(req("/properties/spec"), ["security", "shoot"]);
    assert_eq!(
        req("/properties/spec/properties/shoot"),
        [
            "name",
            "networking",
            "platformRegion",
            "provider",
            "purpose",
            "region",
            "secretBindingName"
        ]
    );
    let worker = "/properties/spec/properties/shoot/properties/provider/properties/workers/items";
    assert_eq!(req(worker), ["machine", "maximum", "minimum", "name"]);
    assert_eq!(
        req("/properties/spec/properties/security"),
        ["administrators", "networking"]
    );
    let p = "/properties/spec/properties/shoot/properties/provider/properties/type";
    assert_eq!(
        schema.pointer(p).expect("provider type")["enum"],
        json!(kim::api::PROVIDER_TYPES)
    );
    let ms = format!("{worker}/properties/maxSurge");
    assert_eq!(
        schema.pointer(&ms).expect("maxSurge")["x-kubernetes-int-or-string"],
        true
    );
}

// ---------------------------------------------------------------------------------------------
// Structural-schema check
// ---------------------------------------------------------------------------------------------

/// Violations of the Kubernetes structural-schema rules (and of what this crate promises) in
/// `schema` at `path`.
fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    for banned in [
        "$ref",
        "$schema",
        "definitions",
        "$defs",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
    ] {
        if node.contains_key(banned) {
            out.push(format!("{path}: has {banned}"));
        }
    }
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if let Some(v) = node.get("x-kubernetes-preserve-unknown-fields")
        && v != &json!(true)
    {
        out.push(format!(
            "{path}: x-kubernetes-preserve-unknown-fields must be true"
        ));
    }
    let ty = node.get("type");
    match ty {
        Some(Value::String(t)) => {
            if int_or_string {
                out.push(format!("{path}: int-or-string with a type"));
            }
            if !["object", "array", "string", "integer", "number", "boolean"].contains(&t.as_str())
            {
                out.push(format!("{path}: unknown type {t}"));
            }
        }
        Some(other) => out.push(format!("{path}: type must be one string, got {other}")),
        None if int_or_string || preserve => {}
        None => out.push(format!("{path}: no type")),
    }
    if node.contains_key("nullable") && ty.is_none() && !int_or_string {
        out.push(format!("{path}: nullable without a type"));
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        out.push(format!("{path}: both properties and additionalProperties"));
    }
    if ty == Some(&json!("object"))
        && !node.contains_key("properties")
        && !node.contains_key("additionalProperties")
        && !preserve
        && path != ".metadata"
    {
        out.push(format!(
            "{path}: object without properties, additionalProperties or preserve-unknown-fields"
        ));
    }
    if ty == Some(&json!("array")) {
        match node.get("items") {
            Some(items @ Value::Object(_)) => {
                structural_violations(items, &format!("{path}[]"), out);
            }
            _ => out.push(format!("{path}: array without a single items schema")),
        }
        if node.get("x-kubernetes-list-type") == Some(&json!("map")) {
            let keys = node["x-kubernetes-list-map-keys"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let required = node["items"]["required"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if keys.is_empty() || keys.iter().any(|k| !required.contains(k)) {
                out.push(format!(
                    "{path}: list-map keys must be required item fields"
                ));
            }
        }
    }
    if let Some(props) = node.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (k, v) in props {
                    structural_violations(v, &format!("{path}.{k}"), out);
                }
            }
            None => out.push(format!("{path}: properties is not a map")),
        }
        let names = props.as_object().cloned().unwrap_or_default();
        for r in node
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !r.as_str().is_some_and(|r| names.contains_key(r)) {
                out.push(format!("{path}: required {r} is not a property"));
            }
        }
    }
    match node.get("additionalProperties") {
        None => {}
        Some(ap @ Value::Object(_)) => structural_violations(ap, &format!("{path}.*"), out),
        Some(other) => out.push(format!(
            "{path}: additionalProperties must be a schema, got {other}"
        )),
    }
}

#[test]
fn schema_is_structural() {
    let schema = open_api_v3_schema();
    let mut out = Vec::new();
    structural_violations(&schema, "", &mut out);
    assert!(
        out.is_empty(),
        "structural-schema violations:\n{}",
        out.join("\n")
    );
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["properties"]["metadata"],
        json!({ "type": "object" })
    );
}

#[test]
fn structural_check_catches_violations() {
    let bad = json!({
        "type": "object",
        "properties": {
            "a": { "$ref": "#/definitions/A" },
            "b": { "type": "object" },
            "c": { "anyOf": [{ "type": "string" }, { "type": "null" }] },
            "d": { "type": "array" },
            "e": { "nullable": true }
        }
    });
    let mut out = Vec::new();
    structural_violations(&bad, "", &mut out);
    for p in [
        ".a: has $ref",
        ".b: object without",
        ".c: has anyOf",
        ".d: array without",
        ".e: nullable",
    ] {
        assert!(
            out.iter().any(|v| v.starts_with(p)),
            "missed {p:?} in {out:#?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Cheap instance validation (the full JSON-schema validation runs in CI with Python)
// ---------------------------------------------------------------------------------------------

/// Errors of `value` against `schema`: types, required fields, unknown (pruned) fields, enums,
/// lengths, minimums, int32 ranges, date-time syntax and list-map key uniqueness. Patterns are
/// left to the Python validator in CI.
fn validate(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if value.is_null() {
        if schema.get("nullable") != Some(&json!(true)) {
            out.push(format!("{path}: null where not nullable"));
        }
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            out.push(format!(
                "{path}: {value} is neither an integer nor a string"
            ));
        }
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} not in {allowed:?}"));
    }
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => {
            let Some(s) = value.as_str() else {
                out.push(format!("{path}: {value} is not a string"));
                return;
            };
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                out.push(format!("{path}: longer than {max}"));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                out.push(format!("{path}: shorter than {min}"));
            }
            if schema.get("format") == Some(&json!("date-time"))
                && chrono::DateTime::parse_from_rfc3339(s).is_err()
            {
                out.push(format!("{path}: {s:?} is not an RFC 3339 date-time"));
            }
        }
        Some("integer") => {
            let Some(n) = value.as_i64() else {
                out.push(format!("{path}: {value} is not an integer"));
                return;
            };
            if schema.get("format") == Some(&json!("int32")) && i32::try_from(n).is_err() {
                out.push(format!("{path}: {n} is out of int32 range"));
            }
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && (n as f64) < min
            {
                out.push(format!("{path}: {n} below minimum {min}"));
            }
        }
        Some("number") => {
            if !value.is_number() {
                out.push(format!("{path}: {value} is not a number"));
            }
        }
        Some("boolean") => {
            if !value.is_boolean() {
                out.push(format!("{path}: {value} is not a boolean"));
            }
        }
        Some("array") => {
            let Some(items) = value.as_array() else {
                out.push(format!("{path}: {value} is not an array"));
                return;
            };
            for (i, item) in items.iter().enumerate() {
                validate(item, &schema["items"], &format!("{path}[{i}]"), out);
            }
            if schema.get("x-kubernetes-list-type") == Some(&json!("map")) {
                let keys = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut seen = Vec::new();
                for item in items {
                    let key: Vec<Value> = keys
                        .iter()
                        .map(|k| item[k.as_str().unwrap_or_default()].clone())
                        .collect();
                    if seen.contains(&key) {
                        out.push(format!("{path}: duplicate list-map key {key:?}"));
                    }
                    seen.push(key);
                }
            }
        }
        Some("object") => {
            let Some(obj) = value.as_object() else {
                out.push(format!("{path}: {value} is not an object"));
                return;
            };
            for r in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = r.as_str().unwrap_or_default();
                if !obj.contains_key(r) {
                    out.push(format!("{path}: required field {r} missing"));
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in obj {
                let p = format!("{path}.{k}");
                if let Some(s) = props.and_then(|ps| ps.get(k)) {
                    validate(v, s, &p, out);
                } else if let Some(s) = additional {
                    validate(v, s, &p, out);
                } else if !preserve && props.is_some() {
                    out.push(format!("{p}: unknown field (the apiserver would prune it)"));
                }
            }
        }
        Some(other) => out.push(format!("{path}: schema has unknown type {other}")),
        None if preserve => {}
        None => out.push(format!("{path}: schema without type")),
    }
}

fn errors_of(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    validate(value, &open_api_v3_schema(), "", &mut out);
    out
}

fn sample_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("samples dir exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no samples in {}",
        samples_dir().display()
    );
    files
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read sample");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_sample_validates_against_the_schema() {
    let mut failures = Vec::new();
    for path in sample_files() {
        let sample = load(&path);
        for e in errors_of(&sample) {
            failures.push(format!(
                "{}: {e}",
                path.file_name().unwrap_or_default().display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "samples do not validate:\n{}",
        failures.join("\n")
    );
}

fn with_status(status: Value) -> Value {
    let mut v = load(&samples_dir().join("aws.yaml"));
    v["status"] = status;
    v
}

#[test]
fn statuses_validate_against_the_schema() {
    for state in State::ALL {
        let v = with_status(json!({
            "state": state.as_str(),
            "provisioningCompleted": true,
            "conditions": [{
                "type": "Provisioned", "status": "True", "reason": "ShootCreationCompleted",
                "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z", "observedGeneration": 3
            }, {
                "type": "KubeconfigReady", "status": "Unknown", "reason": "GardenerClusterCRCreated",
                "message": "waiting", "lastTransitionTime": "2024-05-01T10:00:00Z"
            }],
            "shootLastOperation": {
                "type": "Create", "state": "Processing", "description": "creating",
                "lastUpdateTime": "2024-05-01T10:00:00Z", "progress": 42
            },
            "shootLastErrors": [{ "description": "boom", "codes": ["ERR_INFRA_QUOTA_EXCEEDED"] }]
        }));
        assert_eq!(errors_of(&v), Vec::<String>::new(), "{state}");
    }
}

#[test]
fn validation_catches_bad_objects() {
    let mut no_name = load(&samples_dir().join("aws.yaml"));
    no_name["spec"]["shoot"]
        .as_object_mut()
        .expect("shoot")
        .remove("name");
    assert!(
        errors_of(&no_name)
            .iter()
            .any(|e| e.contains("required field name missing"))
    );

    let mut unknown = load(&samples_dir().join("aws.yaml"));
    unknown["spec"]["shoot"]["bogus"] = json!(1);
    assert!(
        errors_of(&unknown)
            .iter()
            .any(|e| e.contains(".spec.shoot.bogus: unknown field"))
    );

    let mut provider = load(&samples_dir().join("aws.yaml"));
    provider["spec"]["shoot"]["provider"]["type"] = json!("digitalocean");
    assert!(!errors_of(&provider).is_empty());

    let cases = [
        json!({ "state": "Processing" }),
        json!({ "conditions": [] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "Maybe",
            "reason": "X", "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z" }] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "True",
            "reason": "", "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z" }] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "True",
            "reason": "X", "message": "", "lastTransitionTime": "yesterday" }] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "True",
            "reason": "X", "lastTransitionTime": "2024-05-01T10:00:00Z" }] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "True",
            "reason": "X", "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z",
            "observedGeneration": -1 }] }),
        json!({ "state": "Ready", "conditions": [
            { "type": "Provisioned", "status": "True", "reason": "X", "message": "",
              "lastTransitionTime": "2024-05-01T10:00:00Z" },
            { "type": "Provisioned", "status": "False", "reason": "Y", "message": "",
              "lastTransitionTime": "2024-05-01T10:00:00Z" }] }),
        json!({ "state": "Ready", "conditions": [{ "type": "Provisioned", "status": "True",
            "reason": "X", "message": "x".repeat(32769),
            "lastTransitionTime": "2024-05-01T10:00:00Z" }] }),
    ];
    for status in cases {
        let v = with_status(status.clone());
        assert!(!errors_of(&v).is_empty(), "accepted {status}");
    }
}
