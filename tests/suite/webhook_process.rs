//! The real `kim webhook` process, as a user starts it: default logging (`RUST_LOG` unset),
//! dev certificates generated on first run, reviews over TLS, logs on stdout, SIGTERM → exit 0.

use testenv::model;

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
    let mut process = Process::spawn(
        Command::new(env!("CARGO_BIN_EXE_kim"))
            .args([
                "webhook",
                "--dev",
                "--addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--log-format",
                format,
            ])
            .arg("--cert-dir")
            .arg(cert_dir)
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
    kim::webhook::certs::install_default_provider();
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
        // Several reviews, on several connections, so that worker threads log.
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
        // One log line per review, with its uid; no object content.
        for i in 0..8 {
            assert!(
                stdout.contains(&format!("proc-{format}-{i}")),
                "{format}: log of review {i} missing:\n{stdout}"
            );
        }
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
