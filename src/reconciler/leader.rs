//! Leader election on a `coordination.k8s.io/v1` Lease (crate `kube-lease-manager`), so that
//! two replicas never reconcile at once: only the holder of the Lease runs the Controller.
//!
//! [`run_elected`] waits for the Lease, runs `lead` while it holds it, and stops `lead` (its
//! stop channel turns `true`) when the Lease is lost or on shutdown; after a loss it waits for
//! the Lease again. On shutdown the Lease is released, so a standby replica takes over at once
//! instead of waiting for it to expire.
//!
//! The lease manager's "leader" flag turns `false` only once it has read the Lease held by
//! another replica: while its renewals fail (kube-apiserver or etcd down) it stays `true` past
//! the Lease's expiry, for as long as its error backoff (up to 30 s, not reset while the flag
//! is unchanged) keeps it from reading again, and a standby that takes the expired Lease leads
//! beside it. Measured on a real kube-apiserver killed for 9 s (6 s Lease): the old leader
//! stopped 3.3 s after the standby had started, 15 s after its Lease had expired. So this
//! replica also checks the Lease itself ([`held_until`]): it leads only while the Lease as read
//! names it and is not within a quarter of the grace period of its expiry; when the renewal it
//! expects is not seen in time, or another holder is, it stops leading, and starts again only
//! once a read shows a renewed Lease of its own.

use super::metrics::Metrics;
use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use std::future::Future;
use std::time::{Duration, SystemTime};
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

/// Until when this replica holds the Lease as read now: `renewTime` + `leaseDurationSeconds`
/// if `holderIdentity` is `identity`, `None` if another replica or nobody holds it. The
/// renewTime is this replica's own clock (the lease manager writes it), so comparing it with
/// `SystemTime::now()` is not subject to clock skew between replicas.
///
/// Errors: the Lease cannot be read.
async fn held_until(
    api: &Api<Lease>,
    name: &str,
    identity: &str,
) -> Result<Option<SystemTime>, kube::Error> {
    let spec = api.get(name).await?.spec.unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(None);
    }
    let (Some(renewed), Some(seconds)) = (spec.renew_time, spec.lease_duration_seconds) else {
        return Ok(None);
    };
    Ok(Some(
        SystemTime::from(renewed.0) + Duration::from_secs(seconds.max(0) as u64),
    ))
}

/// Sleeps for `d`; `true` if `stop` turned `true` first.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
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
    let manager = LeaseManagerBuilder::new(client.clone(), le.lease_name.clone())
        .with_namespace(le.namespace.clone())
        .with_identity(le.identity.clone())
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
        .with_context(|| format!("leader election Lease {}/{}", le.namespace, le.lease_name))?;
    let (mut leader, task) = manager.watch().await;
    let leases: Api<Lease> = Api::namespaced(client, &le.namespace);
    let grace = Duration::from_secs(grace);
    // Leading ends this long before the Lease's expiry unless a renewal is seen; the Lease is
    // read this often from when its renewal is due (`grace` before expiry) until it is seen.
    let margin = grace / 4;
    let check = (grace / 8).clamp(Duration::from_millis(250), Duration::from_secs(1));
    tracing::info!(lease = %le.lease_name, namespace = %le.namespace, identity = %le.identity, "waiting for the leader Lease");
    let result = loop {
        tokio::select! {
            r = leader.wait_for(|l| *l) => if r.is_err() {
                break Err(anyhow::anyhow!("the lease manager stopped"));
            },
            _ = stop.wait_for(|s| *s) => break Ok(()),
        }
        // The manager's flag can be stale (see the module docs): lead only on a Lease read
        // that names this replica and is not about to expire.
        let until = match held_until(&leases, &le.lease_name, &le.identity).await {
            Ok(Some(until)) if SystemTime::now() + margin < until => until,
            other => {
                if let Err(e) = other {
                    tracing::debug!(error = %e, "reading the leader Lease failed");
                }
                if sleep_or_stop(check, &mut stop).await {
                    break Ok(());
                }
                continue;
            }
        };
        tracing::info!(identity = %le.identity, "acquired the leader Lease; starting the controller");
        metrics.set_leader(true);
        let (lead_stop_tx, lead_stop_rx) = watch::channel(false);
        let (mut stop2, mut leader2) = (stop.clone(), leader.clone());
        let (leases2, name, identity) =
            (leases.clone(), le.lease_name.clone(), le.identity.clone());
        let watch_loss = tokio::spawn(async move {
            let mut until = until;
            loop {
                // From when the renewal is due, read the Lease every `check` until it is seen.
                let now = SystemTime::now();
                let due = until.checked_sub(grace).unwrap_or(now);
                let wait = due.duration_since(now).unwrap_or_default() + check;
                tokio::select! {
                    _ = stop2.wait_for(|s| *s) => break,
                    _ = leader2.wait_for(|l| !*l) => {
                        tracing::warn!("lost the leader Lease; stopping the controller");
                        break;
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
                match held_until(&leases2, &name, &identity).await {
                    Ok(Some(t)) => until = t,
                    Ok(None) => {
                        tracing::warn!(
                            "the leader Lease is held by another replica or by none; stopping the controller"
                        );
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "reading the leader Lease failed"),
                }
                if SystemTime::now() + margin >= until {
                    tracing::warn!(
                        "the leader Lease was not renewed before its expiry; stopping the controller"
                    );
                    break;
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
