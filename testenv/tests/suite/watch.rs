//! Watches through `kube::Api::watch` and `kube::runtime::watcher`: events, resume from a
//! resourceVersion, 410 Gone after compaction (and the watcher's recovery), bookmarks,
//! streaming lists, selectors, timeouts.

use crate::support;

use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
    core::PartialObjectMeta,
    runtime::watcher,
};
use serde_json::json;
use testenv::{ServerConfig, ServerHandle};

use support::secret;

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn next<S, T>(stream: &mut S) -> T
where
    S: Stream<Item = T> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("stream still open")
}

/// The next non-BOOKMARK event of a raw watch.
async fn next_change<S>(stream: &mut S) -> WatchEvent<Secret>
where
    S: Stream<Item = kube::Result<WatchEvent<Secret>>> + Unpin,
{
    loop {
        match next(stream).await.unwrap() {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}

fn describe(e: &WatchEvent<Secret>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.name_any()),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.name_any()),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.name_any()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

async fn start(config: ServerConfig) -> (ServerHandle, Api<Secret>) {
    let s = testenv::start(config).await.unwrap();
    let api = Api::namespaced(s.client(), "kcp");
    (s, api)
}

#[tokio::test]
async fn raw_watch_streams_added_modified_deleted() {
    let (_s, api) = start(ServerConfig::default()).await;
    api.create(&PostParams::default(), &secret("before", &[]))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    // resourceVersion "0": the current state first
    let e = next_change(&mut stream).await;
    assert_eq!(describe(&e), "ADDED before");

    api.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    let patch = Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}}));
    api.patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_change(&mut stream).await));
    }
    assert_eq!(seen, ["ADDED a", "MODIFIED a", "DELETED a"]);
}

#[tokio::test]
async fn watch_resumes_from_resource_version_and_reports_gone() {
    let (s, api) = start(ServerConfig::default().history_limit(5)).await;
    let a = api
        .create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("b", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("c", &[]))
        .await
        .unwrap();

    // resume after "a": only b and c are replayed
    let rv = a.resource_version().unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next_change(&mut stream).await), "ADDED b");
    assert_eq!(describe(&next_change(&mut stream).await), "ADDED c");
    drop(stream);

    // push "a" out of the 5-event history
    let leases: Api<Lease> = Api::namespaced(s.client(), "kcp");
    for i in 0..5 {
        leases
            .create(&PostParams::default(), &lease(&format!("l{i}")))
            .await
            .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_change(&mut stream).await {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
            assert!(
                status.message.starts_with("too old resource version: 1 ("),
                "{}",
                status.message
            );
        }
        other => panic!("expected 410, got {}", describe(&other)),
    }

    // explicit compaction has the same effect for any older resourceVersion
    let now = s.resource_version();
    s.compact_history();
    let mut stream = api
        .watch(&WatchParams::default(), &(now - 1).to_string())
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next_change(&mut stream).await, WatchEvent::Error(st) if st.code == 410));
}

#[tokio::test]
async fn watcher_recovers_from_gone_by_relisting() {
    let (s, api) = start(ServerConfig::default()).await;
    api.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::Init
    ));
    assert!(
        matches!(next(&mut events).await.unwrap(), watcher::Event::InitApply(o) if o.name_any() == "a")
    );
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::InitDone
    ));

    // Before the watcher (re)connects from its list's resourceVersion: a change elsewhere, a
    // new Secret, and a compaction of the history. Its watch gets 410 and it relists, which is
    // the only way it can learn about "b".
    s.put(
        &testenv::Gvr::leases(),
        json!({"metadata": {"name": "l", "namespace": "kcp"}}),
    )
    .unwrap();
    s.put(
        &testenv::Gvr::secrets(),
        json!({"metadata": {"name": "b", "namespace": "kcp"}}),
    )
    .unwrap();
    s.compact_history();

    let mut saw_gone = false;
    let mut relisted = Vec::new();
    loop {
        match next(&mut events).await {
            Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_gone = true,
            Err(e) => panic!("unexpected watcher error {e:?}"),
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(o)) => relisted.push(o.name_any()),
            Ok(watcher::Event::InitDone) => break,
            Ok(watcher::Event::Apply(o)) => relisted.push(format!("apply {}", o.name_any())),
            Ok(watcher::Event::Delete(_)) => {}
        }
    }
    assert!(saw_gone, "the watcher saw 410 Gone");
    assert_eq!(relisted, ["a", "b"]);
}

#[tokio::test]
async fn bookmarks_advance_the_resource_version() {
    let (s, api) =
        start(ServerConfig::default().bookmark_interval(Duration::from_millis(100))).await;
    let start_rv = s.resource_version().to_string();
    let wp = WatchParams::default(); // allowWatchBookmarks=true is kube's default
    let mut stream = api.watch(&wp, &start_rv).await.unwrap().boxed();
    let leases: Api<Lease> = Api::namespaced(s.client(), "kcp");
    leases
        .create(&PostParams::default(), &lease("l"))
        .await
        .unwrap();
    let target = s.resource_version();
    match next(&mut stream).await.unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.resource_version, target.to_string());
            assert_eq!(b.types.kind, "Secret");
        }
        other => panic!("expected a bookmark, got {}", describe(&other)),
    }
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_bookmark() {
    let (_s, api) = start(ServerConfig::default()).await;
    api.create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("b", &[]))
        .await
        .unwrap();
    let cfg = watcher::Config::default().streaming_lists();
    let mut events = watcher(api.clone(), cfg).boxed();
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::Init
    ));
    let mut names = Vec::new();
    loop {
        match next(&mut events).await.unwrap() {
            watcher::Event::InitApply(o) => names.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, ["a", "b"]);
    api.create(&PostParams::default(), &secret("c", &[]))
        .await
        .unwrap();
    assert!(
        matches!(next(&mut events).await.unwrap(), watcher::Event::Apply(o) if o.name_any() == "c")
    );
}

#[tokio::test]
async fn watcher_sees_apply_and_delete_with_finalizers() {
    let s = testenv::start(ServerConfig::default()).await.unwrap();
    let api = support::runtimes(&s.client(), "kcp");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::Init
    ));
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::InitDone
    ));
    let mut rt = support::runtime("rt", "kcp", json!({"spec": {}}));
    rt.metadata.finalizers = Some(vec!["f".into()]);
    api.create(&PostParams::default(), &rt).await.unwrap();
    assert!(
        matches!(next(&mut events).await.unwrap(), watcher::Event::Apply(o) if o.metadata.deletion_timestamp.is_none())
    );
    api.delete("rt", &DeleteParams::default()).await.unwrap();
    assert!(
        matches!(next(&mut events).await.unwrap(), watcher::Event::Apply(o) if o.metadata.deletion_timestamp.is_some())
    );
    api.patch(
        "rt",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut events).await.unwrap(), watcher::Event::Delete(o) if o.name_any() == "rt")
    );
}

#[tokio::test]
async fn label_selector_watch_reports_objects_entering_and_leaving() {
    let (_s, api) = start(ServerConfig::default()).await;
    let wp = WatchParams::default().labels("team=kim");
    let mut stream = api.watch(&wp, "0").await.unwrap().boxed();
    api.create(&PostParams::default(), &secret("other", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &secret("a", &[("team", "kim")]))
        .await
        .unwrap();
    assert_eq!(describe(&next_change(&mut stream).await), "ADDED a");
    let leave = Patch::Merge(json!({"metadata": {"labels": {"team": "other"}}}));
    api.patch("a", &PatchParams::default(), &leave)
        .await
        .unwrap();
    assert_eq!(describe(&next_change(&mut stream).await), "DELETED a");
    let enter = Patch::Merge(json!({"metadata": {"labels": {"team": "kim"}}}));
    api.patch("other", &PatchParams::default(), &enter)
        .await
        .unwrap();
    assert_eq!(describe(&next_change(&mut stream).await), "ADDED other");
}

#[tokio::test]
async fn watch_ends_after_timeout_seconds() {
    let (_s, api) = start(ServerConfig::default()).await;
    let wp = WatchParams::default().timeout(1);
    let stream = api.watch(&wp, "0").await.unwrap();
    let t = std::time::Instant::now();
    let events: Vec<_> =
        tokio::time::timeout(Duration::from_secs(5), stream.try_collect::<Vec<_>>())
            .await
            .expect("stream ends")
            .unwrap();
    assert!(events.is_empty());
    assert!(t.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn metadata_watcher_gets_partial_objects() {
    let (s, api) = start(ServerConfig::default()).await;
    api.create(&PostParams::default(), &secret("a", &[("k", "v")]))
        .await
        .unwrap();
    let meta: Api<PartialObjectMeta<Secret>> = Api::namespaced(s.client(), "kcp");
    let mut events = watcher(meta, watcher::Config::default()).boxed();
    assert!(matches!(
        next(&mut events).await.unwrap(),
        watcher::Event::Init
    ));
    match next(&mut events).await.unwrap() {
        watcher::Event::InitApply(o) => {
            assert_eq!(o.name_any(), "a");
            assert_eq!(o.labels()["k"], "v");
            assert_eq!(o.types.unwrap().kind, "PartialObjectMetadata");
        }
        other => panic!("unexpected {other:?}"),
    }
}

mod controller {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use futures::StreamExt;
    use kube::{
        Api, ResourceExt,
        api::{DynamicObject, Patch, PatchParams, PostParams},
        runtime::{Controller, controller::Action, watcher},
    };
    use serde_json::json;
    use std::time::Duration;
    use testenv::ServerConfig;

    struct Ctx {
        api: Api<DynamicObject>,
        reconciles: AtomicUsize,
    }

    async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
        ctx.reconciles.fetch_add(1, Ordering::SeqCst);
        let status = Patch::Apply(json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "status": {"state": "Ready", "observedGeneration": obj.metadata.generation},
        }));
        ctx.api
            .patch_status(&obj.name_any(), &PatchParams::apply("kim").force(), &status)
            .await?;
        Ok(Action::await_change())
    }

    fn error_policy(_: Arc<DynamicObject>, _: &kube::Error, _: Arc<Ctx>) -> Action {
        Action::requeue(Duration::from_millis(50))
    }

    /// A kube-runtime `Controller` writing status through server-side apply settles: its own
    /// status write triggers one more reconcile, whose identical write is a no-op (no new
    /// resourceVersion, no event), so reconciling stops.
    #[tokio::test]
    async fn controller_reaches_a_fixed_point() {
        let s = testenv::start(ServerConfig::default()).await.unwrap();
        let api = crate::support::runtimes(&s.client(), "kcp");
        let ctx = Arc::new(Ctx {
            api: api.clone(),
            reconciles: AtomicUsize::new(0),
        });
        let controller = Controller::new_with(
            api.clone(),
            watcher::Config::default(),
            crate::support::runtime_resource(),
        )
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
        let task = tokio::spawn(controller);
        api.create(
            &PostParams::default(),
            &crate::support::runtime("rt", "kcp", json!({"spec": {"a": 1}})),
        )
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while api.get("rt").await.unwrap().data["status"]["state"] != "Ready" {
            assert!(tokio::time::Instant::now() < deadline, "never Ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let settled = ctx.reconciles.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            ctx.reconciles.load(Ordering::SeqCst),
            settled,
            "no reconcile loop"
        );
        assert!(settled <= 3, "{settled} reconciles");
        let status_writes = s.count_requests(|r| r.is("runtimes", Some("status")) && r.is_write());
        assert_eq!(status_writes, settled);
        task.abort();
    }
}
