//! The two text formats `/metrics` speaks, shared by `kim webhook` and `kim controller`.
//!
//! Both binaries encode their registries in the OpenMetrics text format (what Prometheus asks
//! for first when it scrapes). A client that asks for the classic Prometheus text format
//! (`Accept: text/plain`, without `application/openmetrics-text`) gets version 0.0.4 instead,
//! converted from the same encoding: this is the format `promtool check metrics` reads, and
//! the one older scrapers understand. Anything else (no `Accept`, `*/*`) gets OpenMetrics.
//!
//! The conversion renames what the two formats name differently and drops what 0.0.4 lacks:
//! a counter family `x` (samples `x_total`) is declared as `x_total` in `# HELP`/`# TYPE`, an
//! info family `x` as gauge `x_info`; `# UNIT` and `# EOF` lines go, and so do exemplars
//! (` # {...}` after a sample). Samples are unchanged.

/// `Content-Type` of the OpenMetrics text format.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text format 0.0.4.
pub(crate) const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A text format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// OpenMetrics 1.0 text (the default).
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text004,
}

impl Format {
    /// The format to answer a request with this `Accept` header in: 0.0.4 only when the
    /// client names `text/plain` and not `application/openmetrics-text`.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let accept = accept.unwrap_or_default().to_ascii_lowercase();
        let names = |media: &str| {
            accept.split(',').any(|part| {
                let mut params = part.split(';');
                let name_matches = params.next().is_some_and(|m| m.trim() == media);
                // `q=0` means "not acceptable".
                let refused = params.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f64>().ok())
                        == Some(0.0)
                });
                name_matches && !refused
            })
        };
        if names("text/plain") && !names("application/openmetrics-text") {
            Format::Text004
        } else {
            Format::OpenMetrics
        }
    }

    /// The `Content-Type` of this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::Text004 => TEXT_004,
        }
    }

    /// `openmetrics` (an OpenMetrics encoding) in this format.
    pub(crate) fn render(self, openmetrics: String) -> String {
        match self {
            Format::OpenMetrics => openmetrics,
            Format::Text004 => to_text_004(&openmetrics),
        }
    }
}

/// Converts an OpenMetrics text exposition into the Prometheus text format 0.0.4 (see the
/// module documentation for what changes).
pub(crate) fn to_text_004(openmetrics: &str) -> String {
    use std::collections::HashMap;
    // The family types first: `# HELP` comes before `# TYPE` in the input.
    let types: HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect();
    let rename = |family: &str| -> String {
        match types.get(family).copied() {
            Some("counter") if !family.ends_with("_total") => format!("{family}_total"),
            Some("info") => format!("{family}_info"),
            _ => family.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (family, help) = rest.split_once(' ').unwrap_or((rest, ""));
            // OpenMetrics escapes `"` in HELP; 0.0.4 does not.
            let help = help.replace("\\\"", "\"");
            out.push_str(&format!("# HELP {} {help}\n", rename(family)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                "info" | "stateset" | "gaugehistogram" => "gauge",
                _ => "untyped",
            };
            out.push_str(&format!("# TYPE {} {kind}\n", rename(family)));
        } else {
            // Drop an exemplar: ` # {...}` after the value, so searched for after the
            // closing brace of the sample's labels (a label value may contain ` # {`).
            let search_from = labels_end(line);
            let sample = match line[search_from..].find(" # {") {
                Some(i) => &line[..search_from + i],
                None => line,
            };
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

/// The index after a sample line's label set (`name{…}`; quoted values may hold `}`), or
/// after its name when it has none.
fn labels_end(line: &str) -> usize {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    if !line[name_end..].starts_with('{') {
        return name_end;
    }
    let mut quoted = false;
    let mut escaped = false;
    let start = name_end + 1;
    for (i, c) in line[start..].char_indices().map(|(i, c)| (start + i, c)) {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return i + 1,
            _ => {}
        }
    }
    line.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_prometheus_and_curl() {
        // What Prometheus 2.42 sends when it scrapes.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("*/*")), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("text/plain; version=0.0.4")),
            Format::Text004
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0, application/json")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn counters_are_declared_with_their_total_name_and_eof_goes() {
        let om = "# HELP a_requests Requests \\\"sent\\\".\n# TYPE a_requests counter\na_requests_total{path=\"/x\"} 3\n# HELP a_up Up.\n# TYPE a_up gauge\n# UNIT a_up seconds\na_up 1\n# TYPE a_lat histogram\na_lat_bucket{le=\"+Inf\"} 1 # {trace_id=\"x\"} 0.5\na_lat_sum 0.5 # {trace_id=\"y\"} 0.5\na_lat_count 1\nq{v=\"} # {\"} 2\n# EOF\n";
        assert_eq!(
            to_text_004(om),
            "# HELP a_requests_total Requests \"sent\".\n# TYPE a_requests_total counter\na_requests_total{path=\"/x\"} 3\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# TYPE a_lat histogram\na_lat_bucket{le=\"+Inf\"} 1\na_lat_sum 0.5\na_lat_count 1\nq{v=\"} # {\"} 2\n"
        );
    }
}
