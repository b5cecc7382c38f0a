//! The guard in front of a live KIM control cluster (`docs/status-model.md` §7): KIM-shaped
//! write sequences (docs/kim-writes.md) on stored Runtimes that carry KIM's retired vocabulary of
//! several eras, through both webhooks over AdmissionReview JSON as the API server chains them;
//! each ratcheting rule; retired names and the `kimHistory` switch; enforcement actions; the
//! three example statuses of the discussion that defined the model.

use crate::support as common;
use kim::testing::model;

use kim::admission::{self, Hook};
use kim::status::{
    self, Action, CompatSwitch, Enforcement, Facts, Policy, RuleId, Snapshot, Writers,
};
use model::*;
use serde_json::{Value, json};

/// KIM's service account in a KIM control cluster.
pub(crate) const KIM: &str = "system:serviceaccount:kcp-system:infrastructure-manager";

/// The policy of the guard in front of KIM (README, "Guarding an existing KIM installation"):
/// KIM may write, KIM's deletion-error condition is accepted.
pub(crate) fn kim_policy() -> Policy {
    Policy::builtin()
        .with_switch(CompatSwitch::TerminatingConditionType)
        .with_writers(Writers::parse_list(&format!("{KIM},group:system:masters")).unwrap())
}

/// What the API server ends with after both webhooks: allowed or not, every warning of both
/// answers, the validating response, and the object as stored (the mutating patch applied).
struct Chain {
    allowed: bool,
    warnings: Vec<String>,
    response: Value,
    stored: Value,
}

/// Sends one `runtimes/status` UPDATE by `user` through `/mutate`, applies its patch, then
/// through `/validate`, as kube-apiserver does.
fn chain(policy: &Policy, old: &Rt, new: &Rt, user: &str) -> Chain {
    let uid = "6f1c2d3e-0000-4000-8000-00000000000a";
    let review = status_review(uid, old, new, user, &["system:serviceaccounts"], false);
    let m = admission::review(
        Hook::Mutate,
        policy,
        &serde_json::to_vec(&review).unwrap(),
        new.clock,
    );
    let mr = response_of(&m.body, uid);
    assert_eq!(
        mr["allowed"], true,
        "the mutating webhook never denies: {mr}"
    );
    let mut stored = new.obj.clone();
    if let Some(p) = patch_of(&mr) {
        json_patch::patch(&mut stored, &p).expect("the defaulting patch applies");
    }
    let patched = Rt {
        obj: stored.clone(),
        clock: new.clock,
    };
    let review = status_review(uid, old, &patched, user, &["system:serviceaccounts"], false);
    let v = admission::review(
        Hook::Validate,
        policy,
        &serde_json::to_vec(&review).unwrap(),
        new.clock,
    );
    let response = response_of(&v.body, uid);
    let mut warnings: Vec<String> = Vec::new();
    for r in [&mr, &response] {
        if let Some(w) = r.get("warnings").and_then(Value::as_array) {
            warnings.extend(w.iter().map(|w| w.as_str().unwrap().to_string()));
        }
    }
    Chain {
        allowed: response["allowed"] == true,
        warnings,
        response,
        stored,
    }
}

/// A stored Runtime of the sample `aws.yaml` with `state` and the conditions as KIM wrote
/// them back then (type, status, reason).
pub(crate) fn stored(state: &str, conds: &[(&str, &str, &str)]) -> Rt {
    let (_, sample) = sample_runtimes()
        .into_iter()
        .find(|(n, _)| n == "aws.yaml")
        .unwrap();
    Rt::new(sample).write(state, conds)
}

/// Runtimes as KIM left them in three eras (`samples/kim/vocabulary-history.tsv`): conditions of types and
/// reasons KIM has retired stay on them, because KIM never removes a condition.
pub(crate) fn eras() -> Vec<(&'static str, Rt)> {
    vec![
        (
            "2024-10: AuditlogConfigured and OidcConfigured, 2024 Configured reason",
            stored(
                "Ready",
                &[
                    ("Provisioned", "True", "ShootCreationCompleted"),
                    ("KubeconfigReady", "True", "GardenerClusterCRReady"),
                    ("AuditlogConfigured", "True", "AuditLogConfigured"),
                    ("OidcConfigured", "True", "OidcConfigured"),
                    ("Configured", "True", "ConfigurationCompleted"),
                ],
            )
            .completed(),
        ),
        (
            "2025-02: OidcConfigured and ProvisionedDryRun",
            stored(
                "Ready",
                &[
                    ("Provisioned", "True", "ConfigurationCompleted"),
                    ("ProvisionedDryRun", "True", "Processing"),
                    ("KubeconfigReady", "True", "GardenerClusterCRReady"),
                    ("OidcConfigured", "True", "OidcConfigured"),
                    ("Configured", "True", "AdministratorsConfigured"),
                ],
            )
            .completed(),
        ),
        (
            "2024-12: Failed with a retired reason on KubeconfigReady",
            stored(
                "Failed",
                &[
                    ("Provisioned", "True", "ProcessingCompleted"),
                    ("KubeconfigReady", "False", "SerializationErr"),
                ],
            ),
        ),
    ]
}

/// KIM's last write of a provisioning or an update (docs/kim-writes.md §3.3 W7): the namespace,
/// OIDC/ConfigMap and bindings steps run in one reconcile and end `Ready`.
fn kim_ready(rt: &Rt) -> Rt {
    rt.write(
        "Ready",
        &[
            ("KymaSystemNSCreated", "True", "KymaSystemNSReady"),
            (
                "OidcAndConfigMapConfigured",
                "True",
                "OidcAndConfigMapsConfigured",
            ),
            ("Configured", "True", "AdministratorsConfigured"),
        ],
    )
    .completed()
}

/// KIM's update of an existing runtime (docs/kim-writes.md §3.4): patch, Gardener reconciles,
/// the chain runs to the administrators' bindings; for a runtime without a ready kubeconfig
/// the kubeconfig step writes first (`ensure` in sFnHandleKubeconfig).
pub(crate) fn kim_update(start: &Rt) -> Vec<Rt> {
    let gen2 = start.bump_generation();
    let w1 = gen2.write("Pending", &[("Provisioned", "Unknown", "Processing")]);
    let w2 = w1.with(|o| {
        o["status"]["conditions"][0]["message"] = json!("Shoot update is in progress");
    });
    let w3 = w2.write(
        "Pending",
        &[("Provisioned", "True", "ConfigurationCompleted")],
    );
    let w3b = w3.write(
        "Pending",
        &[("KubeconfigReady", "True", "GardenerClusterCRReady")],
    );
    let w4 = kim_ready(&w3b);
    vec![w1, w2, w3, w3b, w4]
}

/// KIM's error writes on a Ready runtime: a retryable Gardener error, a terminal update
/// error, then a fixed spec retried (docs/kim-writes.md §2.3, §3.6).
pub(crate) fn kim_errors(start: &Rt) -> Vec<Rt> {
    let e1 = start.write("Pending", &[("Provisioned", "False", "GardenerErr")]);
    let e2 = e1.write("Failed", &[("Provisioned", "False", "ProcessingErr")]);
    let e3 = e2
        .bump_generation()
        .write("Pending", &[("Provisioned", "Unknown", "Processing")]);
    vec![e1, e2, e3]
}

/// KIM's deletion (docs/kim-writes.md §3.5) with its deletion-error path (a condition of type
/// `Terminating`, then Terminating again).
pub(crate) fn kim_delete(start: &Rt) -> Vec<Rt> {
    let d = start.deleting();
    let w1 = d.write(
        "Terminating",
        &[("Deprovisioned", "Unknown", "GardenerClusterCRDeleted")],
    );
    let err = w1.write("Failed", &[("Terminating", "False", "KubernetesErr")]);
    let w1b = err.write(
        "Terminating",
        &[("Deprovisioned", "Unknown", "GardenerClusterCRDeleted")],
    );
    let w2 = w1b.write(
        "Terminating",
        &[("Deprovisioned", "True", "GardenerClusterCRDeleted")],
    );
    let w3 = w2.write(
        "Terminating",
        &[("Deprovisioned", "Unknown", "GardenerShootDeleted")],
    );
    vec![w1, err, w1b, w2, w3]
}

/// Replays `writes` from `start`, each on top of what the API server stored for the previous
/// one; every write must be allowed. Returns every warning.
fn replay(policy: &Policy, era: &str, start: &Rt, writes: &[Rt]) -> Vec<String> {
    let mut old = start.clone();
    let mut warnings = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        let c = chain(policy, &old, w, KIM);
        assert!(c.allowed, "{era}: KIM write {i} denied: {}", c.response);
        for line in &c.warnings {
            assert!(
                line.chars().count() <= 120,
                "{era}: warning too long: {line}"
            );
        }
        warnings.extend(c.warnings);
        old = Rt {
            obj: c.stored,
            clock: w.clock,
        };
    }
    warnings
}

#[test]
fn kim_writes_on_runtimes_of_every_era_are_allowed_with_ratcheting_warnings() {
    let policy = kim_policy();
    for (era, start) in eras() {
        let mut writes = kim_update(&start);
        let ready = writes.last().unwrap().clone();
        writes.extend(kim_errors(&ready));
        let retried = writes.last().unwrap().clone();
        writes.extend(kim_update(&retried));
        let ready = writes.last().unwrap().clone();
        writes.extend(kim_delete(&ready));
        let warnings = replay(&policy, era, &start, &writes);
        // Every retired name the runtime carries is reported on every write that keeps it.
        let carried: Vec<&str> = start.status().unwrap()["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["type"].as_str())
            .filter(|t| policy.condition_type(t).is_none())
            .collect();
        for t in &carried {
            let n = warnings
                .iter()
                .filter(|w| {
                    w.starts_with("[condition-type-unknown] (ratcheted)")
                        && w.contains(&format!("\"{t}\" was retired by KIM after"))
                })
                .count();
            assert_eq!(n, writes.len(), "{era}: {t}: {warnings:#?}");
        }
        if era.starts_with("2024-12") {
            // The retired reason is ratcheted while it stays, then KIM overwrites it.
            assert!(
                warnings[0].starts_with("[reason-unknown] (ratcheted)")
                    && warnings[0]
                        .contains("\"SerializationErr\" was retired by KIM after 2025-01-13"),
                "{warnings:#?}"
            );
            assert!(
                !warnings
                    .iter()
                    .any(|w| w.contains("SerializationErr") && !w.contains("(ratcheted)"))
            );
        }
    }
}

#[test]
fn kim_create_sequence_on_a_new_runtime_has_no_warning() {
    let policy = kim_policy();
    let start = stored("Pending", &[]).with(|o| {
        o.as_object_mut().unwrap().remove("status");
    });
    let w1 = start.write("Pending", &[("Provisioned", "Unknown", "Initialised")]);
    let w2 = w1.write("Pending", &[("Provisioned", "Unknown", "Pending")]);
    let w3 =
        w2.with(|o| o["status"]["conditions"][0]["message"] = json!("Shoot creation in progress"));
    let w4 = w3.write(
        "Pending",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let w5 = w4.write(
        "Pending",
        &[("KubeconfigReady", "Unknown", "GardenerClusterCRCreated")],
    );
    let w6 = w5.write(
        "Pending",
        &[("KubeconfigReady", "True", "GardenerClusterCRReady")],
    );
    let w7 = kim_ready(&w6);
    let warnings = replay(&policy, "create", &start, &[w1, w2, w3, w4, w5, w6, w7]);
    assert!(warnings.is_empty(), "{warnings:#?}");
}

#[test]
fn new_unknown_changed_retired_and_retired_written_anew_are_denied() {
    let policy = kim_policy();
    let (_, era) = eras().remove(0);
    // A condition type nobody declared.
    let c = chain(
        &policy,
        &era,
        &era.write("Ready", &[("BackupConfigured", "True", "BackupReady")]),
        KIM,
    );
    assert!(!c.allowed);
    assert_eq!(
        c.response["auditAnnotations"]["violations"],
        "condition-type-unknown"
    );
    let msg = c.response["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("[condition-type-unknown] status.conditions[5].type: unknown condition type \"BackupConfigured\"; allowed: Provisioned"),
        "{msg}"
    );
    // A retired condition changed (status True -> False).
    let c = chain(
        &policy,
        &era,
        &era.write("Ready", &[("OidcConfigured", "False", "OidcConfigured")]),
        KIM,
    );
    assert!(!c.allowed);
    let msg = c.response["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("[condition-type-unknown] status.conditions[3].type: \"OidcConfigured\" was retired by KIM after 2025-05-19 (declared 2024-09-10 to 2025-05-19)"),
        "{msg}"
    );
    assert!(msg.contains("compatibility switch kimHistory"), "{msg}");
    // The retired reason of the ratcheted AuditlogConfigured is kept: still a warning.
    assert!(
        c.warnings.iter().any(|w| w.contains("AuditlogConfigured")),
        "{:?}",
        c.warnings
    );
    // A retired type written anew on a runtime that never had it.
    let (_, fresh) = eras().remove(2);
    let c = chain(
        &policy,
        &fresh,
        &fresh.write("Failed", &[("OidcConfigured", "True", "OidcConfigured")]),
        KIM,
    );
    assert!(!c.allowed);
    assert_eq!(
        c.response["auditAnnotations"]["violations"],
        "condition-type-unknown"
    );
    // A retired reason written anew on a current type.
    let c = chain(
        &policy,
        &fresh,
        &fresh.write("Failed", &[("Provisioned", "False", "DeletionErr")]),
        KIM,
    );
    assert!(!c.allowed);
    let msg = c.response["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "status.conditions[0].reason: \"DeletionErr\" was retired by KIM after 2025-01-13"
        ),
        "{msg}"
    );
}

#[test]
fn kim_history_accepts_retired_pairs_kim_declared_together() {
    let policy = kim_policy().with_switch(CompatSwitch::KimHistory);
    let (_, era) = eras().remove(0);
    for (t, s, r) in [
        ("OidcConfigured", "False", "OidcConfigured"),
        ("OidcConfigured", "Unknown", "Processing"),
        ("AuditlogConfigured", "False", "AuditLogErr"),
    ] {
        let c = chain(&policy, &era, &era.write("Ready", &[(t, s, r)]), KIM);
        assert!(c.allowed, "{t}/{r}={s}: {}", c.response);
    }
    let (_, fresh) = eras().remove(2);
    let c = chain(
        &policy,
        &fresh,
        &fresh.write("Failed", &[("Provisioned", "False", "DeletionErr")]),
        KIM,
    );
    assert!(c.allowed, "{}", c.response);
    // A reason KIM declared only after the type was retired is still unknown for it.
    let c = chain(
        &policy,
        &era,
        &era.write(
            "Ready",
            &[("OidcConfigured", "True", "RuntimeBootstrapperConfigured")],
        ),
        KIM,
    );
    assert!(!c.allowed);
    let msg = c.response["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("[reason-unknown] status.conditions[3].reason: reason \"RuntimeBootstrapperConfigured\" is not allowed for type OidcConfigured"),
        "{msg}"
    );
    // Retired states are never written anew.
    let c = chain(&policy, &fresh, &fresh.write("Error", &[]), KIM);
    assert!(!c.allowed);
    let msg = c.response["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("status.state: \"Error\" was retired by KIM after 2024-06-18"),
        "{msg}"
    );
}

// ---- each §7 rule alone, on `status::validate` ----------------------------------------------

/// The stored objects and writes of the ratcheting tests below (status model §7: unchanged
/// conditions, duplicates, broken state requirements, unknown states), as (name, old, new).
pub(crate) fn ratcheting_pairs() -> Vec<(&'static str, Rt, Rt)> {
    let broken = stored(
        "Pending",
        &[
            ("Provisioned", "Unknown", "Pending"),
            ("Legacy", "True", "Whatever"),
            ("KubeconfigReady", "True", "KubernetesErr"),
        ],
    );
    let dup = |o: &mut Value| {
        let first = o["status"]["conditions"][0].clone();
        o["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(first);
    };
    let dup_old = stored("Pending", &[("Provisioned", "Unknown", "Pending")]).with(dup);
    let clean = stored("Pending", &[("Provisioned", "Unknown", "Pending")]);
    let ready1 = stored(
        "Ready",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let pending1 = stored(
        "Pending",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let failed1 = stored(
        "Failed",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let error = stored("Error", &[("Provisioned", "False", "GardenerErr")]);
    let term = stored(
        "Terminating",
        &[
            ("OidcConfigured", "True", "OidcConfigured"),
            ("Deprovisioned", "Unknown", "GardenerShootDeleted"),
        ],
    )
    .deleting()
    .completed();
    vec![
        (
            "broken conditions, only messages rewritten",
            broken.clone(),
            broken
                .with(|o| {
                    for c in o["status"]["conditions"].as_array_mut().unwrap() {
                        c["message"] = json!("rewritten");
                        c["observedGeneration"] = json!(7);
                    }
                })
                .write("Pending", &[("Provisioned", "False", "GardenerErr")]),
        ),
        (
            "broken conditions changed",
            broken.clone(),
            broken.write("Pending", &[("Legacy", "False", "Whatever")]),
        ),
        (
            "duplicate kept",
            dup_old.clone(),
            dup_old.write(
                "Pending",
                &[("KubeconfigReady", "Unknown", "GardenerClusterCRCreated")],
            ),
        ),
        (
            "duplicate's second copy changed",
            dup_old.clone(),
            dup_old.with(|o| o["status"]["conditions"][1]["reason"] = json!("Initialised")),
        ),
        ("third copy added", dup_old.clone(), dup_old.with(dup)),
        ("first duplicate", clean.clone(), clean.with(dup)),
        (
            "Ready requirement broken, unrelated condition added",
            ready1.clone(),
            ready1.write(
                "Ready",
                &[("KymaSystemNSCreated", "True", "KymaSystemNSReady")],
            ),
        ),
        (
            "Ready requirement broken, its condition touched",
            ready1.clone(),
            ready1.write(
                "Ready",
                &[("Provisioned", "True", "ConfigurationCompleted")],
            ),
        ),
        (
            "Pending to a Ready it does not meet",
            pending1.clone(),
            pending1.write("Ready", &[]),
        ),
        (
            "Failed without False, unchanged",
            failed1.clone(),
            failed1.with(|o| o["status"]["shootLastOperation"] = json!({"type": "Reconcile"})),
        ),
        (
            "Failed without False, a condition added",
            failed1.clone(),
            failed1.write(
                "Failed",
                &[("KubeconfigReady", "True", "GardenerClusterCRReady")],
            ),
        ),
        (
            "retired state kept",
            error.clone(),
            error.write(
                "Error",
                &[("KubeconfigReady", "Unknown", "GardenerClusterCRCreated")],
            ),
        ),
        (
            "retired state left for Pending",
            error.clone(),
            error.write("Pending", &[("Provisioned", "Unknown", "Pending")]),
        ),
        (
            "retired state to another unknown one",
            error.clone(),
            error.write("Deleting", &[]),
        ),
        (
            "Terminating with a retired condition to Ready",
            term.clone(),
            term.write("Ready", &[]),
        ),
        (
            "Terminating with a retired condition, lastTransitionTime moved back",
            term.clone(),
            term.with(|o| {
                o["status"]["conditions"][1]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z")
            }),
        ),
    ]
}

fn validate(policy: &Policy, old: &Rt, new: &Rt) -> status::Violations {
    status::validate(
        policy,
        Some(&Snapshot::of_object(&old.obj)),
        &Snapshot::of_object(&new.obj),
        &Facts::by(RECONCILER, new.clock),
    )
}

fn actions(v: &[status::Violation]) -> Vec<(RuleId, Action)> {
    v.iter().map(|v| (v.rule, v.action)).collect()
}

#[test]
fn unchanged_conditions_are_judged_only_when_changed() {
    let p = Policy::builtin();
    let old = stored(
        "Pending",
        &[
            ("Provisioned", "Unknown", "Pending"),
            ("Legacy", "True", "Whatever"),
            ("Configured", "Maybe", "AdministratorsConfigured"),
            ("KubeconfigReady", "True", "KubernetesErr"),
        ],
    );
    // Only message and observedGeneration differ on the broken ones: unchanged (§7.1).
    let next = old
        .with(|o| {
            for c in o["status"]["conditions"].as_array_mut().unwrap() {
                c["message"] = json!("rewritten");
                c["observedGeneration"] = json!(7);
            }
        })
        .write("Pending", &[("Provisioned", "False", "GardenerErr")]);
    assert_eq!(
        actions(&validate(&p, &old, &next)),
        vec![
            (RuleId::ConditionTypeUnknown, Action::Ratcheted),
            (RuleId::ConditionShape, Action::Ratcheted),
            (RuleId::ReasonStatus, Action::Ratcheted),
        ]
    );
    // The first two changed (status, reason) are judged and denied; the third is kept.
    let changed = old.write(
        "Pending",
        &[
            ("Legacy", "False", "Whatever"),
            ("Configured", "Maybe", "ConfigurationError"),
        ],
    );
    assert_eq!(
        actions(&validate(&p, &old, &changed)),
        vec![
            (RuleId::ConditionTypeUnknown, Action::Deny),
            (RuleId::ConditionShape, Action::Deny),
            (RuleId::ReasonStatus, Action::Ratcheted),
        ]
    );
    // Without a stored object nothing is ratcheted.
    let first = status::validate(
        &p,
        None,
        &Snapshot::of_object(&old.obj),
        &Facts::by(RECONCILER, old.clock),
    );
    assert!(first.iter().all(|v| v.denies()), "{first:?}");
}

#[test]
fn a_duplicate_type_is_denied_only_when_the_write_adds_it() {
    let p = Policy::builtin();
    let dup = |o: &mut Value| {
        let first = o["status"]["conditions"][0].clone();
        o["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(first);
    };
    let old = stored("Pending", &[("Provisioned", "Unknown", "Pending")]).with(dup);
    // Kept as it was, and with the second copy changed: ratcheted (§7.2).
    let kept = old.write(
        "Pending",
        &[("KubeconfigReady", "Unknown", "GardenerClusterCRCreated")],
    );
    assert_eq!(
        actions(&validate(&p, &old, &kept)),
        vec![(RuleId::ConditionTypeDuplicate, Action::Ratcheted)]
    );
    let second_changed =
        old.with(|o| o["status"]["conditions"][1]["reason"] = json!("Initialised"));
    assert_eq!(
        actions(&validate(&p, &old, &second_changed)),
        vec![(RuleId::ConditionTypeDuplicate, Action::Ratcheted)]
    );
    // A third copy is added: denied.
    let added = old.with(dup);
    assert!(
        actions(&validate(&p, &old, &added))
            .contains(&(RuleId::ConditionTypeDuplicate, Action::Deny))
    );
    // A first duplicate on a clean object: denied.
    let clean = stored("Pending", &[("Provisioned", "Unknown", "Pending")]);
    assert_eq!(
        actions(&validate(&p, &clean, &clean.with(dup))),
        vec![(RuleId::ConditionTypeDuplicate, Action::Deny)]
    );
}

#[test]
fn a_broken_state_requirement_is_ratcheted_until_the_write_touches_it() {
    let p = Policy::builtin();
    // The seed "ready" example: Ready with only Provisioned.
    let old = stored(
        "Ready",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let unrelated = old.write(
        "Ready",
        &[("KymaSystemNSCreated", "True", "KymaSystemNSReady")],
    );
    let v = validate(&p, &old, &unrelated);
    assert_eq!(
        actions(&v),
        vec![
            (RuleId::ReadyRequires, Action::Ratcheted),
            (RuleId::ReadyRequires, Action::Ratcheted)
        ]
    );
    // Touching a condition the requirement reads: denied.
    let touched = old.write(
        "Ready",
        &[("Provisioned", "True", "ConfigurationCompleted")],
    );
    assert!(
        actions(&validate(&p, &old, &touched))
            .iter()
            .all(|a| a.1 == Action::Deny)
    );
    // Changing the state into one the object does not meet: denied.
    let failed_old = stored(
        "Pending",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let to_ready = failed_old.write("Ready", &[]);
    assert!(
        actions(&validate(&p, &failed_old, &to_ready))
            .iter()
            .all(|a| a.1 == Action::Deny)
    );
    // Failed without a False condition, unchanged conditions and state: ratcheted; AnyFalse reads
    // every condition, so adding one is a change.
    let failed = stored(
        "Failed",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let same = failed.with(|o| o["status"]["shootLastOperation"] = json!({"type": "Reconcile"}));
    assert_eq!(
        actions(&validate(&p, &failed, &same)),
        vec![(RuleId::FailedRequiresFalse, Action::Ratcheted)]
    );
    let more = failed.write(
        "Failed",
        &[("KubeconfigReady", "True", "GardenerClusterCRReady")],
    );
    assert_eq!(
        actions(&validate(&p, &failed, &more)),
        vec![(RuleId::FailedRequiresFalse, Action::Deny)]
    );
}

#[test]
fn an_unknown_state_the_object_had_is_a_warning() {
    let p = Policy::builtin();
    let old = stored("Error", &[("Provisioned", "False", "GardenerErr")]);
    let same_state = old.write(
        "Error",
        &[("KubeconfigReady", "Unknown", "GardenerClusterCRCreated")],
    );
    let v = validate(&p, &old, &same_state);
    assert_eq!(actions(&v), vec![(RuleId::StateUnknown, Action::Ratcheted)]);
    assert!(
        v[0].message
            .starts_with("status.state: \"Error\" was retired by KIM after 2024-06-18"),
        "{}",
        v[0].message
    );
    // Leaving it for a state of the table is a transition from ∅ (status model §3 has no edge from a
    // retired state): Pending is allowed.
    let to_pending = old.write("Pending", &[("Provisioned", "Unknown", "Pending")]);
    assert!(validate(&p, &old, &to_pending).allowed());
    // Another unknown state: denied.
    let other = old.write("Deleting", &[]);
    assert_eq!(
        actions(&validate(&p, &old, &other)),
        vec![(RuleId::StateUnknown, Action::Deny)]
    );
}

#[test]
fn transitions_provisioning_completed_times_and_writer_always_apply() {
    let p = Policy::builtin();
    // A stored Terminating runtime with a retired condition may not become Ready.
    let old = stored(
        "Terminating",
        &[
            ("OidcConfigured", "True", "OidcConfigured"),
            ("Deprovisioned", "Unknown", "GardenerShootDeleted"),
        ],
    )
    .deleting()
    .completed();
    let v = validate(&p, &old, &old.write("Ready", &[]));
    assert!(v.iter().any(|v| v.rule == RuleId::Transition && v.denies()));
    let v = validate(
        &p,
        &old,
        &old.with(|o| o["status"]["provisioningCompleted"] = json!(false)),
    );
    assert!(
        v.iter()
            .any(|v| v.rule == RuleId::ProvisioningCompleted && v.denies())
    );
    let v = validate(
        &p,
        &old,
        &old.with(|o| {
            o["status"]["conditions"][1]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z")
        }),
    );
    assert!(
        v.iter()
            .any(|v| v.rule == RuleId::LastTransitionTime && v.denies())
    );
    let v = status::validate(
        &p,
        Some(&Snapshot::of_object(&old.obj)),
        &Snapshot::of_object(
            &old.write(
                "Terminating",
                &[("Deprovisioned", "Unknown", "KubeconfigDeleted")],
            )
            .obj,
        ),
        &Facts::by("someone", old.clock),
    );
    assert!(v.iter().any(|v| v.rule == RuleId::Writer && v.denies()));
}

#[test]
fn warnings_are_one_line_each_rule_first_at_most_ten_and_a_count() {
    let p = Policy::builtin();
    let legacy: Vec<(String, String, String)> = (0..14)
        .map(|i| (format!("Legacy{i}"), "True".to_string(), "Old".to_string()))
        .collect();
    let conds: Vec<(&str, &str, &str)> = legacy
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    let old = stored("Pending", &conds);
    let new = old.write("Pending", &[("Provisioned", "Unknown", "Pending")]);
    let d = status::evaluate(
        &p,
        Some(&old.obj),
        &new.obj,
        &Facts::by(RECONCILER, new.clock),
    );
    assert!(d.violations.allowed());
    assert_eq!(d.warnings.len(), 11, "{:#?}", d.warnings);
    for w in &d.warnings[..10] {
        assert!(
            w.starts_with("[condition-type-unknown] (ratcheted) status.conditions["),
            "{w}"
        );
        assert!(w.chars().count() <= 120 && !w.contains('\n'), "{w}");
    }
    assert_eq!(d.warnings[10], "... and 4 more warnings");
}

// ---- enforcement actions -------------------------------------------------------------------

#[test]
fn warn_mode_allows_with_warnings_annotations_and_what_the_denial_would_have_said() {
    let (_, era) = eras().remove(2);
    let bad = era.write("Ready", &[]);
    let deny = chain(&kim_policy(), &era, &bad, "someone-else");
    assert!(!deny.allowed);
    let denial = deny.response["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        deny.response["auditAnnotations"]["violations"],
        "writer,ready-requires"
    );

    let warn = kim_policy().with_enforcement(Enforcement::Warn);
    let c = chain(&warn, &era, &bad, "someone-else");
    assert!(c.allowed, "{}", c.response);
    assert!(c.response.get("status").is_none());
    let ann = &c.response["auditAnnotations"];
    assert!(ann.get("violations").is_none(), "{ann}");
    assert_eq!(ann["warn-violations"], "writer,ready-requires");
    assert_eq!(ann["warn-message"], format!("would deny (403): {denial}"));
    assert_eq!(ann["ratcheted-violations"], "reason-unknown");
    assert!(
        c.warnings[0]
            .starts_with("[writer] (warn) user \"someone-else\" may not write Runtime status"),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("[reason-unknown] (ratcheted)"))
    );

    // Per rule: the writer rule denies although the rest warns.
    let mixed = warn.with_rule_action(RuleId::Writer, Enforcement::Deny);
    let c = chain(&mixed, &era, &bad, "someone-else");
    assert!(!c.allowed);
    assert_eq!(c.response["auditAnnotations"]["violations"], "writer");
    assert_eq!(
        c.response["auditAnnotations"]["warn-violations"],
        "ready-requires"
    );
    assert!(
        c.response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("[writer] user")
    );
}

#[test]
fn policy_file_sets_enforcement_and_rejects_unknown_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "kind: StatusPolicy\nenforcement:\n  action: warn\n  rules: {writer: deny}\n",
    )
    .unwrap();
    let p = Policy::builtin().load_file(&file).unwrap();
    assert_eq!(p.action(RuleId::Transition), Enforcement::Warn);
    assert_eq!(p.action(RuleId::Writer), Enforcement::Deny);
    for (text, field) in [
        ("enforcement: {action: maybe}\n", "enforcement.action"),
        (
            "enforcement: {rules: {nope: warn}}\n",
            "enforcement.rules.nope",
        ),
        (
            "enforcement: {rules: {writer: block}}\n",
            "enforcement.rules.writer",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = Policy::builtin().load_file(&file).unwrap_err().to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
}

// ---- the three example statuses of the discussion that defined the model --------------------

pub(crate) fn seed_examples() -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(samples_dir().join("seed/status-examples.yaml")).unwrap();
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.get("status").is_some())
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["status"].clone()))
        .collect()
}

#[test]
fn the_seed_examples_are_accepted_as_stored_objects_and_judged_as_new_writes() {
    let p = Policy::builtin();
    let examples = seed_examples();
    assert_eq!(examples.len(), 3);
    let (_, sample) = sample_runtimes().remove(0);
    let base = Rt::new(sample);
    for (name, st) in examples {
        let obj = base.with(|o| o["status"] = st.clone());
        // Stored: a write that keeps it unchanged is allowed (the Ready one with a warning).
        let kept = validate(&p, &obj, &obj);
        assert!(kept.allowed(), "{name}: {kept:?}");
        let expected_kept: Vec<(RuleId, Action)> = match name.as_str() {
            "ready" => vec![
                (RuleId::ReadyRequires, Action::Ratcheted),
                (RuleId::ReadyRequires, Action::Ratcheted),
            ],
            _ => vec![],
        };
        assert_eq!(actions(&kept), expected_kept, "{name}");
        // As a first status write: what the model says, and why.
        let d = status::evaluate(&p, Some(&base.obj), &obj.obj, &Facts::by(RECONCILER, t0()));
        let rules: Vec<RuleId> = d.violations.iter().map(|v| v.rule).collect();
        match name.as_str() {
            // ∅ -> Pending with Provisioned=Unknown/Pending: allowed.
            "pending" => assert!(
                d.violations.allowed() && rules.is_empty(),
                "{name}: {:?}",
                d.violations
            ),
            // ∅ -> Ready is no edge, and Ready needs KubeconfigReady and Configured True.
            "ready" => assert_eq!(
                rules,
                vec![
                    RuleId::Transition,
                    RuleId::ReadyRequires,
                    RuleId::ReadyRequires
                ],
                "{name}"
            ),
            // ∅ -> Failed with Provisioned=False/GardenerErr: allowed.
            "failed" => assert!(
                d.violations.allowed() && rules.is_empty(),
                "{name}: {:?}",
                d.violations
            ),
            other => panic!("unexpected example {other}"),
        }
        // Each gets the defaulted observedGeneration (the examples predate it), nothing else.
        assert!(
            d.patch
                .0
                .iter()
                .all(|op| op.path().as_str().ends_with("/observedGeneration")),
            "{name}: {:?}",
            d.patch
        );
    }
}

// ---- enforcement over the wire and from the command line ------------------------------------

/// The real server (TLS, HTTP) with a warn policy: the answer carries the warnings and the
/// audit annotations, and `kim_webhook_violations_total` counts each violation by action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_warn_mode_over_https_and_counts_violations() {
    let certs = common::certs("ca");
    let dir = common::plain_dir(&certs);
    let mut settings = kim::webhook::Settings::local(dir.path());
    settings.policy = std::sync::Arc::new(
        kim_policy()
            .with_enforcement(Enforcement::Warn)
            .with_rule_action(RuleId::TransitionNeedsDeletion, Enforcement::Deny),
    );
    let server = kim::webhook::start(settings).await.expect("server starts");
    let client = common::client(&[&certs.ca_pem], server.addr, false);
    let (_, era) = eras().remove(2);
    let send = |new: Rt, user: &'static str| {
        let client = client.clone();
        let era = era.clone();
        async move {
            let review = status_review("u-w", &era, &new, user, &[], false);
            let body = client
                .post(common::url(server.addr, "/validate"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&review).unwrap())
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            response_of(&body, "u-w")
        }
    };
    // Ready by a stranger: writer and ready-requires warn, the retired reason is ratcheted.
    let r = send(era.write("Ready", &[]), "stranger").await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        r["auditAnnotations"]["warn-violations"],
        "writer,ready-requires"
    );
    assert_eq!(r["warnings"].as_array().unwrap().len(), 4, "{r}");
    // Failed -> Terminating without deletion: that rule denies.
    let r = send(
        era.write(
            "Terminating",
            &[("Deprovisioned", "Unknown", "GardenerShootDeleted")],
        ),
        KIM,
    )
    .await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(
        r["auditAnnotations"]["violations"],
        "transition-needs-deletion"
    );
    assert_eq!(
        r["auditAnnotations"]["ratcheted-violations"],
        "reason-unknown"
    );
    let text = common::scrape(server.metrics_addr).await;
    let count = |rule: &str, action: &str| {
        common::sample(
            &text,
            &format!("kim_webhook_violations_total{{rule=\"{rule}\",action=\"{action}\"}}"),
        )
    };
    assert_eq!(count("writer", "warn"), Some(1.0), "{text}");
    assert_eq!(count("ready-requires", "warn"), Some(2.0), "{text}");
    assert_eq!(count("reason-unknown", "ratcheted"), Some(2.0), "{text}");
    assert_eq!(
        count("transition-needs-deletion", "deny"),
        Some(1.0),
        "{text}"
    );
}

fn kim_cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kim"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run kim")
}

#[test]
fn enforcement_flags_and_their_environment_variables_reach_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let (_, era) = eras().remove(2);
    let old = dir.path().join("old.json");
    let new = dir.path().join("new.json");
    std::fs::write(&old, serde_json::to_vec(&era.obj).unwrap()).unwrap();
    std::fs::write(
        &new,
        serde_json::to_vec(&era.write("Ready", &[]).obj).unwrap(),
    )
    .unwrap();
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    let check = ["check", "--old", old, "--new", new];

    let o = kim_cli(&check, &[]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("DENIED (403 Forbidden): Failed -> Ready"),
        "{out}"
    );
    assert!(out.contains("\n  [reason-unknown] (ratcheted) status.conditions[1].reason: \"SerializationErr\" was retired by KIM after 2025-01-13"), "{out}");

    for env in [vec![("KIM_ENFORCEMENT", "warn")], vec![]] {
        let mut args = check.to_vec();
        if env.is_empty() {
            args.extend(["--enforcement", "warn"]);
        }
        let o = kim_cli(&args, &env);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(out.starts_with("ALLOWED: Failed -> Ready"), "{out}");
        assert!(out.contains("\n  [ready-requires] (warn) status.state: Ready requires condition KubeconfigReady with status True, found False (SerializationErr)"), "{out}");
    }
    let o = kim_cli(
        &check,
        &[
            ("KIM_ENFORCEMENT", "warn"),
            ("KIM_RULE_ACTIONS", "ready-requires=deny"),
        ],
    );
    assert_eq!(o.status.code(), Some(1));

    let o = kim_cli(
        &[
            "policy",
            "--enforcement",
            "warn",
            "--rule-action",
            "writer=deny,transition=deny",
        ],
        &[],
    );
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| `writer` | §4.8 | only the allowed principals write status | 403 | deny |"),
        "{md}"
    );
    assert!(md.contains("| `ready-requires` | §4.3 | Ready needs Provisioned, KubeconfigReady and Configured all True | 403 | warn |"), "{md}");
    let o = kim_cli(
        &["policy", "--format", "json", "--compat", "kimHistory"],
        &[],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["switches"], json!(["kimHistory"]));
    assert_eq!(v["enforcement"], "deny");

    for (args, needle) in [
        (
            vec!["policy", "--rule-action", "nope=warn"],
            "unknown rule id",
        ),
        (
            vec!["policy", "--rule-action", "writer"],
            "expected RULE=deny or RULE=warn",
        ),
        (
            vec!["policy", "--enforcement", "block"],
            "is not one of deny, warn",
        ),
    ] {
        let o = kim_cli(&args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
