//! `kim audit` (the real binary) against a real kube-apiserver's paged lists: more Runtimes
//! than one page, some with stored statuses the status model denies — stored with no webhook
//! installed, as a cluster holds them from before the guard (a control plane of its own with
//! kim's CRD only; every status is valid under the CRD's schema) — read through a kubeconfig
//! file for the admin. The report names every Runtime read and exactly the bad ones, exit 1;
//! once they are repaired, exit 0.

use crate::support::real::{repo, runtime_resource};
use futures::StreamExt;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use testenv::controlplane::ControlPlane;

const NS: &str = "kcp-system";
const OTHER_NS: &str = "kyma-dev";
/// Runtimes in [`NS`]: more than two pages of [`PAGE`].
const COUNT: usize = 120;
const OTHER_COUNT: usize = 10;
const PAGE: u32 = 50;

fn cond(kind: &str, status: &str, reason: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": format!("{kind} {reason}"),
           "lastTransitionTime": "2026-11-02T10:00:00Z", "observedGeneration": 1})
}

fn status(state: &str, conds: &[(&str, &str, &str)]) -> Value {
    let conds: Vec<Value> = conds.iter().map(|(t, s, r)| cond(t, s, r)).collect();
    json!({"state": state, "conditions": conds})
}

const READY: [(&str, &str, &str); 3] = [
    ("Provisioned", "True", "ShootCreationCompleted"),
    ("KubeconfigReady", "True", "KubeconfigCreated"),
    ("Configured", "True", "AdministratorsConfigured"),
];

/// Clean statuses (`None`: never reconciled, no status).
fn clean(i: usize) -> Option<Value> {
    match i % 4 {
        0 => Some(status("Ready", &READY)),
        1 => Some(status("Pending", &[("Provisioned", "Unknown", "Pending")])),
        2 => Some(status("Failed", &[("Provisioned", "False", "GardenerErr")])),
        _ => None,
    }
}

/// Statuses the CRD's schema accepts and the model denies, with the rules the audit reports
/// for each (one per row, in order).
fn bad(k: usize) -> (Value, Vec<&'static str>) {
    match k % 4 {
        // A reason the model does not know.
        0 => (
            status("Pending", &[("Provisioned", "Unknown", "ShootCreating")]),
            vec!["reason-unknown"],
        ),
        // Ready with a False KubeconfigReady and no Configured.
        1 => (
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "False", "KubernetesErr"),
                ],
            ),
            vec!["ready-requires", "ready-requires"],
        ),
        // Failed without any False condition.
        2 => (
            status("Failed", &[("Provisioned", "Unknown", "Pending")]),
            vec!["failed-requires-false"],
        ),
        // KIM's retired condition type (only known with --compat kimHistory).
        _ => (
            status(
                "Ready",
                &[
                    READY[0],
                    READY[1],
                    ("OidcConfigured", "True", "OidcConfigured"),
                    READY[2],
                ],
            ),
            vec!["condition-type-unknown"],
        ),
    }
}

/// The Runtimes of a namespace: (name, status, rules it breaks; empty when clean). Every 17th
/// from the 6th is bad.
fn fixture(prefix: &str, count: usize) -> Vec<(String, Option<Value>, Vec<&'static str>)> {
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i:03}");
            if i % 17 == 5 {
                let (s, rules) = bad(i / 17);
                (name, Some(s), rules)
            } else {
                (name, clean(i), vec![])
            }
        })
        .collect()
}

/// Creates each Runtime (the sample `aws.yaml`) and writes its status, eight at a time.
async fn store(
    api: &Api<DynamicObject>,
    ns: &str,
    runtimes: &[(String, Option<Value>, Vec<&str>)],
) {
    let text = std::fs::read_to_string(repo().join("samples/runtimes/aws.yaml")).unwrap();
    let sample: Value = serde_saphyr::from_str(&text).unwrap();
    futures::stream::iter(runtimes)
        .map(|(name, status, _)| {
            let mut obj = sample.clone();
            obj["metadata"]["name"] = json!(name);
            obj["metadata"]["namespace"] = json!(ns);
            async move {
                let obj: DynamicObject = serde_json::from_value(obj).unwrap();
                api.create(&PostParams::default(), &obj)
                    .await
                    .unwrap_or_else(|e| panic!("create {name}: {e}"));
                if let Some(s) = status {
                    api.patch_status(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": s})),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
                }
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `kim audit --kubeconfig <file> <args>` with no kim variable, `KUBECONFIG` or proxy of
/// the environment, and prints what it wrote (the table, or the JSON's summary).
async fn audit(kubeconfig: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
    cmd.arg("audit")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args);
    for var in [
        "KUBECONFIG",
        "KIM_POLICY_FILE",
        "KIM_ALLOWED_WRITERS",
        "KIM_COMPAT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        cmd.env_remove(var);
    }
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("kim runs");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let shown = if args.contains(&"json") {
        serde_json::from_str::<Value>(&run.stdout)
            .map(|d| format!("(JSON) summary: {}\n", d["summary"]))
            .unwrap_or_else(|_| run.stdout.clone())
    } else {
        run.stdout.clone()
    };
    eprintln!(
        "$ kim audit --kubeconfig admin.kubeconfig {}   # {:.1} s, exit {:?}\n{shown}{}",
        args.join(" "),
        t.elapsed().as_secs_f64(),
        run.code,
        run.stderr
    );
    run
}

/// (namespace, name) → rules of each item of a JSON report, in order.
fn findings(doc: &Value) -> BTreeMap<(String, String), Vec<String>> {
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let s = |k: &str| item[k].as_str().unwrap_or_default().to_string();
            let rules = item["violations"]
                .as_array()
                .expect("violations")
                .iter()
                .map(|v| v["rule"].as_str().unwrap_or_default().to_string())
                .collect();
            ((s("namespace"), s("name")), rules)
        })
        .collect()
}

fn expected(
    ns: &str,
    runtimes: &[(String, Option<Value>, Vec<&str>)],
) -> BTreeMap<(String, String), Vec<String>> {
    runtimes
        .iter()
        .filter(|(_, _, rules)| !rules.is_empty())
        .map(|(name, _, rules)| {
            (
                (ns.to_string(), name.clone()),
                rules.iter().map(|r| r.to_string()).collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kim_audit_reads_every_page_and_reports_exactly_the_bad_runtimes() {
    let t0 = Instant::now();
    let cp = tokio::task::spawn_blocking(ControlPlane::start)
        .await
        .unwrap()
        .expect("control plane");
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).unwrap();
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    let client = cp.admin().await;
    let main = fixture("rt", COUNT);
    let other = fixture("dev", OTHER_COUNT);
    let mut apis = Vec::new();
    for (ns, runtimes) in [(NS, &main), (OTHER_NS, &other)] {
        cp.create_namespace(ns).await;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &runtime_resource());
        store(&api, ns, runtimes).await;
        apis.push(api);
    }
    let want = expected(NS, &main);
    assert_eq!(want.len(), 7, "{want:?}");
    let want_other = expected(OTHER_NS, &other);
    assert_eq!(want_other.len(), 1);
    eprintln!(
        "real_audit: {} Runtimes stored in {:.1} s",
        COUNT + OTHER_COUNT,
        t0.elapsed().as_secs_f64()
    );

    // The server pages: a list of PAGE answers PAGE items and a continue token.
    let page = apis[0]
        .list(&ListParams::default().limit(PAGE))
        .await
        .unwrap();
    assert_eq!(page.items.len(), PAGE as usize);
    assert!(
        page.metadata
            .continue_
            .as_deref()
            .is_some_and(|c| !c.is_empty())
    );
    assert_eq!(
        page.metadata.remaining_item_count,
        Some((COUNT - PAGE as usize) as i64)
    );

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, cp.kubeconfig(cp.admin_cert())).unwrap();
    let page = PAGE.to_string();

    // One namespace, pages of PAGE: every Runtime counted, exactly the bad ones reported.
    let run = audit(
        &kubeconfig,
        &["-n", NS, "--chunk-size", &page, "-o", "json"],
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let doc: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    assert_eq!(doc["summary"]["runtimes"], json!(COUNT));
    assert_eq!(doc["summary"]["runtimesWithViolations"], json!(want.len()));
    assert_eq!(findings(&doc), want);
    let rows: usize = want.values().map(Vec::len).sum();
    let mut by_rule: BTreeMap<String, usize> = BTreeMap::new();
    for r in want.values().flatten() {
        *by_rule.entry(r.clone()).or_default() += 1;
    }
    let reported: BTreeMap<String, usize> =
        serde_json::from_value(doc["summary"]["byRule"].clone()).unwrap();
    assert_eq!(reported, by_rule);
    assert_eq!(
        run.stderr.trim_end(),
        format!(
            "kim audit: {COUNT} Runtimes read in namespace {NS}, {} with violations; {rows} violations ({rows} deny): {}",
            want.len(),
            summary_rules(&doc)
        )
    );

    // The table: one row per violation, the bad Runtimes in list order.
    let run = audit(&kubeconfig, &["-n", NS, "--chunk-size", &page]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATE", "RULE", "ACTION", "PATH", "MESSAGE"]
    );
    let table: Vec<(String, String)> = lines[1..]
        .iter()
        .map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c[0].to_string(), c[2].to_string())
        })
        .collect();
    let in_order: Vec<(String, String)> = main
        .iter()
        .flat_map(|(name, _, rules)| rules.iter().map(|r| (name.clone(), r.to_string())))
        .collect();
    assert_eq!(table, in_order);

    // One request (no paging) and every namespace give the same findings.
    let run = audit(&kubeconfig, &["-n", NS, "--chunk-size", "0", "-o", "json"]).await;
    assert_eq!(run.code, Some(1));
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["summary"]["runtimes"], json!(COUNT));
    assert_eq!(findings(&doc), want);
    let run = audit(&kubeconfig, &["-A", "--chunk-size", "7", "-o", "json"]).await;
    assert_eq!(run.code, Some(1));
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["summary"]["runtimes"], json!(COUNT + OTHER_COUNT));
    let mut all = want.clone();
    all.extend(want_other.clone());
    assert_eq!(findings(&doc), all);

    // KIM's vocabulary switch makes the retired condition type clean, nothing else.
    let run = audit(
        &kubeconfig,
        &[
            "-n",
            NS,
            "--chunk-size",
            &page,
            "--compat",
            "kimHistory",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, Some(1));
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    let without_retired: BTreeMap<_, _> = want
        .iter()
        .filter(|(_, rules)| rules != &&vec!["condition-type-unknown".to_string()])
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(findings(&doc), without_retired);

    // Repaired (as the controller would write them), the namespace is clean: exit 0.
    let repaired: BTreeSet<&String> = want.keys().map(|(_, name)| name).collect();
    for name in &repaired {
        apis[0]
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status("Ready", &READY)})),
            )
            .await
            .unwrap();
    }
    let run = audit(&kubeconfig, &["-n", NS, "--chunk-size", &page]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr.trim_end(),
        format!("kim audit: {COUNT} Runtimes read in namespace {NS}, no violations")
    );
    eprintln!("real_audit: {:.1} s", t0.elapsed().as_secs_f64());
}

/// `rule n, …` of a JSON report's `byRule`, in its order (the summary line's).
fn summary_rules(doc: &Value) -> String {
    doc["summary"]["byRule"]
        .as_object()
        .expect("byRule")
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
