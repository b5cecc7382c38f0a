//! Server-side printing: `meta.k8s.io/v1` `Table` answers for get, list and watch when the
//! client asks for them (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, as kubectl
//! does for `kubectl get`), with a resource's printer columns the way kube-apiserver's custom
//! resource table convertor fills them
//! (`k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor`):
//!
//! - the first column is `Name` (`format: name`), then the printer columns in order;
//! - a `string` column holds the value the JSONPath finds, printed (a number as its decimal
//!   text, an object or list as JSON); `integer`, `number` and `boolean` columns hold the JSON
//!   value; a `date` column holds the age of a timestamp in kubectl's short form (`5s`,
//!   `3m20s`, `2d4h`, from `k8s.io/apimachinery/pkg/util/duration.HumanDuration`);
//! - a path that finds nothing gives `null` (kubectl prints `<none>`);
//! - a resource without printer columns gets `Name` and `Age`;
//! - each row carries the object as `PartialObjectMetadata` (`includeObject=Metadata`, the
//!   default), the whole object (`Object`) or nothing (`None`).
//!
//! The JSONPaths are the simple paths a CRD allows for printer columns: `.a.b`, escaped dots
//! in keys (`.metadata.labels.kyma-project\.io/shoot-name`) and list indexes (`.a[0].b`).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{
    http::to_meta,
    resource::{PrinterColumn, ResourceInfo},
};

/// Whether an `Accept` header asks for a `meta.k8s.io/v1` Table (kubectl lists it first, with
/// the plain object as fallback).
pub(crate) fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        params.first() == Some(&"application/json")
            && params.contains(&"as=Table")
            && params.contains(&"g=meta.k8s.io")
            && params.contains(&"v=v1")
    })
}

/// The `Content-Type` of a Table answer.
pub(crate) const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";

/// What a row carries (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn parse(s: Option<&str>) -> Result<Self, String> {
        match s {
            None | Some("Metadata") => Ok(Include::Metadata),
            Some("None") => Ok(Include::None),
            Some("Object") => Ok(Include::Object),
            Some(other) => Err(format!(
                "includeObject: Unsupported value: \"{other}\": supported values: \"None\", \"Metadata\", \"Object\""
            )),
        }
    }
}

fn columns(info: &ResourceInfo) -> Vec<PrinterColumn> {
    if info.printer_columns.is_empty() {
        vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }]
    } else {
        info.printer_columns.clone()
    }
}

/// The column definitions of a resource's tables.
pub(crate) fn column_definitions(info: &ResourceInfo) -> Value {
    let mut defs = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    for c in columns(info) {
        defs.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "description": c.description, "priority": c.priority,
        }));
    }
    Value::Array(defs)
}

/// One row of an object.
pub(crate) fn row(info: &ResourceInfo, obj: &Value, include: Include, now: DateTime<Utc>) -> Value {
    let mut cells = vec![
        obj.pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
    ];
    for c in columns(info) {
        cells.push(cell(&c, obj, now));
    }
    let mut row = json!({"cells": cells});
    match include {
        Include::None => {}
        Include::Metadata => row["object"] = to_meta(obj),
        Include::Object => row["object"] = obj.clone(),
    }
    row
}

/// A Table of objects; `metadata` is the list's (resourceVersion, continue, …);
/// `headers: false` leaves out the column definitions (watch events after the first).
pub(crate) fn table(
    info: &ResourceInfo,
    objects: &[Value],
    metadata: Value,
    include: Include,
    headers: bool,
) -> Value {
    let now = Utc::now();
    let rows: Vec<Value> = objects.iter().map(|o| row(info, o, include, now)).collect();
    let mut t = json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows,
    });
    if headers {
        t["columnDefinitions"] = column_definitions(info);
    }
    t
}

fn cell(c: &PrinterColumn, obj: &Value, now: DateTime<Utc>) -> Value {
    let Some(v) = lookup(obj, &c.json_path) else {
        return Value::Null;
    };
    if v.is_null() {
        return Value::Null;
    }
    match c.type_.as_str() {
        "string" => match v {
            Value::String(s) => Value::String(s.clone()),
            other => Value::String(other.to_string()),
        },
        "date" => match v.as_str() {
            Some(s) => match DateTime::parse_from_rfc3339(s) {
                Ok(t) => Value::String(human_duration(now - t.with_timezone(&Utc))),
                Err(_) => Value::String("<invalid>".into()),
            },
            None => Value::String("<invalid>".into()),
        },
        _ => v.clone(),
    }
}

/// Splits a simple JSONPath (`.a.b\.c[0]`) into keys and indexes; `None` for other syntax.
fn parse_path(path: &str) -> Option<Vec<Step>> {
    let path = path.strip_prefix('.')?;
    let mut steps = Vec::new();
    let mut key = String::new();
    let mut chars = path.chars().peekable();
    let flush = |key: &mut String, steps: &mut Vec<Step>| {
        if !key.is_empty() {
            steps.push(Step::Key(std::mem::take(key)));
        }
    };
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => key.push(chars.next()?),
            '.' => {
                if key.is_empty() && !matches!(steps.last(), Some(Step::Index(_))) {
                    return None;
                }
                flush(&mut key, &mut steps);
            }
            '[' => {
                flush(&mut key, &mut steps);
                let mut digits = String::new();
                loop {
                    match chars.next()? {
                        ']' => break,
                        d => digits.push(d),
                    }
                }
                steps.push(Step::Index(digits.trim().parse().ok()?));
            }
            c => key.push(c),
        }
    }
    flush(&mut key, &mut steps);
    Some(steps)
}

enum Step {
    Key(String),
    Index(usize),
}

/// The value a simple JSONPath finds in `obj`.
pub(crate) fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for step in parse_path(path)? {
        cur = match step {
            Step::Key(k) => cur.get(&k)?,
            Step::Index(i) => cur.get(i)?,
        };
    }
    Some(cur)
}

/// kubectl's short age (`HumanDuration` of `k8s.io/apimachinery/pkg/util/duration`).
pub(crate) fn human_duration(d: chrono::TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn paths_with_escaped_dots_and_indexes() {
        let obj = json!({"metadata": {"labels": {"kyma-project.io/shoot-name": "s1"}},
                         "spec": {"w": [{"n": 1}, {"n": 2}]}});
        assert_eq!(
            lookup(&obj, r".metadata.labels.kyma-project\.io/shoot-name"),
            Some(&json!("s1"))
        );
        assert_eq!(lookup(&obj, ".spec.w[1].n"), Some(&json!(2)));
        assert_eq!(lookup(&obj, ".spec.w[2].n"), None);
        assert_eq!(lookup(&obj, ".spec.missing"), None);
        assert_eq!(lookup(&obj, "spec"), None, "a path starts with a dot");
        assert_eq!(lookup(&obj, ".spec..w"), None);
        assert_eq!(lookup(&obj, ".spec.w[x]"), None);
    }

    #[test]
    fn ages_as_kubectl_prints_them() {
        let s = TimeDelta::seconds;
        for (d, want) in [
            (s(-5), "<invalid>"),
            (s(-1), "0s"),
            (s(0), "0s"),
            (s(119), "119s"),
            (s(120), "2m"),
            (s(200), "3m20s"),
            (s(600), "10m"),
            (s(3 * 3600), "3h"),
            (s(3 * 3600 + 60 * 5), "3h5m"),
            (s(9 * 3600), "9h"),
            (s(50 * 3600), "2d2h"),
            (s(9 * 24 * 3600), "9d"),
            (s(800 * 24 * 3600), "2y70d"),
            (s(9 * 365 * 24 * 3600), "9y"),
        ] {
            assert_eq!(human_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn accept_headers() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
        ));
    }
}
