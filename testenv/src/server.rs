//! Server configuration, start-up, the test-side [`ServerHandle`] and the write pipeline
//! shared by HTTP handlers and direct store access.

use std::{
    collections::{HashMap, VecDeque},
    future::Future,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{Router, extract::DefaultBodyLimit, serve::ListenerExt};
use serde_json::Value;
use tokio::sync::watch;

use crate::{
    hooks::{
        AdminKubeconfigFn, AdminKubeconfigRequest, AdmissionDecision, AdmissionFn,
        AdmissionRequest, FaultAction, FaultFn, FaultRule, RequestInfo, RequestRecord, UserInfo,
        Verb, XorShift,
    },
    resource::{Gvr, ResourceInfo, default_resources},
    status::ApiError,
    store::{self, Store, meta_str},
};

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Served resources (default: [`default_resources`]).
    pub resources: Vec<ResourceInfo>,
    /// How many events the watch history keeps (default 10 000). A watch resuming from a
    /// resourceVersion older than the history gets `410 Gone`, as from an apiserver whose watch
    /// cache/etcd was compacted.
    pub history_limit: usize,
    /// Seed of the RNG used for fault probabilities, uids and generated names (default 1).
    pub seed: u64,
    /// How often an idle watch with `allowWatchBookmarks=true` gets a BOOKMARK when its
    /// position advanced past events it filtered out (default 1 s).
    pub bookmark_interval: Duration,
    /// Bearer tokens → users.
    pub users: Vec<(String, UserInfo)>,
    /// Name used for the cluster/context/user in generated kubeconfigs (default `testenv`).
    pub name: String,
    /// How many requests the request log ([`ServerHandle::requests`]) keeps (default:
    /// unbounded). When full, the oldest record is dropped (counted by
    /// [`ServerHandle::dropped_requests`]); `0` switches the log off. Long runs with many
    /// objects (benchmarks) should bound it; [`ServerHandle::request_count`] counts every
    /// request either way.
    pub request_log_limit: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            resources: default_resources(),
            history_limit: 10_000,
            seed: 1,
            bookmark_interval: Duration::from_secs(1),
            users: Vec::new(),
            name: "testenv".to_string(),
            request_log_limit: usize::MAX,
        }
    }
}

impl ServerConfig {
    /// Adds (or replaces) a served resource.
    #[must_use]
    pub fn resource(mut self, info: ResourceInfo) -> Self {
        self.resources.retain(|r| r.gvr() != info.gvr());
        self.resources.push(info);
        self
    }

    /// Maps a bearer token to a user.
    #[must_use]
    pub fn user(mut self, token: &str, user: UserInfo) -> Self {
        self.users.push((token.to_string(), user));
        self
    }

    /// Sets the RNG seed.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the watch history length.
    #[must_use]
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Sets the bookmark interval.
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Bounds the request log (`0`: no log); see [`ServerConfig::request_log_limit`].
    #[must_use]
    pub fn request_log_limit(mut self, n: usize) -> Self {
        self.request_log_limit = n;
        self
    }

    /// Sets the kubeconfig cluster/context name.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Per-write context.
#[derive(Clone, Debug)]
pub(crate) struct WriteCtx {
    pub user: UserInfo,
    pub dry_run: bool,
    pub field_manager: Option<String>,
}

/// What a write computes from the current object.
pub(crate) enum Candidate {
    /// The object does not exist and should be created (server-side apply).
    Create(Value),
    /// Replace the object with this.
    Update(Value),
}

pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub rv_tx: watch::Sender<u64>,
    pub rng: Mutex<XorShift>,
    pub faults: Mutex<Vec<FaultRule>>,
    pub fault_fn: Mutex<Option<FaultFn>>,
    pub admission: Mutex<Option<AdmissionFn>>,
    pub plugins: Mutex<Vec<(String, AdmissionFn)>>,
    pub log: Mutex<RequestLog>,
    /// Every request served (whether or not the log keeps it).
    pub served: AtomicU64,
    pub users: Mutex<HashMap<String, UserInfo>>,
    pub admin_kubeconfig: Mutex<Option<AdminKubeconfigFn>>,
    pub url: String,
    pub name: String,
    pub bookmark_interval: Duration,
    pub shutdown: watch::Receiver<bool>,
}

const WRITE_ATTEMPTS: usize = 16;

/// The request log: the latest `limit` records and how many older ones were dropped.
pub(crate) struct RequestLog {
    records: VecDeque<RequestRecord>,
    limit: usize,
    dropped: u64,
}

impl RequestLog {
    fn new(limit: usize) -> Self {
        Self {
            records: VecDeque::new(),
            limit,
            dropped: 0,
        }
    }

    fn push(&mut self, record: RequestRecord) {
        if self.limit == 0 {
            self.dropped += 1;
            return;
        }
        if self.records.len() >= self.limit {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(record);
    }
}

impl Shared {
    /// Logs a served request.
    pub fn log_request(&self, record: RequestRecord) {
        self.served.fetch_add(1, Ordering::Relaxed);
        lock(&self.log).push(record);
    }

    pub fn notify(&self, rv: u64) {
        self.rv_tx.send_replace(rv);
    }

    pub fn info(&self, res: usize) -> ResourceInfo {
        lock(&self.store).resources[res].clone()
    }

    /// Draws a fault for this request, if any rule or the fault closure hits it.
    pub fn fault_for(&self, req: &RequestInfo) -> Option<FaultAction> {
        let f = lock(&self.fault_fn).clone();
        if let Some(f) = f
            && let Some(action) = f(req)
        {
            return Some(action);
        }
        let mut rules = lock(&self.faults);
        for rule in rules.iter_mut() {
            if !rule.matches(req) {
                continue;
            }
            let hit = rule.probability >= 1.0 || lock(&self.rng).next_f64() < rule.probability;
            if hit {
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
                return Some(rule.action.clone());
            }
        }
        None
    }

    /// Runs the admission plugins and then the test hook. Returns the (possibly mutated) object.
    pub async fn admit(&self, req: AdmissionRequest) -> Result<Option<Value>, ApiError> {
        let mut chain: Vec<AdmissionFn> =
            lock(&self.plugins).iter().map(|(_, f)| f.clone()).collect();
        if let Some(hook) = lock(&self.admission).clone() {
            chain.push(hook);
        }
        let mut req = req;
        for hook in chain {
            match hook(req.clone()).await {
                AdmissionDecision::Allow => {}
                AdmissionDecision::Mutate(obj) => {
                    if req.verb != Verb::Delete {
                        req.object = Some(obj);
                    }
                }
                AdmissionDecision::Deny { code, message } => {
                    return Err(ApiError::from_code(code, message));
                }
            }
        }
        Ok(req.object)
    }

    fn admission_request(
        &self,
        verb: Verb,
        info: &ResourceInfo,
        sub: Option<&str>,
        old: Option<&Value>,
        new: Option<&Value>,
        ctx: &WriteCtx,
    ) -> AdmissionRequest {
        let obj = new.or(old).expect("an object");
        AdmissionRequest {
            verb,
            gvr: info.gvr(),
            kind: info.kind.clone(),
            subresource: sub.map(String::from),
            namespace: meta_str(obj, "namespace").map(String::from),
            name: meta_str(obj, "name").unwrap_or("").to_string(),
            old_object: old.cloned(),
            object: new.cloned(),
            user: ctx.user.clone(),
            dry_run: ctx.dry_run,
            field_manager: ctx.field_manager.clone(),
        }
    }

    /// Create through admission.
    pub async fn create(
        &self,
        res: usize,
        ns: Option<&str>,
        body: Value,
        verb: Verb,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let info = self.info(res);
        let obj = {
            let mut rng = lock(&self.rng);
            store::prepare_create(&info, ns, body, &mut rng, true)?
        };
        let req = self.admission_request(verb, &info, None, None, Some(&obj), ctx);
        let admitted = self.admit(req).await?.unwrap_or(obj.clone());
        // Re-apply the create rules to whatever admission returned (identity stays ours).
        let mut obj2 = admitted;
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            match obj.get("metadata").and_then(|m| m.get(f)) {
                Some(v) => {
                    store::meta_mut(&mut obj2).insert(f.into(), v.clone());
                }
                None => {
                    store::meta_mut(&mut obj2).remove(f);
                }
            }
        }
        if info.status_subresource
            && let Some(m) = obj2.as_object_mut()
        {
            m.remove("status");
        }
        if ctx.dry_run {
            return Ok(obj2);
        }
        let name = meta_str(&obj2, "name").unwrap_or("").to_string();
        let objns = meta_str(&obj2, "namespace").map(String::from);
        let mut st = lock(&self.store);
        if st.get(res, objns.as_deref(), &name).is_some() {
            return Err(ApiError::already_exists(&info.gvr(), &name));
        }
        let out = st.commit_create(res, obj2);
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(out)
    }

    /// Update-like write (PUT, PATCH, apply) with optimistic retries when the object changes
    /// between reading it and committing (the client's own resourceVersion precondition is
    /// re-checked on every attempt).
    #[allow(clippy::too_many_arguments)]
    pub async fn update<F>(
        &self,
        res: usize,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        verb: Verb,
        ctx: &WriteCtx,
        compute: F,
    ) -> Result<Value, ApiError>
    where
        F: Fn(Option<&Value>) -> Result<Candidate, ApiError>,
    {
        let info = self.info(res);
        let gvr = info.gvr();
        for _ in 0..WRITE_ATTEMPTS {
            let old = lock(&self.store).get(res, ns, name).cloned();
            let candidate = compute(old.as_ref())?;
            let new = match candidate {
                Candidate::Create(body) => return self.create(res, ns, body, verb, ctx).await,
                Candidate::Update(new) => new,
            };
            let Some(old) = old else {
                return Err(ApiError::not_found(&gvr, name));
            };
            let new = store::prepare_update(&info, sub, &old, new, true, true)?;
            let req = self.admission_request(verb, &info, sub, Some(&old), Some(&new), ctx);
            let admitted = self.admit(req).await?.unwrap_or(new);
            let new = store::prepare_update(&info, sub, &old, admitted, false, true)?;
            if store::is_noop(&old, &new) {
                return Ok(old);
            }
            if ctx.dry_run {
                return Ok(new);
            }
            let mut st = lock(&self.store);
            match st.get(res, ns, name) {
                None => return Err(ApiError::not_found(&gvr, name)),
                Some(cur) if store::rv_of(cur) != store::rv_of(&old) => continue,
                Some(_) => {}
            }
            let out = st.commit_update(res, &old, new);
            let rv = st.rv;
            drop(st);
            self.notify(rv);
            return Ok(out);
        }
        Err(ApiError::conflict(&gvr, name))
    }

    /// DELETE through admission, honouring finalizers and preconditions.
    pub async fn delete(
        &self,
        res: usize,
        ns: Option<&str>,
        name: &str,
        precondition_rv: Option<String>,
        precondition_uid: Option<String>,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let info = self.info(res);
        let gvr = info.gvr();
        for _ in 0..WRITE_ATTEMPTS {
            let Some(old) = lock(&self.store).get(res, ns, name).cloned() else {
                return Err(ApiError::not_found(&gvr, name));
            };
            if let Some(uid) = &precondition_uid
                && Some(uid.as_str()) != meta_str(&old, "uid")
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&old, "uid").unwrap_or("")
                    ),
                ));
            }
            if let Some(rv) = &precondition_rv
                && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(&old, "resourceVersion").unwrap_or("")
                    ),
                ));
            }
            let req = self.admission_request(Verb::Delete, &info, None, Some(&old), None, ctx);
            self.admit(req).await?;
            if ctx.dry_run {
                return Ok(old);
            }
            let mut st = lock(&self.store);
            match st.get(res, ns, name) {
                None => return Err(ApiError::not_found(&gvr, name)),
                Some(cur) if store::rv_of(cur) != store::rv_of(&old) => continue,
                Some(_) => {}
            }
            let before = st.rv;
            let out = st.delete_now(res, &old);
            let rv = st.rv;
            drop(st);
            if rv != before {
                self.notify(rv);
            }
            return Ok(out);
        }
        Err(ApiError::conflict(&gvr, name))
    }
}

struct ShutdownGuard(watch::Sender<bool>);

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// A running in-memory API server. Cloning is cheap; the server stops when the last clone is
/// dropped (or on [`ServerHandle::shutdown`]).
#[derive(Clone)]
pub struct ServerHandle {
    pub(crate) shared: Arc<Shared>,
    guard: Arc<ShutdownGuard>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("url", &self.shared.url)
            .finish()
    }
}

/// Starts a server on `127.0.0.1:<random port>` (plain HTTP). Must be called inside a tokio
/// runtime.
pub async fn start(config: ServerConfig) -> std::io::Result<ServerHandle> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (rv_tx, _) = watch::channel(0u64);
    let shared = Arc::new(Shared {
        store: Mutex::new(Store::new(config.resources, config.history_limit)),
        rv_tx,
        rng: Mutex::new(XorShift::new(config.seed)),
        faults: Mutex::new(Vec::new()),
        fault_fn: Mutex::new(None),
        admission: Mutex::new(None),
        plugins: Mutex::new(Vec::new()),
        log: Mutex::new(RequestLog::new(config.request_log_limit)),
        served: AtomicU64::new(0),
        users: Mutex::new(config.users.into_iter().collect()),
        admin_kubeconfig: Mutex::new(None),
        url,
        name: config.name,
        bookmark_interval: config.bookmark_interval,
        shutdown: shutdown_rx.clone(),
    });
    // Small writes (response heads, watch events) go out at once: with Nagle's algorithm a
    // watch event written while the previous one is unacknowledged waits for the client's
    // delayed ACK (up to 40 ms on Linux).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("testenv: TCP_NODELAY: {e}");
        }
    });
    let app = app(shared.clone());
    let mut stop = shutdown_rx;
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::warn!("testenv server stopped: {e}");
        }
    });
    Ok(ServerHandle {
        shared,
        guard: Arc::new(ShutdownGuard(shutdown_tx)),
    })
}

/// The HTTP application of a server (shared by its plain-HTTP and HTTPS endpoints).
fn app(shared: Arc<Shared>) -> Router {
    Router::new()
        .fallback(crate::http::handle)
        .with_state(shared)
        .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
}

fn res_of(st: &Store, gvr: &Gvr) -> Result<usize, ApiError> {
    st.res(gvr).ok_or_else(ApiError::no_route)
}

impl ServerHandle {
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// A kubeconfig YAML pointing at this server, with a bearer token if given.
    pub fn kubeconfig_yaml(&self, token: Option<&str>) -> String {
        kubeconfig_yaml(&self.shared.url, &self.shared.name, token)
    }

    /// Stops serving (open watches end). Also happens when the last clone is dropped.
    pub fn shutdown(&self) {
        self.guard.0.send_replace(true);
    }

    /// Maps a bearer token to a user.
    pub fn add_user(&self, token: &str, user: UserInfo) {
        lock(&self.shared.users).insert(token.to_string(), user);
    }

    // ----- direct store access -----

    /// The stored object, if any (no HTTP, no hooks).
    pub fn get(&self, gvr: &Gvr, ns: Option<&str>, name: &str) -> Option<Value> {
        let st = lock(&self.shared.store);
        let res = st.res(gvr)?;
        st.get(res, ns, name).cloned()
    }

    /// All stored objects of a resource, in one namespace or (`None`) in all, sorted by
    /// namespace and name.
    pub fn list(&self, gvr: &Gvr, ns: Option<&str>) -> Vec<Value> {
        let st = lock(&self.shared.store);
        st.res(gvr).map_or_else(Vec::new, |res| st.list(res, ns))
    }

    /// Creates or replaces an object directly (no admission, no faults, no status/spec
    /// separation — status is stored as given). Create defaults (uid, creationTimestamp,
    /// generation) and the generation rule apply; watchers see the change. Identity fields and
    /// deletion state of an existing object are kept.
    pub fn put(&self, gvr: &Gvr, obj: Value) -> Result<Value, ApiError> {
        let mut st = lock(&self.shared.store);
        let res = res_of(&st, gvr)?;
        let info = st.resources[res].clone();
        let ns = meta_str(&obj, "namespace").map(String::from);
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let out = match st.get(res, ns.as_deref(), &name).cloned() {
            Some(old) => {
                let new = store::prepare_update(&info, None, &old, obj, false, false)?;
                if store::is_noop(&old, &new) {
                    return Ok(old);
                }
                st.commit_update(res, &old, new)
            }
            None => {
                let obj = {
                    let mut rng = lock(&self.shared.rng);
                    store::prepare_create(&info, ns.as_deref(), obj, &mut rng, false)?
                };
                st.commit_create(res, obj)
            }
        };
        let rv = st.rv;
        drop(st);
        self.shared.notify(rv);
        Ok(out)
    }

    /// Changes a stored object in place through `f` (no admission, no faults). The generation
    /// rule applies; an object being deleted whose finalizers become empty is removed.
    pub fn modify(
        &self,
        gvr: &Gvr,
        ns: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let mut st = lock(&self.shared.store);
        let res = res_of(&st, gvr)?;
        let info = st.resources[res].clone();
        let Some(old) = st.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(gvr, name));
        };
        let mut new = old.clone();
        f(&mut new);
        let new = store::prepare_update(&info, None, &old, new, false, false)?;
        if store::is_noop(&old, &new) {
            return Ok(old);
        }
        let out = st.commit_update(res, &old, new);
        let rv = st.rv;
        drop(st);
        self.shared.notify(rv);
        Ok(out)
    }

    /// Deletes directly (no admission): marks the object deleting while finalizers remain,
    /// removes it otherwise.
    pub fn delete(&self, gvr: &Gvr, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let mut st = lock(&self.shared.store);
        let res = res_of(&st, gvr)?;
        let Some(old) = st.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(gvr, name));
        };
        let out = st.delete_now(res, &old);
        let rv = st.rv;
        drop(st);
        self.shared.notify(rv);
        Ok(out)
    }

    /// The current (global) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv
    }

    /// Opens a [`Journal`](crate::Journal) of every change committed from now on (creates,
    /// updates, deletes; through HTTP or direct store access), never compacted. For waiting on
    /// states that can be passed through: the journal keeps each one, the current object may
    /// already have moved on.
    pub fn journal(&self) -> crate::Journal {
        let journal = crate::Journal::new();
        lock(&self.shared.store).journals.push(journal.downgrade());
        journal
    }

    /// Drops the whole watch history, as an etcd compaction would: watches resuming from any
    /// older resourceVersion get `410 Gone` (kube-runtime's watcher then relists).
    pub fn compact_history(&self) {
        lock(&self.shared.store).compact();
    }

    // ----- faults -----

    /// Adds a fault rule (rules are tried in order; the first hit applies).
    pub fn add_fault(&self, rule: FaultRule) {
        lock(&self.shared.faults).push(rule);
    }

    /// Removes all fault rules and the fault closure.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
        *lock(&self.shared.fault_fn) = None;
    }

    /// Sets a closure consulted (before the rules) for every request.
    pub fn set_fault_fn(
        &self,
        f: impl Fn(&RequestInfo) -> Option<FaultAction> + Send + Sync + 'static,
    ) {
        *lock(&self.shared.fault_fn) = Some(Arc::new(f));
    }

    /// Reseeds the RNG (fault probabilities, uids, generated names).
    pub fn reseed(&self, seed: u64) {
        *lock(&self.shared.rng) = XorShift::new(seed);
    }

    // ----- admission -----

    /// Sets the test's admission hook (synchronous closure), called on every write after the
    /// built-in plugins: create, update, patch, delete, including `/status` writes.
    pub fn set_admission(
        &self,
        f: impl Fn(&AdmissionRequest) -> AdmissionDecision + Send + Sync + 'static,
    ) {
        let f = Arc::new(f);
        *lock(&self.shared.admission) = Some(Arc::new(move |req: AdmissionRequest| {
            let decision = f(&req);
            Box::pin(async move { decision })
        }));
    }

    /// Sets the test's admission hook as an async closure (e.g. one calling a webhook over
    /// HTTPS).
    pub fn set_admission_async<F, Fut>(&self, f: F)
    where
        F: Fn(AdmissionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = AdmissionDecision> + Send + 'static,
    {
        *lock(&self.shared.admission) =
            Some(Arc::new(move |req: AdmissionRequest| Box::pin(f(req))));
    }

    /// Removes the test's admission hook.
    pub fn clear_admission(&self) {
        *lock(&self.shared.admission) = None;
    }

    /// Adds a named built-in admission plugin (run before the test hook, in insertion order;
    /// a plugin with the same name is replaced). The simulated Gardener installs its
    /// plugins this way.
    pub fn add_admission_plugin(&self, name: &str, f: AdmissionFn) {
        let mut plugins = lock(&self.shared.plugins);
        plugins.retain(|(n, _)| n != name);
        plugins.push((name.to_string(), f));
    }

    // ----- request log -----

    /// All requests served so far (the latest [`ServerConfig::request_log_limit`] of them).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).records.iter().cloned().collect()
    }

    /// Number of logged requests matching `pred`.
    pub fn count_requests(&self, pred: impl Fn(&RequestRecord) -> bool) -> usize {
        lock(&self.shared.log)
            .records
            .iter()
            .filter(|r| pred(r))
            .count()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).records.clear();
    }

    /// Every request served since the start, including those the log dropped or never kept
    /// ([`ServerConfig::request_log_limit`]) and those before [`Self::clear_requests`].
    pub fn request_count(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    /// Requests the bounded log dropped (or did not keep, with a limit of 0).
    pub fn dropped_requests(&self) -> u64 {
        lock(&self.shared.log).dropped
    }

    // ----- adminkubeconfig -----

    /// Sets the closure producing the kubeconfig YAML returned by the Shoot `adminkubeconfig`
    /// subresource (the server base64-encodes it). Default: a kubeconfig for
    /// `https://api.<shoot>.<namespace>.testenv.invalid` with token `admin-<shoot>`.
    pub fn set_admin_kubeconfig(
        &self,
        f: impl Fn(&AdminKubeconfigRequest) -> String + Send + Sync + 'static,
    ) {
        *lock(&self.shared.admin_kubeconfig) = Some(Arc::new(f));
    }
}

fn yaml_quote(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

/// A kubeconfig YAML with one cluster/context/user named `name`, server `url` and an optional
/// bearer token.
pub fn kubeconfig_yaml(url: &str, name: &str, token: Option<&str>) -> String {
    kubeconfig_yaml_with_ca(url, name, token, None)
}

/// As [`kubeconfig_yaml`], with the CA certificate (PEM) to trust for an `https` server.
pub fn kubeconfig_yaml_with_ca(
    url: &str,
    name: &str,
    token: Option<&str>,
    ca_pem: Option<&str>,
) -> String {
    use base64::Engine as _;
    let user = match token {
        Some(t) => format!("  user:\n    token: {}\n", yaml_quote(t)),
        None => "  user: {}\n".to_string(),
    };
    let ca = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {n}\n  cluster:\n    server: {u}\n{ca}contexts:\n- name: {n}\n  context:\n    cluster: {n}\n    user: {n}\ncurrent-context: {n}\nusers:\n- name: {n}\n{user}",
        n = yaml_quote(name),
        u = yaml_quote(url),
    )
}

#[cfg(feature = "kube")]
impl ServerHandle {
    /// A `kube::Config` for this server (plain HTTP, default namespace `default`), with the
    /// bearer token if given. kube's default retry of 429/503/504 is left on, as for a real
    /// client; switch `default_retry` off to observe those codes directly.
    pub fn kube_config(&self, token: Option<&str>) -> kube::Config {
        let mut config = kube::Config::new(self.shared.url.parse().expect("valid url"));
        if let Some(t) = token {
            config.auth_info.token = Some(t.to_string().into());
        }
        config
    }

    /// An anonymous `kube::Client` for this server. Must be called inside a tokio runtime
    /// (the client spawns its request buffer there).
    pub fn client(&self) -> kube::Client {
        self.client_as(None)
    }

    /// A `kube::Client` authenticating with `token`.
    pub fn client_as(&self, token: Option<&str>) -> kube::Client {
        kube::Client::try_from(self.kube_config(token)).expect("kube client")
    }
}
