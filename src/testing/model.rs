//! Runtimes with the statuses the reconciler writes, and the `runtimes/status` AdmissionReviews
//! that carry them, for kim's tests and benches.
//!
//! Every condition the reconciler writes comes from the status table
//! ([`crate::status::table::types`], [`crate::status::table::reasons`]) through the reconciler's
//! own [`next_status`](crate::reconciler::status_update::next_status): a reconcile step added to
//! the reconciler and the table reaches [`lifecycle`] without a second spelling here. The
//! Runtimes are the real samples of the repository's `samples/runtimes/`; objects and reviews
//! are plain JSON, shaped as the apiserver stores and sends them.

mod lifecycle;
mod reviews;
mod runtime;
mod samples;

pub use lifecycle::lifecycle;
pub use reviews::{patch_of, response_of, status_review, update_status_review};
pub use runtime::{RECONCILER, Rt, t0};
pub use samples::{sample_reviews, sample_runtimes, samples_dir};
