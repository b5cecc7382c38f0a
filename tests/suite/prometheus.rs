//! A real Prometheus (Debian's `prometheus` package, 2.42) scrapes a running `kim webhook` over
//! its metrics port and loads kim's alert rules: the target is up, every rule group is loaded
//! and every rule evaluates (health `ok`), the webhook's series are queryable, and the alerts
//! evaluate against them (no controller is scraped here: KimControllerNoLeader is pending or
//! firing, KimWebhookDown is not).
//!
//! Prometheus runs on a free loopback port with a temporary data directory and a 1 s scrape
//! and evaluation interval; the test polls its HTTP API for those final states with an overall
//! limit. Without the binary it fails, saying how to install it.

use crate::support::ops;

use ops::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (bound, then released for Prometheus to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET http://addr/api/v1/PATH`'s `data` (asserting `status: success`), or `None` while
/// Prometheus does not answer.
async fn api(addr: &str, path: &str) -> Option<Value> {
    let resp = reqwest::Client::new()
        .get(format!("http://{addr}/api/v1/{path}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let body: Value = resp.json().await.ok()?;
    assert_eq!(body["status"], "success", "{path}: {body}");
    Some(body["data"].clone())
}

/// Polls `api(path)` until `check` holds (a final state); panics after [`LIMIT`] with the
/// last answer and Prometheus' output.
async fn poll(
    addr: &str,
    path: &str,
    what: &str,
    prometheus: &Kim,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = Value::Null;
    loop {
        if let Some(data) = api(addr, path).await {
            if check(&data) {
                return data;
            }
            last = data;
        }
        assert!(
            start.elapsed() < LIMIT,
            "{what}: not within {LIMIT:?}; last /api/v1/{path}: {last:#}\nprometheus {}",
            prometheus.output()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_webhook_and_evaluates_the_alerts() {
    let prometheus_bin = tool("prometheus");
    kim::testing::webhook::certs::install_default_provider();
    let certs = tempfile::tempdir().unwrap();
    let (_webhook, _port, metrics) = start_webhook(certs.path()).await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: kim-webhook\n    static_configs:\n      - targets: ['{metrics}']\n",
            rules = rules_file().display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = std::process::Command::new(&prometheus_bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("prometheus starts");
    let (stdout, _) = testenv::capture::capture(child.stdout.take().unwrap());
    let (stderr, _) = testenv::capture::capture(child.stderr.take().unwrap());
    let prometheus = Kim {
        child,
        stdout,
        stderr,
    };

    // The target is up.
    let targets = poll(
        &addr,
        "targets",
        "the kim-webhook target up",
        &prometheus,
        |d| {
            d["activeTargets"].as_array().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["labels"]["job"] == "kim-webhook" && t["health"] == "up")
            })
        },
    )
    .await;
    let target = &targets["activeTargets"][0];
    assert_eq!(target["scrapeUrl"], format!("http://{metrics}/metrics"));
    eprintln!(
        "target {} up, last scrape {} s",
        target["scrapeUrl"], target["lastScrapeDuration"]
    );

    // Every rule of the rules file is loaded and evaluates.
    let want = rule_exprs(&yaml(&rules_file())).len();
    let rules = poll(
        &addr,
        "rules",
        "every rule loaded with health ok",
        &prometheus,
        |d| {
            let rules: Vec<&Value> = d["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            rules.len() == want && rules.iter().all(|r| r["health"] == "ok")
        },
    )
    .await;
    let mut groups: Vec<&str> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    groups.sort_unstable();
    assert_eq!(groups, ["kim-controller", "kim-runtimes", "kim-webhook"]);
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(r["type"], "alerting", "{r}");
            assert!(r["lastError"].as_str().unwrap_or("").is_empty(), "{r}");
        }
    }
    eprintln!("{want} rules in groups {groups:?}, health ok");

    // The webhook's series are stored as exposed.
    let q = poll(
        &addr,
        "query?query=kim_webhook_cert_expiry_timestamp_seconds",
        "the certificate expiry queryable",
        &prometheus,
        |d| d["result"].as_array().is_some_and(|r| !r.is_empty()),
    )
    .await;
    let stored: f64 = q["result"][0]["value"][1]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exposed: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("kim_webhook_cert_expiry_timestamp_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(stored, exposed);

    // The alerts evaluate on this data: no controller is scraped, so no leader; the webhook is
    // up, so KimWebhookDown is not active (it may be pending for the evaluations before the
    // first scrape, and resolves at the first one after it).
    let active_names = |d: &Value| -> Vec<String> {
        d["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["labels"]["alertname"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let alerts = poll(
        &addr,
        "alerts",
        "KimControllerNoLeader active and KimWebhookDown not",
        &prometheus,
        |d| {
            let active = active_names(d);
            active.iter().any(|a| a == "KimControllerNoLeader")
                && !active.iter().any(|a| a == "KimWebhookDown")
        },
    )
    .await;
    let active = active_names(&alerts);
    eprintln!("active alerts: {active:?}");
    // Nothing else: the dev certificate is valid for a year, no request failed.
    assert_eq!(active, ["KimControllerNoLeader"], "{alerts:#}");
    drop(prometheus);
}
