//! The controller against a hostile operator and an unlucky cluster, with the real kube-runtime
//! Controller against in-memory API servers over HTTP and the simulated Gardener: objects the
//! controller owns deleted or changed by hand while the Runtime is `Ready` (its kubeconfig
//! Secret, the Secret's label, its Shoot), a Runtime deleted and created again under its name,
//! another allowed writer's status edit, two Runtimes naming one Shoot, a spec changed twice in a
//! row, a Shoot watch that cannot list at the start, and a Runtime deleted while the Shoot watch
//! is stuck. The controller reads from watch caches with its own writes on top (`caches.rs`):
//! each test checks that what it does is right for the objects as they are, not as the caches
//! last saw them. Every status write is checked against the status model.

use crate::support::reconciler::*;
use kim::api::Runtime;
use kim::testing::reconciler::binding_name;
use serde_json::Value;
use std::time::Duration;
use testenv::{FaultAction, FaultRule, Gvr, ServerConfig, UserInfo, Verb};

/// The kubeconfig Secret of the samples' runtime ID.
const SECRET: &str = "kubeconfig-runtime-id";
/// The label the controller's Secret watch selects on.
const MANAGED_BY: &str = "operator.kyma-project.io/managed-by";

/// Provisions `rt` to `Ready` by stepping Gardener.
async fn provision(env: &Env, rt: &Runtime) {
    let name = rt.metadata.name.clone().unwrap();
    env.create(rt).await;
    env.step_until(&format!("{name} Ready"), |s| {
        s.state(&name) == Some("Ready")
    })
    .await;
}

fn secret(env: &Env) -> Option<Value> {
    env.kcp.get(&Gvr::secrets(), Some(NS), SECRET)
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The decoded kubeconfig of the Secret, if any.
fn kubeconfig_of(secret: &Value) -> String {
    use base64::Engine;
    let data = secret["data"]["config"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// The names of the ClusterRoleBindings of `server`.
fn bindings(server: &testenv::ServerHandle) -> Vec<String> {
    let mut names: Vec<String> = server
        .list(&Gvr::cluster_role_bindings(), None)
        .iter()
        .filter_map(|b| b["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// The states of the status writes of `name` after the first `skip`.
fn states_after(env: &Env, name: &str, skip: usize) -> Vec<String> {
    env.writes_of(name)
        .iter()
        .skip(skip)
        .map(Write::short)
        .collect()
}

/// Removes a Shoot at once, as if Gardener had finished deleting it (its finalizer dropped).
fn remove_shoot(env: &Env, name: &str) {
    env.garden
        .modify(&Gvr::shoots(), Some(GARDEN_NS), name, |s| {
            s["metadata"].as_object_mut().unwrap().remove("finalizers");
        })
        .expect("finalizers dropped");
    env.garden
        .delete(&Gvr::shoots(), Some(GARDEN_NS), name)
        .expect("Shoot deleted");
    assert!(env.shoot(name).is_none(), "the Shoot is gone");
}

/// Creates aws-minimal and steps Gardener until the pass that writes its kubeconfig Secret has
/// written it; that pass is then still busy for `BUSY` in the runtime cluster (its
/// administrators' sync meets a slow list), so what the test does next happens between the
/// controller's write of the Secret and its next read of it.
async fn provision_until_the_secret_is_written(env: &Env) -> Value {
    env.runtime.add_fault(
        FaultRule::new(FaultAction::Delay(BUSY))
            .verb(Verb::List)
            .resource("clusterrolebindings")
            .times(1),
    );
    env.create(&sample("aws-minimal.yaml")).await;
    env.step_until("the kubeconfig Secret written", |s| secret(s.env).is_some())
        .await;
    secret(env).unwrap()
}

/// How long the pass that wrote the kubeconfig Secret stays busy afterwards.
const BUSY: Duration = Duration::from_secs(2);

/// A kubeconfig Secret deleted by hand right after the controller wrote it (a pruning tool, an
/// operator's script), before the controller read it again: the next pass writes it again (the
/// Secret watch reports the deletion), it does not take its own earlier write for the Secret.
/// The Runtime is `Ready` with a kubeconfig Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_deleted_right_after_it_was_written_is_written_again() {
    let env = Env::start().await;
    let first = provision_until_the_secret_is_written(&env).await;
    env.kcp
        .delete(&Gvr::secrets(), Some(NS), SECRET)
        .expect("Secret deleted");
    env.wait_ready("aws-minimal").await;
    let old = uid(&first);
    env.wait_with(
        "a new kubeconfig Secret",
        TIMEOUT,
        |s| secret(s.env).is_some_and(|n| uid(&n) != old),
        || {
            format!(
                "Runtime {:?}, kubeconfig Secret present: {}",
                env.state("aws-minimal"),
                secret(&env).is_some()
            )
        },
    )
    .await;
    let after = secret(&env).unwrap();
    assert_eq!(
        after["metadata"]["labels"][MANAGED_BY],
        "infrastructure-manager"
    );
    assert!(
        kubeconfig_of(&after).contains("server:"),
        "a kubeconfig is stored"
    );
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    env.assert_model_clean();
}

/// A kubeconfig Secret deleted by hand a while after its Runtime became `Ready` is written
/// again; the Runtime stays `Ready` throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_deleted_by_hand_while_ready_is_written_again() {
    let env = Env::start().await;
    provision(&env, &sample("aws-minimal.yaml")).await;
    // Reconciles of the Ready Runtime well after the Secret watch delivered the Secret (an
    // annotation on the Runtime each; no new generation), so the deletion below comes long
    // after the controller last wrote the Secret.
    for i in 0..2 {
        let done = env.metrics().reconciles();
        let touched = env
            .edit("aws-minimal", |rt| {
                rt.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert("example.com/touched".into(), i.to_string());
            })
            .await;
        assert_eq!(touched.metadata.generation, Some(1));
        env.wait("a reconcile after the annotation", |s| {
            s.env.metrics().reconciles() > done
        })
        .await;
    }
    let ready_writes = env.writes_of("aws-minimal").len();
    let old = uid(&secret(&env).expect("kubeconfig Secret"));
    env.kcp
        .delete(&Gvr::secrets(), Some(NS), SECRET)
        .expect("Secret deleted");
    env.wait("a new kubeconfig Secret", |s| {
        secret(s.env).is_some_and(|n| uid(&n) != old)
    })
    .await;
    assert!(kubeconfig_of(&secret(&env).unwrap()).contains("server:"));
    assert!(
        states_after(&env, "aws-minimal", ready_writes)
            .iter()
            .all(|w| w.starts_with("Ready")),
        "the Runtime stays Ready: {:#?}",
        states_after(&env, "aws-minimal", ready_writes)
    );
    env.assert_model_clean();
}

/// A kubeconfig Secret whose `managed-by` label is removed by hand right after the controller
/// wrote it leaves the controller's Secret watch (a metadata watch on that label): the
/// controller writes it again under kim's labels (it exists, so it is replaced at the version
/// read), and the Runtime is `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_secret_whose_label_is_removed_gets_kims_labels_back() {
    let env = Env::start().await;
    let first = provision_until_the_secret_is_written(&env).await;
    env.kcp
        .modify(&Gvr::secrets(), Some(NS), SECRET, |s| {
            s["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(MANAGED_BY);
        })
        .expect("label removed");
    env.wait_ready("aws-minimal").await;
    env.wait("the label back on the Secret", |s| {
        secret(s.env)
            .is_some_and(|n| n["metadata"]["labels"][MANAGED_BY] == "infrastructure-manager")
    })
    .await;
    let after = secret(&env).unwrap();
    assert_eq!(uid(&after), uid(&first), "the same Secret, replaced");
    assert!(kubeconfig_of(&after).contains("server:"));
    env.assert_model_clean();
}

/// A Shoot deleted by hand while its Runtime is `Ready` (gone from Gardener) is created again by
/// the next reconcile. The new Shoot is a new cluster: before the Runtime is `Ready` again, its
/// kubeconfig Secret must hold a kubeconfig of the new cluster and the administrators must be
/// bound there. (Gardener's `adminkubeconfig` answers with the new cluster from the deletion on;
/// the old cluster keeps the old bindings, as a deleted cluster's data is gone anyway.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shoot_deleted_by_hand_is_created_again_and_its_new_cluster_is_configured() {
    let env = Env::start().await;
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let admin = binding_name("admin@myorg.com");
    assert_eq!(bindings(&env.runtime), vec![admin.clone()]);
    let old_shoot = uid(&env.shoot("aws-minimal").expect("Shoot"));

    // The new cluster the re-created Shoot gets.
    let token = "admin-token-recreated";
    let fresh = testenv::start(
        ServerConfig::default()
            .name("recreated")
            .user(token, UserInfo::new("shoot-admin", &["system:masters"])),
    )
    .await
    .expect("new runtime cluster");
    let kubeconfig = fresh.kubeconfig_yaml(Some(token));
    env.garden.set_admin_kubeconfig(move |_| kubeconfig.clone());
    remove_shoot(&env, "aws-minimal");

    env.wait("the Runtime no longer Ready", |s| {
        s.state("aws-minimal") != Some("Ready")
    })
    .await;
    env.step_until("Ready again on a new Shoot", |s| {
        s.state("aws-minimal") == Some("Ready")
    })
    .await;
    let new_shoot = uid(&env.shoot("aws-minimal").expect("the Shoot created again"));
    assert_ne!(new_shoot, old_shoot, "a new Shoot");
    let stored = kubeconfig_of(&secret(&env).expect("kubeconfig Secret"));
    let points_at_new = stored.contains(fresh.url());
    let bound = bindings(&fresh);
    assert!(
        points_at_new && bound == vec![admin.clone()],
        "once Ready again, the kubeconfig Secret must point at the new cluster {} (it does: \
         {points_at_new}) and the administrators must be bound there (bindings: {bound:?}); \
         status writes: {:#?}",
        fresh.url(),
        shorts(&env.writes_of("aws-minimal"))
    );
    env.assert_model_clean();
    fresh.shutdown();
}

/// A Runtime deleted while the controller's Shoot watch is stuck (its watch request never
/// answers, as behind a network partition; the initial list worked, before the Shoot existed):
/// the Shoot the Runtime created exists in Gardener, the watch never showed it. The deletion must
/// not release the Runtime without asking Gardener to delete that Shoot (an orphaned cluster
/// nobody deletes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_deleted_while_the_shoot_watch_is_stuck_still_deletes_its_shoot() {
    let mut env = Env::without_controller().await;
    env.garden.add_fault(
        FaultRule::new(FaultAction::Hang)
            .verb(Verb::Watch)
            .resource("shoots"),
    );
    env.controller = Some(env.spawn(env.settings()));
    env.create(&sample("aws-minimal.yaml")).await;
    env.wait_condition(
        "aws-minimal",
        "Pending",
        "Provisioned",
        "Unknown",
        "Pending",
    )
    .await;
    assert!(env.shoot("aws-minimal").is_some(), "the Shoot was created");
    env.delete("aws-minimal").await;
    env.wait(
        "the Shoot's deletion requested, or the Runtime released",
        |s| {
            s.runtime_json("aws-minimal").is_none()
                || s.env
                    .shoot("aws-minimal")
                    .is_none_or(|shoot| shoot["metadata"].get("deletionTimestamp").is_some())
        },
    )
    .await;
    let shoot = env.shoot("aws-minimal");
    let released = env.runtime_json("aws-minimal").is_none();
    if let Some(controller) = env.controller.take() {
        controller.abort().await;
    }
    assert!(
        shoot
            .as_ref()
            .is_none_or(|s| s["metadata"].get("deletionTimestamp").is_some()),
        "the Runtime was {} while its Shoot exists and nobody asked Gardener to delete it \
         (an orphaned Shoot); status writes: {:#?}",
        if released { "released" } else { "kept" },
        shorts(&env.writes_of("aws-minimal"))
    );
    env.assert_model_clean();
}

/// A Runtime deleted and created again under its name (same runtime ID, same Shoot name) right
/// after it was released: the new one is provisioned from the start (its first write `Pending`),
/// on a new Shoot, with a kubeconfig Secret and its administrators; nothing the controller
/// remembered of the first (own writes keyed by name, administrators' sync) stands in for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_created_again_under_its_name_is_provisioned_afresh() {
    let env = Env::start().await;
    let rt = sample("aws-minimal.yaml");
    provision(&env, &rt).await;
    let first_shoot = uid(&env.shoot("aws-minimal").unwrap());
    let first_secret = uid(&secret(&env).unwrap());
    env.delete("aws-minimal").await;
    env.step_until("released", |s| s.runtime_json("aws-minimal").is_none())
        .await;
    assert!(
        env.shoot("aws-minimal").is_none(),
        "the first Shoot is gone"
    );
    assert!(secret(&env).is_none(), "the first Secret is gone");
    // The runtime cluster outlives the Shoot here (the simulated Gardener answers every
    // adminkubeconfig with it): remove the first incarnation's bindings.
    for b in bindings(&env.runtime) {
        env.runtime
            .delete(&Gvr::cluster_role_bindings(), None, &b)
            .unwrap();
    }
    let writes_before = env.writes_of("aws-minimal").len();
    env.create(&rt).await;
    env.step_until("the new Runtime Ready", |s| {
        s.state("aws-minimal") == Some("Ready")
    })
    .await;
    let second = states_after(&env, "aws-minimal", writes_before);
    assert!(
        second.first().is_some_and(|w| w.starts_with("Pending")),
        "{second:#?}"
    );
    assert_ne!(uid(&env.shoot("aws-minimal").unwrap()), first_shoot);
    assert_ne!(uid(&secret(&env).unwrap()), first_secret);
    assert_eq!(
        bindings(&env.runtime),
        vec![binding_name("admin@myorg.com")]
    );
    env.assert_model_clean();
}

/// Another allowed writer (an operator in `system:masters`) sets the status of a `Ready` Runtime
/// to `Pending` with `Configured=False` between two passes: the controller sees that status, not
/// its own last write, and brings the Runtime back to `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_edited_by_another_writer_is_reconciled_back() {
    let env = Env::start().await;
    provision(&env, &sample("aws-minimal.yaml")).await;
    env.kcp
        .add_user("ops-token", UserInfo::new("ops", &["system:masters"]));
    let ops: kube::Api<Runtime> = kube::Api::namespaced(env.kcp.client_as(Some("ops-token")), NS);
    let mut rt = ops.get("aws-minimal").await.unwrap();
    let status = rt.status.as_mut().unwrap();
    status.state = Some(kim::status::State::Pending);
    let configured = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == "Configured")
        .unwrap();
    configured.status = "False".into();
    configured.reason = "ConfigurationError".into();
    configured.message = "set by hand".into();
    // A transition time of its own, later than the stored one (the model repairs one left
    // unchanged, which would be a finding of this write, not of the controller's).
    let stored = configured.last_transition_time.0;
    configured.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        stored + k8s_openapi::jiff::SignedDuration::from_secs(1),
    );
    ops.replace_status("aws-minimal", &Default::default(), &rt)
        .await
        .expect("the operator's status write");
    env.wait_condition(
        "aws-minimal",
        "Pending",
        "Configured",
        "False",
        "ConfigurationError",
    )
    .await;
    env.wait_ready("aws-minimal").await;
    env.assert_model_clean();
}

/// A second Runtime (another runtime ID) naming the Shoot of a `Ready` Runtime fails with
/// `ConversionErr`; deleting it deletes neither that Shoot nor the first Runtime's kubeconfig
/// Secret, and the first stays `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_runtime_naming_the_same_shoot_fails_and_its_deletion_spares_the_first() {
    let env = Env::start().await;
    provision(&env, &sample("aws-minimal.yaml")).await;
    let mut other = sample("aws-minimal.yaml");
    other.metadata.name = Some("intruder".into());
    other
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kyma-project.io/runtime-id".into(), "intruder-id".into());
    env.create(&other).await;
    env.wait_condition(
        "intruder",
        "Failed",
        "Provisioned",
        "False",
        "ConversionErr",
    )
    .await;
    env.delete("intruder").await;
    env.step_until("the intruder released", |s| {
        s.runtime_json("intruder").is_none()
    })
    .await;
    let shoot = env.shoot("aws-minimal").expect("the first Runtime's Shoot");
    assert!(
        shoot["metadata"].get("deletionTimestamp").is_none(),
        "{shoot}"
    );
    assert!(secret(&env).is_some(), "the first Runtime's Secret is kept");
    assert_eq!(env.state("aws-minimal").as_deref(), Some("Ready"));
    env.assert_model_clean();
}

/// The administrators changed twice in a row (generations 2 and 3, the second before the first
/// is applied): the Runtime ends `Ready` for generation 3 with exactly the administrators of
/// generation 3 bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_changed_twice_in_a_row_ends_with_the_last_one() {
    let env = Env::start().await;
    provision(&env, &sample("aws-minimal.yaml")).await;
    env.edit("aws-minimal", |rt| {
        rt.spec.security.administrators = vec!["a@myorg.com".into(), "b@myorg.com".into()];
    })
    .await;
    let last = env
        .edit("aws-minimal", |rt| {
            rt.spec.security.administrators = vec!["c@myorg.com".into()];
        })
        .await;
    let generation = last.metadata.generation.unwrap();
    assert_eq!(generation, 3);
    env.step_until("Ready for generation 3", |s| {
        s.state("aws-minimal") == Some("Ready")
            && s.runtime_json("aws-minimal")
                .and_then(|r| r.pointer("/status/conditions"))
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .all(|c| c["observedGeneration"].as_i64() == Some(generation))
                })
    })
    .await;
    assert_eq!(bindings(&env.runtime), vec![binding_name("c@myorg.com")]);
    env.assert_model_clean();
}

/// The controller's Shoot list is forbidden at the start (a missing RBAC rule being rolled out):
/// no reconcile acts on the empty Shoot cache (no Shoot created, no status written), none hangs,
/// and once the list is allowed the Runtime is provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_shoot_list_at_the_start_holds_reconciles_until_it_is_allowed() {
    let env = Env::without_controller().await;
    env.garden.add_fault(
        FaultRule::new(FaultAction::fail(403))
            .verb(Verb::List)
            .resource("shoots"),
    );
    env.create(&sample("aws-minimal.yaml")).await;
    let mut env = env;
    env.controller = Some(env.spawn(env.settings()));
    let forbidden = |e: &Env| {
        e.garden.count_requests(|r| {
            r.verb == Some(Verb::List) && r.resource.as_deref() == Some("shoots") && r.code == 403
        })
    };
    env.wait_with(
        "two forbidden Shoot lists",
        Duration::from_secs(30),
        |s| forbidden(s.env) >= 2,
        String::new,
    )
    .await;
    assert!(env.writes_of("aws-minimal").is_empty(), "no status write");
    assert!(
        env.garden.list(&Gvr::shoots(), None).is_empty(),
        "no Shoot created"
    );
    assert!(!env.controller.as_ref().unwrap().task_finished());
    env.garden.clear_faults();
    env.wait_with(
        "the Shoot created once the list is allowed",
        Duration::from_secs(60),
        |s| s.state("aws-minimal") == Some("Pending"),
        String::new,
    )
    .await;
    env.step_until("Ready", |s| s.state("aws-minimal") == Some("Ready"))
        .await;
    env.assert_model_clean();
    env.stop().await;
}
