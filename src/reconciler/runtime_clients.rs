//! The runtime-cluster clients of step 6 ([`super::admins`]): a small bounded cache, named for what
//! it holds (how every client of the reconciler gets its request deadlines is [`super::deadline`]).
//!
//! A runtime-cluster client is a whole kube client stack of about 60 KiB (connection pool with a
//! keep-alive connection, rustls config, buffer task). One kept per Runtime made memory and open
//! sockets grow with the number of Runtimes (693 MiB at 10 000; BENCHMARKS.md, "History"), while a
//! Runtime needs its client only a few times while provisioned or updated and then once per
//! resync. So [`ClientCache`] keeps the `capacity` most recently used (`--runtime-client-cache`,
//! [`DEFAULT_CAPACITY`]); an evicted client's pool and connections go with its last clone. Entries
//! carry a [`fingerprint`] of the Secret they were built from (its uid and resourceVersion, both
//! known from the cached metadata without reading the kubeconfig): a rotated kubeconfig never
//! gets the old client. docs/reconciler.md,
//! "Runtime-cluster clients and concurrency".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Default number of runtime-cluster clients kept: above twice the default concurrency (every
/// in-flight reconcile's client stays cached), about 4 MiB at ~60 KiB each. More buys nothing:
/// a Runtime uses its client once per pass that syncs its administrators (a new generation, a
/// new kubeconfig, the resync every 600 s), so at the resync's spacing no realistic cache still
/// holds it; 256 cost 15 MiB at 10 000 Runtimes for no measurable hit rate (2026-12-02).
pub(crate) const DEFAULT_CAPACITY: usize = 64;

/// The fingerprint of the kubeconfig in a Secret with metadata `meta`: its uid and
/// resourceVersion (every write of the Secret changes the latter, a re-created Secret the
/// former).
pub(crate) fn fingerprint(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.uid.as_deref().unwrap_or_default(),
        meta.resource_version.as_deref().unwrap_or_default()
    )
}

struct Entry<C> {
    fingerprint: String,
    value: C,
    used: u64,
}

struct Inner<C> {
    map: HashMap<String, Entry<C>>,
    tick: u64,
}

/// At most `capacity` values (clients) keyed by Runtime, each valid for one fingerprint;
/// least recently used evicted first. Capacity 0 caches nothing.
pub(crate) struct ClientCache<C> {
    capacity: usize,
    inner: Mutex<Inner<C>>,
}

impl<C: Clone> ClientCache<C> {
    /// An empty cache of at most `capacity` entries.
    pub(crate) fn new(capacity: usize) -> ClientCache<C> {
        ClientCache {
            capacity,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                tick: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<C>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` if it was built for `fingerprint` (and marks it used). A value of
    /// another fingerprint is stale: it is dropped at once.
    pub(crate) fn get(&self, key: &str, fingerprint: &str) -> Option<C> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        match inner.map.get_mut(key) {
            Some(e) if e.fingerprint == fingerprint => {
                e.used = tick;
                Some(e.value.clone())
            }
            Some(_) => {
                inner.map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key` built for `fingerprint`, replacing any value of `key` and, when
    /// the cache is full, evicting the least recently used entry.
    pub(crate) fn insert(&self, key: &str, fingerprint: &str, value: C) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let used = inner.tick;
        if !inner.map.contains_key(key) && inner.map.len() >= self.capacity {
            // O(capacity), only on a miss, which has just built a client (~0.6 ms).
            let oldest = inner
                .map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.map.remove(&k);
            }
        }
        inner.map.insert(
            key.to_string(),
            Entry {
                fingerprint: fingerprint.to_string(),
                value,
                used,
            },
        );
    }

    /// Drops the value of `key` (the Runtime is gone).
    pub(crate) fn remove(&self, key: &str) {
        self.lock().map.remove(key);
    }

    /// Number of values kept.
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bounded_and_least_recently_used_evicted() {
        let cache: ClientCache<u32> = ClientCache::new(3);
        for i in 0..3 {
            cache.insert(&format!("rt{i}"), "fp", i);
        }
        assert_eq!(cache.get("rt0", "fp"), Some(0)); // rt1 is now the least recently used
        cache.insert("rt3", "fp", 3);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get("rt1", "fp"), None, "evicted");
        assert_eq!(cache.get("rt0", "fp"), Some(0));
        assert_eq!(cache.get("rt2", "fp"), Some(2));
        assert_eq!(cache.get("rt3", "fp"), Some(3));
        for i in 0..10_000 {
            cache.insert(&format!("x{i}"), "fp", i);
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get("x9999", "fp"), Some(9999));
        // Replacing a key does not evict another one.
        cache.insert("x9999", "fp2", 1);
        assert_eq!(cache.get("x9998", "fp"), Some(9998));
        assert_eq!(cache.get("x9997", "fp"), Some(9997));
        cache.remove("x9997");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_changed_kubeconfig_misses_and_drops_the_old_client() {
        let cache: ClientCache<Arc<u32>> = ClientCache::new(8);
        let old = Arc::new(1);
        let meta = |uid: &str, rv: &str| ObjectMeta {
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        };
        let fp1 = fingerprint(&meta("u1", "100"));
        cache.insert("rt", &fp1, old.clone());
        assert_eq!(cache.get("rt", &fp1).as_deref(), Some(&1));
        // Rotated: a new resourceVersion.
        let fp2 = fingerprint(&meta("u1", "101"));
        assert_eq!(cache.get("rt", &fp2), None);
        assert_eq!(Arc::strong_count(&old), 1, "the stale client is dropped");
        // Deleted and created again: another uid.
        assert_ne!(fingerprint(&meta("u1", "7")), fingerprint(&meta("u2", "7")));
        assert_eq!(fingerprint(&meta("u1", "7")), fingerprint(&meta("u1", "7")));
        cache.insert("rt", &fp2, Arc::new(2));
        assert_eq!(cache.get("rt", &fp1), None);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn capacity_zero_caches_nothing() {
        let cache: ClientCache<u32> = ClientCache::new(0);
        cache.insert("rt", "fp", 1);
        assert_eq!(cache.get("rt", "fp"), None);
        assert_eq!(cache.len(), 0);
    }
}
