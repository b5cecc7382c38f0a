//! `kim audit` as an operator runs it: the real binary as a process, reading Runtimes over HTTP
//! from testenv's in-memory API server through a kubeconfig file (or `KUBECONFIG`, or
//! `~/.kube/config`), with paged lists; the rows, the JSON document and the exit codes it gives
//! for clean and broken stored statuses in two namespaces; and the one-line errors (exit 2) for a
//! cluster that cannot be read.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testenv::{FaultAction, FaultRule, Gvr, ServerConfig, ServerHandle, UserInfo, Verb};

const NS_A: &str = "kcp-system";
const NS_B: &str = "kyma-dev";
const TOKEN: &str = "audit-token-5f0c1e";

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// The sample `aws.yaml` of KIM's documentation (a realistic spec), as `ns/name`, with
/// `status` (`Value::Null`: none).
fn runtime(ns: &str, name: &str, status: Value) -> Value {
    let path = samples_dir().join("runtimes/aws.yaml");
    let text = std::fs::read_to_string(&path).expect("sample runtime");
    let mut obj: Value = serde_saphyr::from_str(&text).expect("sample parses");
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(ns);
    if !status.is_null() {
        obj["status"] = status;
    }
    obj
}

/// A condition as KIM writes it.
fn cond(t: &str, s: &str, r: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": format!("{t} {r}"),
           "lastTransitionTime": "2026-11-02T10:00:00Z", "observedGeneration": 1})
}

fn status(state: &str, conds: &[(&str, &str, &str)]) -> Value {
    let conds: Vec<Value> = conds.iter().map(|(t, s, r)| cond(t, s, r)).collect();
    json!({"state": state, "conditions": conds})
}

/// Clean and broken Runtimes in two namespaces (list order: namespace, then name).
fn fixture() -> Vec<Value> {
    let ready = [
        ("Provisioned", "True", "ShootCreationCompleted"),
        ("KubeconfigReady", "True", "KubeconfigCreated"),
        ("Configured", "True", "AdministratorsConfigured"),
    ];
    vec![
        // Clean: Ready with the three conditions it needs.
        runtime(NS_A, "rt-clean-ready", status("Ready", &ready)),
        // Ready in KIM's 2024-10 vocabulary: OidcConfigured is a retired condition type.
        runtime(
            NS_A,
            "rt-kim-2024-10",
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "True", "GardenerClusterCRReady"),
                    ("OidcConfigured", "True", "OidcConfigured"),
                    ("Configured", "True", "ConfigurationCompleted"),
                ],
            ),
        ),
        // Clean: never reconciled, no status.
        runtime(NS_A, "rt-new", Value::Null),
        // A reason the model does not know.
        runtime(
            NS_A,
            "rt-reason",
            status("Pending", &[("Provisioned", "Unknown", "ShootCreating")]),
        ),
        // Ready with a False KubeconfigReady and without Configured: two rows.
        runtime(
            NS_A,
            "rt-unconfigured",
            status(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "False", "KubernetesErr"),
                ],
            ),
        ),
        // conditions is an object, not a list.
        runtime(
            NS_B,
            "rt-conditions-map",
            json!({"state": "Pending", "conditions": cond("Provisioned", "Unknown", "Pending")}),
        ),
        // Clean: Failed with the False condition that stopped it.
        runtime(
            NS_B,
            "rt-failed-clean",
            status("Failed", &[("Provisioned", "False", "GardenerErr")]),
        ),
        // Failed without any False condition.
        runtime(
            NS_B,
            "rt-failed-no-false",
            status("Failed", &[("Provisioned", "Unknown", "Pending")]),
        ),
        // Failed in KIM's 2024-12 vocabulary: SerializationErr is a retired reason.
        runtime(
            NS_B,
            "rt-kim-2024-12",
            status(
                "Failed",
                &[
                    ("Provisioned", "True", "ProcessingCompleted"),
                    ("KubeconfigReady", "False", "SerializationErr"),
                ],
            ),
        ),
        // A state the model does not know.
        runtime(
            NS_B,
            "rt-state-unknown",
            status("Provisioning", &[("Provisioned", "Unknown", "Pending")]),
        ),
    ]
}

/// A testenv API server (on its own tokio runtime, so that the test thread can wait for
/// `kim` processes) and a temp dir with a kubeconfig pointing at it.
struct Env {
    _rt: tokio::runtime::Runtime,
    server: ServerHandle,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Env {
    fn start() -> Env {
        Env::start_with(ServerConfig::default())
    }

    fn start_with(config: ServerConfig) -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(testenv::start(config)).expect("testenv server");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(None)).unwrap();
        Env {
            _rt: rt,
            server,
            dir,
            kubeconfig,
        }
    }

    fn seeded() -> Env {
        let env = Env::start();
        env.seed(fixture());
        env
    }

    fn seed(&self, objs: Vec<Value>) {
        for o in objs {
            self.server.put(&Gvr::runtimes(), o).expect("seed");
        }
    }

    /// `kim audit --kubeconfig <the server's> ARGS` in an empty environment (`HOME` the temp
    /// dir, no `KUBECONFIG`, no `KIM_*`).
    fn audit(&self, args: &[&str]) -> Run {
        let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        self.audit_env(&all, &[])
    }

    /// `kim audit ARGS` with only `HOME` (the temp dir) and `env` set.
    fn audit_env(&self, args: &[&str], env: &[(&str, &Path)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
        cmd.arg("audit")
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run(cmd.output().expect("run kim audit"))
    }

    /// The list requests for Runtimes the server answered: the parameters of each, `key=value`
    /// in order.
    fn runtime_lists(&self) -> Vec<Vec<String>> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.verb == Some(Verb::List) && r.is("runtimes", None))
            .map(|r| {
                r.query
                    .split('&')
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect()
            })
            .collect()
    }
}

/// A finished `kim audit`.
struct Run(Output);

impl Run {
    fn code(&self) -> Option<i32> {
        self.0.status.code()
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.0.stdout)
            .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {}", self.stdout()))
    }

    /// Exit 1 or 0 with the report on stdout and exactly the summary line on stderr (no
    /// progress line: stderr is a pipe).
    fn report(&self, code: i32, summary: &str) -> &Run {
        assert_eq!(
            self.code(),
            Some(code),
            "stdout: {} stderr: {}",
            self.stdout(),
            self.stderr()
        );
        assert_eq!(self.stderr(), format!("{summary}\n"));
        self
    }

    /// Exit 2, nothing on stdout, one line on stderr containing every one of `parts`.
    fn unreadable(&self, parts: &[&str]) -> String {
        let e = self.stderr();
        assert_eq!(
            self.code(),
            Some(2),
            "stdout: {} stderr: {e}",
            self.stdout()
        );
        assert_eq!(self.stdout(), "", "nothing reported");
        assert!(e.starts_with("kim audit: "), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for p in parts {
            assert!(e.contains(p), "{p:?} missing in: {e}");
        }
        e
    }
}

/// `(namespace, name, state, [(rule, action, path)])` of each item of a JSON report.
type Row = (String, String, Value, Vec<(String, String, String)>);

fn rows_of(doc: &Value) -> Vec<Row> {
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let vs = i["violations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    (
                        v["rule"].as_str().unwrap().to_string(),
                        v["action"].as_str().unwrap().to_string(),
                        v["path"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (
                i["namespace"].as_str().unwrap().to_string(),
                i["name"].as_str().unwrap().to_string(),
                i["state"].clone(),
                vs,
            )
        })
        .collect()
}

/// `kim audit -A` of [`fixture`]: one row per violation, list order, kubectl's alignment.
const TABLE_ALL: &str = r#"NAMESPACE    NAME                 STATE          RULE                     ACTION   PATH                          MESSAGE
kcp-system   rt-kim-2024-10       Ready          condition-type-unknown   deny     status.conditions[2].type     status.conditions[2].type: "OidcConfigured" was retired by KIM after 2025-05-19 (declared 2024-09-10 to 2025-05-19); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: Provisioned, KubeconfigReady, Configured, Deprovisioned, KymaSystemNSCreated, OidcAndConfigMapConfigured, RuntimeBootstrapperReady, RegistryCacheConfigured, CustomAuditLogConfigured, AuditLogCredentialsCopied
kcp-system   rt-reason            Pending        reason-unknown           deny     status.conditions[0].reason   status.conditions[0].reason: reason "ShootCreating" is not allowed for type Provisioned; allowed: Initialised, Pending, ShootCreationCompleted, Processing, ProcessingCompleted, ConfigurationCompleted, GardenerErr, SeedNotFound, CreationErr, ConversionErr, ProcessingErr, AuditLogErr, CustomAuditLogErr, OidcConfigurationErr, RegistryCacheConfigured
kcp-system   rt-unconfigured      Ready          ready-requires           deny     status.conditions[1].status   status.state: Ready requires condition KubeconfigReady with status True, found False (KubernetesErr)
kcp-system   rt-unconfigured      Ready          ready-requires           deny     status.conditions             status.state: Ready requires condition Configured with status True, but it is missing
kyma-dev     rt-conditions-map    Pending        malformed                deny     status.conditions             status.conditions: must be a list, got {"type":"Provisioned","status":"Unknown","reason":"Pending","message":"Provis...
kyma-dev     rt-failed-no-false   Failed         failed-requires-false    deny     status.conditions             status.state: Failed requires at least one condition with status False (the error that stopped the runtime); found none
kyma-dev     rt-kim-2024-12       Failed         reason-unknown           deny     status.conditions[1].reason   status.conditions[1].reason: "SerializationErr" was retired by KIM after 2025-01-13 (declared 2024-07-02 to 2025-01-13); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: KubeconfigCreated, GardenerClusterCRCreated, GardenerClusterCRReady, KubernetesErr
kyma-dev     rt-state-unknown     Provisioning   state-unknown            deny     status.state                  status.state: unknown state "Provisioning"; allowed: Pending, Ready, Failed, Terminating
"#;

/// `kim audit -n kcp-system` of [`fixture`]: no NAMESPACE column.
const TABLE_NS_A: &str = r#"NAME              STATE     RULE                     ACTION   PATH                          MESSAGE
rt-kim-2024-10    Ready     condition-type-unknown   deny     status.conditions[2].type     status.conditions[2].type: "OidcConfigured" was retired by KIM after 2025-05-19 (declared 2024-09-10 to 2025-05-19); a stored condition may stay unchanged, writing it anew needs the compatibility switch kimHistory; allowed: Provisioned, KubeconfigReady, Configured, Deprovisioned, KymaSystemNSCreated, OidcAndConfigMapConfigured, RuntimeBootstrapperReady, RegistryCacheConfigured, CustomAuditLogConfigured, AuditLogCredentialsCopied
rt-reason         Pending   reason-unknown           deny     status.conditions[0].reason   status.conditions[0].reason: reason "ShootCreating" is not allowed for type Provisioned; allowed: Initialised, Pending, ShootCreationCompleted, Processing, ProcessingCompleted, ConfigurationCompleted, GardenerErr, SeedNotFound, CreationErr, ConversionErr, ProcessingErr, AuditLogErr, CustomAuditLogErr, OidcConfigurationErr, RegistryCacheConfigured
rt-unconfigured   Ready     ready-requires           deny     status.conditions[1].status   status.state: Ready requires condition KubeconfigReady with status True, found False (KubernetesErr)
rt-unconfigured   Ready     ready-requires           deny     status.conditions             status.state: Ready requires condition Configured with status True, but it is missing
"#;

const SUMMARY_ALL: &str = "kim audit: 10 Runtimes read in all namespaces, 7 with violations; 8 violations (8 deny): malformed 1, state-unknown 1, condition-type-unknown 1, reason-unknown 2, ready-requires 2, failed-requires-false 1";

/// `(namespace, name, rule, path)` of every row of [`TABLE_ALL`], for the reports that differ
/// from it only by messages or actions.
fn all_rows() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    vec![
        (
            NS_A,
            "rt-kim-2024-10",
            "condition-type-unknown",
            "status.conditions[2].type",
        ),
        (
            NS_A,
            "rt-reason",
            "reason-unknown",
            "status.conditions[0].reason",
        ),
        (
            NS_A,
            "rt-unconfigured",
            "ready-requires",
            "status.conditions[1].status",
        ),
        (
            NS_A,
            "rt-unconfigured",
            "ready-requires",
            "status.conditions",
        ),
        (NS_B, "rt-conditions-map", "malformed", "status.conditions"),
        (
            NS_B,
            "rt-failed-no-false",
            "failed-requires-false",
            "status.conditions",
        ),
        (
            NS_B,
            "rt-kim-2024-12",
            "reason-unknown",
            "status.conditions[1].reason",
        ),
        (NS_B, "rt-state-unknown", "state-unknown", "status.state"),
    ]
}

/// The same as [`all_rows`] from a JSON report, with each violation's action.
fn json_rows(doc: &Value) -> Vec<(String, String, String, String, String)> {
    rows_of(doc)
        .into_iter()
        .flat_map(|(ns, name, _, vs)| {
            vs.into_iter()
                .map(move |(rule, action, path)| (ns.clone(), name.clone(), rule, path, action))
        })
        .collect()
}

fn expect_rows(
    rows: &[(&str, &str, &str, &str)],
    action: &str,
) -> Vec<(String, String, String, String, String)> {
    rows.iter()
        .map(|(ns, name, rule, path)| {
            let a = action.to_string();
            (
                ns.to_string(),
                name.to_string(),
                rule.to_string(),
                path.to_string(),
                a,
            )
        })
        .collect()
}

#[test]
fn all_namespaces_table_has_one_row_per_violation_and_exit_1() {
    let env = Env::seeded();
    let r = env.audit(&["-A"]);
    r.report(1, SUMMARY_ALL);
    assert_eq!(r.stdout(), TABLE_ALL);
    // Every row is one line, the messages whole: the longest ends with the last type allowed.
    assert_eq!(r.stdout().lines().count(), 9);
    assert!(
        r.stdout()
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("AuditLogCredentialsCopied")
    );
    // One list request of 500, as kubectl pages by default.
    assert_eq!(env.runtime_lists(), vec![vec!["limit=500".to_string()]]);
}

#[test]
fn one_namespace_drops_the_namespace_column() {
    let env = Env::seeded();
    let r = env.audit(&["-n", NS_A]);
    r.report(
        1,
        "kim audit: 5 Runtimes read in namespace kcp-system, 3 with violations; 4 violations (4 deny): condition-type-unknown 1, reason-unknown 1, ready-requires 2",
    );
    assert_eq!(r.stdout(), TABLE_NS_A);
    let r = env.audit(&["--namespace", "no-such-namespace"]);
    r.report(
        0,
        "kim audit: 0 Runtimes read in namespace no-such-namespace, no violations",
    );
    assert_eq!(r.stdout(), "");
}

#[test]
fn json_report_carries_every_field_of_every_violation() {
    let env = Env::seeded();
    let r = env.audit(&["-A", "-o", "json"]);
    r.report(1, SUMMARY_ALL);
    let doc = r.json();
    assert_eq!(json_rows(&doc), expect_rows(&all_rows(), "deny"));
    let states: Vec<Value> = rows_of(&doc).into_iter().map(|(_, _, s, _)| s).collect();
    assert_eq!(
        states,
        [
            "Ready",
            "Pending",
            "Ready",
            "Pending",
            "Failed",
            "Failed",
            "Provisioning"
        ]
        .map(|s| json!(s))
    );
    assert_eq!(
        doc["summary"],
        json!({
            "namespace": null, "allNamespaces": true, "runtimes": 10,
            "runtimesWithViolations": 7, "violations": 8,
            "byRule": {"malformed": 1, "state-unknown": 1, "condition-type-unknown": 1,
                       "reason-unknown": 2, "ready-requires": 2, "failed-requires-false": 1},
            "byAction": {"deny": 8}
        })
    );
    // Each violation as the model gives it for the stored object: value, allowed and the
    // whole message, not cut.
    let policy = kim::status::Policy::builtin();
    let stored = fixture();
    for item in doc["items"].as_array().unwrap() {
        let obj = stored
            .iter()
            .find(|o| o["metadata"]["name"] == item["name"])
            .unwrap();
        let want: Vec<Value> =
            kim::status::validate_stored(&policy, &kim::status::Snapshot::of_object(obj))
                .into_iter()
                .map(|v| {
                    json!({"rule": v.rule, "action": v.action, "path": v.path,
                           "value": v.value, "allowed": v.allowed, "message": v.message})
                })
                .collect();
        assert_eq!(item["violations"], json!(want), "{}", item["name"]);
    }
    // The table shows the same messages.
    let table = env.audit(&["-A"]).stdout();
    for m in doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["violations"].as_array().unwrap())
    {
        let m = m["message"].as_str().unwrap();
        assert!(table.lines().any(|l| l.ends_with(m)), "{m}");
    }
    // One namespace: the summary names it.
    let doc = env.audit(&["-n", NS_B, "-o", "json"]).json();
    assert_eq!(doc["summary"]["namespace"], NS_B);
    assert_eq!(doc["summary"]["allNamespaces"], false);
    assert_eq!(doc["summary"]["runtimes"], 5);
}

#[test]
fn kim_history_switch_makes_the_retired_names_clean() {
    let env = Env::seeded();
    let r = env.audit(&["-A", "--compat", "kimHistory", "-o", "json"]);
    r.report(
        1,
        "kim audit: 10 Runtimes read in all namespaces, 5 with violations; 6 violations (6 deny): malformed 1, state-unknown 1, reason-unknown 1, ready-requires 2, failed-requires-false 1",
    );
    let without_retired: Vec<_> = all_rows()
        .into_iter()
        .filter(|(_, name, _, _)| !name.starts_with("rt-kim-"))
        .collect();
    assert_eq!(json_rows(&r.json()), expect_rows(&without_retired, "deny"));
    // A namespace whose only broken Runtime speaks KIM's retired vocabulary is clean with it.
    let env = Env::start();
    env.seed(
        fixture()
            .into_iter()
            .filter(|o| {
                let name = o["metadata"]["name"].as_str().unwrap();
                name == "rt-kim-2024-10" || name == "rt-clean-ready" || name == "rt-new"
            })
            .collect(),
    );
    env.audit(&["-n", NS_A]).report(
        1,
        "kim audit: 3 Runtimes read in namespace kcp-system, 1 with violations; 1 violation (1 deny): condition-type-unknown 1",
    );
    let r = env.audit(&["-n", NS_A, "--compat", "kimHistory"]);
    r.report(
        0,
        "kim audit: 3 Runtimes read in namespace kcp-system, no violations",
    );
    assert_eq!(r.stdout(), "");
}

#[test]
fn warn_actions_are_reported_and_still_exit_1() {
    let env = Env::seeded();
    let r = env.audit(&["-A", "--enforcement", "warn", "-o", "json"]);
    r.report(1, &SUMMARY_ALL.replace("(8 deny)", "(8 warn)"));
    assert_eq!(json_rows(&r.json()), expect_rows(&all_rows(), "warn"));
    let r = env.audit(&["-A", "--rule-action", "reason-unknown=warn,malformed=warn"]);
    r.report(1, &SUMMARY_ALL.replace("(8 deny)", "(5 deny, 3 warn)"));
    let actions: Vec<(String, String)> = r
        .stdout()
        .lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[3].to_string(), cols[4].to_string())
        })
        .collect();
    for (rule, action) in &actions {
        let want = if rule == "reason-unknown" || rule == "malformed" {
            "warn"
        } else {
            "deny"
        };
        assert_eq!(action, want, "{rule}");
    }
    assert_eq!(actions.len(), 8);
}

/// A kubeconfig with three contexts on the server: `dev` (current, namespace kyma-dev),
/// `empty` (namespace nothing-here) and `plain` (no namespace).
fn contexts_kubeconfig(server: &ServerHandle) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {url}\n\
         contexts:\n- name: dev\n  context: {{cluster: testenv, user: audit, namespace: {NS_B}}}\n\
         - name: empty\n  context: {{cluster: testenv, user: audit, namespace: nothing-here}}\n\
         - name: plain\n  context: {{cluster: testenv, user: audit}}\n\
         current-context: dev\nusers:\n- name: audit\n  user: {{}}\n",
        url = server.url()
    )
}

#[test]
fn namespace_and_kubeconfig_are_found_as_kubectl_finds_them() {
    let env = Env::seeded();
    let file = env.dir.path().join("contexts.yaml");
    std::fs::write(&file, contexts_kubeconfig(&env.server)).unwrap();
    let f = file.to_str().unwrap();
    let ns_b = "kim audit: 5 Runtimes read in namespace kyma-dev, 4 with violations; 4 violations (4 deny): malformed 1, state-unknown 1, reason-unknown 1, failed-requires-false 1";
    // The current context's namespace.
    let r = env.audit_env(&["--kubeconfig", f], &[]);
    r.report(1, ns_b);
    assert!(
        r.stdout()
            .lines()
            .skip(1)
            .all(|l| !l.starts_with("rt-kim-2024-10"))
    );
    // -n wins over the context's namespace.
    env.audit_env(&["--kubeconfig", f, "-n", NS_A], &[]).report(
        1,
        "kim audit: 5 Runtimes read in namespace kcp-system, 3 with violations; 4 violations (4 deny): condition-type-unknown 1, reason-unknown 1, ready-requires 2",
    );
    // --context picks another context; without a namespace it is `default`.
    env.audit_env(&["--kubeconfig", f, "--context", "empty"], &[])
        .report(
            0,
            "kim audit: 0 Runtimes read in namespace nothing-here, no violations",
        );
    env.audit_env(&["--kubeconfig", f, "--context", "plain"], &[])
        .report(
            0,
            "kim audit: 0 Runtimes read in namespace default, no violations",
        );
    // KUBECONFIG when there is no --kubeconfig, then ~/.kube/config.
    env.audit_env(&[], &[("KUBECONFIG", &file)]).report(1, ns_b);
    std::fs::create_dir(env.dir.path().join(".kube")).unwrap();
    std::fs::copy(&file, env.dir.path().join(".kube/config")).unwrap();
    env.audit_env(&[], &[]).report(1, ns_b);
    env.audit_env(&["--context", "empty"], &[]).report(
        0,
        "kim audit: 0 Runtimes read in namespace nothing-here, no violations",
    );
    // A context that is not there.
    env.audit_env(&["--kubeconfig", f, "--context", "prod"], &[])
        .unreadable(&["--kubeconfig", "prod"]);
}

#[test]
fn pages_of_chunk_size_report_every_runtime_exactly_once() {
    let env = Env::start();
    let broken: Vec<String> = (0..23).map(|i| format!("rt-broken-{i:02}")).collect();
    let mut objs: Vec<Value> = broken
        .iter()
        .map(|n| runtime("paged", n, status("Provisioning", &[])))
        .collect();
    for i in 0..4 {
        objs.push(runtime(
            "paged",
            &format!("rt-clean-{i}"),
            status("Pending", &[("Provisioned", "Unknown", "Pending")]),
        ));
    }
    env.seed(objs);
    let summary = "kim audit: 27 Runtimes read in namespace paged, 23 with violations; 23 violations (23 deny): state-unknown 23";
    let r = env.audit(&["-n", "paged", "--chunk-size", "5", "-o", "json"]);
    r.report(1, summary);
    let names: Vec<String> = rows_of(&r.json())
        .into_iter()
        .map(|(_, n, _, _)| n)
        .collect();
    assert_eq!(names, broken, "each broken Runtime once, in list order");
    // 27 Runtimes in pages of 5: six requests, each after the first with the token of the one
    // before.
    let lists = env.runtime_lists();
    assert_eq!(lists.len(), 6, "{lists:?}");
    assert_eq!(lists[0], ["limit=5"], "{lists:?}");
    let mut tokens = BTreeSet::new();
    for q in &lists[1..] {
        assert_eq!(q.len(), 2, "{q:?}");
        assert_eq!(q[0], "limit=5", "{q:?}");
        assert!(q[1].starts_with("continue="), "{q:?}");
        tokens.insert(q[1].clone());
    }
    assert_eq!(tokens.len(), 5, "a new token each page: {lists:?}");
    // --chunk-size 0: one request without a limit, the same report.
    env.server.clear_requests();
    let r0 = env.audit(&["-n", "paged", "--chunk-size", "0", "-o", "json"]);
    r0.report(1, summary);
    assert_eq!(r0.json(), r.json());
    assert_eq!(env.runtime_lists(), vec![Vec::<String>::new()]);
    // Paging across namespaces (-A, pages of 3) gives the report of one request.
    let env = Env::seeded();
    let paged = env.audit(&["-A", "--chunk-size", "3", "-o", "json"]);
    paged.report(1, SUMMARY_ALL);
    assert_eq!(
        paged.json(),
        env.audit(&["-A", "--chunk-size", "0", "-o", "json"]).json()
    );
    assert_eq!(env.runtime_lists().len(), 4 + 1);
}

#[test]
fn an_expired_list_is_reported_not_truncated() {
    let env = Env::start();
    env.seed(
        (0..12)
            .map(|i| runtime("paged", &format!("rt-{i:02}"), status("Provisioning", &[])))
            .collect(),
    );
    // While the pages are read, a Runtime changes and the server compacts its history (as
    // etcd does): the next page's token is older than anything the server keeps.
    let server = env.server.clone();
    env.server.set_fault_fn(move |req| {
        if req.verb == Some(Verb::List) && req.query.split('&').any(|p| p.starts_with("continue="))
        {
            server
                .modify(&Gvr::runtimes(), Some("paged"), "rt-00", |o| {
                    o["metadata"]["labels"]["audited"] = json!("changed");
                })
                .unwrap();
            server.compact_history();
        }
        None
    });
    let r = env.audit(&["-n", "paged", "--chunk-size", "5"]);
    r.unreadable(&["expired after 5 Runtimes", "410 Expired", "rerun kim audit"]);
    assert_eq!(env.runtime_lists().len(), 2);
    // Rerun: the cluster is quiet again.
    env.server.set_fault_fn(|_| None);
    env.audit(&["-n", "paged", "--chunk-size", "5"]).report(
        1,
        "kim audit: 12 Runtimes read in namespace paged, 12 with violations; 12 violations (12 deny): state-unknown 12",
    );
}

/// A kubeconfig at `url`, with `token`, written into `env`'s temp dir.
fn kubeconfig_at(env: &Env, name: &str, url: &str, token: Option<&str>) -> PathBuf {
    let path = env.dir.path().join(name);
    std::fs::write(&path, testenv::kubeconfig_yaml(url, "testenv", token)).unwrap();
    path
}

/// Waits until nothing accepts connections at `url` any more (a server that was told to stop).
fn wait_closed(url: &str) {
    let addr = url.trim_start_matches("http://").to_string();
    for _ in 0..500 {
        if std::net::TcpStream::connect(&addr).is_err() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{url} still accepts connections");
}

#[test]
fn a_cluster_that_cannot_be_read_is_exit_2_with_one_line() {
    // Server stopped.
    let env = Env::seeded();
    env.server.shutdown();
    wait_closed(env.server.url());
    let url = env.server.url().to_string();
    env.audit(&["-A"]).unreadable(&["cannot reach", &url]);

    // Wrong URL: a port nothing listens on.
    let env = Env::seeded();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let wrong = format!("http://127.0.0.1:{port}");
    let kc = kubeconfig_at(&env, "wrong", &wrong, None);
    env.audit_env(&["--kubeconfig", kc.to_str().unwrap()], &[])
        .unreadable(&["cannot reach", &wrong]);

    // 401: a token the server does not know; the token is never printed.
    let kc = kubeconfig_at(&env, "stale", env.server.url(), Some(TOKEN));
    let e = env
        .audit_env(&["--kubeconfig", kc.to_str().unwrap(), "-A"], &[])
        .unreadable(&["answered 401", "credentials were not accepted"]);
    assert!(!e.contains(TOKEN), "{e}");

    // 403, as kube-apiserver's RBAC answers it: the error names the permission kim audit needs.
    env.server.add_user(
        TOKEN,
        UserInfo::new("system:serviceaccount:kcp-system:auditor", &[]),
    );
    let forbidden = "runtimes.infrastructuremanager.kyma-project.io is forbidden: User \"system:serviceaccount:kcp-system:auditor\" cannot list resource \"runtimes\" in API group \"infrastructuremanager.kyma-project.io\" at the cluster scope";
    env.server.add_fault(
        FaultRule::new(FaultAction::Fail {
            code: 403,
            message: Some(forbidden.to_string()),
            retry_after: None,
        })
        .verb(Verb::List)
        .resource("runtimes")
        .user("system:serviceaccount:kcp-system:auditor"),
    );
    let e = env
        .audit_env(&["--kubeconfig", kc.to_str().unwrap(), "-A"], &[])
        .unreadable(&[
            "answered 403 Forbidden",
            forbidden,
            "needs RBAC `list` on `runtimes.infrastructuremanager.kyma-project.io` in every namespace",
        ]);
    assert!(!e.contains(TOKEN), "{e}");
    env.audit_env(&["--kubeconfig", kc.to_str().unwrap(), "-n", NS_A], &[])
        .unreadable(&[
            "`list` on `runtimes.infrastructuremanager.kyma-project.io` in namespace kcp-system",
        ]);

    // 404: the Runtime CRD is not installed.
    let env = Env::start_with(ServerConfig {
        resources: testenv::default_resources()
            .into_iter()
            .filter(|r| r.gvr() != Gvr::runtimes())
            .collect(),
        ..ServerConfig::default()
    });
    env.audit(&["-A"]).unreadable(&[
        "answered 404",
        "/apis/infrastructuremanager.kyma-project.io/v1/runtimes",
        "Runtime CRD",
        "not installed",
    ]);
}

#[test]
fn bad_kubeconfig_and_flags_are_exit_2_without_secrets() {
    let env = Env::start();
    // Not YAML, with a token in it: only the position is given.
    let bad = env.dir.path().join("bad");
    std::fs::write(
        &bad,
        format!("apiVersion: v1\nusers:\n- name: x\n  user: {{token: [{TOKEN}}}\n"),
    )
    .unwrap();
    let e = env
        .audit_env(&["--kubeconfig", bad.to_str().unwrap()], &[])
        .unreadable(&["--kubeconfig", "not a valid kubeconfig", "line 4"]);
    assert!(!e.contains(TOKEN), "{e}");
    // YAML of the wrong shape, a key quoted in it.
    std::fs::write(
        &bad,
        format!("apiVersion: v1\nusers:\n- name: x\n  user:\n    token: {{secret: {TOKEN}}}\n"),
    )
    .unwrap();
    let e = env
        .audit_env(&["--kubeconfig", bad.to_str().unwrap()], &[])
        .unreadable(&["not a valid kubeconfig"]);
    assert!(!e.contains(TOKEN), "{e}");
    // The same through KUBECONFIG.
    let e = env
        .audit_env(&[], &[("KUBECONFIG", &bad)])
        .unreadable(&["KUBECONFIG file ", "not a valid kubeconfig"]);
    assert!(!e.contains(TOKEN), "{e}");
    // A file that is not there; no kubeconfig at all and not in a cluster.
    env.audit_env(&["--kubeconfig", "/nonexistent/kubeconfig"], &[])
        .unreadable(&["--kubeconfig /nonexistent/kubeconfig", "No such file"]);
    env.audit_env(&[], &[])
        .unreadable(&["no kubeconfig", "not running in a cluster"]);
    // A policy file that is not there, and -n with -A (clap's usage error, also 2).
    env.audit(&["--policy-file", "/nonexistent/policy.yaml"])
        .unreadable(&["/nonexistent/policy.yaml"]);
    // Not a namespace name: never sent as a path.
    for ns in ["", "kcp/system", "KCP"] {
        env.audit(&["-n", ns])
            .unreadable(&["--namespace", "is not a namespace name"]);
    }
    assert!(env.runtime_lists().is_empty());
    let r = env.audit(&["-n", NS_A, "-A"]);
    assert_eq!(r.code(), Some(2), "{}", r.stderr());
    assert!(r.stderr().contains("cannot be used with"), "{}", r.stderr());
}

/// The README's example ("Auditing stored Runtimes") is this fixture's output, as printed.
#[test]
fn readme_example_is_the_real_output() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let cmd = "```console\n$ kim audit -n kyma-dev\n";
    let at = readme
        .find(cmd)
        .expect("README shows kim audit -n kyma-dev")
        + cmd.len();
    let shown = &readme[at..at + readme[at..].find("```").unwrap()];
    let r = Env::seeded().audit(&["-n", NS_B]);
    assert_eq!(r.code(), Some(1));
    assert_eq!(
        shown,
        format!("{}{}", r.stdout(), r.stderr()),
        "README's kim audit example is stale"
    );
}
