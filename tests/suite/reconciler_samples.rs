//! Every Runtime sample of `samples/runtimes` through its whole life with the real kube-runtime
//! Controller of `kim controller` against in-memory API servers over HTTP (control cluster,
//! Gardener with a simulated Gardener stepped by the test, runtime cluster): provisioned to
//! `Ready`, updated (an administrator removed, the worker maximum raised) back to `Ready`, and
//! deleted with nothing left, each with the exact status sequence of docs/reconciler.md ("Status
//! sequences"; one write per reconcile pass) and its one Event. Every status write is checked
//! against the status model by an admission hook. The API calls of each phase are printed (the
//! figures of docs/reconciler.md, "Numbers").

use crate::support::reconciler::*;
use k8s_openapi::api::core::v1::Secret;
use kim::api::Runtime;
use kim::testing::reconciler::binding_name;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Instant;
use testenv::{Gvr, Verb};

const SECOND_ADMIN: &str = "second-admin@myorg.com";

fn zone_names(infra: &Value) -> Vec<String> {
    infra["networks"]["zones"]
        .as_array()
        .map(|zones| {
            zones
                .iter()
                .map(|z| match &z["name"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The Shoot as created matches the converter's output and the Runtime, field by field where
/// it matters.
fn check_shoot(env: &Env, rt: &Runtime, generation: &str) -> Value {
    let name = &rt.spec.shoot.name;
    let shoot = env.shoot(name).expect("Shoot exists");
    let provider_type = rt.spec.shoot.provider.type_.as_str();
    let p = &shoot["spec"]["provider"];
    assert_eq!(p["type"], provider_type);
    let workers = p["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 1, "one main worker");
    let want = &rt.spec.shoot.provider.workers[0];
    assert_eq!(workers[0]["name"], want.name.as_str());
    assert_eq!(workers[0]["maximum"], want.maximum);
    assert_eq!(workers[0]["minimum"], want.minimum);
    assert_eq!(workers[0]["machine"]["type"], want.machine.type_.as_str());
    let zones: Vec<String> = want.zones.clone().unwrap_or_default();
    assert_eq!(workers[0]["zones"], json!(zones));
    let api_version = format!("{provider_type}.provider.extensions.gardener.cloud/v1alpha1");
    let infra = &p["infrastructureConfig"];
    assert_eq!(infra["apiVersion"], api_version.as_str());
    assert_eq!(infra["kind"], "InfrastructureConfig");
    assert_eq!(zone_names(infra), zones, "infrastructureConfig zones");
    assert_eq!(p["controlPlaneConfig"]["apiVersion"], api_version.as_str());
    assert_eq!(p["controlPlaneConfig"]["kind"], "ControlPlaneConfig");
    // Everything else in the provider section is what the converter produces.
    let expected = kim::testing::gardener::runtime_to_shoot(rt, &config()).expect("converts");
    let expected = serde_json::to_value(&expected).unwrap();
    assert_eq!(
        p["infrastructureConfig"],
        expected["spec"]["provider"]["infrastructureConfig"]
    );
    assert_eq!(
        p["controlPlaneConfig"],
        expected["spec"]["provider"]["controlPlaneConfig"]
    );
    assert_eq!(shoot["spec"]["region"], rt.spec.shoot.region.as_str());
    assert_eq!(
        shoot["spec"]["credentialsBindingName"],
        rt.spec.shoot.secret_binding_name.as_str()
    );
    let ann = &shoot["metadata"]["annotations"];
    assert_eq!(
        ann["infrastructuremanager.kyma-project.io/runtime-id"],
        "runtime-id"
    );
    assert_eq!(
        ann["infrastructuremanager.kyma-project.io/runtime-generation"],
        generation
    );
    shoot
}

fn check_secret(env: &Env) {
    let secret = env
        .kcp
        .get(&Gvr::secrets(), Some(NS), "kubeconfig-runtime-id")
        .expect("kubeconfig Secret");
    let secret: Secret = serde_json::from_value(secret).unwrap();
    let data = secret.data.as_ref().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), ["config"]);
    let kubeconfig = String::from_utf8(data["config"].0.clone()).unwrap();
    assert!(
        kubeconfig.contains(env.runtime.url()),
        "the stored kubeconfig points at the runtime cluster"
    );
    let labels = secret.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["kyma-project.io/runtime-id"], "runtime-id");
    assert_eq!(
        labels["operator.kyma-project.io/managed-by"],
        "infrastructure-manager"
    );
    assert_eq!(
        labels["operator.kyma-project.io/cluster-name"],
        "runtime-id"
    );
    let synced = &secret.metadata.annotations.as_ref().expect("annotations")["operator.kyma-project.io/last-sync"];
    let t = chrono::DateTime::parse_from_rfc3339(synced).expect("last-sync is RFC 3339");
    let age = chrono::Utc::now().signed_duration_since(t);
    assert!(
        age.num_seconds().abs() < 120,
        "last-sync is recent: {synced}"
    );
}

/// Labelled bindings: name → user.
fn managed_bindings(env: &Env) -> Vec<(String, String)> {
    env.runtime
        .list(&Gvr::cluster_role_bindings(), None)
        .into_iter()
        .filter(|b| {
            b["metadata"]["labels"]["reconciler.kyma-project.io/managed-by"]
                == "infrastructure-manager"
        })
        .map(|b| {
            assert_eq!(b["roleRef"]["kind"], "ClusterRole");
            assert_eq!(b["roleRef"]["name"], "cluster-admin");
            assert_eq!(b["subjects"][0]["kind"], "User");
            (
                b["metadata"]["name"].as_str().unwrap().to_string(),
                b["subjects"][0]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// API calls made by the controller (no watches; the initial lists of the Runtime, Shoot and
/// kubeconfig-Secret watches excluded).
fn api_calls(env: &Env) -> (usize, String) {
    let mut total = 0;
    let mut parts = Vec::new();
    for (cluster, server) in [
        ("kcp", &env.kcp),
        ("garden", &env.garden),
        ("runtime", &env.runtime),
    ] {
        let mut by: std::collections::BTreeMap<String, usize> = Default::default();
        for r in server.requests() {
            if cluster == "kcp" && r.user != CONTROLLER_USER {
                continue;
            }
            if r.verb == Some(Verb::Watch)
                || (r.verb == Some(Verb::List)
                    && matches!(
                        (cluster, r.resource.as_deref()),
                        ("kcp", Some("runtimes" | "secrets")) | ("garden", Some("shoots"))
                    ))
            {
                continue;
            }
            let label = format!(
                "{} {}{}",
                r.verb.map(|v| v.as_str()).unwrap_or("?"),
                r.resource.clone().unwrap_or_default(),
                r.subresource.map(|s| format!("/{s}")).unwrap_or_default()
            );
            *by.entry(label).or_default() += 1;
            total += 1;
        }
        parts.push(format!("{cluster}: {by:?}"));
    }
    (total, parts.join("; "))
}

/// Successful requests of the controller to the control cluster on `resource`/`subresource`
/// with `verb`, as logged.
fn controller_requests(env: &Env, verb: Verb, resource: &str, sub: Option<&str>) -> usize {
    env.kcp.count_requests(|r| {
        r.user == CONTROLLER_USER && r.verb == Some(verb) && r.is(resource, sub) && r.code < 300
    })
}

/// Clears the request logs of the three clusters (what [`api_calls`] and [`settle`] count).
fn clear_requests(env: &Env) {
    for s in [&env.kcp, &env.garden, &env.runtime] {
        s.clear_requests();
    }
}

/// Waits until the control cluster's request log, since it was last cleared, holds `writes`
/// status writes, `events` Event creates and `finalizer` finalizer patches (a request is logged
/// when its answer is sent, after the object is stored; Events are sent in the background), so
/// the counts read next are whole.
async fn settle(env: &Env, writes: usize, events: usize, finalizer: usize) {
    env.wait("the request log", |s| {
        controller_requests(s.env, Verb::Update, "runtimes", Some("status")) == writes
            && controller_requests(s.env, Verb::Create, "events", None) == events
            && controller_requests(s.env, Verb::Patch, "runtimes", None) == finalizer
    })
    .await;
}

/// The Events of Runtime `name` as `type reason action`, sorted.
fn events_of(env: &Env, name: &str) -> Vec<String> {
    let mut events: Vec<String> = env
        .kcp
        .list(&Gvr::new("events.k8s.io", "v1", "events"), Some(NS))
        .iter()
        .filter(|ev| ev["regarding"]["name"] == name)
        .map(|ev| {
            let s = |k: &str| ev[k].as_str().unwrap_or_default().to_string();
            format!("{} {} {}", s("type"), s("reason"), s("action"))
        })
        .collect();
    events.sort();
    events
}

async fn lifecycle(file: &str) {
    let env = Env::start().await;
    let mut rt = sample(file);
    rt.spec.security.administrators.push(SECOND_ADMIN.into());
    let name = rt.metadata.name.clone().unwrap();
    let shoot_name = rt.spec.shoot.name.clone();
    let first_admin = rt.spec.security.administrators[0].clone();

    // ---- provisioning ----
    let started = Instant::now();
    clear_requests(&env);
    env.create(&rt).await;
    env.wait_condition(&name, "Pending", "Provisioned", "Unknown", "Pending")
        .await;
    assert!(env.shoot(&shoot_name).is_some(), "Shoot created");
    env.sim.step(); // Create Processing 0
    env.wait("Create/Processing copied", |s| {
        s.last_op(&name) == Some(("Create".into(), "Processing".into()))
    })
    .await;
    env.sim.step(); // 33 %
    env.sim.step(); // 66 %
    env.sim.step(); // Succeeded
    env.wait_ready(&name).await;
    let elapsed = started.elapsed();
    settle(&env, env.writes_of(&name).len(), 1, 1).await;
    let (calls, breakdown) = api_calls(&env);

    let p = "Provisioned";
    let k = c("KubeconfigReady", "True", "KubeconfigCreated");
    let created = c(p, "True", "ShootCreationCompleted");
    // One write per pass: the pass that creates the Shoot (`Initialised` set and merged away),
    // the pass that copies Gardener's running operation, the pass that finds it done and stores
    // the kubeconfig and binds the administrators (`Provisioned=True` and `KubeconfigReady`
    // merged into the `Ready` write).
    let expected = vec![
        w("Pending", &[c(p, "Unknown", "Pending")], None, false),
        w(
            "Pending",
            &[c(p, "Unknown", "Pending")],
            Some(("Create", "Processing")),
            false,
        ),
        w(
            "Ready",
            &[
                created.clone(),
                k.clone(),
                c("Configured", "True", "AdministratorsConfigured"),
            ],
            Some(("Create", "Succeeded")),
            true,
        ),
    ];
    let writes = env.writes_of(&name);
    assert_eq!(shorts(&writes), expected, "provisioning status sequence");
    println!(
        "{file}: provisioning: {} status writes, {calls} API calls ({breakdown}), {elapsed:?}",
        writes.len()
    );
    assert!(writes.len() <= 3);
    // One Event: the Runtime became Ready (progress is in the status, not in Events).
    assert_eq!(events_of(&env, &name), ["Normal Ready Reconcile"]);

    let stored: Runtime = env.runtimes().get(&name).await.unwrap();
    check_shoot(&env, &stored, "1");
    check_secret(&env);
    let mut bindings = managed_bindings(&env);
    bindings.sort();
    let mut want = vec![
        (binding_name(&first_admin), first_admin.clone()),
        (binding_name(SECOND_ADMIN), SECOND_ADMIN.to_string()),
    ];
    want.sort();
    assert_eq!(bindings, want, "one binding per administrator");
    // A binding made by someone else, without the label: never touched.
    env.runtime
        .put(
            &Gvr::cluster_role_bindings(),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "kim-admin-manual"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "User", "name": SECOND_ADMIN, "apiGroup": "rbac.authorization.k8s.io"}]
            }),
        )
        .unwrap();

    // ---- update: one administrator removed, worker maximum raised ----
    let before = env.writes_of(&name).len();
    clear_requests(&env);
    let old_max = rt.spec.shoot.provider.workers[0].maximum;
    let updated = env
        .edit(&name, |r| {
            r.spec.security.administrators.retain(|a| a != SECOND_ADMIN);
            r.spec.shoot.provider.workers[0].maximum = old_max + 5;
        })
        .await;
    assert_eq!(updated.metadata.generation, Some(2));
    env.wait_condition(&name, "Pending", "Provisioned", "Unknown", "Processing")
        .await;
    env.sim.step(); // Reconcile Processing 0
    env.wait("Reconcile/Processing copied", |s| {
        s.last_op(&name) == Some(("Reconcile".into(), "Processing".into()))
    })
    .await;
    env.sim.advance(3); // … Succeeded
    env.wait("Ready after the update", |s| {
        s.state(&name) == Some("Ready")
            && s.condition(&name, "Provisioned").map(|c| c.1).as_deref()
                == Some("ConfigurationCompleted")
    })
    .await;
    let done = c(p, "True", "ConfigurationCompleted");
    let configured = c("Configured", "True", "AdministratorsConfigured");
    let expected = vec![
        w(
            "Pending",
            &[c(p, "Unknown", "Processing"), k.clone(), configured.clone()],
            Some(("Create", "Succeeded")),
            true,
        ),
        w(
            "Pending",
            &[c(p, "Unknown", "Processing"), k.clone(), configured.clone()],
            Some(("Reconcile", "Processing")),
            true,
        ),
        w(
            "Ready",
            &[done.clone(), k.clone(), configured.clone()],
            Some(("Reconcile", "Succeeded")),
            true,
        ),
    ];
    let writes = env.writes_of(&name);
    assert_eq!(
        shorts(&writes[before..]),
        expected,
        "update status sequence"
    );
    settle(&env, writes.len() - before, 1, 0).await;
    let (calls, breakdown) = api_calls(&env);
    println!(
        "{file}: update: {} status writes, {calls} API calls ({breakdown})",
        writes.len() - before
    );
    let last = &writes.last().unwrap().status;
    for cond in last["conditions"].as_array().unwrap() {
        assert_eq!(cond["observedGeneration"], 2, "{cond}");
    }
    let stored: Runtime = env.runtimes().get(&name).await.unwrap();
    let shoot = check_shoot(&env, &stored, "2");
    assert_eq!(
        shoot["spec"]["provider"]["workers"][0]["maximum"],
        old_max + 5
    );
    assert_eq!(
        managed_bindings(&env),
        vec![(binding_name(&first_admin), first_admin.clone())],
        "the removed administrator's binding is gone"
    );
    assert!(
        env.runtime
            .get(&Gvr::cluster_role_bindings(), None, "kim-admin-manual")
            .is_some(),
        "the unlabelled binding survives"
    );

    // ---- deletion ----
    let after_update = env.writes_of(&name).len();
    clear_requests(&env);
    env.delete(&name).await;
    env.wait_condition(
        &name,
        "Terminating",
        "Deprovisioned",
        "Unknown",
        "GardenerShootDeleted",
    )
    .await;
    let shoot = env.shoot(&shoot_name).expect("Shoot being deleted");
    assert!(shoot["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        shoot["metadata"]["annotations"]["confirmation.gardener.cloud/deletion"],
        "true"
    );
    env.sim.step(); // Delete Processing 0
    env.wait("Delete/Processing copied", |s| {
        s.last_op(&name) == Some(("Delete".into(), "Processing".into()))
    })
    .await;
    env.step_until("the Runtime is gone", |s| s.runtime_json(&name).is_none())
        .await;
    assert!(env.shoot(&shoot_name).is_none(), "no Shoot left");
    assert!(
        env.kcp
            .get(&Gvr::secrets(), Some(NS), "kubeconfig-runtime-id")
            .is_none(),
        "no kubeconfig Secret left"
    );
    assert!(
        env.garden
            .list(&Gvr::new("", "v1", "configmaps"), Some(GARDEN_NS))
            .is_empty(),
        "no ConfigMap left in the project namespace"
    );
    // The pass that deletes the Shoot, the pass that copies Gardener's Delete operation; the
    // pass that finds the Shoot gone releases the Runtime without a write.
    let gone = c("Deprovisioned", "Unknown", "GardenerShootDeleted");
    let terminating = [done.clone(), k.clone(), configured.clone(), gone];
    let expected = vec![
        w(
            "Terminating",
            &terminating,
            Some(("Reconcile", "Succeeded")),
            true,
        ),
        w(
            "Terminating",
            &terminating,
            Some(("Delete", "Processing")),
            true,
        ),
    ];
    assert_eq!(
        shorts(&env.writes_of(&name)[after_update..]),
        expected,
        "deletion status sequence"
    );
    settle(&env, expected.len(), 1, 1).await;
    let (calls, breakdown) = api_calls(&env);
    println!(
        "{file}: deletion: {} status writes, {calls} API calls ({breakdown})",
        expected.len()
    );
    // Events: Ready (provisioned), Ready (updated), Terminating.
    assert_eq!(
        events_of(&env, &name),
        [
            "Normal Ready Reconcile",
            "Normal Ready Reconcile",
            "Normal Terminating Reconcile"
        ]
    );
    let states: BTreeSet<String> = env
        .writes_of(&name)
        .iter()
        .map(|w| w.state.clone())
        .collect();
    assert!(!states.contains("Failed"), "never Failed: {states:?}");
    env.assert_model_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_minimal() {
    lifecycle("aws-minimal.yaml").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_trial() {
    lifecycle("aws-trial.yaml").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_full() {
    lifecycle("aws.yaml").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_fremium() {
    lifecycle("azure-fremium.yaml").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_full() {
    lifecycle("azure.yaml").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sample() {
    lifecycle("infrastructuremanager_v1_runtime.yaml").await;
}

#[test]
fn every_sample_has_a_lifecycle_test() {
    let mut files: Vec<String> = std::fs::read_dir(samples_dir())
        .expect("samples dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    assert_eq!(
        files, SAMPLE_FILES,
        "a sample was added or removed: add or remove its test above"
    );
}
