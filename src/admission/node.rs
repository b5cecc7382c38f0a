//! The scan's view of a `status`: [`Node`], a JSON value that borrows its strings from the
//! request body when they have no escapes, built by the scan (`scan.rs`) in the same pass as
//! the rest of the review, instead of a `serde_json::Value`.
//!
//! A `Node` reads exactly as the `Value` serde_json would give for the same text (numbers are
//! [`serde_json::Number`]s made as `Value` makes them; objects keep input order as
//! `preserve_order` does). Objects with a repeated key, with more than [`MAX_KEYS`] members or
//! with serde_json's private raw-value key are not held (see [`holds`]): the scan declines the
//! body, and serde_json decodes it with `Value`s, which then give the answer.
//!
//! Also here: the string deserializers that borrow from the body ([`BorrowedStr`], [`opt_cow`]).

use crate::status::JsonView;
use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::fmt;

/// Most members of one object inside a `status` (repeated keys are looked for by a linear scan).
const MAX_KEYS: usize = 32;

/// The key serde_json's `Value` treats as a raw value marker (with the `raw_value` feature).
pub(super) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A JSON value inside a `status`, borrowing its strings from the body when they have no
/// escapes. Objects have no repeated keys and are kept in input order.
#[derive(Debug)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Num(Number),
    Str(Cow<'a, str>),
    Arr(Vec<Node<'a>>),
    Obj(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl PartialEq for Node<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Node::Null, Node::Null) => true,
            (Node::Bool(a), Node::Bool(b)) => a == b,
            (Node::Num(a), Node::Num(b)) => a == b,
            (Node::Str(a), Node::Str(b)) => a == b,
            (Node::Arr(a), Node::Arr(b)) => a == b,
            // As maps (keys are unique on both sides).
            (Node::Obj(a), Node::Obj(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, v)| b.iter().any(|(k2, v2)| k == k2 && v == v2))
            }
            _ => false,
        }
    }
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Num(n) => n.serialize(s),
            Node::Str(v) => s.serialize_str(v),
            Node::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Node::Obj(members) => {
                let mut map = s.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k.as_ref(), v)?;
                }
                map.end()
            }
        }
    }
}

impl JsonView for Node<'_> {
    fn get(&self, key: &str) -> Option<&Self> {
        match self {
            Node::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn as_i64(&self) -> Option<i64> {
        match self {
            Node::Num(n) => n.as_i64(),
            _ => None,
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Node::Num(n) => n.as_f64(),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Self]> {
        match self {
            Node::Arr(a) => Some(a),
            _ => None,
        }
    }
    fn is_object(&self) -> bool {
        matches!(self, Node::Obj(_))
    }
    fn is_null(&self) -> bool {
        matches!(self, Node::Null)
    }
    fn eq_value(&self, v: &Value) -> bool {
        match (self, v) {
            (Node::Null, Value::Null) => true,
            (Node::Bool(a), Value::Bool(b)) => a == b,
            (Node::Num(a), Value::Number(b)) => a == b,
            (Node::Str(a), Value::String(b)) => a == b,
            (Node::Arr(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_value(y))
            }
            (Node::Obj(a), Value::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, x)| b.get(k.as_ref()).is_some_and(|y| x.eq_value(y)))
            }
            _ => false,
        }
    }
    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A string borrowed from the input when it has no escapes (object keys, `Cow` fields).
pub(super) struct BorrowedStr<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BorrowedStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// `Option<Cow<str>>` that borrows (`#[serde(deserialize_with = "opt_cow")]`): serde's own
/// `Option<Cow<str>>` always copies.
pub(super) fn opt_cow<'de: 'a, 'a, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<BorrowedStr<'de>>::deserialize(d)?.map(|s| s.0))
}

/// Whether an object whose member names so far are `keys` can take `key` as a [`Node`]: not a
/// repeated key (last wins in `Value`), not more than [`MAX_KEYS`] members (the linear search
/// for repeats), not the key `Value` reads as a raw value marker. Otherwise the object is left
/// to `Value`.
pub(super) fn holds<'k>(mut keys: impl ExactSizeIterator<Item = &'k str>, key: &str) -> bool {
    keys.len() < MAX_KEYS && key != RAW_VALUE_TOKEN && !keys.any(|k| k == key)
}

#[cfg(test)]
pub(super) mod tests {
    //! Differential tests: for every body, `review` with statuses read as [`Node`]s by the
    //! scan answers byte for byte as serde_json with statuses read as `Value`s (`review_serde`).
    use super::super::{Hook, Outcome, decode, review, review_serde, scan};
    use crate::status::Policy;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::{Value, json};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cond(t: &str, s: &str, r: &str, full: bool) -> Value {
        let mut c = json!({"type": t, "status": s, "reason": r});
        if full {
            c["message"] = json!(format!("{t} is {s}"));
            c["lastTransitionTime"] = json!("2026-11-01T10:00:00Z");
            c["observedGeneration"] = json!(2);
        }
        c
    }

    fn runtime(state: &str, conds: Vec<Value>, deleting: bool) -> Value {
        let mut o = json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "metadata": {
                "name": "r1", "namespace": "kcp-system", "generation": 2,
                "labels": {"kyma-project.io/runtime-id": "r1", "x": "a \"quoted\" \\ value\n\u{e9}"},
                "managedFields": [
                    {"manager": "keb", "operation": "Apply", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {".": {}, "f:shoot": {"f:name": {}, "f:x": {"k:{\"type\":\"a\"}": {}}}}}},
                    {"manager": "kim", "operation": "Update", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:state": {}}}, "time": "2026-11-01T10:01:00Z"}
                ]
            },
            "spec": {"shoot": {"name": "s", "provider": {"workers": [
                {"name": "w", "minimum": 1, "maximum": 3, "ratio": -1.5e-3, "zones": ["a", "b"], "on": true, "off": false, "none": null}
            ]}}},
            "status": {"state": state, "provisioningCompleted": false, "conditions": conds}
        });
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
        }
        o
    }

    fn review_of(old: Value, new: Value, user: &str) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0b7b6a8c-1111-2222-3333-444455556666",
                "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
                "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
                "subResource": "status",
                "name": "r1", "namespace": "kcp-system",
                "operation": "UPDATE",
                "userInfo": {"username": user, "uid": "u", "groups": ["system:authenticated", "g"]},
                "object": new,
                "oldObject": old,
                "dryRun": false,
                "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
            }
        })
    }

    const WRITER: &str = "system:serviceaccount:kim-system:kim-controller";

    fn bases() -> Vec<Value> {
        let pending = runtime(
            "Pending",
            vec![
                cond("Provisioned", "True", "ShootCreationCompleted", true),
                cond("KubeconfigReady", "True", "KubeconfigCreated", true),
                cond("Configured", "Unknown", "ConfigurationStarted", true),
            ],
            false,
        );
        let ready_full = runtime(
            "Ready",
            vec![
                cond("Provisioned", "True", "ShootCreationCompleted", true),
                cond("KubeconfigReady", "True", "KubeconfigCreated", true),
                cond("Configured", "True", "ConfigurationCompleted", true),
            ],
            false,
        );
        let ready_bare = runtime(
            "Ready",
            vec![
                cond("Provisioned", "True", "ShootCreationCompleted", false),
                cond("KubeconfigReady", "True", "KubeconfigCreated", false),
                cond("Configured", "True", "ConfigurationCompleted", false),
            ],
            false,
        );
        let bad = runtime(
            "Terminating",
            vec![
                cond("Provisioned", "False", "NoSuchReason", true),
                cond("Unknown", "Maybe", "", false),
                json!("not an object"),
            ],
            false,
        );
        let mut list = vec![
            review_of(pending.clone(), ready_full.clone(), WRITER),
            review_of(pending.clone(), ready_bare.clone(), WRITER),
            review_of(pending.clone(), bad, "someone"),
            review_of(ready_full.clone(), pending.clone(), WRITER),
            review_of(
                runtime("Pending", vec![], true),
                runtime("Terminating", vec![], true),
                WRITER,
            ),
        ];
        let mut no_status = review_of(pending.clone(), ready_full, WRITER);
        no_status["request"]["oldObject"]
            .as_object_mut()
            .unwrap()
            .remove("status");
        list.push(no_status);
        let mut pod = review_of(json!(null), json!({"kind": "Pod"}), "x");
        pod["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "pods"});
        pod["request"]["operation"] = json!("CREATE");
        list.push(pod);
        list
    }

    pub(in crate::admission) fn same(a: &Outcome, b: &Outcome) -> bool {
        a.body == b.body
            && a.violations == b.violations
            && a.allowed == b.allowed
            && a.code == b.code
            && a.uid == b.uid
            && a.operation == b.operation
            && a.user == b.user
            && a.dry_run == b.dry_run
            && a.patched == b.patched
            && a.rules == b.rules
            && a.detail == b.detail
    }

    /// Answers `body` on both paths and checks they agree: the scan (`review`) and serde_json
    /// (`review_serde`). Returns (decoded as a request by serde_json, taken by the scan).
    fn check(policy: &Policy, body: &[u8]) -> (bool, bool) {
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        let decoded = decode::decode_review(body).is_ok();
        let scanned = scan::scan_review(body).is_some();
        if scanned {
            // The scan takes only bodies serde_json takes, and decodes.
            assert!(
                serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() && decoded,
                "scanned a body serde_json refuses: {}",
                String::from_utf8_lossy(body)
            );
        }
        for hook in [Hook::Validate, Hook::Mutate] {
            let fast = review(hook, policy, body, now);
            let serde = review_serde(hook, policy, body, now);
            assert!(
                same(&fast, &serde),
                "{hook:?}: the scan differs from serde_json for body {}\nscan: {}\nserde: {}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(&fast.body),
                String::from_utf8_lossy(&serde.body)
            );
        }
        (decoded, scanned)
    }

    /// Values put in place of a random node of a valid review.
    fn pool() -> Vec<Value> {
        vec![
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(1),
            json!(2),
            json!(-1),
            json!(-0.0),
            json!(1.5),
            json!(1e300),
            json!(u64::MAX),
            json!(i64::MAX),
            json!((i64::MAX as u64) + 1),
            json!(""),
            json!("Ready"),
            json!("Pending"),
            json!("Terminating"),
            json!("True"),
            json!("False"),
            json!("Provisioned"),
            json!("ShootCreationCompleted"),
            json!("2026-11-01T10:00:00Z"),
            json!("2026-11-03T10:00:00Z"),
            json!("not a time"),
            json!("esc \"q\" \\ / \u{1} \n é 😀"),
            json!([]),
            json!({}),
            json!([1, "a", null]),
            json!({"a": {"b": [1, 2, {"c": "d"}]}}),
            json!({"type": "Provisioned", "status": "True", "reason": "ShootCreationCompleted"}),
            json!([{"type": "Provisioned", "status": "True", "reason": "ShootCreationCompleted", "observedGeneration": 0}]),
        ]
    }

    /// A node's path (object keys and array indexes) in `v`, walked by `steps`: each step goes
    /// one level down (to the child `Index` picks) unless its flag says stop (one in five).
    fn path_by(v: &Value, steps: &[(bool, Index)]) -> Vec<Value> {
        let mut path = Vec::new();
        let mut cur = v;
        for (stop, pick) in steps {
            match cur {
                Value::Object(m) if !m.is_empty() && !stop => {
                    let (k, next) = m.iter().nth(pick.index(m.len())).unwrap();
                    path.push(json!(k));
                    cur = next;
                }
                Value::Array(a) if !a.is_empty() && !stop => {
                    let i = pick.index(a.len());
                    path.push(json!(i));
                    cur = &a[i];
                }
                _ => break,
            }
        }
        path
    }

    fn at<'v>(v: &'v mut Value, path: &[Value]) -> &'v mut Value {
        path.iter().fold(v, |v, p| match p {
            Value::String(k) => &mut v[k.as_str()],
            _ => &mut v[p.as_u64().unwrap() as usize],
        })
    }

    /// Textual edits: most make the JSON invalid, some make duplicate keys or odd forms.
    const TOKENS: &[&str] = &[
        "\"",
        "\\",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        "\t",
        "0",
        "-",
        "1.5",
        "e5",
        "00",
        "null",
        "nul",
        "true",
        "tru",
        "\\u00e9",
        "\\ud800",
        "\\uD83D\\uDE00",
        "\\x",
        "\u{1}",
        "é",
        "\"uid\":\"dup\",",
        "\"status\":null,",
        "\"status\":{},",
        "\"kind\":\"AdmissionReview\",",
        "\"generation\":3,",
        "\"object\":{},",
        "\"a\":1,",
        "[]",
        "{}",
        "1e999",
        "-0",
        "2.0",
        "\"deletionTimestamp\":0,",
        "\"state\":\"Ready\",",
        "\"groups\":null,",
        "\"dryRun\":true,",
        "\"metadata\":null,",
        "\"request\":null,",
        "\"username\":\"\\u0061dmin\",",
    ];

    /// One textual edit: at `at` (a position in the text, or one past it) remove a byte
    /// (`kind` 0), copy the span of up to 40 bytes at `from` there (1; duplicate keys, repeated
    /// members) or insert a token (2, 3).
    #[derive(Clone, Debug)]
    struct TextEdit {
        at: Index,
        kind: u8,
        from: Index,
        len: usize,
        token: Index,
    }

    fn text_edit() -> impl Strategy<Value = TextEdit> {
        (
            any::<Index>(),
            0u8..4,
            any::<Index>(),
            0usize..40,
            any::<Index>(),
        )
            .prop_map(|(at, kind, from, len, token)| TextEdit {
                at,
                kind,
                from,
                len,
                token,
            })
    }

    fn apply(t: &mut Vec<u8>, e: &TextEdit) {
        let i = e.at.index(t.len() + 1);
        match e.kind {
            0 if i < t.len() => {
                t.remove(i);
            }
            1 => {
                let a = e.from.index(t.len());
                let b = (a + 1 + e.len).min(t.len());
                let span = t[a..b].to_vec();
                t.splice(i..i, span);
            }
            _ => {
                let tok = TOKENS[e.token.index(TOKENS.len())].as_bytes();
                t.splice(i..i, tok.iter().copied());
            }
        }
    }

    #[test]
    fn nodes_answer_exactly_as_values() {
        let policy = Policy::builtin();
        let bases = bases();
        let pool = pool();
        let decoded = AtomicUsize::new(0);
        let scanned = AtomicUsize::new(0);
        let total = AtomicUsize::new(0);
        for base in &bases {
            let text = serde_json::to_string(base).unwrap();
            assert_eq!(
                check(&policy, text.as_bytes()),
                (true, true),
                "base: {text}"
            );
            let pretty = serde_json::to_string_pretty(base).unwrap();
            assert_eq!(check(&policy, pretty.as_bytes()), (true, true));
        }
        let count = |(request, scan): (bool, bool)| {
            total.fetch_add(1, Ordering::Relaxed);
            decoded.fetch_add(usize::from(request), Ordering::Relaxed);
            scanned.fetch_add(usize::from(scan), Ordering::Relaxed);
        };
        // Structural edits: a node of a base replaced by a pool value or (one in six) removed.
        let structural = (
            any::<Index>(),
            prop::collection::vec((prop::bool::weighted(0.2), any::<Index>()), 0..12),
            prop::bool::weighted(1.0 / 6.0),
            any::<Index>(),
            prop::bool::weighted(0.25),
        );
        let mut runner = TestRunner::new(Config::with_cases(600 * bases.len() as u32));
        runner
            .run(&structural, |(base, steps, remove, value, pretty)| {
                let mut v = base.get(&bases).clone();
                let path = path_by(&v, &steps);
                if path.is_empty() {
                    return Ok(());
                }
                if remove {
                    let (last, parent) = path.split_last().unwrap();
                    match (at(&mut v, parent), last) {
                        (Value::Object(m), Value::String(k)) => {
                            m.shift_remove(k);
                        }
                        (Value::Array(a), i) => {
                            a.remove(i.as_u64().unwrap() as usize);
                        }
                        _ => {}
                    }
                } else {
                    *at(&mut v, &path) = value.get(&pool).clone();
                }
                let text = if pretty {
                    serde_json::to_string_pretty(&v).unwrap()
                } else {
                    serde_json::to_string(&v).unwrap()
                };
                count(check(&policy, text.as_bytes()));
                Ok(())
            })
            .unwrap();
        // Textual edits of a base's compact text, one to three each.
        let textual = (any::<Index>(), prop::collection::vec(text_edit(), 1..=3));
        let mut runner = TestRunner::new(Config::with_cases(1500 * bases.len() as u32));
        runner
            .run(&textual, |(base, edits)| {
                let mut t = serde_json::to_vec(base.get(&bases)).unwrap();
                for e in &edits {
                    apply(&mut t, e);
                }
                count(check(&policy, &t));
                Ok(())
            })
            .unwrap();
        let (decoded, scanned, total) = (
            decoded.into_inner(),
            scanned.into_inner(),
            total.into_inner(),
        );
        // Both paths must actually decode a request on many of the valid variants.
        assert!(decoded * 20 > total, "decoded {decoded} of {total}");
        assert!(scanned * 20 > total, "scanned {scanned} of {total}");
        eprintln!("decoded by serde_json: {decoded} of {total} bodies, scanned: {scanned}");
    }

    #[test]
    fn deep_and_large_inputs_fall_back_or_match() {
        let policy = Policy::builtin();
        let base = bases().remove(0);
        for depth in [10, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 300, 5000] {
            for target in ["spec", "status"] {
                let mut v = base.clone();
                let nested = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
                v["request"]["object"][target] = json!("@@");
                let text = serde_json::to_string(&v)
                    .unwrap()
                    .replace("\"@@\"", &nested);
                check(&policy, text.as_bytes());
                let nested = format!("{}{{}}{}", "{\"a\":".repeat(depth), "}".repeat(depth));
                let text = serde_json::to_string(&v)
                    .unwrap()
                    .replace("\"@@\"", &nested);
                check(&policy, text.as_bytes());
            }
        }
        // Many keys and duplicate keys inside the status.
        let mut v = base.clone();
        let many: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i}"), json!(i))).collect();
        v["request"]["object"]["status"]["extra"] = Value::Object(many);
        check(&policy, serde_json::to_string(&v).unwrap().as_bytes());
        let text = serde_json::to_string(&base).unwrap().replacen(
            "\"state\":\"Ready\"",
            "\"state\":\"Failed\",\"state\":\"Ready\"",
            1,
        );
        check(&policy, text.as_bytes());
        // Objects a Node does not hold (the scan declines them): a repeated key deeper in the
        // status (read as a Value instead), serde_json's raw value marker key (refused), and
        // the most keys a Node holds and one more.
        for (from, to, decoded) in [
            (
                "\"provisioningCompleted\":false",
                "\"x\":{\"a\":1,\"b\":2,\"a\":[3]},\"provisioningCompleted\":false",
                true,
            ),
            (
                "\"provisioningCompleted\":false",
                "\"x\":{\"$serde_json::private::RawValue\":\"{\\\"b\\\":2}\"},\"provisioningCompleted\":false",
                false,
            ),
            (
                "\"provisioningCompleted\":false",
                "\"provisioningCompleted\":false,\"y\":[{\"$serde_json::private::RawValue\":\"1\"}]",
                false,
            ),
        ] {
            let text = serde_json::to_string(&base).unwrap().replacen(from, to, 1);
            assert_ne!(text, serde_json::to_string(&base).unwrap());
            assert_eq!(
                check(&policy, text.as_bytes()),
                (decoded, false),
                "read as Nodes: {text}"
            );
        }
        for (n, nodes) in [(31, true), (32, true), (33, false)] {
            let mut v = base.clone();
            v["request"]["object"]["status"]["extra"] =
                Value::Object((0..n).map(|i| (format!("k{i}"), json!(i))).collect());
            let text = serde_json::to_string(&v).unwrap();
            assert_eq!(check(&policy, text.as_bytes()), (true, nodes), "{n} keys");
        }
    }
}
