//! The metrics of the real `kim webhook` and `kim controller` processes, scraped over HTTP:
//! `promtool check metrics` accepts both expositions; the series operators need are there with
//! the values the traffic implies (decisions, violations, certificate reload, per-Runtime
//! state, kubeconfig expiry, provisioning time, Gardener errors by code); a deleted Runtime's
//! series go; and every metric the dashboard and the alerts read is one the two processes
//! export (a renamed metric is caught).
//!
//! The controller runs against the in-memory control cluster and simulated Gardener of
//! `testenv`; the webhook with `--dev` certificates. promtool comes from Debian's `prometheus`
//! package (`scripts/install-prometheus.sh`); without it the tests fail, saying how to install
//! it.

use crate::support::{ops, reconciler};
use testenv::model;

use ops::*;
use reconciler::{Env, NS, Options, manifest_dir, sample};
use serde_json::Value;
use std::time::{Duration, Instant};
use testenv::{FaultAction, FaultRule, Verb};

/// `GET http://addr/metrics` with `accept`; returns the body (asserting the content type).
async fn scrape(addr: &str, accept: &str) -> String {
    let resp = reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .header("Accept", accept)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("scrape");
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let text = resp.text().await.unwrap();
    if accept.starts_with("text/plain") {
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        assert!(!text.contains("# EOF"), "{text}");
    } else {
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
    text
}

/// What Prometheus 2.42 sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The value of the one sample `series` (name and labels exactly as exposed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Polls `check` on fresh scrapes of `addr` until it holds; returns that scrape.
async fn scrape_until(addr: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = scrape(addr, PROMETHEUS_ACCEPT).await;
        if check(&text) {
            return text;
        }
        assert!(start.elapsed() < LIMIT, "{what}; last scrape:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `promtool check metrics` on a text-format scrape.
fn promtool_check_metrics(who: &str, text: &str) {
    let promtool = tool("promtool");
    let (ok, out) = ops::promtool(&promtool, &["check", "metrics"], Some(text));
    eprintln!(
        "promtool check metrics ({who}): {}",
        if ok { "ok" } else { &out }
    );
    assert!(
        ok,
        "promtool check metrics of {who}:\n{out}\n--- exposition:\n{text}"
    );
}

/// Drives the webhook: allowed and denied reviews on both paths, then a change of the cert
/// dir that does not load. Returns the final scrape (OpenMetrics) and checks the text format
/// with promtool.
async fn webhook_metrics() -> String {
    let dir = tempfile::tempdir().unwrap();
    let (_kim, port, metrics) = start_webhook(dir.path()).await;
    kim::testing::webhook::certs::install_default_provider();
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let https = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let seq = model::lifecycle(model::sample_runtimes().remove(0).1);
    let rogue = "system:serviceaccount:kcp-system:rogue";
    let cases = [
        ("/validate", model::RECONCILER, true),
        ("/validate", rogue, false),
        ("/mutate", model::RECONCILER, true),
    ];
    for (i, (path, user, allowed)) in cases.into_iter().enumerate() {
        let review = model::status_review(&format!("ops-{i}"), &seq[0], &seq[1], user, &[], false);
        let resp: Value = https
            .post(format!("https://localhost:{port}{path}"))
            .json(&review)
            .send()
            .await
            .expect("review")
            .json()
            .await
            .unwrap();
        assert_eq!(
            resp["response"]["allowed"], allowed,
            "{path} {user}: {resp}"
        );
    }
    let text = scrape(&metrics, PROMETHEUS_ACCEPT).await;
    for (series, want) in [
        (
            r#"kim_webhook_requests_total{path="/validate",decision="allowed",code="200"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_requests_total{path="/validate",decision="denied",code="403"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_requests_total{path="/mutate",decision="allowed",code="200"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_violations_total{rule="writer",action="deny"}"#,
            1.0,
        ),
        (
            r#"kim_webhook_request_duration_seconds_count{path="/validate"}"#,
            2.0,
        ),
        ("kim_webhook_cert_last_reload_successful", 1.0),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series}:\n{text}");
    }
    let expiry = value(&text, "kim_webhook_cert_expiry_timestamp_seconds").unwrap();
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(expiry > now + 86_400.0, "dev certificate expiry {expiry}");
    // A certificate file that does not load: the previous one stays, the gauge says so.
    // Replaced in one rename, as kubelet swaps a Secret volume: a plain write truncates first,
    // and a reload that reads the empty file in between counts a second distinct change.
    let bad = dir.path().join("tls.crt.new");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    std::fs::rename(&bad, dir.path().join("tls.crt")).unwrap();
    let text = scrape_until(&metrics, "the failed reload shows", |t| {
        value(t, "kim_webhook_cert_last_reload_successful") == Some(0.0)
    })
    .await;
    assert_eq!(
        value(&text, r#"kim_webhook_cert_reloads_total{result="failure"}"#),
        Some(1.0),
        "{text}"
    );
    promtool_check_metrics(
        "kim webhook",
        &scrape(&metrics, "text/plain; version=0.0.4").await,
    );
    text
}

/// Drives the controller: one Runtime to Ready through a Gardener 500, then deleted. Returns
/// the scrape taken while the Runtime was Ready (OpenMetrics) and checks the text format with
/// promtool.
async fn controller_metrics() -> String {
    let env = Env::start_with(Options {
        start_controller: false,
        ..Options::default()
    })
    .await;
    // The first Shoot creation fails with 500 (retried).
    env.garden.add_fault(
        FaultRule::new(FaultAction::fail(500))
            .verb(Verb::Create)
            .resource("shoots")
            .main_resource()
            .times(1),
    );
    let dir = tempfile::tempdir().unwrap();
    let kcp = dir.path().join("kcp.kubeconfig");
    let garden = dir.path().join("garden.kubeconfig");
    std::fs::write(&kcp, env.controller_kubeconfig_yaml()).unwrap();
    std::fs::write(&garden, env.garden.kubeconfig_yaml(None)).unwrap();
    let config = manifest_dir().join("docs/config.example.yaml");
    let kim = Kim::spawn(&[
        "controller".as_ref(),
        "--kubeconfig".as_ref(),
        kcp.as_os_str(),
        "--gardener-kubeconfig".as_ref(),
        garden.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--namespace".as_ref(),
        NS.as_ref(),
        "--leader-elect=false".as_ref(),
        "--metrics-addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--log-format".as_ref(),
        "json".as_ref(),
        "--gardener-retry-seconds".as_ref(),
        "1".as_ref(),
    ]);
    let metrics = kim
        .wait_for("the metrics address", |t| {
            t.lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                Some(v["metrics_addr"].as_str()?.to_string())
            })
        })
        .await;
    let stepper = env.sim.run_every(Duration::from_millis(100));
    let rt = sample("aws-minimal.yaml");
    let name = rt.metadata.name.clone().unwrap();
    env.create(&rt).await;
    let labels = format!(r#"namespace="{NS}",runtime="{name}""#);
    let ready = format!(r#"kim_controller_runtime_state{{{labels},state="Ready"}}"#);
    // Every series read below is waited for: one scrape is not atomic across families.
    let text = scrape_until(&metrics, "the Runtime is Ready in the metrics", |t| {
        value(t, &ready) == Some(1.0)
            && value(
                t,
                &format!("kim_controller_runtime_provisioning_completed{{{labels}}}"),
            ) == Some(1.0)
            && value(t, r#"kim_controller_runtimes{state="Ready"}"#) == Some(1.0)
            && value(t, "kim_controller_provisioning_duration_seconds_count")
                .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert_eq!(env.state(&name).as_deref(), Some("Ready"));
    for series in [
        format!(r#"kim_controller_runtime_state{{{labels},state="Pending"}}"#),
        format!(r#"kim_controller_runtime_state{{{labels},state="None"}}"#),
    ] {
        assert_eq!(
            value(&text, &series),
            None,
            "old state gone: {series}\n{text}"
        );
    }
    assert_eq!(
        value(&text, r#"kim_controller_runtimes{state="Ready"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "kim_controller_provisioning_duration_seconds_count"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"kim_controller_gardener_request_errors_total{operation="create",code="500"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // The kubeconfig expiry is the one Gardener answered (testenv: now + expirationSeconds).
    let expiry = value(
        &text,
        &format!("kim_controller_runtime_kubeconfig_expiry_timestamp_seconds{{{labels}}}"),
    )
    .expect("kubeconfig expiry");
    let now = chrono::Utc::now().timestamp() as f64;
    let lifetime = reconciler::config().kubeconfig.expiration_seconds as f64;
    assert!(
        (expiry - (now + lifetime)).abs() < 120.0,
        "expiry {expiry}, now {now}, lifetime {lifetime}"
    );
    assert_eq!(value(&text, "kim_controller_leader"), Some(1.0));
    promtool_check_metrics(
        "kim controller",
        &scrape(&metrics, "text/plain; version=0.0.4").await,
    );
    // Deleted: the Runtime's series go.
    env.delete(&name).await;
    let start = Instant::now();
    while env.runtime_json(&name).is_some() {
        assert!(start.elapsed() < LIMIT, "Runtime {name} not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = scrape_until(&metrics, "the deleted Runtime's series go", |t| {
        !t.contains(&format!(r#"runtime="{name}""#))
    })
    .await;
    assert_eq!(
        value(&after, r#"kim_controller_runtimes{state="Ready"}"#),
        Some(0.0)
    );
    stepper.abort();
    drop(kim);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_processes_export_what_the_dashboard_and_the_alerts_read() {
    let webhook = webhook_metrics().await;
    let controller = controller_metrics().await;
    let mut exported = exported_names(&webhook);
    exported.extend(exported_names(&controller));
    eprintln!("exported: {exported:?}");
    let mut exprs = rule_exprs(&yaml(&rules_file()));
    exprs.extend(dashboard_exprs(&dashboard()));
    let problems = unknown_metrics(&exprs, &exported);
    assert!(
        problems.is_empty(),
        "expressions read metrics the processes do not export:\n{}",
        problems.join("\n")
    );
    // Every metric the processes export is read somewhere, or deliberately not (none yet).
    let read: std::collections::BTreeSet<String> =
        exprs.iter().flat_map(|e| metric_names(&e.expr)).collect();
    eprintln!(
        "exported and read by no panel or alert: {:?}",
        exported.difference(&read).collect::<Vec<_>>()
    );

    // The check fails on a rename, on either side. A dashboard that reads a metric under
    // another name:
    let renamed = std::fs::read_to_string(dashboard_file()).unwrap().replace(
        "kim_webhook_request_duration_seconds_bucket",
        "kim_webhook_request_latency_seconds_bucket",
    );
    let renamed: Value = serde_json::from_str(&renamed).unwrap();
    let problems = unknown_metrics(&dashboard_exprs(&renamed), &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("kim_webhook_request_latency_seconds_bucket is not exported")),
        "{problems:?}"
    );
    // A process that exports a metric under another name (as if a family were renamed in
    // src/reconciler/metrics.rs):
    let controller_renamed = controller.replace(
        "kim_controller_runtime_state",
        "kim_controller_runtime_phase",
    );
    let mut exported = exported_names(&webhook);
    exported.extend(exported_names(&controller_renamed));
    let problems = unknown_metrics(&rule_exprs(&yaml(&rules_file())), &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("KimRuntimeFailed: kim_controller_runtime_state is not exported")),
        "{problems:?}"
    );
}

/// The per-Runtime series come from the replica that leads: when the leader stops, its series
/// go (and its state counts drop to 0), and the replica that takes over reports the Runtime,
/// so `max by (namespace, runtime)` in the alerts sees one continuous Runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_runtime_series_move_with_the_leadership() {
    let mut env = Env::start_with(Options {
        leader_election: true,
        ..Options::default()
    })
    .await;
    let a = env.metrics();
    env.wait("a leads", |_| {
        value(&a.encode(), "kim_controller_leader") == Some(1.0)
    })
    .await;
    let mut settings = env.settings();
    settings.leader_election = Some(env.leader_election("b"));
    let b = env.spawn(settings);
    let rt = sample("aws-minimal.yaml");
    env.create(&rt).await;
    env.step_until("Ready", |e| e.state("aws-minimal") == Some("Ready"))
        .await;
    let series = r#"kim_controller_runtime_state{namespace="kcp-system",runtime="aws-minimal",state="Ready"}"#;
    env.wait("a reports the Runtime", |_| {
        value(&a.encode(), series) == Some(1.0)
    })
    .await;
    assert!(
        !b.metrics.encode().contains("runtime=\""),
        "the standby reports no Runtime"
    );
    env.stop().await;
    let text = a.encode();
    assert!(
        !text.contains("runtime=\""),
        "the stopped leader keeps series:\n{text}"
    );
    assert_eq!(
        value(&text, r#"kim_controller_runtimes{state="Ready"}"#),
        Some(0.0)
    );
    env.wait("b reports the Runtime", |_| {
        value(&b.metrics.encode(), series) == Some(1.0)
    })
    .await;
    b.stop().await;
    env.assert_model_clean();
}
