//! API errors rendered as metav1 `Status` objects, worded like kube-apiserver's.

use serde_json::{Value, json};

use crate::resource::Gvr;

/// An error response: becomes a `Status` body (`kind: Status, status: Failure`) with the HTTP
/// code, so that kube-rs yields `kube::Error::Api` carrying `code`, `reason` and `message`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`, `AlreadyExists`, `Conflict`.
    pub reason: String,
    /// Human-readable `Status.message`.
    pub message: String,
    /// Optional `Status.details`.
    pub details: Option<Box<Value>>,
    /// Optional `Retry-After` header (seconds).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// An error with the given code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// An error with the given code, using the apiserver's usual reason for that code.
    pub fn from_code(code: u16, message: impl Into<String>) -> Self {
        Self::new(code, reason_for(code), message)
    }

    fn with_details(mut self, gvr: &Gvr, name: &str) -> Self {
        self.details = Some(Box::new(
            json!({"name": name, "group": gvr.group, "kind": gvr.plural}),
        ));
        self
    }

    /// 404 `<plural.group> "<name>" not found`.
    pub fn not_found(gvr: &Gvr, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", gvr.qualified()),
        )
        .with_details(gvr, name)
    }

    /// 404 for an unknown path or an unregistered resource.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 `AlreadyExists`.
    pub fn already_exists(gvr: &Gvr, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gvr.qualified()),
        )
        .with_details(gvr, name)
    }

    /// 409 `Conflict` for a stale `resourceVersion`.
    pub fn conflict(gvr: &Gvr, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                gvr.qualified()
            ),
        )
        .with_details(gvr, name)
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 `Invalid` for an object.
    pub fn invalid(gvr: &Gvr, name: &str, cause: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {cause}", gvr.qualified()),
        )
        .with_details(gvr, name)
    }

    /// 403 `Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 410 `Expired`: the watch `resourceVersion` is older than the kept history.
    pub fn too_old(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// The metav1 `Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = (**details).clone();
        }
        if let Some(secs) = self.retry_after {
            let details = status
                .as_object_mut()
                .expect("object")
                .entry("details")
                .or_insert_with(|| json!({}));
            details["retryAfterSeconds"] = json!(secs);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// The `Status.reason` kube-apiserver uses for an HTTP code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}
