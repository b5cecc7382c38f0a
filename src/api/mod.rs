//! Kubernetes API types: the `Runtime` custom resource
//! (`infrastructuremanager.kyma-project.io/v1`, kind `Runtime`, namespaced, `status`
//! subresource).
//!
//! The shapes follow upstream KIM (`kyma-project/kyma-infrastructure-manager`,
//! `api/v1/runtime_types.go`) and, for the embedded Gardener types (workers, OIDC, control
//! plane, last operation / last errors), Gardener's `core.gardener.cloud/v1beta1`. Optional
//! fields are `Option`s skipped when absent, so reading a Runtime and writing it back neither
//! loses nor invents a field. The CRD generated from these types lives in [`crate::crd`].

pub mod runtime;
pub mod shoot;

pub use runtime::*;
pub use shoot::*;
