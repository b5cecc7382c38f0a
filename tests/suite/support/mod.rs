//! Helpers shared by the integration tests: the webhook's (certificates in temp dirs,
//! in-process servers on ephemeral ports; TLS clients, kubelet-style certificate directories and
//! metric scraping come from [`testenv::tls`]), the reconciler's ([`reconciler`]) and the
//! end-to-end tests' ([`e2e`]). The status model builders are [`kim::testing::model`].
#![allow(dead_code)]

pub mod faults;
pub mod logs;
pub mod ops;
pub mod real;
pub mod real_controller;
pub mod real_shared;
pub mod reconciler;

pub use testenv::tls::*;

use kim::testing::webhook::devcerts::{self, DevCerts};
use kim::webhook::{Running, Settings};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// A fresh CA + serving certificate for localhost/127.0.0.1.
pub fn certs(ca_name: &str) -> DevCerts {
    devcerts::generate(ca_name, &["localhost", "127.0.0.1"]).expect("generate certs")
}

/// A temp dir holding `tls.crt`, `tls.key`, `ca.crt` as plain files.
pub fn plain_dir(c: &DevCerts) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    c.write_to(dir.path()).expect("write certs");
    dir
}

/// Starts a server on 127.0.0.1 ephemeral ports with `dir` as cert dir.
pub async fn start(dir: &Path) -> Running {
    kim::webhook::start(Settings::local(dir))
        .await
        .expect("server starts")
}

/// Polls `f` every 100 ms until it returns `Some`, for at most `limit`. Only for a state that
/// stays once reached (a certificate served after a reload, a gauge of stalled requests, a
/// counter compared with what only the test can make it pass): a state that can be passed
/// through is waited for in a history (the control cluster's journal, a process's output).
pub async fn eventually<T, F, Fut>(limit: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `runtimes/status` UPDATE review ([`kim::testing::model::update_status_review`]) with
/// `uid` and `padding` bytes of filler in an annotation of the object.
pub fn review_json(uid: &str, padding: usize) -> Vec<u8> {
    let object = |filler: &str| {
        serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
            "metadata": {"name": "c", "namespace": "kcp-system", "annotations": {"filler": filler}},
        })
    };
    let user = serde_json::json!({"username": "alice", "groups": ["system:authenticated"]});
    let review = kim::testing::model::update_status_review(
        uid,
        user,
        object(&"x".repeat(padding)),
        object(""),
        false,
    );
    serde_json::to_vec(&review).unwrap()
}

/// The HTTPS and metrics addresses of a `kim webhook --dev` process, from the banner it prints
/// on stderr (`kim webhook (dev) on https://localhost:<port>`, `curl http://<addr>/metrics`);
/// panics if it exits first or prints none within 60 s.
pub async fn dev_ports(p: &mut testenv::process::Process) -> (SocketAddr, SocketAddr) {
    let banner = p.wait_output(Duration::from_secs(60), |_, err| {
        let port = err.lines().find_map(|l| {
            l.strip_prefix("kim webhook (dev) on https://localhost:")?
                .trim()
                .parse::<u16>()
                .ok()
        })?;
        let metrics = err.lines().find_map(|l| {
            l.trim()
                .strip_prefix("curl http://")?
                .strip_suffix("/metrics")?
                .parse::<SocketAddr>()
                .ok()
        })?;
        Some((SocketAddr::from(([127, 0, 0, 1], port)), metrics))
    });
    banner
        .await
        .unwrap_or_else(|e| panic!("kim serves no dev banner: {e}"))
}
