//! The request model — the members of an AdmissionReview kim reads, as serde types that borrow
//! from the body — and its decoding by serde_json ([`decode_review`]).
//!
//! A review is decoded in one pass ([`Envelope`] of a [`RequestIn`] of [`ObjectIn`]s): the
//! routing fields, `userInfo`, each object's `metadata.generation` and
//! `metadata.deletionTimestamp` are read, each `status` is built as a `Value` ([`Json`]), and
//! everything else (`spec`, `managedFields`, labels, …) is only checked by serde_json's skipping
//! (`IgnoredAny`, without recursion, so nesting there is not limited). Only a body that pass
//! does not take is read again, level by level (`staged`): to say precisely which member is
//! wrong, with the uid when it is readable, and to answer requests whose unreadable object kim
//! does not need (one that is not a Runtime status UPDATE). Both readings use the same types, so
//! a member kim reads is declared once, and a body the one pass takes gets the answer the
//! staged reading would give.

use super::{REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use crate::status::Snapshot;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;

/// An AdmissionReview as the one pass reads it: `apiVersion` and `kind` (strings) and `request`
/// as `R`; every other member is skipped (a repeated `uid` or `operation` in the envelope too:
/// they are members of a bare request only).
#[derive(Deserialize)]
struct Envelope<'a, R> {
    #[serde(rename = "apiVersion", borrow, default, deserialize_with = "opt_cow")]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default = "none")]
    request: Option<R>,
}

/// An AdmissionReview as the staged reading reads it: `apiVersion` and `kind` as any JSON (to
/// say what they are when they are not a review's), `request` left raw.
#[derive(Deserialize)]
struct ReviewIn<'a> {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<Json>,
    #[serde(default)]
    kind: Option<Json>,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
}

/// The members that make a body without `request` a bare AdmissionRequest (no envelope), as
/// some projects publish captures.
#[derive(Deserialize)]
struct BareIn {
    #[serde(default)]
    uid: Option<IgnoredAny>,
    #[serde(default)]
    operation: Option<IgnoredAny>,
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

/// `request` of an AdmissionReview; `O` is how `object`/`oldObject` are held: [`ObjectIn`] in
/// the one pass, raw JSON (`&RawValue`) in the staged reading, then as a [`Request`] holds them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn<'a, O> {
    #[serde(borrow, default, deserialize_with = "opt_cow")]
    pub(super) uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) kind: Option<GroupKind<'a>>,
    #[serde(borrow, default)]
    pub(super) resource: Option<GroupResource<'a>>,
    #[serde(borrow, default, deserialize_with = "opt_cow")]
    pub(super) sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "opt_cow")]
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

/// A request as evaluation reads it: each object decoded, or why it is not a valid Runtime
/// (which matters only for a Runtime status UPDATE).
pub(super) type Request<'a> = RequestIn<'a, Result<ObjectIn<'a>, String>>;

impl<'a, O> RequestIn<'a, O> {
    /// The request with `object` and `oldObject` mapped by `f` (given the member's name).
    fn try_map_objects<P, E>(
        self,
        mut f: impl FnMut(O, &'static str) -> Result<P, E>,
    ) -> Result<RequestIn<'a, P>, E> {
        Ok(RequestIn {
            object: self.object.map(|o| f(o, "object")).transpose()?,
            old_object: self.old_object.map(|o| f(o, "oldObject")).transpose()?,
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            operation: self.operation,
            user_info: self.user_info,
            dry_run: self.dry_run,
        })
    }
}

/// `request.object` / `request.oldObject` of a Runtime status UPDATE: present and valid, or
/// the message of the denial.
pub(super) fn object_of<'a>(
    o: Option<Result<ObjectIn<'a>, String>>,
    field: &str,
) -> Result<ObjectIn<'a>, String> {
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
    pub(super) uid: Cow<'a, str>,
}

#[derive(Deserialize)]
pub(super) struct MetaIn<'a> {
    #[serde(default)]
    pub(super) generation: Option<i64>,
    #[serde(rename = "deletionTimestamp", borrow, default)]
    pub(super) deletion_timestamp: Option<&'a RawValue>,
}

/// `request.object` / `request.oldObject`: the metadata kim reads and the `status`; everything
/// else is skipped.
#[derive(Deserialize)]
pub(super) struct ObjectIn<'a> {
    #[serde(borrow, default)]
    pub(super) metadata: Option<MetaIn<'a>>,
    #[serde(default)]
    pub(super) status: Option<Json>,
}

impl ObjectIn<'_> {
    pub(super) fn snapshot(&self) -> Snapshot<'_> {
        let meta = self.metadata.as_ref();
        Snapshot {
            generation: meta.and_then(|m| m.generation),
            deleting: meta
                .and_then(|m| m.deletion_timestamp)
                .is_some_and(|d| d.get() != "null"),
            status: self.status.as_ref().map(|s| &s.0).filter(|s| !s.is_null()),
        }
    }
}

/// serde_json's private marker key: `Value`'s own visitor (with the `raw_value` feature, which
/// kim's dependencies switch on) reads an object with this key as the JSON text of its string.
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// Start of the error [`Json`] stops at [`RAW_VALUE_KEY`] with.
const FOUND_RAW_VALUE_KEY: &str = "kim: reserved raw-value key";

/// A JSON value kim reads (a `status`; in the staged reading, the envelope's `apiVersion` and
/// `kind`): the `Value` serde_json builds — numbers, member order, the last of a repeated key
/// — except that an object with the key [`RAW_VALUE_KEY`] (however escaped) is refused, where
/// `Value` would replace it by its string parsed as JSON and kim would judge a status other
/// than the one written. kube-apiserver treats the key as any other; kim refuses the body
/// ([`Refusal::Body`]). Where kim only skips a member, the key is data like any other.
pub(super) struct Json(pub(super) Value);

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor).map(Json)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Json(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == RAW_VALUE_KEY {
                return Err(de::Error::custom(FOUND_RAW_VALUE_KEY));
            }
            let Json(value) = map.next_value()?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// A string borrowed from the input when it has no escapes.
struct BorrowedStr<'a>(Cow<'a, str>);

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
fn opt_cow<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<BorrowedStr<'de>>::deserialize(d)?.map(|s| s.0))
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

/// A review's version, its request with the objects decoded, and the warnings so far.
pub(super) type Decoded<'a> = (&'static str, Request<'a>, Vec<String>);

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

/// The refusal of a body with [`RAW_VALUE_KEY`] where kim reads a value; `None` for any other
/// error.
fn raw_value_key(e: &serde_json::Error) -> Option<Refusal> {
    e.to_string().starts_with(FOUND_RAW_VALUE_KEY).then(|| {
        Refusal::Body(format!(
            "request body uses the reserved key \"{RAW_VALUE_KEY}\" (kim does not accept it)"
        ))
    })
}

/// Decodes a request body: a review of a known version (`admission.k8s.io/v1` or `v1beta1`),
/// or a bare AdmissionRequest (answered as v1, with a warning). Returns the review's version,
/// the request with its objects decoded and the warnings so far; or why it cannot be answered:
/// not UTF-8, not JSON, an unknown `apiVersion`/`kind`, a missing or malformed `request`,
/// [`RAW_VALUE_KEY`] where kim reads a value.
pub(super) fn decode_review(body: &[u8]) -> Result<Decoded<'_>, Refusal> {
    // JSON is UTF-8 (RFC 8259 §8.1); checked once here, also in the strings serde_json skips.
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(Refusal::Body(
            "request body is not valid UTF-8 JSON".to_string(),
        ));
    };
    one_pass(text).map_or_else(|| staged(text), Ok)
}

/// The review in one pass, when it is a review of a known version with a request that decodes
/// whole (every object included); `None` otherwise.
pub(super) fn one_pass(text: &str) -> Option<Decoded<'_>> {
    let env: Envelope<'_, RequestIn<'_, ObjectIn<'_>>> = serde_json::from_str(text).ok()?;
    let api_version = version(env.api_version.as_deref(), env.kind.as_deref())?;
    let Ok(req) = env
        .request?
        .try_map_objects(|o, _| Ok::<_, Infallible>(Ok(o)));
    Some((api_version, req, Vec::new()))
}

/// [`decode_review`] level by level, for a body the one pass does not take: the envelope with
/// the request raw, the request with the objects raw, then each object, so that a refusal says
/// which level is wrong and an object is judged only where kim reads it.
pub(super) fn staged(text: &str) -> Result<Decoded<'_>, Refusal> {
    let env: ReviewIn<'_> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => {
            let msg = if text.bytes().all(|b| b.is_ascii_whitespace()) {
                "request body is empty; expected an AdmissionReview (admission.k8s.io/v1)"
                    .to_string()
            } else if let Some(refusal) = raw_value_key(&e) {
                return Err(refusal);
            } else {
                format!("request body is not an AdmissionReview: {}", json_error(&e))
            };
            return Err(Refusal::Body(msg));
        }
    };
    let mut warnings: Vec<String> = Vec::new();
    let is_bare = env.request.is_none()
        && match serde_json::from_str::<BareIn>(text) {
            Ok(bare) => bare.uid.is_some() && bare.operation.is_some(),
            Err(e) => {
                let e = json_error(&e);
                return Err(Refusal::Body(format!(
                    "request body is not an AdmissionReview: {e}"
                )));
            }
        };
    let (api_version, raw_req) = if is_bare {
        // A bare AdmissionRequest: answered as if it came in a v1 envelope (the apiserver
        // always sends the envelope; captures published without it are common).
        warnings.push(
            "kim: the body is a bare AdmissionRequest, not an AdmissionReview; answered as admission.k8s.io/v1"
                .to_string(),
        );
        // As a `RawValue` of the body would hold it (positions in messages count from it).
        let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\n' | '\r' | '\t'));
        (REVIEW_API_VERSION, trimmed)
    } else {
        let (api, kind) = (env.api_version.as_ref(), env.kind.as_ref());
        let Some(api_version) = version(
            api.and_then(|j| j.0.as_str()),
            kind.and_then(|j| j.0.as_str()),
        ) else {
            let show = |v: &Option<Json>| {
                v.as_ref()
                    .map_or("nothing".to_string(), |v| v.0.to_string())
            };
            return Err(Refusal::Body(format!(
                "expected an AdmissionReview (apiVersion {REVIEW_API_VERSION}, kind AdmissionReview), got apiVersion {} kind {}",
                show(&env.api_version),
                show(&env.kind)
            )));
        };
        let Some(raw) = env.request else {
            return Err(Refusal::Review {
                api_version,
                uid: String::new(),
                message: "AdmissionReview has no request".into(),
                warnings: Vec::new(),
            });
        };
        (api_version, raw.get())
    };
    let req: RequestIn<'_, &RawValue> = match serde_json::from_str(raw_req) {
        Ok(r) => r,
        Err(e) => {
            let uid = serde_json::from_str::<UidOnly<'_>>(raw_req)
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
    let req = req.try_map_objects(|raw, field| match serde_json::from_str(raw.get()) {
        Ok(object) => Ok(Ok(object)),
        Err(e) => raw_value_key(&e).map_or_else(
            || {
                Ok(Err(format!(
                    "request.{field} is not a valid Runtime: {}",
                    json_error(&e)
                )))
            },
            Err,
        ),
    })?;
    Ok((api_version, req, warnings))
}

/// The version of an AdmissionReview kim answers, from its `apiVersion` and `kind`.
fn version(api_version: Option<&str>, kind: Option<&str>) -> Option<&'static str> {
    match (api_version?, kind?) {
        (REVIEW_API_VERSION, "AdmissionReview") => Some(REVIEW_API_VERSION),
        (REVIEW_API_VERSION_BETA, "AdmissionReview") => Some(REVIEW_API_VERSION_BETA),
        _ => None,
    }
}
