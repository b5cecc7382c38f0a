//! What `kim controller` costs the API servers, counted on the servers' side, on a control
//! plane of this module's own (with the REAL Gardener API aggregated behind it, a simulated
//! gardenlet and one real runtime cluster shared by the Shoots:
//! [`crate::support::real_controller::RealEnv`]), so that no other test moves its counters:
//!
//! - provisioning [`RUNTIMES`] Runtimes of the sample `aws-minimal.yaml` to `Ready` costs the
//!   control cluster at most [`PER_RUNTIME`] requests per Runtime by the controller on
//!   `runtimes`, `runtimes/status`, `secrets` and `events` (the LISTs and WATCHes of its
//!   informers left out), and no request of anyone on `runtimes`, `secrets` or `shoots` is
//!   answered 409 Conflict;
//! - then reconciles of those Runtimes, `Ready` for their generation, triggered by an
//!   annotation (no spec change), issue no request at all: none to kube-apiserver, none to
//!   gardener-apiserver, none to the runtime cluster. The window ends once the controller's
//!   `kim_controller_reconciles_total` shows that reconciles which started inside it have
//!   finished (see the comment at the two rounds of annotations).
//!
//! Who sent a request: `apiserver_request_total` has no user label, so kube-apiserver's API
//! Priority and Fairness tells: FlowSchemas of the test's own (one per identity, resource and
//! verb, matched before the shipped ones but `exempt` and `probes`) classify the requests of
//! the controller's ServiceAccount (control cluster), of its garden user [`GARDEN_USER`]
//! (Shoots, their admin kubeconfigs and ConfigMaps, proxied to gardener-apiserver by
//! kube-apiserver's aggregator, which classifies them too), of the test's own user that writes
//! the annotations, and, in the runtime cluster, of the admin kubeconfig's user;
//! `apiserver_flowcontrol_dispatched_requests_total{flow_schema}` counts them. The answers'
//! codes come from `apiserver_request_total` of kube-apiserver and of gardener-apiserver (which
//! counts the Shoot requests it serves; kube-apiserver's metric counts only what it serves
//! itself).

use crate::support::real::NS;
use crate::support::real_controller::*;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::{self, Timestamp};
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testenv::controlplane::{ClientCert, ControlPlane};
use testenv::gardenlet::Clusters;

/// Runtimes provisioned side by side: the figure asserted is their average.
const RUNTIMES: usize = 3;
/// Control-cluster requests the controller may send per provisioned Runtime.
const PER_RUNTIME: usize = 8;
/// The user (a client certificate) that writes the annotations of the no-op reconcile, so that
/// its requests are told apart from everyone else's.
const TESTER: &str = "kim-load-tester";
/// Label of every FlowSchema this module creates.
const FLOW_LABEL: &str = "kim-test/load";
/// Prefix of their names (`kim-load.<who>.<resource>.<verb>`).
const FLOW_PREFIX: &str = "kim-load.";
/// The shipped priority level the FlowSchemas send their requests to (`Limited`, far from
/// saturated here: the classification only counts).
const PRIORITY_LEVEL: &str = "workload-high";
/// The verbs told apart per resource (RBAC's names, as APF matches them).
const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// The control-cluster resources of the per-Runtime budget.
const CONTROL_RESOURCES: [&str; 4] = ["runtimes", "runtimes/status", "secrets", "events"];

// ---- metrics text ----

/// Labels of one series, sorted.
type Labels = BTreeMap<String, String>;
/// Series (metric name, labels) → value.
type Metrics = BTreeMap<(String, Labels), f64>;
/// Series → how much a counter moved (counters count whole requests).
type Deltas = BTreeMap<(String, Labels), i64>;

/// The samples of `names` in a Prometheus text exposition (`# ` lines skipped, label values
/// unescaped: `\\`, `\"`, `\n`).
fn parse_metrics(text: &str, names: &[&str]) -> Metrics {
    let mut out = Metrics::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(end) = line.find(['{', ' ']) else {
            continue;
        };
        let name = &line[..end];
        if !names.contains(&name) {
            continue;
        }
        let (labels, rest) = if line[end..].starts_with('{') {
            match parse_labels(&line[end + 1..]) {
                Some(parsed) => parsed,
                None => panic!("unparsable series: {line}"),
            }
        } else {
            (Labels::new(), &line[end..])
        };
        let value = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a series without value: {line}"));
        out.insert((name.to_string(), labels), value);
    }
    out
}

/// The labels of `s` (what follows `{`) and the text after the closing `}`.
fn parse_labels(s: &str) -> Option<(Labels, &str)> {
    let mut labels = Labels::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_string(), value);
        rest = &after[end + 1..];
    }
}

/// `after - before` of every counter that moved.
fn delta(before: &Metrics, after: &Metrics) -> Deltas {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = (v - before.get(k).copied().unwrap_or(0.0)).round() as i64;
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// The series the test reads from both API servers.
const SERVER_METRICS: [&str; 2] = [
    "apiserver_request_total",
    "apiserver_flowcontrol_dispatched_requests_total",
];

/// kube-apiserver's and gardener-apiserver's counters at one moment.
struct Snapshot {
    kube: Metrics,
    gardener: Metrics,
    /// The runtime clusters' kube-apiservers, summed; `None`: not scraped.
    runtime: Option<Metrics>,
}

/// GET `url` with `client`; panics naming `what` unless 200.
async fn get_text(client: &reqwest::Client, url: &str, what: &str) -> String {
    let answer = client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("scraping {what}: {e}"));
    let status = answer.status();
    let body = answer
        .text()
        .await
        .unwrap_or_else(|e| panic!("{what}'s body: {e}"));
    assert!(status.is_success(), "scraping {what}: {status}: {body}");
    body
}

/// Scrapes `/metrics` of kube-apiserver and of gardener-apiserver as the admin, and of the
/// kube-apiservers of `runtime` clusters, if any.
async fn snapshot(cp: &ControlPlane, runtime: Option<&[Arc<ControlPlane>]>) -> Snapshot {
    let client = cp.http_client(cp.admin_cert()).expect("an HTTPS client");
    let gardener = cp.gardener_url().expect("gardener-apiserver runs");
    let kube = get_text(&client, &format!("{}/metrics", cp.url()), "kube-apiserver").await;
    let garden = get_text(
        &client,
        &format!("{gardener}/metrics"),
        "gardener-apiserver",
    )
    .await;
    let mut summed: Option<Metrics> = None;
    for cluster in runtime.into_iter().flatten() {
        let client = cluster
            .http_client(cluster.admin_cert())
            .expect("an HTTPS client");
        let text = get_text(
            &client,
            &format!("{}/metrics", cluster.url()),
            "a runtime cluster's kube-apiserver",
        )
        .await;
        let sum = summed.get_or_insert_default();
        for (k, v) in parse_metrics(&text, &SERVER_METRICS) {
            *sum.entry(k).or_default() += v;
        }
    }
    Snapshot {
        kube: parse_metrics(&kube, &SERVER_METRICS),
        gardener: parse_metrics(&garden, &SERVER_METRICS),
        runtime: runtime.map(|_| summed.unwrap_or_default()),
    }
}

/// `kim_controller_reconciles_total` of the controller whose `/metrics` is on `addr`.
async fn reconciles(addr: &str) -> u64 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let text = get_text(&client, &format!("http://{addr}/metrics"), "kim controller").await;
    let name = "kim_controller_reconciles_total";
    parse_metrics(&text, &[name])
        .get(&(name.to_string(), Labels::new()))
        .map(|v| v.round() as u64)
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

// ---- what the servers counted ----

/// One row of `apiserver_request_total`: verb (`GET`, `LIST`, `WATCH`, `POST`, `PUT`,
/// `PATCH`, `APPLY`, `DELETE`, …), group, resource, subresource, code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Req {
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    code: String,
}

impl std::fmt::Display for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {group} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        write!(f, " → {}", self.code)
    }
}

/// The `apiserver_request_total` rows of `m`.
fn requests(m: &Deltas) -> BTreeMap<Req, i64> {
    m.iter()
        .filter(|((name, _), _)| name == "apiserver_request_total")
        .map(|((_, l), v)| {
            let get = |k: &str| l.get(k).cloned().unwrap_or_default();
            let req = Req {
                verb: get("verb"),
                group: get("group"),
                resource: get("resource"),
                subresource: get("subresource"),
                code: get("code"),
            };
            (req, *v)
        })
        .collect()
}

/// Whether a row is on one of kim's resources: Runtimes (any subresource), Secrets, Events,
/// Shoots (any subresource).
fn kims(r: &Req) -> bool {
    matches!(
        r.resource.as_str(),
        "runtimes" | "secrets" | "events" | "shoots"
    )
}

/// The 409 answers among `rows` on Runtimes, Secrets and Shoots.
fn conflicts(rows: &BTreeMap<Req, i64>) -> i64 {
    rows.iter()
        .filter(|(r, _)| {
            r.code == "409" && matches!(r.resource.as_str(), "runtimes" | "secrets" | "shoots")
        })
        .map(|(_, n)| n)
        .sum()
}

/// One FlowSchema of the test: the requests of `who` with `verb` on `resource` (`*`: every
/// verb; resource `*`: the identity's requests no other schema of it matched).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Flow {
    who: &'static str,
    resource: &'static str,
    verb: &'static str,
}

impl Flow {
    fn name(&self) -> String {
        let resource = if self.resource == "*" {
            "other".to_string()
        } else {
            self.resource.replace('/', "-")
        };
        let verb = if self.verb == "*" { "any" } else { self.verb };
        format!("{FLOW_PREFIX}{}.{resource}.{verb}", self.who)
    }
}

impl std::fmt::Display for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.who, self.verb, self.resource)
    }
}

/// The identities told apart: `kcp` (the controller's ServiceAccount), `garden`
/// ([`GARDEN_USER`]), `tester` ([`TESTER`]) on the control plane, `runtime` (kim in a runtime
/// cluster, with the admin kubeconfig Gardener issued); their subjects in a FlowSchema.
fn subject(who: &str) -> Value {
    match who {
        "kcp" => json!({"kind": "ServiceAccount",
                        "serviceAccount": {"namespace": CONTROLLER_SA.0, "name": CONTROLLER_SA.1}}),
        "garden" => json!({"kind": "User", "user": {"name": GARDEN_USER}}),
        "tester" => json!({"kind": "User", "user": {"name": TESTER}}),
        // What the admin kubeconfigs of shoots/adminkubeconfig authenticate kim as.
        "runtime" => json!({"kind": "User",
                            "user": {"name": format!("gardener.cloud:admin:{GARDEN_USER}")}}),
        other => panic!("unknown identity {other}"),
    }
}

/// API groups of a resource of the FlowSchemas.
fn groups(resource: &str) -> &'static [&'static str] {
    match resource {
        "runtimes" | "runtimes/status" => &["infrastructuremanager.kyma-project.io"],
        "events" => &["", "events.k8s.io"],
        "leases" => &["coordination.k8s.io"],
        "shoots" | "shoots/adminkubeconfig" | "shoots/status" => &["core.gardener.cloud"],
        "*" => &["*"],
        _ => &[""],
    }
}

/// Every FlowSchema of the test: per identity, its resources by verb, and the rest.
fn flows() -> Vec<Flow> {
    let mut out = Vec::new();
    let per_verb = |who, resources: &[&'static str], out: &mut Vec<Flow>| {
        for resource in resources {
            for verb in VERBS {
                out.push(Flow {
                    who,
                    resource,
                    verb,
                });
            }
        }
    };
    per_verb("kcp", &CONTROL_RESOURCES, &mut out);
    per_verb(
        "garden",
        &[
            "shoots",
            "shoots/adminkubeconfig",
            "shoots/status",
            "configmaps",
        ],
        &mut out,
    );
    // The leader election's renewals: the controller's, none of a reconcile's.
    out.push(Flow {
        who: "kcp",
        resource: "leases",
        verb: "*",
    });
    out.push(Flow {
        who: "tester",
        resource: "runtimes",
        verb: "patch",
    });
    for who in ["kcp", "garden", "tester"] {
        out.push(Flow {
            who,
            resource: "*",
            verb: "*",
        });
    }
    out
}

/// The FlowSchemas of a runtime cluster: kim's watches (none expected) and everything else.
fn runtime_flows() -> Vec<Flow> {
    ["watch", "*"]
        .map(|verb| Flow {
            who: "runtime",
            resource: "*",
            verb,
        })
        .to_vec()
}

/// The FlowSchema object of `flow`: matched before the shipped schemas but `exempt`
/// (`system:masters`, precedence 1) and `probes` (2), the rest of an identity after its
/// specific ones.
fn flow_schema(flow: &Flow) -> FlowSchema {
    let rest = flow.resource == "*" && flow.verb == "*";
    let precedence = if rest { 20 } else { 10 };
    let mut rule = json!({"subjects": [subject(flow.who)]});
    rule["resourceRules"] = json!([{
        "verbs": [flow.verb], "apiGroups": groups(flow.resource), "resources": [flow.resource],
        "namespaces": ["*"], "clusterScope": true,
    }]);
    if rest {
        rule["nonResourceRules"] = json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": flow.name(), "labels": {FLOW_LABEL: "true"}},
        "spec": {
            "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [rule],
        },
    }))
    .expect("a FlowSchema")
}

/// Creates the FlowSchemas of `all` in `cp` and waits until its kube-apiserver's APF
/// configuration took them in: it writes each one's `Dangling` condition (`False`: its
/// priority level exists) once it has digested it.
async fn install_flows(cp: &ControlPlane, all: &[Flow]) {
    let api: Api<FlowSchema> = Api::all(cp.admin().await);
    for flow in all {
        api.create(&PostParams::default(), &flow_schema(flow))
            .await
            .unwrap_or_else(|e| panic!("creating FlowSchema {}: {e}", flow.name()));
    }
    let digested = crate::support::eventually(LIMIT, || {
        let api = api.clone();
        async move {
            let list = api
                .list(&ListParams::default().labels(FLOW_LABEL))
                .await
                .ok()?;
            // As JSON: the condition's field types differ between Kubernetes versions.
            let done = list.items.iter().all(|fs| {
                let status = serde_json::to_value(&fs.status).unwrap_or_default();
                status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Dangling" && c["status"] == "False")
            });
            (done && list.items.len() == all.len()).then_some(())
        }
    })
    .await;
    assert!(
        digested.is_some(),
        "kube-apiserver did not take in the test's FlowSchemas within {LIMIT:?}"
    );
}

/// The requests APF dispatched per [`Flow`] in `m`.
fn dispatched(m: &Deltas) -> BTreeMap<Flow, i64> {
    let by_name: BTreeMap<String, Flow> = flows()
        .into_iter()
        .chain(runtime_flows())
        .map(|f| (f.name(), f))
        .collect();
    m.iter()
        .filter(|((name, _), _)| name == "apiserver_flowcontrol_dispatched_requests_total")
        .filter_map(|((_, l), v)| Some((by_name.get(l.get("flow_schema")?)?.clone(), *v)))
        .fold(BTreeMap::new(), |mut acc, (f, v)| {
            *acc.entry(f).or_default() += v;
            acc
        })
}

/// What moved between two snapshots: APF's count per flow (kube-apiserver), and the
/// `apiserver_request_total` rows of kube-apiserver and of gardener-apiserver.
struct Window {
    flows: BTreeMap<Flow, i64>,
    kube: BTreeMap<Req, i64>,
    gardener: BTreeMap<Req, i64>,
    /// APF's count per flow in the runtime clusters, when both ends scraped them.
    runtime: Option<BTreeMap<Flow, i64>>,
}

impl Window {
    fn between(before: &Snapshot, after: &Snapshot) -> Window {
        let kube = delta(&before.kube, &after.kube);
        let runtime = match (&before.runtime, &after.runtime) {
            (Some(b), Some(a)) => Some(dispatched(&delta(b, a))),
            _ => None,
        };
        Window {
            flows: dispatched(&kube),
            kube: requests(&kube),
            gardener: requests(&delta(&before.gardener, &after.gardener)),
            runtime,
        }
    }

    /// The controller's requests on the control cluster's [`CONTROL_RESOURCES`], its
    /// informers' LISTs and WATCHes left out.
    fn control(&self) -> i64 {
        self.sum(|f| {
            f.who == "kcp"
                && CONTROL_RESOURCES.contains(&f.resource)
                && !matches!(f.verb, "list" | "watch")
        })
    }

    fn sum(&self, pick: impl Fn(&Flow) -> bool) -> i64 {
        self.flows
            .iter()
            .filter(|(f, _)| pick(f))
            .map(|(_, n)| n)
            .sum()
    }

    /// The 409 answers on Runtimes, Secrets and Shoots, of both servers.
    fn conflicts(&self) -> i64 {
        conflicts(&self.kube) + conflicts(&self.gardener)
    }

    /// Every count that moved, one a line.
    fn breakdown(&self) -> String {
        let mut out = String::from("  by identity (APF FlowSchemas of kube-apiserver):\n");
        for (f, n) in &self.flows {
            let _ = writeln!(out, "    {f}: {n}");
        }
        if let Some(runtime) = &self.runtime {
            let _ = writeln!(out, "  by identity in the runtime clusters:");
            for (f, n) in runtime {
                let _ = writeln!(out, "    {f}: {n}");
            }
        }
        for (server, rows) in [
            ("kube-apiserver", &self.kube),
            ("gardener-apiserver", &self.gardener),
        ] {
            let _ = writeln!(
                out,
                "  apiserver_request_total of {server} on runtimes, secrets, events, shoots:"
            );
            for (r, n) in rows.iter().filter(|(r, _)| kims(r)) {
                let _ = writeln!(out, "    {r}: {n}");
            }
        }
        out
    }
}

// ---- the environment ----

/// Grants [`TESTER`] `patch` on the Runtimes of [`NS`] and waits until RBAC lets it
/// patch; returns its client.
async fn tester(env: &RealEnv) -> kube::Client {
    let admin = env.stack.cp.admin().await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": TESTER, "namespace": NS},
        "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"],
                   "resources": ["runtimes"], "verbs": ["patch"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &role)
        .await
        .expect("the tester's Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": TESTER, "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TESTER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TESTER}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin, NS)
        .create(&PostParams::default(), &binding)
        .await
        .expect("the tester's RoleBinding");
    let cert: ClientCert = env.stack.cp.user(TESTER, &[]);
    let client = env.stack.cp.client(&cert).await;
    let access = Access {
        verb: "patch",
        group: "infrastructuremanager.kyma-project.io",
        resource: "runtimes",
        namespace: NS,
        name: None,
    };
    let allowed = crate::support::eventually(LIMIT, || {
        let client = client.clone();
        async move { Kcp::can(&client, &access).await.then_some(()) }
    })
    .await;
    assert!(
        allowed.is_some(),
        "{TESTER} may not patch Runtimes within {LIMIT:?}"
    );
    client
}

/// The latest `lastTransitionTime` of the conditions of `rt`.
fn last_transition(rt: &DynamicObject) -> Timestamp {
    rt.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["lastTransitionTime"].as_str()?.parse::<Timestamp>().ok())
        .max()
        .unwrap_or_else(|| panic!("a Ready Runtime without conditions: {:?}", rt.data))
}

/// Waits until every Runtime of `ready` has an Event about it created no earlier than a second
/// before the last transition of its conditions: the controller publishes Events in the
/// background after the status write they report, and the one of a Runtime entering `Ready`
/// is the last of a provisioning. A second earlier, as both times are whole seconds and the
/// stored transition can be the later one (seen: a condition's `lastTransitionTime` …:28, the
/// Event of that write created at …:27, its `eventTime` …:27.95). Panics after [`LIMIT`]
/// listing what there is.
async fn wait_ready_events(env: &RealEnv, ready: &[DynamicObject]) {
    let events: Api<Event> = Api::namespaced(env.stack.cp.admin().await, NS);
    let wanted: Vec<(String, String, Timestamp)> = ready
        .iter()
        .map(|rt| {
            let uid = rt.metadata.uid.clone().expect("uid");
            let name = rt.metadata.name.clone().expect("name");
            (name, uid, last_transition(rt))
        })
        .collect();
    let recent = |e: &Event, uid: &str, since: Timestamp| {
        e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid)
            && e.metadata.creation_timestamp.as_ref().is_some_and(|t| {
                t.0.checked_add(jiff::SignedDuration::from_secs(1))
                    .is_ok_and(|t| t >= since)
            })
    };
    let seen = crate::support::eventually(LIMIT, || {
        let (events, wanted) = (events.clone(), wanted.clone());
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            wanted
                .iter()
                .all(|(_, uid, since)| list.items.iter().any(|e| recent(e, uid, *since)))
                .then_some(())
        }
    })
    .await;
    if seen.is_none() {
        let list = events.list(&ListParams::default()).await;
        let all: Vec<String> = list
            .iter()
            .flat_map(|l| l.items.iter())
            .map(|e| {
                format!(
                    "{:?} {:?} {:?} {:?} created {:?}",
                    e.regarding.as_ref().and_then(|r| r.name.clone()),
                    e.regarding.as_ref().and_then(|r| r.uid.clone()),
                    e.reason,
                    e.note,
                    e.metadata.creation_timestamp
                )
            })
            .collect();
        panic!(
            "no Event about each Runtime since it turned Ready (name, uid, last transition): \
             {wanted:?} within {LIMIT:?}; Events: {all:#?}"
        );
    }
}

/// Clients of the runtime clusters of Runtimes `names` with the kubeconfigs kim stored in
/// their Secrets (`kubeconfig-<name>`, key `config`).
async fn kim_in_runtime_clusters(env: &RealEnv, names: &[String]) -> Vec<kube::Client> {
    let secrets: Api<Secret> = Api::namespaced(env.stack.cp.admin().await, NS);
    let mut out = Vec::new();
    for name in names {
        let secret = secrets
            .get(&format!("kubeconfig-{name}"))
            .await
            .unwrap_or_else(|e| panic!("the kubeconfig Secret of {name}: {e}"));
        let kubeconfig = secret
            .data
            .as_ref()
            .and_then(|d| d.get("config"))
            .map(|v| String::from_utf8(v.0.clone()).expect("a UTF-8 kubeconfig"))
            .unwrap_or_else(|| panic!("the Secret of {name} holds no kubeconfig"));
        out.push(env.stack.cp.client_from_kubeconfig(&kubeconfig).await);
    }
    out
}

/// Patches annotation `kim-test/touched: <round>` of Runtime `name` as [`TESTER`] (a merge
/// patch: no spec change, no resourceVersion, never a 409).
async fn touch(runtimes: &Api<DynamicObject>, name: &str, round: usize) {
    let patch = json!({"metadata": {"annotations": {"kim-test/touched": round.to_string()}}});
    runtimes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotating Runtime {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_answers_no_409_and_costs_at_most_8_control_cluster_requests_then_a_reconcile_of_a_ready_runtime_issues_no_request()
 {
    let started = Instant::now();
    let env = RealEnv::start_with(Clusters::Pool(1)).await;
    let cp = &env.stack.cp;
    install_flows(cp, &flows()).await;
    let tester = tester(&env).await;
    let as_tester: Api<DynamicObject> =
        Api::namespaced_with(tester, NS, &crate::support::real::runtime_resource());

    // ---- provisioning ----
    let at_start = snapshot(cp, None).await;
    let mut controller = env.spawn_controller("info");
    let metrics_addr = controller
        .logged("metrics_addr", LIMIT)
        .await
        .unwrap_or_else(|e| panic!("kim controller: {e}"));
    let names: Vec<String> = (1..=RUNTIMES).map(|i| format!("load-{i}")).collect();
    let created_at = Instant::now();
    let mut generations = Vec::new();
    for name in &names {
        let created = env.create_runtime(name).await;
        generations.push(created.metadata.generation.expect("a generation"));
    }
    let mut ready = Vec::new();
    for (name, generation) in names.iter().zip(&generations) {
        let rt = env
            .wait_runtime(
                name,
                "Ready for its generation",
                ready_at_generation(*generation),
                &controller,
            )
            .await
            .expect("the Runtime");
        ready.push(rt);
    }
    let provisioned_in = created_at.elapsed();
    wait_ready_events(&env, &ready).await;
    // The runtime clusters (one, shared by the Shoots): kim's identity there is told apart
    // too. A client per Runtime with the kubeconfig kim stored sends one request of kim's
    // identity in the window, which shows that the classification there works.
    let mut clusters: Vec<Arc<ControlPlane>> = Vec::new();
    for name in &names {
        let cluster = env
            .gardenlet
            .cluster(name)
            .await
            .expect("the Shoot's runtime cluster");
        if !clusters.iter().any(|c| c.url() == cluster.url()) {
            clusters.push(cluster);
        }
    }
    for cluster in &clusters {
        install_flows(cluster, &runtime_flows()).await;
    }
    let as_kim = kim_in_runtime_clusters(&env, &names).await;
    let after_provisioning = snapshot(cp, Some(&clusters)).await;
    let provisioning = Window::between(&at_start, &after_provisioning);

    // ---- a reconcile of each Ready Runtime ----
    // Two rounds: an annotation on each Runtime, then wait until RUNTIMES more reconciles
    // have finished (each patch is followed by a reconcile that starts after it). A reconcile
    // counted here that started before the window opened (`after_provisioning`) was running
    // when it opened, and kube-runtime runs one reconcile per object at a time: at most
    // RUNTIMES of them. So at least RUNTIMES of the 2 × RUNTIMES counted ran entirely within
    // the window.
    for round in 1..=2 {
        let before = reconciles(&metrics_addr).await;
        for name in &names {
            touch(&as_tester, name, round).await;
        }
        let wanted = before + RUNTIMES as u64;
        let reached = crate::support::eventually(LIMIT, || {
            let addr = metrics_addr.clone();
            async move { (reconciles(&addr).await >= wanted).then_some(()) }
        })
        .await;
        assert!(
            reached.is_some(),
            "round {round}: the controller did not finish {RUNTIMES} reconciles after the \
             annotation patches within {LIMIT:?} (kim_controller_reconciles_total {} → {}; it \
             must reconcile on every change of a Runtime)\ncontroller output:\n{}\n{}",
            before,
            reconciles(&metrics_addr).await,
            tail(&controller.stdout()),
            tail(&controller.stderr())
        );
    }
    for client in &as_kim {
        Api::<SelfSubjectReview>::all(client.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .expect("a SelfSubjectReview with a stored kubeconfig");
    }
    let after_noop = snapshot(cp, Some(&clusters)).await;
    let noop = Window::between(&after_provisioning, &after_noop);
    let (out, err) = controller.terminate(Duration::from_secs(20));

    // ---- the figures ----
    let n = RUNTIMES as i64;
    let control = provisioning.control();
    let status_writes = provisioning.sum(|f| {
        f.who == "kcp" && f.resource == "runtimes/status" && matches!(f.verb, "update" | "patch")
    });
    let garden = provisioning.sum(|f| f.who == "garden" && !matches!(f.verb, "list" | "watch"));
    let conflicts = provisioning.conflicts();
    let own_patches = 2 * n;
    let tester_patches = noop.sum(|f| f.who == "tester");
    // Everything of the controller's identities in the no-op window but the watches (its
    // informers' streams) and the leader election's renewals.
    let noop_flows = noop
        .sum(|f| matches!(f.who, "kcp" | "garden") && f.verb != "watch" && f.resource != "leases");
    let in_runtime = noop
        .runtime
        .as_ref()
        .expect("the runtime clusters were scraped");
    let runtime_reviews = in_runtime
        .iter()
        .filter(|(f, _)| f.verb == "*")
        .map(|(_, n)| n)
        .sum::<i64>();
    let noop_runtime = in_runtime
        .iter()
        .filter(|(f, _)| f.verb != "watch")
        .map(|(_, n)| n)
        .sum::<i64>()
        - n;
    // The same from apiserver_request_total (no identity): kim's resources, no WATCH, the
    // test's own annotation patches subtracted.
    let noop_rows: i64 = noop
        .kube
        .iter()
        .filter(|(r, _)| kims(r) && r.verb != "WATCH")
        .map(|(_, v)| v)
        .sum::<i64>()
        - own_patches;
    let report = format!(
        "provisioning of {RUNTIMES} Runtimes (Ready {:.1} s after their creation): {control} control-cluster \
         requests by the controller ({:.1} per Runtime, at most {PER_RUNTIME} allowed; \
         {status_writes} status writes), {garden} Gardener requests by it ({:.1} per Runtime), \
         {conflicts} answers 409\n{}\
         reconciles of the Ready Runtimes: {noop_flows} requests by the controller (kcp and \
         garden identities, watches and Lease renewals left out), {noop_rows} on kim's \
         resources in apiserver_request_total besides the test's {own_patches} patches \
         (APF saw {tester_patches} of the tester's requests), {noop_runtime} to the runtime \
         clusters besides the test's {n} reviews with kim's kubeconfigs\n{}\
         {:.1} s in all",
        provisioned_in.as_secs_f64(),
        control as f64 / n as f64,
        garden as f64 / n as f64,
        provisioning.breakdown(),
        noop.breakdown(),
        started.elapsed().as_secs_f64()
    );
    eprintln!("real load:\n{report}");
    // The classification works: the controller's status writes and the test's patches were
    // seen by identity (a count of 0 proves nothing otherwise).
    assert!(
        status_writes >= n && tester_patches == own_patches && runtime_reviews >= n,
        "the FlowSchemas did not classify the requests (at least {RUNTIMES} status writes by \
         the controller, {own_patches} patches by {TESTER}, {n} reviews in the runtime \
         clusters with kim's identity expected; counts above)"
    );
    let mut failures = Vec::new();
    if conflicts != 0 {
        failures.push(format!(
            "{conflicts} requests on runtimes, secrets or shoots answered 409 during provisioning"
        ));
    }
    if control > (PER_RUNTIME * RUNTIMES) as i64 {
        failures.push(format!(
            "{:.1} control-cluster requests per provisioned Runtime, at most {PER_RUNTIME} allowed",
            control as f64 / n as f64
        ));
    }
    if noop_flows != 0 || noop_rows != 0 || noop_runtime != 0 {
        failures.push(format!(
            "reconciles of Runtimes Ready for their generation sent {noop_flows} requests to \
             the control plane ({noop_rows} on kim's resources by apiserver_request_total) and \
             {noop_runtime} to the runtime clusters, none allowed"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} (what each identity sent, above)\ncontroller stdout:\n{}\nstderr:\n{}",
        failures.join("; "),
        tail(&out),
        tail(&err)
    );
}

/// The last 30 lines of `s`.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
