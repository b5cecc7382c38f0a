//! Requests of one client counted by the kube-apiserver that takes them in, by verb and
//! resource: `apiserver_request_total` has no user label, so [`FlowCounter::install`] gives the
//! client's requests FlowSchemas of their own (API Priority and Fairness), one per verb and
//! resource, and reads their `apiserver_flowcontrol_dispatched_requests_total`. The schemas are
//! matched before every shipped one but `exempt` and send the requests to the priority level
//! the shipped schemas would (`workload-low` for a ServiceAccount, `global-default` for a
//! user), so they are served as before, only counted. Requests to an aggregated API
//! (gardener-apiserver's Shoots) are counted too: flow control runs before kube-apiserver
//! proxies them.

use anyhow::{Context, ensure};
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use testenv::controlplane::ControlPlane;

/// Requests by (verb as RBAC names it, `resource[/subresource]`); a resource no schema names
/// is `*`, a non-resource request is (`*`, `non-resource`).
pub type ByResource = BTreeMap<(String, String), f64>;

/// The verbs a request to a resource has (kube-apiserver's `RequestInfo`).
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// Before every shipped schema but `exempt` (1) and `probes` (2); the catch-all of a verb after
/// its named resources.
const PRECEDENCE: i32 = 50;
const PRECEDENCE_OTHER: i32 = 60;

/// How long kube-apiserver may take to take the schemas in.
const DIGEST_LIMIT: Duration = Duration::from_secs(120);

/// The FlowSchemas of one client on one kube-apiserver.
pub struct FlowCounter {
    http: reqwest::Client,
    url: String,
    /// By FlowSchema name: (verb, resource).
    schemas: HashMap<String, (String, String)>,
}

impl FlowCounter {
    /// Creates the schemas `kim-bench-<tag>-…` for `subjects` (a list of FlowSchema subjects)
    /// on `cp`: one
    /// per verb and each of `resources`, one per verb for any other resource, one for
    /// non-resource requests, all to priority level `level`; returns once kube-apiserver has
    /// taken every one in (each schema's `Dangling` condition `False`).
    ///
    /// # Errors
    /// kube-apiserver refuses a schema or does not take them in within two minutes.
    pub async fn install(
        cp: &ControlPlane,
        tag: &str,
        subjects: Value,
        level: &str,
        resources: &[&str],
    ) -> anyhow::Result<FlowCounter> {
        let api = Api::<FlowSchema>::all(cp.admin().await);
        let mut schemas = HashMap::new();
        let mut docs = Vec::new();
        for verb in VERBS {
            for r in resources.iter().copied().chain(["*"]) {
                let name = format!("kim-bench-{tag}-{verb}-{}", schema_part(r));
                let rule = json!({"verbs": [verb], "apiGroups": ["*"], "resources": [r],
                                  "namespaces": ["*"], "clusterScope": true});
                let precedence = if r == "*" {
                    PRECEDENCE_OTHER
                } else {
                    PRECEDENCE
                };
                docs.push(schema(
                    &name,
                    level,
                    precedence,
                    &subjects,
                    json!({"resourceRules": [rule]}),
                ));
                schemas.insert(name, (verb.to_string(), r.to_string()));
            }
        }
        let name = format!("kim-bench-{tag}-non-resource");
        let rule = json!({"verbs": ["*"], "nonResourceURLs": ["*"]});
        docs.push(schema(
            &name,
            level,
            PRECEDENCE_OTHER,
            &subjects,
            json!({"nonResourceRules": [rule]}),
        ));
        schemas.insert(name, ("*".into(), "non-resource".into()));
        for doc in docs {
            let fs: FlowSchema = serde_json::from_value(doc).context("a FlowSchema")?;
            api.create(&PostParams::default(), &fs)
                .await
                .with_context(|| format!("creating FlowSchema {:?}", fs.metadata.name))?;
        }
        let t0 = Instant::now();
        loop {
            let digested = api
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|fs| {
                    fs.metadata
                        .name
                        .as_ref()
                        .is_some_and(|n| schemas.contains_key(n))
                        && dangling_false(fs)
                })
                .count();
            if digested == schemas.len() {
                break;
            }
            ensure!(
                t0.elapsed() < DIGEST_LIMIT,
                "kube-apiserver took in {digested} of {} FlowSchemas kim-bench-{tag}-* within {DIGEST_LIMIT:?}",
                schemas.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(FlowCounter {
            http: cp.http_client(cp.admin_cert())?,
            url: format!("{}/metrics", cp.url()),
            schemas,
        })
    }

    /// The client's requests kube-apiserver dispatched so far.
    ///
    /// # Errors
    /// `/metrics` cannot be read.
    pub async fn scrape(&self) -> anyhow::Result<ByResource> {
        Ok(self.read(&self.scrape_text().await?))
    }

    /// kube-apiserver's `/metrics` text, for [`FlowCounter::read`] by every counter of it.
    ///
    /// # Errors
    /// `/metrics` cannot be read.
    pub async fn scrape_text(&self) -> anyhow::Result<String> {
        metrics_text(&self.http, &self.url).await
    }

    /// The dispatched counts of this counter's schemas in a `/metrics` text.
    pub fn read(&self, text: &str) -> ByResource {
        const NAME: &str = "apiserver_flowcontrol_dispatched_requests_total{";
        let mut out = ByResource::new();
        for line in text.lines().filter(|l| l.starts_with(NAME)) {
            let Some(schema) = label(line, "flow_schema") else {
                continue;
            };
            let (Some(key), Some(v)) = (
                self.schemas.get(schema),
                line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()),
            ) else {
                continue;
            };
            *out.entry(key.clone()).or_default() += v;
        }
        out
    }
}

/// The text of a server's `/metrics` at `url` (`https://…/metrics`), read with `http`.
///
/// # Errors
/// The server does not answer, or answers an error status.
pub async fn metrics_text(http: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let answer = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    Ok(answer.error_for_status()?.text().await?)
}

/// `after − before`, zeros left out.
pub fn minus(after: &ByResource, before: &ByResource) -> ByResource {
    let mut out: ByResource = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect();
    out.retain(|_, v| *v != 0.0);
    out
}

/// The subject of a ServiceAccount.
pub fn service_account(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}})
}

/// The subject of a user.
pub fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

/// The subject of a group.
pub fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}

fn schema(name: &str, level: &str, precedence: i32, subjects: &Value, rules: Value) -> Value {
    let mut rule = json!({"subjects": subjects});
    if let (Some(r), Some(add)) = (rule.as_object_mut(), rules.as_object()) {
        r.extend(add.clone());
    }
    json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [rule],
        },
    })
}

/// kube-apiserver writes `Dangling: False` once its flow control has digested a schema whose
/// priority level exists. Read as JSON: the condition's field types differ between versions.
fn dangling_false(fs: &FlowSchema) -> bool {
    let status = serde_json::to_value(&fs.status).unwrap_or_default();
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Dangling" && c["status"] == "False")
}

/// A resource as part of an object name: `runtimes/status` → `runtimes.status`, `*` → `other`.
fn schema_part(resource: &str) -> String {
    if resource == "*" {
        return "other".into();
    }
    resource.replace('/', ".")
}

/// The value of label `name` in a Prometheus text line (values here have no escaped quotes).
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let end = line[start..].find('"')?;
    Some(&line[start..start + end])
}
