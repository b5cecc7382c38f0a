//! kubectl 1.35 (the real binary, installed by `scripts/install-tools.sh`) drives the
//! simulated control plane: the in-memory control cluster serving the Runtime CRD of
//! `manifests/crd.yaml` (discovery, OpenAPI v3, tables, server-side apply, watch), the
//! simulated Gardener, and the real `kim webhook` and `kim controller` processes, with every
//! `runtimes/status` write going through the webhooks over HTTPS as kube-apiserver calls them.
//!
//! kubectl authenticates with a bearer token the control cluster maps to `kubernetes-admin`
//! in group `system:masters` (a cluster administrator, an allowed writer of Runtime status by
//! default), so the webhook judges its writes as it would in a cluster: the writer rule lets
//! them through and the status model decides.
//!
//! Needs kubectl and helm (`bash scripts/install-tools.sh`); a missing one fails the test.

use crate::support::{e2e, reconciler};

use e2e::*;
use reconciler::{GARDEN_NS, NS, manifest_dir, samples_dir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testenv::webhook_stage::StageResult;
use testenv::{Gvr, ResourceInfo, UserInfo};

/// The sample applied with kubectl (`samples/runtimes`).
const SAMPLE: &str = "aws-minimal.yaml";
/// Its name, Shoot name (label `kyma-project.io/shoot-name` and `spec.shoot.name`) and runtime
/// id (label `kyma-project.io/runtime-id`).
const NAME: &str = "aws-minimal";
const RUNTIME_ID: &str = "runtime-id";
/// kubectl's identity on the control cluster.
const ADMIN_TOKEN: &str = "kubectl-admin-token";
const ADMIN_USER: &str = "kubernetes-admin";

/// What kubectl prints when the webhook denies `status.state: Terminating` on a Ready Runtime
/// that is not being deleted (stderr, one line). The webhook's part is the status model's
/// denial message; update it here when that wording changes.
const TERMINATING_DENIED: &str = "Error from server (Forbidden): admission webhook \"runtime-status.validate.kim.kyma-project.io\" denied the request: [transition-needs-deletion] status.state: transition Ready -> Terminating is allowed only while the Runtime is being deleted (metadata.deletionTimestamp is not set); [terminating-requires-deprovisioned] status.state: Terminating requires a Deprovisioned condition; found none";

/// What kubectl prints when a user who is not an allowed writer changes a Runtime's status in a
/// way the model allows (Ready -> Pending: the writer rule alone).
const WRITER_DENIED: &str = "Error from server (Forbidden): admission webhook \"runtime-status.validate.kim.kyma-project.io\" denied the request: [writer] user \"system:serviceaccount:other:rogue\" may not write Runtime status; allowed writers: users system:serviceaccount:kim-system:kim-controller; groups system:masters";

/// kubectl with its own kubeconfig and `HOME` (so its discovery cache starts empty).
struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
    /// Every command run and what it printed, for the failure messages.
    transcript: std::sync::Mutex<Vec<String>>,
}

/// A finished kubectl command.
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
        std::fs::write(&kubeconfig, kubeconfig_yaml).expect("write kubeconfig");
        Kubectl {
            bin,
            home,
            kubeconfig,
            transcript: Default::default(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null());
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Runs `kubectl <args>` to its end (off the async runtime's threads).
    async fn run(&self, args: &[&str]) -> Out {
        let mut cmd = self.command(args);
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .expect("join")
            .expect("run kubectl");
        let out = Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        let entry = format!(
            "$ kubectl {}\n{}{}{}",
            args.join(" "),
            out.stdout,
            out.stderr,
            if out.ok {
                ""
            } else {
                "(exit status non-zero)\n"
            }
        );
        println!("{entry}");
        self.transcript.lock().unwrap().push(entry);
        out
    }

    /// Runs `kubectl <args>` and expects success.
    async fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {} failed:\n{}",
            args.join(" "),
            self.dump()
        );
        out
    }

    /// Starts `kubectl <args>` in the background with its output captured.
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

    fn dump(&self) -> String {
        self.transcript.lock().unwrap().join("\n")
    }
}

/// A kubectl process running in the background (killed when dropped).
struct Background {
    child: Child,
    stdout: testenv::capture::Captured,
    stderr: testenv::capture::Captured,
}

impl Background {
    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits until its stdout has a line for which `done` holds (at most `limit`).
    async fn wait_for_line(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while !self.stdout().lines().any(&done) {
            assert!(
                start.elapsed() < limit,
                "no line with {what} within {limit:?}:\n{}\n{}",
                self.stdout(),
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Runtime CRD as the control cluster serves it (`manifests/crd.yaml`).
fn crd_resources() -> Vec<ResourceInfo> {
    let text = std::fs::read_to_string(manifest_dir().join("manifests/crd.yaml")).expect("crd");
    let crd: Value = serde_saphyr::from_str(&text).expect("crd.yaml parses");
    ResourceInfo::from_crd(&crd).expect("crd.yaml is a served CRD")
}

fn is_age(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit())
        && s.ends_with(['s', 'm', 'h', 'd', 'y'])
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// States of a `kubectl get -w --output-watch-events` transcript (rows: EVENT NAME STATE
/// SHOOT-NAME PROVIDER REGION AGE; an empty STATE leaves a row one column short), with the
/// event type of each row.
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

/// Rows `kubectl events` prints for the stored Events of the Runtime: `(type, reason, note)`.
fn stored_events(e: &E2e) -> BTreeSet<(String, String, String)> {
    e.env
        .kcp
        .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
        .iter()
        .filter(|ev| ev["regarding"]["name"] == NAME && ev["regarding"]["kind"] == "Runtime")
        .map(|ev| {
            let s = |k: &str| ev[k].as_str().unwrap_or_default().trim().to_string();
            (s("type"), s("reason"), s("note"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_simulated_control_plane() {
    let bin = testenv::tools::require("kubectl", "kubectl_drives_the_simulated_control_plane");
    let e = E2e::start().await;
    for info in crd_resources() {
        e.env.kcp.register(info);
    }
    e.env
        .kcp
        .add_user(ADMIN_TOKEN, UserInfo::new(ADMIN_USER, &["system:masters"]));
    // kubectl sends its token only over TLS.
    let https = e.env.kcp.serve_https().await.expect("https endpoint");
    let k = Kubectl::new(
        bin,
        &e.env.kcp.kubeconfig_yaml_for(&https, Some(ADMIN_TOKEN)),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut controller = start_controller(&e.env, dir.path());
    let _stepper = e.env.sim.run_every(Duration::from_millis(100));
    let sample = samples_dir().join(SAMPLE);
    let sample = sample.to_str().expect("utf-8 path");
    let runtime = format!("runtime/{NAME}");

    // ---- a watch from before the Runtime exists until it is gone ----
    let watch = k.spawn(&["get", "runtimes", "-n", NS, "-w", "--output-watch-events"]);

    // ---- server-side apply: dry run stores nothing, then for real ----
    let out = k
        .ok(&["apply", "--server-side", "--dry-run=server", "-f", sample])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!(
            "runtime.infrastructuremanager.kyma-project.io/{NAME} serverside-applied (server dry run)"
        )
    );
    assert!(
        e.env.runtime_json(NAME).is_none(),
        "a server dry run stored the Runtime"
    );
    let out = k.ok(&["apply", "--server-side", "-f", sample]).await;
    assert_eq!(
        out.stdout.trim(),
        format!("runtime.infrastructuremanager.kyma-project.io/{NAME} serverside-applied")
    );
    let stored = e.env.runtime_json(NAME).expect("applied Runtime stored");
    let managers: Vec<&str> = stored["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["operation"] == "Apply")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kubectl"], "kubectl's field manager recorded");

    // ---- wait for Ready, then the printer columns ----
    let out = k
        .ok(&[
            "wait",
            "-n",
            NS,
            "--for=jsonpath={.status.state}=Ready",
            &runtime,
            "--timeout=120s",
        ])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!("runtime.infrastructuremanager.kyma-project.io/{NAME} condition met")
    );
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

    // ---- Events of the provisioning, as `kubectl events` prints them ----
    let before = stored_events(&e);
    assert!(!before.is_empty(), "the controller published Events");
    let out = k.ok(&["events", "-n", NS, "--for", &runtime]).await;
    let after = stored_events(&e);
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    let object = format!("Runtime/{NAME}");
    let mut printed = BTreeSet::new();
    for line in lines {
        let Some((_, rest)) = line.split_once(&format!(" {object} ")) else {
            panic!("a row without {object}: {line:?}\n{}", out.stdout);
        };
        let cols: Vec<&str> = line[..line.len() - rest.len()].split_whitespace().collect();
        let n = cols.len();
        assert!(n >= 4, "{line:?}");
        printed.insert((
            cols[n - 3].to_string(),
            cols[n - 2].to_string(),
            rest.trim().to_string(),
        ));
    }
    assert!(
        before.is_subset(&printed) && printed.is_subset(&after),
        "kubectl events printed {printed:#?}\nstored before: {before:#?}\nstored after: {after:#?}"
    );

    // ---- kubectl explain reads the CRD's schema through OpenAPI v3 ----
    let out = k.ok(&["explain", "runtime.status"]).await;
    let text = out.stdout.as_str();
    for line in [
        "GROUP:      infrastructuremanager.kyma-project.io",
        "KIND:       Runtime",
        "VERSION:    v1",
        "FIELD: status <Object>",
        "  enum: Pending, Ready, Failed, Terminating",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    for field in ["conditions\t<[]Object>", "state\t<string>"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(field)),
            "no field {field:?} in:\n{text}"
        );
    }

    // ---- an illegal status write, denied by the webhook ----
    let out = k
        .run(&[
            "patch",
            &runtime,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"state":"Terminating"}}"#,
        ])
        .await;
    assert!(
        !out.ok,
        "the illegal status patch was accepted:\n{}",
        k.dump()
    );
    assert_eq!(out.stderr.trim_end(), TERMINATING_DENIED);
    assert_eq!(out.stdout, "");
    let admin_writes: Vec<_> = e
        .status_records(NAME)
        .into_iter()
        .filter(|r| r.user == ADMIN_USER)
        .collect();
    assert_eq!(admin_writes.len(), 1, "{admin_writes:#?}");
    assert!(
        matches!(
            &admin_writes[0].result,
            StageResult::Rejected { code: 403, .. }
        ),
        "{admin_writes:#?}"
    );
    // A transition the model allows, by a service account that is no allowed writer.
    let rogue = Kubectl::new(
        k.bin.clone(),
        &e.env.kcp.kubeconfig_yaml_for(&https, Some(ROGUE_TOKEN)),
    );
    let out = rogue
        .run(&[
            "patch",
            &runtime,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"state":"Pending"}}"#,
        ])
        .await;
    assert!(
        !out.ok,
        "the rogue status patch was accepted:\n{}",
        rogue.dump()
    );
    assert_eq!(out.stderr.trim_end(), WRITER_DENIED);

    // ---- delete and wait: nothing is left ----
    let out = k
        .ok(&["delete", &runtime, "-n", NS, "--wait", "--timeout=120s"])
        .await;
    assert_eq!(
        out.stdout.trim(),
        format!(
            "runtime.infrastructuremanager.kyma-project.io \"{NAME}\" deleted from {NS} namespace"
        )
    );
    assert!(e.env.runtime_json(NAME).is_none());
    assert!(
        e.env
            .garden
            .get(&Gvr::shoots(), Some(GARDEN_NS), NAME)
            .is_none(),
        "the Shoot is gone"
    );
    assert!(
        e.env
            .kcp
            .get(
                &Gvr::secrets(),
                Some(NS),
                &format!("kubeconfig-{RUNTIME_ID}")
            )
            .is_none(),
        "the kubeconfig Secret is gone"
    );
    let out = k.ok(&["get", "runtimes", "-n", NS]).await;
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.trim(),
        format!("No resources found in {NS} namespace.")
    );

    // ---- the watch saw every state the webhook let through, in order ----
    watch
        .wait_for_line("DELETED", Duration::from_secs(60), |l| {
            l.starts_with("DELETED")
        })
        .await;
    let seen = watched_states(&watch.stdout());
    assert_eq!(seen.first().map(|s| s.0.as_str()), Some("ADDED"));
    assert_eq!(seen.last().map(|s| s.0.as_str()), Some("DELETED"));
    let written: Vec<String> = e
        .env
        .writes()
        .iter()
        .filter(|w| w.name == NAME)
        .map(|w| w.state.clone())
        .collect();
    let mut expected = vec![String::new()];
    expected.extend(written);
    assert_eq!(
        dedup(seen.into_iter().map(|s| s.1)),
        dedup(expected),
        "kubectl get -w:\n{}",
        watch.stdout()
    );
    println!(
        "$ kubectl get runtimes -n {NS} -w --output-watch-events   (started before the apply)\n{}",
        watch.stdout()
    );
    controller.terminate(Duration::from_secs(10));
}

// ---------------------------------------------------------------------------------------------
// The Helm chart (charts/kim) against the kustomize overlays: one source of truth.
// ---------------------------------------------------------------------------------------------

/// Labels Helm adds to the objects it renders (not in manifests/); removed before comparing.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];
/// Annotations Helm needs that manifests/ does not have: the CRD is kept on `helm uninstall`.
const HELM_ANNOTATIONS: [&str; 1] = ["helm.sh/resource-policy"];
/// The release the comparisons render: `helm template kim charts/kim -n kim-system`.
const RELEASE: [&str; 4] = ["kim", "charts/kim", "--namespace", "kim-system"];

/// Runs a tool from the repository root and returns its stdout (panics with stderr on failure).
fn run_tool(bin: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(manifest_dir())
        .env("HOME", std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run tool");
    assert!(
        out.status.success(),
        "{} {} failed:\n{}",
        bin.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("rendered YAML parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// `kind namespace/name` of an object (its identity in a build).
fn id(doc: &Value) -> String {
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!(
        "{} {} {}/{}",
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name")
    )
}

/// A Helm-rendered object without Helm's own labels and annotations.
fn without_helm(mut doc: Value) -> Value {
    for (field, keys) in [
        ("labels", &HELM_LABELS[..]),
        ("annotations", &HELM_ANNOTATIONS[..]),
    ] {
        let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
            for k in keys {
                map.remove(*k);
            }
            if map.is_empty() {
                meta.remove(field);
            }
        }
    }
    doc
}

/// Paths at which two values differ (`/spec/ports/0/port: 443 != 8443`).
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => differences(&p, u, v, out),
                    (u, v) => out.push(format!("{p}: {u:?} != {v:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), u, v, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} != {b}")),
        _ => {}
    }
}

/// Compares two builds object by object; returns every difference (objects on one side only,
/// fields that differ), empty when equal.
fn compare(helm: &[Value], kustomize: &[Value]) -> Vec<String> {
    let by_id = |docs: &[Value]| -> std::collections::BTreeMap<String, Value> {
        docs.iter().map(|d| (id(d), d.clone())).collect()
    };
    let (h, k) = (by_id(helm), by_id(kustomize));
    assert_eq!(h.len(), helm.len(), "duplicate objects in the Helm render");
    let mut out = Vec::new();
    for key in h.keys().chain(k.keys()).collect::<BTreeSet<_>>() {
        match (h.get(key), k.get(key)) {
            (Some(a), Some(b)) => {
                let mut d = Vec::new();
                differences("", a, b, &mut d);
                out.extend(d.into_iter().map(|d| format!("{key}: {d}")));
            }
            (Some(_), None) => out.push(format!("{key}: only in the Helm render")),
            (None, _) => out.push(format!("{key}: only in the kustomize build")),
        }
    }
    out
}

/// `helm template` of the release with `args`, Helm's labels removed.
fn helm_render(helm: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template"];
    all.extend(RELEASE);
    all.extend(args);
    yaml_docs(&run_tool(helm, &all))
        .into_iter()
        .map(without_helm)
        .collect()
}

/// `kubectl kustomize <overlay>` plus the CRD (`kubectl kustomize manifests`).
fn kustomize_build(kubectl: &std::path::Path, overlay: &str) -> Vec<Value> {
    let mut docs = yaml_docs(&run_tool(kubectl, &["kustomize", "manifests"]));
    docs.extend(yaml_docs(&run_tool(kubectl, &["kustomize", overlay])));
    docs
}

#[test]
fn helm_chart_renders_what_kustomize_builds() {
    let test = "helm_chart_renders_what_kustomize_builds";
    let helm = testenv::tools::require("helm", test);
    let kubectl = testenv::tools::require("kubectl", test);
    // Default values: cert-manager, as manifests/overlays/cert-manager.
    let rendered = helm_render(&helm, &[]);
    let built = kustomize_build(&kubectl, "manifests/overlays/cert-manager");
    assert_eq!(rendered.len(), 23, "CRD + 22 objects of the overlay");
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (defaults) differs from kubectl kustomize manifests/overlays/cert-manager:\n{}",
        diff.join("\n")
    );

    // A provided caBundle, as manifests/overlays/static-ca (with the overlay's value).
    let built = kustomize_build(&kubectl, "manifests/overlays/static-ca");
    let ca_bundle = built
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .and_then(|d| d.pointer("/webhooks/0/clientConfig/caBundle"))
        .and_then(Value::as_str)
        .expect("the static-ca overlay's caBundle")
        .to_string();
    let rendered = helm_render(
        &helm,
        &[
            "--set",
            "certificates.mode=caBundle",
            "--set",
            &format!("certificates.caBundle={ca_bundle}"),
        ],
    );
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (caBundle) differs from kubectl kustomize manifests/overlays/static-ca:\n{}",
        diff.join("\n")
    );

    // Guard only, in front of KIM: as manifests/overlays/guard-kim (no CRD there).
    let rendered = helm_render(&helm, &["-f", "charts/kim/ci/guard-only-values.yaml"]);
    let built: Vec<Value> = yaml_docs(&run_tool(
        &kubectl,
        &["kustomize", "manifests/overlays/guard-kim"],
    ))
    .into_iter()
    .map(without_helm)
    .collect();
    assert_eq!(
        rendered.len(),
        11,
        "the webhook's objects and its certificates"
    );
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (guard only) differs from kubectl kustomize manifests/overlays/guard-kim:\n{}",
        diff.join("\n")
    );
}

/// The webhook container's args in a render.
fn webhook_args(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "kim-webhook")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/args"))
        .and_then(Value::as_array)
        .expect("the webhook Deployment")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

#[test]
fn helm_values_change_only_what_they_name() {
    let helm = testenv::tools::require("helm", "helm_values_change_only_what_they_name");
    let defaults = helm_render(&helm, &[]);

    // Guard only: the default render less the CRD, the controller's objects and the mutating
    // webhook; the webhook gets the writers, switches, enforcement and failurePolicy of the
    // values file.
    let guard = helm_render(&helm, &["-f", "charts/kim/ci/guard-only-values.yaml"]);
    let expected: Vec<Value> = defaults
        .iter()
        .filter(|d| {
            d["kind"] != "CustomResourceDefinition"
                && d["kind"] != "MutatingWebhookConfiguration"
                && d.pointer("/metadata/labels/app.kubernetes.io~1component")
                    != Some(&Value::from("controller"))
        })
        .cloned()
        .collect();
    let mut diff = compare(&guard, &expected);
    diff.sort();
    let args_path = "/spec/template/spec/containers/0/args";
    assert!(
        diff.iter()
            .all(|d| (d.contains("Deployment") && d.contains(args_path))
                || d.ends_with("/webhooks/0/failurePolicy: \"Ignore\" != \"Fail\"")),
        "guard-only differs beyond the webhook's args and failurePolicy:\n{}",
        diff.join("\n")
    );
    let args = webhook_args(&guard);
    assert_eq!(
        args[6..],
        [
            "--allowed-writers=system:serviceaccount:kcp-system:infrastructure-manager,group:system:masters",
            "--compat=terminatingConditionType,kimHistory",
            "--enforcement=warn",
        ]
    );
    assert!(
        !guard
            .iter()
            .any(|d| d["metadata"]["name"] == "kim-controller"),
        "no controller object in guard-only mode"
    );
    let actions = helm_render(&helm, &["--set", "webhook.ruleActions=writer=deny"]);
    assert_eq!(
        webhook_args(&actions).last().unwrap(),
        "--rule-action=writer=deny"
    );

    // Replicas, image, resources, monitoring off, a policy file.
    let set = helm_render(
        &helm,
        &[
            "-f",
            "charts/kim/ci/policy-values.yaml",
            "--set",
            "webhook.replicas=3",
            "--set",
            "controller.replicas=1",
            "--set",
            "image.tag=9.9.9",
            "--set",
            "webhook.resources.limits.memory=256Mi",
        ],
    );
    let mut diff = compare(&set, &defaults);
    diff.sort();
    let expected = [
        "apps/v1 Deployment kim-system/kim-controller: /spec/replicas: 1 != 2",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/path: None != Some(String(\"/metrics\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/port: None != Some(String(\"8081\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/scrape: None != Some(String(\"true\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/spec/containers/0/image: \"ghcr.io/kyma-project/kim:9.9.9\" != \"ghcr.io/kyma-project/kim:0.1.0\"",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/replicas: 3 != 2",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/path: None != Some(String(\"/metrics\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/port: None != Some(String(\"8080\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/scrape: None != Some(String(\"true\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/spec/containers/0/image: \"ghcr.io/kyma-project/kim:9.9.9\" != \"ghcr.io/kyma-project/kim:0.1.0\"",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/spec/containers/0/resources/limits/memory: \"256Mi\" != \"128Mi\"",
        "v1 ConfigMap kim-system/kim-webhook-policy: only in the Helm render",
    ];
    let (policy_wiring, rest): (Vec<_>, Vec<_>) = diff.iter().partition(|d| {
        d.contains("kim-webhook:")
            && (d.contains("/args")
                || d.contains("/volumeMounts")
                || d.contains("/volumes")
                || d.contains("policy-checksum"))
    });
    assert_eq!(rest, expected, "all differences:\n{}", diff.join("\n"));
    assert!(!policy_wiring.is_empty(), "the policy file is wired in");
    let args = webhook_args(&set);
    assert_eq!(
        args.last().map(String::as_str),
        Some("--policy-file=/etc/kim/policy/policy.yaml")
    );
    // The policy the chart mounts is one kim accepts.
    let policy = set
        .iter()
        .find(|d| d["metadata"]["name"] == "kim-webhook-policy")
        .and_then(|d| d.pointer("/data/policy.yaml"))
        .and_then(Value::as_str)
        .expect("policy ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, policy).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["policy", "--format", "json", "--policy-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kim rejects the chart's example policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("BackupConfigured"));
}

#[test]
fn helm_refuses_bad_values() {
    let helm = testenv::tools::require("helm", "helm_refuses_bad_values");
    for (args, message) in [
        (
            &["--set", "certificates.mode=caBundle"][..],
            "certificates.caBundle (base64 PEM of the CA of Secret kim-webhook-tls) is required with certificates.mode caBundle",
        ),
        (
            &["--set", "certificates.mode=selfMade"][..],
            "at '/certificates/mode': value must be one of 'certManager', 'caBundle'",
        ),
        (
            &["--set", "webhook.replicas=0"][..],
            "at '/webhook/replicas': minimum: got 0, want 1",
        ),
        (
            &["--set", "webhook.allowedWriter=x"][..],
            "additional properties 'allowedWriter' not allowed",
        ),
        (
            &["--set", "webhook.policy.enabled=true"][..],
            "webhook.policy.content is required when webhook.policy.enabled is true",
        ),
    ] {
        let mut all = vec!["template"];
        all.extend(RELEASE);
        all.extend(args);
        let out = Command::new(&helm)
            .args(&all)
            .current_dir(manifest_dir())
            .env("HOME", std::env::temp_dir())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} rendered");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
