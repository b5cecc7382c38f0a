//! Clients of kim's webhook for tests and benches: reqwest clients that trust only the given
//! test CAs over TLS, certificate directories laid out as kubelet mounts a Secret, and the
//! Prometheus text of `/metrics`. Nothing here depends on kim; the certificates come from the
//! caller (kim's `devcerts`, or `certs/gen-certs.sh`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A cert dir laid out like kubelet's Secret volume:
/// `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>/`, swapped by renaming a new
/// `..data` symlink over the old one.
pub struct KubeletDir {
    /// The directory (removed when dropped).
    pub dir: tempfile::TempDir,
    generation: u32,
    current: PathBuf,
}

impl KubeletDir {
    /// A new temp dir serving `cert_pem`/`key_pem` through `..data`.
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

    /// The directory to give the server as its cert dir.
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

/// A reqwest client that trusts only `cas` (PEM), resolves `localhost` to `addr` and records
/// TLS info. HTTP/2 via ALPN unless `http1`.
pub fn client(cas: &[&str], addr: SocketAddr, http1: bool) -> reqwest::Client {
    builder(cas, addr, http1).build().expect("client")
}

/// The builder behind [`client`], for tests that tune TLS versions.
pub fn builder(cas: &[&str], addr: SocketAddr, http1: bool) -> reqwest::ClientBuilder {
    // ring, as in kim (`kim::webhook::certs::install_default_provider`); a no-op when set.
    let _ = rustls::crypto::ring::default_provider().install_default();
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
