//! The reconciler's Events: `events.k8s.io/v1` Events about a Runtime for the transitions a user
//! acts on (it became `Ready`, `Failed` or `Terminating`; a condition turned `False`: see
//! `Pass::publish_events`), created with a plain [`Api::create`] and never remembered.
//!
//! Why so few: progress is in the status (and in `kubectl get runtimes`); an Event per condition
//! change cost five POSTs per provisioned Runtime, more than all its status writes. A provisioning
//! now publishes one Event (`Ready`), a failure one `Warning` per failed condition.
//!
//! Why not kube-runtime's [`Recorder`](kube::runtime::events::Recorder) and its series: in
//! kube-runtime 5.0.0 (`src/events.rs`) it keeps every Event it published in a map for 6 minutes
//! (`CACHE_TTL`, counted from the Event's `eventTime` or its series' `lastObservedTime`), keyed by
//! type, action, reason, reporter, regarding object (uid included) and related object, so that a
//! repeat of a key within that time is PATCHed into the first Event as a series instead of being
//! created. Every publish first scans the whole map under a write lock to drop expired entries,
//! and the crate has no setting to bound or switch off that map. kim's Events are transitions,
//! which do not repeat within minutes: a series would hold memory for Events that never recur.
//! [`Publisher`] creates each Event with the same fields the `Recorder` sets for a new one (see
//! [`Publisher::event`]) and keeps nothing. An Event's note is a condition message, which never
//! carries secret material (see the module docs of [`super`]).
//!
//! An Event whose create fails transiently (a connection refused or cut, 429, 5xx: a
//! kube-apiserver or etcd restarting; a 403 for a few seconds, see [`FORBIDDEN_ATTEMPTS`]) is
//! sent again, the same object, up to [`ATTEMPTS`]
//! times in all, as client-go's event broadcaster does (12 tries): an Event is a condition
//! change written nowhere else, and a single try lost every Event of the seconds a control
//! plane restart takes. A 409 on a retry means an earlier try was stored though its answer was
//! lost: done.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use std::sync::Arc;
use std::time::Duration;

/// Tries of one Event's create (the first and the retries of transient failures).
pub(crate) const ATTEMPTS: u32 = 12;
/// Tries of an Event's create answered 403 (0.5 s, 1 s and 2 s apart): the window of a
/// kube-apiserver whose RBAC cache is still loading, short enough that a missing RBAC rule is
/// logged within seconds.
pub(crate) const FORBIDDEN_ATTEMPTS: u32 = 4;
/// Pause after the first failed try; it doubles after each further one, up to
/// [`MAX_RETRY_DELAY`] (about 70 s from the first try to the last).
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
/// Longest pause between two tries.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);

/// Creates `events.k8s.io/v1` Events in the namespace of the object they regard (`default`
/// for cluster-scoped objects). Needs RBAC `create` on `events.k8s.io` `events`. Cloning is
/// cheap (the client and two shared strings).
#[derive(Clone)]
pub(crate) struct Publisher {
    client: Client,
    /// `reportingController`.
    controller: Arc<str>,
    /// `reportingInstance`.
    instance: Arc<str>,
}

impl Publisher {
    /// A publisher writing through `client`, reporting as `reporter` (`reportingInstance` is
    /// the reporter's instance, or its controller name without one, as for the `Recorder`).
    pub(crate) fn new(client: Client, reporter: Reporter) -> Publisher {
        let instance = reporter
            .instance
            .unwrap_or_else(|| reporter.controller.clone());
        Publisher {
            client,
            controller: reporter.controller.into(),
            instance: instance.into(),
        }
    }

    /// The Event for `ev` about `regarding`, observed at `now`: the fields kube-runtime's
    /// `Recorder::generate_event` sets for a new Event — name `<regarding name>.<now in ns,
    /// hex>` (the reporting controller's name for an object without a name), namespace of
    /// `regarding`, `eventTime` `now`, `action`, `reason`, `note`, `type` (`Normal` or
    /// `Warning`), `regarding`, `related` (`ev.secondary`), `reportingController` and
    /// `reportingInstance`; no series.
    pub(crate) fn event(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> K8sEvent {
        let name = regarding.name.as_deref().unwrap_or(&self.controller);
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(self.controller.to_string()),
            reporting_instance: Some(self.instance.to_string()),
            ..K8sEvent::default()
        }
    }

    /// Creates the Event for `ev` about `regarding` now, trying again after a transient
    /// failure (see the module docs).
    ///
    /// Errors: the client error of the last try (e.g. 403 without RBAC, 409 if an Event of
    /// that name existed before the first try, a transient error [`ATTEMPTS`] times).
    pub(crate) async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let event = self.event(ev, regarding, Timestamp::now());
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let api = Api::<K8sEvent>::namespaced(self.client.clone(), ns);
        let (mut attempt, mut delay) = (1, FIRST_RETRY_DELAY);
        loop {
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => return Ok(()),
                Err(e) if super::error::is_conflict(&e) => {
                    return if attempt > 1 { Ok(()) } else { Err(e) };
                }
                // A 403 for a few seconds too: a kube-apiserver that has just started refuses
                // requests until its RBAC cache is loaded. A missing RBAC rule still ends in the
                // same error, after FORBIDDEN_ATTEMPTS tries.
                Err(e)
                    if (attempt < ATTEMPTS && super::error::transient(&e))
                        || (attempt < FORBIDDEN_ATTEMPTS
                            && super::error::api_code(&e) == Some(403)) =>
                {
                    tracing::debug!(error = %e, reason = %ev.reason, attempt, "creating an event failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn the_event_has_the_fields_of_a_recorder_event() {
        let reporter = Reporter {
            controller: "kim-controller".into(),
            instance: None,
        };
        let publisher = Publisher::new(client(), reporter);
        let regarding = ObjectReference {
            api_version: Some("infrastructuremanager.kyma-project.io/v1".into()),
            kind: Some("Runtime".into()),
            name: Some("rt-1".into()),
            namespace: Some("kcp-system".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        };
        let ev = Event {
            type_: EventType::Warning,
            reason: "ConversionErr".into(),
            note: Some("the label is missing".into()),
            action: "Provisioned".into(),
            secondary: None,
        };
        let now = Timestamp::from_nanosecond(0x1234_5678_9abc).unwrap();
        let e = publisher.event(&ev, &regarding, now);
        assert_eq!(e.metadata.name.as_deref(), Some("rt-1.123456789abc"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("kcp-system"));
        assert_eq!(e.event_time, Some(MicroTime(now)));
        assert_eq!(e.action.as_deref(), Some("Provisioned"));
        assert_eq!(e.reason.as_deref(), Some("ConversionErr"));
        assert_eq!(e.note.as_deref(), Some("the label is missing"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.regarding.as_ref(), Some(&regarding));
        assert_eq!(e.related, None);
        assert_eq!(e.series, None);
        assert_eq!(e.reporting_controller.as_deref(), Some("kim-controller"));
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some("kim-controller"),
            "the controller's name without an instance"
        );
        let publisher = Publisher::new(
            client(),
            Reporter {
                controller: "kim-controller".into(),
                instance: Some("kim-0".into()),
            },
        );
        let e = publisher.event(
            &Event {
                type_: EventType::Normal,
                ..ev
            },
            &regarding,
            now,
        );
        assert_eq!(e.reporting_instance.as_deref(), Some("kim-0"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
    }
}
