//! Leader election on a `coordination.k8s.io/v1` Lease (crate `kube-lease-manager`), so that
//! two replicas never reconcile at once: only the holder of the Lease runs the Controller.
//!
//! [`run_elected`] waits for the Lease, runs `lead` while it holds it, and stops `lead` (its
//! stop channel turns `true`) when the Lease is lost or on shutdown; after a loss it waits for
//! the Lease again. On shutdown the Lease is released, so a standby replica takes over at once
//! instead of waiting for it to expire.

use super::metrics::Metrics;
use anyhow::Context as _;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// Where and how to hold the Lease.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Lease name (default `kim-controller`).
    pub lease_name: String,
    /// Lease namespace (default `kim-system`).
    pub namespace: String,
    /// This replica's identity (`holderIdentity`); unique per replica.
    pub identity: String,
    /// Validity of the Lease after the last renewal (whole seconds, at least 2).
    pub duration: Duration,
    /// How long before expiry the holder renews (whole seconds, at least 1, below `duration`).
    pub grace: Duration,
}

impl LeaderElection {
    /// Lease `name` in `namespace` with a fresh identity, 15 s validity and 5 s grace.
    pub fn new(name: &str, namespace: &str) -> LeaderElection {
        LeaderElection {
            lease_name: name.to_string(),
            namespace: namespace.to_string(),
            identity: default_identity(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        }
    }
}

/// `$POD_NAME` (or `$HOSTNAME`, else `kim`) plus a random suffix, so that a restarted pod with
/// the same name never mistakes the previous holder's Lease for its own.
pub(crate) fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "kim".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{base}-{:08x}", nanos ^ std::process::id().rotate_left(16))
}

/// Runs `lead` whenever this replica holds the Lease, until `stop` turns `true`.
///
/// `lead` gets a stop receiver that turns `true` when the Lease is lost or on shutdown, and
/// must return soon after.
///
/// Errors: the Lease cannot be read or created at start-up, or the lease manager stops.
pub(crate) async fn run_elected<F, Fut>(
    le: &LeaderElection,
    client: Client,
    metrics: &Metrics,
    mut stop: watch::Receiver<bool>,
    mut lead: F,
) -> anyhow::Result<()>
where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()>,
{
    let duration = le.duration.as_secs().max(2);
    let grace = le.grace.as_secs().clamp(1, duration - 1);
    let manager = LeaseManagerBuilder::new(client, le.lease_name.clone())
        .with_namespace(le.namespace.clone())
        .with_identity(le.identity.clone())
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
        .with_context(|| format!("leader election Lease {}/{}", le.namespace, le.lease_name))?;
    let (mut leader, task) = manager.watch().await;
    tracing::info!(lease = %le.lease_name, namespace = %le.namespace, identity = %le.identity, "waiting for the leader Lease");
    let result = loop {
        tokio::select! {
            r = leader.wait_for(|l| *l) => if r.is_err() {
                break Err(anyhow::anyhow!("the lease manager stopped"));
            },
            _ = stop.wait_for(|s| *s) => break Ok(()),
        }
        tracing::info!(identity = %le.identity, "acquired the leader Lease; starting the controller");
        metrics.set_leader(true);
        let (lead_stop_tx, lead_stop_rx) = watch::channel(false);
        let (mut stop2, mut leader2) = (stop.clone(), leader.clone());
        let watch_loss = tokio::spawn(async move {
            tokio::select! {
                _ = stop2.wait_for(|s| *s) => {}
                _ = leader2.wait_for(|l| !*l) => {
                    tracing::warn!("lost the leader Lease; stopping the controller");
                }
            }
            lead_stop_tx.send_replace(true);
        });
        lead(lead_stop_rx).await;
        watch_loss.abort();
        metrics.set_leader(false);
        if *stop.borrow() {
            break Ok(());
        }
    };
    // Closing the channel makes the manager release the Lease and return.
    drop(leader);
    match task.await {
        Ok(Ok(_)) => tracing::info!("released the leader Lease"),
        Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader Lease failed"),
        Err(e) => tracing::warn!(error = %e, "lease manager task failed"),
    }
    result
}
