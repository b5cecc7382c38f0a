//! The offline subcommands of `kim` (`review`, `check`, `policy`, `crd`): files in, verdicts
//! out. Each returns the process exit code — 0 allowed, 1 denied, 2 unreadable input, a
//! Runtime the API server's schema check refuses (`crate::schema`) or output that cannot be
//! written — and writes errors as one line each (`file: position: what was expected`), never
//! a backtrace.

use crate::admission::{self, Hook};
use crate::schema;
use crate::status::render::{self, Format};
use crate::status::{self, Facts, PolicyArgs, Writers};
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;

/// Exit code: allowed / success.
pub const EXIT_ALLOWED: u8 = 0;
/// Exit code: denied.
pub(crate) const EXIT_DENIED: u8 = 1;
/// Exit code: unreadable input (missing file, YAML/JSON syntax error, invalid policy file), a
/// Runtime the API server would refuse against the CRD schema, or output that cannot be
/// written (a closed pipe, a full disk).
pub(crate) const EXIT_INPUT: u8 = 2;
/// Exit code: the output cannot be written, or stdout is closed: 2, the code of unreadable
/// input.
pub const EXIT_OUTPUT: u8 = EXIT_INPUT;

/// `kim review`: an AdmissionReview file in, the webhook's answer out.
#[derive(Debug, Clone, Args)]
#[command(after_help = schema::CLI_HELP)]
pub struct ReviewArgs {
    /// AdmissionReview (YAML or JSON; `-` for stdin).
    pub file: String,
    /// Which webhook answers.
    #[arg(long, value_enum, default_value_t = HookArg::Validate)]
    pub hook: HookArg,
    /// Request time for defaulting (RFC 3339); default: now.
    #[arg(long)]
    pub now: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// `--hook` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookArg {
    Validate,
    Mutate,
}

/// `kim check`: one status change of a Runtime, old → new.
#[derive(Debug, Clone, Args)]
#[command(after_help = schema::CLI_HELP)]
pub struct CheckArgs {
    /// The Runtime before the write (YAML/JSON, `-` for stdin), or `none` for the first status write.
    #[arg(long)]
    pub old: String,
    /// The Runtime as written. `metadata.deletionTimestamp` set means it is being deleted.
    #[arg(long)]
    pub new: String,
    /// The writer's user name; without it the writer rule (status model §4.8) is not checked.
    #[arg(long)]
    pub user: Option<String>,
    /// The writer's groups (repeatable).
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Request time for defaulting (RFC 3339); default: now.
    #[arg(long)]
    pub now: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// `--output` values of `kim check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// `kim policy`: print the model.
#[derive(Debug, Clone, Args)]
pub struct PolicyCmdArgs {
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Refused with an explanation (exit 2): the generated bindings match every namespace,
    /// as the webhook configurations do. Kept, hidden, so that a command written for a kim
    /// that bound the policy to one namespace fails saying why instead of as an unknown flag.
    #[arg(long, hide = true, value_name = "NS")]
    pub runtime_namespace: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Reads a file (or stdin for `-`) and parses it as JSON, or YAML when it is not JSON.
///
/// Errors: one line, `FILE: line L column C: what was expected` where the parser says so.
pub(crate) fn read_document(path: &str) -> Result<Value, String> {
    let name = if path == "-" { "stdin" } else { path };
    let text = String::from_utf8(read_input(path)?)
        .map_err(|e| format!("{name}: cannot read: not UTF-8: {e}"))?;
    parse_document(name, &text)
}

/// Largest input `kim review` and `kim check` read: the webhook's body limit, which no review
/// or object kube-apiserver sends exceeds.
const INPUT_LIMIT: u64 = crate::webhook::BODY_LIMIT as u64;

/// Reads a file (or stdin for `-`), at most [`INPUT_LIMIT`] bytes, so that `/dev/zero` or a
/// wrong path is refused instead of filling memory.
///
/// Errors: the file cannot be read, or is larger than the limit.
fn read_input(path: &str) -> Result<Vec<u8>, String> {
    let name = if path == "-" { "stdin" } else { path };
    let mut buf = Vec::new();
    let read = if path == "-" {
        std::io::stdin().take(INPUT_LIMIT + 1).read_to_end(&mut buf)
    } else {
        std::fs::File::open(Path::new(path))
            .and_then(|f| f.take(INPUT_LIMIT + 1).read_to_end(&mut buf))
    };
    read.map_err(|e| format!("{name}: cannot read: {e}"))?;
    if buf.len() as u64 > INPUT_LIMIT {
        return Err(format!(
            "{name}: larger than {} MiB, the webhook's body limit",
            INPUT_LIMIT / (1024 * 1024)
        ));
    }
    Ok(buf)
}

/// Parses one YAML or JSON document (`name` for messages).
fn parse_document(name: &str, text: &str) -> Result<Value, String> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(format!(
            "{name}: empty file; expected a YAML or JSON document"
        ));
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return serde_json::from_str(text).map_err(|e| format!("{name}: invalid JSON: {e}"));
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| {
        let msg = e.to_string();
        let first = msg.lines().next().unwrap_or("").trim();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        format!("{name}: invalid YAML: {first}")
    })
}

/// The body `kim review` answers: a JSON file's bytes as they are (the webhook sees exactly
/// these: repeated keys, escapes and nesting are judged as over the wire), a YAML file
/// converted to JSON.
///
/// Errors (exit 2): the file cannot be read, is empty, or is neither JSON nor YAML. JSON nested
/// deeper than serde_json's recursion limit is passed on (the webhook answers it).
fn read_review_body(path: &str) -> Result<Vec<u8>, String> {
    let raw = read_input(path)?;
    let name = if path == "-" { "stdin" } else { path };
    let start = raw.iter().position(|b| !b.is_ascii_whitespace());
    if matches!(start.map(|i| raw[i]), Some(b'{' | b'[')) {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(&raw) {
            Err(e) if !e.to_string().contains("recursion limit") => {
                Err(format!("{name}: invalid JSON: {e}"))
            }
            _ => Ok(raw),
        };
    }
    let text = String::from_utf8(raw).map_err(|_| format!("{name}: cannot read: not UTF-8"))?;
    let doc = parse_document(name, &text)?;
    Ok(serde_json::to_vec(&doc).unwrap_or_default())
}

fn now_or(t: Option<DateTime<Utc>>) -> DateTime<Utc> {
    t.unwrap_or_else(Utc::now)
}

/// Runs `kim review`; writes the answer (pretty JSON) to `out`, errors to `err`.
pub fn review(args: &ReviewArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let policy = match args.policy.load() {
        Ok(p) => p,
        Err(e) => return fail(err, &e.to_string()),
    };
    let body = match read_review_body(&args.file) {
        Ok(b) => b,
        Err(e) => return fail(err, &e),
    };
    let hook = match args.hook {
        HookArg::Validate => Hook::Validate,
        HookArg::Mutate => Hook::Mutate,
    };
    let outcome = admission::review(hook, &policy, &body, now_or(args.now));
    if !review_fits_schema(&body, &outcome.body, hook, err) {
        return EXIT_INPUT;
    }
    let pretty = serde_json::from_slice::<Value>(&outcome.body)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| String::from_utf8_lossy(&outcome.body).into_owned());
    if let Err(code) = emit(out, err, &format!("{pretty}\n")) {
        return code;
    }
    if outcome.allowed {
        EXIT_ALLOWED
    } else {
        EXIT_DENIED
    }
}

/// Runs `kim check`; writes the verdict to `out`, errors to `err`.
pub fn check(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let mut policy = match args.policy.load() {
        Ok(p) => p,
        Err(e) => return fail(err, &e.to_string()),
    };
    let old = if args.old == "none" {
        None
    } else {
        match read_document(&args.old) {
            Ok(d) => Some(d),
            Err(e) => return fail(err, &e),
        }
    };
    let new = match read_document(&args.new) {
        Ok(d) => d,
        Err(e) => return fail(err, &e),
    };
    if !new.is_object() || old.as_ref().is_some_and(|o| !o.is_object()) {
        return fail(
            err,
            "--old and --new must each be one Runtime object (a YAML/JSON mapping)",
        );
    }
    let writer_checked = args.user.is_some();
    if !writer_checked {
        policy = policy.with_writers(Writers {
            any: true,
            ..Writers::default()
        });
    }
    let facts = Facts {
        user: args.user.clone().unwrap_or_default(),
        groups: args.groups.clone(),
        dry_run: false,
        now: now_or(args.now),
    };
    let decision = status::evaluate(&policy, old.as_ref(), &new, &facts);
    // The API server checks the schema after the mutating webhook: the written object with the
    // defaulting patch applied (crate::schema).
    let mut written = new.clone();
    let _ = json_patch::patch(&mut written, &decision.patch);
    // Only the written object: the API server does not validate what is stored again.
    if !fits_schema(err, &[("--new", Some(&written))]) {
        return EXIT_INPUT;
    }
    let state = |v: Option<&Value>| -> String {
        v.and_then(|o| o.get("status"))
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("none")
            .to_string()
    };
    let (from, to) = (state(old.as_ref()), state(Some(&new)));
    let deleting = status::Snapshot::of_object(&new).deleting;
    let text = match args.output {
        Output::Json => {
            let v = serde_json::json!({
                "allowed": decision.violations.allowed(),
                "code": decision.violations.denial_code(),
                "from": from,
                "to": to,
                "deleting": deleting,
                "writerChecked": writer_checked,
                "violations": decision.violations,
                "patch": decision.patch,
                "warnings": decision.warnings,
            });
            format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        Output::Text => {
            // Writing to a String cannot fail.
            use std::fmt::Write as _;
            let mut text = String::new();
            let verdict = if decision.violations.allowed() {
                "ALLOWED".to_string()
            } else {
                format!(
                    "DENIED ({} {})",
                    decision.violations.denial_code(),
                    admission::reason_for(decision.violations.denial_code())
                )
            };
            let _ = writeln!(
                text,
                "{verdict}: {from} -> {to}{}",
                if deleting { " (deleting)" } else { "" }
            );
            // Denying violations first, then the allowed ones with what became of them.
            for v in decision.violations.iter().filter(|v| v.denies()) {
                let _ = writeln!(text, "  {}", v.line());
            }
            for v in decision.violations.iter().filter(|v| !v.denies()) {
                let _ = writeln!(text, "  [{}] ({}) {}", v.rule, v.action, v.message);
            }
            if !decision.patch.0.is_empty() {
                let _ = writeln!(
                    text,
                    "defaulting (JSONPatch, {} operation(s)):",
                    decision.patch.0.len()
                );
                for op in &decision.patch.0 {
                    let _ = writeln!(text, "  {}", serde_json::to_string(op).unwrap_or_default());
                }
            }
            if !writer_checked {
                let _ = writeln!(text, "note: writer not checked (no --user)");
            }
            text
        }
    };
    if let Err(code) = emit(out, err, &text) {
        return code;
    }
    if decision.violations.allowed() {
        EXIT_ALLOWED
    } else {
        EXIT_DENIED
    }
}

/// Runs `kim policy`; writes the document to `out`, errors to `err` (exit 2).
pub fn policy(args: &PolicyCmdArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    if args.runtime_namespace.is_some() {
        return fail(
            err,
            "--runtime-namespace is no longer accepted: the generated bindings judge Runtime status writes in every namespace, as kim's webhook configurations do (the status model does not depend on the namespace); drop the flag",
        );
    }
    let document = match args.policy.load() {
        Ok(p) if args.format == Format::Vap => {
            if let Err(e) = status::vap::check_size(&p) {
                return fail(err, &e);
            }
            status::vap::yaml(&p)
        }
        Ok(p) if args.format == Format::Map => {
            if let Err(e) = status::map::check_size(&p) {
                return fail(err, &e);
            }
            status::map::yaml(&p)
        }
        Ok(p) => render::render(&p, args.format),
        Err(e) => return fail(err, &e.to_string()),
    };
    emit(out, err, &document).err().unwrap_or(EXIT_ALLOWED)
}

/// Runs `kim crd`; writes the CRD (YAML) to `out`, a write error to `err` (exit 2).
pub fn crd(out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    emit(out, err, &crate::crd::crd_yaml())
        .err()
        .unwrap_or(EXIT_ALLOWED)
}

/// Writes a command's whole output to `out` and flushes it.
///
/// Errors: the output cannot be written (a closed pipe, a full disk: `kim policy > /dev/full`);
/// one line on `err`, and the exit code ([`EXIT_INPUT`]): the command did not do its job.
fn emit(out: &mut dyn Write, err: &mut dyn Write, text: &str) -> Result<(), u8> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| fail(err, &format!("cannot write the output: {e}")))
}

/// The API server's schema check ([`schema::check`]) of each labelled object: one line per
/// unknown field (a warning) and per error. False when any would be refused (exit 2).
fn fits_schema(err: &mut dyn Write, objects: &[(&str, Option<&Value>)]) -> bool {
    let mut fits = true;
    for (label, object) in objects {
        let Some(object) = object else { continue };
        let report = schema::check(object);
        for field in &report.unknown_fields {
            let _ = writeln!(
                err,
                "kim: {label}: warning: unknown field {field} (the API server drops it)"
            );
        }
        for e in &report.errors {
            let _ = writeln!(err, "kim: {label}: invalid Runtime: {e}");
        }
        fits &= report.is_valid();
    }
    fits
}

/// [`fits_schema`] for the Runtimes of a review (`body`), the object with the patch of the
/// mutating webhook's answer (`answer`) applied: what the API server would validate next. A
/// body that is not JSON is left to the webhook's answer.
fn review_fits_schema(body: &[u8], answer: &[u8], hook: Hook, err: &mut dyn Write) -> bool {
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return true;
    };
    let patch = matches!(hook, Hook::Mutate)
        .then(|| answered_patch(answer))
        .flatten();
    let objects: Vec<(&str, Value)> = schema::review_runtimes(&review)
        .into_iter()
        .map(|(label, object)| {
            let mut object = object.clone();
            if let (Some(p), "request.object") = (&patch, label) {
                let _ = json_patch::patch(&mut object, p);
            }
            (label, object)
        })
        .collect();
    let labelled: Vec<(&str, Option<&Value>)> =
        objects.iter().map(|(l, o)| (*l, Some(o))).collect();
    fits_schema(err, &labelled)
}

/// The JSONPatch of a webhook answer (`response.patch`, base64), if any.
fn answered_patch(answer: &[u8]) -> Option<json_patch::Patch> {
    use base64::Engine;
    let answer: Value = serde_json::from_slice(answer).ok()?;
    let encoded = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn fail(err: &mut dyn Write, msg: &str) -> u8 {
    let _ = writeln!(err, "kim: {msg}");
    EXIT_INPUT
}
