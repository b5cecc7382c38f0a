//! The real `kim webhook` process, as a user starts it: default logging (`RUST_LOG` unset),
//! dev certificates generated on first run, reviews over TLS, logs on stdout, SIGTERM → exit 0.

use kim::testing::model;

use model::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};
use testenv::process::Process;

struct Server {
    process: Process,
    port: u16,
    metrics: SocketAddr,
}

async fn start(cert_dir: &std::path::Path, format: &str) -> Server {
    start_with(cert_dir, format, &[]).await
}

/// [`start`] with `extra` flags.
async fn start_with(
    cert_dir: &std::path::Path,
    format: &str,
    extra: &[&std::ffi::OsStr],
) -> Server {
    let mut process = Process::spawn(
        Command::new(env!("CARGO_BIN_EXE_kim"))
            .args(testenv::process::kim_webhook_args(cert_dir, true))
            .args(["--log-format", format])
            .args(extra)
            .env_remove("RUST_LOG"),
    )
    .expect("spawn kim webhook");
    let (addr, metrics) = crate::support::dev_ports(&mut process).await;
    Server {
        process,
        port: addr.port(),
        metrics,
    }
}

fn client(cert_dir: &std::path::Path) -> reqwest::Client {
    kim::testing::webhook::certs::install_default_provider();
    let ca = std::fs::read(cert_dir.join("ca.crt")).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// SIGTERM, then the exit (at most 30 s): (exit code, stdout, time to exit).
async fn sigterm_and_wait(mut s: Server) -> (i32, String, Duration) {
    let t = Instant::now();
    assert!(s.process.signal("TERM"), "kill -TERM");
    let status = s.process.exit(Duration::from_secs(30)).await;
    let status = status.expect("kim webhook did not exit within 30 s of SIGTERM");
    (status.code().unwrap_or(-1), s.process.stdout(), t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_with_default_logging_and_exits_on_sigterm() {
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let s = start(dir.path(), format).await;
        let http = client(dir.path());
        let seq = lifecycle(sample_runtimes().remove(0).1);
        // Several allowed reviews, on several connections.
        for i in 0..8 {
            let uid = format!("proc-{format}-{i}");
            let review = status_review(&uid, &seq[i], &seq[i + 1], RECONCILER, &[], false);
            let resp = http
                .post(format!("https://localhost:{}/validate?timeout=10s", s.port))
                .json(&review)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{format}: request {i}: {e}"));
            assert_eq!(resp.status(), 200);
            let body = resp.bytes().await.unwrap();
            assert_eq!(response_of(&body, &uid)["allowed"], true);
        }
        // One denied review: a writer the policy does not name.
        let uid = format!("proc-{format}-denied");
        let review = status_review(
            &uid,
            &seq[0],
            &seq[1],
            "system:serviceaccount:x:rogue",
            &[],
            false,
        );
        let resp = http
            .post(format!("https://localhost:{}/validate?timeout=10s", s.port))
            .json(&review)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{format}: denied request: {e}"));
        let body = resp.bytes().await.unwrap();
        assert_eq!(response_of(&body, &uid)["allowed"], false);
        let metrics = reqwest::get(format!("http://{}/metrics", s.metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("kim_webhook_requests_total"), "{metrics}");
        let (code, stdout, took) = sigterm_and_wait(s).await;
        assert_eq!(code, 0, "{format}: exit code; stdout:\n{stdout}");
        assert!(
            took < Duration::from_secs(25),
            "{format}: exit took {took:?}"
        );
        // At the default level an allowed review writes no line (it is logged at debug), a
        // denied one a line with its uid and rule id; no object content.
        for i in 0..8 {
            assert!(
                !stdout.contains(&format!("proc-{format}-{i}")),
                "{format}: allowed review {i} logged at the default level:\n{stdout}"
            );
        }
        let denied = stdout
            .lines()
            .find(|l| l.contains(&format!("proc-{format}-denied")))
            .unwrap_or_else(|| panic!("{format}: denied review not logged:\n{stdout}"));
        assert!(
            denied.contains("admission review") && denied.contains("writer"),
            "{format}: {denied}"
        );
        assert!(
            !stdout.contains("managedFields") && !stdout.contains("BEGIN"),
            "{format}: logs carry content"
        );
        assert!(
            !stdout.contains('\u{1b}'),
            "{format}: ANSI escapes in logs written to a pipe"
        );
        if format == "json" {
            for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            }
        }
    }
}

/// `kim webhook --policy-file`: a condition type and reason the file adds are allowed over the
/// wire (the same review is denied by a webhook started without the file, naming the unknown
/// type); an invalid file stops the process at start-up with a non-zero exit and the offending
/// field named on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_file_extends_the_served_model_and_an_invalid_one_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "kind: StatusPolicy\nconditionTypes:\n  - type: BackupConfigured\n    reasons:\n      - {reason: BackupReady, statuses: [\"True\"], message: Backups configured}\n",
    )
    .unwrap();
    let seq = lifecycle(sample_runtimes().remove(0).1);
    let ready = seq
        .iter()
        .find(|r| r.obj["status"]["state"] == "Ready")
        .expect("a Ready step");
    let backup = ready.write("Ready", &[("BackupConfigured", "True", "BackupReady")]);
    for with_file in [true, false] {
        let certs = tempfile::tempdir().unwrap();
        let extra: Vec<&std::ffi::OsStr> = if with_file {
            vec!["--policy-file".as_ref(), policy.as_os_str()]
        } else {
            Vec::new()
        };
        let s = start_with(certs.path(), "json", &extra).await;
        let uid = format!("policy-file-{with_file}");
        let review = status_review(&uid, ready, &backup, RECONCILER, &[], false);
        let resp = client(certs.path())
            .post(format!("https://localhost:{}/validate", s.port))
            .json(&review)
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 200);
        let answer = response_of(&resp.bytes().await.unwrap(), &uid);
        assert_eq!(
            answer["allowed"], with_file,
            "with the file: {with_file}; {answer}"
        );
        if !with_file {
            let message = answer["status"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("BackupConfigured"), "{answer}");
        }
        let (code, stdout, _) = sigterm_and_wait(s).await;
        assert_eq!(code, 0, "{stdout}");
    }

    std::fs::write(
        &policy,
        "conditionTypes:\n  - type: X\n    reasons:\n      - {reason: R, statuses: [Maybe]}\n",
    )
    .unwrap();
    let certs = tempfile::tempdir().unwrap();
    let mut bad = Process::spawn(
        Command::new(env!("CARGO_BIN_EXE_kim"))
            .args(testenv::process::kim_webhook_args(certs.path(), true))
            .arg("--policy-file")
            .arg(&policy)
            .env_remove("RUST_LOG"),
    )
    .expect("spawn kim webhook");
    let status = bad.exit(Duration::from_secs(30)).await.expect("kim exits");
    let stderr = bad.stderr();
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("policy.yaml")
            && stderr.contains("conditionTypes[0].reasons[0].statuses[0]"),
        "{stderr}"
    );
}
