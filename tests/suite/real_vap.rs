//! `kim policy --format vap` on a real kube-apiserver: the generated ValidatingAdmissionPolicy
//! and its binding are accepted (the CRD sets no `maxItems` on `status.conditions`), and, for a
//! table of status writes, the policy's verdict equals kim's own ([`kim::status::validate`])
//! for the rules the policy covers. No webhook is installed: what the server refuses, the CRD
//! schema or the policy refused.

use crate::support::real::{repo, runtime_resource};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kim::status::{self, Action, Facts, Policy, Snapshot};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane};

const NS: &str = "vap";
const LTT: &str = "2026-01-01T00:00:00Z";

fn cond(t: &str, s: &str, r: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": "m", "lastTransitionTime": LTT})
}

fn pp() -> Value {
    cond("Provisioned", "Unknown", "Pending")
}

fn ready3() -> Vec<Value> {
    vec![
        cond("Provisioned", "True", "ShootCreationCompleted"),
        cond("KubeconfigReady", "True", "KubeconfigCreated"),
        cond("Configured", "True", "AdministratorsConfigured"),
    ]
}

fn st(state: &str, conds: Vec<Value>) -> Option<Value> {
    Some(json!({"state": state, "conditions": conds}))
}

/// The same conditions with the first one's message changed (a write the model judges as
/// leaving every condition unchanged).
fn touched(state: &str, mut conds: Vec<Value>) -> Option<Value> {
    conds[0]["message"] = json!("changed");
    st(state, conds)
}

/// Who writes.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Writer {
    Admin,
    Mallory,
}

pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) old: Option<Value>,
    pub(crate) new: Option<Value>,
    pub(crate) deleting: bool,
    pub(crate) writer: Writer,
}

fn case(name: &'static str, old: Option<Value>, new: Option<Value>) -> Case {
    Case {
        name,
        old,
        new,
        deleting: false,
        writer: Writer::Admin,
    }
}

/// Status writes (stored status, written status) covering every rule the policy expresses.
pub(crate) fn cases() -> Vec<Case> {
    let bogus = cond("Bogus", "True", "Whatever");
    let bad_reason = cond("Provisioned", "Unknown", "NoSuchReason");
    let many: Vec<Value> = (0..64)
        .map(|i| cond(&format!("Extra{i}"), "True", "Some"))
        .collect();
    let mut with_deprov = ready3();
    with_deprov.push(cond("Deprovisioned", "Unknown", "GardenerShootDeleted"));
    let completed = |v: bool| {
        let mut s = st("Ready", ready3()).unwrap();
        s["provisioningCompleted"] = json!(v);
        Some(s)
    };
    let deleting = |mut c: Case| {
        c.deleting = true;
        c
    };
    let mallory = |mut c: Case| {
        c.writer = Writer::Mallory;
        c
    };
    vec![
        case("first-write-pending", None, st("Pending", vec![pp()])),
        case("first-write-ready", None, st("Ready", ready3())),
        case(
            "two-rules-at-once",
            st("Pending", vec![pp()]),
            st("Ready", vec![pp(), cond("Bogus", "True", "Whatever")]),
        ),
        case(
            "first-write-failed",
            None,
            st("Failed", vec![cond("Provisioned", "False", "CreationErr")]),
        ),
        case(
            "pending-to-ready",
            st("Pending", vec![pp()]),
            st("Ready", ready3()),
        ),
        case(
            "ready-without-conditions",
            st("Pending", vec![pp()]),
            st("Ready", vec![pp()]),
        ),
        case(
            "failed-without-false",
            st("Pending", vec![pp()]),
            st("Failed", vec![pp()]),
        ),
        case(
            "failed-to-ready",
            st("Failed", vec![cond("Provisioned", "False", "CreationErr")]),
            st("Ready", ready3()),
        ),
        case(
            "terminating-not-deleting",
            st("Ready", ready3()),
            st("Terminating", with_deprov.clone()),
        ),
        deleting(case(
            "terminating-while-deleting",
            st("Ready", ready3()),
            st("Terminating", with_deprov.clone()),
        )),
        deleting(case(
            "terminating-without-deprovisioned",
            st("Ready", ready3()),
            st("Terminating", ready3()),
        )),
        deleting(case(
            "terminating-is-final",
            st("Terminating", with_deprov.clone()),
            st("Pending", vec![pp()]),
        )),
        case(
            "terminating-stays-not-deleting",
            st("Terminating", with_deprov.clone()),
            touched("Terminating", with_deprov.clone()),
        ),
        case("status-removed", st("Pending", vec![pp()]), None),
        case(
            "unknown-state",
            st("Pending", vec![pp()]),
            st("Provisioning", vec![pp()]),
        ),
        case(
            "unknown-type",
            st("Pending", vec![pp()]),
            st("Pending", vec![pp(), bogus.clone()]),
        ),
        case(
            "unknown-type-unchanged",
            st("Pending", vec![pp(), bogus.clone()]),
            touched("Pending", vec![pp(), bogus.clone()]),
        ),
        case(
            "duplicate-type",
            st("Pending", vec![pp()]),
            st(
                "Pending",
                vec![pp(), cond("Provisioned", "Unknown", "Initialised")],
            ),
        ),
        case(
            "duplicate-type-unchanged",
            st(
                "Pending",
                vec![pp(), cond("Provisioned", "Unknown", "Initialised")],
            ),
            touched(
                "Pending",
                vec![pp(), cond("Provisioned", "Unknown", "Initialised")],
            ),
        ),
        case(
            "unknown-reason",
            st("Pending", vec![pp()]),
            st("Pending", vec![bad_reason.clone()]),
        ),
        case(
            "unknown-reason-unchanged",
            st("Pending", vec![bad_reason.clone()]),
            touched("Pending", vec![bad_reason.clone()]),
        ),
        case(
            "reason-with-wrong-status",
            st("Pending", vec![pp()]),
            st("Pending", vec![cond("Provisioned", "True", "Pending")]),
        ),
        case(
            "ready-requirement-unchanged",
            st("Ready", vec![pp()]),
            touched("Ready", vec![pp()]),
        ),
        case(
            "failed-requirement-unchanged",
            st("Failed", vec![pp()]),
            touched("Failed", vec![pp()]),
        ),
        case(
            "provisioning-completed-back",
            completed(true),
            completed(false),
        ),
        case(
            "provisioning-completed-set",
            completed(false),
            completed(true),
        ),
        mallory(case(
            "writer-not-allowed",
            st("Pending", vec![pp()]),
            touched("Pending", vec![pp()]),
        )),
        mallory(case(
            "writer-not-allowed-no-change",
            st("Pending", vec![pp()]),
            st("Pending", vec![pp()]),
        )),
        case(
            "ltt-changed-without-status-change",
            st("Pending", vec![pp()]),
            st(
                "Pending",
                vec![{
                    let mut c = pp();
                    c["lastTransitionTime"] = json!("2026-02-01T00:00:00Z");
                    c
                }],
            ),
        ),
        case(
            "ltt-same-instant-other-notation",
            st("Pending", vec![pp()]),
            st(
                "Pending",
                vec![{
                    let mut c = pp();
                    c["lastTransitionTime"] = json!("2026-01-01T00:00:00+00:00");
                    c["message"] = json!("changed");
                    c
                }],
            ),
        ),
        case(
            "ltt-moved-backwards",
            st("Pending", vec![pp()]),
            st(
                "Pending",
                vec![{
                    let mut c = cond("Provisioned", "False", "GardenerErr");
                    c["lastTransitionTime"] = json!("2025-01-01T00:00:00Z");
                    c
                }],
            ),
        ),
        case(
            "64-conditions-unchanged",
            st("Pending", many.clone()),
            touched("Pending", many.clone()),
        ),
        case(
            "64-conditions-new",
            st("Pending", vec![pp()]),
            st("Pending", many.clone()),
        ),
    ]
}

/// What kim or the server made of a write.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Allowed,
    /// Denied by the policy; the rule id its message starts with.
    Policy(String),
    /// Refused before the policy (the CRD schema); the server's message.
    Schema(String),
}

/// Server-side apply of an admissionregistration.k8s.io/v1 object: a ValidatingAdmissionPolicy,
/// its binding, or a Validating/MutatingWebhookConfiguration.
pub(crate) async fn apply(client: &kube::Client, doc: &Value) -> Result<(), String> {
    let gvk = kube::api::GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        doc["kind"].as_str().unwrap(),
    );
    let plural = match doc["kind"].as_str().unwrap() {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        _ => "validatingadmissionpolicybindings",
    };
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let name = doc["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("kim-test").force(),
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("{name}: {e}"))
}

fn server_verdict(result: kube::Result<DynamicObject>) -> Verdict {
    match result {
        Ok(_) => Verdict::Allowed,
        Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => {
            let rule = s
                .message
                .split_once("denied request: [")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(rule, _)| rule.to_string())
                .unwrap_or_else(|| panic!("policy denial without a rule id: {}", s.message));
            eprintln!("  policy denial: {}", s.message);
            Verdict::Policy(rule)
        }
        Err(kube::Error::Api(s)) => Verdict::Schema(format!("{} {}", s.code, s.message)),
        Err(e) => panic!("status write failed: {e}"),
    }
}

async fn stored(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get Runtime")).unwrap()
}

/// Writes `status` (or removes it) with a PUT of the stored object.
async fn put_status(
    api: &Api<DynamicObject>,
    old: &Value,
    status: Option<&Value>,
) -> kube::Result<DynamicObject> {
    let mut obj = old.clone();
    match status {
        Some(s) => obj["status"] = s.clone(),
        None => {
            obj.as_object_mut().unwrap().remove("status");
        }
    }
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.replace_status(&name, &PostParams::default(), &obj)
        .await
}

/// A control plane with kim's CRD, namespace [`NS`] and user Mallory, whom RBAC lets write
/// Runtime status (only the policy's writer rule stops her). Returns the admin's and
/// Mallory's Runtime APIs and her certificate.
async fn control_plane() -> (
    ControlPlane,
    Api<DynamicObject>,
    Api<DynamicObject>,
    ClientCert,
) {
    let cp = ControlPlane::start().expect("control plane");
    cp.create_namespace(NS).await;
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).expect("crd.yaml");
    assert!(
        !crd.contains("maxItems"),
        "the CRD sets no maxItems anywhere"
    );
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    let admin = cp.admin().await;
    let runtimes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &runtime_resource());

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"],
                   "resources": ["runtimes", "runtimes/status"],
                   "verbs": ["get", "update", "patch"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "runtime-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("ClusterRoleBinding");
    let mallory_cert: ClientCert = cp.user("mallory", &[]);
    let mallory: Api<DynamicObject> =
        Api::namespaced_with(cp.client(&mallory_cert).await, NS, &runtime_resource());

    (cp, runtimes, mallory, mallory_cert)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_policy_judges_status_writes_as_kim_does() {
    let (cp, runtimes, mallory, _) = control_plane().await;
    let admin = cp.admin().await;
    // Before the policy: every Runtime with its stored status (some break the model on purpose).
    let sample = std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap();
    let sample: Value = serde_saphyr::from_str(&sample).unwrap();
    let cases = cases();
    let make = |name: &str, deleting: bool| {
        let mut obj = sample.clone();
        obj["metadata"]["name"] = json!(name);
        obj["metadata"]["namespace"] = json!(NS);
        if deleting {
            obj["metadata"]["finalizers"] = json!(["kim.test/hold"]);
        }
        serde_json::from_value::<DynamicObject>(obj).unwrap()
    };
    for c in cases
        .iter()
        .map(|c| (c.name, c.deleting, c.old.as_ref()))
        .chain([("policy-probe", false, st("Pending", vec![pp()]).as_ref())])
    {
        let (name, deleting, old) = c;
        runtimes
            .create(&PostParams::default(), &make(name, deleting))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
        if let Some(old) = old {
            let obj = stored(&runtimes, name).await;
            put_status(&runtimes, &obj, Some(old))
                .await
                .unwrap_or_else(|e| panic!("{name}: storing the old status: {e}"));
        }
        if deleting {
            runtimes
                .delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
        }
    }

    // The policy in force is the built-in one.
    let policy = Policy::builtin();
    for doc in status::vap::objects(&policy) {
        apply(&admin, &doc)
            .await
            .unwrap_or_else(|e| panic!("the server refuses the generated policy: {e}"));
    }
    // In effect once Mallory's writes (each a change) are refused by the writer rule.
    let started = Instant::now();
    for attempt in 0.. {
        let obj = stored(&runtimes, "policy-probe").await;
        let mut conds = vec![pp()];
        conds[0]["message"] = json!(format!("probe {attempt}"));
        let verdict =
            server_verdict(put_status(&mallory, &obj, st("Pending", conds).as_ref()).await);
        if verdict == Verdict::Policy("writer".into()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the policy is not in effect after 30 s: {verdict:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let vaps = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        ),
        "validatingadmissionpolicies",
    );
    let vap = Api::<DynamicObject>::all_with(admin.clone(), &vaps)
        .get(status::vap::DENY_NAME)
        .await
        .expect("the policy");
    eprintln!(
        "policy status: {}",
        serde_json::to_string(&vap.data["status"]).unwrap()
    );

    let mut report = Vec::new();
    let mut mismatches = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in &cases {
        let api = if c.writer == Writer::Mallory {
            &mallory
        } else {
            &runtimes
        };
        let old = stored(&runtimes, c.name).await;
        let mut new = old.clone();
        match &c.new {
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().unwrap().remove("status");
            }
        }
        let facts = match c.writer {
            Writer::Admin => Facts {
                groups: vec!["system:masters".into(), "system:authenticated".into()],
                ..Facts::by("testenv-admin", chrono::Utc::now())
            },
            Writer::Mallory => Facts {
                groups: vec!["system:authenticated".into()],
                ..Facts::by("mallory", chrono::Utc::now())
            },
        };
        let violations = status::validate(
            &policy,
            Some(&Snapshot::of_object(&old)),
            &Snapshot::of_object(&new),
            &facts,
        );
        let mut kim_denies: Vec<String> = violations
            .iter()
            .filter(|v| v.action == Action::Deny)
            .map(|v| v.rule.as_str().to_string())
            .collect();
        kim_denies.dedup();
        let server = server_verdict(put_status(api, &old, c.new.as_ref()).await);
        let agrees = match &server {
            Verdict::Allowed => kim_denies.is_empty(),
            Verdict::Policy(rule) => kim_denies.contains(rule),
            Verdict::Schema(_) => kim_denies.iter().any(|r| {
                [
                    "state-unknown",
                    "state-required",
                    "malformed",
                    "condition-shape",
                ]
                .contains(&r.as_str())
            }),
        };
        let line = format!("{}: server {server:?}; kim denies {kim_denies:?}", c.name);
        eprintln!("{line}");
        report.push(line.clone());
        if !agrees {
            mismatches.push(line);
        }
        if let Verdict::Policy(rule) = server {
            seen.insert(rule);
        }
    }
    // Every rule the policy covers denied at least one write on the server (state-unknown is
    // refused by the CRD schema first).
    let unseen: Vec<&str> = status::vap::validations(&policy)
        .iter()
        .map(|v| v.rule.as_str())
        .filter(|r| *r != "state-unknown" && !seen.contains(*r))
        .collect();
    assert!(unseen.is_empty(), "no case denied by {unseen:?}");
    assert!(
        mismatches.is_empty(),
        "the policy and kim disagree:\n{}\nall cases:\n{}",
        mismatches.join("\n"),
        report.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_in_warn_mode_lets_the_write_through_with_a_warning() {
    let (cp, runtimes, _, mallory_cert) = control_plane().await;
    let admin = cp.admin().await;
    let name = "warned";
    let mut obj: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap();
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(NS);
    runtimes
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .expect("create Runtime");
    let obj = stored(&runtimes, name).await;
    put_status(&runtimes, &obj, st("Pending", vec![pp()]).as_ref())
        .await
        .expect("first status");

    let policy =
        Policy::builtin().with_rule_action(status::RuleId::Writer, status::Enforcement::Warn);
    let docs = status::vap::objects(&policy);
    assert_eq!(docs.len(), 4, "a deny pair and a warn pair");
    for doc in &docs {
        apply(&admin, doc)
            .await
            .unwrap_or_else(|e| panic!("the server refuses the generated policy: {e}"));
    }
    let http = cp.http_client(&mallory_cert).expect("http client");
    let url = format!(
        "{}/apis/infrastructuremanager.kyma-project.io/v1/namespaces/{NS}/runtimes/{name}/status",
        cp.url()
    );
    let started = Instant::now();
    for attempt in 0.. {
        let mut obj = stored(&runtimes, name).await;
        obj["status"]["conditions"][0]["message"] = json!(format!("by mallory {attempt}"));
        let answer = http.put(&url).json(&obj).send().await.expect("PUT status");
        let code = answer.status().as_u16();
        let warnings: Vec<String> = answer
            .headers()
            .get_all("warning")
            .iter()
            .map(|h| h.to_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(code, 200, "a rule in warn mode does not deny: {warnings:?}");
        if let Some(w) = warnings.iter().find(|w| w.contains("[writer]")) {
            eprintln!("warning: {w}");
            assert!(w.contains(status::vap::WARN_NAME), "{w}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no [writer] warning after 30 s: {warnings:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `apiserver_admission_controller_admission_duration_seconds` of kube-apiserver's
/// ValidatingAdmissionPolicy plugin for allowed UPDATEs: (sum in seconds, count), from its
/// `/metrics`. (`apiserver_validating_admission_policy_check_duration_seconds` records
/// denials only.)
async fn policy_plugin_seconds(client: &kube::Client) -> (f64, u64) {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.expect("GET /metrics");
    let metric = "apiserver_admission_controller_admission_duration_seconds";
    let labels = [
        "name=\"ValidatingAdmissionPolicy\"",
        "operation=\"UPDATE\"",
        "rejected=\"false\"",
    ];
    let (mut sum, mut count) = (0.0, 0);
    for line in text.lines() {
        if !line.starts_with(metric) || !labels.iter().all(|l| line.contains(l)) {
            continue;
        }
        let value = line.rsplit(' ').next().unwrap_or_default();
        if line.starts_with(&format!("{metric}_sum{{")) {
            sum += value.parse::<f64>().unwrap_or(0.0);
        } else if line.starts_with(&format!("{metric}_count{{")) {
            count += value.parse::<u64>().unwrap_or(0);
        }
    }
    (sum, count)
}

/// The generated policy's cost on the server: N writes on Runtimes with 10 and with 64
/// conditions (kept, the message changed: every rule reads every condition and passes), each
/// allowed; kube-apiserver's own duration histogram of its ValidatingAdmissionPolicy plugin
/// counts each one, and the mean time per write is printed. kube-apiserver exports no runtime
/// CEL cost; the runtime budget per call holds, or the writes would fail with "cost budget
/// exceeded".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_check_time_for_10_and_64_conditions_from_kube_apiservers_metrics() {
    const WRITES: u64 = 40;
    let (cp, runtimes, mallory, _) = control_plane().await;
    let admin = cp.admin().await;
    let mut obj: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap();
    obj["metadata"]["namespace"] = json!(NS);
    let sizes = [10usize, 64];
    let conds = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| cond(&format!("Extra{i}"), "True", "Some"))
            .collect()
    };
    // Stored before the policy exists (their condition types are unknown to it).
    for (name, status) in sizes
        .iter()
        .map(|n| (format!("conditions-{n}"), st("Pending", conds(*n))))
        .chain([("policy-probe".to_string(), st("Pending", vec![pp()]))])
    {
        obj["metadata"]["name"] = json!(name);
        runtimes
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj.clone()).unwrap(),
            )
            .await
            .expect("create");
        let o = stored(&runtimes, &name).await;
        put_status(&runtimes, &o, status.as_ref())
            .await
            .expect("stored status");
    }
    for doc in status::vap::objects(&Policy::builtin()) {
        apply(&admin, &doc).await.expect("the policy applies");
    }
    let started = Instant::now();
    for attempt in 0.. {
        let o = stored(&runtimes, "policy-probe").await;
        let mut c = vec![pp()];
        c[0]["message"] = json!(format!("probe {attempt}"));
        if server_verdict(put_status(&mallory, &o, st("Pending", c).as_ref()).await)
            == Verdict::Policy("writer".into())
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the policy is not in effect after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut report = Vec::new();
    for n in sizes {
        let name = format!("conditions-{n}");
        let (sum0, count0) = policy_plugin_seconds(&admin).await;
        for i in 0..WRITES {
            let old = stored(&runtimes, &name).await;
            let mut c = conds(n);
            c[0]["message"] = json!(format!("write {i}"));
            put_status(&runtimes, &old, st("Pending", c).as_ref())
                .await
                .unwrap_or_else(|e| panic!("{n} conditions, write {i}: {e}"));
        }
        let (sum1, count1) = policy_plugin_seconds(&admin).await;
        let checks = count1 - count0;
        assert!(
            checks >= WRITES,
            "kube-apiserver's ValidatingAdmissionPolicy plugin counted {checks} allowed UPDATEs for {WRITES} writes"
        );
        let mean_us = (sum1 - sum0) / checks as f64 * 1e6;
        report.push(format!(
            "{n} conditions: {checks} checks, mean {mean_us:.0} µs per check"
        ));
    }
    eprintln!(
        "ValidatingAdmissionPolicy {}: {}",
        status::vap::DENY_NAME,
        report.join("; ")
    );
}

/// Defence in depth as `manifests/overlays/webhook-and-policy` ships it: the policy beside
/// kim's webhooks, which fail open. With the webhook up, a status write is defaulted by it
/// and an illegal one refused; with the webhook stopped, writes still go through (failurePolicy
/// Ignore), not defaulted, and the policy still refuses the illegal one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_webhook_that_is_down_the_shipped_policy_still_denies() {
    use crate::support::real::{NS as RUNTIME_NS, WebhookProc};
    let cp = ControlPlane::start().expect("control plane");
    cp.create_namespace(RUNTIME_NS).await;
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).unwrap();
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    let certs = testenv::controlplane::WebhookCerts::generate();
    let mut webhook = WebhookProc::start_with(certs.dir.path(), &[]).await;
    let installed = cp
        .install_kustomize(
            &repo().join("manifests/overlays/webhook-and-policy"),
            webhook.addr,
            &certs.ca_pem,
        )
        .await
        .expect("the overlay installs");
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        assert!(
            installed.applied.iter().any(|a| a.starts_with(kind)),
            "{kind} applied: {:?}",
            installed.applied
        );
    }
    let runtimes: Api<DynamicObject> =
        Api::namespaced_with(cp.admin().await, RUNTIME_NS, &runtime_resource());
    let mut sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap();
    sample["metadata"]["namespace"] = json!(RUNTIME_NS);
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        let mut o = sample.clone();
        o["metadata"]["name"] = json!(format!("rt-{n}"));
        o
    };
    // A condition with an empty message: kim's mutating webhook fills it in.
    let unfinished = || {
        let mut c = pp();
        c["message"] = json!("");
        st("Pending", vec![c])
    };
    // Both in effect: the write is defaulted, and `Ready` with no condition is refused by
    // the policy (it runs before the validating webhooks).
    let started = Instant::now();
    loop {
        let obj = fresh();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        runtimes
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .expect("create");
        let stored_obj = stored(&runtimes, &name).await;
        let written = put_status(&runtimes, &stored_obj, unfinished().as_ref()).await;
        let defaulted = written.as_ref().is_ok_and(|o| {
            o.data["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        });
        let o = stored(&runtimes, &name).await;
        let bad = put_status(&runtimes, &o, st("Ready", vec![]).as_ref()).await;
        if defaulted && server_verdict(bad) == Verdict::Policy("ready-requires".into()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "webhook and policy not both in effect after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    webhook.proc.terminate(Duration::from_secs(10));
    // The webhook is gone: a write goes through as sent (fail open) …
    let obj = fresh();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    runtimes
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .expect("create");
    let o = stored(&runtimes, &name).await;
    let written = put_status(&runtimes, &o, unfinished().as_ref())
        .await
        .expect("with the webhook down, failurePolicy Ignore lets the write through");
    assert_eq!(
        written.data["status"]["conditions"][0]["message"], "",
        "not defaulted: no webhook answered"
    );
    // … and the policy still refuses what it expresses.
    let o = stored(&runtimes, &name).await;
    assert_eq!(
        server_verdict(put_status(&runtimes, &o, st("Terminating", vec![]).as_ref()).await),
        Verdict::Policy("transition-needs-deletion".into())
    );
    let o = stored(&runtimes, &name).await;
    assert_eq!(
        server_verdict(put_status(&runtimes, &o, st("Ready", vec![]).as_ref()).await),
        Verdict::Policy("ready-requires".into())
    );
}
