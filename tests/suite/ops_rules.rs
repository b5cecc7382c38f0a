//! The alerts and the dashboard of `manifests/overlays/monitoring`, offline: the PrometheusRule
//! is the rules file's groups, `promtool check rules` accepts the rules and every dashboard
//! expression, `promtool test rules` passes with a firing and a quiet case for every alert,
//! and every alert carries what an operator needs (severity, summary, description, a runbook
//! section that exists).
//!
//! Regenerate the PrometheusRule after editing the rules file:
//! `KIM_UPDATE_RULES=1 cargo test --test suite ops_rules`.

use crate::support::ops;

use ops::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The PrometheusRule text for the rules file `rules` (its groups become `spec`).
fn prometheus_rule(rules: &str) -> String {
    let body = &rules[rules.find("\ngroups:").expect("a top-level groups: key") + 1..];
    let mut out = String::from(
        "# GENERATED from rules/kim.rules.yaml (the one source of the alerts); do not edit.\n\
         # Regenerate: KIM_UPDATE_RULES=1 cargo test --test suite ops_rules\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  name: kim\n  namespace: kim-system\n  labels:\n    \
         app.kubernetes.io/name: kim\n    app.kubernetes.io/part-of: kim\n\
         spec:\n",
    );
    for line in body.lines() {
        if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn the_prometheus_rule_is_generated_from_the_rules_file() {
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let want = prometheus_rule(&rules);
    let path = prometheus_rule_file();
    if std::env::var_os("KIM_UPDATE_RULES").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not generated from {}: run KIM_UPDATE_RULES=1 cargo test --test suite ops_rules",
        path.display(),
        rules_file().display()
    );
    // And as data: its spec is the rules file.
    let rule = yaml(&path);
    assert_eq!(rule["spec"], yaml(&rules_file()));
    assert_eq!(rule["kind"], "PrometheusRule");
}

/// Alert name → rule, from the rules file.
fn alerts() -> BTreeMap<String, Value> {
    let rules = yaml(&rules_file());
    let mut out = BTreeMap::new();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let name = r["alert"]
                .as_str()
                .expect("alerting rules only")
                .to_string();
            assert!(
                out.insert(name.clone(), r.clone()).is_none(),
                "{name} twice"
            );
        }
    }
    out
}

#[test]
fn every_alert_has_severity_summary_description_and_a_runbook_section() {
    let runbook = std::fs::read_to_string(repo().join("docs/runbook.md")).unwrap();
    let sections: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_string())
        .collect();
    let alerts = alerts();
    assert!(alerts.len() >= 10, "{} alerts", alerts.len());
    for (name, r) in &alerts {
        let severity = r["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for a in ["summary", "description"] {
            let text = r["annotations"][a].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: {a} {text:?}");
        }
        let url = r["annotations"]["runbook_url"].as_str().unwrap_or_default();
        assert_eq!(
            url,
            format!(
                "https://github.com/kyma-project/kim/blob/main/docs/runbook.md#{}",
                name.to_ascii_lowercase()
            ),
            "{name}: runbook_url"
        );
        assert!(
            sections.contains(name),
            "{name}: docs/runbook.md has no section `## {name}`"
        );
        // A per-Runtime alert names the Runtime.
        let expr = r["expr"].as_str().unwrap();
        if expr.contains("kim_controller_runtime_") {
            for a in ["summary", "description"] {
                let text = r["annotations"][a].as_str().unwrap();
                assert!(
                    text.contains("{{ $labels.namespace }}/{{ $labels.runtime }}"),
                    "{name}: {a} does not name the Runtime: {text}"
                );
            }
        }
    }
    // No runbook section without an alert.
    let extra: Vec<_> = sections
        .iter()
        .filter(|s| s.starts_with("Kim") && !alerts.contains_key(*s))
        .collect();
    assert!(
        extra.is_empty(),
        "runbook sections without an alert: {extra:?}"
    );
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() {
    let tests = yaml(&rules_test_file());
    assert_eq!(tests["rule_files"], serde_json::json!(["kim.rules.yaml"]));
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = a["alertname"].as_str().unwrap().to_string();
            let fired = a["exp_alerts"].as_array().is_some_and(|v| !v.is_empty());
            if fired {
                firing.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for name in alerts().keys() {
        assert!(firing.contains(name), "{name}: no unit test where it fires");
        assert!(
            quiet.contains(name),
            "{name}: no unit test where it stays quiet"
        );
    }
}

#[test]
fn promtool_checks_the_rules_and_runs_their_unit_tests() {
    let promtool = tool("promtool");
    let rules = rules_file();
    let (ok, out) = ops::promtool(
        &promtool,
        &["check", "rules", rules.to_str().unwrap()],
        None,
    );
    eprintln!("promtool check rules:\n{out}");
    assert!(ok, "promtool check rules failed:\n{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{out}"
    );
    let tests = rules_test_file();
    let (ok, out) = ops::promtool(&promtool, &["test", "rules", tests.to_str().unwrap()], None);
    eprintln!("promtool test rules:\n{out}");
    assert!(ok, "promtool test rules failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_rejects_a_broken_rule_and_a_failing_unit_test() {
    // The two checks above can fail: a rule with a PromQL syntax error, and a unit test whose
    // expectation the rules do not meet.
    let promtool = tool("promtool");
    let dir = tempfile::tempdir().unwrap();
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let broken = dir.path().join("kim.rules.yaml");
    std::fs::write(&broken, rules.replace("< 14 * 86400", "< 14 * * 86400")).unwrap();
    let (ok, out) = ops::promtool(
        &promtool,
        &["check", "rules", broken.to_str().unwrap()],
        None,
    );
    assert!(!ok, "a syntax error passed promtool check rules:\n{out}");
    // Pending alerts must not show as firing: ask for KimRuntimePendingTooLong after 40 min.
    std::fs::write(&broken, &rules).unwrap();
    let tests = std::fs::read_to_string(rules_test_file()).unwrap();
    let wrong = tests.replacen(
        "      - eval_time: 40m\n        alertname: KimRuntimePendingTooLong\n        exp_alerts: []",
        "      - eval_time: 40m\n        alertname: KimRuntimePendingTooLong\n        exp_alerts:\n          - exp_labels: {severity: warning, namespace: kcp-system, runtime: rt-1}",
        1,
    );
    assert_ne!(
        wrong, tests,
        "the 40m case of KimRuntimePendingTooLong exists"
    );
    let file = dir.path().join("kim.rules.test.yaml");
    std::fs::write(&file, wrong).unwrap();
    let (ok, out) = ops::promtool(&promtool, &["test", "rules", file.to_str().unwrap()], None);
    assert!(
        !ok,
        "a wrong expectation passed promtool test rules:\n{out}"
    );
    assert!(out.contains("KimRuntimePendingTooLong"), "{out}");
}

#[test]
fn promtool_parses_every_dashboard_expression() {
    let exprs = dashboard_exprs(&dashboard());
    assert!(exprs.len() >= 15, "{} expressions", exprs.len());
    let promtool = tool("promtool");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.rules.yaml");
    std::fs::write(&file, recording_rules(&exprs)).unwrap();
    let (ok, out) = ops::promtool(&promtool, &["check", "rules", file.to_str().unwrap()], None);
    assert!(ok, "a dashboard expression does not parse:\n{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
    // The same check fails on an expression that does not parse.
    let mut bad = exprs.clone();
    bad[0].expr.push_str(" by");
    std::fs::write(&file, recording_rules(&bad)).unwrap();
    let (ok, out) = ops::promtool(&promtool, &["check", "rules", file.to_str().unwrap()], None);
    assert!(!ok, "an unparsable expression passed:\n{out}");
}

#[test]
fn the_dashboard_is_one_file_shipped_as_a_sidecar_config_map() {
    let d = dashboard();
    assert_eq!(d["uid"], "kim-overview");
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        titles.push(p["title"].as_str().unwrap().to_string());
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    for want in [
        "Runtimes by state",
        "Provisioning time (creation to first Ready)",
        "Status writes",
        "Violations by rule",
        "Webhook latency p50 / p99",
        "Admission requests by decision",
        "Serving certificate expires in",
        "Reconciles and errors",
        "Gardener API latency",
    ] {
        assert!(titles.iter().any(|t| t == want), "no panel {want:?}");
    }
    let k = yaml(&overlay().join("kustomization.yaml"));
    let generators = k["configMapGenerator"].as_array().unwrap();
    assert_eq!(generators.len(), 1);
    let g = &generators[0];
    assert_eq!(g["files"], serde_json::json!(["dashboards/kim.json"]));
    assert_eq!(g["options"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(g["options"]["disableNameSuffixHash"], true);
}

#[test]
fn metric_names_are_found_and_nothing_else() {
    let got = metric_names(
        r#"sum by (rule) (increase(a_total{action="deny", x=~"b{1}"}[15m])) > 3 * (sum by (rule) (increase(a_total[1d] offset 15m)) / 96 or vector(0)) and on (job) group_left (x) up{job="w"} == bool 1 - time() < 14 * 86400 + c:rec"#,
    );
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        ["a_total", "c:rec", "up"]
    );
    let got = metric_names(
        "histogram_quantile(0.99, sum by (le, path) (rate(kim_webhook_request_duration_seconds_bucket[5m]))) > 0.5",
    );
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        ["kim_webhook_request_duration_seconds_bucket"]
    );
    let exported = exported_names(
        "# TYPE a counter\na_total 1\n# TYPE h histogram\n# TYPE g gauge\ng{x=\"1\"} 2\n# EOF\n",
    );
    assert_eq!(
        exported.into_iter().collect::<Vec<_>>(),
        ["a_total", "g", "h_bucket", "h_count", "h_sum"]
    );
}
