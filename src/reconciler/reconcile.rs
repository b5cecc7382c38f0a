//! One reconcile of one Runtime, the orchestrator of the steps: the finalizer, then deletion
//! (`delete.rs`) or provisioning (`provision.rs` → [`super::kubeconfig`] → [`super::admins`]),
//! each step working on the same `Pass` (`pass.rs`), whose status is written once at the end.

use super::context::{self, Ctx};
use super::error::{self, Error};
use super::pass::{Pass, Step};
use super::{admins, delete, kubeconfig, provision};
use crate::api::Runtime;
use crate::status::State;
use crate::status::table::FINALIZER;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// The kube-runtime reconcile function.
///
/// Errors: see [`Error`]; each is retried with the Runtime's exponential backoff.
pub async fn reconcile(rt: Arc<Runtime>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let key = context::key(&rt);
    if !ctx.caches.ready(CACHE_WAIT).await {
        // A cold start: the Shoot and Secret watches have not listed yet, and an empty cache
        // would look like Shoots to create. Their first list is seconds away (or failing, and
        // logged by the controller).
        tracing::debug!(runtime = %key, "caches not filled yet; requeued");
        return Ok(Action::requeue(CACHE_WAIT));
    }
    // The latest copy: kube-runtime took `rt` from the cache when it scheduled this reconcile,
    // which may have waited for a free slot since; the cache has moved on meanwhile, and holds
    // the controller's own last write when the watch has not delivered it yet.
    let rt = ctx.caches.runtimes.get(&rt.name_any()).unwrap_or(rt);
    let mut current = rt.as_ref().clone();
    let mut restarts = 0;
    let result = loop {
        let result = run(&current, &ctx, &key)
            .instrument(tracing::info_span!("reconcile", runtime = %key))
            .await;
        match result {
            Err(Error::Stale(fresh)) if restarts < 2 => {
                restarts += 1;
                current = *fresh;
            }
            other => break other,
        }
    };
    ctx.metrics()
        .reconciled(started, result.as_ref().err().map(Error::kind));
    if result.is_ok() {
        ctx.reset_backoff(&key);
    }
    result
}

/// How long a reconcile waits for the caches' first list before it is requeued.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn run(rt: &Runtime, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let mut pass = Pass::new(ctx, rt.clone());
    let result = steps(&mut pass, ctx, key).await;
    // The status the steps set, written once whatever they ended with; a failed write is
    // the pass's error.
    pass.flush().await?;
    result
}

async fn steps(pass: &mut Pass<'_>, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let rt = &pass.rt;
    if rt.metadata.deletion_timestamp.is_some() {
        if !rt.finalizers().iter().any(|f| f == FINALIZER) {
            ctx.forget(key);
            ctx.caches.runtimes.forget(&rt.name_any());
            return Ok(Action::await_change());
        }
        return delete::run(pass).await;
    }
    ctx.metrics()
        .observe_state(key, rt.status.as_ref().and_then(|s| s.state));
    ctx.metrics()
        .observe_provisioning_completed(key, pass.provisioning_completed());
    pass.ensure_finalizer().await?;
    provision_and_configure(pass).await
}

/// Provisioning and update of a Runtime that is not being deleted: steps 2–4 (the Shoot), then
/// 5 (the kubeconfig Secret) and 6 (the administrators); requeued for the resync, or earlier
/// when the kubeconfig is due for renewal.
///
/// Errors: those of the steps (each has written its `False` condition first).
async fn provision_and_configure(pass: &mut Pass<'_>) -> Result<Action, Error> {
    let shoot = match provision::run(pass).await? {
        Step::Continue(shoot) => shoot,
        Step::Stop(action) => return Ok(action),
    };
    let stored = pass.rt.status.as_ref().and_then(|s| s.state);
    if stored != Some(State::Ready)
        && pass
            .ctx
            .settings
            .policy
            .edge(stored, State::Ready)
            .is_none()
    {
        // The Shoot is done, but the model has no edge from the stored state to `Ready`: no
        // state stored, because the pass that created the Shoot lost its status write (a
        // timeout, a controller stopped in between), and ∅ → Ready is not a transition
        // (docs/status-model.md §3). Write the state the Shoot step set (`Pending`) now; the
        // pass that write triggers goes on to `Ready`.
        return Ok(Action::requeue(std::time::Duration::ZERO));
    }
    let (secret, rotate_in) = kubeconfig::run(pass, &shoot).await?;
    admins::run(pass, &secret).await?;
    Ok(Action::requeue(pass.ctx.settings.resync.min(rotate_in)))
}

/// The kube-runtime error policy: log, then requeue after the Runtime's next backoff delay.
pub(crate) fn error_policy(
    rt: Arc<Runtime>,
    err: &Error,
    ctx: Arc<Ctx>,
) -> kube::runtime::controller::Action {
    let key = context::key(&rt);
    let delay = ctx.next_backoff(&key);
    match err {
        Error::StatusDenied(_) => {
            tracing::error!(runtime = %key, error = %err, "reconcile failed")
        }
        Error::Api { source, .. } if error::is_conflict(source) => {
            tracing::debug!(runtime = %key, error = %err, retry_in = ?delay, "conflict; retrying")
        }
        _ => {
            tracing::warn!(runtime = %key, error = %err, retry_in = ?delay, "reconcile failed; retrying")
        }
    }
    Action::requeue(delay)
}
