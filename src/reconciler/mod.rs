//! `kim controller`: the Runtime reconciler. What it does, step by step, and the status each step
//! writes: docs/reconciler.md ("Steps and the status they write", "Architecture").
//!
//! A kube-runtime [`Controller`](kube::runtime::Controller) on `Runtime`s in one namespace of
//! the control cluster that also watches the `Shoot`s of the Gardener project namespace and maps
//! each back to its Runtime, so Gardener's progress is seen when Gardener reports it; every
//! reconcile requeues after `--resync-seconds` at the latest as a safety net.
//!
//! Dependencies point one way: `controller` → `reconcile` (the orchestrator) → the steps
//! (`provision.rs`, `kubeconfig`, `admins`, `delete.rs`; a later step may read what an earlier
//! one stored, never the other way) → what they share (`pass.rs`, `context`, `shoots.rs`,
//! `status_update`, `reasons`, `error`) → [`metrics`], `events`, `leader`,
//! `runtime_clients`, [`deadline`]. Every status write goes through `Pass::set`, which checks it
//! against the policy the webhook enforces before sending it: a denial is a reconciler bug
//! (logged, counted, not sent).
//!
//! Transient API errors requeue with a per-object backoff and are never `Failed`; a `Ready`
//! Runtime stays `Ready` through them for [`Settings::transient_error_grace`]. Every API request
//! has a deadline ([`deadline`]). [`run`] is `kim controller` ([`ControllerArgs`]); [`run_with`]
//! takes ready-made clients and a shutdown future, for tests and embedding. Kubeconfigs (Secret
//! data, `AdminKubeconfigRequest` status) are only ever passed to the Secret write and the
//! runtime-cluster client, never to a log.

#![deny(missing_docs)]

pub(crate) mod admins;
mod caches;
pub(crate) mod context;
pub(crate) mod controller;
pub mod deadline;
mod delete;
pub(crate) mod error;
mod events;
pub(crate) mod kubeconfig;
mod leader;
pub mod metrics;
mod pass;
mod provision;
mod reasons;
pub(crate) mod reconcile;
mod runtime_clients;
mod shoots;
pub(crate) mod status_update;

pub use context::Settings;
pub use controller::run_with;
pub use leader::LeaderElection;
pub use metrics::Metrics;

use crate::gardener::Config;
pub(crate) use crate::telemetry::LogFormat;
use anyhow::{Context as _, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags of `kim controller`. Every flag can also be set by the environment variable named
/// after it (`KIM_` + the flag in upper snake case, e.g. `KIM_GARDENER_KUBECONFIG`).
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Namespace of the Runtimes (and of their kubeconfig Secrets) in the control cluster.
    #[arg(long, env = "KIM_NAMESPACE", default_value = "kcp-system")]
    pub namespace: String,

    /// Kubeconfig of the control cluster; default: in-cluster, else `KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long, env = "KIM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig of the Gardener cluster (project namespace access to Shoots).
    #[arg(long, env = "KIM_GARDENER_KUBECONFIG")]
    pub gardener_kubeconfig: PathBuf,

    /// Gardener project; overrides `gardener.project` of the configuration file.
    #[arg(long, env = "KIM_GARDENER_PROJECT")]
    pub gardener_project: Option<String>,

    /// Converter configuration file (YAML, see `docs/config.example.yaml`); validated at
    /// start-up, an invalid file stops the controller naming the field.
    #[arg(long, env = "KIM_CONFIG")]
    pub config: PathBuf,

    /// Plain-HTTP listen address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "KIM_METRICS_ADDR", default_value = "0.0.0.0:8081")]
    pub metrics_addr: SocketAddr,

    /// Leader election on a `coordination.k8s.io` Lease (`--leader-elect=false` to disable).
    #[arg(long, env = "KIM_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease.
    #[arg(long, env = "KIM_LEASE_NAMESPACE", default_value = "kim-system")]
    pub lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, env = "KIM_LEASE_NAME", default_value = "kim-controller")]
    pub lease_name: String,

    /// Lease validity after the last renewal, in seconds.
    #[arg(long, env = "KIM_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,

    /// Periodic resync of every Runtime, in seconds (safety net; progress is event driven).
    #[arg(long, env = "KIM_RESYNC_SECONDS", default_value_t = 600)]
    pub resync_seconds: u64,

    /// Seconds to wait before asking Gardener to retry an operation that failed with
    /// retryable error codes (annotation `gardener.cloud/operation: retry`).
    #[arg(long, env = "KIM_GARDENER_RETRY_SECONDS", default_value_t = 60)]
    pub gardener_retry_seconds: u64,

    /// Fill the caches by streaming the first list as watch events (`sendInitialEvents=true`,
    /// the WatchList feature, on by default in kube-apiserver 1.34+) instead of one list answer
    /// held in memory whole (a cold start at 10 000 Runtimes peaks about a tenth lower). Only
    /// for API servers with WatchList on: otherwise their watches are refused with 422 and the
    /// caches never fill. Off by default.
    #[arg(long, env = "KIM_STREAMING_LISTS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub streaming_lists: bool,

    /// Runtimes reconciled in parallel (KIM's default, 25: a reconcile mostly waits on API
    /// round trips).
    #[arg(long, env = "KIM_CONCURRENCY", default_value_t = context::DEFAULT_CONCURRENCY)]
    pub concurrency: u16,

    /// Runtime-cluster clients kept for reuse (least recently used evicted; each holds a
    /// connection pool and an open connection to its cluster). `0`: a client per use.
    #[arg(long, env = "KIM_RUNTIME_CLIENT_CACHE", default_value_t = runtime_clients::DEFAULT_CAPACITY)]
    pub runtime_client_cache: usize,

    /// Deadline of every API request to the control cluster, Gardener and the runtime
    /// clusters, in seconds: the answer must start within it, and its body be complete within
    /// it from the first read (a watch's stream is ended by the server's `timeoutSeconds`).
    /// `0`: none.
    #[arg(long, env = "KIM_REQUEST_TIMEOUT_SECONDS", default_value_t = deadline::DEFAULT_REQUEST_TIMEOUT.as_secs())]
    pub request_timeout_seconds: u64,

    /// Seconds that transient API errors (409, 429, 5xx, timeouts) of a Runtime that is `Ready`
    /// for its generation are only retried before they are written into its status (`Pending`
    /// with the failed step's `False` condition). `0`: written at once.
    #[arg(long, env = "KIM_TRANSIENT_ERROR_GRACE_SECONDS", default_value_t = 60)]
    pub transient_error_grace_seconds: u64,

    /// The controller's user name as the API server authenticates it; status writes are
    /// checked against the policy as this user before they are sent.
    #[arg(long = "controller-user", env = "KIM_CONTROLLER_USER", default_value = crate::status::table::DEFAULT_WRITER_USERS[0])]
    pub user: String,

    /// The policy in force: `--policy-file`, `--allowed-writers`, `--compat` (the same as the
    /// webhook's, so the reconciler checks what the webhook enforces).
    #[command(flatten)]
    pub policy: crate::status::PolicyArgs,

    /// `--malloc-trim-seconds`, as the webhook's.
    #[command(flatten)]
    pub trim: crate::memory::TrimArgs,

    /// Log format.
    #[arg(long, env = "KIM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Loads and validates the converter configuration, applying `--gardener-project`.
///
/// Errors: the file cannot be read or parsed, or a value is invalid (every invalid field is
/// named, e.g. `kubernetes.defaultVersion: "latest" is not a version`).
pub fn load_config(path: &Path, project: Option<&str>) -> anyhow::Result<Config> {
    let mut config = Config::load(path)?;
    if let Some(p) = project {
        config.gardener.project = p.to_string();
        let errors = config.validate();
        if !errors.is_empty() {
            let list: Vec<String> = errors
                .iter()
                .map(|e| {
                    if e.field == "gardener.project" {
                        format!("--gardener-project: {}", e.message)
                    } else {
                        e.to_string()
                    }
                })
                .collect();
            bail!("invalid configuration: {}", list.join("; "));
        }
    }
    Ok(config)
}

async fn client_from_kubeconfig(path: &Path, timeout: Duration) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    deadline::build(config, timeout).context("building the client")
}

/// Runs `kim controller` until SIGTERM or SIGINT.
///
/// Errors (the process should exit non-zero): an invalid configuration or policy file, a
/// kubeconfig that cannot be loaded, a metrics address that cannot be bound, leader election
/// failing to start.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = load_config(&args.config, args.gardener_project.as_deref())
        .with_context(|| format!("--config {}", args.config.display()))?;
    let policy = args.policy.load().map_err(|e| anyhow::anyhow!(e))?;
    let timeout = Duration::from_secs(args.request_timeout_seconds);
    let kcp = match &args.kubeconfig {
        Some(p) => client_from_kubeconfig(p, timeout)
            .await
            .context("--kubeconfig")?,
        None => {
            let config = kube::Config::infer()
                .await
                .context("control cluster client (in-cluster or KUBECONFIG)")?;
            deadline::build(config, timeout)
                .context("control cluster client (in-cluster or KUBECONFIG)")?
        }
    };
    let garden = client_from_kubeconfig(&args.gardener_kubeconfig, timeout)
        .await
        .context("--gardener-kubeconfig")?;

    let mut settings = Settings::new(kcp, garden, config, policy);
    settings.namespace = args.namespace.clone();
    settings.user = args.user.clone();
    settings.resync = Duration::from_secs(args.resync_seconds.max(1));
    settings.gardener_retry_delay = Duration::from_secs(args.gardener_retry_seconds);
    settings.concurrency = args.concurrency.max(1);
    settings.runtime_client_cache = args.runtime_client_cache;
    settings.runtime_timeout = timeout;
    settings.transient_error_grace = Duration::from_secs(args.transient_error_grace_seconds);
    settings.streaming_lists = args.streaming_lists;
    if args.leader_elect {
        settings.leader_election = Some(LeaderElection {
            lease_name: args.lease_name.clone(),
            namespace: args.lease_namespace.clone(),
            identity: leader::default_identity(),
            duration: Duration::from_secs(args.lease_duration_seconds.max(2)),
            grace: Duration::from_secs((args.lease_duration_seconds / 3).clamp(1, 10)),
        });
    }
    let metrics = settings.metrics.clone();
    let server = metrics::serve(args.metrics_addr, metrics.clone())
        .await
        .with_context(|| format!("--metrics-addr {}", args.metrics_addr))?;
    tracing::info!(
        namespace = %settings.namespace,
        gardener_namespace = %settings.config.namespace(),
        metrics_addr = %server.addr,
        leader_elect = args.leader_elect,
        "kim controller starting"
    );
    let trimmer = crate::memory::spawn_trimmer(args.trim.period());
    let result = run_with(settings, async {
        match crate::signal::shutdown_signal().await {
            Ok(s) => tracing::info!(signal = s, "shutting down"),
            Err(e) => tracing::error!(error = %e, "signal handler failed; shutting down"),
        }
    })
    .await;
    if let Some(t) = trimmer {
        t.abort();
    }
    server.stop();
    result
}
