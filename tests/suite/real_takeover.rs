//! Taking over KIM's Shoots on the REAL Gardener API ([`RealEnv`]): Shoots stored as the Go
//! Kyma Infrastructure Manager stores them, then kim's controller on their Runtimes, which must
//! change nothing on them but the runtime-generation annotation both write. The controller runs
//! on `docs/config.example.yaml`, the configuration of a KIM-equivalent install.
//!
//! KIM's Shoots are `tests/fixtures/kim-takeover/<shoot>.json`: what KIM's own converter wrote
//! for the Runtime of the sample (named as [`RealEnv::create_sample`] names it, generation 1)
//! with the KIM configuration equivalent to `docs/config.example.yaml` (that directory's README
//! says how and when they were produced). Not kim's converter: these Shoots are the reference.
//! The test stores each as KIM does, by server-side apply with field manager `kim` (KIM's
//! `fieldManagerName`), forced, with the structured-authentication ConfigMap it names, lets the
//! gardenlet finish its `Create`, and changes the Runtime in a way that is none of the Shoot's
//! (one more administrator: generation 2, ahead of KIM's runtime-generation annotation "1"), so
//! kim's update path runs: its forced apply of its own Shoot. Then kim's controller starts, and
//! every Runtime must reach `Ready` at generation 2 while on each Shoot:
//! - the object is the same (uid), kim's create path did not run;
//! - `metadata.generation`, spec, labels, finalizers and status stay as they were;
//! - the annotations differ only in runtime-generation, "1" → "2";
//! - `managedFields` keep every entry (manager, operation, subresource, API version, fields):
//!   kim owns exactly the fields KIM owned, plus each pool's Gardener-defaulted
//!   `updateStrategy`, which KIM's own update takes over the same way
//!   ([`kims_own_update_strategy`]);
//! - the watch of the Shoot saw exactly one MODIFIED event (kim's apply) and nothing else;
//! - the gardenlet started no operation (no new generation to reconcile);
//! - the Runtimes, stored without status, reach `Ready` through statuses the model allows (no
//!   status write denied by the controller's own check or by the webhook).

use crate::support::real_controller::*;
use futures::StreamExt as _;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use testenv::gardenlet::{Event as Did, Operation};

/// The Shoot annotation with the Runtime generation the Shoot was last written for (KIM's and
/// kim's).
const RUNTIME_GENERATION: &str = "infrastructuremanager.kyma-project.io/runtime-generation";

/// (sample of `samples/runtimes`, Runtime and Shoot name): one per provider.
const CASES: &[(&str, &str)] = &[("aws-minimal.yaml", "tk-aws"), ("azure.yaml", "tk-azure")];

/// KIM's Shoot for the Runtime named `name` (`tests/fixtures/kim-takeover/<name>.json`).
fn kim_shoot(name: &str) -> Value {
    let path = crate::support::real::repo()
        .join("tests/fixtures/kim-takeover")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The structured-authentication ConfigMap KIM creates before a Shoot naming one: key
/// `config.yaml`, one JWT authenticator for the Runtime's OIDC provider.
fn auth_config_map(name: &str, runtime: &DynamicObject) -> Value {
    let oidc = &runtime.data["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["oidcConfig"];
    let config = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {"url": oidc["issuerURL"], "audiences": [oidc["clientID"]]},
            "claimMappings": {
                "username": {"claim": oidc["usernameClaim"], "prefix": oidc.get("usernamePrefix").cloned().unwrap_or(json!(""))},
                "groups": {"claim": oidc["groupsClaim"], "prefix": ""},
            },
        }],
    });
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": crate::support::reconciler::GARDEN_NS},
        "data": {"config.yaml": serde_json::to_string(&config).unwrap()},
    })
}

/// The paths (`a.b.c`) where `a` and `b` differ, with both values.
fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<_> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => differences(v, w, &p, out),
                    (v, w) => out.push(format!("{p}: {v:?} -> {w:?}")),
                }
            }
        }
        _ if a != b => out.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

/// The managed-fields entries of `shoot` without their times: `"<manager> <operation>
/// <subresource> <apiVersion>"` → fieldsV1.
fn managed(shoot: &DynamicObject) -> Value {
    let entries: serde_json::Map<String, Value> = shoot
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            let key = format!(
                "{} {} {} {}",
                m.manager.as_deref().unwrap_or("-"),
                m.operation.as_deref().unwrap_or("-"),
                m.subresource.as_deref().unwrap_or("-"),
                m.api_version.as_deref().unwrap_or("-"),
            );
            (
                key,
                m.fields_v1.as_ref().map_or(Value::Null, |f| f.0.clone()),
            )
        })
        .collect();
    Value::Object(entries)
}

/// The Shoot as a JSON value without what every write changes (resourceVersion, the
/// managed-fields times).
fn comparable(shoot: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(shoot).unwrap();
    v["metadata"]["resourceVersion"] = Value::Null;
    v["metadata"]["managedFields"] = managed(shoot);
    v
}

/// What differs between two versions of a Shoot, beyond resourceVersion and managed-fields
/// times.
fn changes(before: &DynamicObject, after: &DynamicObject) -> Vec<String> {
    let mut out = Vec::new();
    differences(&comparable(before), &comparable(after), "", &mut out);
    out
}

/// Whether `change` (a line of [`changes`]) is kim's managed-fields entry taking a pool's
/// `updateStrategy`, which Gardener defaulted on creation: KIM's patch converter copies the
/// stored pool's `updateStrategy` into its apply (`alignWorkersWithGardener`), and kim does as
/// KIM, so KIM's own first update of its Shoot takes the same ownership, without a change of
/// the Shoot.
fn kims_own_update_strategy(change: &str) -> bool {
    change.starts_with(".metadata.managedFields.kim Apply - core.gardener.cloud/v1beta1.f:spec.f:provider.f:workers.")
        && change.ends_with(".f:updateStrategy: None -> Some(Object {})")
}

/// The controller's JSON log lines whose message is `message` and whose `shoot` is `shoot`.
fn logged(out: &str, message: &str, shoot: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == message && v["shoot"] == shoot)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kim_takes_over_kims_shoots_without_changing_them() {
    let env = RealEnv::start().await;
    let webhook = env.stack.webhook.as_ref().expect("webhook");
    let denied_before = webhook.count("/validate", "denied").await;
    let garden = env.garden_client().await;
    let kim_shoots: Api<DynamicObject> = Api::namespaced_with(
        garden.clone(),
        crate::support::reconciler::GARDEN_NS,
        &testenv::gardenlet::shoot_resource(),
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(garden.clone(), crate::support::reconciler::GARDEN_NS);
    let runtimes = env.runtimes().await;
    let kim_apply = PatchParams::apply("kim").force();

    // ---- KIM's Shoots, done by the gardenlet; their Runtimes one change ahead ----
    let mut before = Vec::new();
    for (file, name) in CASES {
        let runtime = env.create_sample(file, name).await;
        assert_eq!(runtime.metadata.generation, Some(1), "{name}");
        let shoot = kim_shoot(name);
        assert_eq!(shoot["metadata"]["name"], *name);
        assert_eq!(shoot["metadata"]["annotations"][RUNTIME_GENERATION], "1");
        if let Some(cm) = shoot["spec"]["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]
            ["configMapName"]
            .as_str()
        {
            config_maps
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(auth_config_map(cm, &runtime)).unwrap(),
                )
                .await
                .unwrap_or_else(|e| panic!("{name}: ConfigMap {cm}: {e}"));
        }
        kim_shoots
            .patch(name, &kim_apply, &Patch::Apply(&shoot))
            .await
            .unwrap_or_else(|e| panic!("Gardener refused KIM's Shoot {name}: {e}"));
        env.gardenlet
            .wait_for(LIMIT, |h| {
                h.find(name, |e| matches!(e, Did::Succeeded(Operation::Create)))
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut admins = runtime.data["spec"]["security"]["administrators"].clone();
        admins
            .as_array_mut()
            .expect("administrators")
            .push(json!("takeover-admin@myorg.com"));
        let changed = runtimes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"security": {"administrators": admins}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("adding an administrator to {name}: {e}"));
        assert_eq!(changed.metadata.generation, Some(2), "{name}");
        let stored = env.shoot(name).await.expect("KIM's Shoot");
        // Every change of the Shoot from here on, as the watch delivers it.
        let rv = stored.metadata.resource_version.clone().unwrap();
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let shoots = env.shoots().await;
        let watch = tokio::spawn(async move {
            let mut stream = shoots
                .watch(&params, &rv)
                .await
                .expect("watching the Shoot")
                .boxed();
            while let Some(e) = stream.next().await {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        before.push((
            *name,
            stored,
            env.gardenlet.history().of(name).len(),
            rx,
            watch,
        ));
    }

    // ---- kim's controller, on KIM's configuration ----
    let controller = env.spawn_controller("info,kim=debug");
    let ready_at_2 = ready_at_generation(2);
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (name, stored, gardenlet_seen, mut rx, watch) in before {
        // kim's apply marks the Shoot as written for generation 2.
        let applied = await_condition(env.shoots().await, name, |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.annotations().get(RUNTIME_GENERATION).map(String::as_str) == Some("2")
            })
        });
        tokio::time::timeout(LIMIT, applied)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "kim did not apply Shoot {name} within {LIMIT:?}\ncontroller stdout:\n{}\nstderr:\n{}",
                    controller.stdout(),
                    controller.stderr()
                )
            })
            .unwrap_or_else(|e| panic!("watching Shoot {name}: {e}"));
        env.wait_runtime(name, "Ready at generation 2", ready_at_2, &controller)
            .await;
        let now = env.shoot(name).await.expect("the Shoot");

        // Every event up to the Shoot as it is now.
        let target = now.metadata.resource_version.clone().unwrap();
        let mut events = Vec::new();
        let mut previous = stored.clone();
        if stored.metadata.resource_version.as_deref() != Some(target.as_str()) {
            loop {
                let event = tokio::time::timeout(LIMIT, rx.recv())
                    .await
                    .unwrap_or_else(|_| panic!("Shoot {name}: no event up to {target}"))
                    .expect("the watch of the Shoot");
                let event = event.unwrap_or_else(|e| panic!("watching Shoot {name}: {e}"));
                let obj = match event {
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("watching Shoot {name}: {e:?}"),
                    WatchEvent::Added(o) => {
                        events.push(format!("ADDED {:?}", o.metadata.resource_version));
                        o
                    }
                    WatchEvent::Deleted(o) => {
                        events.push(format!("DELETED {:?}", o.metadata.resource_version));
                        o
                    }
                    WatchEvent::Modified(o) => {
                        events.push(format!(
                            "MODIFIED {:?} generation {:?}: {:?}",
                            o.metadata.resource_version,
                            o.metadata.generation,
                            changes(&previous, &o)
                        ));
                        o
                    }
                };
                let reached = obj.metadata.resource_version.as_deref() == Some(target.as_str());
                previous = obj;
                if reached {
                    break;
                }
            }
        }
        watch.abort();

        let diff = changes(&stored, &now);
        report.push(format!(
            "Shoot {name}: generation {:?} -> {:?}; {} event(s):\n  {}\n  all changes: {diff:?}",
            stored.metadata.generation,
            now.metadata.generation,
            events.len(),
            events.join("\n  ")
        ));
        let annotation = format!(".metadata.annotations.{RUNTIME_GENERATION}: \"1\" -> \"2\"");
        if !diff.contains(&annotation) {
            failures.push(format!("{name}: runtime-generation not written: {diff:#?}"));
        }
        let unexpected: Vec<_> = diff
            .iter()
            .filter(|l| **l != annotation && !kims_own_update_strategy(l))
            .collect();
        if !unexpected.is_empty() {
            failures.push(format!("{name}: changes {unexpected:#?}"));
        }
        if now.metadata.uid != stored.metadata.uid {
            failures.push(format!("{name}: the Shoot was replaced"));
        }
        if now.metadata.generation != stored.metadata.generation {
            failures.push(format!(
                "{name}: generation {:?} -> {:?}",
                stored.metadata.generation, now.metadata.generation
            ));
        }
        if events.len() != 1 || !events[0].starts_with("MODIFIED") {
            failures.push(format!("{name}: events {events:#?}"));
        }
        let after_takeover = env.gardenlet.history().of(name)[gardenlet_seen..].to_vec();
        if !after_takeover.is_empty() {
            failures.push(format!(
                "{name}: the gardenlet did {after_takeover:?} after the take-over"
            ));
        }
        // The update path ran, the create path did not.
        let out = controller.stdout() + &controller.stderr();
        let updated = logged(&out, "Shoot updated", name);
        if updated.len() != 1
            || !(updated[0]["spec_changed"] == json!(false)
                || updated[0]["spec_changed"] == json!("false"))
        {
            failures.push(format!("{name}: 'Shoot updated' lines {updated:?}"));
        }
        let created = logged(&out, "Shoot created", name);
        if !created.is_empty() {
            failures.push(format!("{name}: 'Shoot created' lines {created:?}"));
        }
    }
    // Runtimes without status taken to Ready: every write legal in the model (none -> Ready is
    // not), checked by the controller and by the webhook.
    let out = controller.stdout() + &controller.stderr();
    for needle in ["status write denied", "StatusWriteDenied"] {
        if out.contains(needle) {
            failures.push(format!("the controller logged {needle:?}"));
        }
    }
    let denied = webhook.count("/validate", "denied").await - denied_before;
    if denied != 0 {
        failures.push(format!("the webhook denied {denied} status writes"));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "kim's take-over changed KIM's Shoots:\n{}",
        failures.join("\n")
    );
}
