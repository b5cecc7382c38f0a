//! The answers a review can get, one constructor each: [`denied`] (a request that cannot be
//! evaluated), [`reject`] (refused before decoding), [`not_checked`] (not a Runtime status
//! write), [`patched`] (the mutating webhook) and [`validated`] (the validating webhook's verdict
//! with its warnings and audit annotations).

use super::decode::UidOnly;
use super::encode::{Answer, encode};
use super::{Outcome, REVIEW_API_VERSION};
use crate::status;
use serde::Deserialize;
use std::collections::BTreeMap;

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

/// A denied outcome for a request that could not be decoded or was refused.
pub(super) fn denied(
    api_version: &str,
    uid: &str,
    code: u16,
    message: &str,
    warnings: &[String],
) -> Outcome {
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

/// The longest `request.uid` echoed: 128 bytes. kube-apiserver sends a UUID (36 characters);
/// the answer echoes the uid, so an unbounded one let a client choose the size of the answer it
/// then left unread (a 7 MiB uid: 15 answers held took the process from 30 to 162 MiB,
/// 2026-12-03). A longer uid is denied (400) without being echoed.
pub const UID_LIMIT: usize = 128;

/// A denial for a request the HTTP layer refused before decoding (oversized body: 413, wrong
/// content type: 400/415, unreadable body: 400). `body` is whatever was read (possibly a
/// prefix, possibly empty); the uid is echoed when it can be read from it.
pub fn reject(code: u16, message: &str, body: &[u8]) -> Outcome {
    let uid = salvage_uid(body).unwrap_or_default();
    denied(REVIEW_API_VERSION, &uid, code, message, &[])
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
        return (e.request.uid.len() <= UID_LIMIT).then(|| e.request.uid.into_owned());
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
    let len = rest[start..]
        .iter()
        .take(UID_LIMIT + 1)
        .position(|&c| c == b'"')?;
    let value = std::str::from_utf8(&rest[start..start + len]).ok()?;
    (!value.is_empty() && !value.contains('\\') && !value.chars().any(char::is_control))
        .then(|| value.to_string())
}

/// The answer to a review that is not a Runtime status UPDATE: allowed, with a warning saying
/// that nothing was checked (`what` names the request).
pub(super) fn not_checked(
    api_version: &str,
    uid: &str,
    what: &str,
    mut warnings: Vec<String>,
) -> Outcome {
    let detail = warning(format!(
        "kim: {what} is not a Runtime status UPDATE; nothing was checked"
    ));
    warnings.push(detail.clone());
    Outcome {
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
        unchecked: true,
        ..Outcome::default()
    }
}

/// The mutating webhook's answer: allowed, with the defaulting JSONPatch when it has
/// operations (no patch at all otherwise, so reinvocation is a no-op).
pub(super) fn patched(
    api_version: &str,
    uid: &str,
    patch: &json_patch::Patch,
    warnings: &[String],
) -> Outcome {
    let patched = !patch.0.is_empty();
    Outcome {
        body: encode(Answer {
            api_version,
            uid,
            allowed: true,
            code: 200,
            message: "",
            patch: Some(patch),
            warnings,
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
    }
}

/// The validating answer for evaluated violations: allowed unless one denies; warnings for
/// the others (status model §7.7); audit annotations `violations` (denying rule ids), `warn-violations`
/// and `warn-message` (what a denial would have said in `warn` mode) and
/// `ratcheted-violations`.
pub(super) fn validated(
    api_version: &str,
    uid: &str,
    violations: &status::Violations,
    mut warnings: Vec<String>,
) -> Outcome {
    let allowed = violations.allowed();
    let code = violations.denial_code();
    let message = violations.denial_message();
    warnings.extend(violations.warnings());
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
                violations.warn_code(),
                violations.warn_message()
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
    Outcome {
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
    }
}
