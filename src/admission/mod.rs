//! AdmissionReview v1 decoding and encoding for `runtimes/status` writes
//! (docs/admission-protocol.md). Pure: bytes in, bytes out, no I/O. The webhook server
//! and `kim review` both call [`review`], so they answer identically.
//!
//! Every path — including malformed input — produces a well-formed AdmissionReview with
//! `response.uid` echoed when it can be read (a missing or wrong uid is a *call failure* for
//! the apiserver, which with `failurePolicy: Ignore` would let the write through unchecked).
//!
//! One decoder, serde_json (`decode.rs`, which also holds the request model): only the
//! request's routing fields, `userInfo`, and each object's `metadata.generation`,
//! `metadata.deletionTimestamp` and `status` are materialised; `spec` and `managedFields` are
//! only checked, without allocation. Answers are built in `response.rs` and written in
//! `encode.rs`.

mod decode;
mod encode;
mod response;
#[cfg(test)]
mod tests;

pub use decode::DECODED_LIMIT;
use decode::{Refusal, Request, object_of};
pub(crate) use encode::reason_for;
pub use response::{UID_LIMIT, reject};

use crate::status::{self, Facts, Policy};
use chrono::{DateTime, Utc};

/// API group of the Runtime CRD.
pub(crate) const RUNTIME_GROUP: &str = "infrastructuremanager.kyma-project.io";
/// Plural resource name of the Runtime CRD.
pub(crate) const RUNTIME_RESOURCE: &str = "runtimes";
/// The admission API version this webhook speaks (`admissionReviewVersions: ["v1"]`).
pub(crate) const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
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
    pub(crate) fn is_routine(&self) -> bool {
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
/// - Not JSON, not an AdmissionReview, no `request`, no `request.uid`, or one longer than
///   [`UID_LIMIT`] (not echoed): denied, code 400.
/// - Decoding would build more than [`DECODED_LIMIT`]: denied, code 413 (uid echoed when it can
///   be read).
/// - Not a `runtimes/status` UPDATE of `infrastructuremanager.kyma-project.io`: allowed, with a
///   warning saying that nothing was checked.
/// - `runtimes/status` UPDATE without `object`/`oldObject`, or with a malformed one: denied, 400.
/// - Otherwise [`Hook::Mutate`] returns the defaulting patch of [`status::mutate`] and
///   [`Hook::Validate`] the verdict of [`status::validate`] (messages per status model §6, rule ids in
///   `auditAnnotations["violations"]`). `dryRun` is evaluated the same way.
///
/// `now` is the request time used by defaulting.
pub fn review(hook: Hook, policy: &Policy, body: &[u8], now: DateTime<Utc>) -> Outcome {
    match decode::decode_review(body) {
        Ok((api_version, req, warnings)) => answer(hook, policy, api_version, req, now, warnings),
        Err(Refusal::Body(message)) => reject(400, &message, body),
        Err(Refusal::Review {
            api_version,
            uid,
            message,
            warnings,
        }) => {
            let uid = if uid.len() <= UID_LIMIT {
                uid.as_str()
            } else {
                ""
            };
            response::denied(api_version, uid, 400, &message, &warnings)
        }
        Err(Refusal::TooLarge(message)) => reject(413, &message, body),
    }
}

/// What every answer to a request says about it (for logs and metrics), once it is answered.
struct Asked<'r> {
    uid: &'r str,
    operation: String,
    user: String,
    dry_run: bool,
}

impl Asked<'_> {
    /// `outcome` with the request's uid, operation, user and dry-run flag.
    fn answered(self, outcome: Outcome) -> Outcome {
        Outcome {
            uid: self.uid.to_string(),
            operation: self.operation,
            user: self.user,
            dry_run: self.dry_run,
            ..outcome
        }
    }
}

/// Answers a decoded request.
fn answer(
    hook: Hook,
    policy: &Policy,
    api_version: &'static str,
    req: Request<'_>,
    now: DateTime<Utc>,
    warnings: Vec<String>,
) -> Outcome {
    let Some(uid) = req.uid.as_deref().filter(|u| !u.is_empty()) else {
        return response::denied(api_version, "", 400, "request.uid is missing", &warnings);
    };
    if uid.len() > UID_LIMIT {
        let message = format!(
            "request.uid is {} bytes, longer than {UID_LIMIT}: not a uid kube-apiserver sends (a UUID)",
            uid.len()
        );
        return response::denied(api_version, "", 400, &message, &warnings);
    }
    let user_info = req.user_info.unwrap_or_default();
    let operation = req.operation.as_deref().unwrap_or("").to_string();
    let facts = Facts {
        user: user_info.username.unwrap_or_default(),
        groups: user_info.groups.map_or_else(Vec::new, |g| g.0),
        dry_run: req.dry_run.unwrap_or(false),
        now,
    };
    let asked = |operation: String, facts: Facts| Asked {
        uid,
        operation,
        user: facts.user,
        dry_run: facts.dry_run,
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
        let outcome = response::not_checked(api_version, uid, &what, warnings);
        return asked(operation, facts).answered(outcome);
    }

    let (new_obj, old_obj) = match (
        object_of(req.object, "object"),
        object_of(req.old_object, "oldObject"),
    ) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => {
            let outcome = response::denied(api_version, uid, 400, &e, &warnings);
            return asked(operation, facts).answered(outcome);
        }
    };
    let new = new_obj.snapshot();
    let old = old_obj.snapshot();

    let outcome = match hook {
        Hook::Mutate => {
            let patch = status::mutate(policy, Some(&old), &new, &facts);
            response::patched(api_version, uid, &patch, &warnings)
        }
        Hook::Validate => {
            let violations = status::validate(policy, Some(&old), &new, &facts);
            response::validated(api_version, uid, &violations, warnings)
        }
    };
    asked(operation, facts).answered(outcome)
}
