//! The API server's schema check of a Runtime, offline: what kube-apiserver does with a
//! Runtime it is asked to store, before the validating webhooks see it (`kim check`,
//! `kim review`).
//!
//! For a custom resource the API server (`k8s.io/apiextensions-apiserver`):
//! 1. prunes fields the CRD's structural schema does not declare (`pruning.Prune`; with
//!    `fieldValidation=Strict`, kubectl's default, it refuses them instead), drops `null`s of
//!    fields that are not `nullable` and have no default
//!    (`defaulting.PruneNonNullableNullsWithoutDefaults`) and applies the schema's `default`s;
//! 2. calls the mutating webhooks;
//! 3. validates the object against the `openAPIV3Schema` (kube-openapi's validator: types,
//!    `enum`, `required`, `pattern`, lengths, item counts, bounds, and the string formats it
//!    knows) and answers `422 Invalid` with one field error per violation;
//! 4. calls the validating webhooks.
//!
//! [`check`] does 1 and 3 on one object, with the schema of [`crate::crd::open_api_v3_schema`]
//! compiled once by the `jsonschema` crate (draft 7, where `1.0` is an integer as for
//! kube-openapi; patterns with the `regex` crate, RE2 syntax like Go's). The translation keeps
//! the API server's meaning: `x-kubernetes-int-or-string` is `integer` or `string`,
//! `nullable` adds `null`, and of the `format`s only those the API server checks on strings are
//! checked, with its own rules (`date-time`: kube-openapi's `strfmt.IsDateTime`; `byte`:
//! govalidator's `IsBase64`); `int32`/`int64`/`double` are not checked by the API server and
//! not here.
//!
//! Not done here, and done by the API server: `metadata` is only checked to be an object (the
//! API server validates names, labels, annotations, …); CEL rules
//! (`x-kubernetes-validations`) are not evaluated (kim's CRD has none); list-map/set
//! uniqueness (`x-kubernetes-list-type`) is not checked (kim's CRD declares no such list);
//! validation ratcheting (since Kubernetes 1.30 an update may keep an invalid value it does not
//! change) is not modelled: every invalid value is reported. Unknown fields are reported in
//! [`Report::unknown_fields`], not as errors (the API server's default is to drop them with a
//! warning).

use crate::api::Runtime;

/// The schema check as `kim check --help` and `kim review --help` explain it.
pub(crate) const CLI_HELP: &str = "\
Schema check: before the webhooks' verdict the Runtime(s) are checked as the API server checks \
them against the CRD's openAPIV3Schema (`kim crd`): types, enums, required fields, patterns, \
lengths, item counts, bounds and the date-time/byte formats, after dropping unknown fields (a \
warning), dropping nulls of optional fields and applying defaults. `kim check` checks --new \
with the defaulting patch applied; `kim review` checks request.object when it is a Runtime (a \
mutate review with the answered patch applied). The stored object (--old, request.oldObject) \
is not checked: the API server does not validate it again. A \
Runtime the API server would refuse (422 Invalid) is reported one field per line \
(`kim: --new: invalid Runtime: spec.shoot.purpose: ...`) and exits 2, without a verdict. Not \
checked as the API server does: metadata (names, labels, annotations), CEL rules \
(x-kubernetes-validations; the CRD has none), list-map/set uniqueness (x-kubernetes-list-type; \
none either), strict field validation (unknown fields are only warned about) and validation \
ratcheting (an update may keep an invalid value it does not change; it is reported here).";
use kube::Resource;
use regex::Regex;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::LazyLock;

/// One reason the API server would refuse the object: the field (`spec.shoot.purpose`,
/// `status.conditions[0].reason`; empty for the object itself) and what the schema expects
/// there, in the API server's words where it has them (`Required value`, `Unsupported value`,
/// `Invalid value`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, dotted, with `[i]` for list items.
    pub path: String,
    /// What is wrong and what the schema expects.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Why the API server would refuse the object (`422 Invalid`); empty when it would store
    /// it.
    pub errors: Vec<FieldError>,
    /// Fields the schema does not declare (dotted paths): the API server drops them (and
    /// refuses the object when the client asks for strict field validation).
    pub unknown_fields: Vec<String>,
}

impl Report {
    /// True when the API server would accept the object.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The compiled Runtime schema: the CRD schema (for pruning and defaulting) and its
/// `jsonschema` validator.
struct Checker {
    structural: Value,
    validator: jsonschema::Validator,
}

/// Compiled on first use; an error here is a bug in the CRD generator (tests compile it).
static CHECKER: LazyLock<Result<Checker, String>> = LazyLock::new(|| {
    let structural = crate::crd::open_api_v3_schema();
    let validator = jsonschema::draft7::options()
        .should_validate_formats(true)
        .with_format("date-time", is_k8s_date_time)
        .with_format("byte", is_k8s_byte)
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(&to_json_schema(&structural))
        .map_err(|e| format!("the Runtime CRD schema does not compile: {e}"))?;
    Ok(Checker {
        structural,
        validator,
    })
});

/// Checks `object` as the API server would before storing it as a Runtime (module docs):
/// prunes, drops non-nullable `null`s, applies defaults, then validates against the CRD's
/// `openAPIV3Schema`. `apiVersion` and `kind`, when present, must be the Runtime's. Never
/// panics; an object that is not a JSON object is one error.
pub fn check(object: &Value) -> Report {
    let checker = match &*CHECKER {
        Ok(c) => c,
        Err(e) => {
            return Report {
                errors: vec![FieldError {
                    path: String::new(),
                    message: e.clone(),
                }],
                unknown_fields: Vec::new(),
            };
        }
    };
    let mut report = Report::default();
    let mut object = object.clone();
    prepare(
        &mut object,
        &checker.structural,
        "",
        &mut report.unknown_fields,
    );
    large_integers(&object, &checker.structural, "", &mut report.errors);
    for (field, expected) in [
        ("apiVersion", Runtime::api_version(&()).into_owned()),
        ("kind", Runtime::kind(&()).into_owned()),
    ] {
        if let Some(Value::String(found)) = object.get(field)
            && *found != expected
        {
            report.errors.push(FieldError {
                path: field.into(),
                message: format!(
                    "Invalid value: {}: must be {expected:?}",
                    short(&object[field])
                ),
            });
        }
    }
    for error in checker.validator.iter_errors(&object) {
        report.errors.push(field_error(&error));
    }
    report
}

/// True when `object` declares itself a Runtime (`apiVersion`
/// `infrastructuremanager.kyma-project.io/v1`, `kind: Runtime`).
pub fn is_runtime(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some(Runtime::api_version(&()).as_ref())
        && object.get("kind").and_then(Value::as_str) == Some(Runtime::kind(&()).as_ref())
}

/// The Runtime of an AdmissionReview that the API server checks against the schema:
/// `request.object`, labelled so, when it is an object and declares itself a Runtime or
/// `request.kind` is the Runtime's group/version/kind. `request.oldObject` is what is stored:
/// the API server does not validate it again (a stored Runtime with, say, a retired state
/// stays readable and writable), so neither does this.
pub(crate) fn review_runtimes(review: &Value) -> Vec<(&'static str, &Value)> {
    let request = &review["request"];
    let kind = &request["kind"];
    let by_kind = kind["group"].as_str() == Some(Runtime::group(&()).as_ref())
        && kind["version"].as_str() == Some(Runtime::version(&()).as_ref())
        && kind["kind"].as_str() == Some(Runtime::kind(&()).as_ref());
    [("request.object", &request["object"])]
        .into_iter()
        .filter(|(_, o)| o.is_object() && (by_kind || is_runtime(o)))
        .collect()
}

/// The CRD's structural schema as a JSON Schema (draft 7) with the API server's meaning
/// (module docs). Keywords JSON Schema does not know (`x-kubernetes-*`) are left in place and
/// ignored by the validator.
fn to_json_schema(node: &Value) -> Value {
    let Some(map) = node.as_object() else {
        return node.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, s)| (name.clone(), to_json_schema(s)))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            "items" | "additionalProperties" | "not" => to_json_schema(value),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                value
                    .as_array()
                    .map(|all| all.iter().map(to_json_schema).collect())
                    .unwrap_or_default(),
            ),
            // Checked only where the API server checks it: on strings, with its rules.
            "format" if !matches!(value.as_str(), Some("date-time" | "byte")) => continue,
            "default" | "description" | "example" => continue,
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        out.insert("type".into(), serde_json::json!(["integer", "string"]));
    }
    if map.get("nullable") == Some(&Value::Bool(true))
        && let Some(Value::String(t)) = out.get("type").cloned()
    {
        out.insert("type".into(), serde_json::json!([t, "null"]));
    }
    // OpenAPI v3.0's boolean exclusive bounds are numbers in draft 7.
    for (flag, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match out.remove(flag) {
            Some(Value::Bool(true)) => {
                if let Some(limit) = out.remove(bound) {
                    out.insert(flag.into(), limit);
                }
            }
            Some(Value::Bool(false)) | None => {}
            Some(other) => {
                out.insert(flag.into(), other);
            }
        }
    }
    Value::Object(out)
}

/// The API server's decoding steps on `value` at `path` with `schema` (structural): unknown
/// fields are removed (and listed in `unknown`), `null`s of non-nullable fields without a
/// default are removed, missing fields with a `default` get it. `metadata` at the root is left
/// alone (the API server handles ObjectMeta itself).
fn prepare(value: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|s| s.is_object());
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let field = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if path.is_empty() && key == "metadata" {
                    continue;
                }
                let Some(child) = properties.and_then(|p| p.get(&key)).or(additional) else {
                    if !preserve {
                        map.remove(&key);
                        unknown.push(field);
                    }
                    continue;
                };
                let nullable = child.get("nullable") == Some(&Value::Bool(true));
                if map[&key].is_null() && !nullable {
                    // Dropped here; defaulted below when the schema has a default.
                    map.remove(&key);
                    continue;
                }
                if let Some(v) = map.get_mut(&key) {
                    prepare(v, child, &field, unknown);
                }
            }
            for (key, child) in properties.into_iter().flatten() {
                if let Some(default) = child.get("default")
                    && !map.contains_key(key)
                {
                    map.insert(key.clone(), default.clone());
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prepare(item, item_schema, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Largest integer the API server takes from JSON as an `integer` field: it decodes a number
/// with a fraction or exponent (or one beyond int64) as a float64, and such a float is an
/// integer only up to 2^53 − 1 (`IsFloat64AJSONInteger`).
const MAX_JSON_FLOAT_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Numbers of `integer` fields that JSON Schema calls integers (`1e16`, `1.0e20`) but the API
/// server refuses: floats beyond ±(2^53 − 1).
fn large_integers(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Number(n)
            if schema.get("type").and_then(Value::as_str) == Some("integer")
                && n.is_f64()
                && n.as_f64().is_some_and(|f| f.abs() > MAX_JSON_FLOAT_INTEGER) =>
        {
            errors.push(FieldError {
                path: path.to_string(),
                message: format!("Invalid value: {n}: must be of type integer"),
            });
        }
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|s| s.is_object());
            for (key, child) in map {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    let field = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    large_integers(child, child_schema, &field, errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    large_integers(item, item_schema, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// kube-openapi's `strfmt.IsDateTime` (the `date-time` format of CRD schemas): lower-cased,
/// split at `t`, the first part a `YYYY-MM-DD` date, the second `hh:mm:ss[.frac](z|±hh:mm)`
/// with hh ≤ 23, mm ≤ 59, ss ≤ 59 (the offset's digits are not range-checked, parts after a
/// second `t` are ignored — as there).
pub fn is_k8s_date_time(s: &str) -> bool {
    static TIME: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
            .expect("the date-time pattern compiles")
    });
    let lower = s.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some(caps) = TIME.captures(time) else {
        return false;
    };
    is_go_full_date(date) && &caps[1] <= "23" && &caps[2] <= "59" && &caps[3] <= "59"
}

/// Go's `time.Parse("2006-01-02", s)`: four-digit year, two-digit month and day, a real date.
fn is_go_full_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        s.get(r.clone())
            .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|p| p.parse().ok())
    };
    match (digits(0..4), digits(5..7), digits(8..10)) {
        (Some(y), Some(m), Some(d)) => {
            i32::try_from(y).is_ok_and(|y| chrono::NaiveDate::from_ymd_opt(y, m, d).is_some())
        }
        _ => false,
    }
}

/// govalidator's `IsBase64` (the `byte` format of CRD schemas): padded standard base64 of at
/// least one byte.
pub fn is_k8s_byte(s: &str) -> bool {
    static BASE64: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
        )
        .expect("the base64 pattern compiles")
    });
    BASE64.is_match(s)
}

/// One `jsonschema` error as a field error in the API server's terms.
fn field_error(error: &jsonschema::ValidationError<'_>) -> FieldError {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    let mut path = String::new();
    for segment in error.instance_path() {
        match segment {
            jsonschema::paths::LocationSegment::Property(p) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&p);
            }
            jsonschema::paths::LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    let value = short(error.instance());
    let message = match error.kind() {
        K::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&name);
            "Required value".to_string()
        }
        K::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set
                    .into_iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!("Invalid value: {value}: must be of type {expected}")
        }
        K::Enum { options } => {
            let supported = options
                .as_array()
                .map(|o| o.iter().map(short).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            format!("Unsupported value: {value}: supported values: {supported}")
        }
        K::Pattern { pattern } => format!("Invalid value: {value}: must match '{pattern}'"),
        K::Format { format } => format!("Invalid value: {value}: must be of format {format}"),
        K::MaxLength { limit } => {
            format!("Too long: may not be longer than {limit} characters")
        }
        K::MinLength { limit } => {
            format!("Invalid value: {value}: must be at least {limit} characters long")
        }
        K::MaxItems { limit } => format!("Too many: must have at most {limit} items"),
        K::MinItems { limit } => format!("Invalid value: must have at least {limit} items"),
        K::Minimum { limit } => format!(
            "Invalid value: {value}: must be greater than or equal to {}",
            number(limit)
        ),
        K::Maximum { limit } => format!(
            "Invalid value: {value}: must be less than or equal to {}",
            number(limit)
        ),
        K::ExclusiveMinimum { limit } => format!(
            "Invalid value: {value}: must be greater than {}",
            number(limit)
        ),
        K::ExclusiveMaximum { limit } => format!(
            "Invalid value: {value}: must be less than {}",
            number(limit)
        ),
        _ => format!("Invalid value: {value}: {}", truncate(&error.to_string())),
    };
    FieldError { path, message }
}

/// A schema bound as written by hand: `0`, not the `0.0` of the CRD's float fields.
fn number(limit: &Value) -> String {
    match limit.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => limit.to_string(),
    }
}

/// `value` as JSON, cut to 80 characters (objects in messages stay readable).
fn short(value: &Value) -> String {
    truncate(&value.to_string())
}

fn truncate(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX - 1).collect();
        t.push('…');
        t
    }
}
