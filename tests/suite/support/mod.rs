//! Shared helpers of the webhook integration tests: certificates in temp dirs (plain and
//! kubelet Secret-volume layout), in-process servers on ephemeral ports, TLS clients that
//! trust only the test CAs, and metric scraping.
#![allow(dead_code)]

use kim::webhook::devcerts::{self, DevCerts};
use kim::webhook::{Running, Settings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// A cert dir laid out like kubelet's Secret volume:
/// `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>/`, swapped by renaming a new
/// `..data` symlink over the old one.
pub struct KubeletDir {
    pub dir: tempfile::TempDir,
    generation: u32,
    current: PathBuf,
}

impl KubeletDir {
    pub fn new(cert_pem: &str, key_pem: &str) -> KubeletDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut k = KubeletDir {
            dir,
            generation: 0,
            current: PathBuf::new(),
        };
        let ts = k.write_timestamped(cert_pem, key_pem);
        std::os::unix::fs::symlink(&ts, k.path().join("..data")).unwrap();
        for f in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(f), k.path().join(f)).unwrap();
        }
        k.current = ts;
        k
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_timestamped(&mut self, cert_pem: &str, key_pem: &str) -> PathBuf {
        self.generation += 1;
        let name = format!(
            "..2026_01_01_00_00_{:02}.{:09}",
            self.generation, self.generation
        );
        let ts = self.path().join(&name);
        std::fs::create_dir(&ts).unwrap();
        std::fs::write(ts.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(ts.join("tls.key"), key_pem).unwrap();
        PathBuf::from(name)
    }

    /// Atomically points `..data` at a new timestamped dir and removes the old one.
    pub fn swap(&mut self, cert_pem: &str, key_pem: &str) {
        let ts = self.write_timestamped(cert_pem, key_pem);
        let tmp = self.path().join("..data_tmp");
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, self.path().join("..data")).unwrap();
        std::fs::remove_dir_all(self.path().join(&self.current)).unwrap();
        self.current = ts;
    }
}

/// Starts a server on 127.0.0.1 ephemeral ports with `dir` as cert dir.
pub async fn start(dir: &Path) -> Running {
    kim::webhook::start(Settings::local(dir))
        .await
        .expect("server starts")
}

/// A reqwest client that trusts only `cas` (PEM), resolves `localhost` to `addr` and records
/// TLS info. HTTP/2 via ALPN unless `http1`.
pub fn client(cas: &[&str], addr: SocketAddr, http1: bool) -> reqwest::Client {
    builder(cas, addr, http1).build().expect("client")
}

/// The builder behind [`client`], for tests that tune TLS versions.
pub fn builder(cas: &[&str], addr: SocketAddr, http1: bool) -> reqwest::ClientBuilder {
    kim::webhook::certs::install_default_provider();
    let roots = cas
        .iter()
        .map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()).expect("CA pem"));
    let b = reqwest::Client::builder()
        .tls_certs_only(roots)
        .resolve("localhost", addr)
        .tls_info(true)
        .timeout(Duration::from_secs(30));
    if http1 { b.http1_only() } else { b }
}

/// `https://localhost:<port><path>`.
pub fn url(addr: SocketAddr, path: &str) -> String {
    format!("https://localhost:{}{path}", addr.port())
}

/// The DER of the certificate the server presented on this response's connection.
pub fn peer_cert(resp: &reqwest::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("tls info")
        .to_vec()
}

/// DER of the first certificate of a PEM string.
pub fn der_of(pem: &str) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("cert pem")
        .to_vec()
}

/// GET `http://<metrics_addr>/metrics`.
pub async fn scrape(metrics_addr: SocketAddr) -> String {
    let resp = reqwest::Client::new()
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

/// The value of the sample line that starts with `series` (name plus `{labels}` exactly as
/// exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        let value = rest.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Polls `f` every 100 ms until it returns `Some`, for at most `limit`.
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

/// A minimal AdmissionReview v1 envelope (a ConfigMap UPDATE, not a Runtime) with `uid` and
/// `padding` bytes of filler in the object.
pub fn review_json(uid: &str, padding: usize) -> Vec<u8> {
    let filler = "x".repeat(padding);
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "c", "namespace": "default", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"filler": filler}},
            "oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
        }
    }))
    .unwrap()
}

/// Parses an answer body and checks the envelope every answer must have.
pub fn parse_review(body: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(body).expect("answer is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    assert!(v["response"]["allowed"].is_boolean(), "{v}");
    v
}
