//! The in-memory API server against real `kube::Api` calls: CRUD, selectors, patches, status
//! subresource, generation, finalizers, subresources, users, faults, admission, request log.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use base64::Engine as _;
use k8s_openapi::{
    ByteString,
    api::{coordination::v1::Lease, core::v1::Pod, core::v1::Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};
use support::{code, runtime, runtimes, shoot, shoots, status};
use testenv::{AdmissionDecision, FaultAction, FaultRule, Gvr, ServerConfig, UserInfo, Verb};

/// [`support::secret`] with one data key, `config`.
fn secret(name: &str, labels: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(BTreeMap::from([(
            "config".to_string(),
            ByteString(b"x".to_vec()),
        )])),
        ..support::secret(name, labels)
    }
}

async fn server() -> (testenv::ServerHandle, Client) {
    let s = testenv::start(ServerConfig::default()).await.unwrap();
    let c = s.client();
    (s, c)
}

#[tokio::test]
async fn get_list_and_label_selectors() {
    let (_s, client) = server().await;
    let api: Api<Secret> = Api::namespaced(client.clone(), "kcp");
    let other: Api<Secret> = Api::namespaced(client.clone(), "other");
    api.create(
        &PostParams::default(),
        &secret("a", &[("tier", "one"), ("env", "dev")]),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &secret("b", &[("tier", "two")]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("c", &[]))
        .await
        .unwrap();
    other
        .create(&PostParams::default(), &secret("d", &[("tier", "one")]))
        .await
        .unwrap();

    let got = api.get("a").await.unwrap();
    assert_eq!(got.metadata.namespace.as_deref(), Some("kcp"));
    assert!(got.metadata.uid.is_some());
    assert!(got.metadata.creation_timestamp.is_some());
    assert_eq!(code(api.get("missing").await.unwrap_err()), 404);

    let names = |l: kube::api::ObjectList<Secret>| -> Vec<String> {
        l.items.iter().map(|s| s.name_any()).collect()
    };
    let sel = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(api.list(&ListParams::default()).await.unwrap()),
        ["a", "b", "c"]
    );
    assert_eq!(names(api.list(&sel("tier=one")).await.unwrap()), ["a"]);
    assert_eq!(
        names(api.list(&sel("tier!=one")).await.unwrap()),
        ["b", "c"]
    );
    assert_eq!(
        names(api.list(&sel("tier in (one,two)")).await.unwrap()),
        ["a", "b"]
    );
    assert_eq!(
        names(api.list(&sel("tier notin (one)")).await.unwrap()),
        ["b", "c"]
    );
    assert_eq!(names(api.list(&sel("tier")).await.unwrap()), ["a", "b"]);
    assert_eq!(names(api.list(&sel("!tier")).await.unwrap()), ["c"]);
    assert_eq!(
        names(api.list(&sel("tier=one,env=dev")).await.unwrap()),
        ["a"]
    );
    let by_name = ListParams::default().fields("metadata.name=b");
    assert_eq!(names(api.list(&by_name).await.unwrap()), ["b"]);

    let all: Api<Secret> = Api::all(client.clone());
    let list = all.list(&sel("tier=one")).await.unwrap();
    assert_eq!(names(list.clone()), ["a", "d"]);
    let rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(rv, 4, "one global resourceVersion counter");

    // metadata-only list (PartialObjectMetadata)
    let meta = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(meta.items.len(), 3);

    // unregistered resource
    let pods: Api<Pod> = Api::namespaced(client, "kcp");
    assert_eq!(
        code(pods.list(&ListParams::default()).await.unwrap_err()),
        404
    );
}

#[tokio::test]
async fn create_conflicts_and_generate_name() {
    let (_s, client) = server().await;
    let api: Api<Secret> = Api::namespaced(client, "kcp");
    api.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    let err = status(
        api.create(&PostParams::default(), &secret("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "AlreadyExists");
    assert_eq!(err.message, "secrets \"a\" already exists");

    let mut generated = secret("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("kubeconfig-".into());
    let created = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(created.name_any().starts_with("kubeconfig-"));
    assert_eq!(created.name_any().len(), "kubeconfig-".len() + 5);

    // dry run stores nothing
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &secret("dry", &[])).await.unwrap();
    assert_eq!(code(api.get("dry").await.unwrap_err()), 404);
}

#[tokio::test]
async fn replace_uses_optimistic_concurrency() {
    let (_s, client) = server().await;
    let api: Api<Lease> = Api::namespaced(client, "kcp");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("leader".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut first = created.clone();
    first.spec = Some(Default::default());
    first.spec.as_mut().unwrap().holder_identity = Some("one".into());
    let updated = api
        .replace("leader", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(updated.resource_version(), created.resource_version());

    // The second writer still holds the old resourceVersion.
    let mut stale = created.clone();
    stale.spec = Some(Default::default());
    stale.spec.as_mut().unwrap().holder_identity = Some("two".into());
    let err = status(
        api.replace("leader", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );

    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    let forced = api
        .replace("leader", &PostParams::default(), &stale)
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().holder_identity.as_deref(), Some("two"));
    assert_eq!(
        code(
            api.replace("nope", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        400
    );
}

#[tokio::test]
async fn merge_json_strategic_and_apply_patches() {
    let (s, client) = server().await;
    let api: Api<Secret> = Api::namespaced(client, "kcp");
    api.create(&PostParams::default(), &secret("a", &[("x", "1")]))
        .await
        .unwrap();
    let pp = PatchParams::default();

    let merged = api
        .patch(
            "a",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"y": "2", "x": null}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.labels(),
        &BTreeMap::from([("y".to_string(), "2".to_string())])
    );

    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
        {"op": "replace", "path": "/metadata/labels/y", "value": "3"},
    ]))
    .unwrap();
    let patched = api.patch("a", &pp, &Patch::<()>::Json(jp)).await.unwrap();
    assert_eq!(patched.labels()["y"], "3");
    assert_eq!(patched.annotations()["a"], "b");

    // a failing JSON patch test op is 422
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/labels/y", "value": "9"}]))
            .unwrap();
    assert_eq!(
        code(
            api.patch("a", &pp, &Patch::<()>::Json(failing))
                .await
                .unwrap_err()
        ),
        422
    );

    let strategic = api
        .patch(
            "a",
            &pp,
            &Patch::Strategic(json!({"metadata": {"labels": {"z": "4"}}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.labels()["z"], "4");

    // resourceVersion in a patch body is a precondition
    let stale = json!({"metadata": {"resourceVersion": "1", "labels": {"q": "1"}}});
    assert_eq!(
        code(api.patch("a", &pp, &Patch::Merge(stale)).await.unwrap_err()),
        409
    );

    // server-side apply creates when absent and records the field manager
    let ssa = PatchParams::apply("kim").force();
    let applied = api
        .patch(
            "b",
            &ssa,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "b", "labels": {"managed": "yes"}},
                "stringData": {"k": "v"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.labels()["managed"], "yes");
    let mf = applied.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("kim"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    // ... and merges into an existing object
    let applied = api
        .patch(
            "b",
            &ssa,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "b", "annotations": {"n": "1"}},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.labels()["managed"], "yes");
    assert_eq!(applied.annotations()["n"], "1");
    assert_eq!(applied.metadata.managed_fields.unwrap().len(), 1);
    assert!(s.get(&Gvr::secrets(), Some("kcp"), "b").is_some());

    // merge patch on a missing object is 404
    assert_eq!(
        code(
            api.patch("zz", &pp, &Patch::Merge(json!({})))
                .await
                .unwrap_err()
        ),
        404
    );
}

#[tokio::test]
async fn status_subresource_and_generation_rules() {
    let (s, client) = server().await;
    let api = runtimes(&client, "kcp");
    let created = api
        .create(
            &PostParams::default(),
            &runtime(
                "rt",
                "kcp",
                json!({"spec": {"x": 1}, "status": {"state": "Ready"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status dropped on create"
    );

    // status write: spec and metadata changes are ignored, generation unchanged
    let after_status = api
        .patch_status(
            "rt",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"sneaky": "1"}},
                "spec": {"x": 99},
                "status": {"state": "Pending"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(after_status.data["status"]["state"], "Pending");
    assert_eq!(after_status.data["spec"]["x"], 1);
    assert!(after_status.metadata.labels.is_none());
    assert_eq!(after_status.metadata.generation, Some(1));

    // main write: status changes are ignored; label change does not bump generation
    let after_label = api
        .patch(
            "rt",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"l": "v"}}, "status": {"state": "Failed"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(after_label.data["status"]["state"], "Pending");
    assert_eq!(after_label.metadata.generation, Some(1));

    // spec change bumps generation
    let mut obj = after_label.clone();
    obj.data["spec"]["x"] = json!(2);
    obj.data["status"]["state"] = json!("Ready");
    let replaced = api
        .replace("rt", &PostParams::default(), &obj)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(replaced.data["status"]["state"], "Pending");

    // replace_status with a stale resourceVersion is 409
    let mut stale = after_label.clone();
    stale.data["status"]["state"] = json!("Ready");
    assert_eq!(
        code(
            api.replace_status("rt", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        409
    );
    let mut fresh = replaced.clone();
    fresh.data["status"]["state"] = json!("Ready");
    fresh.data["spec"]["x"] = json!(3);
    let st = api
        .replace_status("rt", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(st.data["status"]["state"], "Ready");
    assert_eq!(st.data["spec"]["x"], 2);
    assert_eq!(st.metadata.generation, Some(2));

    // GET status returns the object
    assert_eq!(
        api.get_status("rt").await.unwrap().data["status"]["state"],
        "Ready"
    );

    // a write that changes nothing does not bump the resourceVersion
    let rv = s.resource_version();
    let same = api
        .patch(
            "rt",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"x": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(same.resource_version(), st.resource_version());
    assert_eq!(s.resource_version(), rv);

    // status on a resource without the subresource is 404
    let secrets: Api<Secret> = Api::namespaced(client, "kcp");
    secrets
        .create(&PostParams::default(), &secret("s", &[]))
        .await
        .unwrap();
    assert_eq!(code(secrets.get_status("s").await.unwrap_err()), 404);
}

#[tokio::test]
async fn finalizers_keep_deleted_objects() {
    let (_s, client) = server().await;
    let api = runtimes(&client, "kcp");
    let mut rt = runtime("rt", "kcp", json!({"spec": {}}));
    rt.metadata.finalizers = Some(vec!["kim/deletion-hook".into()]);
    api.create(&PostParams::default(), &rt).await.unwrap();

    let deleted = api.delete("rt", &DeleteParams::default()).await.unwrap();
    let kept = deleted.left().expect("object returned");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(
        kept.metadata.generation,
        Some(2),
        "apiserver bumps generation on deletion"
    );
    let still = api.get("rt").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());

    // finalizers cannot be added while deleting
    let add = Patch::Merge(json!({"metadata": {"finalizers": ["kim/deletion-hook", "other"]}}));
    assert_eq!(
        code(
            api.patch("rt", &PatchParams::default(), &add)
                .await
                .unwrap_err()
        ),
        422
    );

    // removing the last finalizer removes the object
    let remove = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("rt", &PatchParams::default(), &remove)
        .await
        .unwrap();
    assert_eq!(code(api.get("rt").await.unwrap_err()), 404);
    assert_eq!(
        code(
            api.delete("rt", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        404
    );

    // without finalizers deletion is immediate; preconditions are checked
    let created = api
        .create(&PostParams::default(), &runtime("plain", "kcp", json!({})))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..Default::default()
    };
    assert_eq!(code(api.delete("plain", &wrong).await.unwrap_err()), 409);
    let right = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: created.metadata.resource_version.clone(),
            uid: created.metadata.uid.clone(),
        }),
        ..Default::default()
    };
    api.delete("plain", &right).await.unwrap();
    assert_eq!(code(api.get("plain").await.unwrap_err()), 404);
}

#[tokio::test]
async fn adminkubeconfig_points_at_another_testenv() {
    let garden = testenv::start(ServerConfig::default()).await.unwrap();
    let runtime_cluster = testenv::start(ServerConfig::default().user(
        "shoot-admin-token",
        UserInfo::new("shoot-admin", &["system:masters"]),
    ))
    .await
    .unwrap();
    let url = runtime_cluster.url().to_string();
    garden.set_admin_kubeconfig(move |req| {
        assert_eq!(req.expiration_seconds, 600);
        testenv::kubeconfig_yaml(&url, &req.name, Some("shoot-admin-token"))
    });
    let client = garden.client();
    let api = shoots(&client, "garden-kyma");
    let request = json!({
        "apiVersion": "authentication.gardener.cloud/v1alpha1",
        "kind": "AdminKubeconfigRequest",
        "spec": {"expirationSeconds": 600},
    });
    let err = api
        .create_subresource::<_, Value>("adminkubeconfig", "s1", &PostParams::default(), &request)
        .await
        .unwrap_err();
    assert_eq!(code(err), 404);

    api.create(
        &PostParams::default(),
        &shoot("s1", "garden-kyma", json!({"spec": {}})),
    )
    .await
    .unwrap();
    let resp: Value = api
        .create_subresource("adminkubeconfig", "s1", &PostParams::default(), &request)
        .await
        .unwrap();
    assert_eq!(resp["kind"], "AdminKubeconfigRequest");
    assert!(resp["status"]["expirationTimestamp"].is_string());
    let yaml = base64::engine::general_purpose::STANDARD
        .decode(resp["status"]["kubeconfig"].as_str().unwrap())
        .unwrap();
    let kubeconfig = Kubeconfig::from_yaml(std::str::from_utf8(&yaml).unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let shoot_client = Client::try_from(config).unwrap();
    let secrets: Api<Secret> = Api::namespaced(shoot_client, "default");
    secrets.list(&ListParams::default()).await.unwrap();
    let log = runtime_cluster.requests();
    assert_eq!(log.last().unwrap().user, "shoot-admin");
}

#[tokio::test]
async fn users_and_request_log() {
    let s = testenv::start(ServerConfig::default().user(
        "kim-token",
        UserInfo::new("system:serviceaccount:kcp-system:kim", &[]),
    ))
    .await
    .unwrap();
    let kim: Api<Secret> = Api::namespaced(s.client_as(Some("kim-token")), "kcp");
    let anon: Api<Secret> = Api::namespaced(s.client(), "kcp");
    let bad: Api<Secret> = Api::namespaced(s.client_as(Some("wrong")), "kcp");
    kim.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    anon.get("a").await.unwrap();
    assert_eq!(code(bad.get("a").await.unwrap_err()), 401);

    let log = s.requests();
    assert_eq!(log.len(), 3);
    assert_eq!(log[0].verb, Some(Verb::Create));
    assert_eq!(log[0].user, "system:serviceaccount:kcp-system:kim");
    assert_eq!(log[0].code, 201);
    assert_eq!(log[0].path, "/api/v1/namespaces/kcp/secrets");
    assert_eq!(log[1].user, "system:anonymous");
    assert_eq!(log[1].name.as_deref(), Some("a"));
    assert_eq!(log[2].code, 401);
    assert_eq!(s.count_requests(|r| r.is_write()), 1);
    s.clear_requests();
    assert!(s.requests().is_empty());
}

#[tokio::test]
async fn injected_faults_surface_as_api_errors() {
    let (s, client) = server().await;
    let api: Api<Secret> = Api::namespaced(client, "kcp");
    api.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();

    s.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Get)
            .times(1),
    );
    let err = status(api.get("a").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    api.get("a").await.unwrap();

    // 429 with kube's default retry off
    let mut cfg = s.kube_config(None);
    cfg.default_retry = false;
    let no_retry: Api<Secret> = Api::namespaced(Client::try_from(cfg).unwrap(), "kcp");
    s.add_fault(
        FaultRule::new(FaultAction::fail(429))
            .resource("secrets")
            .times(1),
    );
    let err = status(no_retry.get("a").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));

    // ... while kube's default client retries a 429 transparently
    s.clear_requests();
    s.add_fault(
        FaultRule::new(FaultAction::fail(429))
            .resource("secrets")
            .times(1),
    );
    api.get("a").await.unwrap();
    let codes: Vec<u16> = s.requests().iter().map(|r| r.code).collect();
    assert_eq!(codes, [429, 200]);

    // 409 on a status write only
    let rts = runtimes(&s.client(), "kcp");
    rts.create(&PostParams::default(), &runtime("rt", "kcp", json!({})))
        .await
        .unwrap();
    s.add_fault(
        FaultRule::new(FaultAction::fail(409))
            .resource("runtimes")
            .subresource("status")
            .times(1),
    );
    let st = Patch::Merge(json!({"status": {"state": "Pending"}}));
    rts.patch("rt", &PatchParams::default(), &st).await.unwrap();
    assert_eq!(
        code(
            rts.patch_status("rt", &PatchParams::default(), &st)
                .await
                .unwrap_err()
        ),
        409
    );
    rts.patch_status("rt", &PatchParams::default(), &st)
        .await
        .unwrap();

    // hang: the client times out
    s.add_fault(FaultRule::new(FaultAction::Hang).name("a").times(1));
    let hung = tokio::time::timeout(Duration::from_millis(300), api.get("a")).await;
    assert!(hung.is_err(), "request should hang");

    // delay: slow but successful
    s.add_fault(FaultRule::new(FaultAction::Delay(Duration::from_millis(50))).times(1));
    let t = std::time::Instant::now();
    api.get("a").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));

    // closure-driven faults
    s.set_fault_fn(|req| {
        (req.name.as_deref() == Some("a") && req.verb == Some(Verb::Delete))
            .then(|| FaultAction::fail(500))
    });
    assert_eq!(
        code(api.delete("a", &DeleteParams::default()).await.unwrap_err()),
        500
    );
    s.clear_faults();
    api.delete("a", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn fault_probability_is_seeded() {
    async fn failures(seed: u64) -> Vec<bool> {
        let s = testenv::start(ServerConfig::default().seed(seed))
            .await
            .unwrap();
        let api: Api<Secret> = Api::namespaced(s.client(), "kcp");
        s.add_fault(
            FaultRule::new(FaultAction::fail(500))
                .verb(Verb::List)
                .probability(0.3),
        );
        let mut out = Vec::new();
        for _ in 0..100 {
            out.push(api.list(&ListParams::default()).await.is_err());
        }
        out
    }
    let a = failures(42).await;
    let b = failures(42).await;
    assert_eq!(a, b, "same seed, same faults");
    let n = a.iter().filter(|x| **x).count();
    assert!((15..=45).contains(&n), "{n} failures out of 100 at p=0.3");
}

#[tokio::test]
async fn admission_hook_sees_every_write() {
    let s =
        testenv::start(ServerConfig::default().user("rogue-token", UserInfo::new("rogue", &[])))
            .await
            .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    s.set_admission(move |req| {
        seen2.lock().unwrap().push((
            req.verb,
            req.operation(),
            req.subresource.clone(),
            req.user.username.clone(),
            req.old_object.is_some(),
            req.object.is_some(),
        ));
        if let Some(obj) = &req.object
            && obj.pointer("/status/state") == Some(&json!("Bogus"))
        {
            return AdmissionDecision::Deny {
                code: 403,
                message: format!(
                    "admission webhook \"validate.kim\" denied the request: {} may not set Bogus",
                    req.user.username
                ),
            };
        }
        if req.verb == Verb::Create
            && let Some(mut obj) = req.object.clone()
        {
            obj["metadata"]["annotations"] = json!({"mutated": "yes"});
            return AdmissionDecision::Mutate(obj);
        }
        AdmissionDecision::Allow
    });
    let api = runtimes(&s.client(), "kcp");
    let rogue = runtimes(&s.client_as(Some("rogue-token")), "kcp");
    let created = api
        .create(
            &PostParams::default(),
            &runtime("rt", "kcp", json!({"spec": {}})),
        )
        .await
        .unwrap();
    assert_eq!(created.annotations()["mutated"], "yes");
    let bogus = Patch::Merge(json!({"status": {"state": "Bogus"}}));
    let err = status(
        rogue
            .patch_status("rt", &PatchParams::default(), &bogus)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert!(
        err.message.contains("rogue may not set Bogus"),
        "{}",
        err.message
    );
    let ok = Patch::Merge(json!({"status": {"state": "Pending"}}));
    api.patch_status("rt", &PatchParams::default(), &ok)
        .await
        .unwrap();
    api.delete("rt", &DeleteParams::default()).await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let status = Some("status".to_string());
    assert_eq!(
        seen,
        vec![
            (
                Verb::Create,
                "CREATE",
                None,
                "system:anonymous".to_string(),
                false,
                true
            ),
            (
                Verb::Patch,
                "UPDATE",
                status.clone(),
                "rogue".to_string(),
                true,
                true
            ),
            (
                Verb::Patch,
                "UPDATE",
                status,
                "system:anonymous".to_string(),
                true,
                true
            ),
            (
                Verb::Delete,
                "DELETE",
                None,
                "system:anonymous".to_string(),
                true,
                false
            ),
        ]
    );
    assert_eq!(s.get(&Gvr::runtimes(), Some("kcp"), "rt"), None, "deleted");
}

#[tokio::test]
async fn direct_store_access() {
    let (s, client) = server().await;
    let obj = s
        .put(
            &Gvr::runtimes(),
            json!({"metadata": {"name": "rt", "namespace": "kcp"}, "spec": {"a": 1}, "status": {"state": "Ready"}}),
        )
        .unwrap();
    assert_eq!(obj["metadata"]["generation"], 1);
    assert_eq!(obj["status"]["state"], "Ready", "direct writes keep status");
    let api = runtimes(&client, "kcp");
    assert_eq!(
        api.get("rt").await.unwrap().data["status"]["state"],
        "Ready"
    );
    let changed = s
        .modify(&Gvr::runtimes(), Some("kcp"), "rt", |o| {
            o["spec"]["a"] = json!(2)
        })
        .unwrap();
    assert_eq!(changed["metadata"]["generation"], 2);
    assert_eq!(s.list(&Gvr::runtimes(), None).len(), 1);
    s.delete(&Gvr::runtimes(), Some("kcp"), "rt").unwrap();
    assert!(s.get(&Gvr::runtimes(), Some("kcp"), "rt").is_none());
    assert!(s.put(&Gvr::new("x", "v1", "nothing"), json!({})).is_err());
}

/// `limit`/`continue` as kube-apiserver pages lists: key order, an opaque token while more
/// remain, `remainingItemCount` (not with selectors), one resourceVersion and one snapshot
/// across the pages of a list, `410 Expired` once the history no longer reaches back to it.
#[tokio::test]
async fn lists_are_paged_with_limit_and_continue() {
    let (s, client) = server().await;
    let gvr = Gvr::new("", "v1", "secrets");
    let names: Vec<String> = (0..1200).map(|i| format!("s-{i:04}")).collect();
    for (i, name) in names.iter().enumerate() {
        let tier = if i % 3 == 0 { "one" } else { "two" };
        let mut obj = serde_json::to_value(secret(name, &[("tier", tier)])).unwrap();
        obj["metadata"]["namespace"] = json!("kcp");
        s.put(&gvr, obj).unwrap();
    }
    // Another namespace, for the cluster-wide list.
    for name in ["a", "b"] {
        let mut obj = serde_json::to_value(secret(name, &[])).unwrap();
        obj["metadata"]["namespace"] = json!("other");
        s.put(&gvr, obj).unwrap();
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), "kcp");

    let first = api.list(&ListParams::default().limit(500)).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.items.len(), 500);
    assert_eq!(first.metadata.remaining_item_count, Some(700));
    let token = first.metadata.continue_.clone().unwrap();
    // Changes between the pages are not seen by the rest of this list: an object of the second
    // page deleted, one of the third changed, a new one at the end.
    api.delete("s-0600", &DeleteParams::default())
        .await
        .unwrap();
    let mut changed = api.get("s-1100").await.unwrap();
    changed.labels_mut().insert("tier".into(), "three".into());
    api.replace("s-1100", &PostParams::default(), &changed)
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("s-9999", &[]))
        .await
        .unwrap();

    let second = api
        .list(&ListParams::default().limit(500).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 500);
    assert_eq!(second.metadata.remaining_item_count, Some(200));
    assert_eq!(second.metadata.resource_version.as_deref(), Some(&*rv));
    let third = api
        .list(
            &ListParams::default()
                .limit(500)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(third.items.len(), 200);
    assert_eq!(third.metadata.resource_version.as_deref(), Some(&*rv));
    assert_eq!(third.metadata.continue_, None, "the last page");
    assert_eq!(third.metadata.remaining_item_count, None);
    let got: Vec<String> = [&first, &second, &third]
        .iter()
        .flat_map(|l| l.items.iter().map(|s| s.name_any()))
        .collect();
    assert_eq!(
        got, names,
        "every object once, in order, as of the first page"
    );
    let s1100 = third
        .items
        .iter()
        .find(|s| s.name_any() == "s-1100")
        .unwrap();
    assert_eq!(s1100.labels()["tier"], "two", "as it was at the first page");

    // A new list sees the changes.
    let now = api.list(&ListParams::default().limit(2000)).await.unwrap();
    assert_eq!(now.items.len(), 1200);
    assert!(now.items.iter().all(|s| s.name_any() != "s-0600"));
    assert_ne!(now.metadata.resource_version.as_deref(), Some(&*rv));
    assert_eq!(now.metadata.continue_, None);

    // With a selector, `limit` counts matching objects; no remainingItemCount.
    let sel = ListParams::default().labels("tier=one").limit(150);
    let one = api.list(&sel).await.unwrap();
    assert_eq!(one.items.len(), 150);
    assert_eq!(one.metadata.remaining_item_count, None);
    let token = one.metadata.continue_.clone().unwrap();
    let rest = api
        .list(&sel.clone().limit(1000).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 400 - 150 - 1, "s-0600 was deleted");
    assert_eq!(rest.metadata.continue_, None);

    // Cluster-wide, across namespaces.
    let all: Api<Secret> = Api::all(client.clone());
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = all.list(&lp).await.unwrap();
        seen.extend(
            page.items
                .iter()
                .map(|s| format!("{}/{}", s.namespace().unwrap(), s.name_any())),
        );
        match page.metadata.continue_ {
            Some(t) => lp = lp.continue_token(&t),
            None => break,
        }
    }
    assert_eq!(seen.len(), 1200 + 2);
    assert_eq!(seen[..2], ["kcp/s-0000", "kcp/s-0001"]);
    assert_eq!(seen[seen.len() - 2..], ["other/a", "other/b"]);

    // kube-runtime's watcher pages its initial list (page_size 500) and sees everything.
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    s.clear_requests();
    let mut stream = watcher(api.clone(), watcher::Config::default().page_size(500)).boxed();
    let mut count = 0;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            watcher::Event::InitApply(_) => count += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(count, 1200);
    let lists = s.count_requests(|r| r.verb == Some(Verb::List));
    assert_eq!(lists, 3, "1 200 objects in pages of 500");

    // `continue` with `resourceVersion` is refused; a garbled token is a bad request.
    let token = api
        .list(&ListParams::default().limit(10))
        .await
        .unwrap()
        .metadata
        .continue_
        .unwrap();
    // (kube's ListParams never sends both; ask directly.)
    let both = axum::http::Request::get(format!(
        "/api/v1/namespaces/kcp/secrets?limit=10&continue={token}&resourceVersion=5"
    ))
    .body(Vec::new())
    .unwrap();
    assert_eq!(code(client.request_text(both).await.unwrap_err()), 400);
    let garbled = ListParams::default()
        .continue_token("not-a-token")
        .limit(10);
    assert_eq!(code(api.list(&garbled).await.unwrap_err()), 400);

    // Once the history no longer reaches back to the list's resourceVersion: 410 Expired.
    api.create(&PostParams::default(), &secret("s-9998", &[]))
        .await
        .unwrap();
    s.compact_history();
    let e = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap_err();
    let st = status(e);
    assert_eq!((st.code, st.reason.as_str()), (410, "Expired"));
}
