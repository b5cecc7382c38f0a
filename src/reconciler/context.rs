//! What every reconcile shares: the [`Settings`] a controller runs with and the shared state
//! built from them ([`Ctx`]: API handles, the watch caches, the Event publisher, and the
//! per-Runtime memory — error backoffs, pending Gardener retries, the clock of transient errors,
//! the runtime-cluster clients, the last administrators' sync), keyed by the Runtime's
//! `namespace/name`.

use super::caches::Cached;
use super::events::Publisher;
use super::kubeconfig::SecretHead;
use super::leader::LeaderElection;
use super::metrics::Metrics;
use super::runtime_clients::ClientCache;
use super::shoots::ShootHead;
use crate::api::{Runtime, Shoot};
use crate::gardener::Config;
use crate::status::Policy;
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kube::{Api, Client, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default number of Runtimes reconciled in parallel: KIM's default
/// (`runtime-ctrl-workers-cnt`, 25). A reconcile mostly waits on round trips to the control
/// cluster, Gardener and a runtime cluster, so against real API servers the throughput of a
/// resync grows with it (10 000 no-op reconciles of three round trips each in ≤ 10 s need more
/// than 4 in flight once a round trip takes over 1 ms).
pub(crate) const DEFAULT_CONCURRENCY: u16 = 25;

/// Everything a controller needs: ready-made clients, the configuration and the policy, and
/// tunables with production defaults ([`Settings::new`]).
#[derive(Clone)]
pub struct Settings {
    /// Client of the control cluster (Runtimes, kubeconfig Secrets, Events, the Lease).
    pub kcp: Client,
    /// Client of the Gardener cluster (Shoots, structured-authentication ConfigMaps).
    pub garden: Client,
    /// The converter configuration (already validated; `gardener.project` in effect).
    pub config: Arc<Config>,
    /// The status policy the webhook enforces; every status write is checked against it.
    pub policy: Arc<Policy>,
    /// Namespace of the Runtimes (default `kcp-system`).
    pub namespace: String,
    /// The controller's user name as the API server sees it, for the model check.
    pub user: String,
    /// Periodic resync of every Runtime (default 600 s).
    pub resync: Duration,
    /// Runtimes reconciled in parallel (default `DEFAULT_CONCURRENCY`).
    pub concurrency: u16,
    /// Runtime-cluster clients kept (default `super::runtime_clients::DEFAULT_CAPACITY`; least
    /// recently used evicted; 0: none kept). See `super::runtime_clients`.
    pub runtime_client_cache: usize,
    /// First delay of the per-Runtime error backoff (default 1 s; doubles, with jitter).
    pub backoff_min: Duration,
    /// Largest delay of the per-Runtime error backoff (default 5 min).
    pub backoff_max: Duration,
    /// Wait before annotating a Shoot whose operation failed with retryable codes
    /// `gardener.cloud/operation: retry` (default 60 s).
    pub gardener_retry_delay: Duration,
    /// How long transient errors of a Runtime that is `Ready` for its current generation are
    /// only retried before they are written into its status (`Pending`, the step's `False`
    /// condition); default 60 s. Zero: written at once (see `Pass::reports`).
    pub transient_error_grace: Duration,
    /// Deadline of every request to a runtime cluster (default 30 s; see
    /// [`super::deadline`]). The control-cluster and Gardener clients are built by the caller
    /// ([`super::deadline::build`] gives them the same deadlines).
    pub runtime_timeout: Duration,
    /// Whether the caches' first list is streamed as watch events (`sendInitialEvents`, the
    /// WatchList feature of kube-apiserver 1.34+ and of API servers built on it) instead of one
    /// list answer held in memory whole: a cold start at 10 000 Runtimes peaks about a tenth
    /// lower (BENCHMARKS.md). Default `false`: with it on, the first list needs only `watch`
    /// rights and a stuck watch holds the first fill (tests pin both).
    pub streaming_lists: bool,
    /// Leader election; `None` runs the Controller at once.
    pub leader_election: Option<LeaderElection>,
    /// The metrics this controller reports to.
    pub metrics: Arc<Metrics>,
    /// `reportingController` of Events (default `kim-controller`).
    pub reporter: String,
}

impl Settings {
    /// Settings with production defaults and no leader election.
    pub fn new(kcp: Client, garden: Client, config: Config, policy: Policy) -> Settings {
        Settings {
            kcp,
            garden,
            config: Arc::new(config),
            policy: Arc::new(policy),
            namespace: "kcp-system".to_string(),
            user: crate::status::table::DEFAULT_WRITER_USERS[0].to_string(),
            resync: Duration::from_secs(600),
            concurrency: DEFAULT_CONCURRENCY,
            runtime_client_cache: super::runtime_clients::DEFAULT_CAPACITY,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            gardener_retry_delay: Duration::from_secs(60),
            transient_error_grace: Duration::from_secs(60),
            runtime_timeout: super::deadline::DEFAULT_REQUEST_TIMEOUT,
            streaming_lists: false,
            leader_election: None,
            metrics: Arc::new(Metrics::new()),
            reporter: "kim-controller".to_string(),
        }
    }
}

/// Shared state of all reconciles: settings, API handles, the event recorder, and the
/// per-Runtime memory (error backoffs, pending Gardener retries, runtime-cluster clients).
pub struct Ctx {
    /// The settings.
    pub settings: Settings,
    /// Runtimes in the namespace.
    pub(crate) runtimes: Api<Runtime>,
    /// Kubeconfig Secrets in the namespace.
    pub(crate) secrets: Api<Secret>,
    /// Shoots in `garden-<project>`.
    pub(crate) shoots: Api<Shoot>,
    /// ConfigMaps in `garden-<project>` (structured authentication).
    pub(crate) garden_config_maps: Api<ConfigMap>,
    /// The watch caches the reconciles read from ([`super::caches`]).
    pub(crate) caches: Caches,
    /// The writers of [`Ctx::caches`], taken by the controller that runs the watches.
    writers: Mutex<Option<Writers>>,
    /// Event publisher (no cache of published Events; see [`super::events`]).
    pub(crate) recorder: Publisher,
    backoffs: Mutex<HashMap<String, ExponentialBackoff>>,
    /// Runtime key → (fingerprint of the failed operation, first seen).
    retries: Mutex<HashMap<String, (String, Instant)>>,
    /// Runtime key → (kubeconfig fingerprint, client), bounded.
    clients: ClientCache<Client>,
    /// Runtime key → when its first transient error since its last successful reconcile was
    /// held back from the status.
    transient: Mutex<HashMap<String, Instant>>,
    /// Runtime key → (`metadata.generation`, when) of its last administrators' sync, or of the
    /// first reconcile that found them configured for that generation (see
    /// [`Ctx::admins_in_sync`]).
    admins: Mutex<HashMap<String, (Option<i64>, Instant)>>,
    /// Runtime keys whose stored kubeconfig was found unusable: renewed by the next pass.
    renew: Mutex<HashSet<String>>,
}

/// The watch caches of one controller: the Runtimes of its namespace, the Shoots of the
/// Gardener project namespace (without `spec`) and the kubeconfig Secrets (their heads,
/// label `operator.kyma-project.io/managed-by: infrastructure-manager`).
pub(crate) struct Caches {
    pub(crate) runtimes: Cached<Runtime>,
    pub(crate) shoots: Cached<ShootHead>,
    pub(crate) secrets: Cached<SecretHead>,
}

impl Caches {
    /// Whether every cache has been filled by its first list, waiting at most `limit`.
    pub(crate) async fn ready(&self, limit: Duration) -> bool {
        let all = async {
            self.runtimes.filled().wait().await;
            self.shoots.filled().wait().await;
            self.secrets.filled().wait().await;
        };
        tokio::time::timeout(limit, all).await.is_ok()
    }

    /// Logs, once each, when a cache has been filled by its first list: how long after `start`
    /// and how many objects it holds. A cold start's progress for operators; a reconcile waits
    /// for all three ([`Caches::ready`]).
    pub(crate) async fn log_filled(&self, start: std::time::Instant) {
        let filled = |what: &'static str, len: usize| {
            tracing::info!(
                cache = what,
                objects = len,
                after_ms = start.elapsed().as_millis() as u64,
                "cache filled"
            );
        };
        let runtimes = async {
            self.runtimes.filled().wait().await;
            filled("Runtimes", self.runtimes.store().len());
        };
        let shoots = async {
            self.shoots.filled().wait().await;
            filled("Shoots", self.shoots.store().len());
        };
        let secrets = async {
            self.secrets.filled().wait().await;
            filled("kubeconfig Secrets", self.secrets.store().len());
        };
        futures::join!(runtimes, shoots, secrets);
    }
}

/// The writers of [`Caches`], for the watches that fill them.
pub(crate) struct Writers {
    pub(crate) runtimes: Writer<Runtime>,
    pub(crate) shoots: Writer<ShootHead>,
    pub(crate) secrets: Writer<SecretHead>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    /// Builds the shared state.
    pub fn new(settings: Settings) -> Ctx {
        let gardener_ns = settings.config.namespace();
        let recorder = Publisher::new(
            settings.kcp.clone(),
            Reporter {
                controller: settings.reporter.clone(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let (runtimes, runtime_writer) = reflector::store();
        let (shoots, shoot_writer) = reflector::store();
        let (secrets, secret_writer) = reflector::store();
        Ctx {
            caches: Caches {
                runtimes: Cached::new(runtimes, &settings.namespace),
                shoots: Cached::new(shoots, &gardener_ns),
                secrets: Cached::new(secrets, &settings.namespace),
            },
            writers: Mutex::new(Some(Writers {
                runtimes: runtime_writer,
                shoots: shoot_writer,
                secrets: secret_writer,
            })),
            runtimes: Api::namespaced(settings.kcp.clone(), &settings.namespace),
            secrets: Api::namespaced(settings.kcp.clone(), &settings.namespace),
            shoots: Api::namespaced(settings.garden.clone(), &gardener_ns),
            garden_config_maps: Api::namespaced(settings.garden.clone(), &gardener_ns),
            recorder,
            backoffs: Mutex::new(HashMap::new()),
            retries: Mutex::new(HashMap::new()),
            clients: ClientCache::new(settings.runtime_client_cache),
            settings,
            transient: Mutex::new(HashMap::new()),
            admins: Mutex::new(HashMap::new()),
            renew: Mutex::new(HashSet::new()),
        }
    }

    /// The writers of the caches; `None` once taken (one controller per `Ctx`).
    pub(crate) fn take_writers(&self) -> Option<Writers> {
        lock(&self.writers).take()
    }

    /// Whether the administrators of `key` need no sync in this pass: they were synced for
    /// `generation` less than 90 % of the resync period ago — or, the first time a Runtime is
    /// seen with `Configured=True` for its generation (`configured`; a controller that just
    /// started), its status is trusted and the sync waits for the resync, so a cold start
    /// sends nothing to 10 000 runtime clusters. Drift in a runtime cluster (a binding deleted
    /// there) is repaired at the next resync.
    pub(crate) fn admins_in_sync(
        &self,
        key: &str,
        generation: Option<i64>,
        configured: bool,
    ) -> bool {
        let window = self.settings.resync.mul_f64(0.9);
        let mut map = lock(&self.admins);
        match map.get(key) {
            Some((g, at)) => *g == generation && at.elapsed() < window,
            None if configured => {
                map.insert(key.to_string(), (generation, Instant::now()));
                true
            }
            None => false,
        }
    }

    /// Records a successful administrators' sync of `key` for `generation`.
    pub(crate) fn admins_synced(&self, key: &str, generation: Option<i64>) {
        lock(&self.admins).insert(key.to_string(), (generation, Instant::now()));
    }

    /// Marks the stored kubeconfig of `key` unusable (renewed by the next pass).
    pub(crate) fn kubeconfig_unusable(&self, key: &str) {
        lock(&self.renew).insert(key.to_string());
    }

    /// Whether the stored kubeconfig of `key` was marked unusable; clears the mark.
    pub(crate) fn take_unusable(&self, key: &str) -> bool {
        lock(&self.renew).remove(key)
    }

    /// The metrics.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.settings.metrics
    }

    /// The next error backoff delay of the Runtime `key`.
    pub(crate) fn next_backoff(&self, key: &str) -> Duration {
        let mut map = lock(&self.backoffs);
        let b = map.entry(key.to_string()).or_insert_with(|| {
            ExponentialBuilder::default()
                .with_min_delay(self.settings.backoff_min)
                .with_max_delay(self.settings.backoff_max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build()
        });
        b.next().unwrap_or(self.settings.backoff_max)
    }

    /// Resets the error backoff of `key` and the clock of its transient errors (after a
    /// successful reconcile).
    pub(crate) fn reset_backoff(&self, key: &str) {
        lock(&self.backoffs).remove(key);
        lock(&self.transient).remove(key);
    }

    /// How long `key` has had transient errors: since the first one after its last successful
    /// reconcile (zero for the first, whose time is recorded now).
    pub(crate) fn transient_for(&self, key: &str) -> Duration {
        lock(&self.transient)
            .entry(key.to_string())
            .or_insert_with(Instant::now)
            .elapsed()
    }

    /// For a Gardener operation that failed with retryable codes (identified by
    /// `fingerprint`): `None` when it is time to ask Gardener to retry, else how long to wait.
    pub(crate) fn retry_due(&self, key: &str, fingerprint: &str) -> Option<Duration> {
        let mut map = lock(&self.retries);
        let entry = map
            .entry(key.to_string())
            .or_insert_with(|| (fingerprint.to_string(), Instant::now()));
        if entry.0 != fingerprint {
            *entry = (fingerprint.to_string(), Instant::now());
        }
        let waited = entry.1.elapsed();
        let delay = self.settings.gardener_retry_delay;
        if waited >= delay {
            None
        } else {
            Some(delay - waited)
        }
    }

    /// Forgets a pending Gardener retry of `key` (retried, or the failure is gone).
    pub(crate) fn clear_retry(&self, key: &str) {
        lock(&self.retries).remove(key);
    }

    /// The cached runtime-cluster client of `key` if it was built from the kubeconfig with
    /// `fingerprint` ([`super::runtime_clients::fingerprint`]); a client of another kubeconfig is
    /// dropped.
    pub(crate) fn cached_client(&self, key: &str, fingerprint: &str) -> Option<Client> {
        self.clients.get(key, fingerprint)
    }

    /// Caches the runtime-cluster client of `key` built from the kubeconfig with `fingerprint`
    /// (evicting the least recently used client when the cache is full).
    pub(crate) fn cache_client(&self, key: &str, fingerprint: &str, client: Client) {
        self.clients.insert(key, fingerprint, client);
    }

    /// Number of runtime-cluster clients cached.
    pub fn cached_clients(&self) -> usize {
        self.clients.len()
    }

    /// Forgets everything about `key` (the Runtime is gone).
    pub(crate) fn forget(&self, key: &str) {
        lock(&self.backoffs).remove(key);
        lock(&self.retries).remove(key);
        self.clients.remove(key);
        lock(&self.transient).remove(key);
        lock(&self.admins).remove(key);
        lock(&self.renew).remove(key);
        self.metrics().forget(key);
    }
}

/// `namespace/name` of a Runtime: the key of the per-Runtime memory and metrics.
pub(crate) fn key(rt: &Runtime) -> String {
    format!("{}/{}", rt.namespace().unwrap_or_default(), rt.name_any())
}
