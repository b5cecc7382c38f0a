//! Errors of one reconcile. Every variant is retried by requeueing the Runtime with a
//! per-object exponential backoff (the error policy of [`crate::reconciler::reconcile`]); none of
//! them makes a Runtime `Failed` — terminal conditions are written as status, not returned.

/// Why a reconcile ended early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed (control cluster, Gardener or runtime cluster): 409, 429,
    /// 5xx, timeouts, connection errors.
    #[error("{what}: {source}")]
    Api {
        /// What was being done, e.g. `creating Shoot garden-p/s`.
        what: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The status about to be written is one the status model denies: a bug in the
    /// reconciler. Logged, counted and published as an Event; the write is not sent. Carries
    /// every violation (the denying ones make the message).
    #[error("status write denied by the status model (reconciler bug): {}", .0.denial_message())]
    StatusDenied(crate::status::Violations),
    /// The runtime cluster cannot be reached with the stored kubeconfig, or a binding cannot
    /// be managed there.
    #[error("runtime cluster: {0}")]
    RuntimeCluster(String),
    /// A status write conflicted because the Runtime's status had moved on since it was
    /// read (a cached copy behind the controller's own last write); carries the fresh copy.
    /// The reconcile starts over from it at once (see
    /// [`crate::reconciler::reconcile::reconcile`]).
    #[error("the Runtime changed while it was reconciled")]
    Stale(Box<crate::api::Runtime>),
    /// Anything else that a retry may fix (e.g. an unusable answer from Gardener).
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Wraps a client error with what was being done.
    pub(crate) fn api(what: impl Into<String>, source: kube::Error) -> Error {
        Error::Api {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// Short label for the errors metric, one of [`Error::KINDS`].
    pub(crate) fn kind(&self) -> &'static str {
        let [api, denied, runtime_cluster, other] = Error::KINDS;
        match self {
            Error::Api { .. } | Error::Stale(_) => api,
            Error::StatusDenied(_) => denied,
            Error::RuntimeCluster(_) => runtime_cluster,
            Error::Other(_) => other,
        }
    }

    /// Every [`Error::kind`]: the errors metric creates each series at start, at zero.
    pub(crate) const KINDS: [&'static str; 4] = ["api", "denied", "runtime_cluster", "other"];

    /// Whether the error is transient: a retry of the same call may well succeed with nothing
    /// changed (see [`transient`]). Errors of the runtime cluster's configuration (an unusable
    /// kubeconfig, an unmanaged binding in the way), unusable answers and model denials are
    /// not.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Api { source, .. } => transient(source),
            Error::Stale(_) => true,
            Error::StatusDenied(_) | Error::RuntimeCluster(_) | Error::Other(_) => false,
        }
    }

    /// Whether the error may clear by itself within seconds, so that a `Ready` Runtime keeps its
    /// status for [`super::Settings::transient_error_grace`] before the error is reported: a
    /// transient error ([`Error::is_transient`]) or a 403 Forbidden. A kube-apiserver that has
    /// just started answers 403 until its RBAC cache is loaded (measured on kube-apiserver 1.35,
    /// `docs/control-plane.md`, "Faults"); a 403 that lasts — a missing RBAC rule — is still
    /// reported once the grace is over, and at once for a Runtime that is not `Ready`.
    pub(crate) fn may_clear(&self) -> bool {
        self.is_transient()
            || matches!(self, Error::Api { source, .. } if api_code(source) == Some(403))
    }
}

/// Whether a client error is transient (spec: "409, 429, 5xx, timeouts"): the server answered
/// 408, 409, 429 or 5xx, or there was no (complete) answer — a request timeout
/// ([`super::deadline::RequestTimedOut`]), a connection error, a stream cut. Other answers
/// (400, 401, 403, 404, 422, …) and client-side errors (TLS, authentication, decoding) are not.
pub(crate) fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 408 | 409 | 429) || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// The HTTP status code of a `kube::Error::Api`, if any.
pub(crate) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Whether `e` is a 404 Not Found.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    api_code(e) == Some(404)
}

/// Whether `e` is a 409 (AlreadyExists on create, Conflict on update).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    api_code(e) == Some(409)
}

/// A one-line description of an API error for conditions and logs: the server's message for
/// API errors, the client error otherwise (never a request body).
pub(crate) fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
