//! The flags that choose the policy in force, shared by every `kim` command that evaluates
//! status writes (`webhook`, `controller`, `review`, `check`, `policy`, `audit`). Each flag also
//! reads the environment variable named in its help.

use super::table::{CompatSwitch, Enforcement, RuleId};
use super::{Policy, PolicyError, Writers};
use clap::Args;
use std::path::PathBuf;

/// Policy flags. Order of application in [`PolicyArgs::load`]: built-in table, `--compat`,
/// `--policy-file`, then `--allowed-writers`, `--enforcement` and `--rule-action`, which win
/// over the file's `allowedWriters` and `enforcement`.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Extra policy file (YAML/JSON) adding condition types, reasons or transitions, naming the
    /// writers and the enforcement actions.
    #[arg(long, env = "KIM_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// Who may write status: comma list of users, `group:NAME` for groups, `*` for anyone.
    /// Default: system:serviceaccount:kim-system:kim-controller,group:system:masters.
    #[arg(long, env = "KIM_ALLOWED_WRITERS")]
    pub allowed_writers: Option<String>,
    /// Compatibility switches to turn on (repeatable or comma list): `terminatingConditionType`,
    /// `kimHistory`.
    #[arg(long = "compat", env = "KIM_COMPAT", value_delimiter = ',', value_parser = parse_switch)]
    pub compat: Vec<CompatSwitch>,
    /// Enforcement action of every rule without its own `--rule-action`: `deny` rejects a
    /// write that breaks the rule, `warn` allows it with a warning and an audit annotation.
    /// Default: `deny` (or the policy file's `enforcement.action`).
    #[arg(long, env = "KIM_ENFORCEMENT", value_parser = parse_enforcement)]
    pub enforcement: Option<Enforcement>,
    /// Enforcement action of one rule, `RULE=deny|warn` (repeatable or comma list), e.g.
    /// `condition-type-unknown=warn`. Rule ids: `kim policy`.
    #[arg(long = "rule-action", env = "KIM_RULE_ACTIONS", value_delimiter = ',', value_parser = parse_rule_action)]
    pub rule_actions: Vec<(RuleId, Enforcement)>,
}

fn parse_switch(s: &str) -> Result<CompatSwitch, String> {
    CompatSwitch::parse(s).ok_or_else(|| {
        let known: Vec<_> = CompatSwitch::ALL.iter().map(|c| c.as_str()).collect();
        format!(
            "unknown compatibility switch {s:?}; known: {}",
            known.join(", ")
        )
    })
}

fn parse_enforcement(s: &str) -> Result<Enforcement, String> {
    Enforcement::parse(s).ok_or_else(|| format!("{s:?} is not one of deny, warn"))
}

fn parse_rule_action(s: &str) -> Result<(RuleId, Enforcement), String> {
    let (rule, action) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected RULE=deny or RULE=warn"))?;
    let id = RuleId::parse(rule.trim()).ok_or_else(|| {
        let known: Vec<_> = RuleId::ALL.iter().map(|r| r.as_str()).collect();
        format!(
            "{s:?}: unknown rule id {rule:?}; known: {}",
            known.join(", ")
        )
    })?;
    Ok((id, parse_enforcement(action.trim())?))
}

/// Why [`PolicyArgs::load`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyArgsError {
    /// The policy file does not load (the error names the file and the field).
    #[error(transparent)]
    File(#[from] PolicyError),
    /// `--allowed-writers` does not parse.
    #[error("--allowed-writers: {0}")]
    Writers(super::FieldError),
}

impl PolicyArgs {
    /// Builds the policy in force from the flags.
    ///
    /// Errors: an invalid policy file or writers list, as one line naming the field.
    pub fn load(&self) -> Result<Policy, PolicyArgsError> {
        let mut p = Policy::builtin();
        for s in &self.compat {
            p = p.with_switch(*s);
        }
        if let Some(f) = &self.policy_file {
            p = p.load_file(f)?;
        }
        if let Some(w) = &self.allowed_writers {
            p = p.with_writers(Writers::parse_list(w).map_err(PolicyArgsError::Writers)?);
        }
        if let Some(e) = self.enforcement {
            p = p.with_enforcement(e);
        }
        for (rule, action) in &self.rule_actions {
            p = p.with_rule_action(*rule, *action);
        }
        Ok(p)
    }
}
