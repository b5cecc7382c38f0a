//! The fast decoder of a well-formed review: one hand-written pass over the body that checks
//! the whole document as strictly as `serde_json` does, skips everything kim does not read
//! (`spec`, `managedFields`, …) without allocating, and reads each object's `status` into
//! borrowed [`Node`]s instead of `serde_json::Value`s.
//!
//! It answers only what it can decode exactly as [`super::FastReview`] (serde) would: on any
//! input it is not sure about — invalid JSON anywhere, a wrong type, a duplicate field, a number
//! that is not a plain non-negative integer inside `status`, a `\u` surrogate, deep nesting,
//! a top-level that is not an object, … — it gives up ([`Bail`]) and the caller runs the serde
//! decoders, which then produce the answer (and the precise error) as before. So for every
//! body, the answer is the one the serde path gives; this only makes the common case cheap.

use super::{GroupKind, GroupResource, REVIEW_API_VERSION, REVIEW_API_VERSION_BETA};
use super::{RequestIn, UserInfoIn};
use crate::status::{JsonView, Snapshot};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use std::borrow::Cow;

/// The input is not decoded here; use the serde path.
#[derive(Debug)]
pub(super) struct Bail;

type R<T> = Result<T, Bail>;

/// Deepest nesting skipped here (serde's skipping has no limit; deeper input falls back).
const MAX_SKIP_DEPTH: usize = 256;
/// Deepest nesting inside a `status` read as [`Node`]s (serde allows about 120 there).
const MAX_STATUS_DEPTH: usize = 32;
/// Most members of one object inside a `status` (duplicates are looked for by a linear scan).
const MAX_STATUS_KEYS: usize = 32;

/// A JSON value inside a `status`, borrowing its strings from the body when they have no
/// escapes. Only what serde_json would read into an equal `Value`: integers are non-negative
/// and fit `u64` (serde's `PosInt`), objects have no duplicate keys (kept in input order).
#[derive(Debug)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Num(u64),
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
            Node::Num(n) => s.serialize_u64(*n),
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
            Node::Num(n) => i64::try_from(*n).ok(),
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
            (Node::Num(a), Value::Number(b)) => b.as_u64() == Some(*a),
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

/// `request.object` / `request.oldObject` as read here.
#[derive(Debug, Default)]
pub(super) struct Object<'a> {
    generation: Option<i64>,
    deleting: bool,
    status: Option<Node<'a>>,
}

impl<'a> Object<'a> {
    pub(super) fn snapshot(&self) -> Snapshot<'_, Node<'a>> {
        Snapshot {
            generation: self.generation,
            deleting: self.deleting,
            status: self.status.as_ref(),
        }
    }
}

/// A review decoded here: what [`super::FastReview`] gives on the fast path.
pub(super) struct Review<'a> {
    pub api_version: &'static str,
    pub request: RequestIn<'a, Object<'a>>,
}

/// Bytes that end the plain part of a string: `"`, `\` and control characters.
static STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The high bit of each byte of `x` (little-endian) that is a [`STOP`] byte, at least for
/// the lowest such byte (bytes above it may be flagged spuriously; only the lowest is used).
#[inline]
fn stops(x: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let ctrl = x.wrapping_sub(ONES * 0x20) & !x;
    let q = x ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = x ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (ctrl | quote | backslash) & (ONES << 7)
}

/// With `i` just after an opening quote: the index after the closing quote, and whether the
/// string has escapes. Checks the contents as serde_json does: no control characters, only
/// valid escapes (`\u` with four hex digits; which code point is not looked at here).
#[inline(always)]
fn str_end(s: &[u8], mut i: usize) -> R<(usize, bool)> {
    let mut escaped = false;
    loop {
        // The next stop byte: eight bytes at a time while they are there.
        loop {
            if let Some(chunk) = s.get(i..i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let stop = stops(u64::from_le_bytes(word));
                if stop != 0 {
                    i += (stop.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            } else {
                match s
                    .get(i..)
                    .and_then(|t| t.iter().position(|&b| STOP[b as usize]))
                {
                    Some(n) => {
                        i += n;
                        break;
                    }
                    None => return Err(Bail),
                }
            }
        }
        match s[i] {
            b'"' => return Ok((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                match s.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        hex4(s.get(i + 2..).ok_or(Bail)?)?;
                        i += 6;
                    }
                    _ => return Err(Bail),
                }
            }
            _ => return Err(Bail),
        }
    }
}

/// The byte at `i`, after whitespace (space, tab, newline, carriage return), and its index.
#[inline(always)]
fn next(s: &[u8], mut i: usize) -> R<(u8, usize)> {
    loop {
        let c = *s.get(i).ok_or(Bail)?;
        if c > b' ' || !matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
            return Ok((c, i));
        }
        i += 1;
    }
}

/// Skips digits from `i`; the index after them.
#[inline(always)]
fn digits(s: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = s.get(i) {
        i += 1;
    }
    i
}

/// With `i` at a number (`-` or a digit): the index after it, with serde_json's grammar.
fn number_end(s: &[u8], mut i: usize) -> R<usize> {
    if s.get(i) == Some(&b'-') {
        i += 1;
    }
    match s.get(i) {
        Some(b'0') => {
            i += 1;
            if let Some(b'0'..=b'9') = s.get(i) {
                return Err(Bail);
            }
        }
        Some(b'1'..=b'9') => i = digits(s, i + 1),
        _ => return Err(Bail),
    }
    if s.get(i) == Some(&b'.') {
        let end = digits(s, i + 1);
        if end == i + 1 {
            return Err(Bail);
        }
        i = end;
    }
    if let Some(b'e' | b'E') = s.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = s.get(i) {
            i += 1;
        }
        let end = digits(s, i);
        if end == i {
            return Err(Bail);
        }
        i = end;
    }
    Ok(i)
}

/// With `i` after a `{` or a `,` of an object: the index after the next key's colon.
#[inline(always)]
fn key_end(s: &[u8], i: usize) -> R<usize> {
    let (c, i) = next(s, i)?;
    if c != b'"' {
        return Err(Bail);
    }
    let (i, _) = str_end(s, i + 1)?;
    let (c, i) = next(s, i)?;
    if c != b':' {
        return Err(Bail);
    }
    Ok(i + 1)
}

/// Skips one value (any JSON) starting at or after whitespace at `i`, checking it as serde_json
/// does; returns the index after it. Iterative, nesting up to [`MAX_SKIP_DEPTH`].
fn skip(s: &[u8], i: usize) -> R<usize> {
    let mut stack = [0u8; MAX_SKIP_DEPTH];
    let mut depth = 0;
    let mut i = i;
    loop {
        let (c, at) = next(s, i)?;
        i = at + 1;
        match c {
            b'"' => i = str_end(s, i)?.0,
            b'{' | b'[' => {
                let (n, at) = next(s, i)?;
                // `{` + 2 is `}`, `[` + 2 is `]`.
                if n == c + 2 {
                    i = at + 1;
                } else {
                    if depth == MAX_SKIP_DEPTH {
                        return Err(Bail);
                    }
                    stack[depth] = c;
                    depth += 1;
                    if c == b'{' {
                        i = key_end(s, i)?;
                    }
                    continue;
                }
            }
            b't' => i = literal_end(s, at, b"true")?,
            b'f' => i = literal_end(s, at, b"false")?,
            b'n' => i = literal_end(s, at, b"null")?,
            b'-' | b'0'..=b'9' => i = number_end(s, at)?,
            _ => return Err(Bail),
        }
        // After a value: commas and closing brackets.
        loop {
            if depth == 0 {
                return Ok(i);
            }
            let frame = stack[depth - 1];
            let (c, at) = next(s, i)?;
            i = at + 1;
            if c == b',' {
                if frame == b'{' {
                    i = key_end(s, i)?;
                }
                break;
            }
            if c != frame + 2 {
                return Err(Bail);
            }
            depth -= 1;
        }
    }
}

/// With `i` at the first letter of `word`: the index after it.
#[inline(always)]
fn literal_end(s: &[u8], i: usize, word: &[u8]) -> R<usize> {
    if s.get(i..i + word.len()) == Some(word) {
        Ok(i + word.len())
    } else {
        Err(Bail)
    }
}

struct Parser<'a> {
    text: &'a str,
    s: &'a [u8],
    i: usize,
}

fn hex(b: u8) -> Option<u16> {
    match b {
        b'0'..=b'9' => Some(u16::from(b - b'0')),
        b'a'..=b'f' => Some(u16::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u16::from(b - b'A' + 10)),
        _ => None,
    }
}

fn hex4(s: &[u8]) -> R<u16> {
    match s {
        [a, b, c, d, ..] => match (hex(*a), hex(*b), hex(*c), hex(*d)) {
            (Some(a), Some(b), Some(c), Some(d)) => Ok(a << 12 | b << 8 | c << 4 | d),
            _ => Err(Bail),
        },
        _ => Err(Bail),
    }
}

impl<'a> Parser<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> R<u8> {
        self.s.get(self.i).copied().ok_or(Bail)
    }

    /// Skips whitespace, then expects `c`.
    #[inline]
    fn expect(&mut self, c: u8) -> R<()> {
        self.ws();
        if self.peek()? == c {
            self.i += 1;
            Ok(())
        } else {
            Err(Bail)
        }
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// With `i` just after an opening quote: moves past the closing quote (see [`str_end`]).
    #[inline(always)]
    fn string_end(&mut self) -> R<bool> {
        let (i, escaped) = str_end(self.s, self.i)?;
        self.i = i;
        Ok(escaped)
    }

    /// A string value (at its opening quote), borrowed when it has no escapes.
    fn string(&mut self) -> R<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return Err(Bail);
        }
        let start = self.i + 1;
        self.i = start;
        let escaped = self.string_end()?;
        let raw = &self.s[start..self.i - 1];
        if !escaped {
            return self
                .text
                .get(start..self.i - 1)
                .map(Cow::Borrowed)
                .ok_or(Bail);
        }
        unescape(raw).map(Cow::Owned)
    }

    /// `null` or a string.
    fn opt_string(&mut self) -> R<Option<Cow<'a, str>>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Ok(None)
        } else {
            self.string().map(Some)
        }
    }

    /// A non-negative integer without fraction or exponent that fits `u64`.
    fn uint(&mut self) -> R<u64> {
        let s = self.s;
        let mut i = self.i;
        let mut n: u64 = match s.get(i) {
            Some(b'0') => 0,
            Some(&d @ b'1'..=b'9') => u64::from(d - b'0'),
            _ => return Err(Bail),
        };
        i += 1;
        if n != 0 {
            while let Some(&d @ b'0'..=b'9') = s.get(i) {
                n = n
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(d - b'0')))
                    .ok_or(Bail)?;
                i += 1;
            }
        }
        if let Some(b'0'..=b'9' | b'.' | b'e' | b'E') = s.get(i) {
            return Err(Bail);
        }
        self.i = i;
        Ok(n)
    }

    /// Skips one value (any JSON), checking it (see [`skip`]).
    fn skip_value(&mut self) -> R<()> {
        self.i = skip(self.s, self.i)?;
        Ok(())
    }

    /// Reads an object (at its `{`, or `null` when `nullable`), calling `member` with each key;
    /// `member` must consume the value. `Ok(false)` for `null`.
    fn object(
        &mut self,
        nullable: bool,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> R<()>,
    ) -> R<bool> {
        match self.peek()? {
            b'{' => {}
            b'n' if nullable => {
                self.literal(b"null")?;
                return Ok(false);
            }
            _ => return Err(Bail),
        }
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(true);
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Ok(true);
                }
                _ => return Err(Bail),
            }
        }
    }

    /// Any value inside a `status`, as a [`Node`].
    fn node(&mut self, depth: usize) -> R<Node<'a>> {
        if depth > MAX_STATUS_DEPTH {
            return Err(Bail);
        }
        Ok(match self.peek()? {
            b'"' => Node::Str(self.string()?),
            b'{' => {
                let mut members: Vec<(Cow<'a, str>, Node<'a>)> = Vec::with_capacity(8);
                self.object(false, |p, key| {
                    if members.len() == MAX_STATUS_KEYS || members.iter().any(|(k, _)| *k == key) {
                        return Err(Bail);
                    }
                    let v = p.node(depth + 1)?;
                    members.push((key, v));
                    Ok(())
                })?;
                Node::Obj(members)
            }
            b'[' => {
                self.i += 1;
                self.ws();
                let mut items = Vec::with_capacity(4);
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        items.push(self.node(depth + 1)?);
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(Bail),
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
            _ => Node::Num(self.uint()?),
        })
    }

    fn group_kind(&mut self) -> R<Option<GroupKind<'a>>> {
        let mut kind = None;
        let present = self.object(true, |p, key| match key.as_ref() {
            "kind" => once(&mut kind, p.string()?),
            _ => p.skip_value(),
        })?;
        Ok(present.then(|| GroupKind {
            kind: kind.unwrap_or_default(),
        }))
    }

    fn group_resource(&mut self) -> R<Option<GroupResource<'a>>> {
        let (mut group, mut resource) = (None, None);
        let present = self.object(true, |p, key| match key.as_ref() {
            "group" => once(&mut group, p.string()?),
            "resource" => once(&mut resource, p.string()?),
            _ => p.skip_value(),
        })?;
        Ok(present.then(|| GroupResource {
            group: group.unwrap_or_default(),
            resource: resource.unwrap_or_default(),
        }))
    }

    fn user_info(&mut self) -> R<Option<UserInfoIn>> {
        let (mut username, mut groups) = (None, None);
        let present = self.object(true, |p, key| match key.as_ref() {
            "username" => once(&mut username, p.opt_string()?.map(Cow::into_owned)),
            "groups" => {
                let list = if p.peek()? == b'n' {
                    p.literal(b"null")?;
                    None
                } else {
                    p.expect(b'[')?;
                    p.ws();
                    let mut list = Vec::new();
                    if p.peek()? == b']' {
                        p.i += 1;
                    } else {
                        loop {
                            p.ws();
                            list.push(p.string()?.into_owned());
                            p.ws();
                            match p.peek()? {
                                b',' => p.i += 1,
                                b']' => {
                                    p.i += 1;
                                    break;
                                }
                                _ => return Err(Bail),
                            }
                        }
                    }
                    Some(list)
                };
                once(&mut groups, list)
            }
            _ => p.skip_value(),
        })?;
        Ok(present.then(|| UserInfoIn {
            username: username.flatten(),
            groups: groups.flatten(),
        }))
    }

    fn object_in(&mut self) -> R<Option<Object<'a>>> {
        let (mut metadata, mut status) = (None, None);
        let present = self.object(true, |p, key| match key.as_ref() {
            "metadata" => {
                let (mut generation, mut deletion) = (None, None);
                let meta = p.object(true, |p, key| match key.as_ref() {
                    "generation" => {
                        let g = if p.peek()? == b'n' {
                            p.literal(b"null")?;
                            None
                        } else {
                            Some(i64::try_from(p.uint()?).map_err(|_| Bail)?)
                        };
                        once(&mut generation, g)
                    }
                    "deletionTimestamp" => {
                        let set = if p.peek()? == b'n' {
                            p.literal(b"null")?;
                            false
                        } else {
                            p.skip_value()?;
                            true
                        };
                        once(&mut deletion, set)
                    }
                    _ => p.skip_value(),
                })?;
                once(
                    &mut metadata,
                    meta.then_some((generation.flatten(), deletion.unwrap_or(false))),
                )
            }
            "status" => {
                let s = if p.peek()? == b'n' {
                    p.literal(b"null")?;
                    None
                } else {
                    Some(p.node(0)?)
                };
                once(&mut status, s)
            }
            _ => p.skip_value(),
        })?;
        let (generation, deleting) = metadata.flatten().unwrap_or((None, false));
        Ok(present.then(|| Object {
            generation,
            deleting,
            status: status.flatten(),
        }))
    }

    fn opt_bool(&mut self) -> R<Option<bool>> {
        Ok(match self.peek()? {
            b't' => {
                self.literal(b"true")?;
                Some(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Some(false)
            }
            _ => {
                self.literal(b"null")?;
                None
            }
        })
    }

    fn request(&mut self) -> R<Option<RequestIn<'a, Object<'a>>>> {
        let mut uid = None;
        let mut kind = None;
        let mut resource = None;
        let mut sub_resource = None;
        let mut operation = None;
        let mut user_info = None;
        let mut object = None;
        let mut old_object = None;
        let mut dry_run = None;
        let present = self.object(true, |p, key| match key.as_ref() {
            "uid" => once(&mut uid, p.opt_string()?),
            "kind" => once(&mut kind, p.group_kind()?),
            "resource" => once(&mut resource, p.group_resource()?),
            "subResource" => once(&mut sub_resource, p.opt_string()?),
            "operation" => once(&mut operation, p.opt_string()?),
            "userInfo" => once(&mut user_info, p.user_info()?),
            "object" => once(&mut object, p.object_in()?),
            "oldObject" => once(&mut old_object, p.object_in()?),
            "dryRun" => once(&mut dry_run, p.opt_bool()?),
            _ => p.skip_value(),
        })?;
        Ok(present.then(|| RequestIn {
            uid: uid.flatten(),
            kind: kind.flatten(),
            resource: resource.flatten(),
            sub_resource: sub_resource.flatten(),
            operation: operation.flatten(),
            user_info: user_info.flatten(),
            object: object.flatten(),
            old_object: old_object.flatten(),
            dry_run: dry_run.flatten(),
        }))
    }
}

/// Records a struct field's value; a field that appears twice is an error for serde.
fn once<T>(slot: &mut Option<T>, value: T) -> R<()> {
    if slot.is_some() {
        return Err(Bail);
    }
    *slot = Some(value);
    Ok(())
}

/// The contents of a string with escapes (already checked by `string_end`).
fn unescape(raw: &[u8]) -> R<String> {
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let e = *raw.get(i + 1).ok_or(Bail)?;
        i += 2;
        let c = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let code = hex4(&raw[i..])?;
                i += 4;
                // Surrogates (pairs or lone) are left to serde_json.
                char::from_u32(u32::from(code)).ok_or(Bail)?
            }
            _ => return Err(Bail),
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
    String::from_utf8(out).map_err(|_| Bail)
}

/// Decodes a review body (already known to be UTF-8) the way the fast path needs it: an
/// `AdmissionReview` of `admission.k8s.io/v1` or `v1beta1` with a `request` object. Anything
/// else, or anything not decoded exactly as serde would: [`Bail`].
pub(super) fn review(text: &str) -> R<Review<'_>> {
    let mut p = Parser {
        text,
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let (mut api_version, mut kind, mut request) = (None, None, None);
    p.object(false, |p, key| match key.as_ref() {
        "apiVersion" => once(&mut api_version, p.opt_string()?),
        "kind" => once(&mut kind, p.opt_string()?),
        "request" => once(&mut request, p.request()?),
        _ => p.skip_value(),
    })?;
    p.ws();
    if p.i != p.s.len() {
        return Err(Bail);
    }
    if kind.flatten().as_deref() != Some("AdmissionReview") {
        return Err(Bail);
    }
    let api_version = match api_version.flatten().as_deref() {
        Some(REVIEW_API_VERSION) => REVIEW_API_VERSION,
        Some(REVIEW_API_VERSION_BETA) => REVIEW_API_VERSION_BETA,
        _ => return Err(Bail),
    };
    let request = request.flatten().ok_or(Bail)?;
    Ok(Review {
        api_version,
        request,
    })
}

#[cfg(test)]
mod tests {
    //! Differential tests: for every body, `review` with this decoder answers byte for byte as
    //! the serde decoders alone (`review_with(.., false)`).
    use super::super::{Hook, Outcome, review_with};
    use crate::status::Policy;
    use serde_json::{Value, json};

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

    /// Small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn same(a: &Outcome, b: &Outcome) -> bool {
        a.body == b.body
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

    fn check(policy: &Policy, body: &[u8]) -> bool {
        let now = chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        for hook in [Hook::Validate, Hook::Mutate] {
            let fast = review_with(hook, policy, body, now, true);
            let reference = review_with(hook, policy, body, now, false);
            assert!(
                same(&fast, &reference),
                "{hook:?} differs for body {}\nfast: {}\nreference: {}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(&fast.body),
                String::from_utf8_lossy(&reference.body)
            );
        }
        std::str::from_utf8(body).is_ok_and(|t| super::review(t).is_ok())
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

    /// A random node's path (object keys and array indexes) in `v`.
    fn random_path(v: &Value, rng: &mut Rng) -> Vec<Value> {
        let mut path = Vec::new();
        let mut cur = v;
        loop {
            match cur {
                Value::Object(m) if !m.is_empty() && rng.below(5) != 0 => {
                    let (k, next) = m.iter().nth(rng.below(m.len())).unwrap();
                    path.push(json!(k));
                    cur = next;
                }
                Value::Array(a) if !a.is_empty() && rng.below(5) != 0 => {
                    let i = rng.below(a.len());
                    path.push(json!(i));
                    cur = &a[i];
                }
                _ => return path,
            }
        }
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

    #[test]
    fn scan_answers_exactly_as_serde() {
        let policy = Policy::builtin();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pool = pool();
        let mut scanned = 0;
        let mut total = 0;
        for base in bases() {
            let text = serde_json::to_string(&base).unwrap();
            assert!(check(&policy, text.as_bytes()), "base not scanned: {text}");
            let pretty = serde_json::to_string_pretty(&base).unwrap();
            assert!(check(&policy, pretty.as_bytes()));
            // Structural edits: a random node replaced by a pool value or removed.
            for _ in 0..600 {
                let mut v = base.clone();
                let path = random_path(&v, &mut rng);
                if path.is_empty() {
                    continue;
                }
                if rng.below(6) == 0 {
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
                    *at(&mut v, &path) = pool[rng.below(pool.len())].clone();
                }
                let text = if rng.below(4) == 0 {
                    serde_json::to_string_pretty(&v).unwrap()
                } else {
                    serde_json::to_string(&v).unwrap()
                };
                total += 1;
                scanned += usize::from(check(&policy, text.as_bytes()));
            }
            // Textual edits, one to three each.
            for _ in 0..1500 {
                let mut t = text.clone().into_bytes();
                for _ in 0..1 + rng.below(3) {
                    let i = rng.below(t.len() + 1);
                    match rng.below(4) {
                        0 if i < t.len() => {
                            t.remove(i);
                        }
                        1 => {
                            // Copies a span elsewhere (duplicate keys, repeated members).
                            let a = rng.below(t.len());
                            let b = (a + 1 + rng.below(40)).min(t.len());
                            let span = t[a..b].to_vec();
                            t.splice(i..i, span);
                        }
                        _ => {
                            let tok = TOKENS[rng.below(TOKENS.len())].as_bytes();
                            t.splice(i..i, tok.iter().copied());
                        }
                    }
                }
                total += 1;
                scanned += usize::from(check(&policy, &t));
            }
        }
        // The decoder must actually be taken on many of the valid variants.
        assert!(scanned * 20 > total, "scanned {scanned} of {total}");
        eprintln!("scanned {scanned} of {total} bodies");
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
    }
}
