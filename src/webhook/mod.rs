//! `kim webhook`: the HTTPS admission server (axum + rustls) for `runtimes/status`.
//!
//! The server adds no rules of its own: every answer body comes from
//! [`crate::admission::review`] or [`crate::admission::reject`]. This module owns the transport:
//! TLS (ring, TLS 1.2/1.3, h2 + http/1.1), certificate hot reload, body limits, health and
//! readiness, metrics, logs and graceful shutdown (docs/admission-protocol.md).
//!
//! - [`run`] is what `kim webhook` calls; `init_tracing` sets up logs first.
//! - [`start`] starts a server in-process (tests, benches) and returns a [`Running`] with the
//!   bound addresses and a shutdown handle; [`start_with_hooks`] the same transport with other
//!   handlers (benches).

pub(crate) mod certs;
mod connections;
pub(crate) mod devcerts;
pub mod metrics;
mod server;

pub(crate) use crate::telemetry::LogFormat;
pub use server::{
    BODY_BUDGET, BODY_LIMIT, INLINE_REVIEW_LIMIT, LARGE_REVIEWS_AT_ONCE, MAX_METRICS_CONNECTIONS,
    Running, Settings, start, start_with_hooks,
};

use crate::status::Policy;
use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Default cert dir in dev mode, relative to the working directory.
pub(crate) const DEV_CERT_DIR: &str = "certs/dev";

/// Flags of `kim webhook`. Every flag can also be set by the environment variable named
/// after it (`KIM_` + the flag in upper snake case, e.g. `KIM_CERT_DIR`).
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookArgs {
    /// HTTPS listen address.
    #[arg(long, env = "KIM_ADDR", default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,

    /// Directory holding `tls.crt` and `tls.key` (PEM), e.g. a mounted `kubernetes.io/tls`
    /// Secret; reloaded on change. Required unless `--dev` (then `certs/dev`).
    #[arg(long, env = "KIM_CERT_DIR")]
    pub cert_dir: Option<PathBuf>,

    /// Dev mode: when `tls.crt`/`tls.key` are missing in the cert dir, generate a CA
    /// (`ca.crt`) and a serving certificate for localhost/127.0.0.1 there.
    #[arg(long, env = "KIM_DEV")]
    pub dev: bool,

    /// Plain-HTTP listen address of `/metrics` (also serves `/healthz`, `/readyz`).
    #[arg(long, env = "KIM_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// The policy in force: `--policy-file`, `--allowed-writers`, `--compat`.
    #[command(flatten)]
    pub policy: crate::status::PolicyArgs,

    /// Log format.
    #[arg(long, env = "KIM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Seconds to finish in-flight requests after SIGTERM/SIGINT before closing connections.
    #[arg(long, env = "KIM_SHUTDOWN_GRACE_SECONDS", default_value_t = 25)]
    pub shutdown_grace_seconds: u64,

    /// Seconds to keep serving with readiness 503 after SIGTERM/SIGINT before stopping to
    /// accept connections (lets endpoints drop the pod first; an alternative to a preStop
    /// sleep in images without a shell). Counted within the grace period.
    #[arg(long, env = "KIM_SHUTDOWN_DELAY_SECONDS", default_value_t = 0)]
    pub shutdown_delay_seconds: u64,

    /// `--malloc-trim-seconds`, as the controller's.
    #[command(flatten)]
    pub trim: crate::memory::TrimArgs,
}

impl WebhookArgs {
    /// The cert dir in effect: `--cert-dir`, else `DEV_CERT_DIR` with `--dev`.
    ///
    /// Errors: neither given.
    pub fn effective_cert_dir(&self) -> anyhow::Result<PathBuf> {
        match (&self.cert_dir, self.dev) {
            (Some(d), _) => Ok(d.clone()),
            (None, true) => Ok(PathBuf::from(DEV_CERT_DIR)),
            (None, false) => bail!("--cert-dir (KIM_CERT_DIR) is required unless --dev is given"),
        }
    }

    /// The policy in effect (see [`crate::status::PolicyArgs::load`]).
    ///
    /// Errors: the policy file does not load; `--allowed-writers` does not parse.
    pub(crate) fn policy(&self) -> anyhow::Result<Policy> {
        self.policy.load().map_err(|e| anyhow::anyhow!(e))
    }

    /// [`Settings`] for [`start`] from these flags (does not generate dev certificates).
    ///
    /// Errors: as [`WebhookArgs::effective_cert_dir`] and `WebhookArgs::policy`.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        Ok(Settings {
            addr: self.addr,
            metrics_addr: self.metrics_addr,
            policy: Arc::new(self.policy()?),
            malloc_trim: self.trim.period(),
            ..Settings::new(self.effective_cert_dir()?)
        })
    }
}

/// Runs `kim webhook` until SIGTERM or SIGINT, then shuts down gracefully within
/// `--shutdown-grace-seconds`.
///
/// Errors (the process should exit non-zero): bad flags or policy file, dev certificates
/// that cannot be written, a certificate that cannot be read or whose key does not match,
/// a listener that cannot be bound, or the server failing while running.
pub async fn run(args: WebhookArgs) -> anyhow::Result<()> {
    certs::install_default_provider();
    let settings = args.settings()?;
    if args.dev {
        let dir = settings.cert_dir.clone();
        let generated = tokio::task::spawn_blocking(move || devcerts::ensure(&dir))
            .await
            .context("dev certificate task")?
            .context("generating dev certificates")?;
        if generated {
            tracing::info!(cert_dir = %settings.cert_dir.display(), "generated a dev CA and serving certificate");
        }
    }
    let cert_dir = settings.cert_dir.clone();
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let delay = Duration::from_secs(args.shutdown_delay_seconds).min(grace);
    let mut running = server::start(settings).await?;
    tracing::info!(
        addr = %running.addr,
        metrics_addr = %running.metrics_addr,
        cert_dir = %cert_dir.display(),
        "kim webhook serving"
    );
    if args.dev {
        eprintln!(
            "\nkim webhook (dev) on https://localhost:{port}\n  curl --cacert {ca} -H 'Content-Type: application/json' --data @samples/admission/kubewarden_kwctl_privileged-pod-admission-review.json https://localhost:{port}/validate\n  curl --cacert {ca} https://localhost:{port}/readyz\n  curl http://{metrics}/metrics\n",
            port = running.addr.port(),
            ca = cert_dir.join(certs::CA_FILE).display(),
            metrics = running.metrics_addr,
        );
    }
    tokio::select! {
        signal = crate::signal::shutdown_signal() => {
            tracing::info!(signal = %signal?, grace_seconds = grace.as_secs(), "shutting down");
        }
        err = running.stopped() => return err,
    }
    running.begin_shutdown();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    running.shutdown(grace - delay).await?;
    tracing::info!("stopped");
    Ok(())
}
