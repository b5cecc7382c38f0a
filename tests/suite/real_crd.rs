//! KIM compatibility on a real kube-apiserver: every Runtime that KIM's CRD
//! (`samples/kim/runtimes-crd.yaml`) stores, kim's CRD (`manifests/crd.yaml`) stores too, and
//! reads back with no field pruned or changed.
//!
//! The objects: the sample Runtimes with statuses in KIM's vocabulary as KIM wrote them on
//! each day a name of `samples/kim/vocabulary-history.tsv` was first declared (retired
//! condition types and reasons included); maximal Runtimes built by walking KIM's schema (every
//! property it declares for spec and status present, with a value of its type, format, pattern
//! or enum; one object per `spec.shoot.provider.type`); and each sample filled up with the
//! maximal object's fields it does not set.
//!
//! Each object is first stored on a control plane serving KIM's CRD (sent and stored compared:
//! nothing pruned, so the object is valid under KIM's), then on one serving ours. Names KIM
//! once declared that its CRD refuses today (reasons with a space, the states of June 2024)
//! are refused by both, on the same field. Then KIM's control plane is switched to our CRD:
//! every object KIM's stored reads back through ours (the apiserver prunes on read too) and
//! takes a status write unchanged ([`read_back`]).
//!
//! The same checks ([`not_kept`], [`read_back`]) run against a deliberately tightened copy of
//! our CRD fail and name the fields, so a pass means something.

use crate::support::real::{repo, runtime_resource};
use base64::Engine;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use regex::Regex;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::time::Instant;
use testenv::controlplane::ControlPlane;

/// The namespace the objects are stored in (each control plane is the test's own).
const NS: &str = "kcp-system";
const API_VERSION: &str = "infrastructuremanager.kyma-project.io/v1";

fn kim_crd() -> Value {
    let text = std::fs::read_to_string(repo().join("samples/kim/runtimes-crd.yaml"))
        .expect("samples/kim/runtimes-crd.yaml");
    serde_saphyr::from_str(&text).expect("KIM's CRD parses")
}

fn our_crd() -> Value {
    let text = std::fs::read_to_string(repo().join("manifests/crd.yaml")).expect("crd.yaml");
    serde_saphyr::from_str(&text).expect("manifests/crd.yaml parses")
}

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

// ---------------------------------------------------------------------------------------------
// Maximal objects: KIM's schema walked, every property given a value
// ---------------------------------------------------------------------------------------------

/// A value matching `pattern` (the patterns of KIM's schema, each known by its text; a new one
/// fails here, naming where it is, rather than producing an object KIM's CRD refuses).
fn pattern_value(pattern: &str, path: &str, v: usize) -> String {
    const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
    const REASON: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
    const TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
    let value = match pattern {
        QUANTITY => ["100Mi", "250m", "1.5Gi", "2", "1e3", "500k"][v % 6].to_string(),
        REASON => "ShootCreationCompleted".to_string(),
        TYPE => "Provisioned".to_string(),
        other => panic!("{path}: no value known for KIM's pattern {other:?}"),
    };
    let re = Regex::new(pattern).expect("KIM's pattern compiles");
    assert!(
        re.is_match(&value),
        "{path}: {value:?} does not match {pattern}"
    );
    value
}

/// Content of an open object (`x-kubernetes-preserve-unknown-fields`): a provider config as
/// Gardener extensions write them, nested, with every JSON type but null.
fn open_object(path: &str, v: usize) -> Value {
    json!({
        "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
        "kind": format!("Config{v}"),
        "field": path,
        "nested": {"list": [1, "two", true, 1.5, {"deep": ["x"]}], "empty": {}, "n": v}
    })
}

/// The variant of [`value_for`] that gives every scalar without a pattern, format or enum the
/// edge of its range: empty strings, zero, the largest integer of its format, `false`, empty
/// maps; date-times with fractional seconds and an offset.
const EDGE: usize = 1000;

/// A value for `schema` at `path` (`.spec.shoot.name`, `[]` for items, `.*` for map values);
/// `v` varies the choices (enum member, int or string, boolean) between objects; [`EDGE`]
/// gives edge values.
fn value_for(schema: &Value, path: &str, v: usize) -> Value {
    let edge = v == EDGE;
    let name = path
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .trim_end_matches("[]");
    if schema.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        return match schema.get("pattern").and_then(Value::as_str) {
            // A quantity: a string most of the time, an integer for odd variants.
            Some(_) if v % 2 == 1 => json!(v + 1),
            Some(p) => json!(pattern_value(p, path, v)),
            // maxSurge, maxUnavailable: a count or a percentage.
            None if v.is_multiple_of(2) => json!(v + 1),
            None => json!(format!("{}%", 10 * (v + 1))),
        };
    }
    if let Some(members) = schema.get("enum").and_then(Value::as_array) {
        return members[v % members.len()].clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let mut out = Map::new();
                for (k, s) in props {
                    if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                        continue;
                    }
                    out.insert(k.clone(), value_for(s, &format!("{path}.{k}"), v));
                }
                Value::Object(out)
            } else if let Some(Value::Object(_)) = schema.get("additionalProperties")
                && edge
            {
                json!({})
            } else if let Some(ap @ Value::Object(_)) = schema.get("additionalProperties") {
                let item = format!("{path}.*");
                json!({
                    format!("example.com/{name}-{v}"): value_for(ap, &item, v),
                    "second": value_for(ap, &item, v + 1),
                })
            } else if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
                open_object(path, v)
            } else {
                // `type: object` and nothing else (exposure.dns): only `{}` is kept.
                json!({})
            }
        }
        Some("array") => json!([value_for(&schema["items"], &format!("{path}[]"), v)]),
        Some("string") => match (
            schema.get("format").and_then(Value::as_str),
            schema.get("pattern").and_then(Value::as_str),
        ) {
            (Some("date-time"), _) if edge => json!("2026-07-16T12:00:00.123456789+02:00"),
            (Some("date-time"), _) => json!(format!("2026-07-16T10:{:02}:00Z", v % 60)),
            (Some("byte"), _) => {
                json!(base64::engine::general_purpose::STANDARD.encode(format!("{name} bytes {v}")))
            }
            (Some(f), _) => panic!("{path}: no value known for string format {f:?}"),
            (None, Some(p)) => json!(pattern_value(p, path, v)),
            (None, None) if edge => json!(""),
            (None, None) => json!(format!("{name}-{v}")),
        },
        Some("integer") if edge => match schema.get("format").and_then(Value::as_str) {
            Some("int32") => json!(i32::MAX),
            Some("int64") => json!(i64::MAX),
            _ => json!(schema.get("minimum").and_then(Value::as_i64).unwrap_or(0)),
        },
        Some("integer") => {
            let min = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            json!(min + 1 + v as i64)
        }
        Some("number") if edge => json!(1e-9),
        Some("number") => json!(0.5 + v as f64),
        Some("boolean") => json!(!edge && v.is_multiple_of(2)),
        other => panic!("{path}: no value known for type {other:?}"),
    }
}

/// Every property path KIM's schema declares (below `metadata` it declares none).
fn schema_paths(schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            let p = format!("{path}.{k}");
            out.insert(p.clone());
            schema_paths(s, &p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_paths(items, &format!("{path}[]"), out);
    }
    if let Some(ap @ Value::Object(_)) = schema.get("additionalProperties") {
        schema_paths(ap, &format!("{path}.*"), out);
    }
}

/// The paths `obj` sets, in [`schema_paths`]' notation (map keys of an `additionalProperties`
/// node become `*`; open objects are not entered).
fn value_paths(obj: &Value, schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    match obj {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let ap = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in m {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    let p = format!("{path}.{k}");
                    out.insert(p.clone());
                    value_paths(v, s, &p, out);
                } else if let Some(s) = ap {
                    value_paths(v, s, &format!("{path}.*"), out);
                }
            }
        }
        Value::Array(a) => {
            for item in a {
                value_paths(item, &schema["items"], &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// KIM's `status.state` enum and its condition patterns, from its CRD.
struct KimRules {
    states: Vec<String>,
    reason: Regex,
    kind: Regex,
}

impl KimRules {
    fn of(crd: &Value) -> KimRules {
        let status = &schema_of(crd)["properties"]["status"]["properties"];
        let cond = &status["conditions"]["items"]["properties"];
        let re = |s: &Value| Regex::new(s["pattern"].as_str().expect("a pattern")).unwrap();
        KimRules {
            states: status["state"]["enum"]
                .as_array()
                .expect("KIM's state enum")
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect(),
            reason: re(&cond["reason"]),
            kind: re(&cond["type"]),
        }
    }
}

/// A row of `samples/kim/vocabulary-history.tsv`.
#[derive(Debug, Clone)]
struct Name {
    kind: String,
    name: String,
    first_seen: String,
    last_seen: String,
}

impl Name {
    fn declared_on(&self, day: &str) -> bool {
        self.first_seen.as_str() <= day && day <= self.last_seen.as_str()
    }
}

fn vocabulary() -> Vec<Name> {
    let text = std::fs::read_to_string(repo().join("samples/kim/vocabulary-history.tsv"))
        .expect("vocabulary-history.tsv");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            Name {
                kind: c[0].into(),
                name: c[1].into(),
                first_seen: c[2].into(),
                last_seen: c[3].into(),
            }
        })
        .collect()
}

/// A condition as KIM writes it (metav1.Condition: every field set).
fn condition(kind: &str, status: &str, reason: &str, message: &str, day: &str) -> Value {
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format!("{day}T10:00:00Z"),
        "observedGeneration": 1
    })
}

/// Statuses in KIM's vocabulary as declared on `day`: every condition type of that day, each
/// with a reason of that day (rotating by `j`), a state of that day KIM's CRD still allows, and
/// the other fields KIM writes (provisioningCompleted, the Shoot's last operation and errors,
/// the AuditLog CR) on some of them.
fn kim_status(vocab: &[Name], rules: &KimRules, day: &str, j: usize) -> Value {
    let of = |kind: &str| -> Vec<&Name> {
        vocab
            .iter()
            .filter(|n| n.kind == kind && n.declared_on(day))
            .collect()
    };
    let types: Vec<&Name> = of("type")
        .into_iter()
        .filter(|n| rules.kind.is_match(&n.name))
        .collect();
    let reasons: Vec<&Name> = of("reason")
        .into_iter()
        .filter(|n| rules.reason.is_match(&n.name))
        .collect();
    let states: Vec<&Name> = of("state")
        .into_iter()
        .filter(|n| rules.states.contains(&n.name))
        .collect();
    assert!(
        !types.is_empty() && !reasons.is_empty() && !states.is_empty(),
        "{day}: KIM declared no type, reason or state it still allows"
    );
    let statuses = ["True", "False", "Unknown"];
    let conditions: Vec<Value> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let reason = &reasons[(j + i) % reasons.len()].name;
            let message = if i == 0 && j.is_multiple_of(3) {
                // Gardener's errors reach KIM's messages verbatim: several lines, quotes, and
                // non-ASCII text.
                format!(
                    "{reason}: shoot \"{day}\" reconcile failed:\n  task \"Waiting until shoot infrastructure has been reconciled\" failed – Größe überschritten (quota)"
                )
            } else {
                format!("{} {reason}", t.name)
            };
            condition(&t.name, statuses[(j + i) % 3], reason, &message, day)
        })
        .collect();
    let state = &states[j % states.len()].name;
    let mut status = json!({"state": state, "conditions": conditions});
    if j.is_multiple_of(2) {
        status["provisioningCompleted"] = json!(state == "Ready");
    }
    if j % 3 != 2 {
        let (kind, op_state) = [
            ("Create", "Processing"),
            ("Reconcile", "Succeeded"),
            ("Delete", "Error"),
        ][j % 3];
        status["shootLastOperation"] = json!({
            "type": kind,
            "state": op_state,
            "progress": (j * 7) % 101,
            "description": "Shoot cluster has been successfully reconciled.",
            "lastUpdateTime": format!("{day}T10:05:00Z")
        });
    }
    if state == "Failed" || j % 4 == 1 {
        status["shootLastErrors"] = json!([{
            "description": "infrastructure: quota exceeded for m6i.large in eu-central-1",
            "taskID": "Waiting until shoot infrastructure has been reconciled",
            "codes": ["ERR_INFRA_QUOTA_EXCEEDED", "ERR_CONFIGURATION_PROBLEM"],
            "lastUpdateTime": format!("{day}T10:04:00Z")
        }]);
    }
    if j % 3 == 1 {
        status["auditLogCR"] = json!(format!("auditlog-{}", j % 5));
    }
    status
}

/// `sample` with every member of `full` it lacks added (list items filled from `full`'s first
/// item); what the sample sets stays as it is.
fn fill(sample: &mut Value, full: &Value) {
    match (sample, full) {
        (Value::Object(s), Value::Object(f)) => {
            for (k, fv) in f {
                match s.get_mut(k) {
                    Some(sv) => fill(sv, fv),
                    None => {
                        s.insert(k.clone(), fv.clone());
                    }
                }
            }
        }
        (Value::Array(s), Value::Array(f)) => {
            if let Some(template) = f.first() {
                for item in s {
                    fill(item, template);
                }
            }
        }
        _ => {}
    }
}

/// The sample Runtimes as (file stem made a name, object), in `kcp-system`.
fn samples() -> Vec<(String, Value)> {
    kim::testing::model::sample_runtimes()
        .into_iter()
        .map(|(file, mut obj)| {
            let stem = file.trim_end_matches(".yaml").replace('_', "-");
            obj["metadata"]["namespace"] = json!(NS);
            (stem, obj)
        })
        .collect()
}

fn named(mut obj: Value, name: &str) -> Value {
    obj["metadata"]["name"] = json!(name);
    obj
}

/// The objects KIM's CRD stores (each proven so by [`kim_crd_stores_what_kims_crd_stores`]):
/// (what it is, object).
fn compatible_objects() -> Vec<(String, Value)> {
    let kim = kim_crd();
    let schema = schema_of(&kim);
    let rules = KimRules::of(&kim);
    let vocab = vocabulary();
    let samples = samples();
    let mut out = Vec::new();

    // The samples with statuses as KIM wrote them, one per day a name was first declared.
    // (The states of 2024-05-31 came before any condition: their day has no status to write.)
    let mut days: Vec<&str> = vocab
        .iter()
        .filter(|n| n.kind != "state")
        .map(|n| n.first_seen.as_str())
        .collect();
    days.sort();
    days.dedup();
    for (j, day) in days.iter().enumerate() {
        let (stem, sample) = &samples[j % samples.len()];
        let mut obj = named(sample.clone(), &format!("{stem}-kim-{day}"));
        obj["status"] = kim_status(&vocab, &rules, day, j);
        out.push((format!("{stem} with KIM's status of {day}"), obj));
    }

    // Maximal objects: one per provider type (the largest enum of KIM's schema).
    let providers =
        schema["properties"]["spec"]["properties"]["shoot"]["properties"]["provider"]["properties"]
            ["type"]["enum"]
            .as_array()
            .expect("KIM's provider enum")
            .len();
    let mut maximal = Vec::new();
    for v in 0..providers {
        let mut obj = value_for(schema, "", v);
        obj["apiVersion"] = json!(API_VERSION);
        obj["kind"] = json!("Runtime");
        obj["metadata"] = json!({
            "name": format!("maximal-{v}"),
            "namespace": NS,
            "labels": {"kyma-project.io/runtime-id": format!("maximal-{v}")},
            "annotations": {"example.com/note": "every property of KIM's schema"}
        });
        // Conditions in KIM's vocabulary, every field set.
        obj["status"]["conditions"] =
            kim_status(&vocab, &rules, "2026-07-16", v)["conditions"].clone();
        let provider = obj["spec"]["shoot"]["provider"]["type"].clone();
        maximal.push(obj.clone());
        out.push((format!("maximal object, provider {provider}"), obj));
    }
    let mut edge = value_for(schema, "", EDGE);
    edge["apiVersion"] = json!(API_VERSION);
    edge["kind"] = json!("Runtime");
    edge["metadata"] = json!({"name": "maximal-edge-values", "namespace": NS});
    edge["status"]["conditions"] = json!([condition(
        "Provisioned",
        "Unknown",
        "Pending",
        "",
        "2026-07-16"
    )]);
    out.push(("maximal object with edge values".into(), edge));

    // Every property of KIM's schema is set by some maximal object.
    let (mut declared, mut set) = (BTreeSet::new(), BTreeSet::new());
    schema_paths(schema, "", &mut declared);
    for obj in &maximal {
        value_paths(obj, schema, "", &mut set);
    }
    let unset: Vec<_> = declared.difference(&set).collect();
    assert!(
        unset.is_empty(),
        "properties of KIM's schema no maximal object sets: {unset:?}"
    );
    assert!(declared.len() > 300, "{} properties", declared.len());

    // Each sample filled up with what it does not set.
    for (i, (stem, sample)) in samples.iter().enumerate() {
        let mut obj = named(sample.clone(), &format!("{stem}-filled"));
        fill(&mut obj, &maximal[i % maximal.len()]);
        out.push((
            format!("{stem} filled with every property of KIM's schema"),
            obj,
        ));
    }
    out
}

/// Statuses with a name KIM once declared that its CRD refuses today, with the field the
/// refusal must name: (what it is, object, field).
fn refused_objects() -> Vec<(String, Value, String)> {
    let kim = kim_crd();
    let rules = KimRules::of(&kim);
    let (stem, sample) = samples().remove(0);
    let mut out = Vec::new();
    for (i, n) in vocabulary().iter().enumerate() {
        let (status, field) = match n.kind.as_str() {
            "reason" if !rules.reason.is_match(&n.name) => (
                json!({"state": "Pending", "conditions": [condition("Provisioned", "Unknown", &n.name, "retired", &n.first_seen)]}),
                "status.conditions[0].reason",
            ),
            "type" if !rules.kind.is_match(&n.name) => (
                json!({"state": "Pending", "conditions": [condition(&n.name, "Unknown", "Pending", "retired", &n.first_seen)]}),
                "status.conditions[0].type",
            ),
            "state" if !rules.states.contains(&n.name) => {
                (json!({"state": n.name, "conditions": []}), "status.state")
            }
            _ => continue,
        };
        let mut obj = named(sample.clone(), &format!("{stem}-refused-{i}"));
        obj["status"] = status;
        out.push((
            format!(
                "retired {} {:?} ({}–{})",
                n.kind, n.name, n.first_seen, n.last_seen
            ),
            obj,
            field.to_string(),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------------

/// What a server did with an object.
#[derive(Debug)]
enum Stored {
    /// Created, status written, read back: every member as sent.
    Kept,
    /// Stored, but these members were pruned or changed (JSON pointers, with the values).
    Lost(Vec<String>),
    /// Refused, at `create` or at the status write: the server's message.
    Refused(String),
}

/// JSON pointer escaping of one key (`kyma-project.io/shoot-name` → `kyma-project.io~1shoot-name`).
fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.floor_char_boundary(80)])
    } else {
        s
    }
}

/// The members of `sent` that `stored` lacks or holds differently (the server adds members of
/// its own, metadata.uid and the like: those are not differences).
fn lost(sent: &Value, stored: &Value, at: &str, out: &mut Vec<String>) {
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let here = format!("{at}/{}", escape(k));
                match b.get(k) {
                    Some(w) => lost(v, w, &here, out),
                    None => out.push(format!("{here} pruned")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                lost(v, w, &format!("{at}/{i}"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!(
            "{at} changed: sent {}, stored {}",
            short(a),
            short(b)
        )),
    }
}

fn message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    }
}

/// Creates `obj` (its status aside: `create` ignores it on a CRD with a status subresource),
/// compares what `create` answered, writes the status through `runtimes/status` as KIM does
/// (a merge patch), reads the object back and compares it with everything sent.
async fn store(api: &Api<DynamicObject>, obj: &Value) -> Stored {
    let name = obj["metadata"]["name"].as_str().expect("a name");
    let mut spec = obj.clone();
    let status = spec.as_object_mut().and_then(|o| o.remove("status"));
    let sent: DynamicObject = serde_json::from_value(spec.clone()).expect("an object");
    let created = match api.create(&PostParams::default(), &sent).await {
        Ok(c) => serde_json::to_value(c).unwrap(),
        Err(e) => return Stored::Refused(format!("create: {}", message(e))),
    };
    let mut diffs = Vec::new();
    lost(&spec, &created, "", &mut diffs);
    if let Some(status) = status {
        let patch = json!({"status": status});
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            return Stored::Refused(format!("status write: {}", message(e)));
        }
    }
    let stored = serde_json::to_value(api.get(name).await.expect("read back")).unwrap();
    lost(obj, &stored, "", &mut diffs);
    diffs.sort();
    diffs.dedup();
    if diffs.is_empty() {
        Stored::Kept
    } else {
        Stored::Lost(diffs)
    }
}

/// Stores each object on the server behind `api` ([`store`]) and returns one line for each it
/// did not keep as sent: `<what>: <pointer> pruned`, `<what>: <pointer> changed: …` or
/// `<what>: refused: <the server's message>`. Empty: every object kept, every field as sent.
async fn not_kept(api: &Api<DynamicObject>, objects: &[(String, Value)]) -> Vec<String> {
    let mut out = Vec::new();
    for (what, obj) in objects {
        match store(api, obj).await {
            Stored::Kept => {}
            Stored::Lost(d) => out.extend(d.into_iter().map(|d| format!("{what}: {d}"))),
            Stored::Refused(m) => out.push(format!("{what}: refused: {m}")),
        }
    }
    out
}

/// A control plane of its own serving `crd` (JSON or YAML), with namespace `kcp-system`.
async fn serving(crd: &str) -> (ControlPlane, Api<DynamicObject>) {
    let cp = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .expect("join")
        .expect("control plane");
    cp.install_crds(crd).await.expect("the CRD installs");
    cp.create_namespace(NS).await;
    let api = Api::namespaced_with(cp.admin().await, NS, &runtime_resource());
    (cp, api)
}

/// Every object KIM's CRD stores unchanged, ours stores unchanged; the names KIM's refuses
/// today, ours refuses on the same field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kim_crd_stores_what_kims_crd_stores() {
    let t0 = Instant::now();
    let objects = compatible_objects();
    let refused = refused_objects();
    let kim_yaml = serde_json::to_string(&kim_crd()).unwrap();
    let ours_yaml = serde_json::to_string(&our_crd()).unwrap();
    let ((kim_cp, kim), (_our_cp, ours)) = tokio::join!(serving(&kim_yaml), serving(&ours_yaml));
    eprintln!(
        "real_crd: two control planes up in {:.1} s; {} objects, {} refused names",
        t0.elapsed().as_secs_f64(),
        objects.len(),
        refused.len()
    );

    // Valid under KIM's CRD: stored by it with nothing pruned or changed.
    let failures = not_kept(&kim, &objects).await;
    assert!(
        failures.is_empty(),
        "the test's objects are not all valid under KIM's CRD:\n{}",
        failures.join("\n")
    );
    // And under ours.
    let failures = not_kept(&ours, &objects).await;
    assert!(
        failures.is_empty(),
        "kim's CRD does not store what KIM's stores:\n{}",
        failures.join("\n")
    );

    // KIM's retired names its CRD refuses today: ours refuses them too, on the same field.
    assert!(!refused.is_empty());
    for (what, obj, field) in &refused {
        for (server, api) in [("KIM's CRD", &kim), ("kim's CRD", &ours)] {
            match store(api, obj).await {
                Stored::Refused(m) => {
                    assert!(
                        m.starts_with("status write: ") && m.contains(&format!("{field}: ")),
                        "{server}, {what}: refused, but not on {field}: {m}"
                    );
                    eprintln!("{server}, {what}: {m}");
                }
                other => panic!("{server} did not refuse {what}: {other:?}"),
            }
        }
    }

    // A cluster switched from KIM's CRD to ours: what KIM's stored is read through ours (which
    // prunes on read too) unchanged, and a status write keeps it.
    kim_cp
        .install_crds(&ours_yaml)
        .await
        .expect("ours replaces KIM's");
    served_with_column(&kim_cp, "SHOOT-NAME").await;
    let failures = read_back(&kim, &objects).await;
    assert!(
        failures.is_empty(),
        "stored under KIM's CRD, read or rewritten through kim's:\n{}",
        failures.join("\n")
    );
    eprintln!("real_crd: done in {:.1} s", t0.elapsed().as_secs_f64());
}

/// Waits (at most 30 s) until `cp` serves Runtimes with printer column `column` (`SHOOT-NAME`
/// is our CRD's only, `Provider` KIM's): the handler of a replaced CRD is in place.
async fn served_with_column(cp: &ControlPlane, column: &str) {
    let http = cp.http_client(cp.admin_cert()).expect("http client");
    let url = format!(
        "{}/apis/infrastructuremanager.kyma-project.io/v1/namespaces/{NS}/runtimes?limit=1",
        cp.url()
    );
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let table: Value = http
            .get(&url)
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .send()
            .await
            .expect("a table")
            .json()
            .await
            .expect("JSON");
        let columns: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        if columns.contains(&column) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no column {column}: still served with {columns:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Reads each object back and compares it with what was sent, then writes its status again
/// (the same status, a merge patch) and compares once more; one line per difference.
async fn read_back(api: &Api<DynamicObject>, objects: &[(String, Value)]) -> Vec<String> {
    let mut out = Vec::new();
    for (what, obj) in objects {
        let name = obj["metadata"]["name"].as_str().expect("a name");
        let mut diffs = Vec::new();
        let stored = serde_json::to_value(api.get(name).await.expect("read")).unwrap();
        lost(obj, &stored, "", &mut diffs);
        let patch = json!({"status": obj["status"]});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => lost(obj, &serde_json::to_value(written).unwrap(), "", &mut diffs),
            Err(e) => diffs.push(format!("status write refused: {}", message(e))),
        }
        diffs.sort();
        diffs.dedup();
        out.extend(diffs.into_iter().map(|d| format!("{what}: {d}")));
    }
    out
}

/// The same check against a copy of our CRD with `status.shootLastErrors` removed and
/// `Terminating` taken out of the `status.state` enum fails, naming both fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tightened_crd_fails_the_same_check_naming_the_fields() {
    let mut crd = our_crd();
    let status = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
        .and_then(Value::as_object_mut)
        .expect("our status schema");
    assert!(status.remove("shootLastErrors").is_some());
    let states = status["state"]["enum"].as_array_mut().expect("state enum");
    states.retain(|s| s != "Terminating");
    let (cp, api) = serving(&serde_json::to_string(&crd).unwrap()).await;
    let objects = compatible_objects();
    let failures = not_kept(&api, &objects).await;
    eprintln!(
        "tightened CRD: {} of {} lines:\n{}",
        failures.len(),
        objects.len(),
        failures.join("\n")
    );
    let pruned = failures
        .iter()
        .filter(|f| f.ends_with(": /status/shootLastErrors pruned"))
        .count();
    let refused = failures
        .iter()
        .filter(|f| {
            f.contains(": refused: status write: ")
                && f.contains("status.state: Unsupported value: \"Terminating\"")
        })
        .count();
    let with_errors = objects
        .iter()
        .filter(|(_, o)| o["status"]["shootLastErrors"].is_array())
        .count();
    let terminating = objects
        .iter()
        .filter(|(_, o)| o["status"]["state"] == "Terminating")
        .count();
    assert!(with_errors > 0 && terminating > 0);
    // Every object with shootLastErrors and not refused lost it; every Terminating one was
    // refused; nothing else failed.
    let both = objects
        .iter()
        .filter(|(_, o)| {
            o["status"]["shootLastErrors"].is_array() && o["status"]["state"] == "Terminating"
        })
        .count();
    assert_eq!(pruned, with_errors - both, "{failures:#?}");
    assert_eq!(refused, terminating, "{failures:#?}");
    assert_eq!(failures.len(), pruned + refused, "{failures:#?}");

    // The switch check fails too: objects stored under KIM's CRD, read and rewritten through
    // the tightened copy, lose shootLastErrors on read. (The stored `Terminating` is kept,
    // and rewriting it unchanged is allowed: validation ratcheting. Only a create, as in
    // `not_kept`, finds a narrowed enum.)
    let tightened = serde_json::to_string(&crd).unwrap();
    cp.install_crds(&serde_json::to_string(&kim_crd()).unwrap())
        .await
        .expect("KIM's CRD replaces the copy");
    served_with_column(&cp, "Provider").await;
    let era = "kim-era";
    cp.create_namespace(era).await;
    let stored_by_kim: Vec<(String, Value)> = objects
        .iter()
        .map(|(what, o)| {
            let mut o = o.clone();
            o["metadata"]["namespace"] = json!(era);
            (what.clone(), o)
        })
        .collect();
    let api: Api<DynamicObject> = Api::namespaced_with(cp.admin().await, era, &runtime_resource());
    assert_eq!(not_kept(&api, &stored_by_kim).await, Vec::<String>::new());
    cp.install_crds(&tightened)
        .await
        .expect("the copy replaces KIM's");
    served_with_column(&cp, "SHOOT-NAME").await;
    let failures = read_back(&api, &stored_by_kim).await;
    eprintln!(
        "KIM's CRD replaced by the tightened copy: {} lines:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let pruned = failures
        .iter()
        .filter(|f| f.ends_with(": /status/shootLastErrors pruned"))
        .count();
    assert_eq!(pruned, with_errors, "{failures:#?}");
    assert_eq!(failures.len(), pruned, "{failures:#?}");
}
