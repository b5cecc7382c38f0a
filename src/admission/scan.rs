//! The fastest path through a well-formed review: one pass over the body that checks it is
//! JSON without decoding it, and decodes only the members kim reads.
//!
//! [`scan_review`] checks the whole body against the JSON grammar, at least as strictly as
//! serde_json does (strings eight bytes at a time). On the way it notes where each member of
//! the envelope, the request ([`super::decode::RequestIn`]), the objects and their metadata
//! that kim reads starts and ends. Those members are then decoded into the same types
//! serde_json gives: plain values directly (a string without escapes borrowed from the body, a
//! small integer, a literal, the objects and arrays of a `status` as [`Node`]s), everything else
//! by serde_json (strings with escapes, other numbers, the deletion timestamp). Everything kim
//! does not read (`spec`, `managedFields`, labels, …) is only checked.
//!
//! It answers `None` — and the caller takes the serde path (`decode.rs`), which gives the
//! answer — for anything it is not sure about: a body that is not JSON (or nested deeper than
//! [`MAX_DEPTH`]), a member kim reads that appears twice or whose value is not of the JSON type
//! serde expects (or is one serde would read otherwise, like an array for a struct), a string
//! with an escaped surrogate, invalid UTF-8, a `status` object a [`Node`] does not hold, a
//! review the serde path would refuse. So a body this path takes is one serde_json takes too;
//! the differential tests in `node.rs` and the property tests below check that, and that both
//! paths answer byte for byte the same.

use super::decode::{GroupKind, GroupResource, MetaIn, ObjectIn, Request, RequestIn, UserInfoIn};
use super::node::{self, BorrowedStr, Node};
use super::{REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use serde::Deserialize;
use serde_json::Number;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// Deepest nesting (objects and arrays, the envelope counting as 1) this path accepts; deeper
/// bodies take the serde path. Far below serde_json's recursion limit (128), so that a status
/// decoded here on its own is never one that the whole-body decoding would have refused.
const MAX_DEPTH: usize = 64;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `v` that are zero have their high bit set (and, above the first zero byte,
/// possibly others: only the lowest set bit is used).
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGH
}

/// A cursor over the body.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    /// Containers open around the cursor.
    depth: usize,
    /// A byte above 0x7F was seen (in a string); the body is then checked as UTF-8 at the end.
    non_ascii: bool,
}

impl<'a> Scan<'a> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// The next byte after whitespace.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        if c > b' ' {
            return Some(c);
        }
        self.ws();
        self.b.get(self.i).copied()
    }

    /// After a member or an item: a comma (`true`, another follows) or `close` (`false`, the
    /// container ends), either consumed; anything else is not JSON (`None`).
    #[inline(always)]
    fn more(&mut self, close: u8) -> Option<bool> {
        let c = self.peek()?;
        if c == b',' || c == close {
            self.i += 1;
            return Some(c == b',');
        }
        None
    }

    /// Consumes `c` after whitespace.
    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string; the cursor is on its opening quote. Returns the range of its content and
    /// whether it has escapes. Control characters are refused (as serde_json does), escapes
    /// are checked (`\u` with four hex digits; an escaped surrogate is refused, stricter than
    /// serde_json, which accepts a lone one in a string it skips).
    #[inline(always)]
    fn string(&mut self) -> Option<(Range<usize>, bool)> {
        let b = self.b;
        let start = self.i + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            while let Some(chunk) = b.get(i..i + 8) {
                let v = u64::from_le_bytes(chunk.try_into().ok()?);
                // A quote, a backslash, a byte below 0x20 or above 0x7F.
                let hit = zero_bytes(v ^ (ONES * u64::from(b'"')))
                    | zero_bytes(v ^ (ONES * u64::from(b'\\')))
                    | ((v.wrapping_sub(ONES * 0x20) | v) & HIGH);
                if hit != 0 {
                    i += (hit.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            match *b.get(i)? {
                b'"' => {
                    self.i = i + 1;
                    return Some((start..i, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *b.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let hex = b.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit)
                                || matches!(hex[0], b'd' | b'D')
                                    && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
                            {
                                return None;
                            }
                            i += 6;
                        }
                        _ => return None,
                    }
                }
                0x20..=0x7f => i += 1,
                0x80.. => {
                    self.non_ascii = true;
                    i += 1;
                }
                _ => return None,
            }
        }
    }

    /// A number by the JSON grammar; the cursor is on its first byte.
    fn number(&mut self) -> Option<()> {
        let b = self.b;
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        let mut i = self.i;
        if b[i] == b'-' {
            i += 1;
        }
        match *b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                digits(&mut i);
            }
            _ => return None,
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.i = i;
        Some(())
    }

    /// One value of any kind, checked and skipped; returns its range.
    fn value(&mut self) -> Option<Range<usize>> {
        self.ws();
        let start = self.i;
        // Closers of the containers opened here, innermost last.
        let mut open = [0u8; MAX_DEPTH];
        let mut n = 0;
        'value: loop {
            let c = self.peek()?;
            match c {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.b.get(self.i + 1) == Some(&close) {
                        // Empty, as most objects of managedFields are.
                        self.i += 2;
                    } else {
                        if self.depth + n == MAX_DEPTH {
                            return None;
                        }
                        self.i += 1;
                        if self.peek()? == close {
                            self.i += 1;
                        } else {
                            open[n] = close;
                            n += 1;
                            if close == b'}' {
                                self.key()?;
                            }
                            continue 'value;
                        }
                    }
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close what ends here, or go on after a comma.
            while n > 0 {
                let close = open[n - 1];
                let c = self.peek()?;
                if c == b',' {
                    self.i += 1;
                    if close == b'}' {
                        self.key()?;
                    }
                    continue 'value;
                }
                if c != close {
                    return None;
                }
                self.i += 1;
                n -= 1;
            }
            return Some(start..self.i);
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.b.get(self.i..self.i + word.len())? == word).then(|| self.i += word.len())
    }

    /// A member name and its colon (whitespace allowed before each).
    #[inline(always)]
    fn key(&mut self) -> Option<(Range<usize>, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let k = self.string()?;
        self.eat(b':')?;
        Some(k)
    }

    /// The members of an object; the cursor is on its `{`. `member` is called with each
    /// name (unescaped, as serde_json matches field names) and the cursor on the value, which
    /// it must consume.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        if self.depth == MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        self.i += 1;
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                let (name, escaped) = self.key()?;
                self.ws();
                let b = self.b;
                if escaped {
                    let quoted = std::str::from_utf8(&b[name.start - 1..name.end + 1]).ok()?;
                    let unescaped = serde_json::from_str::<String>(quoted).ok()?;
                    member(self, unescaped.as_bytes())?;
                } else {
                    member(self, &b[name])?;
                }
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// The value of a member kim reads: its range, once (serde refuses a repeated field).
    fn slot(&mut self, slot: &mut Option<Range<usize>>) -> Option<()> {
        if slot.is_some() {
            return None;
        }
        *slot = Some(self.value()?);
        Some(())
    }
}

impl<'a> Scan<'a> {
    /// A string the scan has checked, as serde_json's [`Node`] visitor gets it: borrowed when
    /// it has no escapes, else decoded by serde_json.
    fn text(&mut self) -> Option<Cow<'a, str>> {
        let b = self.b;
        let (r, escaped) = self.string()?;
        if escaped {
            let quoted = std::str::from_utf8(&b[r.start - 1..r.end + 1]).ok()?;
            serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
        } else {
            std::str::from_utf8(&b[r]).ok().map(Cow::Borrowed)
        }
    }

    /// The [`Node`] of a value the scan has checked (a status), built as serde_json's `Node`
    /// visitor builds it: the same refusals (a repeated key, more than `MAX_KEYS` members,
    /// serde_json's raw-value key), numbers other than small non-negative integers decoded by
    /// serde_json.
    fn node(&mut self) -> Option<Node<'a>> {
        let c = self.peek()?;
        Some(match c {
            b'"' => Node::Str(self.text()?),
            b'{' => {
                self.i += 1;
                let mut members: Vec<(Cow<'a, str>, Node<'a>)> = Vec::with_capacity(8);
                if self.peek()? == b'}' {
                    self.i += 1;
                } else {
                    loop {
                        self.peek()?;
                        let key = self.text()?;
                        if !node::holds(members.iter().map(|(k, _)| k.as_ref()), &key) {
                            return None;
                        }
                        self.eat(b':')?;
                        let value = self.node()?;
                        members.push((key, value));
                        if !self.more(b'}')? {
                            break;
                        }
                    }
                }
                Node::Obj(members)
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::with_capacity(4);
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        items.push(self.node()?);
                        if !self.more(b']')? {
                            break;
                        }
                    }
                }
                Node::Arr(items)
            }
            b't' => {
                self.literal(b"true")?;
                Node::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Node::Bool(false)
            }
            b'n' => {
                self.literal(b"null")?;
                Node::Null
            }
            _ => {
                let start = self.i;
                self.number()?;
                let token = &self.b[start..self.i];
                // A non-negative integer of up to 19 digits is a u64, as serde_json reads it;
                // anything else (signs, fractions, exponents, big numbers) serde_json decodes
                // into the `Number` a `Value` holds.
                let token = std::str::from_utf8(token).ok()?;
                Node::Num(
                    if token.len() <= 19 && token.bytes().all(|c| c.is_ascii_digit()) {
                        token.parse::<u64>().ok()?.into()
                    } else {
                        serde_json::from_str::<Number>(token).ok()?
                    },
                )
            }
        })
    }
}

impl<'a> Scan<'a> {
    /// A member whose value must be a string (serde refuses `null` and the rest for it).
    fn string_value(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        self.text()
    }

    /// `request.kind` as [`GroupKind`] decodes it.
    fn group_kind(&mut self) -> Option<GroupKind<'a>> {
        let mut kind = None;
        self.object(|s, name| match name {
            b"kind" if kind.is_none() => {
                kind = Some(s.string_value()?);
                Some(())
            }
            b"kind" => None,
            _ => s.value().map(drop),
        })?;
        Some(GroupKind {
            kind: kind.unwrap_or_default(),
        })
    }

    /// `request.resource` as [`GroupResource`] decodes it.
    fn group_resource(&mut self) -> Option<GroupResource<'a>> {
        let (mut group, mut resource) = (None, None);
        self.object(|s, name| match name {
            b"group" if group.is_none() => {
                group = Some(s.string_value()?);
                Some(())
            }
            b"resource" if resource.is_none() => {
                resource = Some(s.string_value()?);
                Some(())
            }
            b"group" | b"resource" => None,
            _ => s.value().map(drop),
        })?;
        Some(GroupResource {
            group: group.unwrap_or_default(),
            resource: resource.unwrap_or_default(),
        })
    }

    /// `request.userInfo` as [`UserInfoIn`] decodes it.
    fn user_info(&mut self) -> Option<UserInfoIn> {
        let (mut username, mut groups) = (None, None);
        self.object(|s, name| match name {
            b"username" if username.is_none() => {
                username = Some(match s.peek()? {
                    b'n' => s.literal(b"null").map(|()| None)?,
                    _ => Some(s.string_value()?.into_owned()),
                });
                Some(())
            }
            b"groups" if groups.is_none() => {
                groups = Some(match s.peek()? {
                    b'n' => s.literal(b"null").map(|()| None)?,
                    b'[' => {
                        s.i += 1;
                        let mut list = Vec::new();
                        if s.peek()? == b']' {
                            s.i += 1;
                        } else {
                            loop {
                                list.push(s.string_value()?.into_owned());
                                if !s.more(b']')? {
                                    break;
                                }
                            }
                        }
                        Some(list)
                    }
                    _ => return None,
                });
                Some(())
            }
            b"username" | b"groups" => None,
            _ => s.value().map(drop),
        })?;
        Some(UserInfoIn {
            username: username.flatten(),
            groups: groups.flatten(),
        })
    }
}

/// An optional object member read by `read` (absent or `null`: `None`); `None` outside when the
/// value is something serde would refuse, or might read otherwise (an array).
fn typed<'a, T>(
    body: &'a [u8],
    slot: &Slot,
    read: impl FnOnce(&mut Scan<'a>) -> Option<T>,
) -> Option<Option<T>> {
    let Some(r) = slot else {
        return Some(None);
    };
    let mut s = Scan {
        b: body,
        i: r.start,
        depth: 0,
        non_ascii: false,
    };
    s.nullable(read)
}

/// An optional integer member (`metadata.generation`): a plain integer read directly, anything
/// else decoded by serde_json (`-0` too: serde_json reads it as the float -0.0, which an `i64`
/// refuses).
fn opt_i64(body: &[u8], slot: &Slot) -> Option<Option<i64>> {
    let Some(r) = slot else {
        return Some(None);
    };
    let t = &body[r.clone()];
    let digits = t.strip_prefix(b"-").unwrap_or(t);
    if t != b"-0"
        && !digits.is_empty()
        && digits.len() <= 18
        && digits.iter().all(u8::is_ascii_digit)
    {
        return std::str::from_utf8(t).ok()?.parse().ok().map(Some);
    }
    decode(body, slot, None)
}

/// A member of a typed level: absent, or where its value is.
type Slot = Option<Range<usize>>;

/// The members of `object` / `oldObject` kim reads.
#[derive(Default)]
struct ObjectSlots {
    /// `metadata` was present (`None` inside: it was `null`).
    metadata: Option<Option<MetaSlots>>,
    status: Slot,
}

#[derive(Default)]
struct MetaSlots {
    generation: Slot,
    deletion_timestamp: Slot,
}

#[derive(Default)]
struct RequestSlots {
    uid: Slot,
    kind: Slot,
    resource: Slot,
    sub_resource: Slot,
    operation: Slot,
    user_info: Slot,
    /// `object` / `oldObject` was present (`None` inside: it was `null`).
    object: Option<Option<ObjectSlots>>,
    old_object: Option<Option<ObjectSlots>>,
    dry_run: Slot,
}

impl<'a> Scan<'a> {
    /// `null`, or an object read by `read`; anything else is `None` (serde refuses it too).
    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.peek()? {
            b'{' => read(self).map(Some),
            b'n' => self.literal(b"null").map(|()| None),
            _ => None,
        }
    }

    fn request(&mut self) -> Option<RequestSlots> {
        let mut r = RequestSlots::default();
        self.object(|s, name| match name {
            b"uid" => s.slot(&mut r.uid),
            b"kind" => s.slot(&mut r.kind),
            b"resource" => s.slot(&mut r.resource),
            b"subResource" => s.slot(&mut r.sub_resource),
            b"operation" => s.slot(&mut r.operation),
            b"userInfo" => s.slot(&mut r.user_info),
            b"dryRun" => s.slot(&mut r.dry_run),
            b"object" if r.object.is_none() => {
                r.object = Some(s.nullable(Scan::object_slots)?);
                Some(())
            }
            b"oldObject" if r.old_object.is_none() => {
                r.old_object = Some(s.nullable(Scan::object_slots)?);
                Some(())
            }
            b"object" | b"oldObject" => None,
            _ => s.value().map(drop),
        })?;
        Some(r)
    }

    fn object_slots(&mut self) -> Option<ObjectSlots> {
        let mut o = ObjectSlots::default();
        self.object(|s, name| match name {
            b"status" => s.slot(&mut o.status),
            b"metadata" if o.metadata.is_none() => {
                o.metadata = Some(s.nullable(Scan::meta_slots)?);
                Some(())
            }
            b"metadata" => None,
            _ => s.value().map(drop),
        })?;
        Some(o)
    }

    fn meta_slots(&mut self) -> Option<MetaSlots> {
        let mut m = MetaSlots::default();
        self.object(|s, name| match name {
            b"generation" => s.slot(&mut m.generation),
            b"deletionTimestamp" => s.slot(&mut m.deletion_timestamp),
            _ => s.value().map(drop),
        })?;
        Some(m)
    }
}

/// The text of a member's value (ASCII, or checked as UTF-8 with the whole body).
fn text_of<'a>(body: &'a [u8], r: &Range<usize>) -> Option<&'a str> {
    std::str::from_utf8(&body[r.clone()]).ok()
}

/// Decodes a member's text as serde_json would have decoded it in place; an absent member is
/// `default`. `None` when serde_json refuses the text.
fn decode<'a, T: Deserialize<'a>>(body: &'a [u8], slot: &Slot, default: T) -> Option<T> {
    match slot {
        None => Some(default),
        Some(r) => serde_json::from_str(text_of(body, r)?).ok(),
    }
}

/// An optional string member, borrowed when it has no escapes (as [`super::node::opt_cow`]).
fn opt_str<'a>(body: &'a [u8], slot: &Slot) -> Option<Option<Cow<'a, str>>> {
    let Some(r) = slot else {
        return Some(None);
    };
    let s = text_of(body, r)?;
    if s == "null" {
        return Some(None);
    }
    // A string without escapes (the scan checked it): its content, as serde_json borrows it.
    if let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"'))
        && !inner.contains(['"', '\\'])
    {
        return Some(Some(Cow::Borrowed(inner)));
    }
    serde_json::from_str::<Option<BorrowedStr<'a>>>(s)
        .ok()
        .map(|o| o.map(|b| b.0))
}

/// `object` / `oldObject`: absent or `null` is `None`.
fn object_in<'a>(
    body: &'a [u8],
    slots: Option<Option<ObjectSlots>>,
) -> Option<Option<ObjectIn<'a, Node<'a>>>> {
    let Some(Some(o)) = slots else {
        return Some(None);
    };
    let metadata = match o.metadata {
        None | Some(None) => None,
        Some(Some(m)) => Some(MetaIn {
            generation: opt_i64(body, &m.generation)?,
            deletion_timestamp: decode::<Option<&'a RawValue>>(body, &m.deletion_timestamp, None)?,
        }),
    };
    let status = match &o.status {
        None => None,
        Some(r) if &body[r.clone()] == b"null" => None,
        Some(r) => {
            let mut s = Scan {
                b: body,
                i: r.start,
                depth: 0,
                non_ascii: false,
            };
            Some(s.node()?)
        }
    };
    Some(Some(ObjectIn { metadata, status }))
}

/// The review's `apiVersion` and request with statuses as [`Node`]s, decoded as serde_json
/// decodes them; `None` for a body it does not take (see the module docs), which the serde path
/// then answers.
pub(super) fn scan_review(body: &[u8]) -> Option<(&'static str, Request<'_, Node<'_>>)> {
    let mut s = Scan {
        b: body,
        i: 0,
        depth: 0,
        non_ascii: false,
    };
    if s.peek()? != b'{' {
        return None;
    }
    let (mut api_version, mut kind) = (None, None);
    let mut request: Option<RequestSlots> = None;
    let mut seen_request = false;
    s.object(|s, name| match name {
        b"apiVersion" => s.slot(&mut api_version),
        b"kind" => s.slot(&mut kind),
        b"request" if !seen_request => {
            seen_request = true;
            // `null` (no request) is answered by the serde path.
            request = Some(s.nullable(Scan::request)??);
            Some(())
        }
        b"request" => None,
        _ => s.value().map(drop),
    })?;
    s.ws();
    if s.i != body.len() {
        return None;
    }
    // JSON text is UTF-8; every string was ASCII unless a byte above 0x7F was seen.
    if s.non_ascii && std::str::from_utf8(body).is_err() {
        return None;
    }
    if opt_str(body, &kind)?.as_deref() != Some("AdmissionReview") {
        return None;
    }
    let api_version = match opt_str(body, &api_version)?.as_deref() {
        Some(REVIEW_API_VERSION) => REVIEW_API_VERSION,
        Some(REVIEW_API_VERSION_BETA) => REVIEW_API_VERSION_BETA,
        _ => return None,
    };
    let r = request?;
    let dry_run = match r.dry_run.as_ref().map(|d| &body[d.clone()]) {
        None | Some(b"null") => None,
        Some(b"true") => Some(true),
        Some(b"false") => Some(false),
        Some(_) => return None,
    };
    let req = RequestIn {
        uid: opt_str(body, &r.uid)?,
        kind: typed(body, &r.kind, Scan::group_kind)?,
        resource: typed(body, &r.resource, Scan::group_resource)?,
        sub_resource: opt_str(body, &r.sub_resource)?,
        operation: opt_str(body, &r.operation)?,
        user_info: typed(body, &r.user_info, Scan::user_info)?,
        object: object_in(body, r.object)?.map(Ok),
        old_object: object_in(body, r.old_object)?.map(Ok),
        dry_run,
    };
    Some((api_version, req))
}

#[cfg(test)]
mod tests {
    //! Property tests: whatever the body, the scan takes it only if serde_json takes it, and
    //! then answers byte for byte as the serde path (`review_serde`) does.
    use super::super::node::tests::same;
    use super::super::{Hook, review, review_serde};
    use crate::status::{Action, CompatSwitch, Enforcement, JsonView, Policy};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// The configuration of the property tests below: `cases` cases and no failure file (by
    /// default proptest would write one under `proptest-regressions/` in the source tree).
    /// Instead the run's seed is printed, which the test harness shows with a failure:
    /// `PROPTEST_RNG_SEED=<seed>` replays the run.
    fn config(cases: u32) -> ProptestConfig {
        use proptest::test_runner::RngSeed;
        use std::hash::BuildHasher as _;
        let mut config = ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        let seed = match config.rng_seed {
            RngSeed::Fixed(seed) => seed,
            RngSeed::Random => std::collections::hash_map::RandomState::new().hash_one(cases),
        };
        config.rng_seed = RngSeed::Fixed(seed);
        eprintln!("proptest seed {seed}: PROPTEST_RNG_SEED={seed} replays this run");
        config
    }

    /// Checks `body` on both paths; returns whether the scan took it.
    fn agrees(policy: &Policy, body: &[u8]) -> bool {
        let scanned = super::scan_review(body).is_some();
        if scanned {
            assert!(
                serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok(),
                "scanned a body serde_json refuses: {}",
                String::from_utf8_lossy(body)
            );
        }
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        for hook in [Hook::Validate, Hook::Mutate] {
            let a = review(hook, policy, body, now);
            let b = review_serde(hook, policy, body, now);
            assert!(
                same(&a, &b),
                "{hook:?} differs for body {}\nscan: {}\nserde: {}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(&a.body),
                String::from_utf8_lossy(&b.body)
            );
        }
        scanned
    }

    fn condition(t: &str, s: &str, r: &str) -> Value {
        json!({"type": t, "status": s, "reason": r, "message": format!("{t} {r}"),
               "lastTransitionTime": "2026-11-01T10:00:00Z", "observedGeneration": 2})
    }

    /// A `runtimes/status` UPDATE shaped like the apiserver's, Pending -> Ready.
    fn review_value() -> Value {
        let object = |state: &str, configured: &str| {
            json!({
                "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
                "metadata": {"name": "r1", "namespace": "kcp-system", "generation": 2,
                    "uid": "0b7b6a8c-1111-2222-3333-444455556666",
                    "labels": {"kyma-project.io/runtime-id": "r1"},
                    "managedFields": [{"manager": "kim", "operation": "Update",
                        "fieldsType": "FieldsV1", "subresource": "status",
                        "fieldsV1": {"f:status": {".": {}, "f:state": {}}}}]},
                "spec": {"shoot": {"name": "s", "provider": {"type": "aws", "workers": [
                    {"name": "w", "minimum": 1, "maximum": 3}]}}},
                "status": {"state": state, "conditions": [
                    condition("Provisioned", "True", "ShootCreationCompleted"),
                    condition("KubeconfigReady", "True", "KubeconfigCreated"),
                    condition("Configured", configured, "ConfigurationCompleted"),
                ]}
            })
        };
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
                "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
                "subResource": "status", "name": "r1", "namespace": "kcp-system",
                "operation": "UPDATE",
                "userInfo": {"username": "system:serviceaccount:kim-system:kim-controller",
                             "groups": ["system:serviceaccounts", "system:authenticated"]},
                "object": object("Ready", "True"),
                "oldObject": object("Pending", "Unknown"),
                "dryRun": false,
                "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
            }
        })
    }

    /// Where a generated value goes: members kim reads, members it skips, new members.
    const PLACES: &[&str] = &[
        "/request/object/spec",
        "/request/object/status",
        "/request/object/status/state",
        "/request/object/status/conditions",
        "/request/object/status/conditions/0",
        "/request/object/status/conditions/1/lastTransitionTime",
        "/request/object/status/conditions/2/observedGeneration",
        "/request/object/metadata",
        "/request/object/metadata/generation",
        "/request/object/metadata/deletionTimestamp",
        "/request/object/metadata/labels",
        "/request/object/metadata/managedFields",
        "/request/object",
        "/request/oldObject",
        "/request/oldObject/status",
        "/request/oldObject/metadata/generation",
        "/request/uid",
        "/request/kind",
        "/request/resource",
        "/request/subResource",
        "/request/operation",
        "/request/userInfo",
        "/request/userInfo/username",
        "/request/userInfo/groups",
        "/request/dryRun",
        "/request/options",
        "/request/extra",
        "/request",
        "/apiVersion",
        "/kind",
        "/extra",
    ];

    /// Member names: those kim reads at some level, and any others.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "uid",
                "kind",
                "status",
                "metadata",
                "generation",
                "deletionTimestamp",
                "request",
                "object",
                "oldObject",
                "userInfo",
                "dryRun",
                "apiVersion",
                "state",
                "conditions",
                "type",
                "reason",
                "subResource",
                "operation",
                "resource",
                "group",
                "username",
                "groups",
                "$serde_json::private::RawValue",
            ])
            .prop_map(str::to_string),
            "\\PC{0,6}",
            any::<String>(),
        ]
    }

    fn string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9 .:/-]{0,24}",
            prop::sample::select(vec![
                "Ready",
                "Pending",
                "Failed",
                "Terminating",
                "True",
                "False",
                "Unknown",
                "Provisioned",
                "ShootCreationCompleted",
                "UPDATE",
                "status",
                "AdmissionReview",
                "admission.k8s.io/v1",
                "infrastructuremanager.kyma-project.io",
                "runtimes",
                "2026-11-01T10:00:00Z",
                "2026-11-02T10:00:00+01:00",
                "null",
                "",
            ])
            .prop_map(str::to_string),
            any::<String>(),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            (-3i64..4).prop_map(Value::from),
            string().prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Text put into a body: whitespace, JSON tokens, broken tokens.
    const TOKENS: &[&str] = &[
        " ",
        "\n",
        "\t",
        "\r",
        "\u{c}",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "0",
        "-0",
        "01",
        "1.",
        ".5",
        "1e",
        "1E+2",
        "-1.5e-3",
        "2.0",
        "1e999",
        "true",
        "tru",
        "null",
        "nul",
        "false",
        "\"a\"",
        "\"\\u00e9\"",
        "\"\\ud800\"",
        "\"\\uDC00\\u0041\"",
        "\"\\x\"",
        "\"\u{1}\"",
        "\"\u{7f}\"",
        "é",
        "\u{feff}",
        "\"uid\":\"dup\",",
        "\"status\":null,",
        "\"status\":{},",
        "\"metadata\":[],",
        "\"object\":null,",
        "\"generation\":3,",
        "\"generation\":1.0,",
        "\"dryRun\":1,",
        "\"request\":null,",
        "\"kind\":5,",
        "\"u\\u0069d\":\"x\",",
        "\"deletionTimestamp\":\"2026-11-02T00:00:00Z\",",
    ];

    /// Textual edits at byte positions (bytes, not chars: invalid UTF-8 included).
    fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, prop::sample::Index)>> {
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0u8..4,
                any::<prop::sample::Index>(),
            ),
            0..3,
        )
    }

    fn apply(mut t: Vec<u8>, edits: &[(prop::sample::Index, u8, prop::sample::Index)]) -> Vec<u8> {
        for (at, kind, what) in edits {
            let i = at.index(t.len() + 1);
            match kind {
                0 if i < t.len() => {
                    t.remove(i);
                }
                1 => t.insert(i, what.index(256) as u8),
                _ => {
                    let tok = TOKENS[what.index(TOKENS.len())].as_bytes();
                    t.splice(i..i, tok.iter().copied());
                }
            }
        }
        t
    }

    fn put(v: &mut Value, place: &str, value: Value) {
        let (parent, member) = place.rsplit_once('/').unwrap();
        match v.pointer_mut(parent) {
            Some(Value::Object(m)) => {
                m.insert(member.to_string(), value);
            }
            Some(Value::Array(a)) => {
                if let Some(slot) = member.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    *slot = value;
                }
            }
            _ => {}
        }
    }

    /// Whether every string of `node` (keys too) is borrowed from the body exactly when
    /// serde_json writes it without escapes, as serde_json borrows the strings it reads.
    fn borrows_unescaped(node: &super::Node<'_>) -> bool {
        use super::Node;
        use std::borrow::Cow;
        let plain = |s: &Cow<'_, str>| {
            let unescaped = serde_json::to_string(s.as_ref()).unwrap() == format!("\"{s}\"");
            matches!(s, Cow::Borrowed(_)) == unescaped
        };
        match node {
            Node::Str(s) => plain(s),
            Node::Arr(items) => items.iter().all(borrows_unescaped),
            Node::Obj(members) => members
                .iter()
                .all(|(k, v)| plain(k) && borrows_unescaped(v)),
            Node::Null | Node::Bool(_) | Node::Num(_) => true,
        }
    }

    fn body(v: &Value, pretty: bool) -> Vec<u8> {
        if pretty {
            serde_json::to_vec_pretty(v).unwrap()
        } else {
            serde_json::to_vec(v).unwrap()
        }
    }

    /// The property tests are not vacuous: many generated reviews (without textual edits) are
    /// taken by the scan (the others have a value serde refuses where kim reads one).
    #[test]
    fn scan_takes_most_generated_reviews() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let policy = Policy::builtin();
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let strategy = (prop::sample::select(PLACES), json_value(), any::<bool>());
        let (mut taken, n) = (0, 600);
        for _ in 0..n {
            let (at, value, pretty) = strategy.new_tree(&mut runner).unwrap().current();
            let mut v = review_value();
            put(&mut v, at, value);
            taken += usize::from(agrees(&policy, &body(&v, pretty)));
        }
        eprintln!("scanned {taken} of {n} generated reviews");
        assert!(taken * 5 > n * 2, "scanned {taken} of {n}");
    }

    proptest! {
        #![proptest_config(config(1500))]

        /// A generated value put at a place of a review, written compactly or pretty, then
        /// zero to two textual edits.
        #[test]
        fn scan_agrees_with_serde(
            place in prop::sample::select(PLACES),
            value in json_value(),
            pretty in any::<bool>(),
            edits in edits(),
        ) {
            let policy = Policy::builtin();
            let mut v = review_value();
            put(&mut v, place, value);
            let text = body(&v, pretty);
            agrees(&policy, &text);
            agrees(&policy, &apply(text, &edits));
        }

        /// A status of any shape is built as the `Value` serde_json builds (or refused by
        /// both), member order included, its strings borrowed where they have no escapes.
        #[test]
        fn nodes_are_built_as_serde_builds_them(value in json_value(), pretty in any::<bool>()) {
            let text = body(&value, pretty);
            let mut s = super::Scan { b: &text, i: 0, depth: 0, non_ascii: false };
            let checked = s.value().is_some();
            let mut s = super::Scan { b: &text, i: 0, depth: 0, non_ascii: false };
            let built = if checked { s.node() } else { None };
            let serde = serde_json::from_slice::<Value>(&text).ok();
            match (&built, &serde) {
                (Some(a), Some(b)) => {
                    prop_assert!(a.eq_value(b));
                    prop_assert_eq!(a.to_json(), b.to_string());
                    prop_assert!(borrows_unescaped(a));
                }
                (None, None) => {}
                // The scan refuses more (escaped surrogates, serde_json's raw-value key, which a
                // `Value` reads as an instruction); never the other way round.
                (None, Some(_)) => prop_assert!(
                    !checked
                        || text.windows(2).any(|w| w == b"\\u")
                        || super::super::decode::has_raw_value_key(std::str::from_utf8(&text).unwrap())
                ),
                (Some(_), None) => prop_assert!(false, "built a Node serde_json refuses"),
            }
        }

        /// Token soup in place of a skipped member and of a status: the scan never takes
        /// what serde_json refuses.
        #[test]
        fn token_soup_is_never_taken_when_serde_refuses(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 1..12),
            in_status in any::<bool>(),
        ) {
            let policy = Policy::builtin();
            let mut v = review_value();
            let place = if in_status { "status" } else { "spec" };
            v["request"]["object"][place] = json!("@@");
            let text = serde_json::to_string(&v).unwrap().replace("\"@@\"", &tokens.concat());
            agrees(&policy, text.as_bytes());
        }
    }

    /// Every AdmissionReview of the samples (`samples/admission`), by name.
    fn samples() -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/admission");
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        out.sort();
        assert!(!out.is_empty(), "no samples in {}", dir.display());
        out
    }

    /// The policies the answers depend on: the built-in one, every rule in warn mode, KIM's
    /// history switched on, and both switches with warn mode.
    fn policies() -> Vec<Policy> {
        vec![
            Policy::builtin(),
            Policy::builtin().with_enforcement(Enforcement::Warn),
            Policy::builtin().with_switch(CompatSwitch::KimHistory),
            Policy::builtin()
                .with_switch(CompatSwitch::KimHistory)
                .with_switch(CompatSwitch::TerminatingConditionType)
                .with_enforcement(Enforcement::Warn),
        ]
    }

    /// KIM-era writes (retired condition types, reasons and states, stored values the model
    /// ratchets) and other writes whose answer carries warnings or ratcheted violations: taken
    /// by the scan and answered as by serde_json under every policy, and the answers do carry
    /// them (the check is not vacuous).
    #[test]
    fn kim_era_and_warned_writes_agree_in_every_mode() {
        let base = review_value();
        let retired = json!({"type": "RuntimeProvisioning", "status": "True", "reason": "Verified",
            "message": "verified", "lastTransitionTime": "2024-06-11T10:00:00Z"});
        let mut writes: Vec<(&str, Value)> = Vec::new();
        // A retired condition type carried unchanged on a write (ratcheted).
        let mut v = base.clone();
        for o in ["object", "oldObject"] {
            v["request"][o]["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(retired.clone());
        }
        writes.push(("retired type carried", v.clone()));
        // The same condition written anew (denied, warned, or accepted under kimHistory).
        let mut anew = v.clone();
        anew["request"]["object"]["status"]["conditions"][3]["lastTransitionTime"] =
            json!("2026-11-01T10:00:00Z");
        writes.push(("retired type written anew", anew));
        // Retired reasons of a current type, and a pair KIM declared at the same time.
        let mut r = base.clone();
        r["request"]["object"]["status"]["conditions"][0]["reason"] = json!("ProcessingCompleted");
        r["request"]["object"]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "OidcConfigured", "status": "True", "reason": "OidcConfigured"}));
        writes.push(("retired reasons", r));
        // The retired state Deleting stored, Terminating written while deleting; and written.
        let mut d = base.clone();
        d["request"]["oldObject"]["status"]["state"] = json!("Deleting");
        d["request"]["object"]["status"]["state"] = json!("Terminating");
        d["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
        d["request"]["object"]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Provisioned", "status": "Unknown", "reason": "Deletion"}));
        writes.push(("stored Deleting", d.clone()));
        d["request"]["object"]["status"]["state"] = json!("Deleting");
        writes.push(("Deleting written", d));
        // An unknown state with control and non-ASCII characters, stored and written.
        let mut u = base.clone();
        for o in ["object", "oldObject"] {
            u["request"][o]["status"]["state"] = json!("R\u{e9}ady\u{1}\u{202e}");
        }
        writes.push(("unknown state", u));
        // A stored unparsable lastTransitionTime and a typeless condition, both unchanged.
        let mut t = base.clone();
        for o in ["object", "oldObject"] {
            let c = &mut t["request"][o]["status"]["conditions"];
            c[0]["lastTransitionTime"] = json!("yesterday");
            c.as_array_mut()
                .unwrap()
                .push(json!({"status": "True", "reason": "Whatever"}));
        }
        writes.push(("unparsable time, typeless condition", t));
        // Many unknown types with long non-ASCII names: warnings cut at their limit.
        let mut w = base.clone();
        for i in 0..14 {
            w["request"]["object"]["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(
                    json!({"type": format!("T{i}-{}", "\u{e9}\u{1F600}".repeat(40)),
                    "status": "True", "reason": "R"}),
                );
        }
        writes.push(("many long unknown types", w));

        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        let (mut warned, mut ratcheted) = (0, 0);
        for policy in &policies() {
            for (what, v) in &writes {
                for pretty in [false, true] {
                    let text = body(v, pretty);
                    assert!(agrees(policy, &text), "{what}: not scanned");
                    let o = review(Hook::Validate, policy, &text, now);
                    let answer: Value = serde_json::from_slice(&o.body).unwrap();
                    let warnings = answer["response"]["warnings"]
                        .as_array()
                        .map_or(0, Vec::len);
                    warned += usize::from(warnings > 0);
                    ratcheted += o
                        .violations
                        .iter()
                        .filter(|(_, a)| *a == Action::Ratcheted)
                        .count();
                }
            }
        }
        assert!(warned > 20, "{warned} answers with warnings");
        assert!(ratcheted > 10, "{ratcheted} ratcheted violations");
    }

    /// What the webhook logs at `info` (see [`Outcome::is_routine`]): a ratcheted-only write
    /// is routine; the same unknown condition type is not when its rule is in `warn` mode
    /// (allowed too), nor when denied.
    #[test]
    fn ratcheted_answers_are_routine_warned_and_denied_ones_are_not() {
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        let unknown = json!({"type": "Unheard", "status": "True", "reason": "R"});
        let mut carried = review_value();
        for o in ["object", "oldObject"] {
            carried["request"][o]["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(unknown.clone());
        }
        let mut added = review_value();
        added["request"]["object"]["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(unknown);
        let deny = Policy::builtin();
        let warn = Policy::builtin().with_enforcement(Enforcement::Warn);
        let answer = |policy: &Policy, v: &Value| {
            let o = review(Hook::Validate, policy, &body(v, false), now);
            let actions: Vec<Action> = o.violations.iter().map(|(_, a)| *a).collect();
            (o.allowed, actions, o.is_routine())
        };
        assert_eq!(
            answer(&deny, &carried),
            (true, vec![Action::Ratcheted], true)
        );
        assert_eq!(answer(&deny, &added), (false, vec![Action::Deny], false));
        assert_eq!(answer(&warn, &added), (true, vec![Action::Warn], false));
        assert_eq!(answer(&deny, &review_value()), (true, vec![], true));
    }

    proptest! {
        #![proptest_config(config(400))]

        /// A shared sample under zero to two textual edits, under any policy.
        #[test]
        fn edited_samples_agree(
            sample in any::<prop::sample::Index>(),
            policy in any::<prop::sample::Index>(),
            edits in edits(),
        ) {
            let samples = samples();
            let policies = policies();
            let (_, text) = sample.get(&samples);
            agrees(policy.get(&policies), &apply(text.clone(), &edits));
        }
    }

    /// The shared sample reviews, the bench-shaped review and its variants are taken by the
    /// scan and answered as by serde_json.
    #[test]
    fn samples_are_scanned_and_agree() {
        let policy = Policy::builtin();
        let base = serde_json::to_vec(&review_value()).unwrap();
        assert!(agrees(&policy, &base));
        assert!(agrees(
            &policy,
            &serde_json::to_vec_pretty(&review_value()).unwrap()
        ));
        let samples = samples();
        for (name, body) in &samples {
            let v: Value = serde_json::from_slice(body).unwrap();
            // Three samples are bare AdmissionRequests: the serde path answers them (as v1,
            // with a warning); wrapped in a v1 envelope they are scanned.
            let enveloped = v.get("kind").and_then(Value::as_str) == Some("AdmissionReview");
            let wrapped = if enveloped {
                v.clone()
            } else {
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": v.clone()})
            };
            for policy in &policies() {
                assert_eq!(agrees(policy, body), enveloped, "sample {name}");
                for text in [
                    serde_json::to_vec(&wrapped).unwrap(),
                    serde_json::to_vec_pretty(&wrapped).unwrap(),
                ] {
                    assert!(
                        agrees(policy, &text),
                        "sample {name}, enveloped, not scanned"
                    );
                }
            }
        }
        eprintln!("{} sample reviews", samples.len());
        // Escapes and non-ASCII text in read and skipped members, a deletion timestamp, v1beta1.
        let mut v = review_value();
        v["request"]["uid"] = json!("uid-\u{e9}-\"q\"");
        v["request"]["userInfo"]["username"] = json!("\u{1F600}user\\n");
        v["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
        v["request"]["object"]["spec"]["note"] = json!("caf\u{e9} \u{1} \u{2028}");
        v["request"]["object"]["status"]["conditions"][0]["message"] =
            json!("d\u{e9}j\u{e0} \"vu\"");
        assert!(agrees(&policy, &serde_json::to_vec(&v).unwrap()));
        v["apiVersion"] = json!("admission.k8s.io/v1beta1");
        assert!(agrees(&policy, &serde_json::to_vec(&v).unwrap()));
        // A name with an escape is matched unescaped, as serde_json matches field names.
        let text = String::from_utf8(base.clone()).unwrap();
        assert!(agrees(
            &policy,
            text.replacen("\"operation\"", "\"oper\\u0061tion\"", 1)
                .as_bytes()
        ));
        // Declined (the serde path answers): a read member twice, nesting deeper than the scan
        // goes, a request that is null, invalid UTF-8.
        for declined in [
            text.replacen("\"uid\":", "\"uid\":\"a\",\"uid\":", 1),
            text.replacen(
                "\"spec\":",
                &format!("\"spec\":{}1{},\"x\":", "[".repeat(70), "]".repeat(70)),
                1,
            ),
            text.replacen("\"request\":{", "\"request\":null,\"r\":{", 1),
        ] {
            assert!(!agrees(&policy, declined.as_bytes()), "scanned: {declined}");
        }
        let mut bad = base.clone();
        let at = text.find("kcp-system").unwrap();
        bad[at] = 0xff;
        assert!(!agrees(&policy, &bad));
    }

    /// `metadata.generation` written `-0` (in `object` or `oldObject`): serde_json reads `-0`
    /// as the float -0.0, which an `i64` refuses, so the object is not a valid Runtime and the
    /// review is denied with 400; the scan answers the same and does not read it as 0.
    #[test]
    fn negative_zero_generation_is_answered_as_serde_json_answers_it() {
        let text = serde_json::to_string(&review_value()).unwrap();
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        for nth in 0..2 {
            let mut parts = text.split("\"generation\":2");
            let mut body = String::new();
            for (i, part) in parts.by_ref().enumerate() {
                if i > 0 {
                    body.push_str(if i - 1 == nth {
                        "\"generation\":-0"
                    } else {
                        "\"generation\":2"
                    });
                }
                body.push_str(part);
            }
            assert_ne!(body, text);
            for policy in &policies() {
                agrees(policy, body.as_bytes());
                for hook in [Hook::Validate, Hook::Mutate] {
                    let o = review(hook, policy, body.as_bytes(), now);
                    assert_eq!((o.allowed, o.code), (false, 400), "{hook:?}: {body}");
                }
            }
        }
    }
}
