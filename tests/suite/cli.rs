//! The `kim` binary's offline commands, run as a user would: real files, exit codes, output.

use kim::testing::model;

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
    let dir = samples_dir().join("admission");
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

/// An endless input (`/dev/zero`, a device given by mistake) is refused at a limit instead of
/// read until memory runs out: 7 MiB (the webhook's body limit) for `review` and `check`, 1 MiB
/// (a ConfigMap's) for a policy file. Inputs just over the limit are refused the same way.
#[test]
fn endless_or_oversized_input_is_refused_at_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let big_policy = dir.path().join("policy.yaml");
    std::fs::write(&big_policy, format!("# {}\n", "x".repeat(1024 * 1024))).unwrap();
    for (args, says) in [
        (
            vec!["policy", "--policy-file", "/dev/zero"],
            "larger than 1 MiB",
        ),
        (
            vec!["policy", "--policy-file", big_policy.to_str().unwrap()],
            "larger than 1 MiB",
        ),
        (vec!["review", "/dev/zero"], "larger than 7 MiB"),
        (
            vec!["check", "--old", "none", "--new", "/dev/zero"],
            "larger than 7 MiB",
        ),
    ] {
        let o = kim(&args);
        assert_clean_error(&o);
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let o = kim_stdin(&["review", "-"], &vec![b' '; 7 * 1024 * 1024 + 1]);
    assert_clean_error(&o);
    assert!(
        stderr(&o).contains("stdin: larger than 7 MiB"),
        "{}",
        stderr(&o)
    );
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
        "README's status model section is stale: regenerate it with scripts/regen-readme-policy.sh"
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

/// A command whose output cannot be written fails as an unreadable input does: exit 2 and one
/// line on stderr naming the cause, for stdout on a full device (`kim policy > /dev/full`), on
/// a pipe whose reader is gone (`kim policy | true`: Rust ignores SIGPIPE, so the write fails
/// with EPIPE) and opened read-only (`kim policy 1< file`: EBADF). Exit 0 here would tell a script that a truncated or missing policy,
/// CRD or verdict was written.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    let review = samples_dir().join("admission").join(&sample_reviews()[0].0);
    let runtime = samples_dir().join("runtimes").join(&sample_runtimes()[0].0);
    let (review, runtime) = (review.to_str().unwrap(), runtime.to_str().unwrap());
    let commands: [&[&str]; 7] = [
        &["policy"],
        &["policy", "--format", "json"],
        &["policy", "--format", "vap"],
        &["policy", "--format", "map"],
        &["crd"],
        &["review", review],
        &["check", "--old", "none", "--new", runtime],
    ];
    for args in commands {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let (reader, closed) = std::io::pipe().unwrap();
        drop(reader);
        // Read-only: std's stdout would take the EBADF of every write for success.
        let read_only = std::fs::File::open("/dev/null").expect("/dev/null");
        for (stdout, cause) in [
            (Stdio::from(full), "No space left on device"),
            (Stdio::from(closed), "Broken pipe"),
            (Stdio::from(read_only), "Bad file descriptor"),
        ] {
            let o = Command::new(env!("CARGO_BIN_EXE_kim"))
                .args(args)
                .stdout(stdout)
                .output()
                .expect("run kim");
            assert_clean_error(&o);
            let e = stderr(&o);
            assert!(
                e.starts_with("kim: cannot write the output: ") && e.contains(cause),
                "{args:?}: {e}"
            );
        }
    }
}

/// The shipped ValidatingAdmissionPolicy (`manifests/overlays/policy`, linked into the chart)
/// is what its kustomization says generates it; `--runtime-namespace` (which bound the policy
/// to one namespace in earlier kims) is refused saying why, with any format.
#[test]
fn shipped_validating_admission_policy_is_current() {
    let o = kim(&["policy", "--format", "vap"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let root = env!("CARGO_MANIFEST_DIR");
    let committed = std::fs::read_to_string(format!(
        "{root}/manifests/overlays/policy/validating-admission-policy.yaml"
    ))
    .unwrap();
    assert!(
        stdout(&o) == committed,
        "manifests/overlays/policy/validating-admission-policy.yaml is stale; regenerate with: \
         cargo run -q -- policy --format vap > manifests/overlays/policy/validating-admission-policy.yaml"
    );
    let chart = std::fs::read_to_string(format!(
        "{root}/charts/kim/files/validating-admission-policy.yaml"
    ))
    .unwrap();
    assert_eq!(chart, committed, "the chart's copy is the overlay's file");
    for args in [
        &[
            "policy",
            "--format",
            "vap",
            "--runtime-namespace",
            "kcp-system",
        ][..],
        &["policy", "--runtime-namespace", "kcp-system"][..],
    ] {
        let o = kim(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_clean_error(&o);
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
        assert_eq!(
            stderr(&o),
            "kim: --runtime-namespace is no longer accepted: the generated bindings judge Runtime status writes in every namespace, as kim's webhook configurations do (the status model does not depend on the namespace); drop the flag\n"
        );
    }
}

/// A policy file whose types the CRD could never admit, or whose reasons make a CEL
/// expression longer than kube-apiserver accepts, is refused with one line.
#[test]
fn policy_files_the_generated_policy_cannot_carry_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    for t in ["it's/Foo", "//Foo", "Example.com/Foo", "a\rb/Foo"] {
        std::fs::write(
            &file,
            format!("kind: StatusPolicy\nconditionTypes:\n  - type: \"{t}\"\n    reasons:\n      - {{reason: Ok, statuses: [\"True\"]}}\n"),
        )
        .unwrap();
        let o = kim(&[
            "policy",
            "--format",
            "vap",
            "--policy-file",
            file.to_str().unwrap(),
        ]);
        assert_clean_error(&o);
    }
    let reasons: String = (0..50)
        .map(|i| {
            format!(
                "      - {{reason: R{i}{}, statuses: [\"True\"]}}\n",
                "x".repeat(1000)
            )
        })
        .collect();
    std::fs::write(
        &file,
        format!("kind: StatusPolicy\nconditionTypes:\n  - type: Backup\n    reasons:\n{reasons}"),
    )
    .unwrap();
    let o = kim(&[
        "policy",
        "--format",
        "vap",
        "--policy-file",
        file.to_str().unwrap(),
    ]);
    assert_clean_error(&o);
    assert!(stderr(&o).contains("code points"), "{}", stderr(&o));
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

/// `kim check` refuses, like the API server (422 before the validating webhook), a Runtime its
/// CRD schema does not admit: one `kim: --new: invalid Runtime: PATH: …` line per field error,
/// naming what the schema expects, exit 2 and nothing on stdout, in both output formats. The
/// written object is checked after the defaulting patch (the API server checks after the
/// mutating webhook), the stored one (`--old`) as it is.
#[test]
fn check_refuses_what_the_api_server_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let seq = lifecycle(sample_runtimes().remove(2).1);
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_saphyr::to_string(v).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let old = write("old.yaml", &seq[1].obj);
    let new_rt = seq[2].clone();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "type",
            Box::new(|o| o["spec"]["shoot"]["purpose"] = json!(true)),
            "spec.shoot.purpose: Invalid value: true: must be of type string",
        ),
        (
            "int-or-string",
            Box::new(|o| o["spec"]["shoot"]["provider"]["workers"][0]["maxSurge"] = json!(1.5)),
            "spec.shoot.provider.workers[0].maxSurge: Invalid value: 1.5: must be of type integer or string",
        ),
        (
            "enum",
            Box::new(|o| o["spec"]["shoot"]["provider"]["type"] = json!("digitalocean")),
            "spec.shoot.provider.type: Unsupported value: \"digitalocean\": supported values: \"aws\"",
        ),
        (
            "state enum",
            Box::new(|o| o["status"]["state"] = json!("Processing")),
            "status.state: Unsupported value: \"Processing\"",
        ),
        (
            "required",
            Box::new(|o| {
                o["spec"]["shoot"].as_object_mut().unwrap().remove("region");
            }),
            "spec.shoot.region: Required value",
        ),
        (
            "pattern",
            Box::new(|o| o["status"]["conditions"][0]["reason"] = json!("not a reason")),
            "status.conditions[0].reason: Invalid value: \"not a reason\": must match '^[A-Za-z]",
        ),
        (
            "maxLength",
            Box::new(|o| o["status"]["conditions"][0]["message"] = json!("x".repeat(32769))),
            "status.conditions[0].message: Too long: may not be longer than 32768 characters",
        ),
        (
            "minimum",
            Box::new(|o| o["status"]["conditions"][0]["observedGeneration"] = json!(-1)),
            "status.conditions[0].observedGeneration: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "format",
            Box::new(|o| {
                o["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] =
                    json!([{ "jwks": "not base64!" }])
            }),
            "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[0].jwks: Invalid value: \"not base64!\": must be of format byte",
        ),
    ];
    for (kind, edit, expected) in &cases {
        let new = write(&format!("{kind}.yaml"), &new_rt.with(|o| edit(o)).obj);
        for output in ["text", "json"] {
            let o = kim(&["check", "--old", &old, "--new", &new, "--output", output]);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{kind}: {e}{}", stdout(&o));
            assert_eq!(stdout(&o), "", "{kind}: no verdict");
            assert!(
                e.lines()
                    .any(|l| l.starts_with(&format!("kim: --new: invalid Runtime: {expected}"))),
                "{kind}: expected {expected:?} in:\n{e}"
            );
            assert!(e.lines().all(|l| l.starts_with("kim: ")), "{kind}: {e}");
        }
    }

    // Several errors: one line each.
    let both = write(
        "both.yaml",
        &new_rt
            .with(|o| {
                o["spec"]["shoot"]["purpose"] = json!(7);
                o["spec"]["security"]["administrators"] = json!("me");
            })
            .obj,
    );
    let o = kim(&["check", "--old", &old, "--new", &both]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 2, "{}", stderr(&o));

    // The stored object is not checked again (the API server does not either): a date-time
    // format error there leaves the verdict to the model.
    let bad_old = write(
        "bad-old.yaml",
        &seq[1]
            .with(|o| o["status"]["conditions"][0]["lastTransitionTime"] = json!("yesterday"))
            .obj,
    );
    let new = write("new.yaml", &new_rt.obj);
    let o = kim(&["check", "--old", &bad_old, "--new", &new]);
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stderr(&o).contains("invalid Runtime"), "{}", stderr(&o));

    // A missing lastTransitionTime (required by the schema) is what the mutating webhook
    // defaults before the API server checks the schema: allowed, with the patch.
    let partial = write(
        "partial.yaml",
        &new_rt
            .with(|o| {
                o["status"]["conditions"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("lastTransitionTime");
            })
            .obj,
    );
    let o = kim(&["check", "--old", &old, "--new", &partial]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("lastTransitionTime"), "{}", stdout(&o));

    // Unknown fields are dropped by the API server, not refused: a warning, the verdict stands.
    let unknown = write(
        "unknown.yaml",
        &new_rt.with(|o| o["spec"]["shoot"]["bogus"] = json!(1)).obj,
    );
    let o = kim(&["check", "--old", &old, "--new", &unknown]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim_end(),
        "kim: --new: warning: unknown field spec.shoot.bogus (the API server drops it)"
    );
    assert!(stdout(&o).starts_with("ALLOWED"), "{}", stdout(&o));
}

/// Every sample Runtime, and every status of its lifecycle, passes the schema check.
#[test]
fn check_accepts_every_sample_runtime() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sample) in sample_runtimes() {
        let seq = lifecycle(sample);
        let paths: Vec<String> = seq
            .iter()
            .enumerate()
            .map(|(i, rt)| {
                let p = dir.path().join(format!("{i}-{name}"));
                std::fs::write(&p, serde_saphyr::to_string(&rt.obj).unwrap()).unwrap();
                p.to_str().unwrap().to_string()
            })
            .collect();
        let o = kim(&["check", "--old", "none", "--new", &paths[0]]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{name}");
        for pair in paths.windows(2) {
            let o = kim(&["check", "--old", &pair[0], "--new", &pair[1]]);
            assert_eq!(o.status.code(), Some(0), "{name} {pair:?}: {}", stderr(&o));
            assert_eq!(stderr(&o), "", "{name}");
        }
    }
}

/// `kim review` checks the Runtimes of the review (`request.object`, `request.oldObject`) the
/// same way: validate reviews as they are (the API server checked them before calling the
/// validating webhook), mutate reviews with the answered patch applied (it checks after).
#[test]
fn review_refuses_runtimes_the_api_server_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let seq = lifecycle(sample_runtimes().remove(0).1);
    let run = |name: &str, review: &Value, hook: &str| -> Output {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_vec(review).unwrap()).unwrap();
        kim(&["review", p.to_str().unwrap(), "--hook", hook])
    };

    let bad_new = seq[5].with(|o| o["spec"]["shoot"]["purpose"] = json!(true));
    let review = status_review("s-1", &seq[4], &bad_new, RECONCILER, &[], false);
    for hook in ["validate", "mutate"] {
        let o = run("bad-new.json", &review, hook);
        assert_eq!(o.status.code(), Some(2), "{hook}: {}", stdout(&o));
        assert_eq!(stdout(&o), "", "{hook}: no answer");
        assert_eq!(
            stderr(&o).trim_end(),
            "kim: request.object: invalid Runtime: spec.shoot.purpose: Invalid value: true: must be of type string"
        );
    }

    // The stored object (oldObject) is not checked again, as by the API server: the answer
    // is the webhook's.
    let bad_old = seq[4].with(|o| o["status"]["conditions"][0]["status"] = json!("Maybe"));
    let review = status_review("s-2", &bad_old, &seq[5], RECONCILER, &[], false);
    let o = run("bad-old.json", &review, "validate");
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"uid\": \"s-2\""), "{}", stdout(&o));

    // No lastTransitionTime: the mutating webhook defaults it, so the mutate review passes;
    // a validate review cannot carry it (the API server refused it before).
    let partial = seq[5].with(|o| {
        o["status"]["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("lastTransitionTime");
    });
    let review = status_review("s-3", &seq[4], &partial, RECONCILER, &[], false);
    let o = run("partial.json", &review, "mutate");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = response_of(stdout(&o).as_bytes(), "s-3");
    assert!(patch_of(&r).is_some(), "{r}");
    let o = run("partial.json", &review, "validate");
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim_end(),
        "kim: request.object: invalid Runtime: status.conditions[0].lastTransitionTime: Required value"
    );
}

/// The README's schema-check example lines are what `kim check` prints for those two errors,
/// and `--help` of both commands says what is and is not checked.
#[test]
fn the_readme_schema_check_example_is_current() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = &readme[readme
        .find("### Schema check")
        .expect("README has the schema-check section")..];
    let block = section
        .split("```\n")
        .nth(1)
        .expect("the section shows the error lines");
    let documented: Vec<&str> = block.lines().collect();

    let dir = tempfile::tempdir().unwrap();
    let seq = lifecycle(sample_runtimes().remove(2).1);
    let new = seq[2].with(|o| {
        o["spec"]["shoot"]["purpose"] = json!(true);
        o["status"]["conditions"][0]["reason"] = json!("not a reason");
    });
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_saphyr::to_string(v).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (old, new) = (write("old.yaml", &seq[1].obj), write("new.yaml", &new.obj));
    let o = kim(&["check", "--old", &old, "--new", &new]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().collect::<Vec<_>>(), documented);

    for command in ["check", "review"] {
        let help = stdout(&kim(&[command, "--help"]));
        for words in ["Schema check", "exits 2", "CEL rules", "ratcheting"] {
            assert!(help.contains(words), "kim {command} --help lacks {words:?}");
        }
    }
}

#[test]
fn policy_as_vap_follows_the_policy_flags() {
    let docs = |o: &Output| -> Vec<Value> {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = stdout(o);
        assert!(
            text.starts_with("# Generated by `kim policy --format vap`"),
            "{text}"
        );
        assert!(text.contains("# What this policy does NOT do:"), "{text}");
        serde_saphyr::from_multiple::<Value>(&text)
            .expect("the output is YAML")
            .into_iter()
            .filter(|d| !d.is_null())
            .collect()
    };
    let builtin = docs(&kim(&["policy", "--format", "vap"]));
    let kinds: Vec<&str> = builtin
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    assert_eq!(builtin[1]["spec"]["validationActions"], json!(["Deny"]));
    let rule = builtin[0]["spec"]["matchConstraints"]["resourceRules"][0].clone();
    assert_eq!(rule["resources"], json!(["runtimes/status"]));
    assert_eq!(rule["operations"], json!(["UPDATE"]));

    let o = kim(&[
        "policy",
        "--format",
        "vap",
        "--compat",
        "terminatingConditionType",
        "--rule-action",
        "writer=warn",
        "--allowed-writers",
        "alice,group:ops",
    ]);
    let switched = docs(&o);
    assert_eq!(switched.len(), 4, "a deny pair and a warn pair");
    assert_eq!(
        switched[3]["spec"]["validationActions"],
        json!(["Warn", "Audit"])
    );
    let warn = switched[2]["spec"]["validations"].as_array().unwrap();
    assert_eq!(warn.len(), 1);
    let writer = warn[0]["expression"].as_str().unwrap();
    assert!(
        writer.contains("'alice'") && writer.contains("'ops'"),
        "{writer}"
    );
    assert!(
        warn[0]["messageExpression"]
            .as_str()
            .unwrap()
            .starts_with("'[writer] '")
    );
    let deny = serde_json::to_string(&switched[0]["spec"]["validations"]).unwrap();
    assert!(
        !deny.contains("[writer]"),
        "the writer rule is only in the warn policy"
    );
    assert!(
        deny.contains("'Terminating': ['KubernetesErr']"),
        "the switch's type is known: {deny}"
    );
    let builtin_deny = serde_json::to_string(&builtin[0]["spec"]["validations"]).unwrap();
    assert!(!builtin_deny.contains("'Terminating': ['KubernetesErr']"));
}

#[test]
fn policy_as_vap_carries_the_policy_files_types() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "kind: StatusPolicy\nconditionTypes:\n  - type: BackupConfigured\n    reasons:\n      - {reason: BackupReady, statuses: [\"True\"], message: Backups configured}\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let o = kim(&["policy", "--format", "vap", "--policy-file", file]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The expressions as parsed back, not as folded into YAML lines.
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout(&o)).expect("YAML");
    let text = serde_json::to_string(&docs).unwrap();
    assert!(
        text.contains("'BackupConfigured': ['BackupReady']"),
        "{text}"
    );
    assert!(
        text.contains("'BackupConfigured/BackupReady': ['True']"),
        "{text}"
    );
    assert!(!stdout(&kim(&["policy", "--format", "vap"])).contains("BackupConfigured"));
}
