//! An admission stage that calls real admission webhooks over HTTPS, the way kube-apiserver's
//! webhook admission plugins do (`k8s.io/apiserver/pkg/admission/plugin/webhook/{mutating,
//! validating}`), for writes to the in-memory API server: so tests in memory see what a real
//! server's admission would do with kim's shipped webhook configurations.
//!
//! Configured from `Mutating`/`ValidatingWebhookConfiguration` documents, typically a kustomize
//! overlay read with [`kustomize_build`] (resources and `patches`), and installed on a
//! [`ServerHandle`] with [`WebhookStage::install`]. For every write it behaves like
//! kube-apiserver (the facts kim relies on: docs/admission-protocol.md):
//!
//! - **matching**: `rules` (operations, groups, versions, resources with subresources — a rule
//!   on `runtimes` does not fire for `runtimes/status` — and scope), `namespaceSelector` (on the
//!   namespace's labels plus `kubernetes.io/metadata.name`) and `objectSelector`;
//! - **order**: mutating webhooks first (configurations by name), `reinvocationPolicy:
//!   IfNeeded` honoured, then validating webhooks on the mutated object;
//! - **the review and the call**: an `admission.k8s.io/v1` review with a fresh `uid`, `POST
//!   https://<service>.<namespace>.svc<path>?timeout=…` verified against `caBundle` for the
//!   service's name, resolved to the endpoint the test gives, timing out after `timeoutSeconds`;
//! - **outcomes**: a call error or malformed answer rejects the write with kube-apiserver's 500
//!   message under `failurePolicy: Fail` and is skipped under `Ignore`; a denial answers its code
//!   (at least 400) and message; a mutating patch is applied (one that does not apply is a 500
//!   whatever the policy); `warnings` are recorded; a dry run reaching a webhook with side
//!   effects is refused with 400.
//!
//! Every write the stage sees is recorded ([`WebhookStage::log`]), so tests can assert what the
//! webhooks saw. Approximated: `matchPolicy` (one version per resource, so `Exact` and
//! `Equivalent` agree), `matchConditions` (refused at load time), validating webhooks called one
//! after the other rather than in parallel (any denial rejects; the first in order is reported),
//! mutating webhooks see the object after status/spec separation (for a `status` write the two
//! differ only outside `status`, which is discarded anyway); only `v1` reviews.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::hooks::{AdmissionDecision, AdmissionRequest, UserInfo};
use crate::resource::Gvr;
use crate::selector::{LabelRequirement, LabelSelector};
use crate::server::{ServerHandle, Shared, lock};

/// An error loading webhook configurations or manifests: names the file or field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageError(pub String);

impl fmt::Display for StageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StageError {}

fn err<T>(msg: impl Into<String>) -> Result<T, StageError> {
    Err(StageError(msg.into()))
}

// -------------------------------------------------------------------------------------------
// kustomize (the subset the manifests use)
// -------------------------------------------------------------------------------------------

fn read_yaml_docs(path: &Path) -> Result<Vec<Value>, StageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| StageError(format!("cannot read {}: {e}", path.display())))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| StageError(format!("{}: not YAML: {e}", path.display())))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn kustomization_file(dir: &Path) -> Result<PathBuf, StageError> {
    for name in ["kustomization.yaml", "kustomization.yml", "Kustomization"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    err(format!("no kustomization.yaml in {}", dir.display()))
}

/// Builds a kustomization directory the way `kustomize build` does, for the subset of
/// kustomize that kim's manifests use: `resources` (files with one or more YAML documents,
/// and directories holding a kustomization, recursively) and `patches` (`path` or inline
/// `patch`, with an optional `target` of `group`/`version`/`kind`/`name`/`namespace`): a
/// patch that is a YAML sequence is a JSON 6902 patch applied to every targeted document; a
/// patch that is a mapping is a strategic-merge patch applied to the document with its
/// `kind` and `metadata.name` (maps merge recursively, `null` deletes, lists are replaced
/// except `webhooks`, which merge by `name`).
///
/// Errors: a missing or unreadable file, YAML that does not parse, a patch that does not
/// apply or targets nothing, and transformers that would change the documents but are not
/// implemented (`namespace`, `namePrefix`, `nameSuffix`, `patchesJson6902`,
/// `patchesStrategicMerge`, `replacements`, `components`).
pub fn kustomize_build(dir: &Path) -> Result<Vec<Value>, StageError> {
    let file = kustomization_file(dir)?;
    let docs = read_yaml_docs(&file)?;
    let k = docs.into_iter().next().unwrap_or(Value::Null);
    for key in [
        "namespace",
        "namePrefix",
        "nameSuffix",
        "patchesJson6902",
        "patchesStrategicMerge",
        "replacements",
        "components",
    ] {
        if k.get(key).is_some() {
            return err(format!(
                "{}: `{key}` is not supported by testenv's kustomize subset",
                file.display()
            ));
        }
    }
    let mut out = Vec::new();
    for r in k["resources"].as_array().into_iter().flatten() {
        let Some(r) = r.as_str() else {
            return err(format!("{}: a resource is not a string", file.display()));
        };
        let p = dir.join(r);
        if p.is_dir() {
            out.extend(kustomize_build(&p)?);
        } else {
            out.extend(read_yaml_docs(&p)?);
        }
    }
    for (i, patch) in k["patches"].as_array().into_iter().flatten().enumerate() {
        let where_ = format!("{}: patches[{i}]", file.display());
        let body: Value = if let Some(path) = patch["path"].as_str() {
            let docs = read_yaml_docs(&dir.join(path))?;
            docs.into_iter()
                .next()
                .ok_or_else(|| StageError(format!("{where_}: {path} is empty")))?
        } else if let Some(inline) = patch["patch"].as_str() {
            serde_saphyr::from_str(inline)
                .map_err(|e| StageError(format!("{where_}: inline patch is not YAML: {e}")))?
        } else {
            return err(format!("{where_}: neither `path` nor `patch`"));
        };
        let target = patch.get("target").cloned().unwrap_or(Value::Null);
        let mut hits = 0;
        if body.is_array() {
            if target.is_null() {
                return err(format!("{where_}: a JSON 6902 patch needs a `target`"));
            }
            let ops: json_patch::Patch = serde_json::from_value(body)
                .map_err(|e| StageError(format!("{where_}: not a JSON 6902 patch: {e}")))?;
            for doc in out.iter_mut().filter(|d| targets(&target, d)) {
                json_patch::patch(doc, &ops)
                    .map_err(|e| StageError(format!("{where_}: does not apply: {e}")))?;
                hits += 1;
            }
        } else if body.is_object() {
            let target = if target.is_null() {
                json!({
                    "kind": body["kind"],
                    "name": body["metadata"]["name"],
                })
            } else {
                target
            };
            for doc in out.iter_mut().filter(|d| targets(&target, d)) {
                strategic_merge(doc, &body, "");
                hits += 1;
            }
        } else {
            return err(format!("{where_}: a patch is a sequence or a mapping"));
        }
        if hits == 0 {
            return err(format!("{where_}: targets no resource"));
        }
    }
    Ok(out)
}

fn targets(target: &Value, doc: &Value) -> bool {
    let api_version = doc["apiVersion"].as_str().unwrap_or("");
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let want = |k: &str, have: &str| target[k].as_str().is_none_or(|w| w == have);
    want("group", group)
        && want("version", version)
        && want("kind", doc["kind"].as_str().unwrap_or(""))
        && want("name", doc["metadata"]["name"].as_str().unwrap_or(""))
        && want(
            "namespace",
            doc["metadata"]["namespace"].as_str().unwrap_or(""),
        )
}

/// Strategic merge of `patch` into `doc` for the shapes of webhook configurations: maps merge
/// recursively, `null` deletes a key, `webhooks` lists merge by `name`, other lists are
/// replaced.
fn strategic_merge(doc: &mut Value, patch: &Value, key: &str) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    d.remove(k);
                } else if let Some(existing) = d.get_mut(k) {
                    strategic_merge(existing, v, k);
                } else {
                    d.insert(k.clone(), v.clone());
                }
            }
        }
        (Value::Array(d), Value::Array(p)) if key == "webhooks" => {
            for item in p {
                match d
                    .iter_mut()
                    .find(|x| x.get("name").is_some() && x.get("name") == item.get("name"))
                {
                    Some(existing) => strategic_merge(existing, item, ""),
                    None => d.push(item.clone()),
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

// -------------------------------------------------------------------------------------------
// Webhook configurations
// -------------------------------------------------------------------------------------------

/// Mutating or validating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    /// From a `MutatingWebhookConfiguration`: may return a patch; called first.
    Mutating,
    /// From a `ValidatingWebhookConfiguration`: may only allow or deny.
    Validating,
}

/// `failurePolicy`: what a call error does to the write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Reject the write (500). The default.
    Fail,
    /// Let the write through as if the webhook had allowed it.
    Ignore,
}

/// `sideEffects`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideEffects {
    /// `None`: safe for dry-run requests.
    None,
    /// `NoneOnDryRun`: safe for dry-run requests.
    NoneOnDryRun,
    /// `Some`: dry-run requests reaching the webhook are rejected.
    Some,
    /// `Unknown`: dry-run requests reaching the webhook are rejected.
    Unknown,
}

/// One entry of `rules` (a `RuleWithOperations`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `operations`: `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
    /// `apiGroups` (`""` = core, `*` = any).
    pub api_groups: Vec<String>,
    /// `apiVersions` (`*` = any).
    pub api_versions: Vec<String>,
    /// `resources`: `plural`, `plural/sub`, `plural/*`, `*/sub`, `*` or `*/*`.
    pub resources: Vec<String>,
    /// `scope`: `Namespaced`, `Cluster` or `*` (the default).
    pub scope: String,
}

impl Rule {
    fn matches(&self, op: &str, gvr: &Gvr, sub: Option<&str>, namespaced: bool) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let resource_ok = self.resources.iter().any(|r| {
            let (res, rsub) = match r.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (r.as_str(), None),
            };
            if r == "*/*" {
                return true;
            }
            let res_ok = res == "*" || res == gvr.plural;
            let sub_ok = match (rsub, sub) {
                (None, None) => true,
                (None, Some(_)) => false,
                (Some("*"), _) => true,
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => false,
            };
            // `*` alone matches every resource but no subresource.
            res_ok && sub_ok
        });
        let scope_ok = match self.scope.as_str() {
            "Namespaced" => namespaced,
            "Cluster" => !namespaced,
            _ => true,
        };
        any(&self.operations, op)
            && any(&self.api_groups, &gvr.group)
            && any(&self.api_versions, &gvr.version)
            && resource_ok
            && scope_ok
    }
}

/// `clientConfig.service`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    /// Service name.
    pub name: String,
    /// Service namespace.
    pub namespace: String,
    /// URL path (default `/`).
    pub path: String,
    /// Service port (default 443). Replaced by the endpoint's port when calling.
    pub port: u16,
}

impl ServiceRef {
    /// `<name>.<namespace>.svc`: the host name kube-apiserver calls and verifies the serving
    /// certificate for.
    pub fn host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

/// One webhook of a configuration (`webhooks[]`), with everything the stage uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Webhook {
    /// Mutating or validating.
    pub kind: WebhookKind,
    /// `metadata.name` of the configuration holding it.
    pub configuration: String,
    /// `name`, e.g. `runtime-status.validate.kim.kyma-project.io`; named in denial messages.
    pub name: String,
    /// `clientConfig.service`, if the webhook is reached through a Service.
    pub service: Option<ServiceRef>,
    /// `clientConfig.url`, if given instead of a Service.
    pub url: Option<String>,
    /// `clientConfig.caBundle`, decoded (PEM); empty = none given.
    pub ca_bundle: Vec<u8>,
    /// `rules`.
    pub rules: Vec<Rule>,
    /// `failurePolicy` (default `Fail`).
    pub failure_policy: FailurePolicy,
    /// `timeoutSeconds` (default 10, range 1–30).
    pub timeout_seconds: u64,
    /// `sideEffects` (required in v1).
    pub side_effects: SideEffects,
    /// `namespaceSelector` (`None` = everything).
    pub namespace_selector: Option<LabelSelector>,
    /// `objectSelector` (`None` = everything).
    pub object_selector: Option<LabelSelector>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke_if_needed: bool,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn label_selector(v: &Value, what: &str) -> Result<Option<LabelSelector>, StageError> {
    if v.is_null() {
        return Ok(None);
    }
    let mut reqs = Vec::new();
    if let Some(m) = v["matchLabels"].as_object() {
        for (k, val) in m {
            let Some(val) = val.as_str() else {
                return err(format!("{what}.matchLabels.{k} is not a string"));
            };
            reqs.push(LabelRequirement::Equals(k.clone(), val.into()));
        }
    }
    for e in v["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("").to_string();
        let values = strings(&e["values"]);
        reqs.push(match e["operator"].as_str().unwrap_or("") {
            "In" => LabelRequirement::In(key, values),
            "NotIn" => LabelRequirement::NotIn(key, values),
            "Exists" => LabelRequirement::Exists(key),
            "DoesNotExist" => LabelRequirement::DoesNotExist(key),
            other => return err(format!("{what}: unknown operator {other:?}")),
        });
    }
    Ok(Some(LabelSelector(reqs)))
}

impl Webhook {
    fn parse(kind: WebhookKind, configuration: &str, w: &Value) -> Result<Self, StageError> {
        let name = w["name"].as_str().unwrap_or("").to_string();
        let what = format!("{configuration}: webhook {name:?}");
        if name.is_empty() {
            return err(format!("{configuration}: a webhook has no name"));
        }
        if !strings(&w["admissionReviewVersions"])
            .iter()
            .any(|v| v == "v1")
        {
            return err(format!(
                "{what}: admissionReviewVersions must include v1 (the only version this stage speaks)"
            ));
        }
        if w["matchConditions"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return err(format!(
                "{what}: matchConditions (CEL) are not supported by this stage"
            ));
        }
        let cc = &w["clientConfig"];
        let service = match cc.get("service") {
            Some(s) if !s.is_null() => Some(ServiceRef {
                name: s["name"].as_str().unwrap_or("").to_string(),
                namespace: s["namespace"].as_str().unwrap_or("").to_string(),
                path: s["path"].as_str().unwrap_or("/").to_string(),
                port: s["port"].as_u64().unwrap_or(443) as u16,
            }),
            _ => None,
        };
        let url = cc["url"].as_str().map(String::from);
        if service.is_some() == url.is_some() {
            return err(format!(
                "{what}: clientConfig needs exactly one of service and url"
            ));
        }
        if let Some(s) = &service
            && (s.name.is_empty() || s.namespace.is_empty())
        {
            return err(format!(
                "{what}: clientConfig.service needs name and namespace"
            ));
        }
        let ca_bundle = match cc["caBundle"].as_str() {
            Some(b) => base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|e| StageError(format!("{what}: caBundle is not base64: {e}")))?,
            None => Vec::new(),
        };
        let mut rules = Vec::new();
        for r in w["rules"].as_array().into_iter().flatten() {
            rules.push(Rule {
                operations: strings(&r["operations"]),
                api_groups: strings(&r["apiGroups"]),
                api_versions: strings(&r["apiVersions"]),
                resources: strings(&r["resources"]),
                scope: r["scope"].as_str().unwrap_or("*").to_string(),
            });
        }
        let failure_policy = match w["failurePolicy"].as_str() {
            None | Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            Some(o) => return err(format!("{what}: unknown failurePolicy {o:?}")),
        };
        let timeout_seconds = w["timeoutSeconds"].as_u64().unwrap_or(10);
        if !(1..=30).contains(&timeout_seconds) {
            return err(format!(
                "{what}: timeoutSeconds {timeout_seconds} is not in 1..=30"
            ));
        }
        let side_effects = match w["sideEffects"].as_str() {
            Some("None") => SideEffects::None,
            Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
            Some("Some") => SideEffects::Some,
            Some("Unknown") => SideEffects::Unknown,
            o => return err(format!("{what}: sideEffects is required, got {o:?}")),
        };
        Ok(Webhook {
            kind,
            configuration: configuration.to_string(),
            name,
            service,
            url,
            ca_bundle,
            rules,
            failure_policy,
            timeout_seconds,
            side_effects,
            namespace_selector: label_selector(
                &w["namespaceSelector"],
                &format!("{what}: namespaceSelector"),
            )?,
            object_selector: label_selector(
                &w["objectSelector"],
                &format!("{what}: objectSelector"),
            )?,
            reinvoke_if_needed: kind == WebhookKind::Mutating
                && w["reinvocationPolicy"].as_str() == Some("IfNeeded"),
        })
    }

    /// The URL called, `?timeout=<N>s` included (the Service port is left out: the stage
    /// resolves the host to its endpoint, port included).
    pub fn call_url(&self) -> String {
        let base = match (&self.service, &self.url) {
            (Some(s), _) => {
                let path = if s.path.starts_with('/') {
                    s.path.clone()
                } else {
                    format!("/{}", s.path)
                };
                format!("https://{}{path}", s.host())
            }
            (None, Some(u)) => u.clone(),
            (None, None) => String::new(),
        };
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}timeout={}s", self.timeout_seconds)
    }
}

/// The webhooks of a set of configurations, in the order kube-apiserver calls them:
/// mutating configurations sorted by name, then validating ones, each configuration's
/// webhooks in their order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebhookConfigurations {
    /// All webhooks (mutating ones first).
    pub webhooks: Vec<Webhook>,
}

impl WebhookConfigurations {
    /// Picks the `admissionregistration.k8s.io/v1` `MutatingWebhookConfiguration` and
    /// `ValidatingWebhookConfiguration` documents out of `docs` (others are ignored).
    ///
    /// Errors: a webhook without a name, without `v1` in `admissionReviewVersions`, with
    /// `matchConditions`, without exactly one of `clientConfig.service`/`url`, with a
    /// `caBundle` that is not base64, an unknown `failurePolicy`, a `timeoutSeconds` outside
    /// 1–30, or without `sideEffects`.
    pub fn from_documents(docs: &[Value]) -> Result<Self, StageError> {
        let mut configs: Vec<(WebhookKind, String, &Value)> = Vec::new();
        for d in docs {
            if d["apiVersion"] != "admissionregistration.k8s.io/v1" {
                continue;
            }
            let kind = match d["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => WebhookKind::Mutating,
                Some("ValidatingWebhookConfiguration") => WebhookKind::Validating,
                _ => continue,
            };
            let name = d["metadata"]["name"].as_str().unwrap_or("").to_string();
            configs.push((kind, name, d));
        }
        configs.sort_by(|a, b| {
            let rank = |k: WebhookKind| (k == WebhookKind::Validating) as u8;
            (rank(a.0), &a.1).cmp(&(rank(b.0), &b.1))
        });
        let mut webhooks = Vec::new();
        for (kind, name, d) in configs {
            for w in d["webhooks"].as_array().into_iter().flatten() {
                webhooks.push(Webhook::parse(kind, &name, w)?);
            }
        }
        Ok(Self { webhooks })
    }

    /// [`kustomize_build`] of `dir`, then [`WebhookConfigurations::from_documents`].
    ///
    /// Errors: as those two.
    pub fn from_kustomization(dir: &Path) -> Result<Self, StageError> {
        Self::from_documents(&kustomize_build(dir)?)
    }

    /// The webhook with this name.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Webhook> {
        self.webhooks.iter_mut().find(|w| w.name == name)
    }
}

// -------------------------------------------------------------------------------------------
// Records
// -------------------------------------------------------------------------------------------

/// What one webhook call came to.
#[derive(Clone, Debug, PartialEq)]
pub enum CallOutcome {
    /// `allowed: true`; `patch` is the decoded JSON Patch a mutating webhook returned and the
    /// stage applied (`None`: no patch).
    Allowed {
        /// The JSON Patch applied, if any.
        patch: Option<Value>,
    },
    /// `allowed: false`: the write was rejected with this code and message.
    Denied {
        /// HTTP code given to the client.
        code: u16,
        /// `Status.message` given to the client (with the apiserver's prefix).
        message: String,
    },
    /// The call failed (transport, TLS, timeout, invalid answer).
    Failed {
        /// What went wrong.
        error: String,
        /// `true` when `failurePolicy: Ignore` let the write through.
        ignored: bool,
    },
    /// The webhook allowed the write with a patch that does not decode or apply (the write
    /// failed with 500).
    BadPatch {
        /// Why.
        error: String,
    },
}

/// One call of a webhook.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookCall {
    /// Webhook name.
    pub webhook: String,
    /// Mutating or validating.
    pub kind: WebhookKind,
    /// The URL called (with `?timeout=`).
    pub url: String,
    /// `request.uid` sent.
    pub uid: String,
    /// The whole `AdmissionReview` sent.
    pub review: Value,
    /// `response` of the answer, when there was a decodable answer.
    pub response: Option<Value>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
    /// How it ended.
    pub outcome: CallOutcome,
    /// Wall time of the call.
    pub took: Duration,
}

/// How the stage decided a write.
#[derive(Clone, Debug, PartialEq)]
pub enum StageResult {
    /// No webhook matched: nothing was called.
    NotMatched,
    /// Let through; `patched` when a mutating webhook's patch changed the object.
    Allowed {
        /// Whether the object was changed by a patch.
        patched: bool,
    },
    /// Rejected with this code and message.
    Rejected {
        /// HTTP code.
        code: u16,
        /// `Status.message`.
        message: String,
    },
}

/// One write seen by the stage.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionRecord {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: String,
    /// The resource.
    pub gvr: Gvr,
    /// Subresource, if any.
    pub subresource: Option<String>,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// Caller's user name.
    pub user: String,
    /// Whether the write was a dry run.
    pub dry_run: bool,
    /// The webhooks called, in order.
    pub calls: Vec<WebhookCall>,
    /// The decision.
    pub result: StageResult,
}

// -------------------------------------------------------------------------------------------
// The stage
// -------------------------------------------------------------------------------------------

struct Hook {
    config: Webhook,
    /// The HTTPS client for this webhook, or why none could be built (then every call fails).
    client: Result<reqwest::Client, String>,
}

struct Inner {
    hooks: Vec<Hook>,
    log: Mutex<Vec<AdmissionRecord>>,
    server: Mutex<Option<Weak<Shared>>>,
    counter: AtomicU64,
    seed: u64,
}

/// Calls real admission webhooks for the writes of an in-memory API server, like
/// kube-apiserver (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct WebhookStage {
    inner: Arc<Inner>,
}

impl fmt::Debug for WebhookStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookStage")
            .field(
                "webhooks",
                &self
                    .inner
                    .hooks
                    .iter()
                    .map(|h| h.config.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn build_client(w: &Webhook, endpoint: SocketAddr) -> Result<reqwest::Client, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&w.ca_bundle) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("caBundle: unusable certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("x509: the caBundle holds no PEM certificate".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(w.timeout_seconds))
        .connect_timeout(Duration::from_secs(w.timeout_seconds));
    if let Some(s) = &w.service {
        b = b.resolve(&s.host(), endpoint);
    }
    b.build().map_err(|e| e.to_string())
}

fn user_info(u: &UserInfo) -> Value {
    let mut m = Map::new();
    if !u.username.is_empty() {
        m.insert("username".into(), json!(u.username));
    }
    if !u.uid.is_empty() {
        m.insert("uid".into(), json!(u.uid));
    }
    if !u.groups.is_empty() {
        m.insert("groups".into(), json!(u.groups));
    }
    Value::Object(m)
}

fn labels_of(v: Option<&Value>) -> Value {
    v.and_then(|o| o.pointer("/metadata/labels"))
        .cloned()
        .unwrap_or_else(|| json!({}))
}

impl WebhookStage {
    /// A stage calling `configs`' webhooks; every Service host (`<svc>.<ns>.svc`) resolves to
    /// `endpoint` (e.g. `127.0.0.1:<port of a running kim webhook>`). Installs nothing: see
    /// [`WebhookStage::install`].
    ///
    /// Never fails: a webhook whose `caBundle` holds no usable certificate gets no client, and
    /// each of its calls fails (as in kube-apiserver, where its `failurePolicy` then decides).
    pub fn new(configs: WebhookConfigurations, endpoint: SocketAddr) -> Self {
        let hooks = configs
            .webhooks
            .into_iter()
            .map(|config| Hook {
                client: build_client(&config, endpoint),
                config,
            })
            .collect();
        let seed = std::collections::hash_map::RandomState::new();
        let seed = std::hash::BuildHasher::hash_one(&seed, std::process::id());
        WebhookStage {
            inner: Arc::new(Inner {
                hooks,
                log: Mutex::new(Vec::new()),
                server: Mutex::new(None),
                counter: AtomicU64::new(0),
                seed,
            }),
        }
    }

    /// The webhooks, in calling order.
    pub fn webhooks(&self) -> Vec<Webhook> {
        self.inner.hooks.iter().map(|h| h.config.clone()).collect()
    }

    /// Installs the stage as `server`'s admission hook ([`ServerHandle::set_admission_async`],
    /// replacing any hook set before; the built-in plugins still run first). Namespace labels
    /// for `namespaceSelector` are read from `server` (without keeping it alive).
    pub fn install(&self, server: &ServerHandle) {
        *lock(&self.inner.server) = Some(Arc::downgrade(&server.shared));
        let stage = self.clone();
        server.set_admission_async(move |req| {
            let stage = stage.clone();
            async move { stage.admit(req).await }
        });
    }

    /// Every write seen so far, in order of decision.
    pub fn log(&self) -> Vec<AdmissionRecord> {
        lock(&self.inner.log).clone()
    }

    /// Every webhook call so far.
    pub fn calls(&self) -> Vec<WebhookCall> {
        lock(&self.inner.log)
            .iter()
            .flat_map(|r| r.calls.iter().cloned())
            .collect()
    }

    /// Empties the log.
    pub fn clear_log(&self) {
        lock(&self.inner.log).clear();
    }

    fn fresh_uid(&self) -> String {
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let mut r = crate::hooks::XorShift::new(self.inner.seed ^ n.wrapping_mul(0x9E37_79B9));
        let (a, b) = (r.next_u64(), r.next_u64());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    fn namespace_labels(&self, ns: &str) -> Value {
        let shared = lock(&self.inner.server).as_ref().and_then(Weak::upgrade);
        let mut labels = shared
            .and_then(|s| {
                let st = lock(&s.store);
                let res = st.res(&Gvr::namespaces())?;
                st.get(res, None, ns).cloned()
            })
            .map(|o| labels_of(Some(&o)))
            .unwrap_or_else(|| json!({}));
        if let Some(m) = labels.as_object_mut() {
            m.insert("kubernetes.io/metadata.name".into(), json!(ns));
        }
        json!({"metadata": {"labels": labels}})
    }

    fn matches(&self, w: &Webhook, req: &AdmissionRequest, op: &str) -> bool {
        let namespaced = req.namespace.is_some();
        if !w
            .rules
            .iter()
            .any(|r| r.matches(op, &req.gvr, req.subresource.as_deref(), namespaced))
        {
            return false;
        }
        if let (Some(sel), Some(ns)) = (&w.namespace_selector, &req.namespace)
            && !sel.matches(&self.namespace_labels(ns))
        {
            return false;
        }
        if let Some(sel) = &w.object_selector {
            let hit = |o: Option<&Value>| {
                o.is_some_and(|o| sel.matches(&json!({"metadata": {"labels": labels_of(Some(o))}})))
            };
            if !hit(req.object.as_ref()) && !hit(req.old_object.as_ref()) {
                return false;
            }
        }
        true
    }

    fn review(&self, uid: &str, req: &AdmissionRequest, op: &str, object: Option<&Value>) -> Value {
        let gvk = {
            let api_version = object
                .or(req.old_object.as_ref())
                .and_then(|o| o["apiVersion"].as_str())
                .unwrap_or("");
            let version = api_version
                .rsplit_once('/')
                .map_or(api_version, |(_, v)| v)
                .to_string();
            let version = if version.is_empty() {
                req.gvr.version.clone()
            } else {
                version
            };
            json!({"group": req.gvr.group, "version": version, "kind": req.kind})
        };
        let resource = json!({
            "group": req.gvr.group, "version": req.gvr.version, "resource": req.gvr.plural,
        });
        let mut options = Map::new();
        options.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
        let opts_kind = match op {
            "CREATE" => "CreateOptions",
            "DELETE" => "DeleteOptions",
            _ => "UpdateOptions",
        };
        options.insert("kind".into(), json!(opts_kind));
        if req.dry_run {
            options.insert("dryRun".into(), json!(["All"]));
        }
        if let Some(fm) = &req.field_manager
            && op != "DELETE"
        {
            options.insert("fieldManager".into(), json!(fm));
        }
        let mut r = Map::new();
        r.insert("uid".into(), json!(uid));
        r.insert("kind".into(), gvk.clone());
        r.insert("resource".into(), resource.clone());
        if let Some(s) = &req.subresource {
            r.insert("subResource".into(), json!(s));
        }
        r.insert("requestKind".into(), gvk);
        r.insert("requestResource".into(), resource);
        if let Some(s) = &req.subresource {
            r.insert("requestSubResource".into(), json!(s));
        }
        if !req.name.is_empty() {
            r.insert("name".into(), json!(req.name));
        }
        if let Some(ns) = &req.namespace {
            r.insert("namespace".into(), json!(ns));
        }
        r.insert("operation".into(), json!(op));
        r.insert("userInfo".into(), user_info(&req.user));
        r.insert("object".into(), object.cloned().unwrap_or(Value::Null));
        r.insert(
            "oldObject".into(),
            req.old_object.clone().unwrap_or(Value::Null),
        );
        r.insert("dryRun".into(), json!(req.dry_run));
        r.insert("options".into(), Value::Object(options));
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": r,
        })
    }

    /// One call; returns the record and, for an allowed mutating call with a patch, the
    /// patched object. `Err` in the outcome sense is carried by [`CallOutcome`].
    async fn call(
        &self,
        hook: &Hook,
        req: &AdmissionRequest,
        op: &str,
        object: Option<&Value>,
    ) -> (WebhookCall, Option<Value>) {
        let w = &hook.config;
        let uid = self.fresh_uid();
        let review = self.review(&uid, req, op, object);
        let url = w.call_url();
        let started = Instant::now();
        let mut call = WebhookCall {
            webhook: w.name.clone(),
            kind: w.kind,
            url: url.clone(),
            uid: uid.clone(),
            review,
            response: None,
            warnings: Vec::new(),
            outcome: CallOutcome::Allowed { patch: None },
            took: Duration::ZERO,
        };
        let fail = |call: &mut WebhookCall, reason: String| {
            call.outcome = CallOutcome::Failed {
                error: format!("failed calling webhook \"{}\": {reason}", w.name),
                ignored: w.failure_policy == FailurePolicy::Ignore,
            };
        };
        let answer = match &hook.client {
            Err(e) => Err(format!("failed to call webhook: {e}")),
            Ok(client) => {
                let sent = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, */*")
                    .timeout(Duration::from_secs(w.timeout_seconds))
                    .body(serde_json::to_vec(&call.review).expect("review serialises"))
                    .send()
                    .await;
                match sent {
                    Err(e) => Err(format!(
                        "failed to call webhook: Post \"{url}\": {}",
                        error_chain(&e.without_url())
                    )),
                    Ok(resp) if resp.status() != 200 => Err(format!(
                        "failed to call webhook: the server responded with the status code {}",
                        resp.status().as_u16()
                    )),
                    Ok(resp) => match resp.bytes().await {
                        Err(e) => Err(format!(
                            "failed to call webhook: reading the answer: {}",
                            error_chain(&e)
                        )),
                        Ok(body) => Ok(body),
                    },
                }
            }
        };
        let body = match answer {
            Ok(b) => b,
            Err(reason) => {
                fail(&mut call, reason);
                call.took = started.elapsed();
                return (call, None);
            }
        };
        let verified = verify_response(&body, &uid, w.kind == WebhookKind::Mutating);
        let response = match verified {
            Ok(r) => r,
            Err(e) => {
                fail(&mut call, format!("received invalid webhook response: {e}"));
                call.took = started.elapsed();
                return (call, None);
            }
        };
        call.warnings = strings(&response["warnings"]);
        call.response = Some(response.clone());
        call.took = started.elapsed();
        if response["allowed"] != true {
            let (code, message) = denial(&w.name, &response["status"]);
            call.outcome = CallOutcome::Denied { code, message };
            return (call, None);
        }
        let Some(patch_b64) = response["patch"].as_str() else {
            return (call, None);
        };
        let applied = base64::engine::general_purpose::STANDARD
            .decode(patch_b64)
            .map_err(|e| format!("the patch is not standard base64: {e}"))
            .and_then(|bytes| {
                serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| format!("the patch is not JSON: {e}"))
            })
            .and_then(|v| {
                let p: json_patch::Patch = serde_json::from_value(v.clone())
                    .map_err(|e| format!("the patch is not a JSON Patch: {e}"))?;
                let mut obj = object.cloned().unwrap_or(Value::Null);
                json_patch::patch(&mut obj, &p).map_err(|e| e.to_string())?;
                Ok((v, obj))
            });
        match applied {
            Ok((v, obj)) => {
                call.outcome = CallOutcome::Allowed { patch: Some(v) };
                (call, Some(obj))
            }
            Err(e) => {
                call.outcome = CallOutcome::BadPatch {
                    error: format!(
                        "the patch of admission webhook \"{}\" does not apply: {e}",
                        w.name
                    ),
                };
                (call, None)
            }
        }
    }

    /// Decides one write as kube-apiserver's webhook admission plugins would; what
    /// [`WebhookStage::install`] runs for every write. Records the write in the log.
    pub async fn admit(&self, req: AdmissionRequest) -> AdmissionDecision {
        let op = req.operation();
        let mut record = AdmissionRecord {
            operation: op.to_string(),
            gvr: req.gvr.clone(),
            subresource: req.subresource.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
            user: req.user.username.clone(),
            dry_run: req.dry_run,
            calls: Vec::new(),
            result: StageResult::NotMatched,
        };
        let matching: Vec<&Hook> = self
            .inner
            .hooks
            .iter()
            .filter(|h| self.matches(&h.config, &req, op))
            .collect();
        let decision = self.run(&req, op, &matching, &mut record).await;
        record.result = match (&decision, matching.is_empty()) {
            (_, true) => StageResult::NotMatched,
            (AdmissionDecision::Deny { code, message }, _) => StageResult::Rejected {
                code: *code,
                message: message.clone(),
            },
            (AdmissionDecision::Mutate(_), _) => StageResult::Allowed { patched: true },
            (AdmissionDecision::Allow, _) => StageResult::Allowed { patched: false },
        };
        lock(&self.inner.log).push(record);
        decision
    }

    async fn run(
        &self,
        req: &AdmissionRequest,
        op: &str,
        matching: &[&Hook],
        record: &mut AdmissionRecord,
    ) -> AdmissionDecision {
        if req.dry_run
            && let Some(h) = matching.iter().find(|h| {
                matches!(
                    h.config.side_effects,
                    SideEffects::Some | SideEffects::Unknown
                )
            })
        {
            return AdmissionDecision::Deny {
                code: 400,
                message: format!(
                    "admission webhook \"{}\" does not support dry run",
                    h.config.name
                ),
            };
        }
        let mut object = req.object.clone();
        let mut patched = false;
        // Mutating webhooks, in order; then those with IfNeeded once more when a later one
        // changed the object.
        let mutating: Vec<&Hook> = matching
            .iter()
            .copied()
            .filter(|h| h.config.kind == WebhookKind::Mutating)
            .collect();
        let mut last_change: Option<usize> = None;
        let mut passes: Vec<usize> = (0..mutating.len()).collect();
        let mut second_pass = false;
        loop {
            for &i in &passes {
                let (call, new_obj) = self.call(mutating[i], req, op, object.as_ref()).await;
                let outcome = call.outcome.clone();
                record.calls.push(call);
                if let Some(d) = self.verdict(&outcome) {
                    return d;
                }
                if let Some(o) = new_obj
                    && Some(&o) != object.as_ref()
                {
                    object = Some(o);
                    patched = true;
                    last_change = Some(i);
                }
            }
            if second_pass {
                break;
            }
            second_pass = true;
            passes = match last_change {
                Some(j) => (0..j)
                    .filter(|&i| mutating[i].config.reinvoke_if_needed)
                    .collect(),
                None => Vec::new(),
            };
            if passes.is_empty() {
                break;
            }
        }
        // The validating webhooks see the object as it will be stored: for a status write the
        // status strategy keeps everything but `status` from the stored object.
        let validated = match (&object, &req.old_object, req.subresource.as_deref()) {
            (Some(new), Some(old), Some("status")) if patched => {
                let mut v = old.clone();
                match (v.as_object_mut(), new.get("status")) {
                    (Some(m), Some(s)) => {
                        m.insert("status".into(), s.clone());
                    }
                    (Some(m), None) => {
                        m.remove("status");
                    }
                    _ => {}
                }
                Some(v)
            }
            _ => object.clone(),
        };
        for h in matching
            .iter()
            .filter(|h| h.config.kind == WebhookKind::Validating)
        {
            let (call, _) = self.call(h, req, op, validated.as_ref()).await;
            let outcome = call.outcome.clone();
            record.calls.push(call);
            if let Some(d) = self.verdict(&outcome) {
                return d;
            }
        }
        match object {
            Some(o) if patched => AdmissionDecision::Mutate(o),
            _ => AdmissionDecision::Allow,
        }
    }

    /// The write's fate after one call, when the call decides it.
    fn verdict(&self, outcome: &CallOutcome) -> Option<AdmissionDecision> {
        match outcome {
            CallOutcome::Allowed { .. } | CallOutcome::Failed { ignored: true, .. } => None,
            CallOutcome::Denied { code, message } => Some(AdmissionDecision::Deny {
                code: *code,
                message: message.clone(),
            }),
            CallOutcome::Failed { error, .. } => Some(AdmissionDecision::Deny {
                code: 500,
                message: format!("Internal error occurred: {error}"),
            }),
            CallOutcome::BadPatch { error } => Some(AdmissionDecision::Deny {
                code: 500,
                message: format!("Internal error occurred: {error}"),
            }),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// Checks an answer like `VerifyAdmissionResponse` of kube-apiserver; returns `response`.
fn verify_response(body: &[u8], uid: &str, mutating: bool) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if v["apiVersion"] != "admission.k8s.io/v1" || v["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            v["apiVersion"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        ));
    }
    let r = v
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let got = r["uid"].as_str().unwrap_or("");
    if got != uid {
        return Err(format!("expected response.uid=\"{uid}\", got \"{got}\""));
    }
    if !r["allowed"].is_boolean() {
        return Err("response.allowed is missing or not a boolean".into());
    }
    let has_patch = r.get("patch").is_some_and(|p| !p.is_null());
    let patch_type = r["patchType"].as_str();
    if mutating {
        match (has_patch, patch_type) {
            (true, Some("JSONPatch")) | (false, None) => {}
            (true, Some(t)) => {
                return Err(format!("expected patchType \"JSONPatch\", got \"{t}\""));
            }
            (true, None) => {
                return Err("webhook returned response.patch but not response.patchType".into());
            }
            (false, Some(_)) => {
                return Err("webhook returned response.patchType but not response.patch".into());
            }
        }
    } else if has_patch || patch_type.is_some() {
        return Err(
            "validating webhook may not return response.patch or response.patchType".into(),
        );
    }
    Ok(r.clone())
}

/// `ToStatusErr` of kube-apiserver: the code (at least 400) and the prefixed message.
fn denial(webhook: &str, status: &Value) -> (u16, String) {
    let code = status["code"].as_u64().unwrap_or(0);
    let code = if code < 400 {
        400
    } else {
        code.min(599) as u16
    };
    let denied_by = format!("admission webhook \"{webhook}\" denied the request");
    let message = status["message"].as_str().unwrap_or("");
    let reason = status["reason"].as_str().unwrap_or("");
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    (code, message)
}

/// Counts of `calls` by webhook name and outcome (`allowed`, `patched`, `denied`, `failed`,
/// `ignored`, `bad-patch`), for summaries.
pub fn summarize(calls: &[WebhookCall]) -> BTreeMap<(String, &'static str), usize> {
    let mut m = BTreeMap::new();
    for c in calls {
        let k = match &c.outcome {
            CallOutcome::Allowed { patch: None } => "allowed",
            CallOutcome::Allowed { patch: Some(_) } => "patched",
            CallOutcome::Denied { .. } => "denied",
            CallOutcome::Failed { ignored: false, .. } => "failed",
            CallOutcome::Failed { ignored: true, .. } => "ignored",
            CallOutcome::BadPatch { .. } => "bad-patch",
        };
        *m.entry((c.webhook.clone(), k)).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ops: &[&str], resources: &[&str]) -> Rule {
        Rule {
            operations: ops.iter().map(|s| s.to_string()).collect(),
            api_groups: vec!["infrastructuremanager.kyma-project.io".into()],
            api_versions: vec!["v1".into()],
            resources: resources.iter().map(|s| s.to_string()).collect(),
            scope: "Namespaced".into(),
        }
    }

    #[test]
    fn rules_match_subresources_like_kube_apiserver() {
        let g = Gvr::runtimes();
        let status = rule(&["UPDATE"], &["runtimes/status"]);
        assert!(status.matches("UPDATE", &g, Some("status"), true));
        assert!(!status.matches("UPDATE", &g, None, true), "main resource");
        assert!(!status.matches("CREATE", &g, Some("status"), true));
        assert!(
            !status.matches("UPDATE", &g, Some("status"), false),
            "scope"
        );
        let main = rule(&["*"], &["runtimes"]);
        assert!(main.matches("UPDATE", &g, None, true));
        assert!(!main.matches("UPDATE", &g, Some("status"), true));
        let star = rule(&["UPDATE"], &["*"]);
        assert!(star.matches("UPDATE", &g, None, true));
        assert!(!star.matches("UPDATE", &g, Some("status"), true));
        assert!(rule(&["UPDATE"], &["*/status"]).matches("UPDATE", &g, Some("status"), true));
        assert!(rule(&["UPDATE"], &["runtimes/*"]).matches("UPDATE", &g, Some("status"), true));
        assert!(rule(&["UPDATE"], &["*/*"]).matches("UPDATE", &g, None, true));
        assert!(!status.matches("UPDATE", &Gvr::secrets(), Some("status"), true));
    }

    #[test]
    fn denials_are_worded_like_to_status_err() {
        let w = "w.example.io";
        assert_eq!(
            denial(w, &json!({"code": 403, "message": "no"})),
            (
                403,
                "admission webhook \"w.example.io\" denied the request: no".into()
            )
        );
        assert_eq!(
            denial(w, &json!({"code": 200, "reason": "Bad"})),
            (
                400,
                "admission webhook \"w.example.io\" denied the request: Bad".into()
            )
        );
        assert_eq!(
            denial(w, &Value::Null),
            (
                400,
                "admission webhook \"w.example.io\" denied the request without explanation".into()
            )
        );
    }

    #[test]
    fn answers_are_verified() {
        let ok = |r: Value| {
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": r})).unwrap()
        };
        assert!(verify_response(&ok(json!({"uid": "u", "allowed": true})), "u", false).is_ok());
        let e = verify_response(&ok(json!({"uid": "x", "allowed": true})), "u", false).unwrap_err();
        assert_eq!(e, "expected response.uid=\"u\", got \"x\"");
        assert!(verify_response(&ok(json!({"uid": "u"})), "u", false).is_err());
        let patch = json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"});
        assert!(verify_response(&ok(patch.clone()), "u", true).is_ok());
        assert!(
            verify_response(&ok(patch), "u", false).is_err(),
            "validating with a patch"
        );
        let typ = json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "Merge"});
        assert!(verify_response(&ok(typ), "u", true).is_err());
        assert!(verify_response(b"{}", "u", false).is_err());
        assert!(verify_response(b"nope", "u", false).is_err());
    }

    #[test]
    fn strategic_merge_merges_webhooks_by_name() {
        let mut doc = json!({"kind": "X", "metadata": {"name": "a", "labels": {"k": "v"}},
            "webhooks": [{"name": "one", "timeoutSeconds": 5, "rules": [1]}, {"name": "two"}]});
        let patch = json!({"metadata": {"annotations": {"x": "y"}, "labels": {"k": null}},
            "webhooks": [{"name": "two", "failurePolicy": "Ignore"}, {"name": "three"}]});
        strategic_merge(&mut doc, &patch, "");
        assert_eq!(
            doc,
            json!({"kind": "X", "metadata": {"name": "a", "labels": {}, "annotations": {"x": "y"}},
                "webhooks": [{"name": "one", "timeoutSeconds": 5, "rules": [1]},
                    {"name": "two", "failurePolicy": "Ignore"}, {"name": "three"}]})
        );
    }

    #[test]
    fn fresh_uids_differ() {
        let stage = WebhookStage::new(WebhookConfigurations::default(), ([127, 0, 0, 1], 1).into());
        let a = stage.fresh_uid();
        let b = stage.fresh_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36, "{a}");
    }
}
