//! The simulated gardenlet (`testenv::gardenlet`) on the real Gardener API: scripted outcomes
//! (a `Create` that fails for good until the retry annotation, which gardener-apiserver turns
//! into a new generation, and an `Error` retried on its own),
//! a real runtime cluster that the real `shoots/adminkubeconfig` reaches, a paused gardenlet
//! holding a deletion, and the deletion through Gardener's confirmation and finalizer.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testenv::controlplane::ControlPlane;
use testenv::garden;
use testenv::gardener::{CONFIRM_DELETION, Outcome, ShootScript};
use testenv::gardenlet::{Clusters, Event, Gardenlet, GardenletConfig, Operation};

use crate::support::shoots;

/// A project of its own (the shared control plane's other tests use `kyma-dev`).
const PROJECT: &str = "gardenlet";
const LIMIT: Duration = Duration::from_secs(90);

/// An AWS Shoot with only values the fixtures offer.
fn shoot(name: &str, namespace: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Shoot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "cloudProfile": {"kind": "CloudProfile", "name": "aws"},
            "region": "eu-central-1",
            "credentialsBindingName": "hyperscaler-aws",
            "kubernetes": {"version": "1.33.5"},
            "networking": {"type": "calico", "nodes": "10.250.0.0/16"},
            "provider": {
                "type": "aws",
                "workers": [{
                    "name": "worker-0",
                    "machine": {
                        "type": "m6i.large",
                        "image": {"name": "gardenlinux", "version": "1592.1.0"},
                    },
                    "zones": ["eu-central-1a"],
                    "minimum": 1,
                    "maximum": 2,
                }],
            },
        },
    }))
    .expect("a Shoot")
}

fn state(o: &DynamicObject) -> (String, String) {
    let lo = &o.data["status"]["lastOperation"];
    (
        lo["type"].as_str().unwrap_or_default().to_string(),
        lo["state"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gardenlet_runs_scripted_operations_on_real_runtime_clusters() {
    let cp = tokio::task::block_in_place(ControlPlane::shared_with_gardener);
    let client = cp.admin().await;
    garden::install_fixtures(&client, PROJECT)
        .await
        .expect("fixtures installed");
    let ns = format!("garden-{PROJECT}");
    let api = shoots(&client, &ns);
    let gardenlet = Gardenlet::start(
        client.clone(),
        GardenletConfig::new(&ns)
            .clusters(Clusters::Pool(1))
            .script(
                "flaky",
                ShootScript::create_fails(&["ERR_INFRA_UNAUTHORIZED"])
                    .then_create(Outcome::error(&["ERR_INFRA_RATE_LIMITS_EXCEEDED"])),
            ),
    );
    for name in ["plain", "flaky"] {
        api.create(&PostParams::default(), &shoot(name, &ns))
            .await
            .unwrap_or_else(|e| panic!("creating Shoot {name}: {e}"));
    }

    // ---- a Shoot created: status, finalizer, a runtime cluster the admin kubeconfig reaches ----
    gardenlet
        .wait_for(LIMIT, |h| {
            h.find("plain", |e| *e == Event::Succeeded(Operation::Create))
        })
        .await
        .expect("plain created");
    let plain = api.get("plain").await.unwrap();
    assert_eq!(state(&plain), ("Create".into(), "Succeeded".into()));
    assert_eq!(plain.data["status"]["lastOperation"]["progress"], 100);
    assert_eq!(plain.data["status"]["observedGeneration"], json!(1));
    assert_eq!(
        plain.data["status"]["technicalID"],
        json!(format!("shoot--{PROJECT}--plain"))
    );
    assert!(
        plain
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "gardener")
    );
    let cluster = gardenlet.cluster("plain").await.expect("a runtime cluster");
    assert_eq!(
        plain.data["status"]["advertisedAddresses"],
        json!([{"name": "external", "url": cluster.url()}])
    );
    let answer: Value = api
        .create_subresource(
            "adminkubeconfig",
            "plain",
            &PostParams::default(),
            &json!({
                "apiVersion": "authentication.gardener.cloud/v1alpha1",
                "kind": "AdminKubeconfigRequest",
                "spec": {"expirationSeconds": 600},
            }),
        )
        .await
        .expect("an admin kubeconfig from Gardener");
    let kubeconfig = {
        use base64::Engine as _;
        let b64 = answer["status"]["kubeconfig"]
            .as_str()
            .expect("a kubeconfig");
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .expect("UTF-8")
    };
    let runtime = cp.client_from_kubeconfig(&kubeconfig).await;
    let names: Vec<String> = Api::<Namespace>::all(runtime)
        .list(&ListParams::default())
        .await
        .expect("the runtime cluster answers the admin kubeconfig")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == "kube-system"), "{names:?}");

    // ---- Failed for good, then the retry annotation: Error (retried at once), Succeeded ----
    gardenlet
        .wait_for(LIMIT, |h| {
            h.find("flaky", |e| {
                matches!(e, Event::Ended(Operation::Create, Outcome::Failed { .. }))
            })
        })
        .await
        .expect("flaky failed");
    let flaky = api.get("flaky").await.unwrap();
    assert_eq!(state(&flaky), ("Create".into(), "Failed".into()));
    assert_eq!(
        flaky.data["status"]["lastErrors"][0]["codes"],
        json!(["ERR_INFRA_UNAUTHORIZED"])
    );
    api.patch(
        "flaky",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"gardener.cloud/operation": "retry"}}})),
    )
    .await
    .expect("the retry annotation");
    gardenlet
        .wait_for(LIMIT, |h| {
            h.find("flaky", |e| *e == Event::Succeeded(Operation::Create))
        })
        .await
        .expect("flaky created after the retry");
    let ops: Vec<Event> = gardenlet
        .history()
        .of("flaky")
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                Event::Started(_) | Event::Ended(..) | Event::Succeeded(_) | Event::RetryTaken
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            Event::Started(Operation::Create),
            Event::Ended(
                Operation::Create,
                Outcome::failed(&["ERR_INFRA_UNAUTHORIZED"])
            ),
            Event::Started(Operation::Create),
            Event::Ended(
                Operation::Create,
                Outcome::error(&["ERR_INFRA_RATE_LIMITS_EXCEEDED"])
            ),
            Event::Started(Operation::Create),
            Event::Succeeded(Operation::Create),
        ]
    );
    // gardener-apiserver itself turns the retry annotation of a Failed Shoot into a new
    // generation and removes it (its Shoot strategy): the gardenlet saw a new generation.
    let flaky = api.get("flaky").await.unwrap();
    assert!(
        !flaky.annotations().contains_key("gardener.cloud/operation"),
        "the retry annotation is gone"
    );
    assert_eq!(flaky.metadata.generation, Some(2));
    assert_eq!(flaky.data["status"]["observedGeneration"], json!(2));
    assert_eq!(flaky.data["status"]["lastErrors"], Value::Null);

    // ---- deletion: refused unconfirmed, held while paused, then Delete and the finalizer ----
    let refused = api
        .delete("plain", &DeleteParams::default())
        .await
        .expect_err("an unconfirmed deletion");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused:?}"
    );
    gardenlet.pause();
    for name in ["plain", "flaky"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {CONFIRM_DELETION: "true"}}})),
        )
        .await
        .expect("confirmed");
        api.delete(name, &DeleteParams::default())
            .await
            .expect("deleted");
    }
    let held = api.get("plain").await.expect("held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    gardenlet.resume();
    for name in ["plain", "flaky"] {
        gardenlet
            .wait_for(LIMIT, |h| h.find(name, |e| *e == Event::FinalizerRemoved))
            .await
            .unwrap_or_else(|e| panic!("{name} deleted: {e}"));
        let after_delete = gardenlet.history().of(name);
        let at = after_delete
            .iter()
            .position(|e| *e == Event::Started(Operation::Delete))
            .expect("a Delete");
        assert_eq!(
            after_delete[at..],
            [
                Event::Started(Operation::Delete),
                Event::Succeeded(Operation::Delete),
                Event::FinalizerRemoved
            ],
            "{name}: a pool's cluster stays"
        );
    }
    // The finalizer was the last: the API server has deleted them.
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(cluster.running(), "the pool's cluster outlives its Shoots");
    drop(gardenlet);
}
