//! AdmissionReview v1 decoding and encoding for `runtimes/status` writes
//! (docs/admission-protocol.md). Pure: bytes in, bytes out, no I/O. The webhook server
//! and `kim review` both call [`review`], so they answer identically.
//!
//! Every path — including malformed input — produces a well-formed AdmissionReview with
//! `response.uid` echoed when it can be read (a missing or wrong uid is a *call failure* for
//! the apiserver, which with `failurePolicy: Ignore` would let the write through unchecked).
//!
//! Decoding is lazy: only the request's routing fields, `userInfo`, and each object's
//! `metadata.generation`, `metadata.deletionTimestamp` and `status` are materialised; `spec`
//! and `managedFields` are only checked, without allocation. A well-formed review is read by
//! `scan` (one pass that checks the JSON without decoding it); anything it declines by
//! serde_json (`decode`), with the same answer.

mod decode;
mod encode;
mod node;
mod response;
mod scan;

use decode::{ObjectSource, ReadObject, Refusal, RequestIn, fast_review, object_of, precise};
pub use encode::reason_for;
use node::Node;
pub use response::reject;

use crate::status::{self, Facts, Policy};
use chrono::{DateTime, Utc};
use serde_json::Value;

/// API group of the Runtime CRD.
pub const RUNTIME_GROUP: &str = "infrastructuremanager.kyma-project.io";
/// Plural resource name of the Runtime CRD.
pub const RUNTIME_RESOURCE: &str = "runtimes";
/// The admission API version this webhook speaks (`admissionReviewVersions: ["v1"]`).
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// `v1beta1` has the same shape; a review in it is answered in it.
pub(crate) const REVIEW_API_VERSION_BETA: &str = "admission.k8s.io/v1beta1";

/// Which webhook answers: the validating one (`/validate`) or the mutating one (`/mutate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Denies writes the status model forbids; never returns a patch.
    Validate,
    /// Returns the defaulting JSONPatch of status model §5; never denies a well-formed review.
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
    /// True when the review was allowed without being checked (not a Runtime status UPDATE:
    /// the webhook configuration sends kim more than it should).
    pub unchecked: bool,
}

impl Outcome {
    /// A routine answer: allowed with HTTP code 200, checked, and no violation in `warn`
    /// mode (ratcheted violations and defaulting patches are routine). The webhook logs
    /// routine answers at `debug` and every other one at `info`, as admission servers of the
    /// field do (none logs each allowed request at its default level).
    pub fn is_routine(&self) -> bool {
        self.allowed
            && self.code == 200
            && !self.unchecked
            && !self
                .violations
                .iter()
                .any(|(_, action)| *action != status::Action::Ratcheted)
    }
}

/// Answers one AdmissionReview request body (`admission.k8s.io/v1`, also `v1beta1`).
///
/// - Not JSON, not an AdmissionReview, no `request`, no `request.uid`: denied, code 400.
/// - Not a `runtimes/status` UPDATE of `infrastructuremanager.kyma-project.io`: allowed, with a
///   warning saying that nothing was checked.
/// - `runtimes/status` UPDATE without `object`/`oldObject`, or with a malformed one: denied, 400.
/// - Otherwise [`Hook::Mutate`] returns the defaulting patch of [`status::mutate`] and
///   [`Hook::Validate`] the verdict of [`status::validate`] (messages per status model §6, rule ids in
///   `auditAnnotations["violations"]`). `dryRun` is evaluated the same way.
///
/// `now` is the request time used by defaulting.
pub fn review(hook: Hook, policy: &Policy, body: &[u8], now: DateTime<Utc>) -> Outcome {
    // Fastest path: the body checked in one pass without decoding, only the members kim reads
    // decoded (`scan`); it declines anything unusual, which serde_json then answers.
    if let Some((api_version, req)) = scan::fast_review(body) {
        return answer(hook, policy, api_version, req, now, Vec::new());
    }
    review_serde(hook, policy, body, now)
}

/// [`review`] with the whole body decoded by serde_json: what the scan declines, and the
/// reference the differential tests compare the scan with.
fn review_serde(hook: Hook, policy: &Policy, body: &[u8], now: DateTime<Utc>) -> Outcome {
    // JSON is UTF-8 (RFC 8259 §8.1); skipped strings would not be checked by the parser.
    let Ok(text) = std::str::from_utf8(body) else {
        return reject(400, "request body is not valid UTF-8 JSON", body);
    };
    // Fast path: one pass over the body (spec and managedFields skipped, never materialised),
    // statuses read as borrowed Nodes.
    if let Some((api_version, req)) = fast_review::<Node<'_>>(text) {
        return answer(hook, policy, api_version, req, now, Vec::new());
    }
    review_values(hook, policy, body, text, now)
}

/// [`review`] with statuses decoded as `Value`s: what [`Node`]s do not hold (repeated keys,
/// many keys) and everything that is not a well-formed v1 review. It answers every body exactly
/// as the fast path does (the differential tests in `node.rs` compare the two).
fn review_values(
    hook: Hook,
    policy: &Policy,
    body: &[u8],
    text: &str,
    now: DateTime<Utc>,
) -> Outcome {
    // `Value`s read serde_json's raw-value marker key as an instruction, not as data (see
    // `node::has_raw_value_key`).
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
    match precise(body) {
        Ok((api_version, req, warnings)) => answer(hook, policy, api_version, req, now, warnings),
        Err(Refusal::Body(message)) => reject(400, &message, body),
        Err(Refusal::Review {
            api_version,
            uid,
            message,
            warnings,
        }) => response::denied(api_version, &uid, 400, &message, &warnings),
    }
}

/// Answers a decoded request (both decoding paths end here).
fn answer<'a, O: ObjectSource<'a>>(
    hook: Hook,
    policy: &Policy,
    api_version: &'static str,
    req: RequestIn<'a, O>,
    now: DateTime<Utc>,
    warnings: Vec<String>,
) -> Outcome {
    let Some(uid) = req.uid.as_deref().filter(|u| !u.is_empty()) else {
        return response::denied(api_version, "", 400, "request.uid is missing", &warnings);
    };
    let user_info = req.user_info.unwrap_or_default();
    let operation = req.operation.as_deref().unwrap_or("").to_string();
    let facts = Facts {
        user: user_info.username.unwrap_or_default(),
        groups: user_info.groups.unwrap_or_default(),
        dry_run: req.dry_run.unwrap_or(false),
        now,
    };
    // What every answer below carries about the request (moved in once it is answered).
    let base = |operation: String, user: String, dry_run: bool| {
        move |o: Outcome| Outcome {
            uid: uid.to_string(),
            operation,
            user,
            dry_run,
            ..o
        }
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
        let base = base(operation, facts.user, facts.dry_run);
        return response::not_checked(api_version, uid, &what, warnings, base);
    }

    let (new_obj, old_obj) = match (
        object_of(req.object, "object"),
        object_of(req.old_object, "oldObject"),
    ) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => {
            let base = base(operation, facts.user, facts.dry_run);
            return base(response::denied(api_version, uid, 400, &e, &warnings));
        }
    };
    let new = new_obj.snapshot();
    let old = old_obj.snapshot();

    match hook {
        Hook::Mutate => {
            let patch = status::mutate(policy, Some(&old), &new, &facts);
            let base = base(operation, facts.user, facts.dry_run);
            response::patched(api_version, uid, &patch, &warnings, base)
        }
        Hook::Validate => {
            let violations = status::validate(policy, Some(&old), &new, &facts);
            let base = base(operation, facts.user, facts.dry_run);
            response::validated(api_version, uid, &violations, warnings, base)
        }
    }
}
