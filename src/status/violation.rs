//! One broken rule ([`Violation`]) and what a set of them says: allowed or not, the denial's
//! code and message, the warnings (`docs/status-model.md` §6, §7.7).

use super::table::{Action, RuleId};
use serde::Serialize;

/// One broken rule (status model §6): its id, the JSON path of the offending value (e.g.
/// `status.conditions[2].reason`), the value as written, what is allowed, the full
/// human-readable message, and what became of it ([`Action`]: it denies the write, or is a
/// warning because the rule runs in `warn` mode or because it is ratcheted, status model §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: RuleId,
    pub path: String,
    pub value: String,
    pub allowed: String,
    pub message: String,
    pub action: Action,
}

impl Violation {
    /// Whether this violation denies the write.
    pub fn denies(&self) -> bool {
        self.action == Action::Deny
    }

    /// The message with the rule id first: `[rule-id] message` (denials, `kim check`).
    pub(crate) fn line(&self) -> String {
        format!("[{}] {}", self.rule, self.message)
    }

    /// The AdmissionReview warning for a violation that does not deny (status model §7.7): one line,
    /// rule id first, what became of it, at most [`WARNING_LIMIT`] characters, e.g.
    /// `[condition-type-unknown] (ratcheted) status.conditions[3].type: …`.
    pub(crate) fn warning(&self) -> String {
        let text = format!("[{}] ({}) {}", self.rule, self.action, self.message);
        // No more bytes than the limit: no more characters either.
        if text.len() <= WARNING_LIMIT {
            return text;
        }
        match text.char_indices().nth(WARNING_LIMIT - 3) {
            Some((i, _)) if text.chars().count() > WARNING_LIMIT => format!("{}...", &text[..i]),
            _ => text,
        }
    }
}

/// Longest AdmissionReview warning (characters); the apiserver passes longer ones on cut.
pub const WARNING_LIMIT: usize = 120;
/// Most warnings listed for one write; a last line counts the rest (status model §7.7).
pub const LISTED_WARNINGS: usize = 10;

/// The violations of one write or one stored status, in the order the rules ran, and what they
/// say together: allowed or not, the denial's code and message, the warnings (status model §6,
/// §7.7). Derefs to a slice of [`Violation`]; serializes as a JSON array.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Violations(Vec<Violation>);

impl Violations {
    /// Whether a write with these violations is allowed: none has [`Action::Deny`].
    pub fn allowed(&self) -> bool {
        !self.iter().any(Violation::denies)
    }

    /// `status.code` for the denying violations: 200 if none, 400 if any is a shape problem,
    /// else 403.
    pub fn denial_code(&self) -> u16 {
        code_of(self.iter().filter(|v| v.denies()))
    }

    /// The denying violations in one line, each `[rule-id] message`, separated by `"; "` (spec
    /// §6: several violations are all reported in one message); after the first 20, the rest
    /// are counted. Empty when the write is allowed.
    pub fn denial_message(&self) -> String {
        join_lines(self.iter().filter(|v| v.denies()))
    }

    /// What a denial would have said for the violations in `warn` mode ([`Action::Warn`]), in
    /// the form of [`Violations::denial_message`]; empty when there are none. Carried in an
    /// audit annotation.
    pub(crate) fn warn_message(&self) -> String {
        join_lines(self.iter().filter(|v| v.action == Action::Warn))
    }

    /// The `status.code` a denial would have had for the violations in `warn` mode.
    pub(crate) fn warn_code(&self) -> u16 {
        code_of(self.iter().filter(|v| v.action == Action::Warn))
    }

    /// The AdmissionReview warnings for the violations that do not deny (status model §7.7):
    /// `warn` ones first, then ratcheted ones, one line each (`Violation::warning`), at most
    /// [`LISTED_WARNINGS`] plus a line counting the rest.
    pub fn warnings(&self) -> Vec<String> {
        let mut ordered: Vec<&Violation> =
            self.iter().filter(|v| v.action == Action::Warn).collect();
        ordered.extend(self.iter().filter(|v| v.action == Action::Ratcheted));
        let mut out: Vec<String> = ordered
            .iter()
            .take(LISTED_WARNINGS)
            .map(|v| v.warning())
            .collect();
        if ordered.len() > LISTED_WARNINGS {
            out.push(format!(
                "... and {} more warnings",
                ordered.len() - LISTED_WARNINGS
            ));
        }
        out
    }
}

impl std::ops::Deref for Violations {
    type Target = [Violation];

    fn deref(&self) -> &[Violation] {
        &self.0
    }
}

impl From<Vec<Violation>> for Violations {
    fn from(violations: Vec<Violation>) -> Violations {
        Violations(violations)
    }
}

impl FromIterator<Violation> for Violations {
    fn from_iter<I: IntoIterator<Item = Violation>>(iter: I) -> Violations {
        Violations(iter.into_iter().collect())
    }
}

impl IntoIterator for Violations {
    type Item = Violation;
    type IntoIter = std::vec::IntoIter<Violation>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Violations {
    type Item = &'a Violation;
    type IntoIter = std::slice::Iter<'a, Violation>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

fn code_of<'a>(mut denying: impl Iterator<Item = &'a Violation>) -> u16 {
    let mut code = 200;
    for v in denying.by_ref() {
        if v.rule.is_malformed() {
            return 400;
        }
        code = 403;
    }
    code
}

fn join_lines<'a>(violations: impl Iterator<Item = &'a Violation>) -> String {
    let mut out = String::new();
    let mut n = 0;
    for v in violations {
        if n < LISTED_VIOLATIONS {
            if n > 0 {
                out.push_str("; ");
            }
            out.push_str(&v.line());
        }
        n += 1;
    }
    if n > LISTED_VIOLATIONS {
        out.push_str(&format!(
            "; ... and {} more violations",
            n - LISTED_VIOLATIONS
        ));
    }
    out
}

pub(super) fn violation(
    rule: RuleId,
    path: impl Into<String>,
    value: impl Into<String>,
    allowed: impl Into<String>,
    message: String,
) -> Violation {
    Violation {
        rule,
        path: path.into(),
        value: cut(value.into(), VALUE_LIMIT),
        allowed: allowed.into(),
        message: cut(message, MESSAGE_LIMIT),
        action: Action::Deny,
    }
}

/// Longest offending value kept in a [`Violation`] (characters).
const VALUE_LIMIT: usize = 80;
/// Longest message of one [`Violation`] (characters): a request-controlled string (a 40 000
/// character condition type, say) never makes an answer or a log line big.
const MESSAGE_LIMIT: usize = 1000;
/// Most violations listed in one denial message; the rest are counted.
const LISTED_VIOLATIONS: usize = 20;

fn cut(s: String, limit: usize) -> String {
    // No more bytes than the limit: no more characters either.
    if s.len() <= limit {
        return s;
    }
    match s.char_indices().nth(limit) {
        None => s,
        Some((i, _)) => format!("{}...", &s[..i]),
    }
}
