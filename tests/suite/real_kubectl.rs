//! kubectl 1.35 (the real binary) against a real kube-apiserver with kim installed as shipped
//! (`manifests/crd.yaml`, then `manifests/base` with its webhooks pointed at a real `kim
//! webhook`: [`crate::support::real::Stack`]), every answer — tables, the CRD's OpenAPI v3,
//! watch, denials — the real apiserver's.
//!
//! No controller runs: the admin (`system:masters`, an allowed writer) writes the statuses and
//! the Event kim's controller would write. Every command and its output is printed.

use crate::support::real::{NS, Stack, repo};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "aws-minimal";
const SAMPLE: &str = "samples/runtimes/aws-minimal.yaml";

/// The webhook's denial of `Terminating` on a Ready Runtime that is not being deleted, as
/// kubectl prints it (one line on stderr).
const TERMINATING_DENIED: &str = "Error from server (Forbidden): admission webhook \"runtime-status.validate.kim.kyma-project.io\" denied the request: [transition-needs-deletion] status.state: transition Ready -> Terminating is allowed only while the Runtime is being deleted (metadata.deletionTimestamp is not set); [terminating-requires-deprovisioned] status.state: Terminating requires a Deprovisioned condition; found none";

/// The apiserver's own denial of a state outside the CRD's enum (KIM's state of June 2024):
/// the schema, before any webhook.
const ENUM_DENIED: &str = "The Runtime \"aws-minimal\" is invalid: status.state: Unsupported value: \"Deleting\": supported values: \"Pending\", \"Ready\", \"Failed\", \"Terminating\"";

/// RBAC's denial for a ServiceAccount with no role (kubectl patch reads the object first).
const RBAC_DENIED: &str = "Error from server (Forbidden): runtimes.infrastructuremanager.kyma-project.io \"aws-minimal\" is forbidden: User \"system:serviceaccount:other:rogue\" cannot get resource \"runtimes/status\" in API group \"infrastructuremanager.kyma-project.io\" in the namespace \"kcp-system\"";

/// The webhook's writer rule, for the same ServiceAccount once RBAC lets it patch.
const WRITER_DENIED: &str = "Error from server (Forbidden): admission webhook \"runtime-status.validate.kim.kyma-project.io\" denied the request: [writer] user \"system:serviceaccount:other:rogue\" may not write Runtime status; allowed writers: users system:serviceaccount:kim-system:kim-controller; groups system:masters";

/// kubectl with a kubeconfig and a `HOME` of its own (an empty discovery cache).
struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

#[derive(Debug)]
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(bin: PathBuf, kubeconfig_yaml: &str) -> Kubectl {
        let home = tempfile::tempdir().expect("tempdir");
        let kubeconfig = home.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml).expect("kubeconfig");
        Kubectl {
            bin,
            home,
            kubeconfig,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(repo())
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null());
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Runs `kubectl <args>` (with `stdin`) to its end, off the runtime's threads, and prints
    /// the command and its output.
    async fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Out {
        let mut cmd = self.command(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let input = stdin.map(str::to_string);
        let out = tokio::task::spawn_blocking(move || {
            let mut child = cmd.spawn().expect("spawn kubectl");
            if let Some(text) = input {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(text.as_bytes())
                    .expect("stdin");
            }
            child.wait_with_output()
        })
        .await
        .expect("join")
        .expect("kubectl runs");
        let out = Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        let quoted: Vec<String> = args
            .iter()
            .map(|a| {
                if a.contains([' ', '{', '"', '=']) && !a.starts_with("--") {
                    format!("'{a}'")
                } else {
                    a.to_string()
                }
            })
            .collect();
        eprintln!(
            "$ kubectl {}{}\n{}{}{}",
            quoted.join(" "),
            stdin
                .map(|t| format!(" <<EOF\n{t}\nEOF"))
                .unwrap_or_default(),
            out.stdout,
            out.stderr,
            if out.ok {
                ""
            } else {
                "(exit status non-zero)\n"
            }
        );
        out
    }

    async fn run(&self, args: &[&str]) -> Out {
        self.run_with(args, None).await
    }

    async fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args).await;
        assert!(out.ok, "kubectl {} failed: {}", args.join(" "), out.stderr);
        out
    }

    /// `kubectl patch runtime/aws-minimal --subresource=status --type=merge -p <patch>`.
    async fn patch_status(&self, patch: &str) -> Out {
        self.run(&[
            "patch",
            &format!("runtime/{NAME}"),
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ])
        .await
    }

    fn spawn(&self, args: &[&str]) -> Background {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        let (stdout, _) = testenv::capture::capture(child.stdout.take().unwrap());
        let (stderr, _) = testenv::capture::capture(child.stderr.take().unwrap());
        Background {
            child,
            stdout,
            stderr,
        }
    }
}

/// A kubectl process in the background (killed when dropped).
struct Background {
    child: Child,
    stdout: testenv::capture::Captured,
    stderr: testenv::capture::Captured,
}

impl Background {
    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    async fn wait_for_line(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while !self.stdout().lines().any(&done) {
            assert!(
                start.elapsed() < limit,
                "no line with {what} within {limit:?}:\n{}\n{}",
                self.stdout(),
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_age(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
        && s.ends_with(['s', 'm', 'h', 'd', 'y'])
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// (event, state) of each row of `kubectl get -w --output-watch-events` (EVENT NAME STATE
/// SHOOT-NAME PROVIDER REGION AGE; an empty STATE leaves a row one column short).
fn watched_states(out: &str) -> Vec<(String, String)> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            match t.len() {
                7 => Some((t[0].to_string(), t[2].to_string())),
                6 => Some((t[0].to_string(), String::new())),
                _ => None,
            }
        })
        .collect()
}

fn dedup(states: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in states {
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

const PENDING: &str = r#"{"status":{"state":"Pending","conditions":[{"type":"Provisioned","status":"Unknown","reason":"Pending","message":"Shoot creation in progress"}]}}"#;
const READY: &str = r#"{"status":{"state":"Ready","provisioningCompleted":true,"conditions":[{"type":"Provisioned","status":"True","reason":"ShootCreationCompleted","message":"Shoot created"},{"type":"KubeconfigReady","status":"True","reason":"KubeconfigCreated","message":"Kubeconfig Secret written"},{"type":"Configured","status":"True","reason":"AdministratorsConfigured","message":"Administrators configured"}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_real_control_plane() {
    let t0 = Instant::now();
    let bin = testenv::tools::require("kubectl", "kubectl_drives_the_real_control_plane");
    let stack = Stack::start("base", &[]).await;
    let cp = &stack.cp;
    let k = Kubectl::new(bin.clone(), &cp.kubeconfig(cp.admin_cert()));
    let runtime = format!("runtime/{NAME}");
    let resource = "runtime.infrastructuremanager.kyma-project.io";

    // ---- a watch from before the Runtime exists until it is gone ----
    let watch = k.spawn(&["get", "runtimes", "-n", NS, "-w", "--output-watch-events"]);

    // ---- server-side apply: a dry run stores nothing, then for real ----
    let out = k
        .ok(&["apply", "--server-side", "--dry-run=server", "-f", SAMPLE])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!("{resource}/{NAME} serverside-applied (server dry run)")
    );
    let out = k.run(&["get", &runtime, "-n", NS]).await;
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        format!(
            "Error from server (NotFound): runtimes.infrastructuremanager.kyma-project.io \"{NAME}\" not found"
        )
    );
    let out = k.ok(&["apply", "--server-side", "-f", SAMPLE]).await;
    assert_eq!(
        out.stdout.trim(),
        format!("{resource}/{NAME} serverside-applied")
    );
    let out = k
        .ok(&[
            "get",
            &runtime,
            "-n",
            NS,
            "--show-managed-fields",
            "-o",
            "jsonpath={range .metadata.managedFields[*]}{.manager} {.operation}{\"\\n\"}{end}",
        ])
        .await;
    assert_eq!(
        out.stdout.trim(),
        "kubectl Apply",
        "kubectl's field manager"
    );
    let out = k
        .ok(&["get", &runtime, "-n", NS, "-o", "jsonpath={.metadata.uid}"])
        .await;
    let uid = out.stdout.trim().to_string();
    assert!(!uid.is_empty());

    // ---- the controller's writes, by the admin: Pending, then Ready ----
    for (patch, state) in [(PENDING, "Pending"), (READY, "Ready")] {
        let out = k.patch_status(patch).await;
        assert!(out.ok, "{state}: {}", out.stderr);
        assert_eq!(out.stdout.trim(), format!("{resource}/{NAME} patched"));
    }
    let out = k
        .ok(&[
            "wait",
            "-n",
            NS,
            "--for=jsonpath={.status.state}=Ready",
            &runtime,
            "--timeout=60s",
        ])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!("{resource}/{NAME} condition met")
    );
    // The mutating webhook stamped every condition.
    let out = k
        .ok(&[
            "get",
            &runtime,
            "-n",
            NS,
            "-o",
            "jsonpath={range .status.conditions[*]}{.type}={.status} {.observedGeneration} {.lastTransitionTime} {.reason}{\"\\n\"}{end}",
        ])
        .await;
    let rows: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.len(), 3, "{}", out.stdout);
    for (row, want) in rows.iter().zip([
        "Provisioned=True",
        "KubeconfigReady=True",
        "Configured=True",
    ]) {
        assert_eq!(row.len(), 4, "{}", out.stdout);
        assert_eq!(row[..2], [want, "1"], "{}", out.stdout);
        assert!(row[2].ends_with('Z'), "lastTransitionTime {:?}", row[2]);
    }
    // The controller's Event of a Runtime turned Ready (below) names each condition as
    // `type=status/reason` (`reconciler::pass`).
    let ready_note = format!(
        "Runtime is Ready: {}",
        rows.iter()
            .map(|r| format!("{}/{}", r[0], r[3]))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // ---- printer columns ----
    let out = k.ok(&["get", "runtimes", "-n", NS]).await;
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 2, "header and one row:\n{}", out.stdout);
    assert_eq!(
        lines[0],
        ["NAME", "STATE", "SHOOT-NAME", "PROVIDER", "REGION", "AGE"]
    );
    assert_eq!(
        lines[1][..5],
        [NAME, "Ready", NAME, "aws", "eu-central-1"],
        "{}",
        out.stdout
    );
    assert!(is_age(lines[1][5]), "AGE {:?}", lines[1][5]);
    let out = k.ok(&["get", "rt", "-n", NS, "-o", "name"]).await;
    assert_eq!(
        out.stdout.trim(),
        format!("runtime.infrastructuremanager.kyma-project.io/{NAME}"),
        "the short name rt"
    );

    // ---- an Event as the controller publishes it, through kubectl events ----
    // The controller's Event of a Runtime turned Ready: reason `Ready`, action `Reconcile`.
    let note = ready_note;
    let event = serde_json::json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": format!("{NAME}.17f0c0de00000000"), "namespace": NS},
        "eventTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "action": "Reconcile",
        "reason": "Ready",
        "note": note,
        "type": "Normal",
        "regarding": {
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "namespace": NS,
            "name": NAME,
            "uid": uid
        },
        "reportingController": "kim-controller",
        "reportingInstance": "kim-controller"
    });
    let out = k
        .run_with(&["create", "-f", "-"], Some(&event.to_string()))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k.ok(&["events", "-n", NS, "--for", &runtime]).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[1..4],
        ["Normal", "Ready", &format!("Runtime/{NAME}")],
        "{}",
        out.stdout
    );
    assert_eq!(row[4..].join(" "), note, "{}", out.stdout);

    // ---- kubectl explain reads the CRD's schema through the apiserver's OpenAPI v3 ----
    let out = k.ok(&["explain", "runtime.status"]).await;
    for line in [
        "GROUP:      infrastructuremanager.kyma-project.io",
        "KIND:       Runtime",
        "VERSION:    v1",
        "FIELD: status <Object>",
        "  enum: Pending, Ready, Failed, Terminating",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "no line {line:?} in:\n{}",
            out.stdout
        );
    }
    for field in ["conditions\t<[]Object>", "state\t<string>"] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.trim_start().starts_with(field)),
            "no field {field:?} in:\n{}",
            out.stdout
        );
    }

    // ---- an illegal status write, denied by the webhook ----
    let out = k
        .patch_status(r#"{"status":{"state":"Terminating"}}"#)
        .await;
    assert!(!out.ok, "the illegal status patch was accepted");
    assert_eq!(out.stderr.trim_end(), TERMINATING_DENIED);
    assert_eq!(out.stdout, "");

    // ---- a state outside the CRD's enum, denied by the apiserver's schema check ----
    let out = k.patch_status(r#"{"status":{"state":"Deleting"}}"#).await;
    assert!(!out.ok, "a state outside the enum was accepted");
    assert_eq!(out.stderr.trim_end(), ENUM_DENIED);

    // ---- a ServiceAccount that is no allowed writer: RBAC first, then the webhook ----
    let token = cp.service_account_token("other", "rogue").await;
    let rogue = Kubectl::new(bin.clone(), &cp.kubeconfig_with_token(&token));
    let to_pending = r#"{"status":{"state":"Pending"}}"#;
    let out = rogue.patch_status(to_pending).await;
    assert!(!out.ok);
    assert_eq!(out.stderr.trim_end(), RBAC_DENIED);
    k.ok(&[
        "create",
        "role",
        "runtime-status-writer",
        "-n",
        NS,
        "--verb=get,patch",
        "--resource=runtimes.infrastructuremanager.kyma-project.io,runtimes.infrastructuremanager.kyma-project.io/status",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "rogue-writes-status",
        "-n",
        NS,
        "--role=runtime-status-writer",
        "--serviceaccount=other:rogue",
    ])
    .await;
    // RBAC's cache follows the new binding within a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = rogue.patch_status(to_pending).await;
        if out.stderr.trim_end() != RBAC_DENIED || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!out.ok, "the rogue status patch was accepted");
    assert_eq!(out.stderr.trim_end(), WRITER_DENIED);

    // ---- delete and wait: nothing is left ----
    let out = k
        .ok(&["delete", &runtime, "-n", NS, "--wait", "--timeout=60s"])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!(
            "runtime.infrastructuremanager.kyma-project.io \"{NAME}\" deleted from {NS} namespace"
        )
    );
    let out = k.ok(&["get", "runtimes", "-n", NS]).await;
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.trim(),
        format!("No resources found in {NS} namespace.")
    );

    // ---- the watch saw the states the webhook let through, in order ----
    watch
        .wait_for_line("DELETED", Duration::from_secs(30), |l| {
            l.starts_with("DELETED")
        })
        .await;
    let seen = watched_states(&watch.stdout());
    eprintln!(
        "$ kubectl get runtimes -n {NS} -w --output-watch-events   (started before the apply)\n{}",
        watch.stdout()
    );
    assert_eq!(seen.first().map(|s| s.0.as_str()), Some("ADDED"));
    assert_eq!(seen.last().map(|s| s.0.as_str()), Some("DELETED"));
    assert_eq!(
        dedup(seen.iter().map(|s| s.1.clone())),
        ["", "Pending", "Ready"],
        "kubectl get -w:\n{}",
        watch.stdout()
    );
    eprintln!("real_kubectl: {:.1} s", t0.elapsed().as_secs_f64());
}
