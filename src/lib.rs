//! `kim` — the Kyma Infrastructure Manager's runtime lifecycle in Rust.
//!
//! Data flows one way: bytes → protocol ([`admission`]) → model ([`status`]) → decision → bytes.
//! [`status`] is pure (no I/O, no async) and holds the one table of states, transitions,
//! condition types and reasons; everything else reads it from there.

pub mod admission;
pub mod api;
pub mod audit;
pub mod cli;
pub mod crd;
mod exposition;
pub mod gardener;
pub mod memory;
pub mod reconciler;
mod schema;
mod signal;
pub mod status;
pub mod telemetry;
/// For kim's own tests and benches; not a stable API.
pub mod testing;
pub mod webhook;
