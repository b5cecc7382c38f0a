//! Dev-only test environment for kim (never linked into the shipped binary): the real servers
//! kim's tests and benches run on, and the simulation of what cannot run here.
//!
//! - [`controlplane`]: etcd + kube-apiserver started as processes (the envtest pattern), with
//!   kim's CRD, manifests and certificates; [`garden`]: gardener-apiserver aggregated behind
//!   it, with its fixtures; [`tools`]: where the binaries are installed.
//! - [`gardenlet`]: the simulated gardenlet (Shoot status, finalizer, `adminkubeconfig` of a real
//!   runtime cluster), playing a [`gardener::ShootScript`] per Shoot — the gardenlet and the
//!   cloud are what cannot run here.
//! - [`process`], [`capture`]: child processes that never outlive the test; [`rollout`],
//!   [`haproxy`], [`cgroup`]: webhook replicas behind HAProxy under CPU limits; [`tls`]:
//!   certificate directories.

#![warn(missing_docs)]

pub mod capture;
pub mod cgroup;
pub mod controlplane;
pub mod garden;
pub mod gardener;
pub mod gardenlet;
pub mod haproxy;
pub mod process;
pub mod rollout;
pub mod tls;
pub mod tools;
