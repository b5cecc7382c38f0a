//! The Runtime status model (`shared/spec/status-model.md`): the table ([`table`]), the policy
//! in force ([`Policy`]), and the pure evaluation of a status write ([`evaluate`], [`mutate`],
//! [`validate`]). No I/O, no async.

pub mod args;
mod defaulting;
mod evaluate;
pub mod history;
pub mod policy;
pub mod render;
pub mod table;
mod validate;

pub use args::{PolicyArgs, PolicyArgsError};
pub use defaulting::{mutate, transition_stamp};
pub use evaluate::{
    Decision, Facts, JsonView, LISTED_WARNINGS, Snapshot, Violation, WARNING_LIMIT, allowed,
    denial_code, denial_message, evaluate, format_time, warn_code, warn_message, warnings,
};
pub use policy::{FieldError, Policy, PolicyError, PolicyFile, Writers};
pub use table::{Action, CompatSwitch, CondStatus, Enforcement, RuleId, State};
pub use validate::{validate, validate_stored};
