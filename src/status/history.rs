//! KIM's status vocabulary over time: every condition type, reason and state that KIM's API
//! (`api/v1/runtime_types.go`) ever declared, with the first and last day it was declared and
//! whether KIM still declares it (`docs/status-model.md` §7.6).
//!
//! The data is `samples/kim/vocabulary-history.tsv` (KIM's API history; origin in
//! `samples/README.md`), embedded at build time. Columns, tab
//! separated, one header line: `kind` (`type` \| `reason` \| `state`), `name`, `first_seen`,
//! `last_seen` (dates, `YYYY-MM-DD`), `in_kim_today` (`yes` \| `no`).
//!
//! Rows with `in_kim_today = no` are KIM's *retired* vocabulary: stored Runtimes still carry
//! it (KIM never removes a condition), so the model knows each name with its dates
//! ([`super::table::Origin::KimRetired`]) instead of calling it unknown.

use chrono::NaiveDate;
use serde::Serialize;
use std::sync::LazyLock;

/// The embedded vocabulary file (see the module docs for its columns).
pub const KIM_VOCABULARY_TSV: &str = include_str!("../../samples/kim/vocabulary-history.tsv");

/// What a vocabulary name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A condition `type`.
    Type,
    /// A condition `reason` (KIM declares reasons without binding them to a type).
    Reason,
    /// A `status.state`.
    State,
}

impl Kind {
    /// The name in the file and in messages: `type`, `reason`, `state`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Kind::Type => "type",
            Kind::Reason => "reason",
            Kind::State => "state",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Type, Kind::Reason, Kind::State]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// One row of the vocabulary file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Name {
    pub kind: Kind,
    pub name: &'static str,
    /// First day a KIM version declared the name.
    pub first_seen: NaiveDate,
    /// Last day a KIM version declared the name (the snapshot's date when still declared).
    pub last_seen: NaiveDate,
    /// Whether the newest KIM version still declares it; `false` = retired.
    pub in_kim_today: bool,
}

impl Name {
    /// Whether KIM has retired the name.
    pub const fn retired(&self) -> bool {
        !self.in_kim_today
    }

    /// Whether the two names were declared by KIM at the same time (their date ranges
    /// overlap): the test for a (type, reason) pair of KIM's history.
    pub(crate) fn overlaps(&self, other: &Name) -> bool {
        self.first_seen <= other.last_seen && other.first_seen <= self.last_seen
    }
}

/// A line of the vocabulary file that does not parse: its 1-based number and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("vocabulary-history.tsv line {line}: {message}")]
pub(crate) struct ParseError {
    pub line: usize,
    pub message: String,
}

/// Parses vocabulary text in the file's format (header line first).
///
/// Errors: the first malformed line (wrong column count, unknown kind, bad date, `yes`/`no`).
pub(crate) fn parse(text: &'static str) -> Result<Vec<Name>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| ParseError {
            line: i + 1,
            message,
        };
        let cols: Vec<&'static str> = line.split('\t').collect();
        let [kind, name, first, last, today] = cols[..] else {
            return Err(err(format!("{} columns, expected 5", cols.len())));
        };
        let kind = Kind::parse(kind).ok_or_else(|| err(format!("unknown kind {kind:?}")))?;
        let date = |s: &str| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|e| err(format!("date {s:?}: {e}")))
        };
        let in_kim_today = match today {
            "yes" => true,
            "no" => false,
            other => return Err(err(format!("in_kim_today {other:?}, expected yes or no"))),
        };
        out.push(Name {
            kind,
            name,
            first_seen: date(first)?,
            last_seen: date(last)?,
            in_kim_today,
        });
    }
    Ok(out)
}

static VOCABULARY: LazyLock<Vec<Name>> = LazyLock::new(|| {
    // The embedded file is checked by a unit test; a malformed line can only come from an
    // edit that test catches, so an error here yields the lines read so far.
    parse(KIM_VOCABULARY_TSV).unwrap_or_default()
});

/// Every name KIM's API ever declared, in the file's order.
pub fn vocabulary() -> &'static [Name] {
    &VOCABULARY
}

/// The vocabulary row of `name` as a `kind`, if KIM ever declared it.
pub(crate) fn lookup(kind: Kind, name: &str) -> Option<&'static Name> {
    vocabulary()
        .iter()
        .find(|n| n.kind == kind && n.name == name)
}

/// The row of `name` as a `kind` if KIM has retired it.
pub(crate) fn retired(kind: Kind, name: &str) -> Option<&'static Name> {
    lookup(kind, name).filter(|n| n.retired())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_file_parses_completely() {
        let names = parse(KIM_VOCABULARY_TSV).expect("embedded vocabulary parses");
        let lines = KIM_VOCABULARY_TSV
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count();
        assert_eq!(names.len(), lines);
        assert_eq!(vocabulary().len(), lines);
        for n in &names {
            assert!(n.first_seen <= n.last_seen, "{n:?}");
        }
    }

    #[test]
    fn lookups_and_overlap() {
        let oidc = retired(Kind::Type, "OidcConfigured").expect("OidcConfigured is retired");
        assert_eq!(oidc.last_seen.to_string(), "2025-05-19");
        assert!(retired(Kind::Type, "Provisioned").is_none());
        assert!(lookup(Kind::Type, "Provisioned").is_some());
        let oidc_reason = lookup(Kind::Reason, "OidcConfigured").unwrap();
        assert!(oidc.overlaps(oidc_reason));
        let bootstrapper = lookup(Kind::Reason, "RuntimeBootstrapperConfigured").unwrap();
        assert!(!oidc.overlaps(bootstrapper));
    }

    #[test]
    fn malformed_lines_are_named() {
        let e = parse("h\ntype\tX\t2024-01-01\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("h\nfoo\tX\t2024-01-01\t2024-01-02\tno\n").unwrap_err();
        assert!(e.message.contains("unknown kind"), "{e}");
        let e = parse("h\ntype\tX\t2024-13-01\t2024-01-02\tno\n").unwrap_err();
        assert!(e.message.contains("date"), "{e}");
        let e = parse("h\ntype\tX\t2024-01-01\t2024-01-02\tmaybe\n").unwrap_err();
        assert!(e.message.contains("yes or no"), "{e}");
    }
}
