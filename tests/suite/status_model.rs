//! The status model over the real sample Runtimes: the reconciler's sequences are allowed, a
//! table of illegal writes is denied with the expected rule ids, KIM-compatible writes pass,
//! and defaulting behaves as `docs/status-model.md` §5 says.

use kim::testing::model;

use kim::status::{self, CompatSwitch, Facts, Policy, RuleId};
use model::*;
use serde_json::{Value, json};

fn facts(user: &str, rt: &Rt) -> Facts {
    Facts::by(user, rt.clock)
}

fn check(policy: &Policy, old: &Rt, new: &Rt) -> status::Decision {
    status::evaluate(policy, Some(&old.obj), &new.obj, &facts(RECONCILER, new))
}

#[test]
fn every_sample_lifecycle_is_allowed_and_needs_no_defaulting() {
    let policy = Policy::builtin();
    for (name, sample) in sample_runtimes() {
        let seq = lifecycle(sample);
        assert_eq!(seq.len(), 10);
        for (i, pair) in seq.windows(2).enumerate() {
            let d = check(&policy, &pair[0], &pair[1]);
            assert!(
                d.violations.allowed(),
                "{name} step {i}: {:?}",
                d.violations
            );
            assert!(
                d.patch.0.is_empty(),
                "{name} step {i}: reconciler writes are complete, got patch {:?}",
                d.patch
            );
        }
        // The final state is Terminating with provisioningCompleted kept.
        let last = seq.last().unwrap().status().unwrap();
        assert_eq!(last["state"], "Terminating");
        assert_eq!(last["provisioningCompleted"], true);
    }
}

#[test]
fn failure_paths_of_the_reconciler_are_allowed() {
    let policy = Policy::builtin();
    for (p, seq) in failure_paths().iter().enumerate() {
        for (i, pair) in seq.windows(2).enumerate() {
            let d = check(&policy, &pair[0], &pair[1]);
            assert!(
                d.violations.allowed(),
                "path {p} step {i}: {:?}",
                d.violations
            );
        }
    }
}

/// The reconciler's failure paths (spec'd in docs/reconciler.md), each a sequence of stored
/// Runtimes whose consecutive pairs are status writes.
pub(crate) fn failure_paths() -> Vec<Vec<Rt>> {
    let (_, sample) = sample_runtimes().remove(0);
    let start = Rt::new(sample);
    let init = start.write("Pending", &[("Provisioned", "Unknown", "Initialised")]);
    vec![
        // Conversion error: terminal; fixed spec retries.
        {
            let failed = init.write("Failed", &[("Provisioned", "False", "ConversionErr")]);
            let retry = failed
                .bump_generation()
                .write("Pending", &[("Provisioned", "Unknown", "Pending")]);
            vec![start.clone(), init.clone(), failed, retry]
        },
        // Conversion error on the very first write (∅ -> Failed).
        vec![
            start.clone(),
            start.write("Failed", &[("Provisioned", "False", "ConversionErr")]),
        ],
        // Gardener API error: retried while Pending, then recovers.
        {
            let err = init.write("Pending", &[("Provisioned", "False", "GardenerErr")]);
            let ok = err.write("Pending", &[("Provisioned", "Unknown", "Pending")]);
            vec![init.clone(), err, ok]
        },
        // Creation failed terminally, spec fixed, then Ready.
        {
            let pend = init.write("Pending", &[("Provisioned", "Unknown", "Pending")]);
            let failed = pend.write("Failed", &[("Provisioned", "False", "CreationErr")]);
            let fixed = failed
                .bump_generation()
                .write("Pending", &[("Provisioned", "Unknown", "Pending")]);
            let done = fixed.write(
                "Pending",
                &[("Provisioned", "True", "ShootCreationCompleted")],
            );
            let kc = done.write(
                "Pending",
                &[("KubeconfigReady", "True", "KubeconfigCreated")],
            );
            let ready = kc
                .write(
                    "Ready",
                    &[("Configured", "True", "AdministratorsConfigured")],
                )
                .completed();
            vec![init.clone(), pend, failed, fixed, done, kc, ready]
        },
        // Kubeconfig and configuration errors are retried while Pending.
        {
            let done = init.write(
                "Pending",
                &[("Provisioned", "True", "ShootCreationCompleted")],
            );
            let kerr = done.write("Pending", &[("KubeconfigReady", "False", "KubernetesErr")]);
            let kok = kerr.write(
                "Pending",
                &[("KubeconfigReady", "True", "KubeconfigCreated")],
            );
            let cerr = kok.write("Pending", &[("Configured", "False", "ConfigurationError")]);
            let ready = cerr
                .write(
                    "Ready",
                    &[("Configured", "True", "AdministratorsConfigured")],
                )
                .completed();
            vec![init.clone(), done, kerr, kok, cerr, ready]
        },
        // Deletion with a Gardener error, a Failed stop on the way, then Terminating again.
        {
            let del = init.deleting();
            let t1 = del.write("Terminating", &[("Deprovisioned", "False", "GardenerErr")]);
            let f = t1.write(
                "Failed",
                &[("Deprovisioned", "False", "GardenerShootDeleted")],
            );
            let t2 = f.write(
                "Terminating",
                &[("Deprovisioned", "Unknown", "GardenerShootDeleted")],
            );
            let t3 = t2.write(
                "Terminating",
                &[("Deprovisioned", "True", "KubeconfigDeleted")],
            );
            vec![init.clone(), t1, f, t2, t3]
        },
        // Deleted before any status was written (∅ -> Terminating while deleting).
        vec![
            start.clone(),
            start.deleting().write(
                "Terminating",
                &[("Deprovisioned", "True", "KubeconfigDeleted")],
            ),
        ],
        // Update failure: ProcessingErr terminal, then fixed.
        {
            let ready = lifecycle(start.obj.clone())[5].clone();
            let upd = ready
                .bump_generation()
                .write("Pending", &[("Provisioned", "Unknown", "Processing")]);
            let failed = upd.write("Failed", &[("Provisioned", "False", "ProcessingErr")]);
            let again = failed
                .bump_generation()
                .write("Pending", &[("Provisioned", "Unknown", "Processing")]);
            let done = again.write(
                "Pending",
                &[("Provisioned", "True", "ConfigurationCompleted")],
            );
            let back = done.write("Ready", &[]);
            vec![ready, upd, failed, again, done, back]
        },
    ]
}

/// The reconciler's "Ready" runtime of a sample (index 5 of the lifecycle).
fn ready() -> Rt {
    lifecycle(sample_runtimes().remove(0).1)[5].clone()
}

fn pending() -> Rt {
    lifecycle(sample_runtimes().remove(0).1)[2].clone()
}

fn terminating() -> Rt {
    lifecycle(sample_runtimes().remove(0).1)[9].clone()
}

fn cond_mut<'a>(o: &'a mut Value, ctype: &str) -> &'a mut Value {
    o["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["type"] == ctype)
        .unwrap()
}

pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) old: Option<Rt>,
    pub(crate) new: Rt,
    pub(crate) user: &'static str,
    pub(crate) groups: Vec<String>,
    expect: &'static [RuleId],
}

fn case(name: &'static str, old: Option<Rt>, new: Rt, expect: &'static [RuleId]) -> Case {
    Case {
        name,
        old,
        new,
        user: RECONCILER,
        groups: vec![],
        expect,
    }
}

/// The table of illegal writes, each with the rules it must be denied by.
pub(crate) fn illegal_writes() -> Vec<Case> {
    use RuleId::*;
    let r = ready();
    let p = pending();
    let t = terminating();
    let fresh = Rt::new(sample_runtimes().remove(1).1);
    vec![
        case("Terminating -> Ready", Some(t.clone()), t.write("Ready", &[]), &[Transition]),
        case(
            "Terminating -> Pending",
            Some(t.clone()),
            t.write("Pending", &[]),
            &[Transition],
        ),
        case("Ready -> Terminating without deletionTimestamp", Some(r.clone()), r.write("Terminating", &[("Deprovisioned", "Unknown", "GardenerShootDeleted")]), &[TransitionNeedsDeletion]),
        case("none -> Terminating without deletionTimestamp", Some(fresh.clone()), fresh.write("Terminating", &[("Deprovisioned", "Unknown", "GardenerShootDeleted")]), &[TransitionNeedsDeletion]),
        case("none -> Ready", Some(fresh.clone()), fresh.write("Ready", &[("Provisioned", "True", "ShootCreationCompleted"), ("KubeconfigReady", "True", "KubeconfigCreated"), ("Configured", "True", "AdministratorsConfigured")]), &[Transition]),
        case("Terminating -> Failed without deletionTimestamp", Some(t.with(|o| { o["metadata"].as_object_mut().unwrap().remove("deletionTimestamp"); })), t.with(|o| { o["metadata"].as_object_mut().unwrap().remove("deletionTimestamp"); }).write("Failed", &[("Deprovisioned", "False", "GardenerErr")]), &[TransitionNeedsDeletion]),
        case("status removed", Some(r.clone()), r.with(|o| { o.as_object_mut().unwrap().remove("status"); }), &[StatusRemoved]),
        case("status set to null", Some(r.clone()), r.with(|o| o["status"] = Value::Null), &[StatusRemoved]),
        case("state missing", Some(r.clone()), r.with(|o| { o["status"].as_object_mut().unwrap().remove("state"); }), &[StateRequired]),
        case("state unknown", Some(r.clone()), r.with(|o| o["status"]["state"] = json!("Running")), &[StateUnknown]),
        case("state wrong case", Some(r.clone()), r.with(|o| o["status"]["state"] = json!("ready")), &[StateUnknown]),
        case("status is a string", Some(r.clone()), r.with(|o| o["status"] = json!("Ready")), &[Malformed]),
        case("conditions is an object", Some(p.clone()), p.with(|o| o["status"]["conditions"] = json!({"type": "Provisioned"})), &[Malformed]),
        case("unknown condition type", Some(p.clone()), p.write("Pending", &[("Bogus", "True", "Whatever")]), &[ConditionTypeUnknown]),
        case("state name used as type (switch off)", Some(t.clone()), t.write("Terminating", &[("Terminating", "False", "KubernetesErr")]), &[ConditionTypeUnknown]),
        case("unknown reason", Some(p.clone()), p.write("Pending", &[("Provisioned", "Unknown", "Bogus")]), &[ReasonUnknown]),
        case("reason of another type", Some(p.clone()), p.write("Pending", &[("Provisioned", "True", "AdministratorsConfigured")]), &[ReasonUnknown]),
        case("reason with a status it may not carry", Some(p.clone()), p.write("Pending", &[("Provisioned", "True", "Initialised")]), &[ReasonStatus]),
        case("ShootCreationCompleted False", Some(p.clone()), p.write("Pending", &[("Provisioned", "False", "ShootCreationCompleted")]), &[ReasonStatus]),
        case("condition status lowercase", Some(p.clone()), p.with(|o| cond_mut(o, "Provisioned")["status"] = json!("true")), &[ConditionShape]),
        case("condition without reason", Some(p.clone()), p.with(|o| { cond_mut(o, "Provisioned").as_object_mut().unwrap().remove("reason"); }), &[ConditionShape]),
        case("condition without type", Some(p.clone()), p.with(|o| { o["status"]["conditions"].as_array_mut().unwrap().push(json!({"status": "True", "reason": "X", "message": "m", "lastTransitionTime": "2026-11-01T10:00:00Z"})); }), &[ConditionShape]),
        case("condition is a string", Some(p.clone()), p.with(|o| { o["status"]["conditions"].as_array_mut().unwrap().push(json!("Provisioned")); }), &[ConditionShape]),
        case("duplicate condition types", Some(p.clone()), p.with(|o| { let c = cond_mut(o, "Provisioned").clone(); o["status"]["conditions"].as_array_mut().unwrap().push(c); }), &[ConditionTypeDuplicate]),
        case("Ready with Configured False", Some(p.clone()), p.write("Ready", &[("Provisioned", "True", "ShootCreationCompleted"), ("KubeconfigReady", "True", "KubeconfigCreated"), ("Configured", "False", "ConfigurationError")]), &[ReadyRequires]),
        case("Ready without KubeconfigReady", Some(p.clone()), p.write("Ready", &[("Provisioned", "True", "ShootCreationCompleted"), ("Configured", "True", "AdministratorsConfigured")]), &[ReadyRequires]),
        case("Ready with Provisioned Unknown", Some(p.clone()), p.write("Ready", &[("KubeconfigReady", "True", "KubeconfigCreated"), ("Configured", "True", "AdministratorsConfigured")]), &[ReadyRequires]),
        case("Failed without a False condition", Some(p.clone()), p.write("Failed", &[]), &[FailedRequiresFalse]),
        case("Terminating without Deprovisioned", Some(r.deleting()), r.deleting().write("Terminating", &[]), &[TerminatingRequiresDeprovisioned]),
        case("provisioningCompleted true -> false", Some(r.clone()), r.with(|o| o["status"]["provisioningCompleted"] = json!(false)), &[ProvisioningCompleted]),
        case("provisioningCompleted removed", Some(r.clone()), r.with(|o| { o["status"].as_object_mut().unwrap().remove("provisioningCompleted"); }), &[ProvisioningCompleted]),
        case("provisioningCompleted a string", Some(r.clone()), r.with(|o| o["status"]["provisioningCompleted"] = json!("true")), &[Malformed, ProvisioningCompleted]),
        case("lastTransitionTime changed without status change", Some(r.clone()), r.with(|o| cond_mut(o, "Provisioned")["lastTransitionTime"] = json!("2030-01-01T00:00:00Z")), &[LastTransitionTime]),
        case("lastTransitionTime moved backwards on a status change", Some(r.clone()), r.with(|o| { let c = cond_mut(o, "Configured"); c["status"] = json!("False"); c["reason"] = json!("ConfigurationError"); c["lastTransitionTime"] = json!("2001-01-01T00:00:00Z"); o["status"]["state"] = json!("Pending"); }), &[LastTransitionTime]),
        case("lastTransitionTime not a time", Some(p.clone()), p.with(|o| cond_mut(o, "Provisioned")["lastTransitionTime"] = json!("yesterday")), &[ConditionShape]),
        Case { user: "alice", groups: vec!["system:authenticated".into()], ..case("write by another user", Some(p.clone()), p.write("Pending", &[("Provisioned", "True", "ShootCreationCompleted")]), &[Writer]) },
        Case { user: "system:serviceaccount:kcp-system:default", ..case("write by another service account", Some(r.clone()), r.write("Failed", &[("Configured", "False", "ConfigurationError")]), &[Writer]) },
        case("several violations in one write", Some(t.clone()), t.write("Ready", &[("Bogus", "True", "X"), ("Provisioned", "Unknown", "Nope")]), &[Transition, ConditionTypeUnknown, ReasonUnknown, ReadyRequires]),
    ]
}

#[test]
fn illegal_writes_are_denied_with_the_expected_rules() {
    let policy = Policy::builtin();
    let cases = illegal_writes();
    assert!(
        cases.len() >= 30,
        "at least 30 illegal writes, have {}",
        cases.len()
    );
    let mut covered = std::collections::BTreeSet::new();
    for c in cases {
        let facts = Facts {
            user: c.user.to_string(),
            groups: c.groups.clone(),
            dry_run: false,
            now: c.new.clock,
        };
        // Validation sees the object as written (the validating webhook's view).
        let old = c.old.as_ref().map(|o| status::Snapshot::of_object(&o.obj));
        let v = status::validate(
            &policy,
            old.as_ref(),
            &status::Snapshot::of_object(&c.new.obj),
            &facts,
        );
        let got: Vec<RuleId> = v.iter().map(|v| v.rule).collect();
        let mut want = c.expect.to_vec();
        want.sort();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        got_sorted.dedup();
        assert_eq!(got_sorted, want, "{}: {:#?}", c.name, v);
        for v in &v {
            assert!(
                !v.message.is_empty() && v.message.contains(':'),
                "{}: message names the path: {}",
                c.name,
                v.message
            );
        }
        covered.extend(got);
    }
    // Every rule of §1, §3 and §4 is broken at least once.
    for r in RuleId::ALL {
        assert!(covered.contains(&r), "no illegal write breaks rule {r}");
    }
}

#[test]
fn denial_messages_follow_spec_section_6() {
    let policy = Policy::builtin();
    let t = terminating();
    let new = t.write("Ready", &[]);
    let d = status::validate(
        &policy,
        Some(&status::Snapshot::of_object(&t.obj)),
        &status::Snapshot::of_object(&new.obj),
        &Facts::by(RECONCILER, new.clock),
    );
    let msg = d.denial_message();
    assert!(
        msg.contains("status.state: transition Terminating -> Ready is not allowed (deletion is final); allowed from Terminating: Terminating, Failed"),
        "{msg}"
    );
    assert_eq!(d.denial_code(), 403);

    let r = ready();
    let new = r.with(|o| o["status"]["state"] = json!("Running"));
    let d = status::validate(
        &policy,
        Some(&status::Snapshot::of_object(&r.obj)),
        &status::Snapshot::of_object(&new.obj),
        &Facts::by(RECONCILER, new.clock),
    );
    assert_eq!(d.denial_code(), 400);

    let p = pending();
    let new = p.write(
        "Pending",
        &[("Provisioned", "Unknown", "AdministratorsConfigured")],
    );
    let d = status::validate(
        &policy,
        Some(&status::Snapshot::of_object(&p.obj)),
        &status::Snapshot::of_object(&new.obj),
        &Facts::by(RECONCILER, new.clock),
    );
    let msg = d.denial_message();
    assert!(msg.contains("reason \"AdministratorsConfigured\" is not allowed for type Provisioned; allowed: Initialised, Pending"), "{msg}");
    assert!(msg.contains("is a reason of type Configured"), "{msg}");

    let new = p.write(
        "Pending",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    let f = Facts {
        user: "mallory".into(),
        groups: vec!["devs".into()],
        dry_run: true,
        now: new.clock,
    };
    let d = status::validate(
        &policy,
        Some(&status::Snapshot::of_object(&p.obj)),
        &status::Snapshot::of_object(&new.obj),
        &f,
    );
    let msg = d.denial_message();
    assert!(
        msg.contains("user \"mallory\" may not write Runtime status")
            && msg.contains("system:masters")
            && msg.contains(RECONCILER),
        "{msg}"
    );
}

/// Every KIM-compatible (type, reason, status) of status model §2 is allowed on a plausible predecessor.
#[test]
fn kim_compatible_writes_are_allowed() {
    let policy = Policy::builtin();
    let r = ready();
    let p = pending();
    let compat: &[(&str, &str, &[&str])] = &[
        ("Provisioned", "SeedNotFound", &["False"]),
        ("Provisioned", "AuditLogErr", &["False"]),
        ("Provisioned", "CustomAuditLogErr", &["False"]),
        ("Provisioned", "OidcConfigurationErr", &["False"]),
        ("Provisioned", "RegistryCacheConfigured", &["False"]),
        ("Provisioned", "ProcessingCompleted", &["True"]),
        ("Provisioned", "Processing", &["True", "False", "Unknown"]),
        ("KubeconfigReady", "GardenerClusterCRCreated", &["Unknown"]),
        ("KubeconfigReady", "GardenerClusterCRReady", &["True"]),
        ("Configured", "ConfigurationStarted", &["Unknown"]),
        ("Configured", "ConfigurationCompleted", &["True"]),
        ("KymaSystemNSCreated", "KymaSystemNSReady", &["True"]),
        ("KymaSystemNSCreated", "KymaSystemNSError", &["False"]),
        (
            "OidcAndConfigMapConfigured",
            "OidcAndConfigMapsConfigured",
            &["True"],
        ),
        ("OidcAndConfigMapConfigured", "ConfigMapErr", &["Unknown"]),
        (
            "OidcAndConfigMapConfigured",
            "OidcConfigurationErr",
            &["Unknown"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperConfigured",
            &["True"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperConfigurationFailed",
            &["False"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperStatusUnknown",
            &["False"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperInstallationInProgress",
            &["False"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperInstallationFailed",
            &["False"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperUpgradeInProgress",
            &["False"],
        ),
        (
            "RuntimeBootstrapperReady",
            "RuntimeBootstrapperUpgradeFailed",
            &["False"],
        ),
        (
            "RegistryCacheConfigured",
            "RegistryCacheConfigured",
            &["True"],
        ),
        (
            "RegistryCacheConfigured",
            "RegistryCacheGardenClusterConfigurationFailed",
            &["False"],
        ),
        (
            "RegistryCacheConfigured",
            "RegistryCacheGardenClusterCleanupFailed",
            &["False"],
        ),
        (
            "CustomAuditLogConfigured",
            "CustomAuditLogConfigured",
            &["True", "Unknown", "False"],
        ),
        ("CustomAuditLogConfigured", "CustomAuditLogErr", &["False"]),
        ("AuditLogCredentialsCopied", "CredentialsCopied", &["True"]),
        (
            "AuditLogCredentialsCopied",
            "CredentialsCopyErr",
            &["False"],
        ),
    ];
    for (ctype, reason, statuses) in compat {
        for s in *statuses {
            // A False condition on Provisioned/KubeconfigReady/Configured leaves Ready: write it
            // on a Pending runtime as KIM does (Failed for terminal ones is tested below).
            let (old, state) = match (*ctype, *s) {
                ("Provisioned" | "KubeconfigReady" | "Configured", "True") => (&r, "Ready"),
                ("Provisioned" | "KubeconfigReady" | "Configured", _) => (&p, "Pending"),
                (_, "True") => (&r, "Ready"),
                _ => (&r, "Pending"),
            };
            let new = old.write(state, &[(ctype, s, reason)]);
            let d = check(&policy, old, &new);
            assert!(
                d.violations.allowed(),
                "{ctype}/{reason}={s}: {:?}",
                d.violations
            );
        }
    }
    // Terminal KIM errors: Failed with the False condition.
    for reason in [
        "SeedNotFound",
        "AuditLogErr",
        "CustomAuditLogErr",
        "OidcConfigurationErr",
        "RegistryCacheConfigured",
    ] {
        let new = p.write("Failed", &[("Provisioned", "False", reason)]);
        assert!(
            check(&policy, &p, &new).violations.allowed(),
            "Failed/{reason}"
        );
    }
    // KIM's deletion conditions.
    let del = r.deleting();
    for (reason, s) in [
        ("GardenerClusterCRDeleted", "Unknown"),
        ("GardenerClusterCRDeleted", "True"),
        ("StructuredConfigDeleted", "False"),
    ] {
        let new = del.write("Terminating", &[("Deprovisioned", s, reason)]);
        assert!(
            check(&policy, &del, &new).violations.allowed(),
            "Terminating Deprovisioned/{reason}={s}"
        );
    }
}

#[test]
fn terminating_condition_type_needs_the_switch() {
    let r = ready().deleting();
    let new = r.write("Terminating", &[("Terminating", "False", "KubernetesErr")]);
    let off = Policy::builtin();
    let d = check(&off, &r, &new);
    let rules: Vec<_> = d.violations.iter().map(|v| v.rule).collect();
    assert_eq!(
        rules,
        vec![
            RuleId::ConditionTypeUnknown,
            RuleId::TerminatingRequiresDeprovisioned
        ]
    );
    let on = Policy::builtin().with_switch(CompatSwitch::TerminatingConditionType);
    let d = check(&on, &r, &new);
    assert!(d.violations.allowed(), "{:?}", d.violations);
}

#[test]
fn policy_file_extends_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "kind: StatusPolicy\nconditionTypes:\n  - type: BackupConfigured\n    reasons:\n      - {reason: BackupReady, statuses: [\"True\"], message: Backups configured}\n",
    )
    .unwrap();
    let p = Policy::builtin().load_file(&path).unwrap();
    let r = ready();
    let new = r.write("Ready", &[("BackupConfigured", "True", "BackupReady")]);
    assert!(check(&p, &r, &new).violations.allowed());
    assert!(!check(&Policy::builtin(), &r, &new).violations.allowed());

    std::fs::write(
        &path,
        "conditionTypes:\n  - type: X\n    reasons:\n      - {reason: R, statuses: [Maybe]}\n",
    )
    .unwrap();
    let err = Policy::builtin().load_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("policy.yaml") && err.contains("conditionTypes[0].reasons[0].statuses[0]"),
        "{err}"
    );

    std::fs::write(&path, "conditionTypes:\n  - type: X\n    reasonz: []\n").unwrap();
    let err = Policy::builtin().load_file(&path).unwrap_err().to_string();
    assert!(err.contains("reasonz"), "{err}");
}

#[test]
fn defaulting_fills_times_generation_and_messages() {
    let policy = Policy::builtin();
    let p = pending();
    let now = p.clock + chrono::Duration::seconds(30);
    // A client writes a new condition without lastTransitionTime, observedGeneration and message,
    // and changes Provisioned's status keeping its old timestamp.
    let new = p.with(|o| {
        let c = cond_mut(o, "Provisioned");
        c["status"] = json!("True");
        c["reason"] = json!("ShootCreationCompleted");
        c["message"] = json!("");
        o["status"]["conditions"].as_array_mut().unwrap().push(
            json!({"type": "KubeconfigReady", "status": "True", "reason": "KubeconfigCreated"}),
        );
    });
    let d = status::evaluate(&policy, Some(&p.obj), &new.obj, &Facts::by(RECONCILER, now));
    assert!(d.violations.allowed(), "{:?}", d.violations);
    let mut patched = new.obj.clone();
    json_patch::patch(&mut patched, &d.patch).unwrap();
    let stamp = status::format_time(now);
    let prov = &patched["status"]["conditions"][0];
    assert_eq!(prov["lastTransitionTime"], json!(stamp));
    assert_eq!(
        prov["message"],
        json!("Gardener finished creating the Shoot")
    );
    let kc = &patched["status"]["conditions"][1];
    assert_eq!(kc["lastTransitionTime"], json!(stamp));
    assert_eq!(kc["observedGeneration"], json!(1));
    assert_eq!(kc["message"], json!("Kubeconfig Secret written"));
    // Idempotent: a second pass (reinvocationPolicy: IfNeeded) returns no patch.
    let again = status::evaluate(
        &policy,
        Some(&p.obj),
        &patched,
        &Facts::by(RECONCILER, now + chrono::Duration::seconds(1)),
    );
    assert!(again.patch.0.is_empty(), "{:?}", again.patch);

    // Status unchanged but timestamp changed: restored.
    let churn = p
        .with(|o| cond_mut(o, "Provisioned")["lastTransitionTime"] = json!("2031-01-01T00:00:00Z"));
    let d = status::evaluate(
        &policy,
        Some(&p.obj),
        &churn.obj,
        &Facts::by(RECONCILER, now),
    );
    assert!(d.violations.allowed());
    let mut fixed = churn.obj.clone();
    json_patch::patch(&mut fixed, &d.patch).unwrap();
    assert_eq!(fixed, p.obj);

    // A complete write needs nothing.
    let ok = p.write(
        "Pending",
        &[("Provisioned", "True", "ShootCreationCompleted")],
    );
    assert!(
        status::evaluate(&policy, Some(&p.obj), &ok.obj, &Facts::by(RECONCILER, now))
            .patch
            .0
            .is_empty()
    );
}

#[test]
fn policy_renders_from_the_table() {
    let md = status::render::markdown(&Policy::builtin());
    for st in status::State::ALL {
        assert!(md.contains(&format!("| `{st}` |")));
    }
    assert!(
        md.contains("| Terminating | no | no | yes¹ | yes¹ |"),
        "{md}"
    );
    assert!(md.contains("| ∅ | yes | no | yes | yes¹ |"), "{md}");
    for row in kim::status::table::REASONS
        .iter()
        .filter(|r| r.switch.is_none())
    {
        assert!(
            md.contains(&format!("| {} | {} |", row.condition_type, row.reason)),
            "{}/{}",
            row.condition_type,
            row.reason
        );
    }
    let dot = status::render::render(&Policy::builtin(), status::render::Format::Dot);
    assert!(dot.contains("Terminating -> Failed [style=dashed"));
    let json: Value = serde_json::from_str(&status::render::render(
        &Policy::builtin(),
        status::render::Format::Json,
    ))
    .unwrap();
    assert_eq!(
        json["states"],
        json!(["Pending", "Ready", "Failed", "Terminating"])
    );
}

/// Spec §5 compares transition times as instants: the old time in another RFC 3339 spelling is
/// the same time, and Go's zero time (what `meta.SetStatusCondition` treats as unset) is unset.
#[test]
fn defaulting_compares_times_as_instants_and_treats_the_zero_time_as_unset() {
    let policy = Policy::builtin();
    let old = pending().write("Pending", &[("Provisioned", "Unknown", "Pending")]);
    let old_ltt = cond_mut(&mut old.obj.clone(), "Provisioned")["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_string();
    let now = old.clock + chrono::Duration::seconds(30);
    let stamp = status::format_time(now);
    let defaulted = |new: &Rt| -> Value {
        let d = status::evaluate(
            &policy,
            Some(&old.obj),
            &new.obj,
            &Facts::by(RECONCILER, now),
        );
        assert!(d.violations.allowed(), "{:?}", d.violations);
        let mut o = new.obj.clone();
        json_patch::patch(&mut o, &d.patch).unwrap();
        o
    };
    // The status changes; the client (a JavaScript one) sends the old instant with millis.
    let millis = old_ltt.replace('Z', ".000Z");
    for same_instant in [millis.clone(), old_ltt.replace('Z', "+00:00")] {
        let new = old.with(|o| {
            let c = cond_mut(o, "Provisioned");
            c["status"] = json!("False");
            c["reason"] = json!("GardenerErr");
            c["lastTransitionTime"] = json!(same_instant);
        });
        let mut out = defaulted(&new);
        assert_eq!(
            cond_mut(&mut out, "Provisioned")["lastTransitionTime"],
            json!(stamp),
            "{same_instant}"
        );
    }
    // A new condition with Go's zero time gets the request time.
    let zero = old.with(|o| {
        o["status"]["conditions"].as_array_mut().unwrap().push(json!({
            "type": "KubeconfigReady", "status": "Unknown", "reason": "GardenerClusterCRCreated",
            "message": "m", "observedGeneration": 1, "lastTransitionTime": "0001-01-01T00:00:00Z"}));
    });
    let mut out = defaulted(&zero);
    assert_eq!(
        cond_mut(&mut out, "KubeconfigReady")["lastTransitionTime"],
        json!(stamp)
    );
    // Status unchanged: the zero time is unset, so the stored time comes back; the same instant
    // in another spelling is no change at all (no patch).
    let unset = old
        .with(|o| cond_mut(o, "Provisioned")["lastTransitionTime"] = json!("0001-01-01T00:00:00Z"));
    let mut out = defaulted(&unset);
    assert_eq!(
        cond_mut(&mut out, "Provisioned")["lastTransitionTime"],
        json!(old_ltt)
    );
    let respelled = old.with(|o| cond_mut(o, "Provisioned")["lastTransitionTime"] = json!(millis));
    let d = status::evaluate(
        &policy,
        Some(&old.obj),
        &respelled.obj,
        &Facts::by(RECONCILER, now),
    );
    assert!(
        d.violations.allowed() && d.patch.0.is_empty(),
        "{:?} {:?}",
        d.patch,
        d.violations
    );
}

/// The embedded vocabulary is the sample file, and every name KIM declares today is in the
/// table (or named here as declared but never written by KIM).
#[test]
fn the_kim_vocabulary_is_the_sample_history_and_current_names_are_in_the_table() {
    let file = std::fs::read_to_string(samples_dir().join("kim/vocabulary-history.tsv")).unwrap();
    assert_eq!(status::history::KIM_VOCABULARY_TSV, file);
    // Declared in KIM's API but written by no step of KIM's FSM (docs/kim-writes.md §2.4).
    const DECLARED_NOT_WRITTEN: &[&str] = &["RegistryCacheError"];
    let policy = Policy::builtin();
    for n in status::history::vocabulary()
        .iter()
        .filter(|n| n.in_kim_today)
    {
        let known = match n.kind {
            status::history::Kind::Type => policy.condition_type(n.name).is_some(),
            status::history::Kind::Reason => {
                policy.types.iter().any(|t| t.reason(n.name).is_some())
                    || DECLARED_NOT_WRITTEN.contains(&n.name)
            }
            status::history::Kind::State => status::State::parse(n.name).is_some(),
        };
        assert!(
            known,
            "KIM declares {:?} {} today; the table lacks it",
            n.kind, n.name
        );
    }
    // With kimHistory, every retired type and reason is accepted on some pair.
    let history = Policy::builtin().with_switch(CompatSwitch::KimHistory);
    for n in status::history::vocabulary().iter().filter(|n| n.retired()) {
        match n.kind {
            status::history::Kind::Type => {
                assert!(history.condition_type(n.name).is_some(), "{}", n.name)
            }
            status::history::Kind::Reason => assert!(
                history.types.iter().any(|t| t.reason(n.name).is_some()),
                "{}",
                n.name
            ),
            status::history::Kind::State => assert!(status::State::parse(n.name).is_none()),
        }
    }
}

/// `Violations` as a library user sees it: empty is allowed with code 200, no message and no
/// warnings, and serializes as `[]`; a denied write serializes as a JSON array with one object
/// per violation, in the order the slice gives them.
#[test]
fn violations_empty_and_as_a_json_array() {
    let empty = status::Violations::default();
    assert!(empty.is_empty());
    assert!(empty.allowed());
    assert_eq!(empty.denial_code(), 200);
    assert_eq!(empty.denial_message(), "");
    assert!(empty.warnings().is_empty());
    assert_eq!(serde_json::to_value(&empty).unwrap(), json!([]));

    let policy = Policy::builtin();
    let old = json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": "a", "namespace": "kcp-system", "generation": 1},
        "status": {"state": "Ready"}});
    let mut new = old.clone();
    new["status"] = json!({"state": "NoSuchState"});
    let d = status::evaluate(
        &policy,
        Some(&old),
        &new,
        &Facts::by(RECONCILER, chrono::Utc::now()),
    );
    assert!(!d.violations.allowed(), "{:?}", d.violations);
    let v = serde_json::to_value(&d.violations).unwrap();
    let array = v.as_array().expect("a JSON array");
    assert_eq!(array.len(), d.violations.len());
    for (json, violation) in array.iter().zip(d.violations.iter()) {
        assert_eq!(json["rule"], serde_json::to_value(violation.rule).unwrap());
    }
}
