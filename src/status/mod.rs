//! The Runtime status model (`shared/spec/status-model.md`): the table ([`table`]), the policy
//! in force ([`Policy`]), and the pure evaluation of a status write ([`evaluate`], [`mutate`],
//! [`validate`]). No I/O, no async.

mod evaluate;
pub mod policy;
pub mod render;
pub mod table;

pub use evaluate::{
    Decision, Facts, JsonView, Snapshot, Violation, denial_code, denial_message, evaluate,
    format_time, mutate, validate,
};
pub use policy::{Policy, PolicyError, PolicyFile, Writers};
pub use table::{CompatSwitch, CondStatus, RuleId, State};
