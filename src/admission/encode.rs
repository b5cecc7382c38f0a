//! Encoding of AdmissionReview answers: the JSON the webhook sends back
//! (docs/admission-protocol.md), `response.patch` as a standard-base64 string.

use super::REVIEW_API_VERSION;
use base64::Engine as _;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

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
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        _ => "BadRequest",
    }
}

/// Everything one answer holds, ready to [`encode`].
pub(super) struct Answer<'a> {
    pub(super) api_version: &'a str,
    pub(super) uid: &'a str,
    pub(super) allowed: bool,
    pub(super) code: u16,
    pub(super) message: &'a str,
    pub(super) patch: Option<&'a json_patch::Patch>,
    pub(super) warnings: &'a [String],
    pub(super) audit: BTreeMap<&'static str, String>,
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

/// The AdmissionReview JSON of an answer.
pub(super) fn encode(a: Answer<'_>) -> Vec<u8> {
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
