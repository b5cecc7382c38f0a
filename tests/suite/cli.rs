//! The `kim` binary's offline commands, run as a user would: real files, exit codes, output.

use testenv::model;

use model::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn kim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(args)
        .output()
        .expect("run kim")
}

fn kim_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_clean_error(o: &Output) {
    let e = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout: {} stderr: {e}",
        stdout(o)
    );
    assert!(e.starts_with("kim: "), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(!e.contains("panicked") && !e.contains("backtrace"), "{e}");
}

#[test]
fn review_answers_every_public_capture() {
    let dir = shared_dir().join("samples/admission");
    for (name, bytes) in sample_reviews() {
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        let uid = doc.get("request").unwrap_or(&doc)["uid"]
            .as_str()
            .unwrap()
            .to_string();
        let path = dir.join(&name);
        for hook in ["validate", "mutate"] {
            let o = kim(&["review", path.to_str().unwrap(), "--hook", hook]);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
            let r = response_of(stdout(&o).as_bytes(), &uid);
            assert_eq!(r["allowed"], true);
            let last = r["warnings"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .as_str()
                .unwrap()
                .to_string();
            assert!(
                last.contains("not a Runtime status UPDATE"),
                "{name}: {last}"
            );
        }
    }
}

#[test]
fn review_of_runtime_status_writes_sets_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let seq = lifecycle(sample_runtimes().remove(0).1);
    let ok = status_review("c-1", &seq[4], &seq[5], RECONCILER, &[], false);
    let bad = status_review(
        "c-2",
        &seq[9],
        &seq[9].write("Ready", &[]),
        RECONCILER,
        &[],
        false,
    );
    let ok_path = dir.path().join("ok.json");
    let bad_path = dir.path().join("bad.yaml");
    std::fs::write(&ok_path, serde_json::to_vec(&ok).unwrap()).unwrap();
    // YAML input is accepted too (JSON is YAML; write it in block style via serde-saphyr).
    std::fs::write(&bad_path, serde_saphyr::to_string(&bad).unwrap()).unwrap();

    let o = kim(&["review", ok_path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(response_of(stdout(&o).as_bytes(), "c-1")["allowed"], true);

    let o = kim(&["review", bad_path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = response_of(stdout(&o).as_bytes(), "c-2");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("Terminating -> Ready is not allowed")
    );

    // stdin
    let o = kim_stdin(&["review", "-"], &serde_json::to_vec(&ok).unwrap());
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn unreadable_input_is_one_clear_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let broken_json = dir.path().join("broken.json");
    std::fs::write(&broken_json, "{\"request\": {\"uid\": \n").unwrap();
    let broken_yaml = dir.path().join("broken.yaml");
    std::fs::write(&broken_yaml, "metadata:\n  name: x\n   bad: [\n").unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").unwrap();

    let o = kim(&["review", "/nonexistent/review.json"]);
    assert_clean_error(&o);
    assert!(stderr(&o).contains("/nonexistent/review.json"));

    let o = kim(&["review", broken_json.to_str().unwrap()]);
    assert_clean_error(&o);
    assert!(stderr(&o).contains("line"), "{}", stderr(&o));

    let o = kim(&[
        "check",
        "--old",
        "none",
        "--new",
        broken_yaml.to_str().unwrap(),
    ]);
    assert_clean_error(&o);
    assert!(
        stderr(&o).contains("broken.yaml") && stderr(&o).contains("line"),
        "{}",
        stderr(&o)
    );

    let o = kim(&["check", "--old", "none", "--new", empty.to_str().unwrap()]);
    assert_clean_error(&o);

    let bad_policy = dir.path().join("policy.yaml");
    std::fs::write(&bad_policy, "transitions:\n  - {from: Ready, to: Gone}\n").unwrap();
    let o = kim(&["policy", "--policy-file", bad_policy.to_str().unwrap()]);
    assert_clean_error(&o);
    assert!(stderr(&o).contains("transitions[0].to"), "{}", stderr(&o));
}

#[test]
fn check_reports_verdicts_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let seq = lifecycle(sample_runtimes().remove(3).1);
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_saphyr::to_string(v).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let fresh = write("fresh.yaml", &seq[0].obj);
    let first = write("first.yaml", &seq[1].obj);
    let term = write("term.yaml", &seq[9].obj);
    let back = write("back.yaml", &seq[9].write("Ready", &[]).obj);

    let o = kim(&["check", "--old", "none", "--new", &first]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("ALLOWED: none -> Pending"),
        "{}",
        stdout(&o)
    );
    let o = kim(&[
        "check", "--old", &fresh, "--new", &first, "--user", RECONCILER,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    let o = kim(&["check", "--old", &term, "--new", &back]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.starts_with("DENIED (403 Forbidden): Terminating -> Ready (deleting)"),
        "{text}"
    );
    assert!(
        text.contains("[transition] status.state: transition Terminating -> Ready is not allowed"),
        "{text}"
    );

    let o = kim(&[
        "check", "--old", &term, "--new", &back, "--output", "json", "--user", "bob", "--group",
        "devs",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["allowed"], false);
    let rules: Vec<_> = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rule"].clone())
        .collect();
    assert_eq!(rules, vec![json!("writer"), json!("transition")]);

    // A client that leaves out lastTransitionTime: allowed, with the defaulting patch shown.
    let partial = seq[1].with(|o| {
        o["status"]["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("lastTransitionTime");
    });
    let partial = write("partial.yaml", &partial.obj);
    let o = kim(&[
        "check",
        "--old",
        &fresh,
        "--new",
        &partial,
        "--now",
        "2026-11-29T12:00:00Z",
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["patch"],
        json!([{"op": "add", "path": "/status/conditions/0/lastTransitionTime", "value": "2026-11-29T12:00:00Z"}])
    );
}

#[test]
fn policy_prints_the_table_and_the_readme_carries_it() {
    let o = kim(&["policy"]);
    assert_eq!(o.status.code(), Some(0));
    let md = stdout(&o);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let begin = "<!-- BEGIN kim policy -->\n";
    let end = "<!-- END kim policy -->";
    let start = readme
        .find(begin)
        .expect("README has the generated policy section")
        + begin.len();
    let stop = readme[start..].find(end).unwrap() + start;
    assert_eq!(
        &readme[start..stop],
        md,
        "README's status model section is stale: regenerate it with `cargo run -q -- policy` between the markers"
    );

    let o = kim(&["policy", "--format", "dot"]);
    assert!(stdout(&o).starts_with("digraph"));
    let o = kim(&[
        "policy",
        "--format",
        "json",
        "--compat",
        "terminatingConditionType",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["switches"], json!(["terminatingConditionType"]));
    let o = kim(&["policy", "--compat", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn crd_command_prints_the_committed_crd() {
    let o = kim(&["crd"]);
    assert_eq!(o.status.code(), Some(0));
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml"))
            .unwrap();
    assert_eq!(stdout(&o), committed);
}

/// The README's "why would this write be denied?" example, run as written: its YAML block is
/// `examples/check/old.yaml`, `new.yaml` differs only in `state`, and the printed verdict is
/// the README's comment lines. Without `--user` the writer rule is skipped, and said so.
#[test]
fn the_readme_check_example_runs_as_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let old = std::fs::read_to_string(format!("{root}/examples/check/old.yaml")).unwrap();
    let new = std::fs::read_to_string(format!("{root}/examples/check/new.yaml")).unwrap();
    assert!(
        readme.contains(&format!("```yaml\n{old}```")),
        "README's example YAML differs from examples/check/old.yaml"
    );
    assert_eq!(
        new,
        old.replacen("state: Terminating", "state: Ready", 1),
        "examples/check/new.yaml is old.yaml with state: Ready"
    );

    let cmd = "cargo run -q -- check --old examples/check/old.yaml --new examples/check/new.yaml --user system:serviceaccount:kim-system:kim-controller\n";
    let at = readme.find(cmd).expect("README shows the check command") + cmd.len();
    let documented: Vec<&str> = readme[at..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .collect();
    assert!(documented.len() >= 2, "README shows the verdict lines");

    let args = |user: bool| {
        let mut a = vec![
            "check".to_string(),
            "--old".into(),
            format!("{root}/examples/check/old.yaml"),
            "--new".into(),
            format!("{root}/examples/check/new.yaml"),
        ];
        if user {
            a.extend([
                "--user".into(),
                "system:serviceaccount:kim-system:kim-controller".into(),
            ]);
        }
        a
    };
    let a = args(true);
    let o = kim(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1), "denied: {}", stderr(&o));
    let out = stdout(&o);
    let printed: Vec<&str> = out.lines().collect();
    assert_eq!(printed, documented, "README's verdict lines are stale");

    let a = args(false);
    let o = kim(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("note: writer not checked (no --user)"),
        "{}",
        stdout(&o)
    );
}
