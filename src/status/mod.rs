//! The Runtime status model (docs/status-model.md): the table ([`table`]), the policy
//! in force ([`Policy`]), and the pure evaluation of a status write ([`evaluate`], [`mutate`],
//! [`validate`]). No I/O, no async.

pub mod args;
mod defaulting;
mod evaluate;
pub mod history;
mod json;
pub mod map;
pub mod policy;
pub mod render;
pub mod table;
mod validate;
pub mod vap;
mod violation;

pub use args::{PolicyArgs, PolicyArgsError};
pub use defaulting::{mutate, transition_stamp};
pub use evaluate::{Decision, evaluate};
pub use json::{Facts, JsonView, Snapshot, format_time};
pub use policy::{FieldError, Policy, PolicyError, PolicyFile, Writers};
pub use table::{Action, CompatSwitch, CondStatus, Enforcement, RuleId, State};
pub use validate::{validate, validate_stored};
pub use violation::{LISTED_WARNINGS, Violation, Violations, WARNING_LIMIT};
