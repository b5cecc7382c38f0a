//! The kube-runtime Controller: what it watches, how Shoot events map back to Runtimes, and
//! running it ([`run_with`]), under leader election when configured.

use super::context::{Ctx, Settings};
use super::leader;
use super::reconcile;
use crate::api::{Runtime, Shoot};
use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// The Runtime a Shoot belongs to: the one in the store whose `spec.shoot.name` is the Shoot's
/// name and whose runtime ID is the Shoot's `…/runtime-id` annotation. A Runtime's
/// `metadata.name` need not be its runtime ID, so the match is on the two fields, not on names.
/// When no Runtime names the Shoot, one with that runtime ID whose spec names no Shoot (its spec
/// was removed; it finds its Shoot by runtime ID when it is deleted) gets the event.
pub(crate) fn runtime_for_shoot(
    store: &Store<Runtime>,
    shoot: &Shoot,
) -> Option<ObjectRef<Runtime>> {
    let name = shoot.metadata.name.as_deref()?;
    let rid = shoot.runtime_id()?;
    store
        .find(|rt| rt.spec.shoot.name == name && rt.runtime_id() == Some(rid))
        .or_else(|| store.find(|rt| rt.spec.names_no_shoot() && rt.runtime_id() == Some(rid)))
        .map(|rt| ObjectRef::from_obj(rt.as_ref()))
}

/// Runs the reconciler until `shutdown` completes: the Controller at once, or, with
/// [`Settings::leader_election`], whenever this replica holds the Lease.
///
/// Tests pass clients of in-memory API servers; `kim controller` passes the real ones
/// ([`super::run`]).
///
/// Errors: leader election cannot start (the Lease cannot be read or created).
pub async fn run_with(
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let signal = tokio::spawn(async move {
        shutdown.await;
        stop_tx.send_replace(true);
    });
    let ctx = Arc::new(Ctx::new(settings));
    ctx.metrics().set_ready(true);
    let result = match ctx.settings.leader_election.clone() {
        None => {
            ctx.metrics().set_leader(true);
            run_controller(ctx.clone(), stop_rx).await;
            ctx.metrics().set_leader(false);
            Ok(())
        }
        Some(le) => {
            leader::run_elected(
                &le,
                ctx.settings.kcp.clone(),
                ctx.metrics(),
                stop_rx,
                |stop| run_controller(ctx.clone(), stop),
            )
            .await
        }
    };
    signal.abort();
    ctx.metrics().set_ready(false);
    result
}

/// Runs one kube-runtime Controller until `stop` turns `true` (in-flight reconciles finish).
async fn run_controller(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let mut stopped = stop.clone();
    let stopper = tokio::spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        let _ = tx.send(());
    });
    let controller = Controller::new(ctx.runtimes.clone(), watcher::Config::default());
    let store = controller.store();
    let listed = controller.store();
    let controller = controller
        .watches(
            ctx.shoots.clone(),
            watcher::Config::default(),
            move |shoot: Shoot| runtime_for_shoot(&store, &shoot),
        )
        .with_config(controller::Config::default().concurrency(ctx.settings.concurrency))
        .graceful_shutdown_on(async move {
            let _ = rx.await;
        });
    tracing::info!(
        namespace = %ctx.settings.namespace,
        gardener_namespace = %ctx.settings.config.namespace(),
        "controller running"
    );
    let run = controller
        .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                match e {
                    // Reconcile errors are logged by the error policy.
                    controller::Error::ReconcilerFailed(..) => {}
                    other => tracing::warn!(error = %other, "controller"),
                }
            }
        });
    // kube-runtime holds the Controller's runner until the Runtimes have been listed once, and
    // until then ignores the graceful shutdown: a replica whose list never succeeds (403 from a
    // missing RBAC rule, 404 from a missing CRD) would never stop. No reconcile can have
    // started before that first list, so on stop it is dropped at once.
    let unlisted_at_stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
        if listed.wait_until_ready().now_or_never().is_none() {
            tracing::warn!("stopping before the Runtimes could ever be listed");
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = run => {}
        () = unlisted_at_stop => {}
    }
    stopper.abort();
    // Another replica reconciles from now on and reports the Runtimes.
    ctx.metrics().forget_all();
    tracing::info!("controller stopped");
}
