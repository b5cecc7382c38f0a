//! Go duration strings as Gardener's API carries them (`metav1.Duration`): parsing the
//! whole-second subset used in the configuration and writing the canonical form Go's
//! `time.Duration.String()` produces, so that kim writes what KIM (which marshals Go
//! durations) writes.

/// Parses a Go duration made of integer `h`, `m` and `s` components in that order, each at
/// most once (`720h`, `15m`, `1h30m`, `90s`, `0s`), into seconds. `None` for anything else
/// (fractions, `ms`/`us`/`ns`, signs, empty input, overflow).
pub(crate) fn parse_go_duration(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = s;
    let mut allowed = ['h', 'm', 's'].as_slice();
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let value: u64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let position = allowed.iter().position(|&u| u == unit)?;
        let factor = match unit {
            'h' => 3600,
            'm' => 60,
            _ => 1,
        };
        total = total.checked_add(value.checked_mul(factor)?)?;
        allowed = &allowed[position + 1..];
        rest = &rest[digits + 1..];
    }
    Some(total)
}

/// Formats whole seconds as Go's `time.Duration.String()` does: `0s`, `45s`, `15m0s`,
/// `720h0m0s`, `1h30m0s`.
pub(crate) fn format_go_duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_second_go_durations() {
        for (s, secs) in [
            ("720h", 2_592_000),
            ("15m", 900),
            ("1h30m", 5400),
            ("90s", 90),
            ("0s", 0),
            ("720h0m0s", 2_592_000),
        ] {
            assert_eq!(parse_go_duration(s), Some(secs), "{s}");
        }
        for bad in ["", "15", "1.5h", "15ms", "30m1h", "h", "-5m", "5 m", "1h1h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_as_go_does() {
        assert_eq!(format_go_duration(0), "0s");
        assert_eq!(format_go_duration(45), "45s");
        assert_eq!(format_go_duration(900), "15m0s");
        assert_eq!(format_go_duration(2_592_000), "720h0m0s");
        assert_eq!(format_go_duration(5401), "1h30m1s");
    }
}
