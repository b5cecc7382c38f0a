//! A journal of committed changes ([`ServerHandle::journal`](crate::ServerHandle::journal)):
//! every create, update and delete the store commits after the journal was opened, in
//! resourceVersion order, never compacted. Tests wait on it for states that can be passed
//! through (a transient condition, an intermediate state): a state that lasted one write is
//! in the journal even when the object has long moved on, where sampling the current object
//! every few milliseconds can miss it.

use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::watch;

use crate::{resource::Gvr, store::EventType};

/// One committed change, as a watch would have reported it.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resourceVersion the change was committed at (one global counter per server).
    pub rv: u64,
    /// The resource of the object.
    pub gvr: Gvr,
    /// `Added`, `Modified` (also: marked for deletion) or `Deleted`.
    pub kind: EventType,
    /// The object after the change (for `Deleted`: as it was removed).
    pub object: Value,
}

impl Change {
    /// `metadata.namespace` of the object (`None` for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        self.object.pointer("/metadata/namespace")?.as_str()
    }

    /// `metadata.name` of the object (empty if missing).
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

pub(crate) struct Inner {
    changes: Mutex<Vec<Change>>,
    /// The number of changes recorded so far; waiters wake when it grows.
    len: watch::Sender<usize>,
}

/// The committed changes of one server since [`ServerHandle::journal`] opened it
/// (cheap to clone; all clones read the same record). Unlike the watch history it is never
/// compacted, so it grows with every write for as long as a clone is alive: open it for a
/// test, not for a long benchmark.
///
/// [`ServerHandle::journal`]: crate::ServerHandle::journal
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("len", &self.len()).finish()
    }
}

impl Journal {
    pub(crate) fn new() -> Journal {
        Journal {
            inner: Arc::new(Inner {
                changes: Mutex::new(Vec::new()),
                len: watch::channel(0).0,
            }),
        }
    }

    /// A weak reference for the store, so that a dropped journal stops recording.
    pub(crate) fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// Records one change (called by the store under its lock, so in resourceVersion order).
    pub(crate) fn record(inner: &Inner, change: Change) {
        let mut changes = inner.changes.lock().unwrap_or_else(|e| e.into_inner());
        changes.push(change);
        inner.len.send_replace(changes.len());
    }

    /// How many changes were recorded so far: a position to read on from with
    /// [`Journal::since`] or to wait past with [`Journal::grown`].
    pub fn len(&self) -> usize {
        *self.inner.len.borrow()
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The changes from position `from` (0 = all) on, in commit order.
    pub fn since(&self, from: usize) -> Vec<Change> {
        let changes = self.inner.changes.lock().unwrap_or_else(|e| e.into_inner());
        changes
            .get(from..)
            .map(<[Change]>::to_vec)
            .unwrap_or_default()
    }

    /// Every change recorded so far.
    pub fn changes(&self) -> Vec<Change> {
        self.since(0)
    }

    /// Waits until more than `seen` changes are recorded (returns at once if there are).
    pub async fn grown(&self, seen: usize) {
        let mut rx = self.inner.len.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|n| *n > seen).await;
    }
}
