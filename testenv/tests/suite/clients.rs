//! What generic clients (kubectl, client-go) read and send beyond what kube-rs needs, over
//! real HTTP: aggregated discovery, OpenAPI v3, `Table` answers with a CRD's printer columns
//! (get, list, watch), the core/v1 view of `events.k8s.io/v1` Events, YAML apply bodies, and
//! the HTTPS endpoint that authenticates tokens.

use std::time::Duration;

use rustls_pki_types::pem::PemObject;

use crate::support::{code, runtime, runtimes};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::{Gvr, ResourceInfo, ServerConfig, UserInfo, Verb};

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const KUBECTL_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// The Runtime CRD of kim's manifests.
fn crd() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("crd.yaml")).expect("yaml")
}

async fn server() -> testenv::ServerHandle {
    let mut config = ServerConfig::default();
    for info in ResourceInfo::from_crd(&crd()).expect("served CRD") {
        config = config.resource(info);
    }
    testenv::start(config).await.expect("server")
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn get(server: &testenv::ServerHandle, path: &str, accept: &str) -> (u16, String, Value) {
    let resp = http()
        .get(format!("{}{path}", server.url()))
        .header("Accept", accept)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, ctype, body)
}

#[test]
fn a_crd_gives_names_scope_subresource_columns_and_schema() {
    let infos = ResourceInfo::from_crd(&crd()).unwrap();
    assert_eq!(infos.len(), 1);
    let r = &infos[0];
    assert_eq!(r.gvr(), Gvr::runtimes());
    assert_eq!(
        (r.kind.as_str(), r.singular.as_str()),
        ("Runtime", "runtime")
    );
    assert_eq!(r.short_names, ["rt"]);
    assert!(r.namespaced && r.status_subresource);
    let cols: Vec<(&str, &str)> = r
        .printer_columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            ("STATE", "string"),
            ("SHOOT-NAME", "string"),
            ("PROVIDER", "string"),
            ("REGION", "string"),
            ("AGE", "date")
        ]
    );
    assert!(r.schema.as_ref().unwrap()["properties"]["status"].is_object());

    for (bad, why) in [
        (
            json!({"kind": "ConfigMap"}),
            "not a CustomResourceDefinition",
        ),
        (
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"plural": "xs", "kind": "X"}, "scope": "Galaxy", "versions": []}}),
            "/spec/scope \"Galaxy\"",
        ),
        (
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"plural": "xs"}, "scope": "Cluster", "versions": []}}),
            "/spec/names/kind is missing",
        ),
        (
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"plural": "xs", "kind": "X"}, "scope": "Cluster", "versions": [{"name": "v1", "served": false}]}}),
            "no served version",
        ),
        (
            json!({"kind": "CustomResourceDefinition", "spec": {"group": "g", "names": {"plural": "xs", "kind": "X"}, "scope": "Cluster",
                   "versions": [{"name": "v1", "served": true, "additionalPrinterColumns": [{"name": "A"}]}]}}),
            "/type is missing or not a string (versions[0].additionalPrinterColumns[0])",
        ),
    ] {
        let e = ResourceInfo::from_crd(&bad).unwrap_err();
        assert!(e.contains(why), "{e:?} should say {why:?}");
    }
}

#[tokio::test]
async fn aggregated_discovery_when_asked_for_legacy_otherwise() {
    let s = server().await;
    let (code, ctype, body) = get(&s, "/apis", KUBECTL_DISCOVERY).await;
    assert_eq!((code, ctype.as_str()), (200, V2));
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    let group = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "infrastructuremanager.kyma-project.io")
        .expect("the CRD's group");
    let rt = &group["versions"][0]["resources"][0];
    assert_eq!(group["versions"][0]["version"], "v1");
    assert_eq!(rt["resource"], "runtimes");
    assert_eq!(rt["scope"], "Namespaced");
    assert_eq!(rt["singularResource"], "runtime");
    assert_eq!(rt["shortNames"], json!(["rt"]));
    assert_eq!(rt["responseKind"]["kind"], "Runtime");
    assert_eq!(rt["subresources"][0]["subresource"], "status");

    let (_, ctype, core) = get(&s, "/api", KUBECTL_DISCOVERY).await;
    assert_eq!(ctype, V2);
    assert_eq!(core["items"][0]["metadata"]["name"], "");
    let names: Vec<&str> = core["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["resource"].as_str())
        .collect();
    assert!(
        names.contains(&"events") && names.contains(&"secrets"),
        "{names:?}"
    );

    // Without the v2 media type: the legacy documents.
    let (_, ctype, legacy) = get(&s, "/apis", "application/json").await;
    assert_eq!(
        (ctype.as_str(), legacy["kind"].as_str()),
        ("application/json", Some("APIGroupList"))
    );
    let (_, _, list) = get(
        &s,
        "/apis/infrastructuremanager.kyma-project.io/v1",
        "application/json",
    )
    .await;
    assert_eq!(list["resources"][0]["shortNames"], json!(["rt"]));
    assert_eq!(list["resources"][0]["singularName"], "runtime");
    assert_eq!(list["resources"][1]["name"], "runtimes/status");
}

#[tokio::test]
async fn openapi_v3_serves_the_crd_schema_by_group_version() {
    let s = server().await;
    let (code, _, index) = get(&s, "/openapi/v3", "application/json").await;
    assert_eq!(code, 200);
    let url = index["paths"]["apis/infrastructuremanager.kyma-project.io/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the CRD's group-version is listed");
    assert!(url.starts_with("/openapi/v3/apis/infrastructuremanager.kyma-project.io/v1?hash="));
    let (code, _, doc) = get(&s, url, "application/json").await;
    assert_eq!(code, 200);
    let schema = &doc["components"]["schemas"]["io.kyma-project.infrastructuremanager.v1.Runtime"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"}])
    );
    let crd = crd();
    assert_eq!(
        schema["properties"],
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    );
    // The parameters kubectl checks before it sends them.
    let patch = &doc["paths"]["/apis/infrastructuremanager.kyma-project.io/v1/namespaces/{namespace}/runtimes/{name}"]
        ["patch"];
    let params: Vec<&str> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(params.contains(&"fieldValidation") && params.contains(&"dryRun"));
    // Built-in resources get a schema that accepts any object.
    let (code, _, core) = get(&s, "/openapi/v3/api/v1", "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(
        core["components"]["schemas"]["io.k8s.api.core.v1.Secret"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let (code, _, _) = get(
        &s,
        "/openapi/v3/apis/nothing.example/v1",
        "application/json",
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn tables_carry_the_printer_columns() {
    let s = server().await;
    let api = runtimes(&s.client(), "kcp-system");
    let mut rt = runtime(
        "r1",
        "kcp-system",
        json!({"spec": {"shoot": {"provider": {"type": "aws"}, "region": "eu-central-1"}}}),
    );
    rt.metadata.labels =
        Some([("kyma-project.io/shoot-name".to_string(), "s1".to_string())].into());
    api.create(&PostParams::default(), &rt).await.unwrap();
    s.modify(&Gvr::runtimes(), Some("kcp-system"), "r1", |o| {
        o["status"] = json!({"state": "Ready"})
    })
    .unwrap();

    let path = "/apis/infrastructuremanager.kyma-project.io/v1/namespaces/kcp-system/runtimes";
    let (code, ctype, table) = get(&s, path, KUBECTL_TABLE).await;
    assert_eq!(code, 200);
    assert_eq!(ctype, "application/json;as=Table;g=meta.k8s.io;v=v1");
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["Name", "STATE", "SHOOT-NAME", "PROVIDER", "REGION", "AGE"]
    );
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        cells[..5],
        [
            json!("r1"),
            json!("Ready"),
            json!("s1"),
            json!("aws"),
            json!("eu-central-1")
        ]
    );
    assert!(cells[5].as_str().unwrap().ends_with('s'), "{cells:?}");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        table["metadata"]["resourceVersion"],
        s.resource_version().to_string()
    );

    let (_, _, one) = get(
        &s,
        &format!("{path}/r1?includeObject=Object"),
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(one["rows"][0]["object"]["kind"], "Runtime");
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    let (code, _, bad) = get(&s, &format!("{path}?includeObject=All"), KUBECTL_TABLE).await;
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));

    // A missing value is null (kubectl prints <none>); a resource without columns: Name, Age.
    let (_, _, secrets) = get(&s, "/api/v1/namespaces/kcp-system/secrets", KUBECTL_TABLE).await;
    let columns: Vec<&str> = secrets["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Age"]);
    api.create(
        &PostParams::default(),
        &runtime("r2", "kcp-system", json!({"spec": {}})),
    )
    .await
    .unwrap();
    let (_, _, table) = get(&s, &format!("{path}/r2"), KUBECTL_TABLE).await;
    assert_eq!(table["rows"][0]["cells"][1], Value::Null);

    // Watch: every event is a one-row Table; only the first has the column definitions.
    let resp = http()
        .get(format!(
            "{}{path}?watch=true&resourceVersion={}",
            s.url(),
            s.resource_version()
        ))
        .header("Accept", KUBECTL_TABLE)
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    for state in ["Pending", "Failed"] {
        s.modify(&Gvr::runtimes(), Some("kcp-system"), "r1", |o| {
            o["status"]["state"] = json!(state)
        })
        .unwrap();
    }
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while events.len() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("watch event in time")
            .expect("stream open")
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            events.push(serde_json::from_slice::<Value>(&line).unwrap());
        }
    }
    assert_eq!(events[0]["type"], "MODIFIED");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    assert_eq!(events[0]["object"]["rows"][0]["cells"][1], "Pending");
    assert!(events[1]["object"].get("columnDefinitions").is_none());
    assert_eq!(events[1]["object"]["rows"][0]["cells"][1], "Failed");
}

fn events_api(client: &kube::Client, group: &str) -> Api<DynamicObject> {
    let gvk = if group.is_empty() {
        GroupVersionKind::gvk("", "v1", "Event")
    } else {
        GroupVersionKind::gvk(group, "v1", "Event")
    };
    Api::namespaced_with(
        client.clone(),
        "kcp-system",
        &ApiResource::from_gvk_with_plural(&gvk, "events"),
    )
}

#[tokio::test]
async fn core_events_are_a_view_of_events_k8s_io() {
    let s = server().await;
    let client = s.client();
    let new_api = events_api(&client, "events.k8s.io");
    let core_api = events_api(&client, "");
    let mut watch = core_api
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let ev: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "kcp-system"},
        "eventTime": "2026-11-30T10:00:00.000000Z", "reportingController": "kim-controller",
        "reportingInstance": "kim-1", "action": "Provision", "reason": "ShootCreated",
        "type": "Normal", "note": "created", "deprecatedCount": 2,
        "regarding": {"kind": "Runtime", "name": "r1", "namespace": "kcp-system"},
    }))
    .unwrap();
    new_api.create(&PostParams::default(), &ev).await.unwrap();

    let listed = core_api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let core = &listed.items[0].data;
    assert_eq!(core["message"], "created");
    assert_eq!(core["involvedObject"]["name"], "r1");
    assert_eq!(core["reportingComponent"], "kim-controller");
    assert_eq!(core["count"], 2);
    assert!(core.get("note").is_none() && core.get("regarding").is_none());
    // Field selectors see the view's fields.
    let sel = ListParams::default().fields("involvedObject.kind=Runtime,involvedObject.name=r1");
    assert_eq!(core_api.list(&sel).await.unwrap().items.len(), 1);
    let sel = ListParams::default().fields("involvedObject.name=r2");
    assert_eq!(core_api.list(&sel).await.unwrap().items.len(), 0);
    match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Added(o)))) => assert_eq!(o.data["message"], "created"),
        other => panic!("expected ADDED through the view, got {other:?}"),
    }

    // Written through the view, stored (and read back) as events.k8s.io.
    let ev2: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e2", "namespace": "kcp-system"},
        "message": "by core", "reason": "R", "type": "Warning",
        "involvedObject": {"kind": "Runtime", "name": "r2"},
    }))
    .unwrap();
    let created = core_api.create(&PostParams::default(), &ev2).await.unwrap();
    assert_eq!(created.data["message"], "by core");
    let stored = new_api.get("e2").await.unwrap();
    assert_eq!(stored.data["note"], "by core");
    assert_eq!(stored.data["regarding"]["name"], "r2");
    assert_eq!(
        s.get(&Gvr::new("", "v1", "events"), Some("kcp-system"), "e2")
            .unwrap()["message"],
        "by core"
    );
    // A merge patch through the view changes the stored field.
    core_api
        .patch(
            "e2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"message": "patched"})),
        )
        .await
        .unwrap();
    assert_eq!(new_api.get("e2").await.unwrap().data["note"], "patched");
    assert_eq!(code(core_api.get("e3").await.unwrap_err()), 404);
}

#[tokio::test]
async fn apply_accepts_yaml_bodies() {
    let s = server().await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\n  namespace: kcp-system\ndata:\n  a: \"1\"\n";
    let url = format!(
        "{}/api/v1/namespaces/kcp-system/configmaps/c1?fieldManager=me",
        s.url()
    );
    let resp = http()
        .patch(&url)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(yaml)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let stored = s
        .get(&Gvr::new("", "v1", "configmaps"), Some("kcp-system"), "c1")
        .unwrap();
    assert_eq!(stored["data"]["a"], "1");
    assert_eq!(stored["metadata"]["managedFields"][0]["manager"], "me");
    let resp = http()
        .patch(&url)
        .header("Content-Type", "application/apply-patch+yaml")
        .body("data: [unclosed")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("not valid YAML"),
        "{body}"
    );
}

#[tokio::test]
async fn the_https_endpoint_authenticates_tokens() {
    let s = testenv::start(ServerConfig::default().user("t1", UserInfo::new("alice", &["team"])))
        .await
        .unwrap();
    let https = s.serve_https().await.unwrap();
    assert!(https.url.starts_with("https://127.0.0.1:"));
    // A kube client from the generated kubeconfig: verifies the CA, sends the token.
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&s.kubeconfig_yaml_for(&https, Some("t1"))).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, "kcp-system");
    api.list(&ListParams::default()).await.unwrap();
    let users: Vec<String> = s
        .requests()
        .iter()
        .filter(|r| r.verb == Some(Verb::List))
        .map(|r| r.user.clone())
        .collect();
    assert_eq!(users, ["alice"]);
    // Without the CA, the certificate is not trusted; with it, it is.
    let client = |ca: Option<&str>| {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = ca {
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        reqwest::Client::builder()
            .no_proxy()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap()
    };
    let url = format!("{}/version", https.url);
    assert!(client(None).get(&url).send().await.is_err());
    let v: Value = client(Some(&https.ca_pem))
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["minor"], "35");
}
