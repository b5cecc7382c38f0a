//! What clients read before they touch a resource: `/version`, the legacy discovery documents
//! (`/api`, `/apis`, `/api/v1`, `/apis/<group>`, `/apis/<group>/<version>`), aggregated
//! discovery (`apidiscovery.k8s.io/v2`, asked for by kubectl and client-go through the
//! `Accept` header of `/api` and `/apis`) and OpenAPI v3 (`/openapi/v3` and one document per
//! group-version, for `kubectl explain`).

use serde_json::{Map, Value, json};

use crate::resource::ResourceInfo;

/// The media type of an aggregated discovery answer (`Content-Type`), as kube-apiserver sends
/// it.
pub(crate) const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The Kubernetes version the server reports (`/version`, OpenAPI `info.version`).
pub(crate) const GIT_VERSION: &str = "v1.35.0-testenv";

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "35", "gitVersion": GIT_VERSION,
        "platform": "linux/amd64", "goVersion": "testenv", "compiler": "testenv",
    })
}

/// Whether an `Accept` header asks for aggregated discovery v2 (clients list it first and the
/// legacy document as fallback; an answer's `Content-Type` tells which one they got).
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

fn verbs() -> Value {
    json!([
        "create", "delete", "get", "list", "patch", "update", "watch"
    ])
}

/// `APIResourceList` of one group-version (`None`: nothing served there).
pub(crate) fn resource_list(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let matching: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if matching.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in matching {
        let mut entry = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs(),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        list.push(entry);
        if r.status_subresource {
            list.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version(group, version), "resources": list,
    }))
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The versions served in `group`, in registration order (the first is preferred).
fn versions<'a>(resources: &'a [ResourceInfo], group: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for r in resources.iter().filter(|r| r.group == group) {
        if !out.contains(&r.version.as_str()) {
            out.push(&r.version);
        }
    }
    out
}

/// `APIGroup` document of a group (`None`: not served).
pub(crate) fn group(resources: &[ResourceInfo], group: &str) -> Option<Value> {
    let versions = versions(resources, group);
    let first = *versions.first()?;
    Some(json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect::<Vec<_>>(),
        "preferredVersion": {"groupVersion": format!("{group}/{first}"), "version": first},
    }))
}

fn groups(resources: &[ResourceInfo]) -> Vec<&str> {
    let mut out: Vec<&str> = resources
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| r.group.as_str())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `/apis` (legacy): `APIGroupList`.
pub(crate) fn group_list(resources: &[ResourceInfo]) -> Value {
    let docs: Vec<Value> = groups(resources)
        .iter()
        .filter_map(|g| group(resources, g))
        .map(|mut d| {
            if let Some(m) = d.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            d
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": docs})
}

/// `/api` (legacy): `APIVersions`.
pub(crate) fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"]})
}

fn aggregated_group(resources: &[ResourceInfo], group: &str) -> Value {
    let versions: Vec<Value> = versions(resources, group)
        .into_iter()
        .map(|v| {
            let list: Vec<Value> = resources
                .iter()
                .filter(|r| r.group == group && r.version == v)
                .map(|r| {
                    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
                    let mut entry = json!({
                        "resource": r.plural,
                        "responseKind": kind,
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": verbs(),
                    });
                    if !r.short_names.is_empty() {
                        entry["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        entry["categories"] = json!(r.categories);
                    }
                    if r.status_subresource {
                        entry["subresources"] = json!([{
                            "subresource": "status", "responseKind": kind,
                            "verbs": ["get", "patch", "update"],
                        }]);
                    }
                    entry
                })
                .collect();
            json!({"version": v, "resources": list, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
}

/// Aggregated discovery (`APIGroupDiscoveryList` v2) of the core group (`/api`, `core`) or of
/// every named group (`/apis`).
pub(crate) fn aggregated(resources: &[ResourceInfo], core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(resources, "")]
    } else {
        groups(resources)
            .into_iter()
            .map(|g| aggregated_group(resources, g))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {}, "items": items,
    })
}

/// The OpenAPI path of a group-version, as kube-apiserver names it under `/openapi/v3`.
fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group-version.
pub(crate) fn openapi_index(resources: &[ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for r in resources {
        let p = openapi_path(&r.group, &r.version);
        let doc = openapi_document(resources, &r.group, &r.version).unwrap_or(Value::Null);
        let hash = fnv1a(doc.to_string().as_bytes());
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The schema name kube-apiserver gives a custom resource: the group's labels reversed, then
/// version and kind (`io.kyma-project.infrastructuremanager.v1.Runtime`); core resources are
/// `io.k8s.api.core.<version>.<kind>`.
pub(crate) fn schema_name(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        return format!("io.k8s.api.core.{}.{}", r.version, r.kind);
    }
    let mut labels: Vec<&str> = r.group.split('.').collect();
    labels.reverse();
    format!("{}.{}.{}", labels.join("."), r.version, r.kind)
}

fn with_gvk(mut schema: Value, r: &ResourceInfo) -> Value {
    if let Some(m) = schema.as_object_mut() {
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
        );
    }
    schema
}

/// The OpenAPI v3 document of one group-version (`/openapi/v3/apis/<group>/<version>`):
/// every resource's schema under `components.schemas` (and its list's), and the resource
/// paths with their operations and parameters (including `fieldValidation` and `dryRun`,
/// which kubectl looks for before it sends them). A resource registered without a schema
/// gets one that accepts any object (`x-kubernetes-preserve-unknown-fields`), so that
/// kubectl leaves field validation to the server instead of failing to find a schema.
pub(crate) fn openapi_document(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let served: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for r in served {
        let name = schema_name(r);
        let schema = r.schema.clone().unwrap_or_else(|| {
            json!({
                "description": format!("{} (testenv serves no schema for it)", r.kind),
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            })
        });
        schemas.insert(name.clone(), with_gvk(schema, r));
        schemas.insert(
            format!("{name}List"),
            json!({
                "description": format!("{} is a list of {}", r.list_kind, r.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{name}")}},
                },
                "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version, "kind": r.list_kind}],
            }),
        );
        let base = if r.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                openapi_path(&r.group, &r.version),
                r.plural
            )
        } else {
            format!("/{}/{}", openapi_path(&r.group, &r.version), r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let body = |action: &str| {
            json!({
                "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}},
                "x-kubernetes-action": action,
            })
        };
        let write_params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let op = |verb: &str, action: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "parameters": write_params,
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        let mut item = json!({
            "get": {"operationId": format!("read{}", r.kind), "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk,
                    "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}}}},
            "put": op("replace", "put"),
            "patch": op("patch", "patch"),
            "delete": op("delete", "delete"),
        });
        item["put"]["requestBody"] = body("put");
        let mut collection = json!({
            "get": {"operationId": format!("list{}", r.kind), "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk,
                    "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}List")}}}}}},
            "post": op("create", "post"),
        });
        collection["post"]["requestBody"] = body("post");
        paths.insert(base.clone(), collection);
        paths.insert(format!("{base}/{{name}}"), item.clone());
        if r.status_subresource {
            paths.insert(format!("{base}/{{name}}/status"), item);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
