//! A real Gardener API for tests: gardener-apiserver (built by
//! `scripts/install-control-plane.sh`) aggregated behind the control plane's kube-apiserver, as
//! Gardener's own envtest (`test/envtest` of `github.com/gardener/gardener`) runs it, and the
//! objects a Shoot needs to be admitted ([`install_fixtures`]).
//!
//! [`crate::controlplane::ControlPlane::start_with`] with `Options { gardener: true, .. }`
//! starts it under the control plane's supervisor (SIGKILL and start again:
//! `kill_gardener` / `start_gardener`) and registers it: a Service
//! `kube-system/gardener-apiserver` of type ExternalName pointing at `127.0.0.1` and one
//! `APIService` per group version ([`GROUP_VERSIONS`]) with the control plane's CA as
//! `caBundle`; it returns once all are `Available` and every group version lists. Only the
//! gardenlet, the controller manager and the cloud are missing: nothing schedules, reconciles
//! or deletes Shoots.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), String> {
//! use testenv::controlplane::ControlPlane;
//! let cp = ControlPlane::shared_with_gardener();
//! let client = cp.admin().await;
//! testenv::garden::install_fixtures(&client, testenv::garden::DEFAULT_PROJECT).await?;
//! // Shoots in namespace garden-kyma-dev, on CloudProfile aws, with CredentialsBinding
//! // hyperscaler-aws: see testenv/fixtures/garden/.
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::discovery::Discovery;
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};

use crate::controlplane::{ControlPlane, Installed, apply_served};

/// The group versions gardener-apiserver v1.140 serves (Gardener's
/// `pkg/apiserver.AllGardenerAPIGroupVersions`), one `APIService` each.
pub(crate) const GROUP_VERSIONS: [(&str, &str); 6] = [
    ("core.gardener.cloud", "v1"),
    ("core.gardener.cloud", "v1beta1"),
    ("settings.gardener.cloud", "v1alpha1"),
    ("seedmanagement.gardener.cloud", "v1alpha1"),
    ("operations.gardener.cloud", "v1alpha1"),
    ("security.gardener.cloud", "v1alpha1"),
];

/// Namespace and name of the Service the `APIService`s name.
const SERVICE: (&str, &str) = ("kube-system", "gardener-apiserver");

/// The project of kim's example configuration (`docs/config.example.yaml`): its Shoots live
/// in namespace `garden-kyma-dev`.
pub const DEFAULT_PROJECT: &str = "kyma-dev";

/// Field manager of everything applied here.
const MANAGER: &str = "testenv";

/// The placeholder fixture files use for the project's namespace (`garden-<project>`), in
/// string values only (e.g. a CredentialsBinding's `credentialsRef.namespace`).
const NAMESPACE_PLACEHOLDER: &str = "${namespace}";

/// Registers gardener-apiserver with kube-apiserver and waits for it, within `limit`: applies
/// the Service and the `APIService`s (server-side apply, idempotent, so also after a
/// restart), waits until every `APIService` is `Available` (a watch), then until each group
/// version lists a resource through kube-apiserver (polled every 100 ms: after a restart an
/// `APIService` may still say `Available` from before).
///
/// # Errors
/// kube-apiserver refuses an object, or the APIs are not available and listable within
/// `limit` (the message names what is missing and the last error).
pub(crate) async fn register(cp: &ControlPlane, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let port: u16 = cp
        .gardener_url()
        .and_then(|u| u.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .ok_or("no gardener-apiserver URL")?;
    // Without kube's own retries of 503, which would outlast `limit`.
    let client = cp.admin_without_retries().await;
    let apply = PatchParams::apply(MANAGER).force();

    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), SERVICE.0);
    // ExternalName: kube-apiserver dials `<externalName>:<APIService port>` itself (an IP is
    // accepted as the name; gardener-apiserver listens on 127.0.0.1 only), as Gardener's
    // envtest does with `localhost`; a Service with a cluster IP would need
    // `--enable-aggregator-routing` and Endpoints.
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE.1, "namespace": SERVICE.0},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
    });
    services
        .patch(SERVICE.1, &apply, &Patch::Apply(&service))
        .await
        .map_err(|e| format!("applying Service {}/{}: {e}", SERVICE.0, SERVICE.1))?;

    let api_services: Api<
        k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
    > = Api::all(client.clone());
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(cp.ca_pem());
    for (group, version) in GROUP_VERSIONS {
        let name = format!("{version}.{group}");
        let doc = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "version": version,
                "service": {"namespace": SERVICE.0, "name": SERVICE.1, "port": port},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        });
        api_services
            .patch(&name, &apply, &Patch::Apply(&doc))
            .await
            .map_err(|e| format!("applying APIService {name}: {e}"))?;
    }

    for (group, version) in GROUP_VERSIONS {
        let name = format!("{version}.{group}");
        let available = await_condition(api_services.clone(), &name, |o: Option<&_>| {
            let o: Option<
                &k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
            > = o;
            o.and_then(|s| s.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
                })
        });
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, available).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("waiting for APIService {name}: {e}")),
            Err(_) => {
                let status = api_services
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.status)
                    .and_then(|s| s.conditions)
                    .map(|c| {
                        c.iter()
                            .map(|c| {
                                format!(
                                    "{}={} ({}: {})",
                                    c.type_,
                                    c.status,
                                    c.reason.clone().unwrap_or_default(),
                                    c.message.clone().unwrap_or_default()
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default();
                return Err(format!(
                    "APIService {name} not Available within {} s: {status}",
                    limit.as_secs()
                ));
            }
        }
    }

    for (group, version) in GROUP_VERSIONS {
        loop {
            let Err(last) = list_one(&client, group, version).await else {
                break;
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{group}/{version} does not list through kube-apiserver within {} s: {last}",
                    limit.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Lists (limit 1, all namespaces) the first listable resource of `group/version` that
/// discovery names, through kube-apiserver.
async fn list_one(client: &kube::Client, group: &str, version: &str) -> Result<(), String> {
    let resources = client
        .list_api_group_resources(&format!("{group}/{version}"))
        .await
        .map_err(|e| format!("discovery of {group}/{version}: {e}"))?;
    let resource = resources
        .resources
        .iter()
        .find(|r| !r.name.contains('/') && r.verbs.iter().any(|v| v == "list"))
        .ok_or_else(|| format!("{group}/{version} names no listable resource"))?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, &resource.kind),
        &resource.name,
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|e| format!("listing {}: {e}", resource.name))
}

/// The documents of every `*.yaml` file of `dir`, files in name order.
///
/// # Errors
/// A file cannot be read or is not YAML (the file named).
fn fixture_documents(dir: &Path) -> Result<Vec<Value>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        let parsed: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        docs.extend(parsed.into_iter().filter(|d| !d.is_null()));
    }
    Ok(docs)
}

/// Replaces every string value equal to [`NAMESPACE_PLACEHOLDER`] with `namespace`.
fn fill_namespace(v: &mut Value, namespace: &str) {
    match v {
        Value::String(s) if s == NAMESPACE_PLACEHOLDER => *s = namespace.to_string(),
        Value::Array(a) => a.iter_mut().for_each(|v| fill_namespace(v, namespace)),
        Value::Object(o) => o.values_mut().for_each(|v| fill_namespace(v, namespace)),
        _ => {}
    }
}

/// Installs what a Shoot of project `project` needs to be admitted by gardener-apiserver:
/// namespace `garden-<project>` (labelled as Gardener's project controller would) and the
/// `Project`, then every document of `testenv/fixtures/garden` (CloudProfiles, ControllerRegistrations,
/// ExposureClasses cluster-wide; Secrets, ConfigMaps, SecretBindings and CredentialsBindings
/// in `garden-<project>`, [`NAMESPACE_PLACEHOLDER`] filled in), with server-side apply, so
/// idempotent. What the files hold and why: `testenv/fixtures/garden/README.md`.
///
/// # Errors
/// A fixture file is unreadable, names a kind the server does not serve, or the server
/// refuses an object (Gardener's message, the object named).
pub async fn install_fixtures(client: &kube::Client, project: &str) -> Result<Installed, String> {
    let namespace = format!("garden-{project}");
    let apply = PatchParams::apply(MANAGER).force();
    let mut installed = Installed::default();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                "gardener.cloud/role": "project",
                "project.gardener.cloud/name": project,
            },
        },
    });
    namespaces
        .patch(&namespace, &apply, &Patch::Apply(&ns))
        .await
        .map_err(|e| format!("applying Namespace {namespace}: {e}"))?;
    installed.applied.push(format!("Namespace {namespace}"));

    let mut docs = vec![json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Project",
        "metadata": {"name": project},
        "spec": {"namespace": namespace},
    })];
    docs.extend(fixture_documents(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/garden"),
    )?);
    // Credentials before what names them.
    let rank = |d: &Value| match d["kind"].as_str() {
        Some("Project") => 0,
        Some("Secret" | "ConfigMap") => 1,
        _ => 2,
    };
    docs.sort_by_key(rank);

    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("discovery: {e}"))?;
    for mut d in docs {
        fill_namespace(&mut d, &namespace);
        let (label, applied) = apply_served(client, &discovery, &mut d, Some(&namespace)).await?;
        if !applied {
            return Err(format!(
                "{label}: {} is not served",
                d["apiVersion"].as_str().unwrap_or_default()
            ));
        }
        installed.applied.push(label);
    }
    Ok(installed)
}

/// Creates `object` in `namespace` (`None`: cluster-scoped) as a resource `ar`, with
/// server-side dry-run when `dry_run`, and returns the object the server answered with and the
/// text of each `Warning` header of the answer (kube-apiserver forwards those of the
/// aggregated server: Gardener warns of deprecated fields there). kube's `Api` drops these
/// headers, so the request goes through [`kube::Client::send`].
///
/// # Errors
/// As [`Api::create`]: a refusal is [`kube::Error::Api`] with the server's `Status` (one
/// made of the HTTP status when the body is none).
pub async fn create_with_warnings(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    object: &Value,
    dry_run: bool,
) -> Result<(DynamicObject, Vec<String>), kube::Error> {
    use kube::Resource;
    let path = DynamicObject::url_path(ar, namespace);
    let params = kube::api::PostParams {
        dry_run,
        ..Default::default()
    };
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(path)
        .create(&params, body)
        .map_err(kube::Error::BuildRequest)?;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let warnings = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| warning_text(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let bytes = response.into_body().collect_bytes().await?;
    if status.is_success() {
        let object = serde_json::from_slice(&bytes).map_err(kube::Error::SerdeError)?;
        return Ok((object, warnings));
    }
    let refusal = serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
        kube::core::Status::failure(&String::from_utf8_lossy(&bytes), "").with_code(status.as_u16())
    });
    Err(kube::Error::Api(refusal.boxed()))
}

/// The text of a `Warning` header value (RFC 7234: `299 - "text"`, as Kubernetes sends it),
/// or the value itself when it has another form.
fn warning_text(value: &str) -> String {
    value
        .strip_prefix("299 - \"")
        .and_then(|rest| rest.strip_suffix('"'))
        .map(|text| text.replace("\\\"", "\"").replace("\\\\", "\\"))
        .unwrap_or_else(|| value.to_string())
}
