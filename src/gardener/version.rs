//! Kubernetes version strings (`MAJOR.MINOR.PATCH`), as the converter and its configuration
//! read them.

use std::cmp::Ordering;

/// Parses `MAJOR.MINOR.PATCH` (an optional leading `v` and a `-pre`/`+build` suffix are
/// ignored); `None` when it is not three decimal numbers.
pub(crate) fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let v = v.trim().strip_prefix('v').unwrap_or(v.trim());
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<u64>().ok())
            .flatten()
    });
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// Numeric comparison of two `MAJOR.MINOR.PATCH` versions; `None` if either does not parse.
pub(crate) fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    Some(parse_version(a)?.cmp(&parse_version(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("1.28.7"), Some((1, 28, 7)));
        assert_eq!(parse_version("v1.30.0-rc.1"), Some((1, 30, 0)));
        for bad in ["", "1.28", "1.28.x", "1.2.3.4", "latest", "1..3"] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
        assert_eq!(compare_versions("1.30.2", "1.30.10"), Some(Ordering::Less));
        assert_eq!(compare_versions("1.31.0", "x"), None);
    }
}
