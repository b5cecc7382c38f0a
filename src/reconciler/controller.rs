//! The kube-runtime Controller: what it watches (the Runtimes, the Shoots of the project
//! namespace, the kubeconfig Secrets; each watch fills a cache the reconciles read,
//! [`super::caches`]), how Shoot and Secret events map back to Runtimes, and running it
//! ([`run_with`]), under leader election when configured.

use super::caches::{Filled, OwnWrites};
use super::context::{Ctx, Settings, Writers};
use super::kubeconfig::{LABEL_MANAGED_BY, LAST_APPLIED, MANAGED_BY, SecretHead};
use super::leader;
use super::reconcile;
use super::shoots::ShootHead;
use crate::api::Runtime;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// The Runtime a Shoot belongs to: the one in the store whose `spec.shoot.name` is the Shoot's
/// name and whose runtime ID is the Shoot's `…/runtime-id` annotation. A Runtime's
/// `metadata.name` need not be its runtime ID, so the match is on the two fields, not on names.
/// When no Runtime names the Shoot, one with that runtime ID whose spec names no Shoot (its spec
/// was removed; it finds its Shoot by runtime ID when it is deleted) gets the event.
fn runtime_for_shoot(
    store: &Store<Runtime>,
    namespace: &str,
    shoot: &ShootHead,
) -> Option<ObjectRef<Runtime>> {
    let name = shoot.meta().name.as_deref()?;
    let rid = shoot.runtime_id()?;
    if let Some(rt) = named_by_runtime_id(store, namespace, rid)
        && rt.spec.shoot.name == name
    {
        return Some(ObjectRef::from_obj(rt.as_ref()));
    }
    store
        .find(|rt| rt.spec.shoot.name == name && rt.runtime_id() == Some(rid))
        .or_else(|| store.find(|rt| rt.spec.names_no_shoot() && rt.runtime_id() == Some(rid)))
        .map(|rt| ObjectRef::from_obj(rt.as_ref()))
}

/// The Runtime whose kubeconfig Secret `secret` is (by its runtime-id label).
fn runtime_for_secret(store: &Store<Runtime>, secret: &SecretHead) -> Option<ObjectRef<Runtime>> {
    let rid = secret.runtime_id()?;
    let namespace = secret.namespace().unwrap_or_default();
    named_by_runtime_id(store, &namespace, rid)
        .or_else(|| store.find(|rt| rt.runtime_id() == Some(rid)))
        .map(|rt| ObjectRef::from_obj(rt.as_ref()))
}

/// The Runtime named after runtime ID `rid` (KIM's and KEB's naming) that carries it, if any:
/// one lookup instead of a scan of the store per event.
fn named_by_runtime_id(store: &Store<Runtime>, namespace: &str, rid: &str) -> Option<Arc<Runtime>> {
    store
        .get(&ObjectRef::new(rid).within(namespace))
        .filter(|rt| rt.runtime_id() == Some(rid))
}

/// Drops what no reconcile reads before an object is cached: `managedFields` (often the
/// largest part of a small object's metadata) and kubectl's last-applied configuration (a
/// second copy of an applied object).
fn strip_managed_fields<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// Shoots per page of the Shoot cache's first list (kube-runtime's default, kept for the
/// Runtimes and Secrets, is 500). A page's body is held whole while it is decoded: when the
/// decoding also built what the cache then drops (`managedFields`, conditions, constraints),
/// 500 Shoots of ~19 KiB at once raised a cold start's peak above the provisioning's at 10 000
/// Runtimes (158.4 MiB against 142.9 with pages of 100, 2026-12-03, BENCHMARKS.md). Now that
/// the decoding skips those ([`ShootHead`]), a page costs about its bytes; pages of 250 halve
/// the round trips of pages of 100 (each page after the first is read from etcd: 100 per page
/// for every cache tripled kube-apiserver's CPU in a cold start).
const SHOOT_PAGE_SIZE: u32 = 250;

/// The watch configuration of every cache. Streamed ([`Settings::streaming_lists`]): the first
/// list arrives as watch events, one object at a time, so no list answer is ever held whole (a
/// cold start at 10 000 Runtimes peaks about a tenth lower, BENCHMARKS.md). Otherwise the
/// first list comes from the API server's watch cache (`resourceVersion=0`) rather than a
/// quorum read of etcd, in pages of `page_size` objects.
fn watch_config(ctx: &Ctx, page_size: u32) -> watcher::Config {
    if ctx.settings.streaming_lists {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default()
            .any_semantic()
            .page_size(page_size)
    }
}

/// kube-runtime's page size, for the caches of small objects.
const PAGE_SIZE: u32 = 500;

/// Tells `own` about the object of a watch event (see [`OwnWrites::delivered`]). Not the
/// objects of a relist (after a watch expired, e.g. across etcd's compaction): the store takes
/// them only at its end, and until then still serves the copies an own write replaced.
/// The end of a list sets the cache's [`Filled`] flag.
fn delivered<K: Resource<DynamicType = ()> + Clone>(
    own: &OwnWrites<K>,
    filled: &Filled,
    event: &watcher::Event<K>,
) {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => own.delivered(o),
        watcher::Event::InitDone => filled.set(),
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

/// The event of a metadata watch of kubeconfig Secrets with each Secret cut to its head.
fn secret_heads(event: watcher::Event<PartialObjectMeta<Secret>>) -> watcher::Event<SecretHead> {
    let head = |s: PartialObjectMeta<Secret>| SecretHead::of(&s.metadata);
    match event {
        watcher::Event::Apply(s) => watcher::Event::Apply(head(s)),
        watcher::Event::Delete(s) => watcher::Event::Delete(head(s)),
        watcher::Event::InitApply(s) => watcher::Event::InitApply(head(s)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The three watches of a controller, each filling its cache ([`Writers`]): Runtimes (the
/// trigger of their own reconciles), Shoots without `spec`, kubeconfig Secrets as metadata.
#[allow(clippy::type_complexity)]
pub(crate) fn watches(
    ctx: &Arc<Ctx>,
    writers: Writers,
) -> (
    impl Stream<Item = Arc<Runtime>> + Send + 'static,
    impl Stream<Item = Arc<ShootHead>> + Send + 'static,
    impl Stream<Item = Arc<SecretHead>> + Send + 'static,
) {
    let own = ctx.caches.runtimes.own_writes();
    let filled = ctx.caches.runtimes.filled().clone();
    let gone = ctx.clone();
    let runtimes = watcher(ctx.runtimes.clone(), watch_config(ctx, PAGE_SIZE))
        .default_backoff()
        .modify(strip_managed_fields)
        .reflect(writers.runtimes)
        .inspect_ok(move |event| {
            delivered(&own, &filled, event);
            if let watcher::Event::Delete(rt) = event {
                // Whatever removed it (kim's release, or a finalizer removed by hand), nothing
                // about it is kept.
                gone.forget(&super::context::key(rt));
            }
        });
    let runtimes = triggers(
        runtimes,
        ctx.caches.runtimes.store().clone(),
        "Runtimes",
        false,
    );
    let heads: kube::Api<ShootHead> = kube::Api::namespaced(
        ctx.settings.garden.clone(),
        &ctx.settings.config.namespace(),
    );
    let shoots = watcher(heads, watch_config(ctx, SHOOT_PAGE_SIZE))
        .default_backoff()
        .modify(ShootHead::slim)
        .reflect(writers.shoots)
        .inspect_ok({
            let own = ctx.caches.shoots.own_writes();
            let filled = ctx.caches.shoots.filled().clone();
            move |event| delivered(&own, &filled, event)
        });
    let shoots = triggers(shoots, ctx.caches.shoots.store().clone(), "Shoots", true);
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    // An Api of `PartialObjectMeta` watches metadata only: no kubeconfig crosses the wire.
    let secrets_meta: kube::Api<PartialObjectMeta<Secret>> =
        kube::Api::namespaced(ctx.settings.kcp.clone(), &ctx.settings.namespace);
    let secrets = watcher(secrets_meta, watch_config(ctx, PAGE_SIZE).labels(&selector))
        .default_backoff()
        .map_ok(secret_heads)
        .reflect(writers.secrets)
        .inspect_ok({
            let own = ctx.caches.secrets.own_writes();
            let filled = ctx.caches.secrets.filled().clone();
            move |event| delivered(&own, &filled, event)
        });
    let secrets = triggers(
        secrets,
        ctx.caches.secrets.store().clone(),
        "kubeconfig Secrets",
        true,
    );
    (runtimes, shoots, secrets)
}

/// The objects a watch's events touch, as the `Arc`s of the store the watch fills (`store`, to
/// which `events` were already applied): an added or modified object, every object of a
/// (re)list once it is complete, and a deleted one (an `Arc` of its own) when `deleted`.
///
/// A trigger waiting for the Controller then costs a pointer, not a copy of the object. That
/// matters at a cold start: the Controller takes triggers only as fast as it has room for
/// reconciles, so the whole first list waits for it (at 10 000 Runtimes, 10 000 copies).
/// A list's objects are taken from the store when the list is complete, not one by one as the
/// watcher yields them: until then the store does not hold them (it swaps the whole list in).
///
/// A watch error is logged here (kube-runtime's watcher retries with backoff on its own), so the
/// Controller's trigger streams carry objects only.
fn triggers<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    store: Store<K>,
    what: &'static str,
    deleted: bool,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    events.flat_map(move |event| {
        let objects = match event {
            Ok(watcher::Event::Apply(obj)) => vec![
                store
                    .get(&ObjectRef::from_obj(&obj))
                    .unwrap_or_else(|| Arc::new(obj)),
            ],
            Ok(watcher::Event::Delete(obj)) if deleted => vec![Arc::new(obj)],
            Ok(watcher::Event::InitDone) => store.state(),
            Ok(_) => Vec::new(),
            Err(error) => {
                tracing::warn!(%error, watch = what, "watch failed; retrying with backoff");
                Vec::new()
            }
        };
        futures::stream::iter(objects)
    })
}

/// Polls `stream` in a task of its own and hands its items on through a channel: a watch's
/// cache must follow the server even while every reconcile slot is taken (the Controller polls
/// its trigger streams only when it has room for more work, so a cache fed by a trigger stream
/// would fall behind under load, or never fill when reconciles wait for it).
fn detach<T: Send + 'static>(
    stream: impl Stream<Item = T> + Send + 'static,
) -> (
    impl Stream<Item = T> + Send + 'static,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.unbounded_send(item).is_err() {
                break;
            }
        }
    });
    (rx, task)
}

/// Runs the watches of `ctx`'s caches without a Controller, for tests that call the reconcile
/// function directly, until the returned task is aborted.
///
/// Panics: the caches are already being filled (their writers were taken).
pub fn fill_caches(ctx: &Arc<Ctx>) -> tokio::task::JoinHandle<()> {
    let writers = ctx.take_writers().expect("the caches are filled once");
    let (runtimes, shoots, secrets) = watches(ctx, writers);
    tokio::spawn(async move {
        futures::join!(
            runtimes.for_each(|_| async {}),
            shoots.for_each(|_| async {}),
            secrets.for_each(|_| async {})
        );
    })
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
    let metrics = settings.metrics.clone();
    metrics.set_ready(true);
    // A new `Ctx` per term of leadership: its caches are filled by that term's watches.
    let result = match settings.leader_election.clone() {
        None => {
            metrics.set_leader(true);
            run_controller(Arc::new(Ctx::new(settings)), stop_rx).await;
            metrics.set_leader(false);
            Ok(())
        }
        Some(le) => {
            let kcp = settings.kcp.clone();
            leader::run_elected(&le, kcp, &metrics, stop_rx, |stop| {
                run_controller(Arc::new(Ctx::new(settings.clone())), stop)
            })
            .await
        }
    };
    signal.abort();
    metrics.set_ready(false);
    result
}

/// Runs one kube-runtime Controller until `stop` turns `true` (in-flight reconciles finish).
async fn run_controller(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let Some(writers) = ctx.take_writers() else {
        tracing::error!("the controller's caches are already being filled; not starting");
        return;
    };
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let mut stopped = stop.clone();
    let stopper = tokio::spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        let _ = tx.send(());
    });
    let (runtimes, shoots, secrets) = watches(&ctx, writers);
    let filled = tokio::spawn({
        let ctx = ctx.clone();
        let start = std::time::Instant::now();
        async move { ctx.caches.log_filled(start).await }
    });
    let (runtimes, runtime_watch) = detach(runtimes);
    let (shoots, shoot_watch) = detach(shoots);
    let (secrets, secret_watch) = detach(secrets);
    let store = ctx.caches.runtimes.store().clone();
    let by_secret = store.clone();
    let listed = ctx.caches.runtimes.filled().clone();
    let namespace = ctx.settings.namespace.clone();
    let controller = Controller::for_shared_stream(runtimes, store.clone())
        .watches_shared_stream(shoots, move |shoot: Arc<ShootHead>| {
            runtime_for_shoot(&store, &namespace, &shoot)
        })
        .watches_shared_stream(secrets, move |secret: Arc<SecretHead>| {
            runtime_for_secret(&by_secret, &secret)
        })
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
        if !listed.is_set() {
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
    filled.abort();
    runtime_watch.abort();
    shoot_watch.abort();
    secret_watch.abort();
    // Another replica reconciles from now on and reports the Runtimes.
    ctx.metrics().forget_all();
    tracing::info!("controller stopped");
}
