//! `kim policy --format map` on a real kube-apiserver of 1.36 or newer: the generated
//! MutatingAdmissionPolicy defaults Runtime status writes as kim's mutating webhook does.
//!
//! The proof is a patch-for-patch differential. Every write of the status-model corpus of
//! [`crate::real_differential`] (the table of illegal writes, the reconciler's lifecycles and
//! failure paths, KIM's replays on three eras, the ratcheting pairs, the seed examples and the
//! policy table of `real_vap`) is written, per policy in force (the built-in table,
//! `kimHistory`, a policy file that adds a reason), into four namespaces of one kube-apiserver:
//!
//! - `wm-*` (kim's mutating webhook only) and `pm-*` (the MutatingAdmissionPolicy only): the
//!   defaulting alone; whatever the CRD schema accepts after it is stored;
//! - `wf-*` (kim's mutating and validating webhooks) and `pf-*` (the MutatingAdmissionPolicy
//!   and the ValidatingAdmissionPolicy): the whole guard, by the webhook or in-process.
//!
//! Each write is made twice: as the corpus has it, and "unfinished", every condition's
//! `message` emptied and its `observedGeneration` and `lastTransitionTime` removed, for
//! defaulting to complete (the corpus itself mostly writes complete conditions).
//!
//! The statuses each pair stores are compared field by field. A difference is explained only
//! as "request time": a `lastTransitionTime` that defaulting stamps, where the policy's value
//! is exactly what kim's own defaulting ([`kim::status::mutate`]) gives at the time
//! kube-apiserver's field manager wrote into the stored object's `managedFields` for that write,
//! and the webhook's what it gives at a second within its write. In the full pair, a write
//! refused on one side only is explained when the webhook refused it by rules the
//! ValidatingAdmissionPolicy leaves out ([`kim::status::vap::LEFT_OUT`]). Anything else fails
//! the test. A copy of the built-in policy with an empty message table (`pm-broken`) must show
//! unexplained differences, all of them messages: the comparison can fail.
//!
//! The Kubernetes minor is the run's (`$KIM_KUBERNETES`, `testenv::tools`): below 1.36, where
//! MutatingAdmissionPolicy v1 does not exist, each test prints why and returns.

use crate::real_differential::{
    ADMIN, Variant, WRITERS_GROUP, Write, corpus, store, webhook_objects,
};
use crate::support::real::{WebhookProc, manifests, repo, runtime_resource};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kim::status::{self, Facts, Policy, RuleId, Snapshot};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane, WebhookCerts};

/// Whether the selected kube-apiserver serves MutatingAdmissionPolicy v1 (Kubernetes 1.36 or
/// newer); prints why not when it does not.
fn supported(test: &str) -> bool {
    let minor = testenv::tools::kubernetes().unwrap_or_else(|e| panic!("{test}: {e}"));
    let n: u32 = minor
        .strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{test}: Kubernetes minor {minor}"));
    if n < 36 {
        eprintln!(
            "{test}: not run: Kubernetes {minor} has no MutatingAdmissionPolicy \
             admissionregistration.k8s.io/v1 (GA in 1.36); run it with KIM_KUBERNETES=1.37"
        );
        return false;
    }
    true
}

/// Server-side apply (or its dry run) of an `admissionregistration.k8s.io/v1` object.
async fn apply(client: &kube::Client, doc: &Value, dry_run: bool) -> Result<(), String> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let lower = kind.to_lowercase();
    let plural = match lower.strip_suffix("policy") {
        Some(stem) => format!("{stem}policies"),
        None => format!("{lower}s"),
    };
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    );
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let mut params = PatchParams::apply("kim-test").force();
    params.dry_run = dry_run;
    api.patch(name, &params, &Patch::Apply(doc))
        .await
        .map(|_| ())
        .map_err(|e| format!("{kind} {name}: {e}"))
}

/// Generated admission policy objects, renamed `<name>-<suffix>`, their bindings selecting
/// `namespaces` only (the generated ones match every namespace; here others judge the rest).
fn bound_to(mut docs: Vec<Value>, suffix: &str, namespaces: &[String]) -> Vec<Value> {
    for d in &mut docs {
        let name = format!("{}-{suffix}", d["metadata"]["name"].as_str().unwrap());
        d["metadata"]["name"] = json!(name);
        if d["kind"].as_str().is_some_and(|k| k.ends_with("Binding")) {
            d["spec"]["policyName"] = json!(name);
            d["spec"]["matchResources"] = json!({"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces},
            ]}});
        }
    }
    docs
}

/// One write on one side.
struct Outcome {
    /// The object stored before the write, and the object written.
    old: Value,
    new: Value,
    /// The object stored by the write (the PUT's answer), or the refusal: code and message.
    stored: Result<Value, (u16, String)>,
    /// The client's clock just before the write and just after its answer.
    before: DateTime<Utc>,
    after: DateTime<Utc>,
}

/// Writes the case's status on `name` (PUT of the stored object with the written status) as
/// its writer.
async fn write(
    admin: &Api<DynamicObject>,
    writer: &Api<DynamicObject>,
    status: Option<&Value>,
    name: &str,
) -> Outcome {
    let old = serde_json::to_value(admin.get(name).await.expect("get Runtime")).unwrap();
    let mut new = old.clone();
    match status {
        Some(s) => new["status"] = s.clone(),
        None => {
            new.as_object_mut().unwrap().remove("status");
        }
    }
    let obj: DynamicObject = serde_json::from_value(new.clone()).unwrap();
    let before = Utc::now();
    let answer = writer
        .replace_status(name, &PostParams::default(), &obj)
        .await;
    let after = Utc::now();
    let stored = match answer {
        Ok(o) => Ok(serde_json::to_value(o).unwrap()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("{name}: the write failed otherwise: {e}"),
    };
    Outcome {
        old,
        new,
        stored,
        before,
        after,
    }
}

/// The time kube-apiserver's field manager stamped last: the latest `managedFields[*].time`.
fn field_manager_time(obj: &Value) -> Option<DateTime<Utc>> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .filter_map(|m| m["time"].as_str())
        .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .max()
}

/// The status kim's defaulting makes of the write `new` over `old` at `now`.
fn defaulted(policy: &Policy, old: &Value, new: &Value, now: DateTime<Utc>) -> Value {
    let patch = status::mutate(
        policy,
        Some(&Snapshot::of_object(old)),
        &Snapshot::of_object(new),
        &Facts::by("kim-test", now),
    );
    let mut out = new.clone();
    json_patch::patch(&mut out, &patch).expect("kim's patch applies");
    out["status"].clone()
}

/// JSON Pointers of the leaves where `a` and `b` differ (an array of another length differs
/// as a whole).
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                let (va, vb) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                if x.contains_key(k) != y.contains_key(k) {
                    out.push(format!("{path}/{k}"));
                } else {
                    differences(&format!("{path}/{k}"), va, vb, out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), va, vb, out);
            }
        }
        _ if a != b => out.push(path.to_string()),
        _ => {}
    }
}

/// How a pair of writes compares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Compared {
    Agree,
    Explained(&'static str),
    Unexplained(String),
}

const REQUEST_TIME: &str = "request time (lastTransitionTime stamped at each side's own write)";
const LEFT_OUT: &str = "refused by the webhook for a rule the ValidatingAdmissionPolicy leaves out";
const SPELLING: &str =
    "a time kim reads and CEL's timestamp() cannot (the policy reads it as unset)";

/// Rule ids named in an admission denial.
fn rules(message: &str) -> Vec<String> {
    message
        .split('[')
        .skip(1)
        .filter_map(|part| part.split_once(']').map(|(r, _)| r))
        .filter(|r| RuleId::parse(r).is_some())
        .map(str::to_string)
        .collect()
}

fn denied_by_admission(message: &str) -> bool {
    message.contains("denied the request") || message.contains("denied request")
}

/// Compares the webhook's outcome `w` with the policy's `p` for `policy`. `unset_for_policy`:
/// the written status as the policy reads it, when it differs from kim's reading (a time
/// spelling CEL cannot parse, replaced by an unparsable value); `None` for the corpus.
fn compare(
    policy: &Policy,
    w: &Outcome,
    p: &Outcome,
    unset_for_policy: Option<&Value>,
) -> Compared {
    let (ws, ps) = match (&w.stored, &p.stored) {
        (Ok(ws), Ok(ps)) => (ws, ps),
        (Err((_, wm)), Err((_, pm))) => {
            let (wr, pr) = (rules(wm), rules(pm));
            return match (denied_by_admission(wm), denied_by_admission(pm)) {
                (true, true) if pr.first().is_none_or(|r| !wr.contains(r)) => {
                    Compared::Unexplained(format!(
                        "the policies refused ({pm}), the webhook by {wr:?}"
                    ))
                }
                _ => Compared::Agree,
            };
        }
        (Err((_, wm)), Ok(_)) if denied_by_admission(wm) => {
            let left_out: Vec<&str> = status::vap::LEFT_OUT
                .iter()
                .map(|(r, _)| r.as_str())
                .collect();
            let wr = rules(wm);
            return if !wr.is_empty() && wr.iter().all(|r| left_out.contains(&r.as_str())) {
                Compared::Explained(LEFT_OUT)
            } else {
                Compared::Unexplained(format!("the webhook refused ({wm}), the policies allowed"))
            };
        }
        (Err((wc, wm)), Ok(_)) => {
            if unset_for_policy.is_some() {
                return check_policy_side(policy, p, unset_for_policy, SPELLING);
            }
            return Compared::Unexplained(format!("webhook side refused: {wc} {wm}"));
        }
        (Ok(_), Err((pc, pm))) => {
            return Compared::Unexplained(format!("policy side refused: {pc} {pm}"));
        }
    };
    let mut diffs = Vec::new();
    differences("/status", &ws["status"], &ps["status"], &mut diffs);
    if diffs.is_empty() {
        return Compared::Agree;
    }
    let category = if unset_for_policy.is_some() {
        SPELLING
    } else {
        REQUEST_TIME
    };
    for path in &diffs {
        let is_ltt = path
            .strip_prefix("/status/conditions/")
            .and_then(|rest| rest.strip_suffix("/lastTransitionTime"))
            .is_some_and(|i| i.parse::<usize>().is_ok());
        if !is_ltt {
            return Compared::Unexplained(format!(
                "{path}: the webhook stored {}, the policy {}",
                ws.pointer(path).unwrap_or(&Value::Null),
                ps.pointer(path).unwrap_or(&Value::Null)
            ));
        }
        // The webhook: kim's defaulting at a second within the write.
        let first = w.before.timestamp();
        let matches_webhook = (first..=w.after.timestamp()).any(|s| {
            let at = DateTime::from_timestamp(s, 0).unwrap();
            defaulted(policy, &w.old, &w.new, at).pointer(path.trim_start_matches("/status"))
                == ws.pointer(path)
        });
        if !matches_webhook {
            return Compared::Unexplained(format!(
                "{path}: the webhook stored {}, which kim's defaulting gives at no second of its write",
                ws.pointer(path).unwrap_or(&Value::Null)
            ));
        }
    }
    check_policy_side(policy, p, unset_for_policy, category)
}

/// The policy side stored exactly kim's defaulting of the write (as the policy reads it) at
/// the field manager's time of the write, a time within the write.
fn check_policy_side(
    policy: &Policy,
    p: &Outcome,
    unset_for_policy: Option<&Value>,
    category: &'static str,
) -> Compared {
    let Ok(ps) = &p.stored else {
        return Compared::Unexplained("policy side refused".into());
    };
    let Some(clock) = field_manager_time(ps) else {
        return Compared::Unexplained("no managedFields time in the policy side's object".into());
    };
    if clock.timestamp() < p.before.timestamp() || clock > p.after {
        return Compared::Unexplained(format!(
            "the field manager's time {clock} is not within the write ({} .. {})",
            p.before, p.after
        ));
    }
    let read = unset_for_policy.unwrap_or(&p.new);
    let expected = defaulted(policy, &p.old, read, clock);
    let mut diffs = Vec::new();
    differences("/status", &expected, &ps["status"], &mut diffs);
    // Fields the schema or the storage changed alike on both sides are compared above; here
    // only what defaulting sets.
    diffs.retain(|d| {
        ["/lastTransitionTime", "/observedGeneration", "/message"]
            .iter()
            .any(|f| d.ends_with(f))
    });
    if diffs.is_empty() {
        Compared::Explained(category)
    } else {
        Compared::Unexplained(format!(
            "the policy stored {diffs:?} unlike kim's defaulting at the field manager's time {clock}: expected {expected}, stored {}",
            ps["status"]
        ))
    }
}

/// A control plane with kim's CRD and a ClusterRole that lets [`WRITERS_GROUP`] write Runtime
/// status (so that only admission refuses a writer).
async fn control_plane() -> (ControlPlane, kube::Client) {
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
    (cp, client)
}

/// The policies in force, as in `real_differential`: the built-in table, the guard in front of
/// KIM, and a policy file that adds a reason (with its own default message).
fn variants(policy_file: &std::path::Path) -> Vec<Variant> {
    vec![
        Variant {
            name: "builtin",
            flags: vec![],
        },
        Variant {
            name: "kim",
            flags: vec![
                "--compat=terminatingConditionType,kimHistory".into(),
                format!(
                    "--allowed-writers={},group:system:masters",
                    crate::kim_compat::KIM
                ),
            ],
        },
        Variant {
            name: "file",
            flags: vec![format!("--policy-file={}", policy_file.display())],
        },
    ]
}

const POLICY_FILE: &str = "kind: StatusPolicy\nconditionTypes:\n  - type: Provisioned\n    reasons:\n      - {reason: ShootHibernated, statuses: [\"False\"], message: \"Shoot hibernated\"}\n";

/// The write `w` with every condition left for defaulting to complete: `message` empty,
/// `observedGeneration` and `lastTransitionTime` missing. `None` when it writes no condition.
fn unfinished(w: &Write) -> Option<Write> {
    let mut new = w.new.clone()?;
    let conditions = new.get_mut("conditions")?.as_array_mut()?;
    if conditions.is_empty() {
        return None;
    }
    for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
        c.insert("message".into(), json!(""));
        c.remove("observedGeneration");
        c.remove("lastTransitionTime");
    }
    Some(Write {
        source: format!("unfinished: {}", w.source),
        new: Some(new),
        ..w.clone()
    })
}

/// The probe's stored status: one condition, no `observedGeneration` (defaulting adds it).
fn probe_status(message: &str) -> Value {
    json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Pending", "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
}

/// Waits until defaulting is in effect in `ns` (a probe write comes back with its
/// `observedGeneration` set) and, when `validating`, validation too (Mallory's write is refused
/// by the writer rule).
async fn wait_in_effect(client: &kube::Client, mallory: &kube::Client, ns: &str, validating: bool) {
    let admin = Api::namespaced_with(client.clone(), ns, &runtime_resource());
    let as_mallory = Api::namespaced_with(mallory.clone(), ns, &runtime_resource());
    let started = Instant::now();
    for attempt in 0.. {
        let status = probe_status(&format!("probe {attempt}"));
        let defaulting = write(&admin, &admin, Some(&status), "probe").await;
        let defaulted = defaulting.stored.as_ref().is_ok_and(|o| {
            o["status"]["conditions"][0]
                .get("observedGeneration")
                .is_some()
        });
        let validated = !validating || {
            let status = probe_status(&format!("by mallory {attempt}"));
            let o = write(&admin, &as_mallory, Some(&status), "probe").await;
            matches!(&o.stored, Err((_, m)) if rules(m).contains(&"writer".to_string()))
        };
        if defaulted && validated {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "admission not in effect in {ns} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Clients per writer identity of `writes` (the admin's own, the others certificate users in
/// [`WRITERS_GROUP`]).
async fn clients(
    cp: &ControlPlane,
    admin: &kube::Client,
    writes: &[&Write],
) -> HashMap<(String, Vec<String>), kube::Client> {
    let mut identities: Vec<(String, Vec<String>)> = writes
        .iter()
        .map(|w| (w.user.clone(), w.groups.clone()))
        .chain([("mallory".to_string(), vec![])])
        .collect();
    identities.sort();
    identities.dedup();
    let mut out = HashMap::new();
    for (user, groups) in identities {
        let c = if (user.as_str(), &groups[..]) == (ADMIN.0, &["system:masters".to_string()][..]) {
            admin.clone()
        } else {
            let mut g: Vec<&str> = groups.iter().map(String::as_str).collect();
            g.push(WRITERS_GROUP);
            let cert: ClientCert = cp.user(&user, &g);
            cp.client(&cert).await
        };
        out.insert((user, groups), c);
    }
    out
}

/// Counts of one pair of namespaces.
#[derive(Default)]
struct Tally {
    judged: usize,
    stored: usize,
    refused: usize,
    agree: usize,
    explained: BTreeMap<&'static str, usize>,
    unexplained: Vec<String>,
}

impl Tally {
    fn add(&mut self, c: Compared, w: &Outcome, p: &Outcome, source: &str) {
        self.judged += 1;
        match (&w.stored, &p.stored) {
            (Ok(_), Ok(_)) => self.stored += 1,
            (Err(_), Err(_)) => self.refused += 1,
            _ => {}
        }
        match c {
            Compared::Agree => self.agree += 1,
            Compared::Explained(why) => *self.explained.entry(why).or_default() += 1,
            Compared::Unexplained(why) => self.unexplained.push(format!("{source}: {why}")),
        }
    }

    fn row(&self, variant: &str, pair: &str) -> String {
        let explained: usize = self.explained.values().sum();
        let mut why: Vec<String> = self
            .explained
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        if why.is_empty() {
            why.push("-".into());
        }
        format!(
            "| {variant} | {pair} | {} | {} | {} | {} | {explained}: {} | {} |",
            self.judged,
            self.stored,
            self.refused,
            self.agree,
            why.join("; "),
            self.unexplained.len()
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_map_defaults_every_status_model_case_as_the_mutating_webhook_does() {
    let test = "real_map_defaults_every_status_model_case_as_the_mutating_webhook_does";
    if !supported(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, POLICY_FILE).unwrap();
    let variants = variants(&policy_file);
    // The corpus as written (complete conditions, mostly), then each write left to defaulting.
    let mut cases = corpus();
    let unfinished: Vec<Write> = cases.iter().filter_map(unfinished).collect();
    cases.extend(unfinished);
    let cases = &cases[..];
    let (cp, client) = control_plane().await;

    // Namespaces: wm-/pm- (defaulting only), wf-/pf- (the whole guard) per variant, pm-broken.
    let mut namespaces: Vec<String> = Vec::new();
    for v in &variants {
        for prefix in ["wm", "pm", "wf", "pf"] {
            namespaces.push(format!("{prefix}-{}", v.name));
        }
    }
    namespaces.push("pm-broken".into());
    for ns in &namespaces {
        cp.create_namespace(ns).await;
    }

    // Phase 1: every object and its stored status, no admission registered yet.
    let probe = Write {
        source: "probe".into(),
        spec: cases[0].spec.clone(),
        old: Some(probe_status("m")),
        new: None,
        deleting: false,
        user: ADMIN.0.into(),
        groups: vec!["system:masters".into()],
    };
    let jobs: Vec<(String, usize)> = namespaces
        .iter()
        .flat_map(|ns| (0..=cases.len()).map(move |i| (ns.clone(), i)))
        .collect();
    let stored: Vec<(usize, Result<(), String>)> = stream::iter(jobs)
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
                (i, store(&api, w, &name, &ns).await)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut unstorable: BTreeMap<usize, String> = BTreeMap::new();
    for (i, r) in stored {
        if let Err(e) = r {
            assert!(i < cases.len(), "the probe is stored: {e}");
            unstorable.entry(i).or_insert(e);
        }
    }

    // Phase 2: admission. Per variant one `kim webhook` with its flags (its mutating webhook
    // for wm-, both for wf-), the MutatingAdmissionPolicy generated from the same flags for
    // pm- and pf-, the ValidatingAdmissionPolicy for pf-.
    let certs = WebhookCerts::generate();
    let mut webhooks = Vec::new();
    for v in &variants {
        let flags: Vec<&str> = v.flags.iter().map(String::as_str).collect();
        let hook = WebhookProc::start_with(certs.dir.path(), &flags).await;
        let name = v.name;
        for doc in webhook_objects(
            hook.addr,
            &certs.ca_pem,
            &format!("wm-{name}"),
            &format!("wm-{name}"),
        ) {
            if doc["kind"] == "MutatingWebhookConfiguration" {
                apply(&client, &doc, false).await.unwrap();
            }
        }
        for doc in webhook_objects(
            hook.addr,
            &certs.ca_pem,
            &format!("wf-{name}"),
            &format!("wf-{name}"),
        ) {
            apply(&client, &doc, false).await.unwrap();
        }
        let policy = v.policy();
        let both = [format!("pm-{name}"), format!("pf-{name}")];
        for doc in bound_to(status::map::objects(&policy), name, &both) {
            apply(&client, &doc, false).await.unwrap();
        }
        for doc in bound_to(status::vap::objects(&policy), name, &[format!("pf-{name}")]) {
            apply(&client, &doc, false).await.unwrap();
        }
        webhooks.push(hook);
    }
    let mut broken = bound_to(
        status::map::objects(&Policy::builtin()),
        "broken",
        &["pm-broken".into()],
    );
    let vars = broken[0]["spec"]["variables"].as_array_mut().unwrap();
    let messages = vars.iter_mut().find(|v| v["name"] == "messages").unwrap();
    messages["expression"] = json!("{}");
    for doc in &broken {
        apply(&client, doc, false).await.unwrap();
    }

    let all: Vec<&Write> = cases.iter().collect();
    let clients = clients(&cp, &client, &all).await;
    let mallory = clients[&("mallory".to_string(), vec![])].clone();
    for ns in &namespaces {
        wait_in_effect(
            &client,
            &mallory,
            ns,
            ns.starts_with("wf-") || ns.starts_with("pf-"),
        )
        .await;
    }

    // Phase 3: every case in every namespace.
    let mut jobs = Vec::new();
    for ns in &namespaces {
        for (i, w) in cases.iter().enumerate() {
            if !unstorable.contains_key(&i) {
                jobs.push((ns.clone(), i, w));
            }
        }
    }
    let written: Vec<((String, usize), Outcome)> = stream::iter(jobs)
        .map(|(ns, i, w)| {
            let admin = Api::namespaced_with(client.clone(), &ns, &runtime_resource());
            let writer = Api::namespaced_with(
                clients[&(w.user.clone(), w.groups.clone())].clone(),
                &ns,
                &runtime_resource(),
            );
            async move {
                let o = write(&admin, &writer, w.new.as_ref(), &format!("c{i}")).await;
                ((ns, i), o)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let outcomes: HashMap<(String, usize), Outcome> = written.into_iter().collect();
    drop(webhooks);

    // Compare.
    let mut table = vec![
        "| policy in force | pair | writes | stored by both | refused by both | agree | differ, explained | differ, unexplained |".to_string(),
        "|---|---|---|---|---|---|---|---|".to_string(),
    ];
    let mut failures = Vec::new();
    let mut request_time_seen = 0;
    let pairs = variants
        .iter()
        .flat_map(|v| {
            [
                (
                    v,
                    "defaulting only: mutating webhook / MAP",
                    format!("wm-{}", v.name),
                    format!("pm-{}", v.name),
                ),
                (
                    v,
                    "whole guard: webhooks / MAP + VAP",
                    format!("wf-{}", v.name),
                    format!("pf-{}", v.name),
                ),
            ]
        })
        .chain([(
            &variants[0],
            "broken MAP (no messages)",
            "wm-builtin".to_string(),
            "pm-broken".to_string(),
        )]);
    let mut broken_tally = None;
    for (v, pair, wns, pns) in pairs {
        let policy = v.policy();
        let mut tally = Tally::default();
        for (i, w) in cases.iter().enumerate() {
            if unstorable.contains_key(&i) {
                continue;
            }
            let (wo, po) = (&outcomes[&(wns.clone(), i)], &outcomes[&(pns.clone(), i)]);
            let c = compare(&policy, wo, po, None);
            if c == Compared::Explained(REQUEST_TIME) {
                request_time_seen += 1;
            }
            tally.add(c, wo, po, &format!("{wns} / {pns}: {}", w.source));
        }
        table.push(tally.row(v.name, pair));
        if pns == "pm-broken" {
            broken_tally = Some(tally);
        } else {
            failures.extend(tally.unexplained);
        }
    }
    eprintln!(
        "{} writes in the corpus, {} not storable under the CRD schema (skipped)\n{}",
        cases.len(),
        unstorable.len(),
        table.join("\n")
    );
    assert!(
        failures.is_empty(),
        "differences without an explanation:\n{}\n{}",
        failures.join("\n"),
        table.join("\n")
    );
    assert!(
        request_time_seen > 0,
        "no write was stamped with the request time"
    );
    let broken = broken_tally.unwrap();
    assert!(
        !broken.unexplained.is_empty() && broken.unexplained.iter().all(|l| l.contains("/message")),
        "a policy without default messages must differ, by messages only: {:?}",
        broken.unexplained
    );
}

/// `lastTransitionTime` spellings, written as a status change and as a write that leaves the
/// status alone: kim and the policy read the same instant where [`status::map::reads_as_time`]
/// says the policy reads a time; the others (lower-case `t` and `z`, a leap second, offsets of
/// 24 h, a year CEL's timestamps cannot hold) the policy reads as unset, exactly as kim's
/// defaulting of an unparsable value, and the write still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_map_reads_times_as_kim_does_except_what_cel_cannot_parse() {
    let test = "real_map_reads_times_as_kim_does_except_what_cel_cannot_parse";
    if !supported(test) {
        return;
    }
    let spellings = [
        "2027-01-01T00:00:00Z",
        "2027-01-01T00:00:00.123456789Z",
        "2027-01-01T01:00:00+01:00",
        "2026-01-01T01:00:00+01:00",
        "2028-02-29T00:00:00Z",
        "2027-02-29T00:00:00Z",
        "2027-01-01t00:00:00z",
        "2027-01-01T00:00:00z",
        "2026-12-31T23:59:60Z",
        "2027-01-01T00:00:00+24:00",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00Z",
        "not a time",
    ];
    let (cp, client) = control_plane().await;
    for ns in ["wm", "pm"] {
        cp.create_namespace(ns).await;
    }
    let sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap();
    let old = json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Pending", "message": "m", "lastTransitionTime": "2026-06-01T00:00:00Z", "observedGeneration": 1}]});
    let with = |status: &str, reason: &str, ltt: &str| json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": status, "reason": reason, "message": "m", "lastTransitionTime": ltt, "observedGeneration": 1}]});
    let mut writes = Vec::new();
    for s in spellings {
        for (kind, new) in [
            ("status change", with("False", "GardenerErr", s)),
            ("same status", with("Unknown", "Pending", s)),
        ] {
            writes.push(Write {
                source: format!("{kind}, lastTransitionTime {s:?}"),
                spec: sample["spec"].clone(),
                old: Some(old.clone()),
                new: Some(new),
                deleting: false,
                user: ADMIN.0.into(),
                groups: vec!["system:masters".into()],
            });
        }
    }
    for ns in ["wm", "pm"] {
        let api = Api::namespaced_with(client.clone(), ns, &runtime_resource());
        for (i, w) in writes.iter().enumerate() {
            store(&api, w, &format!("c{i}"), ns).await.expect("stored");
        }
        let mut probe = writes[0].clone();
        probe.old = Some(probe_status("m"));
        store(&api, &probe, "probe", ns)
            .await
            .expect("probe stored");
    }
    let certs = WebhookCerts::generate();
    let hook = WebhookProc::start_with(certs.dir.path(), &[]).await;
    for doc in webhook_objects(hook.addr, &certs.ca_pem, "wm", "wm") {
        if doc["kind"] == "MutatingWebhookConfiguration" {
            apply(&client, &doc, false).await.unwrap();
        }
    }
    let policy = Policy::builtin();
    for doc in bound_to(status::map::objects(&policy), "pm", &["pm".into()]) {
        apply(&client, &doc, false).await.unwrap();
    }
    for ns in ["wm", "pm"] {
        wait_in_effect(&client, &client, ns, false).await;
    }
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        let mut out = Vec::new();
        for ns in ["wm", "pm"] {
            let api = Api::namespaced_with(client.clone(), ns, &runtime_resource());
            out.push(write(&api, &api, w.new.as_ref(), &format!("c{i}")).await);
        }
        let ltt = w.new.as_ref().unwrap()["conditions"][0]["lastTransitionTime"]
            .as_str()
            .unwrap();
        // As the policy reads it: a spelling its CEL cannot parse is unset, which kim's
        // defaulting treats as it treats any unparsable value.
        let unset = (!status::map::reads_as_time(ltt)).then(|| {
            let mut n = out[1].new.clone();
            n["status"]["conditions"][0]["lastTransitionTime"] = json!("unparsable");
            n
        });
        let c = compare(&policy, &out[0], &out[1], unset.as_ref());
        let show = |o: &Outcome| match &o.stored {
            Ok(s) => s["status"]["conditions"][0]["lastTransitionTime"].to_string(),
            Err((code, _)) => format!("refused ({code})"),
        };
        let line = format!(
            "{}: webhook {}, policy {}: {c:?}",
            w.source,
            show(&out[0]),
            show(&out[1])
        );
        eprintln!("{line}");
        if matches!(c, Compared::Unexplained(_)) {
            failures.push(line.clone());
        }
        report.push((ltt.to_string(), c));
    }
    drop(hook);
    assert!(failures.is_empty(), "unexplained:\n{}", failures.join("\n"));
    // The spellings the policy cannot read are exactly the ones that differ for that reason.
    for (ltt, c) in &report {
        if *c == Compared::Explained(SPELLING) {
            assert!(!status::map::reads_as_time(ltt), "{ltt}");
        }
    }
    assert!(
        report
            .iter()
            .any(|(_, c)| *c == Compared::Explained(SPELLING)),
        "some spelling kim reads and CEL cannot: {report:?}"
    );
}

/// The generated objects for every policy in force pass kube-apiserver's validation of
/// MutatingAdmissionPolicy v1 (server-side dry run: CEL compiled and type-checked), and the
/// shipped overlay `manifests/overlays/policy-and-defaulting` guards Runtime status with no
/// webhook at all: a write with an empty message and no `lastTransitionTime` or
/// `observedGeneration` is completed (the CRD schema requires the first two), an illegal one is
/// refused by the ValidatingAdmissionPolicy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_map_the_policy_and_defaulting_overlay_guards_without_a_webhook() {
    let test = "real_map_the_policy_and_defaulting_overlay_guards_without_a_webhook";
    if !supported(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, POLICY_FILE).unwrap();
    let (cp, client) = control_plane().await;
    for v in variants(&policy_file) {
        for doc in status::map::objects(&v.policy()) {
            apply(&client, &doc, true).await.unwrap_or_else(|e| {
                panic!("{}: the server refuses the generated policy: {e}", v.name)
            });
        }
    }

    let ns = "kcp-system";
    cp.create_namespace(ns).await;
    let unused = WebhookCerts::generate();
    let installed = cp
        .install_kustomize(
            &manifests("overlays/policy-and-defaulting"),
            "127.0.0.1:9".parse().unwrap(),
            &unused.ca_pem,
        )
        .await
        .expect("manifests/overlays/policy-and-defaulting installs");
    let mut applied = installed.applied.clone();
    applied.sort();
    assert_eq!(
        applied,
        [
            "MutatingAdmissionPolicy kim-runtime-status",
            "MutatingAdmissionPolicyBinding kim-runtime-status",
            "ValidatingAdmissionPolicy kim-runtime-status",
            "ValidatingAdmissionPolicyBinding kim-runtime-status",
        ],
        "both policies and their bindings, nothing else"
    );
    assert!(installed.skipped.is_empty(), "{:?}", installed.skipped);

    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &runtime_resource());
    let mut sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("samples/runtimes/aws-minimal.yaml")).unwrap(),
    )
    .unwrap();
    sample["metadata"]["namespace"] = json!(ns);
    let unfinished = json!({"state": "Pending", "conditions": [{"type": "Provisioned", "status": "Unknown", "reason": "Pending", "message": ""}]});
    let started = Instant::now();
    let (stored, outcome) = loop {
        let name = format!("rt-{}", started.elapsed().as_millis());
        sample["metadata"]["name"] = json!(name);
        api.create(
            &PostParams::default(),
            &serde_json::from_value(sample.clone()).unwrap(),
        )
        .await
        .expect("create");
        let o = write(&api, &api, Some(&unfinished), &name).await;
        if let Ok(s) = &o.stored {
            break (s.clone(), o);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the policy does not default after 30 s: {:?}",
            o.stored.err()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let c = &stored["status"]["conditions"][0];
    assert_eq!(c["message"], "Shoot creation in progress", "{c}");
    assert_eq!(
        c["observedGeneration"], stored["metadata"]["generation"],
        "{c}"
    );
    let clock = field_manager_time(&stored).expect("managedFields time");
    assert_eq!(
        c["lastTransitionTime"],
        json!(status::format_time(clock)),
        "{c}"
    );
    assert!(clock.timestamp() >= outcome.before.timestamp() && clock <= outcome.after);

    // The ValidatingAdmissionPolicy of the same overlay: Ready without its conditions. The
    // policy and its binding take effect on their own, after the MAP may have (measured on
    // 1.37, 2026-12-03): each try is a new Runtime, until the policy denies, for at most 30 s.
    let bad = json!({"state": "Ready", "conditions": []});
    let started = Instant::now();
    loop {
        let name = format!("rt-vap-{}", started.elapsed().as_millis());
        sample["metadata"]["name"] = json!(name);
        api.create(
            &PostParams::default(),
            &serde_json::from_value(sample.clone()).unwrap(),
        )
        .await
        .expect("create");
        write(&api, &api, Some(&unfinished), &name)
            .await
            .stored
            .expect("the unfinished status is stored");
        match &write(&api, &api, Some(&bad), &name).await.stored {
            Err((_, m)) => {
                assert!(rules(m).contains(&"ready-requires".to_string()), "{m}");
                break;
            }
            Ok(s) => assert!(
                started.elapsed() < Duration::from_secs(30),
                "Ready without conditions still stored after 30 s: {}",
                s["status"]
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
