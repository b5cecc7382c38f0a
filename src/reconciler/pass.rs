//! One pass over one Runtime ([`Pass`]): the Runtime as last read or written, the finalizer,
//! the status its steps set ([`Pass::set`]) and the one place that status is written
//! ([`Pass::flush`], once per pass); and what a step tells the pass ([`Step`]).
//!
//! One write per pass: the steps of a pass set conditions one after the other (accepted, Shoot
//! created; or Shoot done, kubeconfig stored, administrators bound), and each used to be a write
//! of its own, with an Event each. What a reader acts on is the status a pass ends with, so the
//! steps' updates are merged and written once when the pass ends (succeeded, waiting or failed),
//! checked against the model as one transition. A provisioning is then three or four writes:
//! Shoot created, Gardener's operation running, `Ready` (docs/reconciler.md, "Reads, status
//! writes and Events").

use super::context::{self, Ctx};
use super::error::{self, Error};
use super::status_update::{Cond, Update, changed, check, next_status, shoot_changed};
use crate::api::{Runtime, RuntimeStatus};
use crate::status::{CondStatus, State, table::FINALIZER};
use chrono::Utc;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// Whether a step lets the pass go on (with a value) or ends it with an action.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Go on to the next step.
    Continue(T),
    /// Stop here; requeue as the action says.
    Stop(Action),
}

/// One pass over a Runtime: the latest version of it (updated after every write) and the
/// shared context.
pub(crate) struct Pass<'a> {
    /// The shared state.
    pub(crate) ctx: &'a Ctx,
    /// The Runtime as last read or written.
    pub(crate) rt: Runtime,
    /// The status the steps of this pass have set so far, not yet written (`None`: none set).
    next: Option<RuntimeStatus>,
}

impl<'a> Pass<'a> {
    /// A pass over `rt`.
    pub(crate) fn new(ctx: &'a Ctx, rt: Runtime) -> Pass<'a> {
        Pass {
            ctx,
            rt,
            next: None,
        }
    }

    /// The Runtime's key (`namespace/name`).
    pub(crate) fn key(&self) -> String {
        context::key(&self.rt)
    }

    /// The Runtime's status as the steps of this pass have set it so far (its stored status
    /// when they set nothing yet), if any.
    pub(crate) fn status(&self) -> Option<&RuntimeStatus> {
        self.next.as_ref().or(self.rt.status.as_ref())
    }

    /// The state to set with a step that succeeded: `Ready` stays `Ready` (a resync or an
    /// update that changes nothing must not flap it), anything else is `Pending` until step 6.
    pub(crate) fn progress_state(&self) -> State {
        match self.status().and_then(|s| s.state) {
            Some(State::Ready) => State::Ready,
            _ => State::Pending,
        }
    }

    /// Whether the Runtime's stored `status.provisioningCompleted` is `true` (unset is `false`).
    pub(crate) fn provisioning_completed(&self) -> bool {
        provisioning_completed(self.rt.status.as_ref())
    }

    /// Whether the Runtime is stored `Ready` for its current generation: state `Ready` and
    /// every condition observed at `metadata.generation` (no update under way).
    pub(crate) fn ready_for_generation(&self) -> bool {
        let generation = self.rt.metadata.generation;
        self.rt.status.as_ref().is_some_and(|s| {
            s.state == Some(State::Ready)
                && s.conditions
                    .iter()
                    .all(|c| c.observed_generation == generation)
        })
    }

    /// Whether the failure `error` of a step is written into the status (`Pending` — or
    /// `Terminating` during deletion — with the step's `False` condition, as the spec says for
    /// each step) before it is retried, or only retried with the Runtime's backoff.
    ///
    /// Only retried: an error that may clear by itself ([`Error::may_clear`]: 409, 429, 5xx,
    /// timeouts, connection errors, 403) of a Runtime that is `Ready` for its current generation,
    /// until such errors have lasted [`super::Settings::transient_error_grace`] (counted from the
    /// first one after its last successful reconcile). A read that failed once on a resync says
    /// nothing about the runtime, and writing it would flip `Ready` → `Pending` → `Ready` (two or
    /// three writes and Events) for a blip; an outage that lasts is reported. Everything else —
    /// provisioning, updates, deletion, errors a retry will not fix — is written at once.
    pub(crate) fn reports(&self, error: &Error) -> bool {
        let deleting = self.rt.metadata.deletion_timestamp.is_some();
        if deleting || !error.may_clear() || !self.ready_for_generation() {
            return true;
        }
        let lasted = self.ctx.transient_for(&self.key());
        if lasted >= self.ctx.settings.transient_error_grace {
            return true;
        }
        tracing::debug!(runtime = %self.key(), error = %error, lasted = ?lasted, "error of a Ready Runtime that may clear by itself; retrying without a status write");
        false
    }

    /// Ends a step that failed with `error`: sets `state` with the step's `False` `condition`
    /// (whose message says what failed), unless [`Pass::reports`] holds `error` back, and returns
    /// `error`, so the Runtime is retried with its backoff (the status is written when the pass
    /// ends, [`Pass::flush`]).
    ///
    /// Errors: always; `error`.
    pub(crate) fn fail<T>(
        &mut self,
        error: Error,
        state: State,
        condition: Cond,
    ) -> Result<T, Error> {
        if self.reports(&error) {
            self.set(Update::new(state, vec![condition]));
        }
        Err(error)
    }

    /// Adds the finalizer if it is missing (JSON patch guarded by a `test` of the list read —
    /// or of the resourceVersion when there is no list — so a stale read fails instead of
    /// dropping someone else's finalizer).
    ///
    /// Errors: the patch fails (a failed `test` is retried like a conflict).
    pub(crate) async fn ensure_finalizer(&mut self) -> Result<(), Error> {
        let finalizers = self.rt.finalizers().to_vec();
        if finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let ops = if self.rt.metadata.finalizers.is_none() {
            // No list to test: guard with the resourceVersion read instead.
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": self.rt.resource_version()},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        } else {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        };
        self.patch_finalizers(ops, "adding the finalizer").await
    }

    /// Removes the finalizer (same guard as [`Pass::ensure_finalizer`]). A status set in this
    /// pass is dropped: the Runtime goes, nobody reads it.
    ///
    /// Errors: the patch fails; a 404 (already gone) is success.
    pub(crate) async fn remove_finalizer(&mut self) -> Result<(), Error> {
        self.next = None;
        let finalizers = self.rt.finalizers().to_vec();
        let Some(i) = finalizers.iter().position(|f| f == FINALIZER) else {
            return Ok(());
        };
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        match self.patch_finalizers(ops, "removing the finalizer").await {
            Err(Error::Api { source, .. }) if error::is_not_found(&source) => Ok(()),
            other => other,
        }
    }

    async fn patch_finalizers(&mut self, ops: serde_json::Value, what: &str) -> Result<(), Error> {
        let patch: json_patch::Patch = serde_json::from_value(ops)
            .map_err(|e| Error::Other(format!("{what}: building the patch: {e}")))?;
        let name = self.rt.name_any();
        match self
            .ctx
            .runtimes
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(patched) => {
                let name = self.rt.name_any();
                self.rt = self
                    .ctx
                    .caches
                    .runtimes
                    .wrote(&name, Some(&self.rt), patched)
                    .as_ref()
                    .clone();
                Ok(())
            }
            // The guard's `test` failed (kube-apiserver answers a JSON patch that does not
            // apply with 422, `patch.go` `applyJSPatch`) or the write conflicted: the Runtime
            // read was stale, typically a cached copy behind a change made since. Read it again
            // and start the pass over from the fresh copy, as for a stale status write
            // (`Error::Stale`, at most twice per reconcile), instead of failing the reconcile
            // and waiting out an error backoff. If it did not move, the error stands.
            Err(e) if matches!(error::api_code(&e), Some(409 | 422)) => {
                let fresh = self
                    .ctx
                    .runtimes
                    .get(&name)
                    .await
                    .map_err(|e| Error::api(format!("reading Runtime {}", self.key()), e))?;
                if fresh.metadata.resource_version != self.rt.metadata.resource_version {
                    tracing::debug!(runtime = %self.key(), "{what}: the Runtime changed since it was read; starting over");
                    return Err(Error::Stale(Box::new(fresh)));
                }
                Err(Error::api(format!("{what} of Runtime {}", self.key()), e))
            }
            Err(e) => Err(Error::api(format!("{what} of Runtime {}", self.key()), e)),
        }
    }

    /// Sets the status `update` leads to (the conditions it names, with
    /// `meta.SetStatusCondition` semantics, [`next_status`]); it is written when the pass ends
    /// ([`Pass::flush`]), merged with what the other steps of the pass set.
    pub(crate) fn set(&mut self, update: Update) {
        let mut base = self.rt.clone();
        base.status = self.status().cloned();
        self.next = Some(next_status(
            &self.ctx.settings.policy,
            &base,
            &update,
            Utc::now(),
        ));
    }

    /// Writes the status the steps of this pass set, if it changes anything.
    ///
    /// Nothing is sent when it equals the stored status, or differs from it only in the
    /// progress of the Shoot's running operation ([`shoot_changed`]). Otherwise it is checked
    /// against the policy as the controller's user (a denial is a bug: logged, counted, not
    /// sent), written through the `status` subresource with the resourceVersion of the latest
    /// copy (the controller's own last write when the watch has not delivered it yet,
    /// [`super::caches`]), and an Event is published for each transition users act on
    /// ([`Pass::publish_events`]).
    ///
    /// Errors: [`Error::StatusDenied`]; [`Error::Stale`], another writer changed the status
    /// since it was read (the pass starts over from the fresh copy); the write fails.
    pub(crate) async fn flush(&mut self) -> Result<(), Error> {
        let Some(next) = self.next.take() else {
            return Ok(());
        };
        if !self.worth_writing(&next) {
            return Ok(());
        }
        let now = Utc::now();
        if let Err(violations) = check(
            &self.ctx.settings.policy,
            &self.rt,
            &next,
            &self.ctx.settings.user,
            now,
        ) {
            self.ctx.metrics().status_denied();
            let message = violations.denial_message();
            tracing::error!(runtime = %self.key(), denial = %message, "status write denied by the status model; not sent (reconciler bug)");
            self.publish(Event {
                type_: EventType::Warning,
                reason: STATUS_DENIED_REASON.to_string(),
                note: Some(
                    format!("status write not sent, the status model denies it: {message}")
                        .chars()
                        .take(1000)
                        .collect(),
                ),
                action: "WriteStatus".to_string(),
                secondary: None,
            });
            return Err(Error::StatusDenied(violations));
        }
        let mut reread = false;
        let written = loop {
            match self.send(next.clone()).await {
                Ok(written) => break written,
                Err(e) if error::is_conflict(&e) && !reread => {
                    reread = true;
                    tracing::debug!(
                        runtime = %self.key(),
                        sent = ?self.rt.resource_version(),
                        cache = %self.ctx.caches.runtimes.explain(&self.rt.name_any()),
                        "status write answered 409 Conflict; reading the Runtime again"
                    );
                    self.reread_after_conflict(e).await?;
                }
                Err(e) => {
                    return Err(Error::api(
                        format!("writing the status of Runtime {}", self.key()),
                        e,
                    ));
                }
            }
        };
        self.record(written);
        Ok(())
    }

    /// Whether `next` differs from the stored status in more than the progress of the Shoot's
    /// running operation (its description, progress and `lastUpdateTime` change on every
    /// Gardener step and would cost a write each).
    fn worth_writing(&self, next: &RuntimeStatus) -> bool {
        if !changed(&self.rt, next) {
            return false;
        }
        let stored = self.rt.status.as_ref();
        if shoot_changed(stored, next) {
            return true;
        }
        let mut without = next.clone();
        without.shoot_last_operation = stored.and_then(|s| s.shoot_last_operation.clone());
        without.shoot_last_errors = stored
            .map(|s| s.shoot_last_errors.clone())
            .unwrap_or_default();
        changed(&self.rt, &without)
    }

    /// Sends `status` through the `status` subresource, with the resourceVersion of the
    /// latest copy.
    async fn send(&self, status: RuntimeStatus) -> Result<Runtime, kube::Error> {
        let mut object = self.rt.clone();
        object.status = Some(status);
        // Spec and metadata other than the resourceVersion are ignored by the subresource;
        // leaving out managedFields keeps the request small.
        object.metadata.managed_fields = None;
        self.ctx
            .runtimes
            .replace_status(&self.rt.name_any(), &PostParams::default(), &object)
            .await
    }

    /// After the status write `conflict`: the Runtime read was stale (typically a cached copy
    /// behind our own last write), so it is read again. If nothing but its resourceVersion
    /// moved, the pass goes on from the fresh copy and the write is sent again.
    ///
    /// Errors: only its status moved — [`Error::Stale`] with the fresh copy, the pass starts
    /// over (its decisions were made on an old status); its spec or deletion moved —
    /// `conflict`, the write is retried by requeue; the read fails.
    async fn reread_after_conflict(&mut self, conflict: kube::Error) -> Result<(), Error> {
        let fresh = self
            .ctx
            .runtimes
            .get(&self.rt.name_any())
            .await
            .map_err(|e| Error::api(format!("reading Runtime {}", self.key()), e))?;
        let same_spec = fresh.metadata.generation == self.rt.metadata.generation
            && fresh.metadata.deletion_timestamp == self.rt.metadata.deletion_timestamp;
        if !same_spec {
            return Err(Error::api(
                format!("writing the status of Runtime {}", self.key()),
                conflict,
            ));
        }
        if fresh.status != self.rt.status {
            tracing::debug!(runtime = %self.key(), "status write conflicted with a newer status; starting over");
            return Err(Error::Stale(Box::new(fresh)));
        }
        self.rt = fresh;
        Ok(())
    }

    /// Takes the Runtime `written` as the pass's latest copy: counts and logs the write,
    /// updates the per-Runtime metrics (and the provisioning duration at the first `Ready`) and
    /// publishes the Events of its condition changes.
    fn record(&mut self, written: Runtime) {
        self.ctx.metrics().status_written();
        let state = written.status.as_ref().and_then(|s| s.state);
        tracing::info!(
            runtime = %self.key(),
            state = state.map(|s| s.as_str()).unwrap_or("None"),
            conditions = %summary(written.status.as_ref()),
            "status written"
        );
        let completed = provisioning_completed(written.status.as_ref());
        // The histogram before the gauges, so a scrape that shows the Runtime Ready and
        // completed also counts its provisioning.
        if completed && !self.provisioning_completed() {
            // The first Ready: provisioningCompleted goes from unset/false to true once.
            if let Some(created) = written.metadata.creation_timestamp.as_ref() {
                let millis = Utc::now().timestamp_millis() - created.0.as_millisecond();
                let seconds = millis as f64 / 1000.0;
                self.ctx.metrics().provisioned(seconds);
            }
        }
        self.ctx.metrics().observe_state(&self.key(), state);
        self.ctx
            .metrics()
            .observe_provisioning_completed(&self.key(), completed);
        let old = self.rt.status.clone();
        let name = self.rt.name_any();
        let mut written = written;
        written.metadata.managed_fields = None;
        self.rt = self
            .ctx
            .caches
            .runtimes
            .wrote(&name, Some(&self.rt), written)
            .as_ref()
            .clone();
        self.publish_events(old.as_ref(), self.rt.status.as_ref());
    }

    /// Publishes an Event for each transition from `old` to `new` a user acts on, in the
    /// background (an Event that cannot be written is logged, never fails the reconcile):
    /// the Runtime entering `Ready`, `Failed` or `Terminating` (`Normal`; `Warning` for
    /// `Failed`; reason the state, note the conditions), and a condition turning `False` or
    /// changing its reason while `False` (`Warning`, the condition's reason and message).
    /// Progress (`Pending`, a condition `Unknown` or `True`) is in the status and needs no
    /// Event: a provisioning publishes one, not one per step (docs/reconciler.md, "Reads, status writes and Events").
    fn publish_events(&self, old: Option<&RuntimeStatus>, new: Option<&RuntimeStatus>) {
        let reference = self.rt.object_ref(&());
        for event in events_for(old, new) {
            self.publish_to(event, reference.clone());
        }
    }

    /// Publishes `event` about this Runtime in the background (see [`Pass::publish_to`]).
    fn publish(&self, event: Event) {
        self.publish_to(event, self.rt.object_ref(&()));
    }

    /// Publishes `event` about `reference` in the background: an Event that cannot be written
    /// is logged, never fails the reconcile.
    fn publish_to(&self, event: Event, reference: ObjectReference) {
        let recorder = self.ctx.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(error = %e, reason = %event.reason, "cannot publish event");
            }
        });
    }
}

/// Reason of the Warning Event published when the reconciler's own status write is denied by
/// the status model (the write is not sent; `kim_controller_status_denied_total` counts it).
pub(crate) const STATUS_DENIED_REASON: &str = "StatusWriteDenied";

/// `status.provisioningCompleted` (unset is `false`).
fn provisioning_completed(status: Option<&RuntimeStatus>) -> bool {
    status.and_then(|s| s.provisioning_completed) == Some(true)
}

/// The Events of the transition from `old` to `new` (see [`Pass::publish_events`]).
fn events_for(old: Option<&RuntimeStatus>, new: Option<&RuntimeStatus>) -> Vec<Event> {
    let mut events = Vec::new();
    let Some(new) = new else {
        return events;
    };
    let state = new.state;
    if state != old.and_then(|s| s.state)
        && let Some(state @ (State::Ready | State::Failed | State::Terminating)) = state
    {
        events.push(Event {
            type_: if state == State::Failed {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: state.as_str().to_string(),
            note: Some(format!(
                "Runtime is {}: {}",
                state.as_str(),
                summary(Some(new))
            )),
            action: "Reconcile".to_string(),
            secondary: None,
        });
    }
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    for c in &new.conditions {
        if c.status != CondStatus::False.as_str() {
            continue;
        }
        let before = old_conditions.iter().find(|o| o.type_ == c.type_);
        if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
            continue;
        }
        let mut note: String = c.message.chars().take(1000).collect();
        if note.is_empty() {
            note = format!("{} is {}", c.type_, c.status);
        }
        events.push(Event {
            type_: EventType::Warning,
            reason: c.reason.clone(),
            note: Some(note),
            action: c.type_.clone(),
            secondary: None,
        });
    }
    events
}

/// `Type=Status/Reason, …` of a status, for logs.
fn summary(status: Option<&RuntimeStatus>) -> String {
    status
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn status(state: State, conditions: &[(&str, CondStatus, &str)]) -> RuntimeStatus {
        RuntimeStatus {
            state: Some(state),
            conditions: conditions
                .iter()
                .map(|(t, s, r)| Condition {
                    type_: t.to_string(),
                    status: s.as_str().to_string(),
                    reason: r.to_string(),
                    message: format!("{t} {r}"),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: None,
                })
                .collect(),
            ..RuntimeStatus::default()
        }
    }

    fn described(events: Vec<Event>) -> Vec<String> {
        events
            .into_iter()
            .map(|e| format!("{:?} {} {}", e.type_, e.reason, e.action))
            .collect()
    }

    /// A provisioning publishes one Event (the Runtime became `Ready`); progress publishes
    /// none; a failure one `Warning` for its `False` condition and one for `Failed`; a failure
    /// that stays (same reason) none again; deletion one when it starts.
    #[test]
    fn events_are_published_for_the_transitions_users_act_on() {
        use CondStatus::{False, True, Unknown};
        let pending = status(State::Pending, &[("Provisioned", Unknown, "Pending")]);
        assert!(
            events_for(None, Some(&pending)).is_empty(),
            "accepted: progress"
        );
        let running = status(State::Pending, &[("Provisioned", Unknown, "Processing")]);
        assert!(events_for(Some(&pending), Some(&running)).is_empty());
        let ready = status(
            State::Ready,
            &[
                ("Provisioned", True, "ShootCreationCompleted"),
                ("KubeconfigReady", True, "KubeconfigCreated"),
                ("Configured", True, "AdministratorsConfigured"),
            ],
        );
        assert_eq!(
            described(events_for(Some(&running), Some(&ready))),
            ["Normal Ready Reconcile"]
        );
        assert!(events_for(Some(&ready), Some(&ready)).is_empty());

        let broken = status(
            State::Pending,
            &[
                ("Provisioned", True, "ShootCreationCompleted"),
                ("Configured", False, "ConfigurationError"),
            ],
        );
        assert_eq!(
            described(events_for(Some(&ready), Some(&broken))),
            ["Warning ConfigurationError Configured"]
        );
        let failed = status(State::Failed, &[("Provisioned", False, "CreationErr")]);
        assert_eq!(
            described(events_for(Some(&running), Some(&failed))),
            [
                "Warning Failed Reconcile",
                "Warning CreationErr Provisioned"
            ]
        );
        assert!(events_for(Some(&failed), Some(&failed)).is_empty());
        let terminating = status(
            State::Terminating,
            &[("Deprovisioned", Unknown, "GardenerShootDeleted")],
        );
        assert_eq!(
            described(events_for(Some(&ready), Some(&terminating))),
            ["Normal Terminating Reconcile"]
        );
    }
}
