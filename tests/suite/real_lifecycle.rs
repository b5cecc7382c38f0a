//! The lifecycle on a real control cluster: the real `kim webhook` and `kim controller`
//! binaries, kube-apiserver with kim's CRD and `manifests/base` installed
//! ([`crate::support::real::Stack`]), the controller authenticated as its ServiceAccount with
//! nothing but the shipped RBAC (`manifests/base/rbac-controller.yaml`).
//!
//! On the REAL Gardener API (gardener-apiserver aggregated behind the same kube-apiserver; a
//! simulated gardenlet with real runtime clusters, [`crate::support::real_controller::RealEnv`]):
//! - a Runtime is provisioned to `Ready` and deleted; the kubeconfig Secret holds the admin
//!   kubeconfig of the real `shoots/adminkubeconfig`, which works against the runtime cluster
//!   (SelfSubjectReview, a list of namespaces); the administrators' ClusterRoleBindings exist
//!   there; the deletion goes through Gardener's confirmation and finalizer, and the Shoot, the
//!   Secret and the runtime cluster are gone after it; every status write the controller made
//!   passed the webhook;
//! - (every sample of `samples/runtimes` through its life, with a rogue client denied
//!   meanwhile: [`crate::real_samples`]);
//! - the shipped RBAC is minimal: with any one verb of any rule of the two Roles removed, the
//!   controller fails at a named step with kube-apiserver's 403 for that verb and resource;
//! - the webhook's ServiceAccount is granted nothing (the webhook reads nothing from the API).

use crate::support::real::NS;
use crate::support::real_controller::*;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::conditions::is_deleted;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testenv::gardenlet::{Clusters, Event as Did, Operation};

const RT_GROUP: &str = "infrastructuremanager.kyma-project.io";
/// How long a removal run's controller gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn state_is(state: &'static str) -> impl Fn(Option<&DynamicObject>) -> bool {
    move |o| o.is_some_and(|o| o.data["status"]["state"] == state)
}

/// `(type, status, reason)` of the conditions of a Runtime.
fn conditions(o: &DynamicObject) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (s(&c["type"]), s(&c["status"]), s(&c["reason"])))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_is_provisioned_and_deleted_by_the_controller_serviceaccount_with_the_shipped_rbac()
 {
    let started = Instant::now();
    let env = RealEnv::start().await;
    let stack_ready = started.elapsed();
    let webhook = env.stack.webhook.as_ref().expect("webhook");
    // The stack's readiness probe made the webhook deny (and maybe allow) writes: the
    // baseline.
    let denied_before = webhook.count("/validate", "denied").await;
    let validate_before = webhook.count("/validate", "allowed").await;
    let mutate_before = webhook.count("/mutate", "allowed").await;

    let mut controller = env.spawn_controller("info,kim=debug");
    let metrics_addr = controller
        .logged("metrics_addr", LIMIT)
        .await
        .unwrap_or_else(|e| panic!("kim controller: {e}"));
    let name = "lifecycle";
    env.create_runtime(name).await;

    // ---- provisioning ----
    let ready = env
        .wait_runtime(name, "Ready", state_is("Ready"), &controller)
        .await
        .expect("the Runtime");
    let provisioned = started.elapsed();
    let conds = conditions(&ready);
    for (t, r) in [
        ("Provisioned", "ShootCreationCompleted"),
        ("KubeconfigReady", "KubeconfigCreated"),
        ("Configured", "AdministratorsConfigured"),
    ] {
        assert!(
            conds
                .iter()
                .any(|(ct, s, cr)| ct == t && s == "True" && cr == r),
            "{t}=True/{r} in {conds:?}"
        );
    }
    assert_eq!(ready.data["status"]["provisioningCompleted"], json!(true));
    assert!(
        ready
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == kim::status::table::FINALIZER),
        "the finalizer: {:?}",
        ready.metadata.finalizers
    );
    let shoot = env.shoot(name).await.expect("the Shoot exists");
    assert_eq!(
        shoot.data["status"]["lastOperation"]["state"], "Succeeded",
        "{:?}",
        shoot.data["status"]
    );
    let secrets: Api<Secret> = Api::namespaced(env.stack.cp.admin().await, NS);
    let secret_name = format!("kubeconfig-{name}");
    let secret = secrets
        .get(&secret_name)
        .await
        .expect("the kubeconfig Secret");
    let kubeconfig = secret
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .map(|v| String::from_utf8(v.0.clone()).expect("a UTF-8 kubeconfig"))
        .expect("the Secret holds a kubeconfig");
    let cluster = env
        .gardenlet
        .cluster(name)
        .await
        .expect("the Shoot's runtime cluster");
    // Gardener's answer names the advertised address and signs with the Shoot's CA: it works
    // against the runtime cluster as the project admins' group (kim's garden user is a
    // project member, no Gardener operator).
    let parsed = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("a kubeconfig");
    let servers: Vec<String> = parsed
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref()?.server.clone())
        .collect();
    assert_eq!(servers, [cluster.url()], "the runtime cluster's URL");
    let as_admin = env.stack.cp.client_from_kubeconfig(&kubeconfig).await;
    let review = Api::<SelfSubjectReview>::all(as_admin.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("a SelfSubjectReview with the stored kubeconfig");
    let user = review
        .status
        .and_then(|s| s.user_info)
        .expect("the review's user");
    assert_eq!(
        user.username.as_deref(),
        Some(format!("gardener.cloud:admin:{GARDEN_USER}").as_str()),
        "{user:?}"
    );
    assert!(
        user.groups
            .iter()
            .flatten()
            .any(|g| g == testenv::gardenlet::PROJECT_ADMINS_GROUP),
        "{user:?}"
    );
    let namespaces = Api::<Namespace>::all(as_admin)
        .list(&ListParams::default())
        .await
        .expect("listing namespaces with the stored kubeconfig");
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("kube-system")),
        "the runtime cluster's namespaces"
    );
    let bindings = Api::<ClusterRoleBinding>::all(cluster.admin().await)
        .list(&ListParams::default().labels("reconciler.kyma-project.io/managed-by"))
        .await
        .expect("the runtime cluster's ClusterRoleBindings");
    assert!(
        bindings
            .items
            .iter()
            .any(|b| b.role_ref.name == "cluster-admin"
                && b.subjects
                    .iter()
                    .flatten()
                    .any(|s| s.kind == "User" && s.name == "admin@myorg.com")),
        "the administrator's ClusterRoleBinding in the runtime cluster: {:?}",
        bindings.items
    );

    // ---- deletion ----
    let uid = ready.metadata.uid.clone().expect("uid");
    env.runtimes()
        .await
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Runtime");
    env.wait_runtime(name, "gone", is_deleted(&uid), &controller)
        .await;
    let deleted = started.elapsed();
    // The finalizer is removed only after the Shoot is gone and the Secret deleted. Gardener
    // deleted the Shoot only once kim had confirmed the deletion (its admission refuses the
    // delete otherwise) and the gardenlet removed its finalizer after `Delete Succeeded`.
    assert!(env.shoot(name).await.is_none(), "the Shoot is gone");
    assert!(
        secrets.get_opt(&secret_name).await.unwrap().is_none(),
        "the kubeconfig Secret is gone"
    );
    let history = env.gardenlet.history().of(name);
    let deleted_at = history
        .iter()
        .position(|e| *e == Did::Succeeded(Operation::Delete))
        .unwrap_or_else(|| panic!("the gardenlet's Delete succeeded: {history:?}"));
    assert!(
        history[deleted_at..].contains(&Did::FinalizerRemoved)
            && history.contains(&Did::ClusterStopped),
        "the finalizer removed after Delete Succeeded, the cluster stopped: {history:?}"
    );
    assert!(
        !cluster.running(),
        "the runtime cluster's processes are gone"
    );
    drop(cluster);

    // ---- Events, status writes, the webhook's view ----
    let events: Api<Event> = Api::namespaced(env.stack.cp.admin().await, NS);
    let published = crate::support::eventually(LIMIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let ours: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .collect();
            let has = |reason: &str| ours.iter().any(|e| e.reason.as_deref() == Some(reason));
            (has("Ready") && has("Terminating")).then_some(ours)
        }
    })
    .await
    .expect("the Ready and Terminating Events about the Runtime in kcp-system");
    // Events only for what a user acts on: a provisioning that went well and a deletion say
    // `Ready` and `Terminating`, both Normal, nothing about the progress in between.
    for e in &published {
        assert!(
            e.type_.as_deref() == Some("Normal")
                && matches!(e.reason.as_deref(), Some("Ready" | "Terminating")),
            "only the Ready and Terminating Events: {:?} {:?} {:?}",
            e.type_,
            e.reason,
            e.note
        );
    }
    let writes = crate::support::real_shared::status_writes(&metrics_addr).await;
    let (out, err) = controller.terminate(Duration::from_secs(20));
    assert!(writes >= 4, "status writes: {writes}");
    assert_eq!(
        webhook.count("/validate", "denied").await,
        denied_before,
        "the webhook denied none of the controller's writes\ncontroller stdout:\n{out}"
    );
    // At least once per stored write: a write can also pass /validate and then lose the race
    // for etcd (409, sent again by the controller), so the two need not be equal.
    let validated = webhook.count("/validate", "allowed").await - validate_before;
    assert!(
        validated >= writes,
        "every status write the controller sent was judged and allowed by /validate: {validated} allowed for {writes} writes"
    );
    // kube-apiserver calls the mutating webhooks of an update before it checks the
    // resourceVersion, the validating ones after: a write that conflicted (409, sent again by
    // the controller) reached /mutate only.
    let mutated = webhook.count("/mutate", "allowed").await - mutate_before;
    assert!(
        mutated >= validated,
        "every status write went through /mutate: {mutated} calls for {validated} allowed by /validate"
    );
    for needle in [
        "StatusWriteDenied",
        "status write denied",
        "cannot publish event",
    ] {
        assert!(
            !out.contains(needle) && !err.contains(needle),
            "the controller logged {needle:?}:\n{out}\n{err}"
        );
    }
    assert_eq!(
        forbidden_line(&out, &err, ""),
        None,
        "no request of the controller was forbidden"
    );
    eprintln!(
        "real lifecycle: stack (control plane, CRD, manifests/base, webhook) ready in {:.1} s; \
         Runtime {name} Ready after {:.1} s, gone after {:.1} s; {writes} status writes, all \
         admitted by /mutate and /validate, 0 denied ({} more /mutate calls: writes that \
         conflicted); {} Events; {:.1} s in all",
        stack_ready.as_secs_f64(),
        (provisioned - stack_ready).as_secs_f64(),
        (deleted - provisioned).as_secs_f64(),
        mutated - writes,
        published.len(),
        started.elapsed().as_secs_f64()
    );
}

/// What a removal run needs before the controller starts, and how far it lets it get.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Setup {
    /// Nothing: the controller fails before it reconciles (leader election, the watch).
    Nothing,
    /// A new Runtime.
    Runtime,
    /// A new Runtime whose Shoot creation, as gardener-apiserver admits it, first changes the
    /// Runtime (a label, as the admin; [`RealEnv::label_runtime_on_shoot_creation`]): the
    /// controller's next status write conflicts (409) and it reads the Runtime again.
    Conflict,
    /// A new Runtime and, before it, its kubeconfig Secret without a kubeconfig and without
    /// labels (so outside the controller's label-selected watch of kubeconfig Secrets): the
    /// controller's create answers 409 AlreadyExists and it renews the Secret (a merge patch).
    StaleSecret,
    /// A new Runtime and, before it, its kubeconfig Secret as kim writes one, synced just now:
    /// step 5 keeps it (only its metadata is cached), so step 6 reads it (GET) to build the
    /// runtime-cluster client.
    FreshSecret,
    /// A new Runtime provisioned to `Ready`, then deleted.
    Deleted,
    /// The Lease deleted first: the controller creates it.
    NoLease,
}

/// One verb of one rule of a shipped Role, removed for one run.
struct Case {
    role: (&'static str, &'static str),
    access: Access<'static>,
    setup: Setup,
    /// What the 403's log line says the controller was doing.
    step: &'static str,
}

fn cases() -> Vec<Case> {
    let rt = |verb, resource, setup, step| Case {
        role: ROLE,
        access: Access {
            verb,
            group: RT_GROUP,
            resource,
            namespace: NS,
            name: None,
        },
        setup,
        step,
    };
    let core = |verb, resource, setup, step| Case {
        role: ROLE,
        access: Access {
            verb,
            group: "",
            resource,
            namespace: NS,
            name: None,
        },
        setup,
        step,
    };
    let lease = |verb, name, setup, step| Case {
        role: LEADER_ROLE,
        access: Access {
            verb,
            group: "coordination.k8s.io",
            resource: "leases",
            namespace: LEASE.0,
            name,
        },
        setup,
        step,
    };
    vec![
        lease("create", None, Setup::NoLease, "leader election Lease"),
        lease(
            "get",
            Some(LEASE.1),
            Setup::Nothing,
            "leader election Lease",
        ),
        lease(
            "patch",
            Some(LEASE.1),
            Setup::Nothing,
            "LeaseManager watcher error",
        ),
        rt("list", "runtimes", Setup::Runtime, "list"),
        rt("watch", "runtimes", Setup::Runtime, "watch"),
        rt("get", "runtimes", Setup::Conflict, "reading Runtime"),
        rt("patch", "runtimes", Setup::Runtime, "adding the finalizer"),
        rt(
            "update",
            "runtimes/status",
            Setup::Runtime,
            "writing the status of Runtime",
        ),
        core(
            "get",
            "secrets",
            Setup::FreshSecret,
            "reading Secret kubeconfig-",
        ),
        // The metadata-only watch of the kubeconfig Secrets (the cache steps 5 and 6 read):
        // kube-runtime's Controller reports its watcher's error, kim logs it.
        core(
            "list",
            "secrets",
            Setup::Runtime,
            "failed to perform initial object list",
        ),
        core(
            "watch",
            "secrets",
            Setup::Runtime,
            "failed to start watching object",
        ),
        core(
            "create",
            "secrets",
            Setup::Runtime,
            "writing Secret kubeconfig-",
        ),
        core(
            "patch",
            "secrets",
            Setup::StaleSecret,
            "writing Secret kubeconfig-",
        ),
        core(
            "delete",
            "secrets",
            Setup::Deleted,
            "deleting Secret kubeconfig-",
        ),
        Case {
            role: ROLE,
            access: Access {
                verb: "create",
                group: "events.k8s.io",
                resource: "events",
                namespace: NS,
                name: None,
            },
            setup: Setup::Runtime,
            step: "cannot publish event",
        },
    ]
}

/// Whether rule `r` grants `access` (for a rule limited by resourceNames, only to one of
/// those names).
fn grants(r: &PolicyRule, access: &Access<'_>) -> bool {
    r.api_groups.iter().flatten().any(|g| g == access.group)
        && r.resources.iter().flatten().any(|x| x == access.resource)
        && r.verbs.iter().any(|v| v == access.verb)
        && match (&r.resource_names, access.name) {
            (Some(names), Some(n)) => names.iter().any(|x| x == n),
            (Some(_), None) => false,
            (None, _) => true,
        }
}

/// `rules` without `access.verb` in the rule that grants it (a rule left with no verb is
/// dropped). Panics if no rule grants it.
fn without(rules: &[PolicyRule], access: &Access<'_>) -> Vec<PolicyRule> {
    let mut found = false;
    let mut out = Vec::new();
    for r in rules {
        if !grants(r, access) {
            out.push(r.clone());
            continue;
        }
        found = true;
        let mut r = r.clone();
        r.verbs.retain(|v| v != access.verb);
        if !r.verbs.is_empty() {
            out.push(r);
        }
    }
    assert!(found, "no shipped rule grants {access:?}");
    out
}

/// The webhook's ServiceAccount is bound to nothing and may do nothing beyond what every
/// authenticated user may (self-reviews): it needs nothing, the webhook reads nothing from
/// the API (it ran with no credentials at all in these tests).
async fn webhook_serviceaccount_has_no_rights(env: &Kcp) {
    let admin = env.stack.cp.admin().await;
    let subject = |s: &k8s_openapi::api::rbac::v1::Subject| {
        s.kind == "ServiceAccount"
            && s.name == WEBHOOK_SA.1
            && s.namespace.as_deref() == Some(WEBHOOK_SA.0)
    };
    let rbs: Api<RoleBinding> = Api::all(admin.clone());
    for rb in rbs.list(&ListParams::default()).await.unwrap() {
        assert!(
            !rb.subjects.iter().flatten().any(subject),
            "RoleBinding {:?}/{:?} binds the webhook's ServiceAccount",
            rb.metadata.namespace,
            rb.metadata.name
        );
    }
    let crbs: Api<ClusterRoleBinding> = Api::all(admin);
    for crb in crbs.list(&ListParams::default()).await.unwrap() {
        assert!(
            !crb.subjects.iter().flatten().any(subject),
            "ClusterRoleBinding {:?} binds the webhook's ServiceAccount",
            crb.metadata.name
        );
    }
    // What the cluster grants every ServiceAccount by itself differs by version (1.37 lets
    // every ServiceAccount read ClusterTrustBundles): the baseline is a ServiceAccount that
    // nothing binds.
    let webhook = rules_of(env, WEBHOOK_SA.0, WEBHOOK_SA.1).await;
    let unbound = rules_of(env, WEBHOOK_SA.0, "bound-to-nothing").await;
    for (ns, rules) in &webhook {
        let baseline = &unbound[ns];
        for r in rules {
            let groups = r.api_groups.clone().unwrap_or_default();
            assert!(
                baseline.contains(r)
                    || groups
                        .iter()
                        .all(|g| g == "authorization.k8s.io" || g == "authentication.k8s.io"),
                "the webhook's ServiceAccount may {:?} {:?} in {groups:?} in {ns}, which a ServiceAccount bound to nothing may not",
                r.verbs,
                r.resources
            );
        }
    }
}

/// The resource rules ServiceAccount `namespace/name` (created if missing) has in `kcp-system`
/// and `kim-system`, by namespace, from a SelfSubjectRulesReview made as it.
async fn rules_of(
    env: &Kcp,
    namespace: &str,
    name: &str,
) -> std::collections::BTreeMap<&'static str, Vec<k8s_openapi::api::authorization::v1::ResourceRule>>
{
    let token = env.stack.cp.service_account_token(namespace, name).await;
    let client = env
        .stack
        .cp
        .client_from_kubeconfig(&env.stack.cp.kubeconfig_with_token(&token))
        .await;
    let mut out = std::collections::BTreeMap::new();
    for ns in [NS, "kim-system"] {
        let review = SelfSubjectRulesReview {
            spec: SelfSubjectRulesReviewSpec {
                namespace: Some(ns.to_string()),
            },
            ..Default::default()
        };
        let answer = Api::<SelfSubjectRulesReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .unwrap_or_else(|e| panic!("SelfSubjectRulesReview as {namespace}/{name}: {e}"));
        out.insert(ns, answer.status.expect("status").resource_rules);
    }
    out
}

/// One stack; per case the Role loses one verb (checked with a SelfSubjectAccessReview as the
/// controller), the case's state is set up, a controller runs until it logs the 403 for that
/// verb and resource, then it gets SIGTERM and must exit within [`STOP_GRACE`] (also when its
/// Runtimes could never be listed), the Role is restored and the Runtime removed. How long
/// each controller took to stop is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_of_the_shipped_controller_rbac_is_needed() {
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(1)).await;
    webhook_serviceaccount_has_no_rights(&env).await;
    let originals = [
        (ROLE, env.role_rules(ROLE).await),
        (LEADER_ROLE, env.role_rules(LEADER_ROLE).await),
    ];
    let original = |role: (&str, &str)| {
        originals
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, rules)| rules.clone())
            .expect("a shipped Role")
    };
    let cases = cases();
    // Every verb the shipped Roles grant is a case, and every case one they grant.
    let mut granted = 0;
    for (role, rules) in &originals {
        for r in rules {
            for group in r.api_groups.iter().flatten() {
                for resource in r.resources.iter().flatten() {
                    for verb in &r.verbs {
                        granted += 1;
                        assert!(
                            cases.iter().any(|c| c.role == *role
                                && c.access.group == group
                                && c.access.resource == resource
                                && c.access.verb == verb
                                && grants(r, &c.access)),
                            "no case removes {verb} {group}/{resource} of Role {role:?}"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(granted, cases.len(), "one case per granted verb");
    for case in &cases {
        env.wait_access(&case.access, true).await;
    }

    let mut report = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let t0 = Instant::now();
        let name = format!("rbac-{i}");
        let a = &case.access;
        let rules = without(&original(case.role), a);
        env.set_role_rules(case.role, &rules).await;
        env.wait_access(a, false).await;
        let mut hook = None;
        match case.setup {
            Setup::NoLease => {
                let leases: Api<Lease> = Api::namespaced(env.stack.cp.admin().await, LEASE.0);
                match leases.delete(LEASE.1, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => panic!("deleting the Lease: {e}"),
                }
            }
            Setup::Conflict => hook = Some(env.label_runtime_on_shoot_creation(&name).await),
            Setup::StaleSecret => {
                let secrets: Api<Secret> = Api::namespaced(env.stack.cp.admin().await, NS);
                let secret: Secret = serde_json::from_value(json!({
                    "metadata": {"name": format!("kubeconfig-{name}"), "namespace": NS},
                    "type": "Opaque"
                }))
                .unwrap();
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("create the Secret");
            }
            Setup::FreshSecret => {
                let secrets: Api<Secret> = Api::namespaced(env.stack.cp.admin().await, NS);
                let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                // No kubeconfig in it: the controller never gets to use it (the GET is denied).
                let secret: Secret = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("kubeconfig-{name}"),
                        "namespace": NS,
                        "labels": {
                            "kyma-project.io/runtime-id": name,
                            "operator.kyma-project.io/managed-by": "infrastructure-manager",
                            "operator.kyma-project.io/cluster-name": name,
                        },
                        "annotations": {"operator.kyma-project.io/last-sync": now},
                    },
                    "type": "Opaque",
                    "stringData": {"config": "not a kubeconfig"},
                }))
                .unwrap();
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("create the Secret");
            }
            _ => {}
        }
        let mut controller = env.spawn_controller("info,kim=debug");
        if case.setup != Setup::Nothing && case.setup != Setup::NoLease {
            env.create_runtime(&name).await;
        }
        if case.setup == Setup::Deleted {
            env.wait_runtime(&name, "Ready", state_is("Ready"), &controller)
                .await;
            env.runtimes()
                .await
                .delete(&name, &DeleteParams::default())
                .await
                .expect("delete the Runtime");
        }
        let phrase = a.forbidden_phrase();
        let line = controller
            .wait_output(LIMIT, |out, err| forbidden_line(out, err, &phrase))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "without {} {} in {}/{}: no 403 naming it from the controller: {e}",
                    a.verb, a.resource, case.role.0, case.role.1
                )
            });
        assert!(
            line.contains(case.step),
            "without {} {}: the 403 is logged at step {:?}, got: {line}",
            a.verb,
            a.resource,
            case.step
        );
        // Stopped as Kubernetes stops a pod; how long that took is reported.
        let asked = Instant::now();
        controller.signal("TERM");
        let stopped = match controller.exit(STOP_GRACE).await {
            Some(_) => format!(
                "stopped {:.1} s after SIGTERM",
                asked.elapsed().as_secs_f64()
            ),
            None => {
                controller.kill();
                panic!(
                    "without {} {}: kim controller still running {} s after SIGTERM",
                    a.verb,
                    a.resource,
                    STOP_GRACE.as_secs()
                );
            }
        };
        let line = line
            .split(" (Status {")
            .next()
            .unwrap_or_default()
            .to_string();
        env.set_role_rules(case.role, &original(case.role)).await;
        env.wait_access(a, true).await;
        if let Some(hook) = hook {
            hook.remove().await;
        }
        env.force_delete(&name).await;
        report.push(format!(
            "  Role {}/{} without {} {}/{} ({:?}, {:.1} s; {stopped}): {line}",
            case.role.0,
            case.role.1,
            a.verb,
            if a.group.is_empty() { "core" } else { a.group },
            a.resource,
            case.setup,
            t0.elapsed().as_secs_f64()
        ));
    }
    eprintln!(
        "shipped controller RBAC: each of {} verbs removed in turn, the controller got a 403 \
         for it; {:.1} s in all\n{}",
        cases.len(),
        started.elapsed().as_secs_f64(),
        report.join("\n")
    );
}
