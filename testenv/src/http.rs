//! HTTP front end: routing, authentication, fault injection, request log and the handlers.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::{Query, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::{
    hooks::{AdminKubeconfigRequest, FaultAction, RequestInfo, RequestRecord, UserInfo, Verb},
    resource::ResourceInfo,
    server::{Candidate, Shared, WriteCtx, lock},
    status::ApiError,
    store,
};

pub(crate) fn json_response(code: u16, body: &Value) -> Response {
    let mut resp = (
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        serde_json::to_vec(body).expect("json"),
    )
        .into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

enum Route {
    Resource {
        /// The store index objects are kept under.
        res: usize,
        /// The resource as addressed.
        info: Box<ResourceInfo>,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
    NotFound,
}

fn parse_route(shared: &Shared, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let st = lock(&shared.store);
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let lookup = |plural: &str| st.res(&crate::resource::Gvr::new(group, version, plural));
    let owned = |s: Option<&&str>| s.map(|s| s.to_string());
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(res) = lookup(rest[2])
        && st.resources[res].namespaced
    {
        if rest.len() > 5 {
            return Route::NotFound;
        }
        return Route::Resource {
            res,
            info: Box::new(st.resources[res].clone()),
            ns: Some(rest[1].to_string()),
            name: owned(rest.get(3)),
            sub: owned(rest.get(4)),
        };
    }
    let Some(res) = rest.first().and_then(|p| lookup(p)) else {
        return Route::NotFound;
    };
    if rest.len() > 3 || (st.resources[res].namespaced && rest.len() > 1) {
        return Route::NotFound;
    }
    Route::Resource {
        res,
        info: Box::new(st.resources[res].clone()),
        ns: None,
        name: owned(rest.get(1)),
        sub: owned(rest.get(2)),
    }
}

fn authenticate(shared: &Shared, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(UserInfo::anonymous());
    };
    let value = value.to_str().unwrap_or("");
    let unauthorized = || ApiError::new(401, "Unauthorized", "Unauthorized");
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(unauthorized)?
        .trim();
    let mut user = lock(&shared.users)
        .get(token)
        .cloned()
        .ok_or_else(unauthorized)?;
    if !user.groups.iter().any(|g| g == "system:authenticated") {
        user.groups.push("system:authenticated".to_string());
    }
    Ok(user)
}

pub(crate) struct Params(HashMap<String, String>);

impl Params {
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    pub(crate) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

pub(crate) fn meta_only(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"))
}

/// `PartialObjectMetadata` view of an object.
pub(crate) fn to_meta(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let params = Params(
        Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|q| q.0.into_iter().collect())
            .unwrap_or_default(),
    );
    let mut record = RequestRecord {
        verb: None,
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        resource: None,
        subresource: None,
        namespace: None,
        name: None,
        user: String::new(),
        code: 0,
    };
    let response = match authenticate(&shared, &parts.headers) {
        Err(e) => error_response(&e),
        Ok(user) => {
            record.user = user.username.clone();
            dispatch(&shared, &parts, body, &params, user, &mut record).await
        }
    };
    record.code = response.status().as_u16();
    shared.log_request(record);
    response
}

async fn dispatch(
    shared: &Arc<Shared>,
    parts: &axum::http::request::Parts,
    body: Body,
    params: &Params,
    user: UserInfo,
    record: &mut RequestRecord,
) -> Response {
    let route = parse_route(shared, &record.path);
    let (res, info, ns, name, sub) = match route {
        Route::NotFound => return error_response(&ApiError::no_route()),
        Route::Resource {
            res,
            info,
            ns,
            name,
            sub,
        } => (res, info, ns, name, sub),
    };
    let verb = match (&parts.method, name.is_some()) {
        (&Method::GET, false) if params.flag("watch") => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::GET, true) => Verb::Get,
        (&Method::POST, _) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        _ => {
            return error_response(&ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    record.verb = Some(verb);
    record.resource = Some(info.plural.clone());
    record.subresource = sub.clone();
    record.namespace = ns.clone();
    record.name = name.clone();
    let rinfo = RequestInfo {
        verb: Some(verb),
        method: record.method.clone(),
        path: record.path.clone(),
        query: record.query.clone(),
        gvr: Some(info.gvr()),
        subresource: sub.clone(),
        namespace: ns.clone(),
        name: name.clone(),
        user: user.clone(),
    };
    if let Some(resp) = apply_fault(shared, &rinfo).await {
        return resp;
    }
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    let ctx = WriteCtx {
        user,
        dry_run: params.get("dryRun").is_some(),
        field_manager: params.get("fieldManager").map(String::from),
    };
    let meta = meta_only(&parts.headers);
    let gvr = info.gvr();
    let sub_ok = match sub.as_deref() {
        None => true,
        Some("status") => info.status_subresource,
        Some("adminkubeconfig") => gvr == crate::resource::Gvr::shoots() && verb == Verb::Create,
        Some(_) => false,
    };
    if !sub_ok {
        return error_response(&ApiError::no_route());
    }
    let ns = ns.as_deref();
    let result: Result<(u16, Value), ApiError> = match verb {
        Verb::Watch => {
            return crate::watch::watch_response(shared.clone(), res, &info, ns, params, meta);
        }
        Verb::List => {
            return match crate::list::list(shared, res, &info, ns, params, meta) {
                Ok(list) => json_response(200, &list),
                Err(e) => error_response(&e),
            };
        }
        Verb::Get => {
            let name = name.as_deref().unwrap_or("");
            let Some(obj) = lock(&shared.store).get(res, ns, name).cloned() else {
                return error_response(&ApiError::not_found(&gvr, name));
            };
            Ok((200, if meta { to_meta(&obj) } else { obj }))
        }
        Verb::Create if sub.as_deref() == Some("adminkubeconfig") => {
            admin_kubeconfig(shared, res, ns, name.as_deref().unwrap_or(""), &body, &ctx)
                .map(|v| (201, v))
        }
        Verb::Create => match name {
            Some(_) => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )),
            None => match parse_json(&body) {
                Ok(obj) => shared
                    .create(res, ns, obj, Verb::Create, &ctx)
                    .await
                    .map(|v| (201, v)),
                Err(e) => Err(e),
            },
        },
        Verb::Update => match parse_json(&body) {
            Ok(obj) => {
                let name = name.as_deref().unwrap_or("");
                if let Some(n) = obj.pointer("/metadata/name").and_then(Value::as_str)
                    && n != name
                {
                    return error_response(&ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
                shared
                    .update(res, ns, name, sub.as_deref(), Verb::Update, &ctx, |old| {
                        old.map(|_| Candidate::Update(obj.clone()))
                            .ok_or_else(|| ApiError::not_found(&gvr, name))
                    })
                    .await
                    .map(|v| (200, v))
            }
            Err(e) => Err(e),
        },
        Verb::Patch => {
            let name = name.as_deref().unwrap_or("");
            patch(
                shared,
                res,
                &info,
                ns,
                name,
                sub.as_deref(),
                parts,
                params,
                &body,
                &ctx,
            )
            .await
            .map(|v| (200, v))
        }
        Verb::Delete => {
            let opts: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&body).unwrap_or_else(|_| json!({}))
            };
            let mut ctx = ctx;
            if opts
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                ctx.dry_run = true;
            }
            let pre = |k: &str| {
                opts.pointer(&format!("/preconditions/{k}"))
                    .and_then(Value::as_str)
                    .map(String::from)
            };
            shared
                .delete(
                    res,
                    ns,
                    name.as_deref().unwrap_or(""),
                    pre("resourceVersion"),
                    pre("uid"),
                    &ctx,
                )
                .await
                .map(|v| (200, v))
        }
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

async fn apply_fault(shared: &Shared, info: &RequestInfo) -> Option<Response> {
    match shared.fault_for(info)? {
        FaultAction::Fail {
            code,
            message,
            retry_after,
        } => {
            let mut e = ApiError::from_code(
                code,
                message.unwrap_or_else(|| format!("testenv: injected fault ({code})")),
            );
            e.retry_after = retry_after;
            Some(error_response(&e))
        }
        FaultAction::Delay(d) => {
            tokio::time::sleep(d).await;
            None
        }
        FaultAction::Hang => {
            let mut stop = shared.shutdown.clone();
            let _ = stop.wait_for(|s| *s).await;
            Some(error_response(&ApiError::from_code(
                503,
                "testenv: server shutting down",
            )))
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

fn fields_v1(v: &Value, top: bool) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, child) in m {
                if top && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                out.insert(format!("f:{k}"), fields_v1(child, false));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// Records a server-side-apply `managedFields` entry for `manager` (replacing its previous
/// Apply entry for the same subresource).
fn record_apply(
    doc: &mut Value,
    manager: &str,
    patch: &Value,
    api_version: &str,
    sub: Option<&str>,
) {
    let mut fields = fields_v1(patch, true);
    if let Some(m) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) {
        for k in [
            "f:name",
            "f:namespace",
            "f:resourceVersion",
            "f:uid",
            "f:managedFields",
        ] {
            m.remove(k);
        }
    }
    let mut entry = json!({
        "manager": manager, "operation": "Apply", "apiVersion": api_version,
        "time": store::now(), "fieldsType": "FieldsV1", "fieldsV1": fields,
    });
    if let Some(s) = sub {
        entry["subresource"] = json!(s);
    }
    let m = store::meta_mut(doc);
    let mut list: Vec<Value> = m
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    list.retain(|e| {
        !(e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str) == sub)
    });
    list.push(entry);
    m.insert("managedFields".into(), Value::Array(list));
}

#[allow(clippy::too_many_arguments)]
async fn patch(
    shared: &Shared,
    res: usize,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    parts: &axum::http::request::Parts,
    params: &Params,
    body: &[u8],
    ctx: &WriteCtx,
) -> Result<Value, ApiError> {
    let gvr = info.gvr();
    let ctype = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let kind = match ctype.as_str() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/json-patch+json" => PatchKind::Json,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                ),
            ));
        }
    };
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Err(ApiError::bad_request(format!(
                "the patch body is not valid JSON: {e}"
            )));
        }
    };
    let json_patch: Option<json_patch::Patch> = if kind == PatchKind::Json {
        Some(
            serde_json::from_value(value.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?,
        )
    } else {
        None
    };
    let manager = params.get("fieldManager").map(String::from);
    if kind == PatchKind::Apply && manager.is_none() {
        return Err(ApiError::invalid(
            &crate::resource::Gvr::new("meta.k8s.io", "v1", "patchoptions"),
            "",
            "fieldManager: Required value: is required for apply patch",
        ));
    }
    if kind != PatchKind::Apply && value.is_null() {
        return Err(ApiError::bad_request("empty patch"));
    }
    let api_version = info.api_version();
    shared
        .update(res, ns, name, sub, Verb::Patch, ctx, |old| {
            let Some(old) = old else {
                if kind == PatchKind::Apply && sub.is_none() {
                    let mut obj = value.clone();
                    if !obj.is_object() {
                        return Err(ApiError::bad_request("apply body must be an object"));
                    }
                    let m = store::meta_mut(&mut obj);
                    m.insert("name".into(), json!(name));
                    if let Some(ns) = ns {
                        m.insert("namespace".into(), json!(ns));
                    }
                    let mut out = obj.clone();
                    record_apply(
                        &mut out,
                        manager.as_deref().unwrap_or(""),
                        &value,
                        &api_version,
                        None,
                    );
                    return Ok(Candidate::Create(out));
                }
                return Err(ApiError::not_found(&gvr, name));
            };
            let mut doc = old.clone();
            match kind {
                PatchKind::Merge | PatchKind::Strategic => json_patch::merge(&mut doc, &value),
                PatchKind::Apply => {
                    let mut v = value.clone();
                    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("managedFields");
                    }
                    json_patch::merge(&mut doc, &v);
                    record_apply(
                        &mut doc,
                        manager.as_deref().unwrap_or(""),
                        &value,
                        &api_version,
                        sub,
                    );
                }
                PatchKind::Json => {
                    json_patch::patch(&mut doc, json_patch.as_ref().expect("parsed")).map_err(
                        |e| {
                            ApiError::new(
                                422,
                                "Invalid",
                                format!("the server rejected our request due to an error in our request: {e}"),
                            )
                        },
                    )?;
                }
            }
            Ok(Candidate::Update(doc))
        })
        .await
}

fn admin_kubeconfig(
    shared: &Shared,
    res: usize,
    ns: Option<&str>,
    name: &str,
    body: &[u8],
    ctx: &WriteCtx,
) -> Result<Value, ApiError> {
    let gvr = crate::resource::Gvr::shoots();
    let shoot = lock(&shared.store)
        .get(res, ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gvr, name))?;
    let request: Value = if body.is_empty() {
        json!({})
    } else {
        parse_json(body)?
    };
    let expiration = request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let req = AdminKubeconfigRequest {
        namespace: ns.unwrap_or("").to_string(),
        name: name.to_string(),
        shoot,
        expiration_seconds: expiration,
        user: ctx.user.clone(),
    };
    let f = lock(&shared.admin_kubeconfig).clone();
    let kubeconfig = match f {
        Some(f) => f(&req),
        None => crate::server::kubeconfig_yaml(
            &format!("https://api.{name}.{}.testenv.invalid", req.namespace),
            name,
            Some(&format!("admin-{name}")),
        ),
    };
    let now = chrono::Utc::now();
    let expires = now + Duration::from_secs(expiration.max(0) as u64);
    Ok(json!({
        "apiVersion": "authentication.gardener.cloud/v1alpha1",
        "kind": "AdminKubeconfigRequest",
        "metadata": {"name": name, "namespace": req.namespace, "creationTimestamp": store::timestamp(now)},
        "spec": {"expirationSeconds": expiration},
        "status": {
            "kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig),
            "expirationTimestamp": store::timestamp(expires),
        },
    }))
}
