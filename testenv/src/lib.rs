//! Dev-only test environment for kim (never linked into the shipped binary): an in-memory
//! Kubernetes API server that `kube::Client` reaches over real HTTP, and a simulated Gardener.
//!
//! # The API server
//!
//! [`start`] binds `127.0.0.1:0` and serves any resource registered in [`ServerConfig`]
//! (objects are `serde_json::Value`s keyed by group, version, plural, namespace and name).
//! It behaves like kube-apiserver wherever a kube-rs client or controller can tell:
//!
//! - **get / list** with label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and
//!   field selectors (`path=value`, `path!=value` on any dotted path, e.g. `metadata.name`);
//!   cluster-wide lists of namespaced resources; list `metadata.resourceVersion`;
//!   `PartialObjectMetadata` responses when asked for with the `Accept` header.
//! - **paged lists** (`limit`, `continue`): items in namespace/name order, an opaque
//!   `metadata.continue` token (the apiserver's encoding) and `metadata.remainingItemCount`
//!   (not with selectors) while more remain; every page of one list shows the snapshot of its
//!   first page (same `resourceVersion`, objects as they were then, rebuilt from the watch
//!   history); `410 Expired` once the history no longer reaches back to it; `400` for a bad
//!   token or `continue` with `resourceVersion`. kube-runtime's watcher pages its initial
//!   lists by 500 (`watcher::Config::page_size`), as against a real apiserver.
//! - **watch**: newline-delimited `{"type", "object"}` events over a chunked response,
//!   resuming from `resourceVersion` out of a bounded history (an older resourceVersion gets
//!   an `ERROR` event with a 410 `Expired` Status "too old resource version", which makes
//!   kube-runtime's watcher relist), `allowWatchBookmarks`, `timeoutSeconds`, selectors (objects
//!   leaving/entering a selector are reported as DELETED/ADDED), and streaming lists
//!   (`sendInitialEvents=true`: ADDED for everything, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`). One global, monotonically increasing
//!   resourceVersion per server, as with etcd.
//! - **create**: 409 `AlreadyExists`; sets `uid`, `creationTimestamp`, `resourceVersion`,
//!   `generation: 1`; `generateName`; namespace from the URL; status dropped for resources with
//!   a status subresource.
//! - **replace (PUT)**: 409 `Conflict` on a stale `metadata.resourceVersion` (no
//!   resourceVersion = unconditional); a main-resource write keeps the stored status, a
//!   `/status` write keeps everything but status; `generation` is bumped only when something
//!   outside `metadata` (and `status`, for status-subresource resources) changes; a write that
//!   changes nothing does not bump the resourceVersion and emits no event.
//! - **patch**: JSON merge patch, JSON patch (RFC 6902), strategic merge patch and server-side
//!   apply, with the same rules; a `resourceVersion` in the patch body is a precondition.
//! - **delete**: with finalizers the object is kept with `deletionTimestamp`,
//!   `deletionGracePeriodSeconds: 0` and `generation + 1` (MODIFIED event); it is removed
//!   (DELETED event) when there are none or when a later write empties them; adding finalizers
//!   to an object being deleted is refused (422); `preconditions` are honoured.
//! - **subresources**: `status` (GET/PUT/PATCH) for resources registered with it; the Shoot
//!   `adminkubeconfig` subresource (POST an `AdminKubeconfigRequest`, get it back with
//!   `status.kubeconfig` (base64) from a closure the test sets, see
//!   [`ServerHandle::set_admin_kubeconfig`]).
//! - **errors** are metav1 `Status` objects with the apiserver's reasons and wording, so kube-rs
//!   yields `kube::Error::Api` with the right code. Unregistered resources are 404.
//! - **users**: bearer tokens map to users ([`ServerConfig::user`]); requests without
//!   `Authorization` are `system:anonymous`; an unknown token is 401.
//! - `dryRun=All` runs admission but stores nothing.
//!
//! Nothing beyond what kube-rs needs: kubectl and other generic clients run against the real
//! kube-apiserver ([`controlplane`]); [`tools`] is where tests find the kubectl and helm
//! binaries `scripts/install-tools.sh` installs.
//!
//! Test hooks on the [`ServerHandle`]: fault injection ([`FaultRule`], seeded
//! [`XorShift`] RNG, or a closure), an admission hook on every write
//! ([`ServerHandle::set_admission`]), a request log ([`ServerHandle::requests`], bounded by
//! [`ServerConfig::request_log_limit`]; [`ServerHandle::request_count`] counts every request),
//! a journal of committed changes that waits can read ([`ServerHandle::journal`]),
//! direct store access ([`ServerHandle::get`], [`ServerHandle::list`], [`ServerHandle::put`],
//! [`ServerHandle::modify`], [`ServerHandle::delete`]), history compaction
//! ([`ServerHandle::compact_history`]) and, with the default `kube` feature, a ready
//! `kube::Client` ([`ServerHandle::client`]).
//!
//! [`WebhookStage`] (module [`webhook_stage`]) is an admission hook that calls real admission
//! webhooks over HTTPS as kube-apiserver does, configured from the
//! `Mutating`/`ValidatingWebhookConfiguration`s of a kustomize directory (kim's `manifests/`).
//!
//! # What is approximated
//!
//! - **Server-side apply** is a JSON merge patch of the applied object (a JSON body only); the field manager is
//!   recorded in `managedFields` (operation `Apply`, a `fieldsV1` derived from the applied
//!   object) but field ownership is not tracked: no conflicts (`force` is accepted and has no
//!   effect), fields dropped from a later apply are not removed, and lists are replaced rather
//!   than merged by key (`x-kubernetes-list-map-keys` are not read). Apply creates the object
//!   when absent (answering 200, where kube-apiserver answers 201).
//! - **Strategic merge patch** is treated as a JSON merge patch (lists are replaced).
//! - **No RBAC**: every authenticated or anonymous user may do everything.
//! - **No schema validation**, defaulting, pruning or conversion; objects are stored as sent.
//!   No discovery, OpenAPI or `Table` answers: unregistered paths are 404.
//! - `managedFields` are only written by apply; other writes do not add `Update` entries.
//! - `generation` is maintained for every resource (kube-apiserver does so only for custom
//!   resources and some built-ins).
//! - No namespace lifecycle (objects may be created in namespaces that do not exist; deleting
//!   a namespace does not delete its contents), no garbage collection of owned objects, no
//!   `deletecollection`, no graceful deletion periods.
//! - `list` serves the latest state whatever `resourceVersion`/`resourceVersionMatch` asks
//!   for (the pages after the first of a paged list: the first page's state); it pages every
//!   list with a `limit`, also with `resourceVersion=0` (which kube-apiserver may answer
//!   unpaged from its watch cache); an expired `continue` gets no "inconsistent" token to go on
//!   with.
//! - Admission sees the object after status/spec separation (the view a validating webhook
//!   gets); the `adminkubeconfig` subresource does not go through admission.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use testenv::{AdmissionDecision, FaultAction, FaultRule, Gvr, ServerConfig, Verb};
//! let server = testenv::start(ServerConfig::default()).await?;
//! let client = server.client(); // kube::Client over http://127.0.0.1:<port>
//! server.set_admission(|req| {
//!     if req.subresource.as_deref() == Some("status") && req.object.is_none() {
//!         AdmissionDecision::Deny { code: 403, message: "no".into() }
//!     } else {
//!         AdmissionDecision::Allow
//!     }
//! });
//! server.add_fault(FaultRule::new(FaultAction::fail(500)).verb(Verb::Update).times(1));
//! // ... run the code under test with `client` ...
//! let runtimes = server.list(&Gvr::runtimes(), Some("kcp-system"));
//! let writes = server.count_requests(|r| r.is("runtimes", Some("status")) && r.is_write());
//! # let _ = (client, runtimes, writes); Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod capture;
pub mod cgroup;
pub mod controlplane;
pub mod gardener;
pub mod haproxy;
mod hooks;
mod http;
mod journal;
mod list;
pub mod model;
pub mod process;
mod resource;
#[cfg(feature = "kube")]
pub mod rollout;
mod selector;
mod server;
mod status;
mod store;
pub mod tls;
pub mod tools;
mod watch;
pub mod webhook_stage;

pub use hooks::{
    AdminKubeconfigFn, AdminKubeconfigRequest, AdmissionDecision, AdmissionFn, AdmissionRequest,
    BoxFuture, FaultAction, FaultFn, FaultRule, RequestInfo, RequestRecord, UserInfo, Verb,
    XorShift,
};
pub use journal::{Change, Journal};
pub use resource::{Gvr, ResourceInfo, default_resources};
pub use selector::{FieldSelector, LabelRequirement, LabelSelector};
pub use server::{ServerConfig, ServerHandle, kubeconfig_yaml, kubeconfig_yaml_with_ca, start};
pub use status::{ApiError, reason_for};
pub use store::EventType;
pub use webhook_stage::{WebhookConfigurations, WebhookStage};
