//! AdmissionReview v1 decoding and encoding for `runtimes/status` writes
//! (`shared/spec/admission-protocol.md`). Pure: bytes in, bytes out, no I/O. The webhook server
//! and `kim review` both call [`review`], so they answer identically.
//!
//! Every path — including malformed input — produces a well-formed AdmissionReview with
//! `response.uid` echoed when it can be read (a missing or wrong uid is a *call failure* for
//! the apiserver, which with `failurePolicy: Ignore` would let the write through unchecked).
//!
//! Decoding is lazy: only the request's routing fields, `userInfo`, and each object's
//! `metadata.generation`, `metadata.deletionTimestamp` and `status` are materialised; `spec`
//! and `managedFields` are skipped without allocation.

mod node;

use node::Node;

use crate::status::{self, Facts, JsonView, Policy, Snapshot};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// API group of the Runtime CRD.
pub const RUNTIME_GROUP: &str = "infrastructuremanager.kyma-project.io";
/// Plural resource name of the Runtime CRD.
pub const RUNTIME_RESOURCE: &str = "runtimes";
/// The admission API version this webhook speaks (`admissionReviewVersions: ["v1"]`).
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// `v1beta1` has the same shape; a review in it is answered in it.
const REVIEW_API_VERSION_BETA: &str = "admission.k8s.io/v1beta1";

/// Which webhook answers: the validating one (`/validate`) or the mutating one (`/mutate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Denies writes the status model forbids; never returns a patch.
    Validate,
    /// Returns the defaulting JSONPatch of spec §5; never denies a well-formed review.
    Mutate,
}

impl Hook {
    /// `"validate"` or `"mutate"` (also the URL path without the slash).
    pub const fn as_str(self) -> &'static str {
        match self {
            Hook::Validate => "validate",
            Hook::Mutate => "mutate",
        }
    }
}

/// The answer to one review, ready to send: `body` is the AdmissionReview JSON to return with
/// HTTP 200 and `Content-Type: application/json`; the other fields are for logs and metrics
/// (none of them holds object content, so all are safe to log).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub body: Vec<u8>,
    pub allowed: bool,
    /// `response.status.code` (200 when allowed; 400, 403 or 413 when denied).
    pub code: u16,
    pub uid: String,
    /// `request.operation` (`UPDATE`, …), empty when unreadable.
    pub operation: String,
    /// `request.userInfo.username`, empty when unreadable.
    pub user: String,
    pub dry_run: bool,
    /// True when a JSONPatch was returned.
    pub patched: bool,
    /// Rule ids of the denying violations, empty when allowed.
    pub rules: Vec<&'static str>,
    /// Every violation's rule and what became of it (denied, warned, ratcheted), for the
    /// violations metric; empty for `/mutate` and for reviews that were not evaluated.
    pub violations: Vec<(status::RuleId, status::Action)>,
    /// One-line summary (denial message or warning), safe to log.
    pub detail: String,
}

#[derive(Deserialize)]
struct ReviewIn<'a> {
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
struct GroupResource<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    resource: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
struct GroupKind<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
struct UserInfoIn {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    groups: Option<Vec<String>>,
}

/// `request` of an AdmissionReview; `O` is how `object`/`oldObject` are held: decoded in the
/// same pass ([`ObjectIn`], the fast path) or as raw JSON decoded later (`&RawValue`, the path
/// that reports precise errors).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn<'a, O> {
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<GroupKind<'a>>,
    #[serde(borrow, default)]
    resource: Option<GroupResource<'a>>,
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "node::opt_cow")]
    operation: Option<Cow<'a, str>>,
    #[serde(default)]
    user_info: Option<UserInfoIn>,
    #[serde(default = "none")]
    object: Option<O>,
    #[serde(default = "none")]
    old_object: Option<O>,
    #[serde(default)]
    dry_run: Option<bool>,
}

fn none<O>() -> Option<O> {
    None
}

/// The whole review decoded in one pass (the common case: a well-formed v1 review), each
/// object's `status` as `S` ([`Node`] first, `Value` when that fails).
#[derive(Deserialize)]
struct FastReview<'a, S> {
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
fn fast_review<'a, S: Deserialize<'a>>(
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
trait ObjectSource<'a> {
    type Object: ReadObject;
    fn into_object(self, field: &str) -> Result<Self::Object, String>;
}

/// An object as evaluation reads it.
trait ReadObject {
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

fn object_of<'a, O: ObjectSource<'a>>(o: Option<O>, field: &str) -> Result<O::Object, String> {
    match o {
        None => Err(format!(
            "request.{field} is required for a Runtime status UPDATE"
        )),
        Some(o) => o.into_object(field),
    }
}

/// Only the uid, for error paths where the full request does not decode.
#[derive(Deserialize)]
struct UidOnly<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
}

#[derive(Deserialize)]
struct MetaIn<'a> {
    #[serde(default)]
    generation: Option<i64>,
    #[serde(rename = "deletionTimestamp", borrow, default)]
    deletion_timestamp: Option<&'a RawValue>,
}

/// `request.object` / `request.oldObject`: the metadata kim reads and the `status` as `S`
/// (`Value`, or [`Node`] on the fast path); everything else is skipped.
#[derive(Deserialize)]
struct ObjectIn<'a, S = Value> {
    #[serde(borrow, default)]
    metadata: Option<MetaIn<'a>>,
    #[serde(default = "none")]
    status: Option<S>,
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusOut<'a> {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    /// The base64 text in quotes, written as is (base64 needs no JSON escaping).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

/// `metav1.Status.reason` for a denial code.
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        _ => "BadRequest",
    }
}

/// Keeps a warning within the 120 characters the apiserver passes on as a `Warning` header.
fn warning(text: String) -> String {
    if text.chars().count() <= 120 {
        text
    } else {
        let mut s: String = text.chars().take(117).collect();
        s.push_str("...");
        s
    }
}

struct Answer<'a> {
    api_version: &'a str,
    uid: &'a str,
    allowed: bool,
    code: u16,
    message: &'a str,
    patch: Option<&'a json_patch::Patch>,
    warnings: &'a [String],
    audit: BTreeMap<&'static str, String>,
}

/// The patch as JSON, byte for byte as `serde_json::to_writer(out, patch)` writes it; `add` and
/// `replace` (the operations defaulting makes) without serde's tagged-enum machinery.
fn write_patch(out: &mut Vec<u8>, patch: &json_patch::Patch) -> serde_json::Result<()> {
    use json_patch::PatchOperation;
    out.push(b'[');
    for (n, op) in patch.0.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let (name, path, value) = match op {
            PatchOperation::Add(a) => ("add", &a.path, &a.value),
            PatchOperation::Replace(r) => ("replace", &r.path, &r.value),
            other => {
                serde_json::to_writer(&mut *out, other)?;
                continue;
            }
        };
        out.extend_from_slice(b"{\"op\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"path\":");
        serde_json::to_writer(&mut *out, path.as_str())?;
        out.extend_from_slice(b",\"value\":");
        serde_json::to_writer(&mut *out, value)?;
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

fn encode(a: Answer<'_>) -> Vec<u8> {
    let patch = a.patch.filter(|p| !p.0.is_empty()).and_then(|p| {
        let mut json = Vec::with_capacity(128 * p.0.len());
        if write_patch(&mut json, p).is_err() {
            json = b"[]".to_vec();
        }
        let mut quoted = String::with_capacity(json.len() * 4 / 3 + 8);
        quoted.push('"');
        base64::engine::general_purpose::STANDARD.encode_string(json, &mut quoted);
        quoted.push('"');
        // A quoted base64 text is always a valid JSON string.
        RawValue::from_string(quoted).ok()
    });
    let out = ReviewOut {
        api_version: a.api_version,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid: a.uid,
            allowed: a.allowed,
            status: (!a.allowed).then(|| StatusOut {
                status: "Failure",
                // The apiserver coerces codes below 400 to 400; never send one.
                code: a.code.max(400),
                reason: reason_for(a.code.max(400)),
                message: a.message,
            }),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: a.warnings,
            audit_annotations: a.audit,
        },
    };
    // Serialising these plain structs cannot fail; fall back to a minimal literal anyway.
    let mut body = Vec::with_capacity(
        256 + out.response.patch.as_ref().map_or(0, |p| p.get().len()) + a.message.len(),
    );
    serde_json::to_writer(&mut body, &out).map(|()| body).unwrap_or_else(|_| {
        format!(r#"{{"apiVersion":"{REVIEW_API_VERSION}","kind":"AdmissionReview","response":{{"uid":"","allowed":false}}}}"#).into_bytes()
    })
}

/// A denied outcome for a request that could not be decoded or was refused.
fn denied(api_version: &str, uid: &str, code: u16, message: &str, warnings: &[String]) -> Outcome {
    Outcome {
        body: encode(Answer {
            api_version,
            uid,
            allowed: false,
            code,
            message,
            patch: None,
            warnings,
            audit: BTreeMap::new(),
        }),
        allowed: false,
        code: code.max(400),
        uid: uid.to_string(),
        detail: message.to_string(),
        ..Outcome::default()
    }
}

/// A JSON decoding error described without quoting the input: serde's messages copy the
/// offending string (which may be anything a client sent, a key included) — keep only the kind
/// of error, what was expected and the position.
fn json_error(e: &serde_json::Error) -> String {
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
fn salvage_uid(body: &[u8]) -> Option<String> {
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

/// A denial for a request the HTTP layer refused before decoding (oversized body: 413, wrong
/// content type: 400/415, unreadable body: 400). `body` is whatever was read (possibly a
/// prefix, possibly empty); the uid is echoed when it can be read from it.
pub fn reject(code: u16, message: &str, body: &[u8]) -> Outcome {
    let uid = salvage_uid(body).unwrap_or_default();
    denied(REVIEW_API_VERSION, &uid, code, message, &[])
}

/// Answers one AdmissionReview request body (`admission.k8s.io/v1`, also `v1beta1`).
///
/// - Not JSON, not an AdmissionReview, no `request`, no `request.uid`: denied, code 400.
/// - Not a `runtimes/status` UPDATE of `infrastructuremanager.kyma-project.io`: allowed, with a
///   warning saying that nothing was checked.
/// - `runtimes/status` UPDATE without `object`/`oldObject`, or with a malformed one: denied, 400.
/// - Otherwise [`Hook::Mutate`] returns the defaulting patch of [`status::mutate`] and
///   [`Hook::Validate`] the verdict of [`status::validate`] (messages per spec §6, rule ids in
///   `auditAnnotations["violations"]`). `dryRun` is evaluated the same way.
///
/// `now` is the request time used by defaulting.
pub fn review(hook: Hook, policy: &Policy, body: &[u8], now: DateTime<Utc>) -> Outcome {
    review_with(hook, policy, body, now, true)
}

/// [`review`]; `nodes: false` leaves out the decoding of statuses into [`Node`]s (the
/// reference its answers are compared with in the tests).
fn review_with(
    hook: Hook,
    policy: &Policy,
    body: &[u8],
    now: DateTime<Utc>,
    nodes: bool,
) -> Outcome {
    // JSON is UTF-8 (RFC 8259 §8.1); skipped strings would not be checked by the parser.
    let Ok(text) = std::str::from_utf8(body) else {
        return reject(400, "request body is not valid UTF-8 JSON", body);
    };
    // Fast path: one pass over the body (spec and managedFields skipped, never materialised),
    // statuses read as borrowed Nodes; then the same with statuses as Values (what Nodes do not
    // hold: repeated keys, many keys).
    if nodes && let Some((api_version, req)) = fast_review::<Node<'_>>(text) {
        return answer(hook, policy, api_version, req, now, Vec::new());
    }
    // Past this point statuses are decoded as `Value`s, which read serde_json's raw-value
    // marker key as an instruction, not as data (see `node::has_raw_value_key`).
    if node::has_raw_value_key(text) {
        return reject(
            400,
            "request body uses the reserved key \"$serde_json::private::RawValue\" (kim does not accept it)",
            body,
        );
    }
    if let Some((api_version, req)) = fast_review::<Value>(text) {
        return answer(hook, policy, api_version, req, now, Vec::new());
    }
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
            return reject(400, &msg, body);
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
                return reject(
                    400,
                    &format!("request body is not JSON: {}", json_error(&e)),
                    body,
                );
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
                return reject(400, &msg, body);
            }
        };
        let Some(raw) = env.request.filter(|r| r.get() != "null") else {
            return denied(api_version, "", 400, "AdmissionReview has no request", &[]);
        };
        (api_version, raw)
    };
    let req: RequestIn<'_, &RawValue> = match serde_json::from_str(raw_req.get()) {
        Ok(r) => r,
        Err(e) => {
            let uid = serde_json::from_str::<UidOnly<'_>>(raw_req.get())
                .map(|u| u.uid.into_owned())
                .unwrap_or_default();
            return denied(
                api_version,
                &uid,
                400,
                &format!("request is malformed: {}", json_error(&e)),
                &warnings,
            );
        }
    };
    answer(hook, policy, api_version, req, now, warnings)
}

/// Answers a decoded request (both decoding paths end here).
fn answer<'a, O: ObjectSource<'a>>(
    hook: Hook,
    policy: &Policy,
    api_version: &'static str,
    req: RequestIn<'a, O>,
    now: DateTime<Utc>,
    mut warnings: Vec<String>,
) -> Outcome {
    let Some(uid) = req.uid.as_deref().filter(|u| !u.is_empty()) else {
        return denied(api_version, "", 400, "request.uid is missing", &warnings);
    };
    let user_info = req.user_info.unwrap_or_default();
    let operation = req.operation.as_deref().unwrap_or("").to_string();
    let facts = Facts {
        user: user_info.username.unwrap_or_default(),
        groups: user_info.groups.unwrap_or_default(),
        dry_run: req.dry_run.unwrap_or(false),
        now,
    };
    let base = |o: Outcome| Outcome {
        uid: uid.to_string(),
        operation: operation.clone(),
        user: facts.user.clone(),
        dry_run: facts.dry_run,
        ..o
    };

    let resource = req.resource.unwrap_or_default();
    let sub = req.sub_resource.as_deref().unwrap_or("");
    let is_runtime = resource.group == RUNTIME_GROUP && resource.resource == RUNTIME_RESOURCE;
    if !is_runtime || sub != "status" || operation != "UPDATE" {
        let kind = req.kind.as_ref().map_or("", |k| k.kind.as_ref());
        let what = if is_runtime {
            format!(
                "Runtime {operation}{}",
                if sub.is_empty() {
                    String::new()
                } else {
                    format!(" on /{sub}")
                }
            )
        } else {
            format!(
                "{} {operation}",
                if kind.is_empty() {
                    "unknown kind"
                } else {
                    kind
                }
            )
        };
        let detail = warning(format!(
            "kim: {what} is not a Runtime status UPDATE; nothing was checked"
        ));
        warnings.push(detail.clone());
        return base(Outcome {
            body: encode(Answer {
                api_version,
                uid,
                allowed: true,
                code: 200,
                message: "",
                patch: None,
                warnings: &warnings,
                audit: BTreeMap::new(),
            }),
            allowed: true,
            code: 200,
            detail,
            ..Outcome::default()
        });
    }

    let (new_obj, old_obj) = match (
        object_of(req.object, "object"),
        object_of(req.old_object, "oldObject"),
    ) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => return base(denied(api_version, uid, 400, &e, &warnings)),
    };
    let new = new_obj.snapshot();
    let old = old_obj.snapshot();

    match hook {
        Hook::Mutate => {
            let patch = status::mutate(policy, Some(&old), &new, &facts);
            let patched = !patch.0.is_empty();
            base(Outcome {
                body: encode(Answer {
                    api_version,
                    uid,
                    allowed: true,
                    code: 200,
                    message: "",
                    patch: Some(&patch),
                    warnings: &warnings,
                    audit: BTreeMap::new(),
                }),
                allowed: true,
                code: 200,
                patched,
                detail: if patched {
                    format!("{} defaulting operation(s)", patch.0.len())
                } else {
                    String::new()
                },
                ..Outcome::default()
            })
        }
        Hook::Validate => {
            let violations = status::validate(policy, Some(&old), &new, &facts);
            validated(api_version, uid, &violations, warnings, base)
        }
    }
}

/// The validating answer for evaluated violations: allowed unless one denies; warnings for
/// the others (spec §7.7); audit annotations `violations` (denying rule ids), `warn-violations`
/// and `warn-message` (what a denial would have said in `warn` mode) and
/// `ratcheted-violations`.
fn validated(
    api_version: &str,
    uid: &str,
    violations: &[status::Violation],
    mut warnings: Vec<String>,
    base: impl FnOnce(Outcome) -> Outcome,
) -> Outcome {
    let allowed = status::allowed(violations);
    let code = status::denial_code(violations);
    let message = status::denial_message(violations);
    warnings.extend(status::warnings(violations));
    let ids = |action: status::Action| {
        let mut ids: Vec<&'static str> = Vec::new();
        for v in violations.iter().filter(|v| v.action == action) {
            if !ids.contains(&v.rule.as_str()) {
                ids.push(v.rule.as_str());
            }
        }
        ids
    };
    let rules = ids(status::Action::Deny);
    let mut audit = BTreeMap::new();
    if !rules.is_empty() {
        audit.insert("violations", rules.join(","));
    }
    let warned = ids(status::Action::Warn);
    if !warned.is_empty() {
        audit.insert("warn-violations", warned.join(","));
        audit.insert(
            "warn-message",
            format!(
                "would deny ({}): {}",
                status::warn_code(violations),
                status::warn_message(violations)
            ),
        );
    }
    let ratcheted = ids(status::Action::Ratcheted);
    if !ratcheted.is_empty() {
        audit.insert("ratcheted-violations", ratcheted.join(","));
    }
    let detail = if allowed {
        warnings.first().cloned().unwrap_or_default()
    } else {
        message.clone()
    };
    base(Outcome {
        body: encode(Answer {
            api_version,
            uid,
            allowed,
            code,
            message: &message,
            patch: None,
            warnings: &warnings,
            audit,
        }),
        allowed,
        code,
        rules,
        violations: violations.iter().map(|v| (v.rule, v.action)).collect(),
        detail,
        ..Outcome::default()
    })
}

#[cfg(test)]
mod tests {
    use json_patch::{
        AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
    };
    use jsonptr::PointerBuf;
    use serde_json::json;

    #[test]
    fn write_patch_writes_what_serde_writes() {
        let p = |s: &str| PointerBuf::from_tokens(["status", "conditions", "0", s]);
        let patches = [
            Patch(vec![]),
            Patch(vec![PatchOperation::Add(AddOperation {
                path: p("message"),
                value: json!("a \"quoted\" \\ \u{1} é message"),
            })]),
            Patch(vec![
                PatchOperation::Add(AddOperation {
                    path: p("lastTransitionTime"),
                    value: json!("2026-11-01T10:00:00Z"),
                }),
                PatchOperation::Replace(ReplaceOperation {
                    path: p("observedGeneration"),
                    value: json!(3),
                }),
                PatchOperation::Remove(RemoveOperation { path: p("a~b/c") }),
                PatchOperation::Test(TestOperation {
                    path: p("x"),
                    value: json!({"b": [1, 2.5, null], "a": true}),
                }),
            ]),
        ];
        for patch in &patches {
            let mut out = Vec::new();
            super::write_patch(&mut out, patch).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(patch).unwrap()
            );
        }
    }
}
