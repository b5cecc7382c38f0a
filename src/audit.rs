//! `kim audit`: which per-object rules (`docs/status-model.md` §1, §4.1–4.5) the stored status of
//! each Runtime of a cluster breaks — the report an operator reads before switching a rule from
//! `warn` to `deny` on a live control cluster (`docs/status-model.md` §7), like Gatekeeper's audit
//! or `kyverno apply --cluster`. Flags, output and exit codes: README.md, "Auditing stored
//! Runtimes".
//!
//! The cluster is read as kubectl reads it (kubeconfig, context, namespace, pages of
//! `--chunk-size`). Each object is decoded as plain JSON, so a stored status of the wrong shape is
//! reported as a violation rather than failing the decode. A list whose continue token expired
//! (410) ends the run with exit 2 and nothing reported: a report missing the rest of the list
//! would look complete. Each status is judged with [`status::validate_stored`]: no rule that
//! judges a change (transitions, writers, `provisioningCompleted`, `lastTransitionTime`), no
//! ratcheting. Neither the kubeconfig nor a token or key is ever printed.

use crate::api::Runtime;
use crate::status::{self, Action, Policy, PolicyArgs, RuleId, Snapshot, Violation};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Resource as _;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use unicode_width::UnicodeWidthStr;

/// Exit code: every Runtime read, no violation.
pub(crate) const EXIT_CLEAN: u8 = 0;
/// Exit code: at least one violation, whatever its action (`deny` or `warn`).
pub(crate) const EXIT_VIOLATIONS: u8 = 1;
/// Exit code: the cluster could not be read, or a flag (policy file, kubeconfig) is bad.
pub const EXIT_UNREADABLE: u8 = 2;

/// Default of `--request-timeout` (seconds), as the controller's request deadline.
pub(crate) const DEFAULT_REQUEST_TIMEOUT_SECONDS: u64 = 30;

/// Longest answer to one list request (bytes): a page of `--chunk-size` Runtimes is a few
/// MiB; a server sending more is refused rather than filling memory.
pub(crate) const MAX_PAGE_BYTES: u64 = 256 * 1024 * 1024;

/// The resource `kim audit` lists, as RBAC names it.
pub(crate) const RESOURCE: &str = "runtimes.infrastructuremanager.kyma-project.io";

/// Flags of `kim audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Kubeconfig file. Default: `KUBECONFIG`, else `~/.kube/config`, else the in-cluster
    /// service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use. Default: the current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace to audit. Default: the context's namespace, else `default`.
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Audit the Runtimes of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Runtimes per list request (`limit`/`continue` paging, as kubectl's `--chunk-size`);
    /// `0` lists them all in one request.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub chunk_size: u32,
    /// Seconds an API request may take before it fails (its answer must start, and then be
    /// complete, within this time each), as kubectl's `--request-timeout`; `0`: no limit.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_REQUEST_TIMEOUT_SECONDS)]
    pub request_timeout: u64,
    /// Output format: `table` (one row per violation) or `json` (one document).
    #[arg(short = 'o', long, value_enum, default_value_t = AuditOutput::Table)]
    pub output: AuditOutput,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// `-o` values of `kim audit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditOutput {
    /// Aligned columns, one row per violation.
    Table,
    /// One JSON document: the Runtimes with violations and a summary.
    Json,
}

/// Which Runtimes are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// One namespace.
    Namespace(String),
    /// Every namespace (`-A`).
    All,
}

impl Scope {
    fn describe(&self) -> String {
        match self {
            Scope::Namespace(ns) => format!("in namespace {ns}"),
            Scope::All => "in all namespaces".to_string(),
        }
    }
}

/// One Runtime with at least one violation.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    /// `metadata.namespace` (empty when absent).
    pub namespace: String,
    /// `metadata.name` (empty when absent).
    pub name: String,
    /// `status.state` as stored (`None` when absent); any JSON value.
    pub state: Option<Value>,
    /// What [`status::validate_stored`] found, in its order.
    pub violations: status::Violations,
}

/// The audit of the Runtimes read so far: how many, and every violation.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// Which Runtimes were read.
    pub scope: Scope,
    /// Runtimes read.
    pub runtimes: usize,
    /// The Runtimes with violations, in the order read.
    pub findings: Vec<Finding>,
}

impl Report {
    /// An empty report of `scope`.
    pub(crate) fn new(scope: Scope) -> Report {
        Report {
            scope,
            runtimes: 0,
            findings: Vec::new(),
        }
    }

    /// Judges one stored Runtime (a whole object as JSON) and records its violations.
    pub(crate) fn add(&mut self, policy: &Policy, obj: &Value) {
        self.runtimes += 1;
        let violations = status::validate_stored(policy, &Snapshot::of_object(obj));
        if violations.is_empty() {
            return;
        }
        let meta = |k: &str| {
            obj.get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        self.findings.push(Finding {
            namespace: meta("namespace"),
            name: meta("name"),
            state: obj
                .get("status")
                .and_then(|s| s.get("state"))
                .filter(|s| !s.is_null())
                .cloned(),
            violations,
        });
    }

    /// Every violation, in order.
    fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.findings.iter().flat_map(|f| &f.violations)
    }

    /// Violations per rule, in spec order.
    pub(crate) fn by_rule(&self) -> BTreeMap<RuleId, usize> {
        let mut m = BTreeMap::new();
        for v in self.violations() {
            *m.entry(v.rule).or_default() += 1;
        }
        m
    }

    /// Violations per action (`deny`, `warn`).
    pub(crate) fn by_action(&self) -> BTreeMap<Action, usize> {
        let mut m = BTreeMap::new();
        for v in self.violations() {
            *m.entry(v.action).or_default() += 1;
        }
        m
    }

    /// [`EXIT_VIOLATIONS`] when any Runtime has a violation, else [`EXIT_CLEAN`].
    pub(crate) fn exit_code(&self) -> u8 {
        if self.findings.is_empty() {
            EXIT_CLEAN
        } else {
            EXIT_VIOLATIONS
        }
    }

    /// The summary line (stderr), e.g. `kim audit: 12 Runtimes read in all namespaces, 5 with
    /// violations; 7 violations (6 deny, 1 warn): malformed 1, reason-unknown 2, …`.
    pub(crate) fn summary_line(&self) -> String {
        let read = format!(
            "kim audit: {} Runtime{} read {}",
            self.runtimes,
            plural(self.runtimes),
            self.scope.describe()
        );
        if self.findings.is_empty() {
            return format!("{read}, no violations");
        }
        let total: usize = self.findings.iter().map(|f| f.violations.len()).sum();
        let actions: Vec<String> = self
            .by_action()
            .iter()
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        let rules: Vec<String> = self
            .by_rule()
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        format!(
            "{read}, {} with violations; {total} violation{} ({}): {}",
            self.findings.len(),
            plural(total),
            actions.join(", "),
            rules.join(", ")
        )
    }

    /// The table: a header and one row per violation, columns aligned as kubectl aligns them
    /// (at least 3 spaces between columns); `NAMESPACE` only for [`Scope::All`]. Empty when
    /// there is no violation. Every cell is one line (control characters escaped); messages are
    /// not cut.
    pub(crate) fn table(&self) -> String {
        if self.findings.is_empty() {
            return String::new();
        }
        let all = self.scope == Scope::All;
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut header = vec!["NAME", "STATE", "RULE", "ACTION", "PATH", "MESSAGE"];
        if all {
            header.insert(0, "NAMESPACE");
        }
        rows.push(header.into_iter().map(String::from).collect());
        for f in &self.findings {
            let state = match &f.state {
                None => "<none>".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            for v in &f.violations {
                let mut row = vec![
                    f.name.clone(),
                    state.clone(),
                    v.rule.to_string(),
                    v.action.to_string(),
                    v.path.clone(),
                    v.message.clone(),
                ];
                if all {
                    row.insert(0, f.namespace.clone());
                }
                rows.push(row.iter().map(|c| one_line(c)).collect());
            }
        }
        columns(&rows)
    }

    /// The JSON document of `-o json`:
    ///
    /// ```json
    /// {"items": [{"namespace": "kcp-system", "name": "rt-1", "state": "Ready",
    ///             "violations": [{"rule": "ready-requires", "action": "deny",
    ///                             "path": "status.conditions", "value": "",
    ///                             "allowed": "Configured=True", "message": "…"}]}],
    ///  "summary": {"namespace": "kcp-system", "allNamespaces": false, "runtimes": 12,
    ///              "runtimesWithViolations": 1, "violations": 1,
    ///              "byRule": {"ready-requires": 1}, "byAction": {"deny": 1}}}
    /// ```
    ///
    /// `state` is the stored value (any JSON, `null` when absent); `namespace` in the summary
    /// is `null` with `-A`. Written pretty-printed, with a final newline, straight from the
    /// report (no copy of it as a `Value`).
    ///
    /// Errors: those of `out`.
    pub(crate) fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let doc = JsonReport {
            items: self
                .findings
                .iter()
                .map(|f| JsonItem {
                    namespace: &f.namespace,
                    name: &f.name,
                    state: f.state.as_ref(),
                    violations: f
                        .violations
                        .iter()
                        .map(|v| JsonViolation {
                            rule: v.rule,
                            action: v.action,
                            path: &v.path,
                            value: &v.value,
                            allowed: &v.allowed,
                            message: &v.message,
                        })
                        .collect(),
                })
                .collect(),
            summary: JsonSummary {
                namespace: match &self.scope {
                    Scope::Namespace(ns) => Some(ns),
                    Scope::All => None,
                },
                all_namespaces: self.scope == Scope::All,
                runtimes: self.runtimes,
                runtimes_with_violations: self.findings.len(),
                violations: self.findings.iter().map(|f| f.violations.len()).sum(),
                by_rule: self.by_rule(),
                by_action: self.by_action(),
            },
        };
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::other)?;
        out.write_all(b"\n")
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    items: Vec<JsonItem<'a>>,
    summary: JsonSummary<'a>,
}

#[derive(Serialize)]
struct JsonItem<'a> {
    namespace: &'a str,
    name: &'a str,
    state: Option<&'a Value>,
    violations: Vec<JsonViolation<'a>>,
}

#[derive(Serialize)]
struct JsonViolation<'a> {
    rule: RuleId,
    action: Action,
    path: &'a str,
    value: &'a str,
    allowed: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonSummary<'a> {
    namespace: Option<&'a str>,
    all_namespaces: bool,
    runtimes: usize,
    runtimes_with_violations: usize,
    violations: usize,
    by_rule: BTreeMap<RuleId, usize>,
    by_action: BTreeMap<Action, usize>,
}

/// A namespace name: an RFC 1123 label (Kubernetes' `IsDNS1123Label`).
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// One line that shows what is stored: control characters (newlines, tabs, escapes) and the
/// invisible characters that change how a line displays (zero-width, bidirectional overrides
/// and isolates, the byte order mark) written as Rust escapes.
fn one_line(s: &str) -> String {
    if !s.chars().any(hidden) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether `c` would not show as itself on a terminal line.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` cut to at most `max` characters, `…` marking a cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

/// `url` as it may be printed: scheme, host, port and path, without credentials
/// (`user:password@`) or query (`?token=…`).
fn redacted_url(url: &http::Uri) -> String {
    let mut out = String::new();
    if let Some(scheme) = url.scheme_str() {
        out.push_str(scheme);
        out.push_str("://");
    }
    if let Some(host) = url.host() {
        out.push_str(host);
    }
    if let Some(port) = url.port_u16() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(url.path().trim_end_matches('/'));
    out
}

/// Removes what an error text may carry of a credential: the `user:password@` of any URL in
/// it and everything after a `?` in one (query tokens).
fn redact(text: &str) -> String {
    use std::sync::LazyLock;
    static USERINFO: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@").ok());
    static QUERY: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new(r"(://[^\s?]*)\?\S*").ok());
    let mut out = text.to_string();
    if let Some(re) = USERINFO.as_ref() {
        out = re.replace_all(&out, "${1}[redacted]@").into_owned();
    }
    if let Some(re) = QUERY.as_ref() {
        out = re.replace_all(&out, "${1}?[redacted]").into_owned();
    }
    out
}

/// kubectl's tab writer (`minwidth 6, padding 3`): every cell but the last of a row padded to
/// its column's widest cell plus 3 spaces; widths in terminal columns.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < row.len() {
                let pad = (widths[i] + 3).max(6) - cell.width();
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// A list response with its items left as JSON.
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Option<Vec<Value>>,
}

/// The client, where it points, and the namespace of the context.
struct Cluster {
    client: kube::Client,
    server: String,
    default_namespace: String,
}

/// Why the cluster cannot be read, as one line (exit 2).
type Unreadable = String;

/// Loads the kubeconfig as kubectl does (see the module doc) and builds the client.
///
/// Errors: one line naming the source (`--kubeconfig FILE`, `KUBECONFIG`, `~/.kube/config`, in
/// cluster) and the cause; YAML errors give only their position (a message could quote a
/// token or key).
async fn connect(args: &AuditArgs) -> Result<Cluster, Unreadable> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        cluster: None,
        user: None,
    };
    let loaded = match &args.kubeconfig {
        Some(path) => {
            let source = format!("--kubeconfig {}", path.display());
            let kc = Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(&source, &e))?;
            Some((kc, source))
        }
        None => match kubeconfig_from_env() {
            Ok(Some(kc)) => Some((kc, "KUBECONFIG".to_string())),
            Err(e) => return Err(e),
            Ok(None) => match Kubeconfig::read() {
                Ok(kc) => Some((kc, "~/.kube/config".to_string())),
                // No kubeconfig at all: in a cluster, its service account (as kubectl).
                Err(KubeconfigError::ReadConfig(e, _))
                    if e.kind() == std::io::ErrorKind::NotFound && args.context.is_none() =>
                {
                    None
                }
                Err(KubeconfigError::FindPath) if args.context.is_none() => None,
                Err(e) => return Err(kubeconfig_error("~/.kube/config", &e)),
            },
        },
    };
    let config = match loaded {
        Some((kc, source)) => kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| kubeconfig_error(&source, &e))?,
        None => kube::Config::incluster().map_err(|e| {
            format!(
                "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and not running in a cluster ({e})"
            )
        })?,
    };
    let server = redacted_url(&config.cluster_url);
    let default_namespace = config.default_namespace.clone();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = crate::reconciler::deadline::build_limited(
        config,
        std::time::Duration::from_secs(args.request_timeout),
        Some(MAX_PAGE_BYTES),
    )
    .map_err(|e| match e {
        // An exec plugin runs when the client is built; its error quotes its command line and
        // output, where the credential is.
        crate::reconciler::deadline::BuildError::Kube(kube::Error::Auth(_)) => format!(
            "cannot get credentials for {server} from the kubeconfig: its auth provider or exec plugin failed (run the plugin by hand to see why)"
        ),
        other => format!("cannot build a client for {server}: {}", chain(&other)),
    })?;
    Ok(Cluster {
        client,
        server,
        default_namespace,
    })
}

/// The kubeconfig of `KUBECONFIG` (a list of files, merged in order, the first setting a value
/// winning) as kubectl reads it: files that do not exist are skipped. `None` when the variable
/// is unset or empty.
///
/// Errors: none of the files exists, or one does not load (one line, without its content).
fn kubeconfig_from_env() -> Result<Option<Kubeconfig>, Unreadable> {
    let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in std::env::split_paths(&list).filter(|p| p.exists()) {
        let source = format!("KUBECONFIG file {}", path.display());
        let kc = Kubeconfig::read_from(&path).map_err(|e| kubeconfig_error(&source, &e))?;
        merged = Some(match merged {
            None => kc,
            Some(m) => m.merge(kc).map_err(|e| kubeconfig_error(&source, &e))?,
        });
    }
    merged
        .map(Some)
        .ok_or_else(|| "KUBECONFIG: none of its files exists".to_string())
}

/// A kubeconfig error as one line without the file's content.
fn kubeconfig_error(source: &str, e: &KubeconfigError) -> String {
    match e {
        KubeconfigError::Parse(p) => match p.location() {
            Some(l) => format!(
                "{source}: not a valid kubeconfig (YAML error at line {}, column {})",
                l.line(),
                l.column()
            ),
            None => format!("{source}: not a valid kubeconfig (YAML error)"),
        },
        other => format!("{source}: {}", one_line(&chain(other))),
    }
}

/// An error and its causes, `: `-joined, each cause once (a cause whose text the previous one
/// already contains is left out).
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    one_line(&parts.join(": "))
}

/// Runs `kim audit`: reads, judges, writes the report to `out` and the summary (or the error)
/// to `err`; returns the exit code (`EXIT_CLEAN`, `EXIT_VIOLATIONS`, [`EXIT_UNREADABLE`]).
///
/// `err` is written only between pages and at the end; the progress line (a terminal only)
/// goes straight to the process's stderr.
pub async fn run(args: &AuditArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let fail = |err: &mut dyn Write, msg: &str| {
        let _ = writeln!(err, "kim audit: {}", redact(msg));
        EXIT_UNREADABLE
    };
    let policy = match args.policy.load() {
        Ok(p) => p,
        Err(e) => return fail(err, &e.to_string()),
    };
    let cluster = match connect(args).await {
        Ok(c) => c,
        Err(e) => return fail(err, &e),
    };
    let scope = if args.all_namespaces {
        Scope::All
    } else {
        let (ns, source) = match &args.namespace {
            Some(ns) => (ns.clone(), "--namespace"),
            None => (
                cluster.default_namespace.clone(),
                "the kubeconfig context's namespace",
            ),
        };
        if !is_dns_label(&ns) {
            return fail(
                err,
                &format!(
                    "{source} {ns:?} is not a namespace name (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
                ),
            );
        }
        Scope::Namespace(ns)
    };
    let progress = Progress::new();
    // Read on a task of its own: a panic inside kube's client (it panics on some credentials an
    // exec plugin hands over at request time) becomes an error line, not a crash.
    let task = tokio::spawn(read(
        cluster,
        scope,
        args.chunk_size,
        policy,
        progress.clone(),
    ));
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = match task.await {
        Ok(r) => r,
        Err(e) => Err(match e.try_into_panic() {
            Ok(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!(
                    "the client failed while reading the cluster ({}); are the kubeconfig's credentials (e.g. an exec plugin's token) valid HTTP header values?",
                    cut(&one_line(&what), 200)
                )
            }
            Err(e) => format!("reading the cluster was cancelled: {e}"),
        }),
    };
    std::panic::set_hook(previous_hook);
    progress.finish();
    let report = match report {
        Ok(r) => r,
        Err(e) => return fail(err, &e),
    };
    let written = match args.output {
        AuditOutput::Table => out.write_all(report.table().as_bytes()),
        AuditOutput::Json => report.write_json(out),
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        return fail(err, &format!("cannot write the report: {e}"));
    }
    let _ = writeln!(err, "{}", report.summary_line());
    report.exit_code()
}

/// Lists every Runtime of `scope` page by page and judges each.
async fn read(
    cluster: Cluster,
    scope: Scope,
    chunk_size: u32,
    policy: Policy,
    progress: Progress,
) -> Result<Report, Unreadable> {
    let (cluster, policy) = (&cluster, &policy);
    let ns = match &scope {
        Scope::Namespace(ns) => Some(ns.as_str()),
        Scope::All => None,
    };
    let path = Runtime::url_path(&(), ns);
    let request = kube::core::Request::new(&path);
    let mut params = ListParams::default();
    if chunk_size > 0 {
        params = params.limit(chunk_size);
    }
    let mut report = Report::new(scope);
    let mut tokens_seen = std::collections::HashSet::new();
    loop {
        let req = request
            .list(&params)
            .map_err(|e| format!("cannot build the list request: {e}"))?;
        let page: Page =
            cluster.client.request(req).await.map_err(|e| {
                list_error(cluster, &report, &path, params.continue_token.is_some(), e)
            })?;
        let items = page.items.unwrap_or_default();
        for obj in &items {
            report.add(policy, obj);
        }
        progress.page(report.runtimes, page.metadata.remaining_item_count);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                if !tokens_seen.insert(token.clone()) {
                    return Err(format!(
                        "{} sent a continue token it had sent before, after {} Runtime{}: the list would never end; nothing reported",
                        cluster.server,
                        report.runtimes,
                        plural(report.runtimes)
                    ));
                }
                params.continue_token = Some(token)
            }
            _ => return Ok(report),
        }
    }
}

/// A failed list request as one line: what the server said and what to do about it.
fn list_error(
    cluster: &Cluster,
    report: &Report,
    path: &str,
    continuing: bool,
    e: kube::Error,
) -> Unreadable {
    let server = &cluster.server;
    let kube::Error::Api(s) = &e else {
        return match e {
            kube::Error::SerdeError(e) => format!(
                "the answer of {server} to GET {path} is not a list of Runtimes: {}",
                one_line(&e.to_string())
            ),
            // An auth provider's or exec plugin's error can carry its command line and output
            // (where credentials are): only what failed is said.
            kube::Error::Auth(_) => format!(
                "cannot get credentials for {server} from the kubeconfig: its auth provider or exec plugin failed (run the plugin by hand to see why)"
            ),
            kube::Error::Service(e) => format!("cannot reach {server}: {}", chain(&*e)),
            kube::Error::HyperError(e) => format!("cannot reach {server}: {}", chain(&e)),
            other => format!("cannot reach {server}: {}", chain(&other)),
        };
    };
    // A body that was not a metav1 Status (a proxy's or a web server's page): its first line,
    // at most 200 characters.
    // What the server said: a metav1 Status's message up to 1 000 characters (an API server's
    // are a few hundred), a proxy's or a web server's page by its first 200.
    let message = if s.reason == "Failed to parse error data" {
        cut(s.message.lines().next().unwrap_or_default(), 200)
    } else {
        cut(&one_line(&s.message), 1000)
    };
    let reason = if s.reason.is_empty() || s.reason == "Failed to parse error data" {
        String::new()
    } else {
        format!(" {}", s.reason)
    };
    match s.code {
        401 => format!(
            "{server} answered 401{reason}: the kubeconfig's credentials were not accepted (expired or wrong token or client certificate)"
        ),
        403 => {
            let needed = match &report.scope {
                Scope::Namespace(ns) => format!("in namespace {ns} (a Role and RoleBinding)"),
                Scope::All => "in every namespace (a ClusterRole and ClusterRoleBinding)".into(),
            };
            format!(
                "{server} answered 403{reason}: {message}; kim audit needs RBAC `list` on `{RESOURCE}` {needed}"
            )
        }
        404 => format!(
            "{server} answered 404{reason} to GET {path}: the Runtime CRD ({RESOURCE}, version v1) is not installed there (`kim crd` prints it)"
        ),
        410 if continuing => format!(
            "the list expired after {} Runtime{} (410{reason}: the cluster changed more than it keeps history for while the pages were read); nothing reported: rerun kim audit (a larger --chunk-size needs fewer pages)",
            report.runtimes,
            plural(report.runtimes)
        ),
        code => format!("{server} answered {code}{reason} to GET {path}: {message}"),
    }
}

/// The progress line: on stderr when it is a terminal, otherwise nothing.
#[derive(Clone)]
struct Progress(ProgressBar);

impl Progress {
    fn new() -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(ProgressBar::hidden());
        }
        let bar = ProgressBar::new_spinner();
        let style =
            ProgressStyle::with_template("{spinner} reading Runtimes: {pos}{msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress(bar)
    }

    /// After a page: `read` so far, `remaining` as the server counts them (when it does).
    fn page(&self, read: usize, remaining: Option<i64>) {
        self.0.set_position(read as u64);
        if let Some(r) = remaining.and_then(|r| usize::try_from(r).ok()) {
            self.0.set_message(format!(" of {}", read + r));
        }
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runtime(ns: &str, name: &str, status: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "status": status})
    }

    #[test]
    fn table_columns_are_aligned_like_kubectl_and_cells_stay_one_line() {
        let policy = Policy::builtin();
        let mut r = Report::new(Scope::All);
        r.add(&policy, &runtime("a", "clean", json!({"state": "Pending"})));
        r.add(&policy, &runtime("ns-b", "x", json!({"state": "Up\nDown"})));
        assert_eq!(r.runtimes, 2);
        let table = r.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        assert_eq!(
            lines[0],
            "NAMESPACE   NAME   STATE      RULE            ACTION   PATH           MESSAGE"
        );
        assert_eq!(
            lines[1],
            "ns-b        x      Up\\nDown   state-unknown   deny     status.state   status.state: unknown state \"Up\\nDown\"; allowed: Pending, Ready, Failed, Terminating"
        );
        assert_eq!(r.exit_code(), EXIT_VIOLATIONS);
    }

    #[test]
    fn a_clean_report_prints_no_table() {
        let mut r = Report::new(Scope::Namespace("n".into()));
        r.add(&Policy::builtin(), &runtime("n", "a", Value::Null));
        assert_eq!(r.table(), "");
        assert_eq!(r.exit_code(), EXIT_CLEAN);
        assert_eq!(
            r.summary_line(),
            "kim audit: 1 Runtime read in namespace n, no violations"
        );
    }
}
