//! The object store: objects as JSON values, one global resourceVersion counter, a bounded
//! event history for watches, and the apiserver's object rules (create defaults, status/spec
//! separation, generation, finalizers) as pure functions.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashMap, VecDeque},
    ops::Bound,
    sync::{Arc, Weak},
};

use serde_json::{Map, Value, json};

use crate::{
    hooks::XorShift,
    resource::{Gvr, ResourceInfo},
    status::ApiError,
};

/// Watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// `ADDED` / `MODIFIED` / `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub rv: u64,
    pub res: usize,
    pub etype: EventType,
    pub object: Value,
    /// The object before a `Modified` or `Deleted` change (for label-selector transitions
    /// and for listing an older resourceVersion, [`Store::list_page`]); `None` for `Added`.
    pub prev: Option<Value>,
}

/// An object's key in the store: (namespace, name); the namespace is empty for
/// cluster-scoped resources.
pub(crate) type ObjKey = (String, String);

/// One page of a list ([`Store::list_page`]).
#[derive(Debug, Default)]
pub(crate) struct Page {
    /// The objects of the page, in key order.
    pub items: Vec<Value>,
    /// The key of the last item, when matching objects follow it.
    pub next: Option<ObjKey>,
    /// How many matching objects follow the page.
    pub remaining: usize,
}

/// The watch history no longer reaches back to the resourceVersion asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Compacted;

pub(crate) struct Store {
    pub resources: Vec<ResourceInfo>,
    index: HashMap<Gvr, usize>,
    objects: Vec<BTreeMap<ObjKey, Value>>,
    pub rv: u64,
    /// Shared with the watch streams reading it (no deep copy per watcher).
    pub history: VecDeque<Arc<Event>>,
    /// Events with `rv <= compacted` may be missing from `history`.
    pub compacted: u64,
    history_limit: usize,
    /// Open journals ([`crate::Journal`]); dropped ones are pruned on the next change.
    pub journals: Vec<Weak<crate::journal::Inner>>,
}

pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("object");
    let m = map.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut().expect("object")
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

pub(crate) fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn generation(obj: &Value) -> i64 {
    meta(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// RFC 3339 timestamp with second precision, as metav1.Time serialises.
pub(crate) fn timestamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn now() -> String {
    timestamp(chrono::Utc::now())
}

pub(crate) fn new_uid(rng: &mut XorShift) -> String {
    let a = rng.next_u64();
    let b = rng.next_u64();
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn name_suffix(rng: &mut XorShift) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[(rng.next_u64() % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// The part of an object whose change bumps `generation`: everything except `metadata`, and
/// except `status` when the resource has a status subresource (as for custom resources).
fn spec_part(info: &ResourceInfo, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if info.status_subresource {
            m.remove("status");
        }
    }
    v
}

/// Whether `new` differs from `old` only in `resourceVersion`/`managedFields` (the apiserver
/// then neither bumps the resourceVersion nor emits an event).
pub(crate) fn is_noop(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        let m = meta_mut(&mut v);
        m.remove("resourceVersion");
        m.remove("managedFields");
        v
    };
    strip(old) == strip(new)
}

/// Builds the object to create: namespace from the URL, name (or `generateName`), uid,
/// creationTimestamp, generation 1, `apiVersion`/`kind`; status dropped for resources with a
/// status subresource when `drop_status`.
pub(crate) fn prepare_create(
    info: &ResourceInfo,
    url_ns: Option<&str>,
    mut obj: Value,
    rng: &mut XorShift,
    drop_status: bool,
) -> Result<Value, ApiError> {
    let gvr = info.gvr();
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind {kind:?} of the object does not match the resource {} ({})",
            gvr.qualified(),
            info.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != info.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the apiVersion {av:?} of the object does not match {}",
            info.api_version()
        )));
    }
    let body_ns = meta_str(&obj, "namespace").map(String::from);
    if info.namespaced {
        let ns = match (url_ns, body_ns.as_deref()) {
            (Some(u), Some(b)) if !b.is_empty() && u != b => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(u), _) => u.to_string(),
            (None, Some(b)) if !b.is_empty() => b.to_string(),
            _ => {
                return Err(ApiError::bad_request(
                    "a namespace is required to create a namespaced resource",
                ));
            }
        };
        meta_mut(&mut obj).insert("namespace".into(), json!(ns));
    } else {
        meta_mut(&mut obj).remove("namespace");
    }
    let name = meta_str(&obj, "name").unwrap_or("").to_string();
    if name.is_empty() {
        let prefix = meta_str(&obj, "generateName").unwrap_or("").to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &gvr,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        let generated = format!("{prefix}{}", name_suffix(rng));
        meta_mut(&mut obj).insert("name".into(), json!(generated));
    }
    let uid = new_uid(rng);
    let m = meta_mut(&mut obj);
    m.insert("uid".into(), json!(uid));
    m.insert("creationTimestamp".into(), json!(now()));
    m.insert("generation".into(), json!(1));
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("selfLink");
    let map = obj.as_object_mut().expect("object");
    map.insert("apiVersion".into(), json!(info.api_version()));
    map.insert("kind".into(), json!(info.kind));
    if drop_status && info.status_subresource {
        map.remove("status");
    }
    Ok(obj)
}

/// Applies the apiserver's update rules to a candidate `new` object replacing `old`:
/// - `subresource == Some("status")`: only `status` is taken from `new`;
/// - main resource of a status-subresource type: `status` is kept from `old`;
/// - identity (name, namespace, uid, creationTimestamp, deletion fields) kept from `old`;
/// - `check_rv`: a non-empty `metadata.resourceVersion` different from `old`'s → 409 Conflict;
/// - no finalizer may be added to an object being deleted (422);
/// - `generation` bumped iff the spec part changed.
pub(crate) fn prepare_update(
    info: &ResourceInfo,
    subresource: Option<&str>,
    old: &Value,
    mut new: Value,
    check_rv: bool,
    separate_status: bool,
) -> Result<Value, ApiError> {
    let gvr = info.gvr();
    let name = meta_str(old, "name").unwrap_or("").to_string();
    if !new.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    if let Some(n) = meta_str(&new, "name")
        && !n.is_empty()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if info.namespaced
        && let Some(ns) = meta_str(&new, "namespace")
        && !ns.is_empty()
        && Some(ns) != meta_str(old, "namespace")
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if check_rv
        && let Some(rv) = meta_str(&new, "resourceVersion")
        && !rv.is_empty()
        && rv != meta_str(old, "resourceVersion").unwrap_or("")
    {
        return Err(ApiError::conflict(&gvr, &name));
    }
    let old_meta = meta(old).cloned().unwrap_or_default();
    if subresource == Some("status") {
        // Only status may change: everything else comes from the stored object.
        let status = new.get("status").cloned();
        let managed = meta(&new).and_then(|m| m.get("managedFields")).cloned();
        new = old.clone();
        let map = new.as_object_mut().expect("object");
        match status {
            Some(s) => {
                map.insert("status".into(), s);
            }
            None => {
                map.remove("status");
            }
        }
        if let Some(mf) = managed {
            meta_mut(&mut new).insert("managedFields".into(), mf);
        }
        return Ok(new);
    }
    {
        let map = new.as_object_mut().expect("object");
        map.insert("apiVersion".into(), json!(info.api_version()));
        map.insert("kind".into(), json!(info.kind));
        if info.status_subresource && separate_status {
            match old.get("status") {
                Some(s) => {
                    map.insert("status".into(), s.clone());
                }
                None => {
                    map.remove("status");
                }
            }
        }
    }
    let new_finalizers = finalizers(&new);
    let m = meta_mut(&mut new);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(v) => {
                m.insert(field.into(), v.clone());
            }
            None => {
                m.remove(field);
            }
        }
    }
    if is_deleting(old) {
        let old_finalizers = finalizers(old);
        if let Some(added) = new_finalizers.iter().find(|f| !old_finalizers.contains(f)) {
            return Err(ApiError::invalid(
                &gvr,
                &name,
                &format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                ),
            ));
        }
    }
    bump_generation(info, old, &mut new);
    Ok(new)
}

/// Sets `new.metadata.generation` from `old`'s, plus one if the spec part changed.
pub(crate) fn bump_generation(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let mut g = generation(old);
    if spec_part(info, old) != spec_part(info, new) {
        g += 1;
    }
    meta_mut(new).insert("generation".into(), json!(g));
}

/// The object with `deletionTimestamp` set (and generation bumped), as the apiserver stores an
/// object whose finalizers keep it.
pub(crate) fn mark_deleting(old: &Value) -> Value {
    let mut new = old.clone();
    let g = generation(old);
    let m = meta_mut(&mut new);
    m.insert("deletionTimestamp".into(), json!(now()));
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    if g > 0 {
        m.insert("generation".into(), json!(g + 1));
    }
    new
}

impl Store {
    pub fn new(resources: Vec<ResourceInfo>, history_limit: usize) -> Self {
        let mut index = HashMap::new();
        let mut unique = Vec::new();
        for r in resources {
            if index.contains_key(&r.gvr()) {
                continue;
            }
            index.insert(r.gvr(), unique.len());
            unique.push(r);
        }
        Self {
            objects: unique.iter().map(|_| BTreeMap::new()).collect(),
            resources: unique,
            index,
            rv: 0,
            history: VecDeque::new(),
            compacted: 0,
            history_limit: history_limit.max(1),
            journals: Vec::new(),
        }
    }

    pub fn res(&self, gvr: &Gvr) -> Option<usize> {
        self.index.get(gvr).copied()
    }

    pub fn key(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
        let ns = if info.namespaced {
            ns.unwrap_or("")
        } else {
            ""
        };
        (ns.to_string(), name.to_string())
    }

    pub fn get(&self, res: usize, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.objects[res].get(&Self::key(&self.resources[res], ns, name))
    }

    pub fn list(&self, res: usize, ns: Option<&str>) -> Vec<Value> {
        let map = &self.objects[res];
        match ns {
            Some(ns) if self.resources[res].namespaced => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            _ => map.values().cloned().collect(),
        }
    }

    /// One page of the objects of `res` (in namespace `ns`, or in all), in key order
    /// (namespace, then name), as they were at resourceVersion `at`: the objects after key
    /// `after` (exclusive) that `accept`, at most `limit` of them (`0`: all).
    ///
    /// The state at `at` is the current one with the history's changes after `at` undone (each
    /// change keeps the object before it), so that every page of one list shows the same
    /// snapshot, as kube-apiserver's pages served from etcd do. `Err(Compacted)` when the
    /// history no longer reaches back to `at` (the apiserver's `410 Expired`).
    pub fn list_page(
        &self,
        res: usize,
        ns: Option<&str>,
        at: u64,
        after: Option<&ObjKey>,
        limit: usize,
        mut accept: impl FnMut(&Value) -> bool,
    ) -> Result<Page, Compacted> {
        let ns = ns.filter(|_| self.resources[res].namespaced);
        let in_range = |k: &ObjKey| ns.is_none_or(|ns| k.0 == ns) && after.is_none_or(|a| k > a);
        // Key → the object at `at` (`None`: absent then) for every key changed after `at`.
        let mut undone: BTreeMap<ObjKey, Option<&Value>> = BTreeMap::new();
        if at < self.rv {
            if at < self.compacted {
                return Err(Compacted);
            }
            let skip = match self.history.front() {
                Some(first) => (at.saturating_sub(first.rv - 1) as usize).min(self.history.len()),
                None => 0,
            };
            for ev in self.history.range(skip..).filter(|e| e.res == res) {
                let key = self.obj_key(res, &ev.object);
                if in_range(&key) {
                    let before = match ev.etype {
                        EventType::Added => None,
                        EventType::Modified | EventType::Deleted => ev.prev.as_ref(),
                    };
                    undone.entry(key).or_insert(before);
                }
            }
        }
        let lower = match (after, ns) {
            (Some(a), _) => Bound::Excluded(a.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut current = self.objects[res]
            .range((lower, Bound::Unbounded))
            .take_while(|(k, _)| ns.is_none_or(|ns| k.0 == ns))
            .peekable();
        let mut undone = undone.iter().peekable();
        // Merge the current objects with the undone changes, in key order.
        let merged = std::iter::from_fn(move || {
            loop {
                let order = match (current.peek(), undone.peek()) {
                    (None, None) => return None,
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (Some((ck, _)), Some((uk, _))) => (*ck).cmp(*uk),
                };
                match order {
                    Ordering::Less => return current.next(),
                    // Changed after `at`: its state then replaces the current one.
                    Ordering::Equal => {
                        current.next();
                    }
                    Ordering::Greater => {}
                }
                let (k, v) = undone.next()?;
                if let Some(v) = v {
                    return Some((k, *v));
                }
            }
        });
        let mut page = Page::default();
        let mut last = None;
        for (key, obj) in merged {
            if !accept(obj) {
                continue;
            }
            if limit == 0 || page.items.len() < limit {
                page.items.push(obj.clone());
                last = Some(key);
            } else {
                page.remaining += 1;
            }
        }
        if page.remaining > 0 {
            page.next = last.cloned();
        }
        Ok(page)
    }

    fn obj_key(&self, res: usize, obj: &Value) -> ObjKey {
        Self::key(
            &self.resources[res],
            meta_str(obj, "namespace"),
            meta_str(obj, "name").unwrap_or(""),
        )
    }

    fn push_event(&mut self, res: usize, etype: EventType, object: Value, prev: Option<Value>) {
        if !self.journals.is_empty() {
            let gvr = self.resources[res].gvr();
            self.journals.retain(|j| match j.upgrade() {
                Some(inner) => {
                    let change = crate::journal::Change {
                        rv: self.rv,
                        gvr: gvr.clone(),
                        kind: etype,
                        object: object.clone(),
                    };
                    crate::journal::Journal::record(&inner, change);
                    true
                }
                None => false,
            });
        }
        self.history.push_back(Arc::new(Event {
            rv: self.rv,
            res,
            etype,
            object,
            prev,
        }));
        while self.history.len() > self.history_limit {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
    }

    fn next_rv(&mut self, obj: &mut Value) {
        self.rv += 1;
        meta_mut(obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
    }

    /// Inserts a new object (caller checked absence).
    pub fn commit_create(&mut self, res: usize, mut obj: Value) -> Value {
        self.next_rv(&mut obj);
        let key = self.obj_key(res, &obj);
        self.objects[res].insert(key, obj.clone());
        self.push_event(res, EventType::Added, obj.clone(), None);
        obj
    }

    /// Stores `new` over `old`; removes it instead when it is being deleted and has no
    /// finalizers left.
    pub fn commit_update(&mut self, res: usize, old: &Value, mut new: Value) -> Value {
        self.next_rv(&mut new);
        let key = self.obj_key(res, old);
        if is_deleting(&new) && finalizers(&new).is_empty() {
            self.objects[res].remove(&key);
            self.push_event(res, EventType::Deleted, new.clone(), Some(old.clone()));
        } else {
            self.objects[res].insert(key, new.clone());
            self.push_event(res, EventType::Modified, new.clone(), Some(old.clone()));
        }
        new
    }

    /// Removes the object.
    pub fn commit_delete(&mut self, res: usize, old: &Value) -> Value {
        let mut obj = old.clone();
        self.next_rv(&mut obj);
        let key = self.obj_key(res, old);
        self.objects[res].remove(&key);
        self.push_event(res, EventType::Deleted, obj.clone(), Some(old.clone()));
        obj
    }

    /// Deletes an object honouring finalizers: marks it deleting (if finalizers remain) or
    /// removes it. Returns the resulting object.
    pub fn delete_now(&mut self, res: usize, old: &Value) -> Value {
        if finalizers(old).is_empty() {
            self.commit_delete(res, old)
        } else if is_deleting(old) {
            old.clone()
        } else {
            let marked = mark_deleting(old);
            self.commit_update(res, old, marked)
        }
    }

    /// Forgets all history: any watch resuming from a resourceVersion older than now gets 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Events with `rv > after`, or `Err(oldest available)` if some were compacted away.
    pub fn events_after(&self, after: u64) -> Result<Vec<Arc<Event>>, u64> {
        if after < self.compacted {
            return Err(self.compacted + 1);
        }
        let Some(first) = self.history.front() else {
            return Ok(Vec::new());
        };
        // Resource versions in the history are consecutive: index straight to the first event
        // after `after` instead of walking the history.
        let skip = (after.saturating_sub(first.rv - 1) as usize).min(self.history.len());
        Ok(self.history.range(skip..).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtimes() -> ResourceInfo {
        ResourceInfo::new(
            "infrastructuremanager.kyma-project.io",
            "v1",
            "runtimes",
            "Runtime",
            true,
        )
        .with_status()
    }

    #[test]
    fn create_defaults_and_generate_name() {
        let mut rng = XorShift::new(1);
        let obj = prepare_create(
            &runtimes(),
            Some("kcp"),
            json!({"metadata": {"generateName": "rt-"}, "spec": {"a": 1}, "status": {"state": "Ready"}}),
            &mut rng,
            true,
        )
        .unwrap();
        assert!(meta_str(&obj, "name").unwrap().starts_with("rt-"));
        assert_eq!(meta_str(&obj, "name").unwrap().len(), 8);
        assert_eq!(meta_str(&obj, "namespace"), Some("kcp"));
        assert_eq!(obj["metadata"]["generation"], 1);
        assert_eq!(obj["kind"], "Runtime");
        assert!(obj.get("status").is_none());
        assert_eq!(meta_str(&obj, "uid").unwrap().len(), 36);
    }

    #[test]
    fn update_rules() {
        let info = runtimes();
        let old = json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "5", "generation": 2},
            "spec": {"x": 1}, "status": {"state": "Pending"}});
        // label change: no generation bump, status kept
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"l": "v"});
        new["status"] = json!({"state": "Ready"});
        let out = prepare_update(&info, None, &old, new, true, true).unwrap();
        assert_eq!(out["metadata"]["generation"], 2);
        assert_eq!(out["status"]["state"], "Pending");
        // spec change bumps
        let mut new = old.clone();
        new["spec"]["x"] = json!(2);
        let out = prepare_update(&info, None, &old, new, true, true).unwrap();
        assert_eq!(out["metadata"]["generation"], 3);
        // status write ignores spec and metadata
        let mut new = old.clone();
        new["spec"]["x"] = json!(9);
        new["metadata"]["labels"] = json!({"l": "v"});
        new["status"] = json!({"state": "Ready"});
        let out = prepare_update(&info, Some("status"), &old, new, true, true).unwrap();
        assert_eq!(out["spec"]["x"], 1);
        assert!(out["metadata"].get("labels").is_none());
        assert_eq!(out["status"]["state"], "Ready");
        // stale rv
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!("4");
        assert_eq!(
            prepare_update(&info, None, &old, new, true, true)
                .unwrap_err()
                .code,
            409
        );
    }

    #[test]
    fn history_compaction() {
        let mut s = Store::new(vec![runtimes()], 2);
        let mut rng = XorShift::new(3);
        for n in ["a", "b", "c"] {
            let o = prepare_create(
                &runtimes(),
                Some("x"),
                json!({"metadata": {"name": n}}),
                &mut rng,
                true,
            )
            .unwrap();
            s.commit_create(0, o);
        }
        assert_eq!(s.events_after(1).unwrap().len(), 2);
        assert_eq!(s.events_after(2).unwrap().len(), 1);
        assert_eq!(s.events_after(3).unwrap().len(), 0);
        assert!(s.events_after(0).is_err());
        s.compact();
        assert!(s.events_after(2).is_err());
        assert_eq!(s.events_after(3).unwrap().len(), 0);
    }
}
