//! Webhook against generated policy, verdict for verdict, on one real kube-apiserver.
//!
//! Every status-model case of the suite — the table of illegal writes and the reconciler's
//! lifecycles and failure paths (`status_model`), KIM's replays on Runtimes of three eras, the
//! ratcheting pairs and the seed examples (`kim_compat`), and the policy table of `real_vap` —
//! is written through kube-apiserver twice per policy in force: in a namespace judged only by
//! kim's webhooks (mutating + validating, one `kim webhook` process with that policy's flags)
//! and in one judged only by the ValidatingAdmissionPolicy `kim policy --format vap` generates
//! from the same flags. The policies in force: the built-in table, `kimHistory` (the guard in
//! front of KIM), and a policy file that adds a reason.
//!
//! Each pair of verdicts either agrees (both allowed; both refused, the policy by a rule the
//! webhook named too, or by the CRD schema) or is explained by what the policy says it does
//! not do: a rule it leaves out ([`kim::status::vap::LEFT_OUT`]) or the webhook's defaulting.
//! Anything else fails the test. A copy of the built-in policy without its `transition`
//! validation, judged against the same webhook verdicts, must produce unexplained
//! disagreements: the comparison can fail.
//!
//! Set-up: all objects and their stored statuses are written before any admission is
//! registered (a stored status may be one the model refuses: ratcheting cases and old KIM
//! eras); a case whose stored status the CRD schema refuses is counted and skipped.

use crate::kim_compat::{
    KIM, eras, kim_delete, kim_errors, kim_update, ratcheting_pairs, seed_examples,
};
use crate::real_vap;
use crate::status_model::{failure_paths, illegal_writes};
use crate::support::real::{repo, runtime_resource};
use clap::Parser;
use futures::{StreamExt, stream};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kim::status::{self, Facts, Policy, PolicyArgs, RuleId, Snapshot};
use kim::testing::model::{RECONCILER, Rt, lifecycle, sample_runtimes};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane, WebhookCerts, point_webhooks_at};

/// Every writer's certificate carries this group, which RBAC lets update Runtime status.
pub(crate) const WRITERS_GROUP: &str = "kim-test:status-writers";
/// The admin's identity as the control plane's client certificate names it.
pub(crate) const ADMIN: (&str, &[&str]) = ("testenv-admin", &["system:masters"]);

/// One status write of the corpus.
#[derive(Clone)]
pub(crate) struct Write {
    pub(crate) source: String,
    pub(crate) spec: Value,
    /// The stored status before the write (`None`: none).
    pub(crate) old: Option<Value>,
    /// The written status (`None`: the write removes it).
    pub(crate) new: Option<Value>,
    pub(crate) deleting: bool,
    pub(crate) user: String,
    pub(crate) groups: Vec<String>,
}

fn status_of(rt: &Rt) -> Option<Value> {
    rt.obj.get("status").cloned()
}

fn is_deleting(rt: &Rt) -> bool {
    rt.obj["metadata"].get("deletionTimestamp").is_some()
}

fn from_pair(source: String, old: &Rt, new: &Rt, user: &str, groups: &[String]) -> Write {
    Write {
        source,
        spec: old.obj["spec"].clone(),
        old: status_of(old),
        new: new.obj.get("status").cloned(),
        deleting: is_deleting(new),
        user: user.to_string(),
        groups: groups.to_vec(),
    }
}

/// The corpus: every status-model case of the suite, in a fixed order.
pub(crate) fn corpus() -> Vec<Write> {
    let mut out = Vec::new();
    for c in illegal_writes() {
        let old = c.old.clone().unwrap_or_else(|| c.new.clone());
        let mut w = from_pair(
            format!("status_model illegal: {}", c.name),
            &old,
            &c.new,
            c.user,
            &c.groups,
        );
        if c.old.is_none() {
            w.old = None;
        }
        out.push(w);
    }
    for (name, sample) in sample_runtimes() {
        for (i, pair) in lifecycle(sample).windows(2).enumerate() {
            out.push(from_pair(
                format!("status_model lifecycle {name} #{i}"),
                &pair[0],
                &pair[1],
                RECONCILER,
                &[],
            ));
        }
    }
    for (p, seq) in failure_paths().iter().enumerate() {
        for (i, pair) in seq.windows(2).enumerate() {
            out.push(from_pair(
                format!("status_model failure path {p} #{i}"),
                &pair[0],
                &pair[1],
                RECONCILER,
                &[],
            ));
        }
    }
    let kim_groups = vec!["system:serviceaccounts".to_string()];
    for (era, start) in eras() {
        for (seq_name, writes) in [
            ("update", kim_update(&start)),
            ("errors", kim_errors(&start)),
            ("delete", kim_delete(&start)),
        ] {
            let mut prev = start.clone();
            for (i, w) in writes.iter().enumerate() {
                out.push(from_pair(
                    format!("kim_compat replay {seq_name} #{i} on {era}"),
                    &prev,
                    w,
                    KIM,
                    &kim_groups,
                ));
                prev = w.clone();
            }
        }
    }
    for (name, old, new) in ratcheting_pairs() {
        out.push(from_pair(
            format!("kim_compat ratcheting: {name}"),
            &old,
            &new,
            RECONCILER,
            &[],
        ));
    }
    let (_, sample) = sample_runtimes().remove(0);
    for (name, st) in seed_examples() {
        out.push(Write {
            source: format!("kim_compat seed example {name}"),
            spec: sample["spec"].clone(),
            old: None,
            new: Some(st),
            deleting: false,
            user: RECONCILER.to_string(),
            groups: vec![],
        });
    }
    let spec: Value = serde_saphyr::from_str::<Value>(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap()["spec"]
        .clone();
    for c in real_vap::cases() {
        let (user, groups) = match c.writer {
            real_vap::Writer::Admin => (ADMIN.0, vec!["system:masters".to_string()]),
            real_vap::Writer::Mallory => ("mallory", vec![]),
        };
        out.push(Write {
            source: format!("real_vap: {}", c.name),
            spec: spec.clone(),
            old: c.old,
            new: c.new,
            deleting: c.deleting,
            user: user.to_string(),
            groups,
        });
    }
    out
}

/// A policy in force: the webhook's flags, and the [`Policy`] they load.
pub(crate) struct Variant {
    pub(crate) name: &'static str,
    pub(crate) flags: Vec<String>,
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    policy: PolicyArgs,
}

impl Variant {
    pub(crate) fn policy(&self) -> Policy {
        let mut argv = vec!["kim".to_string()];
        argv.extend(self.flags.iter().cloned());
        Flags::try_parse_from(argv)
            .expect("the variant's flags parse")
            .policy
            .load()
            .expect("the variant's policy loads")
    }
}

/// A verdict, the object as stored before the write, and the object written.
type Judged = (Verdict, Value, Value);

/// What kube-apiserver answered to one write.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    Allowed,
    /// Refused by admission: the rule ids named in the message, in order.
    Admission(Vec<String>),
    /// Refused by the CRD's schema.
    Schema,
}

fn verdict(result: kube::Result<DynamicObject>) -> Result<Verdict, String> {
    match result {
        Ok(_) => Ok(Verdict::Allowed),
        Err(kube::Error::Api(s))
            if s.message.contains("denied the request") || s.message.contains("denied request") =>
        {
            let rules: Vec<String> = s
                .message
                .split('[')
                .skip(1)
                .filter_map(|part| part.split_once(']').map(|(r, _)| r))
                .filter(|r| RuleId::parse(r).is_some())
                .map(str::to_string)
                .collect();
            if rules.is_empty() {
                return Err(format!("a denial without a rule id: {}", s.message));
            }
            Ok(Verdict::Admission(rules))
        }
        Err(kube::Error::Api(s)) if s.code == 422 => Ok(Verdict::Schema),
        Err(e) => Err(format!("the write failed otherwise: {e}")),
    }
}

/// The outcome of comparing a webhook verdict with a policy verdict.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
enum Compared {
    Agree,
    /// Explained by what the policy says it does not do.
    Explained(String),
    Unexplained(String),
}

/// `defaulted`: kim's mutating webhook changes this write; `raw_denies`: the rules kim's
/// validation denies the write by as sent, before any defaulting. A disagreement where the
/// webhook changed the write and kim's validation of the write as sent gives the policy's
/// verdict is explained by the defaulting the policy does not do.
fn compare(
    webhook: &Verdict,
    policy: &Verdict,
    defaulted: bool,
    raw_denies: &[String],
) -> Compared {
    let base = compare_verdicts(webhook, policy, defaulted);
    let as_sent = match policy {
        Verdict::Allowed => raw_denies.is_empty(),
        Verdict::Admission(p) => raw_denies.contains(&p[0]),
        Verdict::Schema => false,
    };
    match base {
        Compared::Unexplained(_) if defaulted && as_sent => Compared::Explained(
            "the webhook judged the write after its own defaulting; kim's validation of the write as sent gives the policy's verdict".into(),
        ),
        other => other,
    }
}

fn compare_verdicts(webhook: &Verdict, policy: &Verdict, defaulted: bool) -> Compared {
    let left_out: Vec<&str> = status::vap::LEFT_OUT
        .iter()
        .map(|(r, _)| r.as_str())
        .collect();
    match (webhook, policy) {
        (Verdict::Allowed, Verdict::Allowed) => Compared::Agree,
        (Verdict::Schema, Verdict::Schema) => Compared::Agree,
        // Both refused, one side by the schema: the mutating webhook changed what the schema
        // saw, or the policy's write failed the schema first. Same outcome.
        (Verdict::Admission(_), Verdict::Schema) | (Verdict::Schema, Verdict::Admission(_)) => {
            Compared::Agree
        }
        (Verdict::Admission(w), Verdict::Admission(p)) => {
            if w.contains(&p[0]) {
                Compared::Agree
            } else {
                Compared::Unexplained(format!("policy refused by [{}], webhook by {w:?}", p[0]))
            }
        }
        (Verdict::Admission(w), Verdict::Allowed) => {
            if w.iter().all(|r| left_out.contains(&r.as_str())) {
                Compared::Explained(format!("rule {} is left out of the policy", w.join(", ")))
            } else {
                Compared::Unexplained(format!("webhook refused by {w:?}, policy allowed"))
            }
        }
        (Verdict::Allowed, Verdict::Schema) if defaulted => Compared::Explained(
            "the webhook's defaulting completed the write; the policy does not mutate".into(),
        ),
        (w, p) => Compared::Unexplained(format!("webhook {w:?}, policy {p:?}")),
    }
}

async fn apply(client: &kube::Client, doc: &Value) {
    real_vap::apply(client, doc)
        .await
        .unwrap_or_else(|e| panic!("applying {}: {e}", doc["kind"]));
}

/// The generated policy objects for `policy`, renamed `<name>-<suffix>` and bound to `ns`
/// only (the generated bindings match every namespace; here the webhooks judge the others).
fn policy_objects(policy: &Policy, ns: &str, suffix: &str) -> Vec<Value> {
    let mut docs = status::vap::objects(policy);
    for d in &mut docs {
        let name = format!("{}-{suffix}", d["metadata"]["name"].as_str().unwrap());
        d["metadata"]["name"] = json!(name);
        if d["kind"] == "ValidatingAdmissionPolicyBinding" {
            d["spec"]["policyName"] = json!(name);
            d["spec"]["matchResources"] = json!({
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            });
        }
    }
    docs
}

/// The shipped webhook configurations, renamed `<name>-<suffix>`, selecting `ns`, calling
/// the webhook on `addr`.
pub(crate) fn webhook_objects(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    ns: &str,
    suffix: &str,
) -> Vec<Value> {
    let text =
        std::fs::read_to_string(repo().join("manifests/base/webhook-configurations.yaml")).unwrap();
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.retain(|d| !d.is_null());
    for d in &mut docs {
        let name = format!("{}-{suffix}", d["metadata"]["name"].as_str().unwrap());
        d["metadata"]["name"] = json!(name);
        point_webhooks_at(d, addr, ca_pem);
        for hook in d["webhooks"].as_array_mut().unwrap() {
            hook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
        }
    }
    docs
}

fn runtime_object(w: &Write, name: &str, ns: &str) -> DynamicObject {
    let mut meta = json!({"name": name, "namespace": ns});
    if w.deleting {
        meta["finalizers"] = json!(["kim-test/hold"]);
    }
    serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": meta,
        "spec": w.spec,
    }))
    .unwrap()
}

/// Creates `name` in `ns` with the write's stored status (and deletion), without admission.
/// `Err`: the CRD schema refused the stored status.
pub(crate) async fn store(
    api: &Api<DynamicObject>,
    w: &Write,
    name: &str,
    ns: &str,
) -> Result<(), String> {
    api.create(&PostParams::default(), &runtime_object(w, name, ns))
        .await
        .map_err(|e| format!("create: {e}"))?;
    if let Some(old) = &w.old {
        let mut obj = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        obj["status"] = old.clone();
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        api.replace_status(name, &PostParams::default(), &obj)
            .await
            .map_err(|e| format!("stored status: {e}"))?;
    }
    if w.deleting {
        api.delete(name, &DeleteParams::default())
            .await
            .map_err(|e| format!("delete: {e}"))?;
    }
    Ok(())
}

/// Writes the case's status on `name` as its writer; the verdict, and the object judged
/// (stored metadata, written status) for the local defaulting check.
async fn judge(
    admin: &Api<DynamicObject>,
    writer: &Api<DynamicObject>,
    w: &Write,
    name: &str,
) -> Result<Judged, String> {
    let old = serde_json::to_value(admin.get(name).await.unwrap()).unwrap();
    let mut new = old.clone();
    match &w.new {
        Some(s) => new["status"] = s.clone(),
        None => {
            new.as_object_mut().unwrap().remove("status");
        }
    }
    let obj: DynamicObject = serde_json::from_value(new.clone()).unwrap();
    let v = verdict(
        writer
            .replace_status(name, &PostParams::default(), &obj)
            .await,
    )?;
    Ok((v, old, new))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_and_generated_policy_agree_on_every_status_model_case() {
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(
        &policy_file,
        "kind: StatusPolicy\nconditionTypes:\n  - type: Provisioned\n    reasons:\n      - {reason: ShootHibernated, statuses: [\"False\"], message: \"Shoot hibernated\"}\n",
    )
    .unwrap();
    let variants = [
        Variant {
            name: "builtin",
            flags: vec![],
        },
        Variant {
            name: "kim",
            flags: vec![
                "--compat=terminatingConditionType,kimHistory".into(),
                format!("--allowed-writers={KIM},group:system:masters"),
            ],
        },
        Variant {
            name: "file",
            flags: vec![format!("--policy-file={}", policy_file.display())],
        },
    ];
    let cases = corpus();
    let cases = &cases[..];

    let cp = ControlPlane::start().expect("control plane");
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).unwrap();
    cp.install_crds(&crd).await.expect("kim's CRD installs");
    let client = cp.admin().await;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"],
                   "resources": ["runtimes", "runtimes/status"],
                   "verbs": ["get", "update", "patch"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "runtime-status-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "runtime-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": WRITERS_GROUP}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // Namespaces: w-<variant> (webhooks only), p-<variant> (policy only), p-broken.
    let mut namespaces: Vec<String> = Vec::new();
    for v in &variants {
        namespaces.push(format!("w-{}", v.name));
        namespaces.push(format!("p-{}", v.name));
    }
    namespaces.push("p-broken".into());
    for ns in &namespaces {
        cp.create_namespace(ns).await;
    }

    // Phase 1: every object and stored status, no admission registered.
    let probe = Write {
        source: "probe".into(),
        spec: cases[0].spec.clone(),
        old: Some(
            json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Pending", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        ),
        new: None,
        deleting: false,
        user: "mallory".into(),
        groups: vec![],
    };
    let jobs: Vec<(String, usize)> = namespaces
        .iter()
        .flat_map(|ns| (0..=cases.len()).map(move |i| (ns.clone(), i)))
        .collect();
    let stored: Vec<(String, usize, Result<(), String>)> = stream::iter(jobs)
        .map(|(ns, i)| {
            let client = client.clone();
            let n = cases.len();
            let w = if i == n { &probe } else { &cases[i] };
            async move {
                let api = Api::namespaced_with(client, &ns, &runtime_resource());
                let name = if i == n {
                    "probe".to_string()
                } else {
                    format!("c{i}")
                };
                let r = store(&api, w, &name, &ns).await;
                (ns, i, r)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut unstorable: BTreeMap<usize, String> = BTreeMap::new();
    for (ns, i, r) in &stored {
        if let Err(e) = r {
            assert!(*i < cases.len(), "the probe is stored in {ns}: {e}");
            unstorable.entry(*i).or_insert_with(|| e.clone());
        }
    }

    // Phase 2: admission. One webhook process per variant; policies per variant and the
    // broken copy of the built-in one.
    let certs = WebhookCerts::generate();
    let mut webhooks = Vec::new();
    for v in &variants {
        let flags: Vec<&str> = v.flags.iter().map(String::as_str).collect();
        let hook = crate::support::real::WebhookProc::start_with(certs.dir.path(), &flags).await;
        for doc in webhook_objects(hook.addr, &certs.ca_pem, &format!("w-{}", v.name), v.name) {
            apply(&client, &doc).await;
        }
        for doc in policy_objects(&v.policy(), &format!("p-{}", v.name), v.name) {
            apply(&client, &doc).await;
        }
        webhooks.push(hook);
    }
    let mut broken = policy_objects(&variants[0].policy(), "p-broken", "broken");
    let validations = broken[0]["spec"]["validations"].as_array_mut().unwrap();
    let before = validations.len();
    validations.retain(|v| {
        !v["messageExpression"]
            .as_str()
            .unwrap_or_default()
            .starts_with("'[transition]")
    });
    assert_eq!(
        validations.len(),
        before - 1,
        "the transition validation is removed"
    );
    for doc in &broken {
        apply(&client, doc).await;
    }

    // Clients per writer identity.
    let mut identities: Vec<(String, Vec<String>)> = cases
        .iter()
        .chain([&probe])
        .map(|w| (w.user.clone(), w.groups.clone()))
        .collect();
    identities.sort();
    identities.dedup();
    let mut clients: HashMap<(String, Vec<String>), kube::Client> = HashMap::new();
    for (user, groups) in identities {
        let c = if (user.as_str(), &groups[..]) == (ADMIN.0, &["system:masters".to_string()][..]) {
            client.clone()
        } else {
            let mut g: Vec<&str> = groups.iter().map(String::as_str).collect();
            g.push(WRITERS_GROUP);
            let cert: ClientCert = cp.user(&user, &g);
            cp.client(&cert).await
        };
        clients.insert((user, groups), c);
    }

    // In effect in every namespace once Mallory's write is refused by admission there.
    let mallory = clients[&("mallory".to_string(), vec![])].clone();
    for ns in &namespaces {
        let admin = Api::namespaced_with(client.clone(), ns, &runtime_resource());
        let as_mallory = Api::namespaced_with(mallory.clone(), ns, &runtime_resource());
        let started = Instant::now();
        for attempt in 0.. {
            let mut w = probe.clone();
            w.new = probe.old.clone().map(|mut s| {
                s["conditions"][0]["message"] = json!(format!("probe {attempt}"));
                s
            });
            match judge(&admin, &as_mallory, &w, "probe").await {
                Ok((Verdict::Admission(r), _, _)) if r.contains(&"writer".to_string()) => break,
                other => assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "admission not in effect in {ns} after 30 s: {:?}",
                    other.map(|o| o.0)
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Phase 3: every case, in every namespace.
    let mut jobs = Vec::new();
    for ns in &namespaces {
        for (i, w) in cases.iter().enumerate() {
            if !unstorable.contains_key(&i) {
                jobs.push((ns.clone(), i, w));
            }
        }
    }
    let judged: Vec<(String, usize, Result<Judged, String>)> = stream::iter(jobs)
        .map(|(ns, i, w)| {
            let admin = Api::namespaced_with(client.clone(), &ns, &runtime_resource());
            let writer = Api::namespaced_with(
                clients[&(w.user.clone(), w.groups.clone())].clone(),
                &ns,
                &runtime_resource(),
            );
            async move {
                let r = judge(&admin, &writer, w, &format!("c{i}")).await;
                (ns, i, r)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut verdicts: HashMap<(String, usize), Judged> = HashMap::new();
    for (ns, i, r) in judged {
        let r = r.unwrap_or_else(|e| panic!("{ns} {}: {e}", cases[i].source));
        verdicts.insert((ns, i), r);
    }

    // Compare.
    let mut summary = Vec::new();
    let mut failures = Vec::new();
    let mut broken_unexplained = Vec::new();
    let judged_count = cases.len() - unstorable.len();
    for (v, pns) in variants
        .iter()
        .map(|v| (v, format!("p-{}", v.name)))
        .chain([(&variants[0], "p-broken".to_string())])
    {
        let policy = v.policy();
        let wns = format!("w-{}", v.name);
        let mut counts: BTreeMap<Compared, usize> = BTreeMap::new();
        let mut allowed = 0;
        for (i, w) in cases.iter().enumerate() {
            if unstorable.contains_key(&i) {
                continue;
            }
            let (wv, old, new) = &verdicts[&(wns.clone(), i)];
            let (pv, _, _) = &verdicts[&(pns.clone(), i)];
            if *wv == Verdict::Allowed {
                allowed += 1;
            }
            let facts = Facts {
                groups: w.groups.clone(),
                ..Facts::by(&w.user, chrono::Utc::now())
            };
            let defaulted = !status::evaluate(&policy, Some(old), new, &facts)
                .patch
                .0
                .is_empty();
            let mut raw_denies: Vec<String> = status::validate(
                &policy,
                Some(&Snapshot::of_object(old)),
                &Snapshot::of_object(new),
                &facts,
            )
            .iter()
            .filter(|v| v.denies())
            .map(|v| v.rule.as_str().to_string())
            .collect();
            raw_denies.dedup();
            let c = compare(wv, pv, defaulted, &raw_denies);
            if let Compared::Explained(why) = &c {
                eprintln!(
                    "{pns}: {}: explained: {why} (webhook {wv:?}, policy {pv:?})",
                    w.source
                );
            }
            if let Compared::Unexplained(why) = &c {
                let line = format!("{pns}: {}: {why}", w.source);
                if pns == "p-broken" {
                    broken_unexplained.push(line);
                } else {
                    failures.push(line);
                }
            }
            let key = match c {
                Compared::Unexplained(_) => Compared::Unexplained(String::new()),
                other => other,
            };
            *counts.entry(key).or_default() += 1;
        }
        let mut line =
            format!("{pns}: {judged_count} cases judged ({allowed} allowed by the webhook)");
        for (k, n) in &counts {
            line.push_str(&format!("; {k:?}: {n}"));
        }
        summary.push(line);
    }
    eprintln!(
        "{} cases in the corpus; {} not storable under the CRD schema:",
        cases.len(),
        unstorable.len()
    );
    for (i, e) in &unstorable {
        let short = e.split(" (Status {").next().unwrap_or_default();
        eprintln!("  {}: {short}", cases[*i].source);
    }
    for line in &summary {
        eprintln!("{line}");
    }
    for line in &broken_unexplained {
        eprintln!("without [transition]: {line}");
    }
    drop(webhooks);
    assert!(
        failures.is_empty(),
        "webhook and policy disagree without an explanation:\n{}\n{}",
        failures.join("\n"),
        summary.join("\n")
    );
    assert!(
        !broken_unexplained.is_empty()
            && broken_unexplained.iter().all(|l| l.contains("transition")),
        "removing the transition validation must show as disagreements naming it: {broken_unexplained:?}"
    );
}
