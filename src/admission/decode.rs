//! Decoding of AdmissionReview requests by serde_json ([`decode_review`]): every body the scan
//! (`scan.rs`) declines, field by field, so that each refusal says precisely what is wrong.
//! The types here are also what the scan decodes into.

use super::node::{self, BorrowedStr};
use super::{REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use crate::status::{JsonView, Snapshot};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

#[derive(Deserialize)]
pub(super) struct ReviewIn<'a> {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<Value>,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
    /// Only in a bare AdmissionRequest (no envelope), as some projects publish captures.
    #[serde(borrow, default)]
    uid: Option<&'a RawValue>,
    /// Only in a bare AdmissionRequest.
    #[serde(borrow, default)]
    operation: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
pub(super) struct GroupResource<'a> {
    #[serde(borrow, default)]
    pub(super) group: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) resource: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
pub(super) struct GroupKind<'a> {
    #[serde(borrow, default)]
    pub(super) kind: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
pub(super) struct UserInfoIn {
    #[serde(default)]
    pub(super) username: Option<String>,
    #[serde(default)]
    pub(super) groups: Option<Vec<String>>,
}

/// `request` of an AdmissionReview; `O` is how `object`/`oldObject` are held: raw JSON as
/// serde_json reads the request (`&RawValue`), then as a [`Request`] decoded for evaluation.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn<'a, O> {
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    pub(super) uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) kind: Option<GroupKind<'a>>,
    #[serde(borrow, default)]
    pub(super) resource: Option<GroupResource<'a>>,
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    pub(super) sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    pub(super) operation: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) user_info: Option<UserInfoIn>,
    #[serde(default = "none")]
    pub(super) object: Option<O>,
    #[serde(default = "none")]
    pub(super) old_object: Option<O>,
    #[serde(default)]
    pub(super) dry_run: Option<bool>,
}

fn none<O>() -> Option<O> {
    None
}

/// A request as evaluation reads it: each object decoded with its `status` as `S` (a [`Node`]
/// from the scan, a `Value` from serde_json), or why it is not a valid Runtime.
///
/// [`Node`]: super::node::Node
pub(super) type Request<'a, S> = RequestIn<'a, Result<ObjectIn<'a, S>, String>>;

impl<'a> RequestIn<'a, &'a RawValue> {
    /// The request with its objects decoded (a `status` as a `Value`).
    fn decode_objects(self) -> Request<'a, Value> {
        let object = |raw: &'a RawValue, field: &str| {
            serde_json::from_str::<ObjectIn<'a>>(raw.get())
                .map_err(|e| format!("request.{field} is not a valid Runtime: {}", json_error(&e)))
        };
        RequestIn {
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            operation: self.operation,
            user_info: self.user_info,
            object: self.object.map(|o| object(o, "object")),
            old_object: self.old_object.map(|o| object(o, "oldObject")),
            dry_run: self.dry_run,
        }
    }
}

/// `request.object` / `request.oldObject` of a Runtime status UPDATE: present and valid, or
/// the message of the denial.
pub(super) fn object_of<'a, S>(
    o: Option<Result<ObjectIn<'a, S>, String>>,
    field: &str,
) -> Result<ObjectIn<'a, S>, String> {
    o.unwrap_or_else(|| {
        Err(format!(
            "request.{field} is required for a Runtime status UPDATE"
        ))
    })
}

/// Only the uid, for error paths where the full request does not decode.
#[derive(Deserialize)]
pub(super) struct UidOnly<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
}

#[derive(Deserialize)]
pub(super) struct MetaIn<'a> {
    #[serde(default)]
    pub(super) generation: Option<i64>,
    #[serde(rename = "deletionTimestamp", borrow, default)]
    pub(super) deletion_timestamp: Option<&'a RawValue>,
}

/// `request.object` / `request.oldObject`: the metadata kim reads and the `status` as `S`
/// (`Value`, or a [`Node`] from the scan); everything else is skipped.
///
/// [`Node`]: super::node::Node
#[derive(Deserialize)]
pub(super) struct ObjectIn<'a, S = Value> {
    #[serde(borrow, default)]
    pub(super) metadata: Option<MetaIn<'a>>,
    #[serde(default = "none")]
    pub(super) status: Option<S>,
}

impl<S: JsonView> ObjectIn<'_, S> {
    pub(super) fn snapshot(&self) -> Snapshot<'_, S> {
        Snapshot {
            generation: self.metadata.as_ref().and_then(|m| m.generation),
            deleting: self
                .metadata
                .as_ref()
                .and_then(|m| m.deletion_timestamp)
                .is_some_and(|d| d.get() != "null"),
            status: self.status.as_ref().filter(|s| !s.is_null()),
        }
    }
}

/// A JSON decoding error described without quoting the input: serde's messages copy the
/// offending string (which may be anything a client sent, a key included) — keep only the kind
/// of error, what was expected and the position.
pub(super) fn json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let at = format!("at line {} column {}", e.line(), e.column());
    match e.classify() {
        Category::Eof => format!("truncated JSON {at}"),
        Category::Syntax => format!("invalid JSON {at}"),
        Category::Io => format!("unreadable input {at}"),
        Category::Data => {
            let text = e.to_string();
            // "invalid type: string \"…\", expected struct X at line …" → "expected struct X"
            let expected = text
                .rfind(", expected ")
                .map(|i| &text[i + 2..])
                .map(|t| t.rfind(" at line ").map_or(t, |j| &t[..j]))
                .filter(|t| !t.contains('"') && !t.contains('`') && t.len() <= 120);
            match (text.starts_with("duplicate field"), expected) {
                (true, _) => format!("a field appears twice {at}"),
                (false, Some(exp)) => format!("a value has the wrong type or form ({exp}) {at}"),
                (false, None) => format!("a value has the wrong type or form {at}"),
            }
        }
    }
}

/// Best effort: the uid of a body that does not fully decode (e.g. `request.uid` readable but
/// `request.object` malformed, or only a prefix of an oversized body was read). A complete body
/// is parsed; otherwise the first `"uid": "…"` after `"request"` in the first 64 KiB is taken
/// (the apiserver serialises `uid` as the request's first field; a uid is a UUID, so a value
/// with escapes or over 128 bytes is not taken).
pub(super) fn salvage_uid(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Env<'a> {
        #[serde(borrow)]
        request: UidOnly<'a>,
    }
    if let Ok(e) = serde_json::from_slice::<Env<'_>>(body) {
        return Some(e.request.uid.into_owned());
    }
    let prefix = &body[..body.len().min(64 * 1024)];
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let after_request = find(prefix, b"\"request\"")? + 9;
    let rest = &prefix[after_request..];
    let key = find(rest, b"\"uid\"")? + 5;
    let mut i = key;
    let skip_ws = |i: &mut usize| {
        while *i < rest.len() && rest[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if rest.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    skip_ws(&mut i);
    if rest.get(i) != Some(&b'"') {
        return None;
    }
    let start = i + 1;
    let len = rest[start..].iter().take(129).position(|&c| c == b'"')?;
    let value = std::str::from_utf8(&rest[start..start + len]).ok()?;
    (!value.is_empty() && !value.contains('\\') && !value.chars().any(char::is_control))
        .then(|| value.to_string())
}

/// A review's version, its request with the objects decoded, and the warnings so far.
pub(super) type Decoded<'a> = (&'static str, Request<'a, Value>, Vec<String>);

/// Why [`decode_review`] cannot hand on a request: the body is refused as a whole (no review to
/// answer in; the uid is salvaged from the bytes when possible), or the review is answered
/// denied in its own version. Both are 400s; the message never quotes the body.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Not an AdmissionReview (or not JSON at all).
    Body(String),
    /// An AdmissionReview whose request is missing or malformed.
    Review {
        api_version: &'static str,
        uid: String,
        message: String,
        warnings: Vec<String>,
    },
}

/// Decodes any body the scan declines: a review of a known version (objects with a `status`
/// as `Value`), a bare AdmissionRequest (answered as v1, with a warning), and everything that
/// cannot be answered (not UTF-8, not JSON, an unknown `apiVersion`/`kind`, a missing or
/// malformed `request`, serde_json's reserved raw-value key). Returns the review's version, the
/// request with its objects decoded and the warnings so far; or why it cannot.
pub(super) fn decode_review(body: &[u8]) -> Result<Decoded<'_>, Refusal> {
    // JSON is UTF-8 (RFC 8259 §8.1).
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(Refusal::Body(
            "request body is not valid UTF-8 JSON".to_string(),
        ));
    };
    let decoded = decode(body);
    // `Value`s read serde_json's raw-value marker key as an instruction, not as data (see
    // `has_raw_value_key`). Where no `Value` is read (the key in `spec`, say, of a review whose
    // statuses a [`Node`] holds) it is data, as for the scan; any other body that has it is
    // refused.
    //
    // [`Node`]: super::node::Node
    if has_raw_value_key(text) && !nodes_hold(text) {
        return Err(Refusal::Body(
            "request body uses the reserved key \"$serde_json::private::RawValue\" (kim does not accept it)"
                .to_string(),
        ));
    }
    decoded
}

/// [`decode_review`] field by field, for a precise refusal.
fn decode(body: &[u8]) -> Result<Decoded<'_>, Refusal> {
    let env: ReviewIn<'_> = match serde_json::from_slice(body) {
        Ok(e) => e,
        Err(e) => {
            // A repeated `uid` or `operation` beside `request` (top-level members only of a bare
            // request) is skipped, as the scan skips it, when the review decodes whole without.
            if let Some(decoded) = enveloped(body) {
                return Ok(decoded);
            }
            let msg = if body.iter().all(u8::is_ascii_whitespace) {
                "request body is empty; expected an AdmissionReview (admission.k8s.io/v1)"
                    .to_string()
            } else {
                format!("request body is not an AdmissionReview: {}", json_error(&e))
            };
            return Err(Refusal::Body(msg));
        }
    };
    let mut warnings: Vec<String> = Vec::new();
    let is_bare = env.request.is_none() && env.uid.is_some() && env.operation.is_some();
    let (api_version, raw_req) = if is_bare {
        // A bare AdmissionRequest: answered as if it came in a v1 envelope (the apiserver
        // always sends the envelope; captures published without it are common).
        warnings.push(
            "kim: the body is a bare AdmissionRequest, not an AdmissionReview; answered as admission.k8s.io/v1"
                .to_string(),
        );
        match serde_json::from_slice::<&RawValue>(body) {
            Ok(raw) => (REVIEW_API_VERSION, raw),
            Err(e) => {
                return Err(Refusal::Body(format!(
                    "request body is not JSON: {}",
                    json_error(&e)
                )));
            }
        }
    } else {
        let (api, kind) = (env.api_version.as_ref(), env.kind.as_ref());
        let Some(api_version) = version(api.and_then(Value::as_str), kind.and_then(Value::as_str))
        else {
            let show =
                |v: &Option<Value>| v.as_ref().map_or("nothing".to_string(), |v| v.to_string());
            let msg = format!(
                "expected an AdmissionReview (apiVersion {REVIEW_API_VERSION}, kind AdmissionReview), got apiVersion {} kind {}",
                show(&env.api_version),
                show(&env.kind)
            );
            return Err(Refusal::Body(msg));
        };
        let Some(raw) = env.request.filter(|r| r.get() != "null") else {
            return Err(Refusal::Review {
                api_version,
                uid: String::new(),
                message: "AdmissionReview has no request".into(),
                warnings: Vec::new(),
            });
        };
        (api_version, raw)
    };
    let req: RequestIn<'_, &RawValue> = match serde_json::from_str(raw_req.get()) {
        Ok(r) => r,
        Err(e) => {
            let uid = serde_json::from_str::<UidOnly<'_>>(raw_req.get())
                .map(|u| u.uid.into_owned())
                .unwrap_or_default();
            return Err(Refusal::Review {
                api_version,
                uid,
                message: format!("request is malformed: {}", json_error(&e)),
                warnings,
            });
        }
    };
    Ok((api_version, req.decode_objects(), warnings))
}

/// The version of an AdmissionReview kim answers, from its `apiVersion` and `kind`.
fn version(api_version: Option<&str>, kind: Option<&str>) -> Option<&'static str> {
    match (api_version?, kind?) {
        (REVIEW_API_VERSION, "AdmissionReview") => Some(REVIEW_API_VERSION),
        (REVIEW_API_VERSION_BETA, "AdmissionReview") => Some(REVIEW_API_VERSION_BETA),
        _ => None,
    }
}

/// The members of an AdmissionReview kim reads, `request` as `R` (every other member is
/// skipped; `apiVersion` and `kind` must be strings).
#[derive(Deserialize)]
struct Envelope<'a, R> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<BorrowedStr<'a>>,
    #[serde(borrow, default)]
    kind: Option<BorrowedStr<'a>>,
    #[serde(default = "none")]
    request: Option<R>,
}

impl<'a, R> Envelope<'a, R> {
    /// The review's version and request, when it is a review of a known version with one.
    fn review(self) -> Option<(&'static str, R)> {
        let version = version(
            self.api_version.as_ref().map(|v| v.0.as_ref()),
            self.kind.as_ref().map(|k| k.0.as_ref()),
        )?;
        Some((version, self.request?))
    }
}

/// A review read from its envelope's members only, in one pass, when it decodes whole.
fn enveloped(body: &[u8]) -> Option<Decoded<'_>> {
    let env: Envelope<'_, RequestIn<'_, ObjectIn<'_>>> = serde_json::from_slice(body).ok()?;
    let (api_version, req) = env.review()?;
    let req = RequestIn {
        uid: req.uid,
        kind: req.kind,
        resource: req.resource,
        sub_resource: req.sub_resource,
        operation: req.operation,
        user_info: req.user_info,
        object: req.object.map(Ok),
        old_object: req.old_object.map(Ok),
        dry_run: req.dry_run,
    };
    Some((api_version, req, Vec::new()))
}

/// Whether `text` is a review of a known version whose request decodes in one pass with every
/// `status` one that [`Node`]s hold (the bodies the scan answers, and those it declines only
/// for the form of a member it reads or skips).
///
/// [`Node`]: super::node::Node
fn nodes_hold(text: &str) -> bool {
    serde_json::from_str::<Envelope<'_, RequestIn<'_, ObjectIn<'_, Walk<true>>>>>(text)
        .is_ok_and(|env| env.review().is_some())
}

/// A JSON value walked without being kept. With `HELD`, every object must be one that a
/// [`Node`] holds (see `node::holds`), or the walk fails.
///
/// [`Node`]: super::node::Node
struct Walk<const HELD: bool>;

impl<'de, const HELD: bool> Deserialize<'de> for Walk<HELD> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct WalkVisitor<const HELD: bool>;
        impl<'de, const HELD: bool> Visitor<'de> for WalkVisitor<HELD> {
            type Value = Walk<HELD>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_str<E>(self, _: &str) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_unit<E>(self) -> Result<Walk<HELD>, E> {
                Ok(Walk)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Walk<HELD>, A::Error> {
                while seq.next_element::<Walk<HELD>>()?.is_some() {}
                Ok(Walk)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Walk<HELD>, A::Error> {
                let mut keys: Vec<Cow<'de, str>> = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == node::RAW_VALUE_TOKEN {
                        return Err(de::Error::custom(FOUND_RAW_VALUE_KEY));
                    }
                    if HELD {
                        if !node::holds(keys.iter().map(Cow::as_ref), &key) {
                            return Err(de::Error::custom("object not held as a Node"));
                        }
                        keys.push(key);
                    }
                    map.next_value::<Walk<HELD>>()?;
                }
                Ok(Walk)
            }
        }
        d.deserialize_any(WalkVisitor)
    }
}

/// Start of the error [`has_raw_value_key`] stops its walk with.
const FOUND_RAW_VALUE_KEY: &str = "kim: raw-value key found";

/// Whether `text` (a JSON document) has, at any depth, an object key equal to serde_json's
/// private raw-value marker `$serde_json::private::RawValue`, however it is escaped.
///
/// kube-apiserver treats it as an ordinary key, but `serde_json::Value` (built with the
/// `raw_value` feature, which kim uses) replaces such an object by its string parsed as JSON, so
/// a review decoded into `Value`s would be judged on a status other than the one written. A
/// [`Node`] does not hold the key (the scan declines it); [`decode_review`] must not let the
/// `Value`s see it either (it refuses the body). Input that is not JSON, or nested deeper than
/// serde_json's limit, is `false` here (the decoding gives its own, precise answer).
///
/// [`Node`]: super::node::Node
pub(super) fn has_raw_value_key(text: &str) -> bool {
    matches!(serde_json::from_str::<Walk<false>>(text), Err(e) if e.to_string().starts_with(FOUND_RAW_VALUE_KEY))
}

#[cfg(test)]
mod tests {
    use super::super::node::tests::same;
    use super::super::{Hook, Outcome, review, review_serde, scan};
    use crate::status::Policy;

    /// A `runtimes/status` UPDATE, Pending -> Pending, with `extra` put into the request's
    /// members, `top` into the envelope's and `label` as a label of the object.
    fn body(top: &str, label: &str, spec: &str) -> Vec<u8> {
        let object = |state: &str| {
            format!(
                r#"{{"apiVersion":"infrastructuremanager.kyma-project.io/v1","kind":"Runtime","metadata":{{"name":"r1","generation":2,"labels":{{"l":"{label}"}}}},"spec":{{"shoot":{{"name":"s"}}{spec}}},"status":{{"state":"{state}","conditions":[{{"type":"Provisioned","status":"Unknown","reason":"Processing"}}]}}}}"#
            )
        };
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",{top}"request":{{"uid":"5c3d-77","kind":{{"group":"infrastructuremanager.kyma-project.io","version":"v1","kind":"Runtime"}},"resource":{{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"}},"subResource":"status","operation":"UPDATE","userInfo":{{"username":"system:serviceaccount:kim-system:kim-controller"}},"object":{},"oldObject":{},"dryRun":false}}}}"#,
            object("Pending"),
            object("Pending")
        )
        .into_bytes()
    }

    fn answers(body: &[u8]) -> [Outcome; 2] {
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        [Hook::Validate, Hook::Mutate].map(|hook| {
            let a = review(hook, &Policy::builtin(), body, now);
            let b = review_serde(hook, &Policy::builtin(), body, now);
            assert!(same(&a, &b), "{}", String::from_utf8_lossy(body));
            a
        })
    }

    /// Members kim skips are only checked: serde_json's raw-value key in `spec`, a repeated
    /// `uid` or `operation` in the envelope (members of a bare request only) are answered as
    /// without them, whether the scan takes the body or declines it (here for an escaped
    /// surrogate pair, which it does not decode).
    #[test]
    fn skipped_members_do_not_change_the_answer() {
        let plain = answers(&body("", "a", ""));
        assert!(plain.iter().all(|o| o.allowed && o.code == 200));
        for (top, spec) in [
            ("", r#","x":{"$serde_json::private::RawValue":"1"}"#),
            (r#""uid":"a","uid":"b","operation":1,"operation":2,"#, ""),
            (
                r#""uid":"a","uid":"b","#,
                r#","$serde_json::private::RawValue":{}"#,
            ),
        ] {
            for label in ["a", r"\ud83d\ude00"] {
                let text = body(top, label, spec);
                assert_eq!(scan::scan_review(&text).is_some(), label == "a");
                let answered = answers(&text);
                for (a, b) in answered.iter().zip(&plain) {
                    assert!(same(a, b), "{}", String::from_utf8_lossy(&text));
                }
            }
        }
    }

    /// Where kim reads a `Value` (the envelope's `apiVersion` and `kind`, an object's
    /// `status`), serde_json's raw-value key is refused, and anywhere in a review whose statuses
    /// are read as `Value`s; a bare request with a repeated `uid` is not read.
    #[test]
    fn raw_value_keys_kim_would_read_and_repeated_bare_members_are_refused() {
        let reserved = "request body uses the reserved key \"$serde_json::private::RawValue\" (kim does not accept it)";
        let review = String::from_utf8(body("", "a", "")).unwrap();
        for text in [
            review.replacen(
                r#""admission.k8s.io/v1""#,
                r#"{"$serde_json::private::RawValue":"\"admission.k8s.io/v1\""}"#,
                1,
            ),
            review.replacen(
                r#""AdmissionReview""#,
                r#"{"$serde_json::private::RawValue":"\"AdmissionReview\""}"#,
                1,
            ),
            review.replacen(
                r#""state":"Pending""#,
                r#""state":{"$serde_json::private::RawValue":"\"Pending\""}"#,
                1,
            ),
            // The key where it is data, beside a status a Node does not hold (read as a Value).
            String::from_utf8(body("", "a", r#","$serde_json::private::RawValue":{}"#))
                .unwrap()
                .replacen(
                    r#""state":"Pending""#,
                    r#""state":"Ready","state":"Pending""#,
                    1,
                ),
        ] {
            assert_ne!(text, review);
            for o in answers(text.as_bytes()) {
                assert_eq!((o.code, o.detail.as_str()), (400, reserved), "{text}");
            }
        }
        let bare = r#"{"uid":"a","operation":"UPDATE","uid":"b"}"#;
        for o in answers(bare.as_bytes()) {
            assert_eq!(
                (o.code, o.detail.as_str()),
                (
                    400,
                    "request body is not an AdmissionReview: a field appears twice at line 1 column 37"
                ),
            );
        }
    }

    #[test]
    fn raw_value_keys_are_found_however_spelled_and_nothing_else_is() {
        assert!(super::has_raw_value_key(
            r#"{"a":{"$serde_json::private::RawValue":"1"}}"#
        ));
        assert!(super::has_raw_value_key(
            r#"[{"b":[{"\u0024serde_json::private::RawValue":5}]}]"#
        ));
        assert!(super::has_raw_value_key(
            r#"{"\u0024serde_json::priv\u0061te::RawValue":"{}"}"#
        ));
        assert!(!super::has_raw_value_key(
            r#"{"a":"$serde_json::private::RawValue"}"#
        ));
        assert!(!super::has_raw_value_key(
            r#"{"$serde_json::private::RawValueX":1}"#
        ));
        assert!(!super::has_raw_value_key("{not json"));
        assert!(!super::has_raw_value_key(&"[".repeat(5000)));
    }
}
