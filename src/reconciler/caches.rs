//! Reads from watch caches: the Runtimes, their Shoots and their kubeconfig Secrets as the
//! controller's watches last saw them (kube-runtime reflector stores), each corrected by the
//! controller's own writes the watch has not delivered yet ([`Cached`]).
//!
//! A reconcile reads nothing from the API servers; it writes only what changes. A watch delivers
//! a write some milliseconds after its answer, so a reconcile that starts in between (a Shoot
//! event right after a status write) would decide on the copy before the write and send a write
//! with a resourceVersion that is no longer current: a 409 Conflict, a re-read and a retry, or a
//! second `create` of a Shoot that exists. [`Cached`] therefore remembers each object's latest
//! own write together with the resourceVersions it replaced; while the store still holds one of
//! those, the own write is the current copy. Anything else in the store (another writer's
//! change, or the store having caught up) wins, and the memory of that object is dropped.
//! resourceVersions are compared for equality only, never ordered (the API conventions make them
//! opaque). The memory of an object goes when the watch delivers it (or a version after it),
//! and is ignored after [`OWN_WRITE_TTL`]: a watch is never that far behind unless it is
//! broken, and then its relist corrects the store.
//!
//! A watch can also be ahead of the writer: under load the watch may deliver a write, and even a
//! later change by someone else (a deletion, a label removed), before the reconcile that made
//! the write has recorded it. Recorded then, the write would stand for an object that is gone,
//! for [`OWN_WRITE_TTL`]. So the versions each object's watch delivered in the last
//! [`DELIVERED_TTL`] are kept too, and a write whose answer the watch already delivered is not
//! recorded: the store has it, or something after it.
//!
//! What the stores hold is cut to what a reconcile reads: no `managedFields` anywhere; a Shoot
//! without its `spec` (only the update reads it, with a GET of its own); a Secret as its head,
//! a few fields of its metadata (the kubeconfig is read with a GET when a runtime-cluster client has to be built, so 10 000
//! kubeconfigs are not held in memory).

use kube::Resource;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an own write stays the current copy while the store has not caught up with it.
pub(crate) const OWN_WRITE_TTL: Duration = Duration::from_secs(300);

/// How long a delivered resourceVersion is remembered, to recognise a write the watch delivered
/// before the writer recorded it: longer than any delay between a write's answer and its record
/// (a few scheduling rounds).
pub(crate) const DELIVERED_TTL: Duration = Duration::from_secs(10);

/// resourceVersions remembered per object ([`DELIVERED_TTL`]): a write, and what followed it
/// before the writer recorded it.
const DELIVERED_KEPT: usize = 4;

/// The latest own write of one object.
struct Own<K> {
    /// resourceVersions the own writes replaced (`None`: the object did not exist; it was
    /// created).
    replaced: Vec<Option<String>>,
    written: Arc<K>,
    at: Instant,
}

/// A reflector store of one namespace with the controller's own writes on top (module docs).
pub(crate) struct Cached<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    namespace: String,
    own: OwnWrites<K>,
    filled: Filled,
}

/// Whether a cache's watch has completed its first list, for any number of waiters.
///
/// Not `Store::wait_until_ready`: kube-runtime 5's store readiness is a oneshot receiver that
/// keeps only the waker of the task that polled it last, so of several tasks waiting at once all
/// but one sleep on after the list (until woken otherwise). The reconciles of a cold start
/// waited that way for their 5 s timeout: a no-op pass of 200 Runtimes took 5.3 s instead of
/// well under one (2026-12-03). The watch that fills the store sets this flag after the store
/// took the list ([`Filled::set`]); kube-runtime's Controller stays the only waiter on the
/// store's own readiness.
#[derive(Clone)]
pub(crate) struct Filled(Arc<tokio::sync::watch::Sender<bool>>);

impl Filled {
    fn new() -> Filled {
        Filled(Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    /// The first list is in the store (again, after a relist).
    pub(crate) fn set(&self) {
        self.0.send_replace(true);
    }

    /// Whether the first list is in the store.
    pub(crate) fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the first list is in the store.
    pub(crate) async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`: the wait ends only by the flag.
        let _ = rx.wait_for(|filled| *filled).await;
    }
}

/// The own writes of a [`Cached`], shared with the watch that fills its store
/// ([`OwnWrites::delivered`]). Cloning is cheap (one `Arc`).
pub(crate) struct OwnWrites<K>(Arc<Mutex<Memory<K>>>);

/// What [`OwnWrites`] remembers.
struct Memory<K> {
    /// Object name → its latest own write the store has not caught up with.
    own: HashMap<String, Own<K>>,
    /// Object name → the resourceVersions its watch delivered lately (newest last), and when
    /// the last came.
    delivered: HashMap<String, (Vec<Option<String>>, Instant)>,
    /// Deliveries since `delivered` was last swept of entries older than [`DELIVERED_TTL`].
    since_sweep: usize,
}

impl<K> Default for Memory<K> {
    fn default() -> Self {
        Memory {
            own: HashMap::new(),
            delivered: HashMap::new(),
            since_sweep: 0,
        }
    }
}

impl<K> Clone for OwnWrites<K> {
    fn clone(&self) -> Self {
        OwnWrites(self.0.clone())
    }
}

impl<K: Resource<DynamicType = ()> + Clone> OwnWrites<K> {
    fn lock(&self) -> MutexGuard<'_, Memory<K>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch delivered `object` (added, modified, deleted or listed), after the store took
    /// it: an own write of that name is forgotten unless the delivered version is one the own
    /// write replaced. So an object created and deleted again before anyone read it is not
    /// taken to exist, and nothing is kept for a deleted object.
    pub(crate) fn delivered(&self, object: &K) {
        let name = object.name_any();
        let version = object.resource_version();
        let mut memory = self.lock();
        if memory
            .own
            .get(&name)
            .is_some_and(|o| !o.replaced.contains(&version))
        {
            memory.own.remove(&name);
        }
        // Swept every so many deliveries, so the memory holds about one `DELIVERED_TTL` of
        // events, not one entry per object ever seen.
        memory.since_sweep += 1;
        if memory.since_sweep >= 256 {
            memory.since_sweep = 0;
            memory
                .delivered
                .retain(|_, (_, at)| at.elapsed() < DELIVERED_TTL);
        }
        let (versions, at) = memory
            .delivered
            .entry(name)
            .or_insert_with(|| (Vec::new(), Instant::now()));
        if at.elapsed() >= DELIVERED_TTL {
            versions.clear();
        }
        if versions.len() == DELIVERED_KEPT {
            versions.remove(0);
        }
        versions.push(version);
        *at = Instant::now();
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cached<K> {
    /// The store `store` (of `namespace`) with no own writes yet.
    pub(crate) fn new(store: Store<K>, namespace: &str) -> Cached<K> {
        Cached {
            store,
            namespace: namespace.to_string(),
            own: OwnWrites(Arc::new(Mutex::new(Memory::default()))),
            filled: Filled::new(),
        }
    }

    /// Whether the store holds its first list, for the watch that fills it and for waiters.
    pub(crate) fn filled(&self) -> &Filled {
        &self.filled
    }

    fn lock(&self) -> MutexGuard<'_, Memory<K>> {
        self.own.lock()
    }

    /// The own writes, for the watch that fills the store.
    pub(crate) fn own_writes(&self) -> OwnWrites<K> {
        self.own.clone()
    }

    /// The store (for lookups by other fields than the name).
    pub(crate) fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The current copy of object `name`: the store's, or the own write that replaced it.
    ///
    /// The store is read under the lock of the own writes: the watch updates the store before it
    /// tells them ([`OwnWrites::delivered`]), so a copy read before taking the lock can be one
    /// the watch has replaced since, along with the own write that would have corrected it — a
    /// stale copy, and a 409 on the next write (two in ~29 700 status writes at 10 000 Runtimes
    /// under load, 2026-12-03).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<K>> {
        let mut memory = self.lock();
        let cached = self
            .store
            .get(&ObjectRef::new(name).within(&self.namespace));
        let Some(o) = memory.own.get(name) else {
            return cached;
        };
        let seen = cached.as_ref().map(|c| c.resource_version());
        if o.at.elapsed() < OWN_WRITE_TTL && o.replaced.contains(&seen.clone().flatten()) {
            return Some(o.written.clone());
        }
        memory.own.remove(name);
        cached
    }

    /// Records the own write `written` of object `name`, which replaced `before` (`None`:
    /// created), unless the watch has delivered it already. Returns it (the current copy while
    /// the store has not caught up).
    pub(crate) fn wrote(&self, name: &str, before: Option<&K>, written: K) -> Arc<K> {
        let written = Arc::new(written);
        let mut memory = self.lock();
        let version = written.resource_version();
        if version.is_some()
            && memory.delivered.get(name).is_some_and(|(versions, at)| {
                at.elapsed() < DELIVERED_TTL && versions.contains(&version)
            })
        {
            // The store has this write, or what came after it (module docs).
            memory.own.remove(name);
            return written;
        }
        let own = &mut memory.own;
        let mut replaced = match own.remove(name) {
            // Still ahead of the store: every version it replaced is stale too, and so is the
            // version it wrote, unless this write answered with the same one.
            Some(o) if o.at.elapsed() < OWN_WRITE_TTL => {
                let mut replaced = o.replaced;
                let previous = o.written.resource_version();
                if previous != written.resource_version() {
                    replaced.push(previous);
                }
                replaced
            }
            _ => Vec::new(),
        };
        replaced.push(before.and_then(|b| b.resource_version()));
        replaced.truncate(16);
        own.insert(
            name.to_string(),
            Own {
                replaced,
                written: written.clone(),
                at: Instant::now(),
            },
        );
        written
    }

    /// What the cache knows of object `name`, for a log line after a write it served went
    /// stale (a 409): the store's resourceVersion, and the age and replaced versions of the
    /// own write on top of it, if any.
    pub(crate) fn explain(&self, name: &str) -> String {
        let stored = self
            .store
            .get(&ObjectRef::new(name).within(&self.namespace))
            .and_then(|o| o.resource_version());
        let memory = self.lock();
        let own = memory.own.get(name).map(|o| {
            format!(
                "own write {:?} {} ms old replacing {:?}",
                o.written.resource_version(),
                o.at.elapsed().as_millis(),
                o.replaced
            )
        });
        let delivered = memory
            .delivered
            .get(name)
            .map(|(v, at)| format!("delivered {v:?}, last {} ms ago", at.elapsed().as_millis()));
        format!(
            "store {stored:?}; {}; {}",
            own.as_deref().unwrap_or("no own write"),
            delivered.as_deref().unwrap_or("nothing delivered lately")
        )
    }

    /// Forgets the own writes of `name` (deleted).
    pub(crate) fn forget(&self, name: &str) {
        self.lock().own.remove(name);
    }

    /// Number of objects with an own write ahead of the store.
    #[cfg(test)]
    fn ahead(&self) -> usize {
        self.lock().own.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn rv(c: Option<Arc<ConfigMap>>) -> Option<String> {
        c.and_then(|c| c.resource_version())
    }

    /// Whether `wait` ends by itself before a 5 s timer does: a waiter that is not woken sleeps
    /// until the timer, which is then looked at first (a timeout would poll `wait` first, find
    /// it done and hide the lost wake-up).
    async fn woken(wait: impl std::future::Future<Output = ()>) -> bool {
        tokio::select! {
            biased;
            () = tokio::time::sleep(Duration::from_secs(5)) => false,
            () = wait => true,
        }
    }

    /// Every waiter wakes when the first list ends (a cold start's reconciles all wait at
    /// once). Waiting on kube-runtime's `Store::wait_until_ready` the same way, 29 of 30 waiters
    /// slept until their timer (2026-12-03, kube-runtime 5.0.0).
    #[tokio::test]
    async fn every_waiter_wakes_when_the_first_list_ends() {
        let (reader, _writer) = kube::runtime::reflector::store::<ConfigMap>();
        let cache = Cached::new(reader, "ns");
        let waiters: Vec<_> = (0..30)
            .map(|_| {
                let filled = cache.filled().clone();
                tokio::spawn(async move { woken(filled.wait()).await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!cache.filled().is_set());
        cache.filled().set();
        for w in waiters {
            assert!(
                w.await.expect("waiter"),
                "a waiter slept through the list's end"
            );
        }
        assert!(cache.filled().is_set());
    }

    #[test]
    fn an_own_write_is_current_until_the_store_catches_up_or_moves_on() {
        let (reader, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(cm("a", "1")));
        let cache = Cached::new(reader, "ns");
        assert_eq!(
            rv(cache.get("a")),
            Some("1".into()),
            "no own write: the store"
        );

        // Two own writes in a row (a finalizer, then the status): the store's 1 and the
        // intermediate 2 are both behind the latest own write 3.
        let two = cm("a", "2");
        cache.wrote("a", Some(&cm("a", "1")), two.clone());
        cache.wrote("a", Some(&two), cm("a", "3"));
        assert_eq!(rv(cache.get("a")), Some("3".into()));
        writer.apply_watcher_event(&Event::Apply(cm("a", "2")));
        assert_eq!(rv(cache.get("a")), Some("3".into()), "2 is behind 3");

        // The store catches up: the memory goes.
        writer.apply_watcher_event(&Event::Apply(cm("a", "3")));
        assert_eq!(rv(cache.get("a")), Some("3".into()));
        assert_eq!(cache.ahead(), 0);

        // Another writer's change after an own write wins.
        cache.wrote("a", Some(&cm("a", "3")), cm("a", "4"));
        writer.apply_watcher_event(&Event::Apply(cm("a", "9")));
        assert_eq!(rv(cache.get("a")), Some("9".into()));
        assert_eq!(cache.ahead(), 0);
    }

    #[test]
    fn a_created_object_exists_before_the_watch_delivers_it() {
        let (reader, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        let cache = Cached::new(reader, "ns");
        assert!(cache.get("b").is_none());
        cache.wrote("b", None, cm("b", "5"));
        assert_eq!(rv(cache.get("b")), Some("5".into()));
        writer.apply_watcher_event(&Event::Apply(cm("b", "5")));
        assert_eq!(rv(cache.get("b")), Some("5".into()));
        assert_eq!(cache.ahead(), 0);
        // Created and deleted again before anyone read it: the watch's delivery forgets it.
        cache.wrote("c", None, cm("c", "7"));
        writer.apply_watcher_event(&Event::Apply(cm("c", "7")));
        cache.own_writes().delivered(&cm("c", "7"));
        writer.apply_watcher_event(&Event::Delete(cm("c", "8")));
        cache.own_writes().delivered(&cm("c", "8"));
        assert!(cache.get("c").is_none(), "deleted");
        // A delivery of a version the own write replaced keeps it.
        cache.wrote("b", Some(&cm("b", "5")), cm("b", "6"));
        cache.own_writes().delivered(&cm("b", "5"));
        assert_eq!(rv(cache.get("b")), Some("6".into()));
        // Deleted by the controller: forgotten, the store decides.
        cache.wrote("b", Some(&cm("b", "5")), cm("b", "6"));
        cache.forget("b");
        writer.apply_watcher_event(&Event::Delete(cm("b", "6")));
        assert!(cache.get("b").is_none());
    }

    #[test]
    fn a_write_the_watch_delivered_before_it_was_recorded_is_not_taken_for_current() {
        let (reader, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        let cache = Cached::new(reader, "ns");
        let own = cache.own_writes();
        // Created (answer 5), then deleted by someone else (6); the watch delivers both before
        // the writer records its create: the object is gone, not "created, not yet delivered".
        writer.apply_watcher_event(&Event::Apply(cm("d", "5")));
        own.delivered(&cm("d", "5"));
        writer.apply_watcher_event(&Event::Delete(cm("d", "6")));
        own.delivered(&cm("d", "6"));
        cache.wrote("d", None, cm("d", "5"));
        assert!(cache.get("d").is_none(), "deleted after the create");
        assert_eq!(cache.ahead(), 0);
        // Changed by someone else (8) right after an own update (7) the watch delivered first:
        // the store's 8 is current.
        writer.apply_watcher_event(&Event::Apply(cm("e", "1")));
        writer.apply_watcher_event(&Event::Apply(cm("e", "7")));
        own.delivered(&cm("e", "7"));
        writer.apply_watcher_event(&Event::Apply(cm("e", "8")));
        own.delivered(&cm("e", "8"));
        cache.wrote("e", Some(&cm("e", "1")), cm("e", "7"));
        assert_eq!(rv(cache.get("e")), Some("8".into()));
        // A write not delivered yet is still recorded.
        cache.wrote("e", Some(&cm("e", "8")), cm("e", "9"));
        assert_eq!(rv(cache.get("e")), Some("9".into()));
    }
}
