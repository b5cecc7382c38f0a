//! The generated CRD: `manifests/crd.yaml` is current, the status schema comes from the table,
//! the schema is structural, it accepts everything KIM's CRD accepts, and every sample Runtime
//! (plus Runtimes with statuses) passes the API server's schema check ([`kim::schema`]), which
//! refuses each kind of bad value.
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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/runtimes")
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
    // A plain list without maxItems, as in KIM's CRD: one condition per type and the condition
    // limit are the webhook's rules (condition-type-duplicate, MAX_CONDITIONS).
    for absent in [
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "maxItems",
    ] {
        assert!(conditions.get(absent).is_none(), "conditions has {absent}");
    }
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
    assert_eq!(
        req(""),
        Vec::<String>::new(),
        "KIM's CRD requires nothing at the root"
    );
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
// Instance validation: kim::schema, the API server's check (the Python validation of
// scripts/validate-manifests.sh checks the samples too)
// ---------------------------------------------------------------------------------------------

/// What the API server would say about `value` as a Runtime: its field errors and, as
/// `PATH: unknown field`, the fields it would drop.
fn errors_of(value: &Value) -> Vec<String> {
    let report = kim::testing::schema::check(value);
    report
        .errors
        .iter()
        .map(ToString::to_string)
        .chain(
            report
                .unknown_fields
                .iter()
                .map(|f| format!("{f}: unknown field")),
        )
        .collect()
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
    let sample = || load(&samples_dir().join("aws.yaml"));
    let mut no_name = sample();
    no_name["spec"]["shoot"]
        .as_object_mut()
        .expect("shoot")
        .remove("name");
    assert_eq!(errors_of(&no_name), ["spec.shoot.name: Required value"]);

    let mut unknown = sample();
    unknown["spec"]["shoot"]["bogus"] = json!(1);
    assert_eq!(errors_of(&unknown), ["spec.shoot.bogus: unknown field"]);
    assert!(
        kim::testing::schema::check(&unknown).is_valid(),
        "dropped, not refused"
    );

    let mut provider = sample();
    provider["spec"]["shoot"]["provider"]["type"] = json!("digitalocean");
    assert_eq!(
        errors_of(&provider),
        [
            "spec.shoot.provider.type: Unsupported value: \"digitalocean\": supported values: \
             \"aws\", \"azure\", \"gcp\", \"openstack\", \"alicloud\", \"gdch\""
        ]
    );

    let mut spec_cases: Vec<(Value, &str)> = Vec::new();
    let mut edit = |f: &dyn Fn(&mut Value), expected: &'static str| {
        let mut v = sample();
        f(&mut v);
        spec_cases.push((v, expected));
    };
    edit(
        &|v| v["spec"]["shoot"]["purpose"] = json!(true),
        "spec.shoot.purpose: Invalid value: true: must be of type string",
    );
    edit(
        &|v| v["spec"]["shoot"]["provider"]["workers"][0]["maxSurge"] = json!(false),
        "spec.shoot.provider.workers[0].maxSurge: Invalid value: false: must be of type integer or string",
    );
    edit(
        &|v| v["spec"]["shoot"]["provider"]["workers"][0]["minimum"] = json!("3"),
        "spec.shoot.provider.workers[0].minimum: Invalid value: \"3\": must be of type integer",
    );
    edit(
        &|v| v["spec"]["security"]["administrators"] = json!("admin@example.com"),
        "spec.security.administrators: Invalid value: \"admin@example.com\": must be of type array",
    );
    edit(
        &|v| {
            v["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] =
                json!([{ "jwks": "not base64!" }])
        },
        "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[0].jwks: Invalid value: \
         \"not base64!\": must be of format byte",
    );
    edit(
        &|v| {
            v["spec"]["imageRegistryCache"] = json!([{ "name": "c", "namespace": "n", "uid": "u",
                "config": { "upstream": "docker.io", "volume": { "size": "10 Gi" } } }])
        },
        "spec.imageRegistryCache[0].config.volume.size: Invalid value: \"10 Gi\": must match",
    );
    edit(
        &|v| v["apiVersion"] = json!("infrastructuremanager.kyma-project.io/v2"),
        "apiVersion: Invalid value: \"infrastructuremanager.kyma-project.io/v2\": must be \
         \"infrastructuremanager.kyma-project.io/v1\"",
    );
    for (v, expected) in spec_cases {
        let errors = errors_of(&v);
        assert!(
            errors.len() == 1 && errors[0].starts_with(expected),
            "expected {expected:?}, got {errors:#?}"
        );
    }

    let cond = |fields: Value| {
        let mut c = json!({ "type": "Provisioned", "status": "True", "reason": "X",
            "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z" });
        for (k, v) in fields.as_object().expect("fields") {
            if v.is_null() {
                c.as_object_mut().expect("condition").remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        json!({ "state": "Ready", "conditions": [c] })
    };
    let c0 = "status.conditions[0]";
    let cases = [
        (
            json!({ "state": "Processing" }),
            "status.state: Unsupported value: \"Processing\": supported values: \"Pending\", \
             \"Ready\", \"Failed\", \"Terminating\""
                .to_string(),
        ),
        (
            json!({ "conditions": [] }),
            "status.state: Required value".into(),
        ),
        (
            cond(json!({ "status": "Maybe" })),
            format!("{c0}.status: Unsupported value: \"Maybe\""),
        ),
        (
            cond(json!({ "reason": "" })),
            format!("{c0}.reason: Invalid value: \"\": must be at least 1 characters long"),
        ),
        (
            cond(json!({ "reason": "bad reason" })),
            format!("{c0}.reason: Invalid value: \"bad reason\": must match '{REASON_PATTERN}'"),
        ),
        (
            cond(json!({ "type": "Bad Type" })),
            format!("{c0}.type: Invalid value: \"Bad Type\": must match '{TYPE_PATTERN}'"),
        ),
        (
            cond(json!({ "lastTransitionTime": "yesterday" })),
            format!(
                "{c0}.lastTransitionTime: Invalid value: \"yesterday\": must be of format date-time"
            ),
        ),
        (
            cond(json!({ "message": null })),
            format!("{c0}.message: Required value"),
        ),
        (
            cond(json!({ "observedGeneration": -1 })),
            format!(
                "{c0}.observedGeneration: Invalid value: -1: must be greater than or equal to 0"
            ),
        ),
        (
            cond(json!({ "message": "x".repeat(32769) })),
            format!("{c0}.message: Too long: may not be longer than 32768 characters"),
        ),
    ];
    for (status, expected) in cases {
        let errors = errors_of(&with_status(status.clone()));
        assert!(
            errors.iter().any(|e| e.starts_with(&expected)),
            "{status}: expected {expected:?}, got {errors:#?}"
        );
    }

    // Two conditions of one type pass the schema (a plain list, as in KIM's CRD); the webhook
    // denies them (condition-type-duplicate).
    let twice = with_status(json!({ "state": "Ready", "conditions": [
        { "type": "Provisioned", "status": "True", "reason": "X", "message": "",
          "lastTransitionTime": "2024-05-01T10:00:00Z" },
        { "type": "Provisioned", "status": "False", "reason": "Y", "message": "",
          "lastTransitionTime": "2024-05-01T10:00:00Z" }] }));
    assert_eq!(errors_of(&twice), Vec::<String>::new());
}

/// What the API server does before validating, and how it reads types: `null`s of optional
/// fields are dropped, defaults are written, `1.0` is an integer, int-or-string takes both, a
/// JSON value that is not an object is one error.
#[test]
fn validation_follows_the_api_servers_decoding() {
    let mut v = load(&samples_dir().join("aws.yaml"));
    v["spec"]["shoot"]["licenceType"] = Value::Null;
    v["spec"]["shoot"]["provider"]["workers"][0]["maxSurge"] = json!("25%");
    v["spec"]["shoot"]["provider"]["workers"][0]["maxUnavailable"] = json!(0);
    v["spec"]["shoot"]["provider"]["workers"][0]["minimum"] = json!(1.0);
    // ttl is required and defaulted: the API server writes 168h, nothing to refuse.
    v["spec"]["imageRegistryCache"] = json!([{ "name": "c", "namespace": "n", "uid": "u",
        "config": { "upstream": "docker.io", "garbageCollection": {}, "volume": { "size": 10 } } }]);
    assert_eq!(errors_of(&v), Vec::<String>::new());

    // A null where the schema has no default and the field is required stays refused.
    let mut required_null = load(&samples_dir().join("aws.yaml"));
    required_null["spec"]["shoot"]["name"] = Value::Null;
    assert_eq!(
        errors_of(&required_null),
        ["spec.shoot.name: Required value"]
    );
    // Nulls inside lists are not dropped.
    let mut null_item = load(&samples_dir().join("aws.yaml"));
    null_item["spec"]["security"]["administrators"] = json!([null]);
    assert_eq!(
        errors_of(&null_item),
        ["spec.security.administrators[0]: Invalid value: null: must be of type string"]
    );
    assert_eq!(
        errors_of(&json!([1, 2])),
        ["Invalid value: [1,2]: must be of type object"]
    );
    assert!(kim::testing::schema::is_runtime(&load(
        &samples_dir().join("aws.yaml")
    )));
    assert!(!kim::testing::schema::is_runtime(
        &json!({ "apiVersion": "v1", "kind": "Pod" })
    ));
}

/// The string formats follow the API server's rules (kube-openapi `strfmt`), and the CRD uses
/// no format the schema check leaves unchecked on strings.
#[test]
fn formats_follow_the_api_server() {
    use kim::testing::schema::{is_k8s_byte, is_k8s_date_time};
    for ok in [
        "2024-05-01T10:00:00Z",
        "2024-05-01t10:00:00z",
        "2024-05-01T10:00:00.123456789+02:00",
        "2024-02-29T23:59:59-11:30",
    ] {
        assert!(is_k8s_date_time(ok), "{ok}");
    }
    for bad in [
        "yesterday",
        "2024-05-01",
        "2024-05-01 10:00:00Z",
        "2024-05-01T10:00:00",
        "2024-05-01T24:00:00Z",
        "2024-05-01T10:00:60Z",
        "2023-02-29T10:00:00Z",
        "24-05-01T10:00:00Z",
        "",
    ] {
        assert!(!is_k8s_date_time(bad), "{bad}");
    }
    for ok in ["aGVsbG8=", "aGk=", "aGVs", "+/+/"] {
        assert!(is_k8s_byte(ok), "{ok}");
    }
    for bad in ["", "aGVsbG8", "not base64!", "aGVsbG8=\n", "a==="] {
        assert!(!is_k8s_byte(bad), "{bad:?}");
    }

    fn string_formats(node: &Value, out: &mut Vec<String>) {
        match node {
            Value::Object(m) => {
                if m.get("type") == Some(&json!("string"))
                    && let Some(f) = m.get("format").and_then(Value::as_str)
                {
                    out.push(f.to_string());
                }
                m.values().for_each(|v| string_formats(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| string_formats(v, out)),
            _ => {}
        }
    }
    let mut formats = Vec::new();
    string_formats(&open_api_v3_schema(), &mut formats);
    formats.sort();
    formats.dedup();
    assert_eq!(formats, ["byte", "date-time"]);
}

// ---------------------------------------------------------------------------------------------
// Compatibility with KIM's CRD (`samples/kim/runtimes-crd.yaml`)
// ---------------------------------------------------------------------------------------------

/// Where kim's schema knowingly differs from KIM's: (path, difference, reason). Each is
/// explained, with what happens to stored objects, in `manifests/README.md` ("kim's CRD and
/// KIM's"). Every one makes kim's schema accept more than KIM's, never less.
const ALLOWED_DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        ".spec.shoot.provider.workers[].kubernetes.kubelet",
        "open object",
        "Gardener's KubeletConfig: kim passes it to the Shoot verbatim and Gardener validates it; \
         a copy of its schema would have to follow every Gardener release",
    ),
    (
        ".spec.shoot.provider.additionalWorkers[].kubernetes.kubelet",
        "open object",
        "as workers[].kubernetes.kubelet",
    ),
    (
        ".spec.shoot.provider.workers[].controlPlane",
        "open object",
        "Gardener's WorkerControlPlane (autonomous Shoots): passed to the Shoot verbatim, \
         validated by Gardener",
    ),
    (
        ".spec.shoot.provider.additionalWorkers[].controlPlane",
        "open object",
        "as workers[].controlPlane",
    ),
];

fn kim_crd() -> Value {
    load(&samples_dir().join("../kim/runtimes-crd.yaml"))
}

fn kim_schema() -> Value {
    kim_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// `schema.required` as names.
fn required_of(schema: &Value) -> Vec<&str> {
    schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The node's type, with `x-kubernetes-int-or-string` as a type of its own.
fn type_of(schema: &Value) -> Option<&str> {
    if schema.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        return Some("int-or-string");
    }
    schema.get("type").and_then(Value::as_str)
}

/// Every place where `ours` would accept less than `kim`, or store an object differently
/// (prune, default or keep a null where KIM's does not), as (path, difference). Paths are
/// `.spec.shoot.name`-style, `[]` for list items, `.*` for map values; the root is `(root)`.
fn crd_differences(kim: &Value, ours: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    compare(kim, ours, "", &mut out);
    for d in &mut out {
        if d.0.is_empty() {
            d.0 = "(root)".into();
        }
    }
    out.sort();
    out
}

fn compare(kim: &Value, ours: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let mut differ = |what: String| out.push((path.to_string(), what));
    let preserve = |s: &Value| s.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if preserve(ours) && !preserve(kim) {
        if kim.get("properties").is_some() {
            // Ours keeps whatever is there, KIM's is typed: nothing below can be compared.
            differ("open object".into());
            return;
        }
        differ("x-kubernetes-preserve-unknown-fields: ours only".into());
    }
    if preserve(kim) && !preserve(ours) {
        differ("x-kubernetes-preserve-unknown-fields: KIM's only (ours prunes)".into());
    }
    if type_of(kim) != type_of(ours) {
        differ(format!(
            "type {:?}, KIM's {:?}",
            type_of(ours),
            type_of(kim)
        ));
    }
    // Same value or both absent: these decide what is stored (pruned nulls, defaults) or how a
    // list is merged.
    for key in [
        "nullable",
        "default",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-embedded-resource",
    ] {
        if kim.get(key) != ours.get(key) {
            differ(format!(
                "{key} {:?}, KIM's {:?}",
                ours.get(key),
                kim.get(key)
            ));
        }
    }
    if let Some(ours_enum) = ours.get("enum").and_then(Value::as_array) {
        let kim_enum = kim.get("enum").and_then(Value::as_array);
        let missing: Vec<&Value> = match kim_enum {
            None => vec![],
            Some(k) => k.iter().filter(|v| !ours_enum.contains(v)).collect(),
        };
        if kim_enum.is_none() || !missing.is_empty() {
            differ(format!("enum lacks {missing:?} (KIM's: {kim_enum:?})"));
        }
    }
    let kim_required = required_of(kim);
    for r in required_of(ours) {
        if !kim_required.contains(&r) {
            differ(format!("requires {r}"));
        }
    }
    let num = |s: &Value, k: &str| s.get(k).and_then(Value::as_f64);
    for (key, upper) in [
        ("maxLength", true),
        ("maxItems", true),
        ("maxProperties", true),
        ("maximum", true),
        ("minLength", false),
        ("minItems", false),
        ("minProperties", false),
        ("minimum", false),
    ] {
        let Some(o) = num(ours, key) else { continue };
        let looser_or_same = match num(kim, key) {
            None => false,
            Some(k) if upper => o >= k,
            Some(k) => o <= k,
        };
        if !looser_or_same {
            differ(format!("{key} {o}, KIM's {:?}", num(kim, key)));
        }
    }
    // Not comparable by containment: ours has them only where KIM's has the same.
    for key in [
        "pattern",
        "format",
        "multipleOf",
        "uniqueItems",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "allOf",
        "oneOf",
        "not",
    ] {
        if ours.get(key).is_some() && ours.get(key) != kim.get(key) {
            differ(format!(
                "{key} {:?}, KIM's {:?}",
                ours.get(key),
                kim.get(key)
            ));
        }
    }
    // KIM's int-or-string nodes also list `anyOf: [integer, string]`, which says the same.
    if ours.get("anyOf").is_some() && ours.get("anyOf") != kim.get("anyOf") {
        differ("anyOf differs".into());
    }
    let rules = |s: &Value| -> Vec<Value> {
        s.get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|v| v.iter().map(|r| r["rule"].clone()).collect())
            .unwrap_or_default()
    };
    let kim_rules = rules(kim);
    for rule in rules(ours) {
        if !kim_rules.contains(&rule) {
            differ(format!("x-kubernetes-validations rule {rule}"));
        }
    }

    if let Some(props) = kim.get("properties").and_then(Value::as_object) {
        for (name, k) in props {
            let p = format!("{path}.{name}");
            match ours.get("properties").and_then(|o| o.get(name)) {
                Some(o) => compare(k, o, &p, out),
                None => out.push((p, "missing".into())),
            }
        }
    }
    if let Some(k) = kim.get("items") {
        match ours.get("items") {
            Some(o) => compare(k, o, &format!("{path}[]"), out),
            None => out.push((format!("{path}[]"), "missing".into())),
        }
    }
    if let Some(k @ Value::Object(_)) = kim.get("additionalProperties") {
        match ours.get("additionalProperties") {
            Some(o @ Value::Object(_)) => compare(k, o, &format!("{path}.*"), out),
            _ => out.push((format!("{path}.*"), "missing".into())),
        }
    }
}

/// kim's CRD accepts every object KIM's accepts and stores it the same way, except the
/// differences named in [`ALLOWED_DIFFERENCES`] (each must still occur: a stale entry fails).
#[test]
fn schema_accepts_everything_kims_crd_accepts() {
    let found = crd_differences(&kim_schema(), &open_api_v3_schema());
    let allowed: Vec<(String, String)> = ALLOWED_DIFFERENCES
        .iter()
        .map(|(p, d, _)| (p.to_string(), d.to_string()))
        .collect();
    let unexpected: Vec<_> = found.iter().filter(|d| !allowed.contains(d)).collect();
    let stale: Vec<_> = allowed.iter().filter(|d| !found.contains(d)).collect();
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "kim's CRD differs from KIM's where not allowed:\n{}\nallowed differences that no longer occur:\n{}",
        unexpected
            .iter()
            .map(|(p, d)| format!("  {p}: {d}"))
            .collect::<Vec<_>>()
            .join("\n"),
        stale
            .iter()
            .map(|(p, d)| format!("  {p}: {d}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for (path, _, reason) in ALLOWED_DIFFERENCES {
        assert!(!reason.is_empty(), "{path}: no reason");
    }
}

/// The comparison finds each kind of tightening it is there to catch.
#[test]
fn crd_comparison_catches_tighter_schemas() {
    let mut ours = open_api_v3_schema();
    let shoot = "/properties/spec/properties/shoot/properties";
    let edit = |v: &mut Value, ptr: &str, f: &dyn Fn(&mut Value)| {
        f(v.pointer_mut(ptr)
            .unwrap_or_else(|| panic!("no schema at {ptr}")))
    };
    edit(&mut ours, &format!("{shoot}/name"), &|s| {
        s["maxLength"] = json!(63);
        s["pattern"] = json!("^[a-z]+$");
    });
    edit(
        &mut ours,
        &format!("{shoot}/provider/properties/type"),
        &|s| {
            s["enum"] = json!(["aws", "azure", "gcp", "openstack", "alicloud"]);
        },
    );
    edit(&mut ours, &format!("{shoot}/purpose"), &|s| {
        s["type"] = json!("boolean");
    });
    edit(&mut ours, &format!("{shoot}/kubernetes"), &|s| {
        s["required"] = json!(["version"]);
        s["nullable"] = json!(true);
    });
    edit(
        &mut ours,
        "/properties/status/properties/conditions",
        &|s| {
            s["x-kubernetes-list-type"] = json!("map");
            s["x-kubernetes-list-map-keys"] = json!(["type"]);
            s["maxItems"] = json!(64);
        },
    );
    edit(
        &mut ours,
        "/properties/status/properties/conditions/items/properties/observedGeneration",
        &|s| s["minimum"] = json!(1),
    );
    edit(&mut ours, "/properties/spec", &|s| {
        s["properties"]
            .as_object_mut()
            .expect("spec properties")
            .remove("auditLogAccessEnabled");
        s["x-kubernetes-validations"] = json!([{ "rule": "has(self.shoot)" }]);
    });
    edit(
        &mut ours,
        "/properties/spec/properties/imageRegistryCache/items/properties/config/properties/garbageCollection/properties/ttl",
        &|s| s["default"] = json!("24h"),
    );
    let found = crd_differences(&kim_schema(), &ours);
    let shoot_path = ".spec.shoot";
    for (path, what) in [
        (format!("{shoot_path}.name"), "maxLength"),
        (format!("{shoot_path}.name"), "pattern"),
        (
            format!("{shoot_path}.provider.type"),
            "enum lacks [String(\"gdch\")]",
        ),
        (format!("{shoot_path}.purpose"), "type"),
        (format!("{shoot_path}.kubernetes"), "requires version"),
        (format!("{shoot_path}.kubernetes"), "nullable"),
        (".status.conditions".into(), "x-kubernetes-list-type"),
        (".status.conditions".into(), "x-kubernetes-list-map-keys"),
        (".status.conditions".into(), "maxItems"),
        (".status.conditions[].observedGeneration".into(), "minimum"),
        (".spec.auditLogAccessEnabled".into(), "missing"),
        (".spec".into(), "x-kubernetes-validations"),
        (
            ".spec.imageRegistryCache[].config.garbageCollection.ttl".into(),
            "default",
        ),
    ] {
        assert!(
            found.iter().any(|(p, d)| *p == path && d.starts_with(what)),
            "missed {path}: {what} in {found:#?}"
        );
    }
    // KIM's own schema against itself: nothing.
    assert_eq!(crd_differences(&kim_schema(), &kim_schema()), vec![]);
}

/// The same resource as KIM's CRD: name, group, kind and names, scope, the one stored version
/// with the status subresource. (Printer columns are kim's own: see `printer_columns`.)
#[test]
fn same_resource_as_kims_crd() {
    let kim = kim_crd();
    let ours = serde_json::to_value(crd()).expect("serialises");
    assert_eq!(ours["metadata"]["name"], kim["metadata"]["name"]);
    for key in ["group", "scope"] {
        assert_eq!(ours["spec"][key], kim["spec"][key], "spec.{key}");
    }
    for key in ["kind", "plural", "singular"] {
        assert_eq!(
            ours["spec"]["names"][key], kim["spec"]["names"][key],
            "spec.names.{key}"
        );
    }
    // listKind: the API server defaults it to kind + "List", KIM's spells it out.
    assert_eq!(kim["spec"]["names"]["listKind"], "RuntimeList");
    let (k, o) = (&kim["spec"]["versions"][0], &ours["spec"]["versions"][0]);
    for key in ["name", "served", "storage", "subresources"] {
        assert_eq!(o[key], k[key], "versions[0].{key}");
    }
    assert_eq!(kim["spec"]["versions"].as_array().map(Vec::len), Some(1));
}

/// Fields KIM writes that kim does not act on are carried: a Runtime with them reads into
/// [`kim::api::Runtime`] and writes back unchanged, the reconciler's next status keeps
/// `auditLogCR`, and the Shoot conversion still works (the `gdch` provider is accepted by the
/// CRD and refused by the conversion, like `alicloud`).
#[test]
fn kim_only_fields_are_carried() {
    use kim::api::Runtime;
    use kim::gardener::config::Config;
    use kim::status::{CondStatus, Policy};
    use kim::testing::gardener::{ConversionError, runtime_to_shoot};
    use kim::testing::reconciler::{Cond, Update, next_status};

    let mut v = load(&samples_dir().join("aws.yaml"));
    v["spec"]["auditLogAccessEnabled"] = json!(true);
    v["spec"]["imageRegistryCache"] = json!([{
        "name": "cache", "namespace": "kyma-system", "uid": "0b1e2c3d-0000-0000-0000-000000000000",
        "config": {
            "upstream": "docker.io", "remoteURL": "https://registry-1.docker.io",
            "volume": { "size": "10Gi", "storageClassName": "default" },
            "garbageCollection": { "ttl": "168h" }, "secretReferenceName": "creds",
            "proxy": { "httpProxy": "http://p:3128", "httpsProxy": "http://p:3128" },
            "http": { "tls": true }
        }
    }]);
    v["status"] = json!({
        "state": "Ready", "auditLogCR": "auditlog-eu10",
        "conditions": [{ "type": "Provisioned", "status": "True", "reason": "ShootCreationCompleted",
            "message": "done", "lastTransitionTime": "2024-05-01T10:00:00Z" }]
    });
    assert_eq!(errors_of(&v), Vec::<String>::new());
    let rt: Runtime = serde_json::from_value(v.clone()).expect("reads into Runtime");
    assert_eq!(serde_json::to_value(&rt).expect("serialises"), v);

    let next = next_status(
        &Policy::builtin(),
        &rt,
        &Update::new(
            State::Ready,
            vec![Cond::new(
                "KubeconfigReady",
                CondStatus::True,
                "GardenerClusterCRReady",
            )],
        ),
        chrono::Utc::now(),
    );
    assert_eq!(next.audit_log_cr.as_deref(), Some("auditlog-eu10"));

    let config =
        Config::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/config.example.yaml"))
            .expect("example config");
    let shoot = runtime_to_shoot(&rt, &config).expect("converts with KIM's extra fields");
    assert_eq!(shoot.metadata.name.as_deref(), Some(rt.shoot_name()));

    let mut gdch = rt.clone();
    gdch.spec.shoot.provider.type_ = "gdch".into();
    assert_eq!(
        runtime_to_shoot(&gdch, &config).expect_err("gdch is not converted"),
        ConversionError::UnsupportedProvider {
            provider: "gdch".into()
        }
    );
}
