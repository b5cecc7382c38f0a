//! `kim audit` against broken kubeconfigs and misbehaving API servers (no panic, no hang, no
//! credential or unbounded server text in its errors), the admission answers of ratcheted
//! writes (one-line warnings, no-op writes through both webhooks, KIM's retired `Deleting`
//! state, the `kimHistory` switch), and the schema check of `kim check` / `kim review`
//! against what kube-apiserver does. Each test pins one case.
//!
//! The API servers here are a few lines of `std::net` each (a thread per server, one canned
//! answer per request), so a test can make the server do what no real one should.

use kim::admission::{self, Hook};
use kim::status::{CompatSwitch, Policy};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const KIM_SA: &str = "system:serviceaccount:kim-system:kim-controller";

// ---------------------------------------------------------------------------------------------
// Helpers: fake API servers, kubeconfigs, running `kim` with a deadline.
// ---------------------------------------------------------------------------------------------

/// Reads one HTTP/1.1 request head (the audit's GETs have no body).
fn read_head(stream: &TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" || line == "\n" => return,
            Ok(_) => {}
        }
    }
}

/// A plain-HTTP server on 127.0.0.1 answering every request with `answer(request number)`
/// (status code, JSON body); `None` accepts the connection and never answers.
fn fake_server(answer: impl Fn(usize) -> Option<(u16, String)> + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            read_head(&stream);
            match answer(n) {
                Some((code, body)) => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                None => held.push(stream), // never answered, never closed
            }
        }
    });
    url
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A kubeconfig with `cluster` and `user` as given (YAML flow mappings or blocks).
fn kubeconfig(dir: &Path, name: &str, cluster: &str, user: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\nusers:\n- name: u\n  user: {user}\ncontexts:\n- name: ctx\n  context: {{cluster: c, user: u, namespace: kcp-system}}\ncurrent-context: ctx\n"
        ),
    )
    .unwrap();
    path
}

/// `kim ARGS` in an empty environment (`HOME` = `home`), killed after `limit`; `None` when it
/// had to be killed. Both pipes are read while it runs (a long error line must not block it).
fn kim_with_deadline(args: &[&str], home: &Path, limit: Duration) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kim");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(Output {
                status,
                stdout: stdout.join().unwrap(),
                stderr: stderr.join().unwrap(),
            });
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `kim audit --kubeconfig KC` with `home` as its HOME, given 30 s to finish: `None` when it
/// was still running then (and was killed).
fn audit_with(kc: &Path, home: &Path) -> Option<Output> {
    kim_with_deadline(
        &["audit", "--kubeconfig", kc.to_str().unwrap()],
        home,
        Duration::from_secs(30),
    )
}

/// Exit 2, one line on stderr starting `kim audit: `, no panic, nothing on stdout.
fn assert_unreadable(out: &Output) -> String {
    let e = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit 2 expected; stderr: {}",
        e.chars().take(2000).collect::<String>()
    );
    assert!(!e.contains("panicked"), "{e}");
    assert!(e.starts_with("kim audit: "), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert_eq!(text(&out.stdout), "");
    e
}

fn runtime(name: &str, status: Value) -> Value {
    json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
           "metadata": {"name": name, "namespace": "kcp-system"}, "status": status})
}

// ---------------------------------------------------------------------------------------------
// kim audit: broken kubeconfigs
// ---------------------------------------------------------------------------------------------

/// A bearer token with a trailing newline — what `token: |` (a YAML block scalar, common when a
/// token is pasted) gives — makes `kim audit` panic in tower-http's `AddAuthorization`
/// ("token is not valid header: InvalidHeaderValue", exit 101) instead of a one-line error.
/// kubectl answers such a token with an error. The same panic comes from an exec plugin whose
/// `status.token` ends in a newline.
#[test]
fn audit_token_with_a_newline_is_exit_2_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let server = format!("{{server: \"http://127.0.0.1:{}\"}}", closed_port());
    for (name, user) in [
        ("block", "\n    token: |\n      audit-token-5f0c1e\n"),
        ("inline", "{token: \"audit-token\\n5f0c1e\"}"),
        ("control", "{token: \"audit-token\\u00015f0c1e\"}"),
    ] {
        let kc = kubeconfig(dir.path(), name, &server, user);
        let out = audit_with(&kc, dir.path()).expect("kim audit finishes");
        let e = assert_unreadable(&out);
        assert!(!e.contains("5f0c1e"), "the token is never printed: {e}");
    }
}

/// Errors print the kubeconfig's server URL (and proxy URL) whole, credentials included:
/// `cannot reach http://admin:SECRETPASS@127.0.0.1:…`. Go's client (kubectl) redacts the
/// password of a URL in errors (`url.Redacted`).
#[test]
fn audit_errors_never_print_credentials_of_the_server_or_proxy_url() {
    let dir = tempfile::tempdir().unwrap();
    let port = closed_port();
    let token = "{token: audit-token-5f0c1e}";
    let cases = [
        (
            "userinfo",
            format!("{{server: \"http://admin:SECRETPASS-1@127.0.0.1:{port}\"}}"),
        ),
        (
            "proxy",
            format!(
                "{{server: \"http://127.0.0.1:{port}\", proxy-url: \"http://u:SECRETPASS-2@127.0.0.1:{port}\"}}"
            ),
        ),
    ];
    for (name, cluster) in cases {
        let kc = kubeconfig(dir.path(), name, &cluster, token);
        let out = audit_with(&kc, dir.path()).expect("kim audit finishes");
        let e = assert_unreadable(&out);
        assert!(
            !e.contains("SECRETPASS"),
            "{name}: a password is printed: {e}"
        );
    }
}

/// An exec credential plugin that fails: the error quotes the plugin's whole stdout and stderr
/// (`Output { status: …, stdout: "…", stderr: "…" }`), where a plugin may have written the
/// credential. kubectl prints neither stream of a failed plugin in its error (stderr goes to
/// the terminal).
#[test]
fn audit_errors_never_quote_an_exec_plugins_output() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!("{{server: \"http://127.0.0.1:{}\"}}", closed_port());
    let user = r#"{exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: ["-c", "echo '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET-EXEC-TOKEN\"}}'; exit 3"], interactiveMode: Never}}"#;
    let kc = kubeconfig(dir.path(), "exec", &cluster, user);
    let out = audit_with(&kc, dir.path()).expect("kim audit finishes");
    let e = assert_unreadable(&out);
    assert!(!e.contains("SECRET-EXEC-TOKEN"), "{e}");
}

/// `KUBECONFIG` is a list, and kubectl skips the files of it that do not exist; `kim audit`
/// ("reads the cluster as kubectl does") fails on the first missing one.
#[test]
fn audit_skips_missing_files_of_the_kubeconfig_list_as_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let url = fake_server(|_| {
        Some((
            200,
            json!({"metadata": {}, "items": [runtime("a", json!({"state": "Pending"}))]})
                .to_string(),
        ))
    });
    let kc = kubeconfig(
        dir.path(),
        "kc",
        &format!("{{server: \"{url}\"}}"),
        "{token: t}",
    );
    let list = format!("{}:{}", dir.path().join("missing").display(), kc.display());
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .arg("audit")
        .env_clear()
        .env("HOME", dir.path())
        .env("KUBECONFIG", &list)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
}

// ---------------------------------------------------------------------------------------------
// kim audit: API servers that misbehave
// ---------------------------------------------------------------------------------------------

/// A server that answers every page with the same `continue` token: `kim audit` asks for the
/// next page forever (a hang, and the report grows without bound). A token that repeats cannot
/// lead anywhere new; it should end the run with exit 2.
#[test]
fn audit_ends_when_the_server_repeats_its_continue_token() {
    let dir = tempfile::tempdir().unwrap();
    let url = fake_server(|_| {
        Some((
            200,
            json!({"metadata": {"continue": "same-token"},
                   "items": [runtime("a", json!({"state": "Bogus"}))]})
            .to_string(),
        ))
    });
    let kc = kubeconfig(
        dir.path(),
        "kc",
        &format!("{{server: \"{url}\"}}"),
        "{token: t}",
    );
    let out = audit_with(&kc, dir.path());
    let out = out.expect("kim audit still listing after 30 s: it never ends");
    assert_unreadable(&out);
}

/// A server that accepts the connection and never answers (a black-holing proxy or load
/// balancer): `kim audit` waits forever — kube-client 5's `Config` from a kubeconfig has no
/// read timeout, and `kim audit` sets none and has no `--request-timeout`.
#[test]
fn audit_gives_up_on_a_server_that_never_answers() {
    let dir = tempfile::tempdir().unwrap();
    let url = fake_server(|_| None);
    let kc = kubeconfig(
        dir.path(),
        "kc",
        &format!("{{server: \"{url}\"}}"),
        "{token: t}",
    );
    let out = kim_with_deadline(
        &[
            "audit",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--request-timeout",
            "2",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    let out = out.expect("kim audit still waiting after 60 s");
    let err = assert_unreadable(&out);
    assert!(err.contains("request timeout"), "{err}");
    // Without the flag a request is not waited for forever either.
    let help = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["audit", "--help"])
        .output()
        .unwrap();
    assert!(
        text(&help.stdout).contains("[default: 30]"),
        "{}",
        text(&help.stdout)
    );
}

/// A `Status` whose message is 1 MB is printed whole on the one error line (the cut to 200
/// characters applies only to bodies that are not a `Status`).
#[test]
fn audit_quotes_at_most_a_bounded_part_of_the_servers_message() {
    let dir = tempfile::tempdir().unwrap();
    let url = fake_server(|_| {
        Some((
            403,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": "x".repeat(1 << 20), "reason": "Forbidden", "code": 403})
            .to_string(),
        ))
    });
    let kc = kubeconfig(
        dir.path(),
        "kc",
        &format!("{{server: \"{url}\"}}"),
        "{token: t}",
    );
    let out = audit_with(&kc, dir.path()).expect("kim audit finishes");
    let e = assert_unreadable(&out);
    assert!(e.len() < 4096, "error line of {} bytes", e.len());
}

/// A stored name with a bidi override (U+202E) or a zero-width character goes into the table
/// as it is (`one_line` escapes only `Cc` control characters): the row reads differently on a
/// terminal than what is stored (Trojan-Source style).
#[test]
fn audit_table_escapes_invisible_and_bidi_characters() {
    let dir = tempfile::tempdir().unwrap();
    let url = fake_server(|_| {
        Some((
            200,
            json!({"metadata": {}, "items": [
                runtime("rt-\u{202e}1vne", json!({"state": "Bogus"})),
                runtime("rt\u{200b}-zw", json!({"state": "Bogus\u{2066}"})),
            ]})
            .to_string(),
        ))
    });
    let kc = kubeconfig(
        dir.path(),
        "kc",
        &format!("{{server: \"{url}\"}}"),
        "{token: t}",
    );
    let out = audit_with(&kc, dir.path()).expect("kim audit finishes");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for c in ['\u{202e}', '\u{200b}', '\u{2066}'] {
        assert!(!table.contains(c), "{:?} printed raw: {table}", c);
    }
}

// ---------------------------------------------------------------------------------------------
// Admission: ratcheting, warnings, retired vocabulary
// ---------------------------------------------------------------------------------------------

fn rt(status: Value, deleting: bool) -> Value {
    let mut o = json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": "r1", "namespace": "kcp-system", "generation": 1},
        "spec": {"shoot": {"name": "r1", "purpose": "production", "platformRegion": "cf-eu10",
                 "region": "eu-central-1", "secretBindingName": "aws-credentials",
                 "networking": {"pods": "100.64.0.0/12", "nodes": "10.250.0.0/16", "services": "100.104.0.0/13"},
                 "provider": {"type": "aws", "workers": [{"name": "worker-0", "machine": {"type": "m6i.large"}, "minimum": 1, "maximum": 3}]}},
                 "security": {"administrators": ["admin@example.com"], "networking": {"filter": {"egress": {"enabled": false}}}}},
        "status": status});
    if deleting {
        o["metadata"]["deletionTimestamp"] = json!("2026-11-02T00:00:00Z");
    }
    o
}

fn cond(t: &str, s: &str, r: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": "m",
           "lastTransitionTime": "2026-11-01T10:00:00Z", "observedGeneration": 1})
}

fn review(old: &Value, new: &Value) -> Value {
    let gvr = json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"});
    let gvk = json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"});
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "b7e1c0de-0000-4000-8000-000000000001", "kind": gvk, "resource": gvr,
        "subResource": "status", "requestKind": gvk, "requestResource": gvr, "requestSubResource": "status",
        "name": "r1", "namespace": "kcp-system", "operation": "UPDATE",
        "userInfo": {"username": KIM_SA, "groups": ["system:serviceaccounts"]},
        "object": new, "oldObject": old, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}}})
}

fn answer(hook: Hook, policy: &Policy, review: &Value) -> Value {
    let now = chrono::DateTime::parse_from_rfc3339("2026-11-02T12:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let o = admission::review(hook, policy, &serde_json::to_vec(review).unwrap(), now);
    let v: Value = serde_json::from_slice(&o.body).unwrap();
    v["response"].clone()
}

/// The chain as kube-apiserver runs it: `/mutate`, its patch applied, then `/validate`.
fn chain(policy: &Policy, old: &Value, new: &Value) -> Value {
    let m = answer(Hook::Mutate, policy, &review(old, new));
    let mut patched = new.clone();
    if let Some(p) = m["patch"].as_str() {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    answer(Hook::Validate, policy, &review(old, &patched))
}

/// Spec §7.7: every ratcheted violation is a warning of ONE line. The messages of a status, a
/// condition entry or `provisioningCompleted` of the wrong type quote a string value raw
/// (`show`), so a stored `"evil\nline"` becomes a two-line warning (the other messages quote
/// with `{:?}`).
#[test]
fn ratcheted_warnings_are_one_line_whatever_the_stored_value() {
    let policy = Policy::builtin();
    for status in [
        json!("evil\nline"),
        json!({"state": "Pending", "conditions": ["junk\nline"]}),
        json!({"state": "Pending", "provisioningCompleted": "yes\nno"}),
    ] {
        let old = rt(status, false);
        let r = answer(Hook::Validate, &policy, &review(&old, &old));
        assert_eq!(r["allowed"], true, "{r}");
        for w in r["warnings"].as_array().unwrap() {
            let w = w.as_str().unwrap();
            assert!(
                !w.contains(['\n', '\r']),
                "a warning of several lines: {w:?}"
            );
        }
    }
}

/// "A write that leaves the status as it was is never denied" — but through the API server's
/// chain the mutating webhook first defaults the unchanged object (here `observedGeneration`,
/// which every 2024 Runtime lacks), the validating webhook then sees a change and judges
/// `provisioningCompleted`'s type with no ratcheting: the no-op write is denied (400).
#[test]
fn a_no_op_write_through_both_webhooks_is_never_denied() {
    let policy = Policy::builtin();
    let mut c = cond("Provisioned", "Unknown", "Pending");
    c.as_object_mut().unwrap().remove("observedGeneration");
    let old = rt(
        json!({"state": "Pending", "provisioningCompleted": "true", "conditions": [c]}),
        false,
    );
    // Without defaulting the write is allowed (the whole status is ratcheted) …
    let v = answer(Hook::Validate, &policy, &review(&old, &old));
    assert_eq!(v["allowed"], true, "{v}");
    // … and through the chain the same write must be too.
    let v = chain(&policy, &old, &old);
    assert_eq!(v["allowed"], true, "{v}");
}

/// KIM's retired state `Deleting` is the `Terminating` of the first proposal (status model §1: "Deleting
/// → Terminating"). A Runtime stored in it reads as ∅ for the transition table, so a write takes
/// it back to `Pending` (∅ → Pending), then to `Ready`, while it is being deleted — "deletion is
/// final" does not hold for it, and no warning says the retired state was left.
#[test]
fn a_runtime_stored_as_deleting_does_not_go_back_to_pending() {
    let policy = Policy::builtin()
        .with_switch(CompatSwitch::TerminatingConditionType)
        .with_switch(CompatSwitch::KimHistory);
    let old = rt(
        json!({"state": "Deleting", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        true,
    );
    let new = rt(
        json!({"state": "Pending", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        true,
    );
    let v = answer(Hook::Validate, &policy, &review(&old, &new));
    assert_eq!(
        v["allowed"], false,
        "Deleting -> Pending while deleting: {v}"
    );
}

/// README: `kimHistory` "accepts a retired type or reason on any pair whose two names KIM
/// declared at the same time, with any status". For a retired reason whose pair is also a
/// seed row of the table (Provisioned/ProcessingCompleted: True; Configured/ConfigurationStarted:
/// Unknown) the table's statuses stay the only ones: `reason-status` denies.
#[test]
fn kim_history_accepts_any_status_of_a_retired_reason() {
    let policy = Policy::builtin().with_switch(CompatSwitch::KimHistory);
    let old = rt(
        json!({"state": "Pending", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        false,
    );
    for (t, s, r) in [
        ("Provisioned", "False", "ProcessingCompleted"),
        ("Configured", "True", "ConfigurationStarted"),
    ] {
        let mut c = cond(t, s, r);
        c["lastTransitionTime"] = json!("2026-11-02T11:00:00Z");
        let conds = if t == "Provisioned" {
            vec![c]
        } else {
            vec![cond("Provisioned", "Unknown", "Pending"), c]
        };
        let new = rt(json!({"state": "Pending", "conditions": conds}), false);
        let v = answer(Hook::Validate, &policy, &review(&old, &new));
        assert_eq!(v["allowed"], true, "{t}/{r}/{s} under kimHistory: {v}");
    }
}

// ---------------------------------------------------------------------------------------------
// Schema check of kim check / kim review
// ---------------------------------------------------------------------------------------------

/// kube-openapi accepts a JSON number for `type: integer` only when it is an integer of at
/// most 2^53 − 1 (`swag.IsFloat64AJSONInteger`); `1e16` and `99999999999999999999` decode as
/// float64 beyond that and are refused (422 "must be of type integer"). `kim check` accepts
/// them (false negative of the schema check).
#[test]
fn schema_check_refuses_integers_beyond_2_pow_53_as_the_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let old = rt(
        json!({"state": "Pending", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        false,
    );
    let old_path = dir.path().join("old.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    for lit in ["1e16", "99999999999999999999"] {
        let new = old.to_string().replace(
            "\"observedGeneration\":1",
            &format!("\"observedGeneration\":{lit}"),
        );
        assert!(new.contains(lit));
        let new_path = dir.path().join("new.json");
        std::fs::write(&new_path, new).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kim"))
            .args(["check", "--old"])
            .arg(&old_path)
            .arg("--new")
            .arg(&new_path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "observedGeneration {lit}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// kube-apiserver validates the object being written, never `oldObject`: a status write on a
/// Runtime stored under an older CRD (here KIM's retired state `Processing`) that repairs it
/// reaches the webhooks. `kim review` refuses the review with exit 2 because of `oldObject`
/// alone — exactly the stored Runtimes ratcheting is for.
#[test]
fn review_schema_check_does_not_judge_the_old_object() {
    let dir = tempfile::tempdir().unwrap();
    let old = rt(
        json!({"state": "Processing", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        false,
    );
    let new = rt(
        json!({"state": "Pending", "conditions": [cond("Provisioned", "Unknown", "Pending")]}),
        false,
    );
    let path = dir.path().join("review.json");
    std::fs::write(&path, review(&old, &new).to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .arg("review")
        .arg(&path)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
}
