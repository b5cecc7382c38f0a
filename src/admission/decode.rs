//! Decoding of AdmissionReview requests: one pass over a well-formed v1 review ([`fast_review`],
//! `spec` and `managedFields` skipped without allocation), and the field-by-field path that
//! answers anything else precisely ([`precise`]).

use super::node;
use super::{REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use crate::status::{JsonView, Snapshot};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

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

/// `request` of an AdmissionReview; `O` is how `object`/`oldObject` are held: decoded in the
/// same pass ([`ObjectIn`], the fast path) or as raw JSON decoded later (`&RawValue`, the path
/// that reports precise errors).
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

/// The whole review decoded in one pass (the common case: a well-formed v1 review), each
/// object's `status` as `S` ([`Node`] first, `Value` when that fails).
#[derive(Deserialize)]
pub(super) struct FastReview<'a, S> {
    #[serde(
        rename = "apiVersion",
        borrow,
        default,
        deserialize_with = "node::opt_cow"
    )]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default = "none")]
    request: Option<RequestIn<'a, ObjectIn<'a, S>>>,
}

/// Decodes `text` as a [`FastReview`] of a known `apiVersion`: the version and the request.
pub(super) fn fast_review<'a, S: Deserialize<'a>>(
    text: &'a str,
) -> Option<(&'static str, RequestIn<'a, ObjectIn<'a, S>>)> {
    let FastReview {
        api_version,
        kind,
        request,
    } = serde_json::from_str::<FastReview<'a, S>>(text).ok()?;
    if kind.as_deref() != Some("AdmissionReview") {
        return None;
    }
    let api_version = match api_version.as_deref() {
        Some(REVIEW_API_VERSION) => REVIEW_API_VERSION,
        Some(REVIEW_API_VERSION_BETA) => REVIEW_API_VERSION_BETA,
        _ => return None,
    };
    Some((api_version, request?))
}

/// How a request's objects become something evaluation can read ([`ReadObject`]).
pub(super) trait ObjectSource<'a> {
    type Object: ReadObject;
    fn into_object(self, field: &str) -> Result<Self::Object, String>;
}

/// An object as evaluation reads it.
pub(super) trait ReadObject {
    type Json: JsonView;
    fn snapshot(&self) -> Snapshot<'_, Self::Json>;
}

impl<'a, S: JsonView> ObjectSource<'a> for ObjectIn<'a, S> {
    type Object = ObjectIn<'a, S>;
    fn into_object(self, _: &str) -> Result<ObjectIn<'a, S>, String> {
        Ok(self)
    }
}

impl<'a> ObjectSource<'a> for &'a RawValue {
    type Object = ObjectIn<'a>;
    fn into_object(self, field: &str) -> Result<ObjectIn<'a>, String> {
        serde_json::from_str::<ObjectIn<'a>>(self.get())
            .map_err(|e| format!("request.{field} is not a valid Runtime: {}", json_error(&e)))
    }
}

impl<S: JsonView> ReadObject for ObjectIn<'_, S> {
    type Json = S;
    fn snapshot(&self) -> Snapshot<'_, S> {
        ObjectIn::snapshot(self)
    }
}

pub(super) fn object_of<'a, O: ObjectSource<'a>>(
    o: Option<O>,
    field: &str,
) -> Result<O::Object, String> {
    match o {
        None => Err(format!(
            "request.{field} is required for a Runtime status UPDATE"
        )),
        Some(o) => o.into_object(field),
    }
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
/// (`Value`, or [`Node`] on the fast path); everything else is skipped.
#[derive(Deserialize)]
pub(super) struct ObjectIn<'a, S = Value> {
    #[serde(borrow, default)]
    pub(super) metadata: Option<MetaIn<'a>>,
    #[serde(default = "none")]
    pub(super) status: Option<S>,
}

impl<S: JsonView> ObjectIn<'_, S> {
    fn snapshot(&self) -> Snapshot<'_, S> {
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

/// A review's version, its request with the objects still raw, and the warnings so far.
pub(super) type Precise<'a> = (&'static str, RequestIn<'a, &'a RawValue>, Vec<String>);

/// Why [`precise`] cannot hand on a request: the body is refused as a whole (no review to
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

/// The precise path for a body [`fast_review`] did not take: a bare AdmissionRequest (answered
/// as v1, with a warning), an unknown `apiVersion`/`kind`, a missing or malformed `request`.
/// Returns the review's version, the request with its objects still raw, and the warnings so
/// far; or why it cannot.
pub(super) fn precise(body: &[u8]) -> Result<Precise<'_>, Refusal> {
    // Anything else: field by field, for a precise answer (bare requests, errors, odd objects).
    let env: ReviewIn<'_> = match serde_json::from_slice(body) {
        Ok(e) => e,
        Err(e) => {
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
        let api = env.api_version.as_ref().and_then(Value::as_str);
        let kind = env.kind.as_ref().and_then(Value::as_str);
        let api_version = match (api, kind) {
            (Some(REVIEW_API_VERSION), Some("AdmissionReview")) => REVIEW_API_VERSION,
            (Some(REVIEW_API_VERSION_BETA), Some("AdmissionReview")) => REVIEW_API_VERSION_BETA,
            _ => {
                let show =
                    |v: &Option<Value>| v.as_ref().map_or("nothing".to_string(), |v| v.to_string());
                let msg = format!(
                    "expected an AdmissionReview (apiVersion {REVIEW_API_VERSION}, kind AdmissionReview), got apiVersion {} kind {}",
                    show(&env.api_version),
                    show(&env.kind)
                );
                return Err(Refusal::Body(msg));
            }
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
    Ok((api_version, req, warnings))
}
