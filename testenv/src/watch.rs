//! Watch streams: newline-delimited JSON `WatchEvent`s over a chunked HTTP response.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::{sync::mpsc, time::Instant};

use crate::{
    http::{Params, error_response, to_meta},
    resource::ResourceInfo,
    selector::{FieldSelector, LabelSelector},
    server::{Shared, lock},
    status::ApiError,
    store::{Event, EventType, meta_str},
};

struct Filter {
    res: usize,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    meta_only: bool,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.ns
            .as_deref()
            .is_none_or(|ns| meta_str(obj, "namespace") == Some(ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// How a watcher with this filter sees an event: objects entering the selection are
    /// `ADDED`, leaving it `DELETED`, as the apiserver's watch cache reports them.
    fn view<'a>(&self, ev: &'a Event) -> Option<(EventType, &'a Value)> {
        if ev.res != self.res {
            return None;
        }
        let now = self.matches(&ev.object);
        match ev.etype {
            EventType::Added | EventType::Deleted => now.then_some((ev.etype, &ev.object)),
            EventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, &ev.object)),
                    (false, true) => Some((EventType::Added, &ev.object)),
                    (true, false) => Some((EventType::Deleted, &ev.object)),
                    (false, false) => None,
                }
            }
        }
    }

    fn line(&mut self, etype: &str, obj: &Value) -> Bytes {
        if self.meta_only {
            filter_line_raw(etype, &to_meta(obj))
        } else {
            filter_line_raw(etype, obj)
        }
    }
}

fn bookmark(info: &ResourceInfo, meta_only: bool, rv: u64, initial_end: bool) -> Value {
    let (kind, av) = if meta_only {
        (
            "PartialObjectMetadata".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (info.kind.clone(), info.api_version())
    };
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": kind, "apiVersion": av, "metadata": metadata})
}

fn error_line(e: &ApiError) -> Bytes {
    let mut s =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).expect("json");
    s.push(b'\n');
    Bytes::from(s)
}

pub(crate) fn watch_response(
    shared: Arc<Shared>,
    res: usize,
    info: &ResourceInfo,
    ns: Option<&str>,
    params: &Params,
    meta_only: bool,
) -> Response {
    let labels = match LabelSelector::parse(params.get("labelSelector").unwrap_or("")) {
        Ok(l) => l,
        Err(e) => return error_response(&ApiError::bad_request(e)),
    };
    let fields = match FieldSelector::parse(params.get("fieldSelector").unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return error_response(&ApiError::bad_request(e)),
    };
    let requested = match params.get("resourceVersion") {
        None | Some("0") => None,
        Some(s) => match s.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resource version {s:?}"
                )));
            }
        },
    };
    let send_initial = params.flag("sendInitialEvents");
    let bookmarks = params.flag("allowWatchBookmarks");
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut filter = Filter {
        res,
        ns: ns.map(String::from),
        labels,
        fields,
        meta_only,
    };
    // Subscribe before the snapshot so that no change between both is missed.
    let mut changes = shared.rv_tx.subscribe();
    let mut lines: Vec<Bytes> = Vec::new();
    let mut cursor;
    let mut gone = false;
    let mut initial = None;
    {
        let st = lock(&shared.store);
        match requested {
            Some(rv) if !send_initial => {
                cursor = rv;
                if let Err(oldest) = st.events_after(rv) {
                    lines.push(error_line(&ApiError::too_old(rv, oldest)));
                    gone = true;
                }
            }
            _ => {
                // No resourceVersion / "0" / streaming list: synthetic ADDED for the current
                // state, then changes from now on (encoded below, outside the store lock).
                cursor = st.rv;
                initial = Some(st.list(res, ns));
            }
        }
    }
    if let Some(objects) = initial {
        lines.reserve(objects.len() + 1);
        for obj in &objects {
            if filter.matches(obj) {
                lines.push(filter.line("ADDED", obj));
            }
        }
        if send_initial {
            let bm = bookmark(info, meta_only, cursor, true);
            lines.push(filter_line_raw("BOOKMARK", &bm));
        }
    }
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let info = info.clone();
    let bookmark_interval = shared.bookmark_interval;
    let mut shutdown = shared.shutdown.clone();
    tokio::spawn(async move {
        for line in lines {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        if gone {
            return;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut delivered = cursor;
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let batch = lock(&shared.store).events_after(cursor);
            match batch {
                Err(oldest) => {
                    let _ = tx
                        .send(error_line(&ApiError::too_old(cursor, oldest)))
                        .await;
                    return;
                }
                Ok(events) => {
                    for ev in events {
                        cursor = ev.rv;
                        if let Some((etype, obj)) = filter.view(&ev) {
                            if tx.send(filter.line(etype.as_str(), obj)).await.is_err() {
                                return;
                            }
                            delivered = cursor;
                        }
                    }
                }
            }
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = sleep => return,
                _ = ticker.tick(), if bookmarks => {
                    if cursor > delivered {
                        let bm = bookmark(&info, filter.meta_only, cursor, false);
                        if tx.send(filter_line_raw("BOOKMARK", &bm)).await.is_err() {
                            return;
                        }
                        delivered = cursor;
                    }
                }
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// One watch event as sent: `{"type": …, "object": …}` (borrowed, no copy of the object).
#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    etype: &'a str,
    object: &'a Value,
}

fn filter_line_raw(etype: &str, obj: &Value) -> Bytes {
    let mut s = serde_json::to_vec(&Line { etype, object: obj }).expect("json");
    s.push(b'\n');
    Bytes::from(s)
}
