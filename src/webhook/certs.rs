//! The serving certificate: loading `tls.crt` / `tls.key` from the cert dir into a rustls
//! [`ServerConfig`](rustls::ServerConfig) (ring provider, TLS 1.2 + 1.3, ALPN `h2` +
//! `http/1.1`), and hot reload.
//!
//! Reload (docs/admission-protocol.md, "Certificates in a mounted Secret are replaced by a
//! symlink swap"): the cert *directory* is watched with `notify` (inotify on Linux), which
//! sees kubelet's atomic rename of the `..data` symlink, and the files are re-read every
//! reload interval as a fallback (watch lost, directory replaced, no inotify). A reload only
//! happens when the bytes of `tls.crt` or `tls.key` changed; it swaps the config through
//! axum-server's [`RustlsConfig::reload_from_config`], so new handshakes get the new
//! certificate and open connections keep theirs. A change that does not load (bad PEM,
//! key/certificate mismatch, missing file) keeps the certificate in use and counts a failure
//! once per distinct change.

use super::metrics::Metrics;
use anyhow::{Context, anyhow, bail};
use axum_server::tls_rustls::RustlsConfig;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// File name of the serving certificate chain (PEM, leaf first) in the cert dir, as in a
/// `kubernetes.io/tls` Secret.
pub(crate) const CERT_FILE: &str = "tls.crt";
/// File name of the private key (PEM: PKCS#8, PKCS#1 or SEC1) in the cert dir.
pub(crate) const KEY_FILE: &str = "tls.key";
/// File name of the CA certificate written by dev mode (not read by the server).
pub(crate) const CA_FILE: &str = "ca.crt";

/// ALPN protocols offered, in preference order.
pub(crate) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The ring crypto provider, the only one this crate uses (aws-lc would need cmake and a C toolchain in every build, and two providers make rustls' process default ambiguous).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process-wide default rustls provider. Idempotent; a provider already
/// installed (by a test or another component) is left in place.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The raw contents of `tls.crt` and `tls.key` as last read; compared to detect changes.
#[derive(Clone, PartialEq, Eq)]
pub struct CertPair {
    /// `tls.crt` bytes (PEM).
    pub cert_pem: Vec<u8>,
    /// `tls.key` bytes (PEM). Never logged.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for CertPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair")
            .field("cert_pem_len", &self.cert_pem.len())
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl CertPair {
    /// Reads `dir/tls.crt` and `dir/tls.key` (following symlinks).
    ///
    /// Errors: either file unreadable, with the path in the message.
    pub(crate) fn read(dir: &Path) -> anyhow::Result<CertPair> {
        let read = |name: &str| -> anyhow::Result<Vec<u8>> {
            let path = dir.join(name);
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
        };
        Ok(CertPair {
            cert_pem: read(CERT_FILE)?,
            key_pem: read(KEY_FILE)?,
        })
    }
}

/// A serving configuration built from a [`CertPair`].
#[derive(Debug, Clone)]
pub struct Loaded {
    /// rustls server config: ring, TLS 1.2 + 1.3, ALPN `h2`, `http/1.1`, no client auth.
    pub config: Arc<rustls::ServerConfig>,
    /// `notAfter` of the leaf certificate, seconds since the Unix epoch.
    pub not_after: i64,
}

/// Parses the PEM pair and builds the server config.
///
/// Errors (one line each): no `CERTIFICATE` block in `tls.crt`, no private key in `tls.key`,
/// a leaf that is not valid X.509, or a key that does not belong to the leaf certificate.
pub(crate) fn build(pair: &CertPair) -> anyhow::Result<Loaded> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pair.cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{CERT_FILE}: invalid PEM: {e}"))?;
    let Some(leaf) = chain.first() else {
        bail!("{CERT_FILE}: no PEM CERTIFICATE block");
    };
    let (_, x509) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| anyhow!("{CERT_FILE}: the first certificate is not valid X.509: {e}"))?;
    let not_after = x509.validity().not_after.timestamp();
    let key = PrivateKeyDer::from_pem_slice(&pair.key_pem)
        .map_err(|e| anyhow!("{KEY_FILE}: no usable PEM private key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("rustls: TLS 1.2/1.3 not supported by the ring provider")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                anyhow!("{KEY_FILE} does not match the certificate in {CERT_FILE}")
            }
            other => anyhow!("{CERT_FILE}/{KEY_FILE}: {other}"),
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if not_after <= now {
        // Served anyway: refusing would turn a late renewal into a crash loop, and the hot
        // reload picks up the renewed certificate without a restart. But say it loudly: the
        // apiserver rejects an expired certificate, and with `failurePolicy: Fail` every
        // Runtime status write then fails.
        tracing::warn!(
            not_after,
            "the serving certificate has expired; the apiserver will reject it until it is renewed"
        );
    }
    Ok(Loaded {
        config: Arc::new(config),
        not_after,
    })
}

/// Reads and builds the certificate of `dir`; the start-up path.
///
/// Errors: as `CertPair::read` and `build`, prefixed with the cert dir.
pub fn load_dir(dir: &Path) -> anyhow::Result<(CertPair, Loaded)> {
    let pair = CertPair::read(dir).with_context(|| format!("cert dir {}", dir.display()))?;
    let loaded = build(&pair).with_context(|| format!("cert dir {}", dir.display()))?;
    Ok((pair, loaded))
}

/// How the reloader notices changes.
#[derive(Debug, Clone)]
pub(crate) struct ReloadSettings {
    /// Directory holding `tls.crt` and `tls.key`.
    pub dir: PathBuf,
    /// Period of the fallback re-read (files compared byte for byte).
    pub interval: Duration,
    /// Watch the directory with `notify` (inotify); when false only the periodic re-read runs.
    pub watch: bool,
}

/// Time to let a burst of file events settle before re-reading (a non-atomic writer may
/// replace `tls.crt` and `tls.key` one after the other).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Starts the reload task. `current` is the pair already serving. The task runs until
/// aborted; dropping it also drops the directory watch.
pub(crate) fn spawn_reloader(
    settings: ReloadSettings,
    tls: RustlsConfig,
    metrics: Arc<Metrics>,
    current: CertPair,
) -> JoinHandle<()> {
    let changed = Arc::new(Notify::new());
    let watcher = if settings.watch {
        watch_dir(&settings.dir, changed.clone())
    } else {
        None
    };
    tokio::spawn(async move {
        // Keep the watcher alive as long as the task.
        let _watcher = watcher;
        let mut last_seen: Result<CertPair, String> = Ok(current);
        let mut tick = tokio::time::interval(settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate
        loop {
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(DEBOUNCE).await,
                _ = tick.tick() => {}
            }
            let dir = settings.dir.clone();
            let read = tokio::task::spawn_blocking(move || CertPair::read(&dir))
                .await
                .unwrap_or_else(|e| Err(anyhow!("reading task failed: {e}")))
                .map_err(|e| format!("{e:#}"));
            if read == last_seen {
                continue;
            }
            match &read {
                Ok(pair) => match build(pair) {
                    Ok(loaded) => {
                        tls.reload_from_config(loaded.config);
                        metrics.cert_reload(true);
                        metrics.set_cert_expiry(loaded.not_after);
                        tracing::info!(
                            cert_dir = %settings.dir.display(),
                            not_after = loaded.not_after,
                            "serving certificate reloaded"
                        );
                    }
                    Err(e) => {
                        metrics.cert_reload(false);
                        tracing::warn!(
                            cert_dir = %settings.dir.display(),
                            error = %format!("{e:#}"),
                            "certificate reload failed; keeping the certificate in use"
                        );
                    }
                },
                Err(e) => {
                    metrics.cert_reload(false);
                    tracing::warn!(
                        cert_dir = %settings.dir.display(),
                        error = %e,
                        "certificate reload failed; keeping the certificate in use"
                    );
                }
            }
            last_seen = read;
        }
    })
}

/// Watches `dir` (non-recursively) and signals `changed` on every event or watch error.
/// Returns `None` (with a warning; the periodic re-read still runs) when the watch cannot be
/// set up, e.g. when the inotify limit is reached.
fn watch_dir(dir: &Path, changed: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    use notify::event::{AccessKind, AccessMode, EventKind};
    let handler = move |event: notify::Result<notify::Event>| {
        // Our own reads of the files raise open/close-read events: those change nothing.
        let relevant = match event {
            Ok(ev) => match ev.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                EventKind::Access(_) => false,
                _ => true,
            },
            Err(_) => true,
        };
        if relevant {
            changed.notify_one();
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create a file watcher; relying on periodic re-read");
            return None;
        }
    };
    if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(cert_dir = %dir.display(), error = %e, "cannot watch the cert dir; relying on periodic re-read");
        return None;
    }
    Some(watcher)
}
