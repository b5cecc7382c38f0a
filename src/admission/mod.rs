//! AdmissionReview v1 decoding and encoding for `runtimes/status` (spec: admission-protocol.md).
//! Pure: bytes in, bytes out. Used by the webhook server and by `kim review`, so both answer
//! identically.

use crate::status::Policy;
use chrono::{DateTime, Utc};

/// Which webhook answers: the validating one (`/validate`) or the mutating one (`/mutate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Validate,
    Mutate,
}

/// The answer to one review, ready to send: `body` is the AdmissionReview JSON to return with
/// HTTP 200 and `Content-Type: application/json`; the other fields are for logs and metrics.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub body: Vec<u8>,
    pub allowed: bool,
    /// `response.status.code` (200 when allowed; 400, 403 or 413 when denied).
    pub code: u16,
    pub uid: String,
    pub operation: String,
    pub user: String,
    pub dry_run: bool,
    /// True when a JSONPatch was returned.
    pub patched: bool,
    /// Rule ids of the violations, empty when allowed.
    pub rules: Vec<&'static str>,
    /// One-line summary of why (denial message or warning), safe to log.
    pub detail: String,
}

/// Answers one AdmissionReview request body.
pub fn review(hook: Hook, policy: &Policy, body: &[u8], now: DateTime<Utc>) -> Outcome {
    let _ = (hook, policy, body, now);
    todo!()
}

/// A denial for a request the HTTP layer refused before decoding (oversized body: 413, wrong
/// content type: 400). `body` is whatever was read (may be a prefix or empty); the uid is
/// echoed when it can be read from it.
pub fn reject(code: u16, message: &str, body: &[u8]) -> Outcome {
    let _ = (code, message, body);
    todo!()
}
