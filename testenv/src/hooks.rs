//! Test hooks: users, fault injection, admission, request log.

use std::{fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use serde_json::Value;

use crate::resource::Gvr;

/// A Kubernetes API verb, as the apiserver's authorizer and audit log name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object (or a discovery document).
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST (including the `adminkubeconfig` subresource).
    Create,
    /// PUT.
    Update,
    /// PATCH (merge, JSON, strategic merge or server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
}

impl Verb {
    /// Lower-case name: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// Whether the verb writes.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated (or anonymous) caller.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// User name, e.g. `system:serviceaccount:kcp-system:kim`.
    pub username: String,
    /// Optional uid.
    pub uid: String,
    /// Groups. `system:authenticated` is added for token users, anonymous callers are in
    /// `system:unauthenticated`.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with the given name and groups.
    pub fn new(username: &str, groups: &[&str]) -> Self {
        Self {
            username: username.to_string(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// `system:anonymous` in group `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self::new("system:anonymous", &["system:unauthenticated"])
    }
}

/// What a request is about; given to fault closures.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestInfo {
    /// The verb; `None` for non-resource paths (discovery, `/version`).
    pub verb: Option<Verb>,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string (without `?`).
    pub query: String,
    /// Resource addressed, if any.
    pub gvr: Option<Gvr>,
    /// Subresource (`status`, `adminkubeconfig`), if any.
    pub subresource: Option<String>,
    /// Namespace from the URL, if any.
    pub namespace: Option<String>,
    /// Object name from the URL, if any.
    pub name: Option<String>,
    /// The caller.
    pub user: UserInfo,
}

/// One entry of the request log.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// Verb (`None` for non-resource paths).
    pub verb: Option<Verb>,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Resource plural, if any.
    pub resource: Option<String>,
    /// Subresource, if any.
    pub subresource: Option<String>,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Caller's user name.
    pub user: String,
    /// HTTP status code returned (for watches: the code the stream started with).
    pub code: u16,
}

impl RequestRecord {
    /// Whether this is a write (`create`/`update`/`patch`/`delete`).
    pub fn is_write(&self) -> bool {
        self.verb.is_some_and(Verb::is_write)
    }

    /// Whether this request addressed the given resource plural and subresource
    /// (`None` = the main resource).
    pub fn is(&self, resource: &str, subresource: Option<&str>) -> bool {
        self.resource.as_deref() == Some(resource) && self.subresource.as_deref() == subresource
    }
}

/// What an injected fault does to a request.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer with this error code (a `Status` with the apiserver's reason for it).
    Fail {
        /// HTTP code, e.g. 409, 429, 500.
        code: u16,
        /// Message; a default naming the fault is used when `None`.
        message: Option<String>,
        /// `Retry-After` header in seconds (kube-rs' default retry honours it for 429/503/504).
        retry_after: Option<u32>,
    },
    /// Wait this long, then handle the request normally (a slow apiserver).
    Delay(Duration),
    /// Never answer (until the server shuts down): the client has to time out.
    Hang,
}

impl FaultAction {
    /// `Fail` with the default message and no `Retry-After`.
    pub fn fail(code: u16) -> Self {
        FaultAction::Fail {
            code,
            message: None,
            retry_after: None,
        }
    }
}

/// A fault-injection rule. Unset filters match everything.
///
/// ```
/// use testenv::{FaultAction, FaultRule, Verb};
/// // Every second status write of a Runtime (on average) fails with 409, at most 3 times.
/// let rule = FaultRule::new(FaultAction::fail(409))
///     .verb(Verb::Update)
///     .resource("runtimes")
///     .subresource("status")
///     .probability(0.5)
///     .times(3);
/// # let _ = rule;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    /// Verb filter.
    pub verb: Option<Verb>,
    /// Resource plural filter.
    pub resource: Option<String>,
    /// Subresource filter: `Some(None)` = main resource only, `Some(Some(s))` = that subresource.
    pub subresource: Option<Option<String>>,
    /// Namespace filter.
    pub namespace: Option<String>,
    /// Object name filter.
    pub name: Option<String>,
    /// User name filter.
    pub user: Option<String>,
    /// Probability that a matching request is hit (drawn from the server's seeded RNG).
    pub probability: f64,
    /// How many more times the rule may fire; `None` = unlimited.
    pub remaining: Option<u32>,
    /// What happens to a hit request.
    pub action: FaultAction,
}

impl FaultRule {
    /// A rule hitting every request (probability 1, unlimited) with `action`.
    pub fn new(action: FaultAction) -> Self {
        Self {
            verb: None,
            resource: None,
            subresource: None,
            namespace: None,
            name: None,
            user: None,
            probability: 1.0,
            remaining: None,
            action,
        }
    }

    /// Only requests with this verb.
    #[must_use]
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource plural.
    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_string());
        self
    }

    /// Only requests for this subresource.
    #[must_use]
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(Some(sub.to_string()));
        self
    }

    /// Only requests for the main resource (no subresource).
    #[must_use]
    pub fn main_resource(mut self) -> Self {
        self.subresource = Some(None);
        self
    }

    /// Only requests in this namespace.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    /// Only requests for this object name.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Only requests by this user name.
    #[must_use]
    pub fn user(mut self, username: &str) -> Self {
        self.user = Some(username.to_string());
        self
    }

    /// Hit a matching request with this probability (0..=1).
    #[must_use]
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = p;
        self
    }

    /// Fire at most `n` times, then become inert.
    #[must_use]
    pub fn times(mut self, n: u32) -> Self {
        self.remaining = Some(n);
        self
    }

    pub(crate) fn matches(&self, req: &RequestInfo) -> bool {
        if self.remaining == Some(0) {
            return false;
        }
        let plural = req.gvr.as_ref().map(|g| g.plural.as_str());
        self.verb.is_none_or(|v| req.verb == Some(v))
            && self.resource.as_deref().is_none_or(|r| plural == Some(r))
            && self
                .subresource
                .as_ref()
                .is_none_or(|s| s.as_deref() == req.subresource.as_deref())
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| req.namespace.as_deref() == Some(n))
            && self
                .name
                .as_deref()
                .is_none_or(|n| req.name.as_deref() == Some(n))
            && self.user.as_deref().is_none_or(|u| req.user.username == u)
    }
}

/// A closure deciding faults per request (consulted before the rules).
pub type FaultFn = Arc<dyn Fn(&RequestInfo) -> Option<FaultAction> + Send + Sync>;

/// A write as admission sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionRequest {
    /// `Create`, `Update`, `Patch` or `Delete` (the HTTP request's verb; see [`Self::operation`]).
    pub verb: Verb,
    /// The resource.
    pub gvr: Gvr,
    /// The resource's `kind`.
    pub kind: String,
    /// `Some("status")` for status writes.
    pub subresource: Option<String>,
    /// Namespace (`None` for cluster-scoped resources).
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// The stored object before the write (`None` on create).
    pub old_object: Option<Value>,
    /// The object as it would be stored (after the patch was applied and status/spec separation;
    /// `None` on delete).
    pub object: Option<Value>,
    /// The caller.
    pub user: UserInfo,
    /// Whether the request is a dry run (`dryRun=All`).
    pub dry_run: bool,
    /// `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
}

impl AdmissionRequest {
    /// The AdmissionReview `operation`: `CREATE`, `UPDATE` (for PUT and PATCH) or `DELETE`.
    pub fn operation(&self) -> &'static str {
        match self.verb {
            Verb::Create => "CREATE",
            Verb::Delete => "DELETE",
            _ => {
                if self.old_object.is_none() {
                    "CREATE"
                } else {
                    "UPDATE"
                }
            }
        }
    }
}

/// An admission hook's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum AdmissionDecision {
    /// Let the write through unchanged.
    Allow,
    /// Let the write through with this object instead (a mutating webhook's patch applied).
    /// Ignored for deletes. Status/spec separation is re-applied afterwards.
    Mutate(Value),
    /// Reject the write: the client gets a `Status` with this code and message.
    Deny {
        /// HTTP code (403 for a webhook denial, 500 for a failing webhook…).
        code: u16,
        /// `Status.message`.
        message: String,
    },
}

/// A boxed future returned by an admission hook.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// An (asynchronous) admission hook.
pub type AdmissionFn = Arc<dyn Fn(AdmissionRequest) -> BoxFuture<AdmissionDecision> + Send + Sync>;

/// What the `adminkubeconfig` closure is told.
#[derive(Clone, Debug, PartialEq)]
pub struct AdminKubeconfigRequest {
    /// Shoot namespace.
    pub namespace: String,
    /// Shoot name.
    pub name: String,
    /// The stored Shoot.
    pub shoot: Value,
    /// `spec.expirationSeconds` of the request (default 3600).
    pub expiration_seconds: i64,
    /// The caller.
    pub user: UserInfo,
}

/// Produces the kubeconfig YAML returned by the `adminkubeconfig` subresource.
pub type AdminKubeconfigFn = Arc<dyn Fn(&AdminKubeconfigRequest) -> String + Send + Sync>;

/// A tiny seedable xorshift64* generator (deterministic fault injection, uids, generated names).
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// Seeds the generator (0 is replaced by a fixed non-zero constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A float uniformly in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_deterministic_and_spread() {
        let mut a = XorShift::new(7);
        let mut b = XorShift::new(7);
        let xs: Vec<f64> = (0..1000).map(|_| a.next_f64()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.next_f64()).collect();
        assert_eq!(xs, ys);
        let below = xs.iter().filter(|x| **x < 0.5).count();
        assert!((400..600).contains(&below), "{below}");
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
    }
}
