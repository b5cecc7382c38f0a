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
//!
//! What decoding builds is bounded by [`DECODED_LIMIT`] per review, not only by the body's
//! size: small JSON can build large values (`[{"a":0},…]`, 8 bytes a member, builds an
//! `IndexMap` of some 500 bytes for each). Each pass keeps an estimate of the heap it has built
//! — every `status` (and, in the staged reading, `apiVersion`/`kind`) value and the strings of
//! `userInfo.groups` — and stops at the limit ([`Refusal::TooLarge`], answered 413). The
//! estimate is kept in a thread-local counter that each pass sets ([`Limited`]): serde's derive
//! cannot carry a `DeserializeSeed` through [`Envelope`], [`RequestIn`] and [`ObjectIn`] down
//! to [`Json`], and a pass runs on one thread from start to end.

use super::{REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use crate::status::Snapshot;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cell::Cell;
use std::convert::Infallible;
use std::fmt;
use std::mem::size_of;

/// Most heap one review's decoding may build: 16 MiB, as estimated while decoding (what glibc's
/// malloc holds for each allocation). A status the model evaluates in full has at most 64
/// conditions (a longer list is denied as malformed) of strings the CRD bounds (messages of
/// 32 KiB): it builds little more than its own JSON, so two of them at etcd's 1.5 MiB object
/// limit (`object` and `oldObject`) stay far below it; a list of 10 000 conditions (1.5 MB)
/// builds 13 MB and is still read, to be denied as malformed by the model. A review over
/// the limit is answered 413. The webhook evaluates bodies of at most 16 KiB inline on its
/// async workers (JSON builds at most about 152 bytes for each of its bytes, arrays nested in
/// arrays: 2.4 MiB each) and at most two larger ones at a time, one on one core
/// (`webhook::LARGE_REVIEWS_AT_ONCE`), so decoding holds at most min(cores, 2) × 16 MiB +
/// workers × 2.4 MiB at once besides the 32 MiB of bodies in flight, more cores adding only
/// their workers' 2.4 MiB: 18.4 MiB with the chart's limits (500m CPU, which the process
/// counts as one core and one worker; 192 MiB of memory). Before (2026-12-03) it was 2 × cores
/// × 16 MiB (32 MiB on the chart's limits, 2 GiB on 64 cores). Unbounded (2026-12-03), one
/// 7 MiB review of `[{"a":0},…]` statuses grew the process by 444 MiB RSS; bounded, by 32 MiB.
pub const DECODED_LIMIT: usize = 16 * 1024 * 1024;

thread_local! {
    /// Bytes the decoding pass on this thread may still build; `None` outside a pass.
    static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A decoding pass's hold on [`LEFT`]: set to `limit` ([`DECODED_LIMIT`] in [`one_pass`] and
/// [`staged`]), the value before restored when dropped (also by a panic).
pub(super) struct Limited(Option<usize>);

impl Limited {
    pub(super) fn start(limit: usize) -> Limited {
        Limited(LEFT.with(|left| left.replace(Some(limit))))
    }

    /// What the pass has charged so far out of `limit`.
    #[cfg(test)]
    pub(super) fn charged(limit: usize) -> usize {
        LEFT.with(|left| limit - left.get().unwrap_or(limit))
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        LEFT.with(|left| left.set(self.0));
    }
}

/// Start of the error a pass stops at when it reaches its limit.
const FOUND_DECODED_LIMIT: &str = "kim: decoded limit reached";

/// Charges `bytes` about to be built to the pass on this thread; an error once they do not fit.
fn charge<E: de::Error>(bytes: usize) -> Result<(), E> {
    LEFT.with(|left| match left.get() {
        None => Ok(()),
        Some(n) if bytes <= n => {
            left.set(Some(n - bytes));
            Ok(())
        }
        Some(_) => {
            left.set(Some(0));
            Err(E::custom(FOUND_DECODED_LIMIT))
        }
    })
}

/// What glibc's malloc holds for an allocation of `n` bytes: a header word, 16-byte granules,
/// 32 bytes at least; nothing for no allocation.
const fn heap(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        let chunk = (n + 8).div_ceil(16) * 16;
        if chunk < 32 { 32 } else { chunk }
    }
}

/// What growing a `Vec` of `T` from `from` to `to` elements adds.
const fn vec_growth<T>(from: usize, to: usize) -> usize {
    heap(to * size_of::<T>()) - heap(from * size_of::<T>())
}

/// The capacity `Vec` grows a full buffer of `cap` elements to on a push (std's amortized
/// growth: double, 4 at least for small elements).
const fn next_capacity(cap: usize) -> usize {
    if cap * 2 < 4 { 4 } else { cap * 2 }
}

/// An entry of serde_json's `Map` (`IndexMap` with `preserve_order`): hash, key, value.
type MapEntry = (u64, String, Value);

/// The growth of a `Map` as members are inserted, as `IndexMap` grows: a hash table of `usize`
/// indices (hashbrown: a power of two of buckets, 7/8 usable, 4 at least, plus 16 control
/// bytes) and the entries, reserved to the table's capacity.
#[derive(Default)]
struct MapGrowth {
    buckets: usize,
}

impl MapGrowth {
    const fn capacity(buckets: usize) -> usize {
        if buckets < 8 {
            buckets.saturating_sub(1)
        } else {
            buckets / 8 * 7
        }
    }

    const fn bytes(buckets: usize) -> usize {
        if buckets == 0 {
            0
        } else {
            heap(buckets * size_of::<usize>() + buckets + 16)
                + heap(Self::capacity(buckets) * size_of::<MapEntry>())
        }
    }

    /// What inserting the `n`th member adds (0 while it fits).
    fn member(&mut self, n: usize) -> usize {
        if n <= Self::capacity(self.buckets) {
            return 0;
        }
        let before = Self::bytes(self.buckets);
        self.buckets = if self.buckets == 0 {
            4
        } else {
            self.buckets * 2
        };
        Self::bytes(self.buckets) - before
    }
}

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
    pub(super) groups: Option<Strings>,
}

/// A list of strings whose building is charged to the pass ([`charge`]): `userInfo.groups`,
/// the one list kim reads outside a `status`.
pub(super) struct Strings(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strings, A::Error> {
                let mut items: Vec<String> = Vec::new();
                while let Some(BorrowedStr(s)) = seq.next_element()? {
                    grow::<_, A::Error>(&mut items)?;
                    charge::<A::Error>(heap(s.len()))?;
                    items.push(s.into_owned());
                }
                Ok(Strings(items))
            }
        }
        d.deserialize_seq(V)
    }
}

/// Makes room for one more element in `items`, charged first when the buffer has to grow.
fn grow<T, E: de::Error>(items: &mut Vec<T>) -> Result<(), E> {
    if items.len() == items.capacity() {
        let to = next_capacity(items.capacity());
        charge::<E>(vec_growth::<T>(items.capacity(), to))?;
        items.reserve_exact(to - items.len());
    }
    Ok(())
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
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        charge::<E>(heap(s.len()))?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        charge::<E>(heap(s.capacity()))?;
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Json(item)) = seq.next_element()? {
            grow::<_, A::Error>(&mut items)?;
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        let mut growth = MapGrowth::default();
        while let Some(BorrowedStr(key)) = map.next_key()? {
            if key == RAW_VALUE_KEY {
                return Err(de::Error::custom(FOUND_RAW_VALUE_KEY));
            }
            charge::<A::Error>(heap(key.len()) + growth.member(members.len() + 1))?;
            let Json(value) = map.next_value()?;
            members.insert(key.into_owned(), value);
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
    /// What decoding builds would go over [`DECODED_LIMIT`]: answered as an oversized body is
    /// (413, the uid salvaged from the body).
    TooLarge(String),
}

/// The refusal of a body with [`RAW_VALUE_KEY`] where kim reads a value, or of one that
/// builds more than [`DECODED_LIMIT`]; `None` for any other error.
fn raw_value_key(e: &serde_json::Error) -> Option<Refusal> {
    let text = e.to_string();
    if text.starts_with(FOUND_DECODED_LIMIT) {
        return Some(too_large());
    }
    text.starts_with(FOUND_RAW_VALUE_KEY).then(|| {
        Refusal::Body(format!(
            "request body uses the reserved key \"{RAW_VALUE_KEY}\" (kim does not accept it)"
        ))
    })
}

/// The refusal of a review that builds more than [`DECODED_LIMIT`].
fn too_large() -> Refusal {
    Refusal::TooLarge(format!(
        "request decodes to more than {DECODED_LIMIT} bytes ({} MiB, the most one review may build in kim)",
        DECODED_LIMIT / (1024 * 1024)
    ))
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
    match one_pass(text) {
        Ok(Some(decoded)) => Ok(decoded),
        Ok(None) => staged(text),
        Err(refusal) => Err(refusal),
    }
}

/// The review in one pass, when it is a review of a known version with a request that decodes
/// whole (every object included); `None` otherwise; [`Refusal::TooLarge`] as soon as what it
/// builds reaches [`DECODED_LIMIT`] (the staged reading would reach it too).
pub(super) fn one_pass(text: &str) -> Result<Option<Decoded<'_>>, Refusal> {
    let _limited = Limited::start(DECODED_LIMIT);
    let env: Envelope<'_, RequestIn<'_, ObjectIn<'_>>> = match serde_json::from_str(text) {
        Ok(env) => env,
        Err(e) if e.to_string().starts_with(FOUND_DECODED_LIMIT) => return Err(too_large()),
        Err(_) => return Ok(None),
    };
    let Some(api_version) = version(env.api_version.as_deref(), env.kind.as_deref()) else {
        return Ok(None);
    };
    let Some(req) = env.request else {
        return Ok(None);
    };
    let Ok(req) = req.try_map_objects(|o, _| Ok::<_, Infallible>(Ok(o)));
    Ok(Some((api_version, req, Vec::new())))
}

/// [`decode_review`] level by level, for a body the one pass does not take: the envelope with
/// the request raw, the request with the objects raw, then each object, so that a refusal says
/// which level is wrong and an object is judged only where kim reads it.
pub(super) fn staged(text: &str) -> Result<Decoded<'_>, Refusal> {
    let _limited = Limited::start(DECODED_LIMIT);
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
        Err(e) if e.to_string().starts_with(FOUND_DECODED_LIMIT) => return Err(too_large()),
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
