//! Dev-only test environment for kim (never linked into the shipped binary): an in-memory
//! Kubernetes API server that `kube::Client` reaches over real HTTP, and a simulated Gardener.
//!
//! [`start`] binds `127.0.0.1:0` and serves the resources registered in [`ServerConfig`]
//! (`serde_json::Value`s keyed by group, version, plural, namespace and name). It behaves like
//! kube-apiserver wherever a kube-rs client or controller can tell: get, list (label and field
//! selectors, paging with the apiserver's `continue` token and one snapshot per list, `410
//! Expired`), watch (resume from a bounded history, bookmarks, streaming lists), create, replace
//! with resourceVersion conflicts, merge/JSON/strategic patches and server-side apply, deletion
//! with finalizers and preconditions, the `status` and Shoot `adminkubeconfig` subresources,
//! bearer-token users, `dryRun`, and metav1 `Status` errors with the apiserver's reasons, so
//! kube-rs yields the right `kube::Error::Api`. Nothing beyond what kube-rs needs: kubectl and
//! other generic clients run against the real kube-apiserver ([`controlplane`]).
//!
//! Test hooks on the [`ServerHandle`]: fault injection ([`FaultRule`], a seeded [`XorShift`], or
//! a closure), an admission hook on every write ([`ServerHandle::set_admission`];
//! [`WebhookStage`] calls real webhooks from a kustomize directory as kube-apiserver does), a
//! bounded request log, a journal of committed changes that waits can read
//! ([`ServerHandle::journal`]), direct store access and history compaction.
//!
//! # What is approximated
//!
//! - **Server-side apply** is a JSON merge patch of the applied object: the manager is recorded
//!   in `managedFields`, but field ownership is not tracked (no conflicts, `force` has no effect,
//!   fields dropped from a later apply stay, lists are replaced rather than merged by key); apply
//!   of an absent object answers 200 where kube-apiserver answers 201.
//! - **Strategic merge patch** is a JSON merge patch (lists are replaced).
//! - **No RBAC, no schema validation**, defaulting, pruning, conversion, discovery, OpenAPI or
//!   `Table` answers; objects are stored as sent.
//! - `managedFields` are only written by apply; `generation` is kept for every resource.
//! - No namespace lifecycle, garbage collection, `deletecollection` or graceful deletion periods.
//! - `list` serves the latest state whatever `resourceVersion` asks for (later pages: the first
//!   page's state), pages every list with a `limit` (also `resourceVersion=0`), and gives an
//!   expired `continue` no "inconsistent" token.
//! - Admission sees the object after status/spec separation; `adminkubeconfig` skips admission.
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
#[cfg(feature = "kube")]
pub mod garden;
pub mod gardener;
#[cfg(feature = "kube")]
pub mod gardenlet;
pub mod haproxy;
mod hooks;
mod http;
mod journal;
mod list;
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
