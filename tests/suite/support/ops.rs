//! Helpers of the operations-kit tests (`ops_rules`, `real_ops`, `prometheus`): the files of
//! `manifests/overlays/monitoring`, the tools of Debian's `prometheus` package (`promtool`,
//! `prometheus`; installed by `scripts/install-prometheus.sh`), and the metric names a PromQL
//! expression reads.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `manifests/overlays/monitoring`.
pub fn overlay() -> PathBuf {
    repo().join("manifests/overlays/monitoring")
}

/// The plain rules file, the one source of the alerts.
pub fn rules_file() -> PathBuf {
    overlay().join("rules/kim.rules.yaml")
}

/// The promtool unit tests of [`rules_file`].
pub fn rules_test_file() -> PathBuf {
    overlay().join("rules/kim.rules.test.yaml")
}

/// The PrometheusRule generated from [`rules_file`].
pub fn prometheus_rule_file() -> PathBuf {
    overlay().join("prometheusrule.yaml")
}

/// The Grafana dashboard.
pub fn dashboard_file() -> PathBuf {
    overlay().join("dashboards/kim.json")
}

/// A YAML file as JSON.
pub fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The dashboard as JSON.
pub fn dashboard() -> Value {
    let path = dashboard_file();
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The path of tool `name` of Debian's `prometheus` package (`promtool`, `prometheus`): from
/// `$KIM_PROMTOOL` / `$KIM_PROMETHEUS`, else `$PATH`. Panics when it is missing, saying how to
/// install it.
pub fn tool(name: &str) -> PathBuf {
    let var = format!("KIM_{}", name.to_ascii_uppercase());
    std::env::var_os(&var)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
        .unwrap_or_else(|| {
            panic!(
                "{name} not found (set {var}, or install Debian's prometheus package with \
                 `sudo bash scripts/install-prometheus.sh`; `bash scripts/test.sh` installs \
                 every tool the tests need)"
            )
        })
}

/// Runs `promtool ARGS` (stdin: `input`); returns (success, stdout + stderr).
pub fn promtool(promtool: &Path, args: &[&str], input: Option<&str>) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new(promtool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    let mut stdin = child.stdin.take().unwrap();
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A PromQL expression and where it comes from.
#[derive(Debug, Clone)]
pub struct Expr {
    /// E.g. `alert KimWebhookDown` or `panel "Runtimes by state" A`.
    pub origin: String,
    /// The expression (Grafana's `$__…` variables replaced, see [`grafana_to_promql`]).
    pub expr: String,
}

/// Every `expr` of a rules file's groups.
pub fn rule_exprs(rules: &Value) -> Vec<Expr> {
    let mut out = Vec::new();
    for g in rules["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            out.push(Expr {
                origin: format!("rule {name}"),
                expr: r["expr"].as_str().expect("expr").to_string(),
            });
        }
    }
    out
}

/// Every target `expr` of every panel of a Grafana dashboard (rows' nested panels included).
pub fn dashboard_exprs(dashboard: &Value) -> Vec<Expr> {
    fn walk(panels: &Value, out: &mut Vec<Expr>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(Expr {
                        origin: format!(
                            "panel {:?} {}",
                            p["title"].as_str().unwrap_or(""),
                            t["refId"].as_str().unwrap_or("")
                        ),
                        expr: grafana_to_promql(e),
                    });
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Replaces Grafana's interval variables by durations, as Grafana does before it sends a
/// query.
pub fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("${__rate_interval}", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
}

/// PromQL keywords, aggregation operators and modifiers: identifiers that are never metric
/// names.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
    "start",
    "end",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LIST: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` selects: identifiers that are not functions (followed by `(`),
/// keywords, label names (in `{…}` matchers and `by (…)`-style lists), strings, numbers or
/// durations.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_ws = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    // Skips a quoted string starting at `j`; returns the index after it.
    let skip_string = |j: usize| {
        let quote = chars[j];
        let mut k = j + 1;
        while k < chars.len() && chars[k] != quote {
            if chars[k] == '\\' && quote != '`' {
                k += 1;
            }
            k += 1;
        }
        k + 1
    };
    // Skips to after the `close` matching the opener at `j`, strings included.
    let skip_group = |j: usize, close: char| {
        let mut k = j + 1;
        while k < chars.len() && chars[k] != close {
            if matches!(chars[k], '"' | '\'' | '`') {
                k = skip_string(k);
            } else {
                k += 1;
            }
        }
        k + 1
    };
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(i);
        } else if c == '{' {
            i = skip_group(i, '}');
        } else if c == '[' {
            i = skip_group(i, ']');
        } else if c == '#' {
            // A comment runs to the end of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            // Numbers and durations: 14, 0.5, 1e3, 5m, 1d.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_ws(i);
            let lower = word.to_ascii_lowercase();
            if LABEL_LIST.contains(&lower.as_str()) {
                if chars.get(next) == Some(&'(') {
                    i = skip_group(next, ')');
                }
            } else if KEYWORDS.contains(&lower.as_str()) || chars.get(next) == Some(&'(') {
                // a keyword or a function
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Series names Prometheus stores from a scrape of `exposition` (either text format): every
/// sample's name, and for every declared family the names its type implies (a counter `x`:
/// `x_total`; a histogram `x`: `x_bucket`, `x_sum`, `x_count`; a summary: `x`, `x_sum`,
/// `x_count`; anything else: `x`), so that a family with no series yet still counts.
pub fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    names.insert(format!("{}_total", family.trim_end_matches("_total")));
                }
                "histogram" => {
                    for s in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{family}{s}"));
                    }
                }
                "summary" => {
                    for s in ["", "_sum", "_count"] {
                        names.insert(format!("{family}{s}"));
                    }
                }
                _ => {
                    names.insert(family.to_string());
                }
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Series Prometheus makes itself for every target, which expressions may read besides what
/// the binaries export.
pub const PROMETHEUS_SERIES: &[&str] = &["up"];

/// The names `exprs` read that are neither in `exported` nor [`PROMETHEUS_SERIES`], each with
/// the expression's origin; also every expression that reads no metric at all (a typo in a
/// function name would make a metric look like a function, so each must read one).
pub fn unknown_metrics(exprs: &[Expr], exported: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for e in exprs {
        let names = metric_names(&e.expr);
        if names.is_empty() {
            problems.push(format!("{}: reads no metric: {}", e.origin, e.expr));
        }
        for n in names {
            if !exported.contains(&n) && !PROMETHEUS_SERIES.contains(&n.as_str()) {
                problems.push(format!("{}: {n} is not exported", e.origin));
            }
        }
    }
    problems
}

/// A rules file with one recording rule per expression (`record: kim_check:expr_N`), for
/// `promtool check rules` to parse each expression.
pub fn recording_rules(exprs: &[Expr]) -> String {
    let mut out = String::from("groups:\n  - name: expressions\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        out.push_str(&format!(
            "      - record: kim_check:expr_{i}\n        expr: {}\n",
            serde_json::to_string(&e.expr).unwrap()
        ));
    }
    out
}

/// Overall limit of every wait for a final state (debug build, 2 shared cores).
pub const LIMIT: Duration = Duration::from_secs(120);

/// A spawned `kim` process with its output captured.
pub struct Kim {
    /// The process.
    pub child: std::process::Child,
    /// Its stdout so far.
    pub stdout: testenv::capture::Captured,
    /// Its stderr so far.
    pub stderr: testenv::capture::Captured,
}

impl Kim {
    /// Starts `kim ARGS` (`RUST_LOG=info`).
    pub fn spawn(args: &[&std::ffi::OsStr]) -> Kim {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kim"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kim starts");
        let (stdout, _) = testenv::capture::capture(child.stdout.take().unwrap());
        let (stderr, _) = testenv::capture::capture(child.stderr.take().unwrap());
        Kim {
            child,
            stdout,
            stderr,
        }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }

    /// Waits until `find` finds something in stdout or stderr (printed once at start-up).
    pub async fn wait_for<T>(&self, what: &str, find: impl Fn(&str) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            let text = format!(
                "{}\n{}",
                self.stdout.lock().unwrap(),
                self.stderr.lock().unwrap()
            );
            if let Some(v) = find(&text) {
                return v;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{what} not printed:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Kim {
    fn drop(&mut self) {
        testenv::capture::terminate(&mut self.child, Duration::from_secs(10));
    }
}

/// The `kim webhook --dev` process on ephemeral ports: (process, https port, metrics address).
pub async fn start_webhook(cert_dir: &Path) -> (Kim, u16, String) {
    let kim = Kim::spawn(&[
        "webhook".as_ref(),
        "--dev".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--metrics-addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--cert-dir".as_ref(),
        cert_dir.as_os_str(),
    ]);
    let port = kim
        .wait_for("the dev banner", |t| {
            t.lines()
                .find_map(|l| l.strip_prefix("kim webhook (dev) on https://localhost:"))
                .and_then(|p| p.trim().parse::<u16>().ok())
        })
        .await;
    let metrics = kim
        .wait_for("the metrics address", |t| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("curl http://"))
                .and_then(|r| r.strip_suffix("/metrics"))
                .map(str::to_string)
        })
        .await;
    (kim, port, metrics)
}
