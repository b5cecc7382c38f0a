//! One pass over one Runtime ([`Pass`]): the Runtime as last read or written, the finalizer,
//! and the one place its status is written ([`Pass::set`]); and what a step tells the pass
//! ([`Step`]).

use super::context::{self, Ctx};
use super::error::{self, Error};
use super::status_update::{Cond, Update, changed, check, next_status, shoot_changed};
use crate::api::{Runtime, RuntimeStatus};
use crate::status::{CondStatus, State, table::FINALIZER};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
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
    /// Conditions of deferred updates (see [`Pass::set_deferrable`]), applied with the next
    /// write.
    carry: Vec<Cond>,
}

impl<'a> Pass<'a> {
    /// A pass over `rt`.
    pub(crate) fn new(ctx: &'a Ctx, rt: Runtime) -> Pass<'a> {
        Pass {
            ctx,
            rt,
            carry: Vec::new(),
        }
    }

    /// The Runtime's key (`namespace/name`).
    pub(crate) fn key(&self) -> String {
        context::key(&self.rt)
    }

    /// The Runtime's current status, if any.
    pub(crate) fn status(&self) -> Option<&RuntimeStatus> {
        self.rt.status.as_ref()
    }

    /// The state to write with a step that succeeded: `Ready` stays `Ready` (a resync or an
    /// update that changes nothing must not flap it), anything else is `Pending` until step 6.
    pub(crate) fn progress_state(&self) -> State {
        match self.status().and_then(|s| s.state) {
            Some(State::Ready) => State::Ready,
            _ => State::Pending,
        }
    }

    /// Whether the Runtime's `status.provisioningCompleted` is `true` (unset is `false`).
    pub(crate) fn provisioning_completed(&self) -> bool {
        provisioning_completed(self.status())
    }

    /// Whether the Runtime is `Ready` for its current generation: state `Ready` and every
    /// condition observed at `metadata.generation` (no update under way).
    pub(crate) fn ready_for_generation(&self) -> bool {
        let generation = self.rt.metadata.generation;
        self.status().is_some_and(|s| {
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

    /// Ends a step that failed with `error`: writes `state` with the step's `False` `condition`
    /// (whose message says what failed), unless [`Pass::reports`] holds `error` back, and returns
    /// `error`, so the Runtime is retried with its backoff.
    ///
    /// Errors: always; `error`, or the status write's error when that write fails.
    pub(crate) async fn fail<T>(
        &mut self,
        error: Error,
        state: State,
        condition: Cond,
    ) -> Result<T, Error> {
        if self.reports(&error) {
            self.set(Update::new(state, vec![condition])).await?;
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

    /// Removes the finalizer (same guard as [`Pass::ensure_finalizer`]).
    ///
    /// Errors: the patch fails; a 404 (already gone) is success.
    pub(crate) async fn remove_finalizer(&mut self) -> Result<(), Error> {
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
                self.rt = patched;
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

    /// Writes the status `update` leads to, if it changes anything.
    ///
    /// Nothing is sent when the next status equals the current one, or when it differs only
    /// in the progress of the Shoot's running operation ([`shoot_changed`]). Otherwise the
    /// next status is checked against the policy as the controller's user (a denial is a bug:
    /// logged, counted, not sent), written through the `status` subresource with the
    /// resourceVersion read, and an Event is published for every condition whose status or
    /// reason changed (`Warning` for `False`).
    ///
    /// Errors: [`Error::StatusDenied`]; the write fails (a 409 means the Runtime changed since
    /// it was read: retried by requeue).
    pub(crate) async fn set(&mut self, update: Update) -> Result<(), Error> {
        self.write(update, false).await
    }

    /// As [`Pass::set`], except that an update changing nothing but conditions'
    /// `observedGeneration` is not written on its own: it rides along with the next write of
    /// this pass (an update that changed nothing in the Shoot then costs one write, not one per
    /// step).
    ///
    /// Errors: as [`Pass::set`].
    pub(crate) async fn set_deferrable(&mut self, update: Update) -> Result<(), Error> {
        self.write(update, true).await
    }

    async fn write(&mut self, mut update: Update, deferrable: bool) -> Result<(), Error> {
        update.conditions = self.with_carried(std::mem::take(&mut update.conditions));
        let mut reread = false;
        let written = loop {
            let Some(next) = self.next_to_write(&update, deferrable, Utc::now())? else {
                return Ok(());
            };
            match self.send(next).await {
                Ok(written) => break written,
                Err(e) if error::is_conflict(&e) && !reread => {
                    reread = true;
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

    /// `conditions` with the conditions carried from deferred updates in front, except those of
    /// a type `conditions` sets anew.
    fn with_carried(&mut self, mut conditions: Vec<Cond>) -> Vec<Cond> {
        let mut carried = std::mem::take(&mut self.carry);
        carried.retain(|c| {
            !conditions
                .iter()
                .any(|u| u.condition_type == c.condition_type)
        });
        carried.append(&mut conditions);
        carried
    }

    /// The status to send for `update` at `now`, or `None` when there is nothing to send: it
    /// changes nothing, only the progress of the Shoot's running operation, or (`deferrable`)
    /// only conditions' `observedGeneration` — then its conditions are carried to the next
    /// write.
    ///
    /// Errors: [`Error::StatusDenied`], the status model denies the next status.
    fn next_to_write(
        &mut self,
        update: &Update,
        deferrable: bool,
        now: DateTime<Utc>,
    ) -> Result<Option<RuntimeStatus>, Error> {
        let policy = &self.ctx.settings.policy;
        let next = next_status(policy, &self.rt, update, now);
        if !changed(&self.rt, &next) {
            return Ok(None);
        }
        if update.shoot.is_some() {
            let without = Update {
                shoot: None,
                ..update.clone()
            };
            let base = next_status(policy, &self.rt, &without, now);
            if !changed(&self.rt, &base) && !shoot_changed(self.status(), &next) {
                return Ok(None);
            }
        }
        if deferrable && only_generations_differ(self.status(), &next) {
            self.carry = update.conditions.clone();
            return Ok(None);
        }
        if let Err(violations) = check(policy, &self.rt, &next, &self.ctx.settings.user, now) {
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
        Ok(Some(next))
    }

    /// Sends `status` through the `status` subresource, with the resourceVersion read.
    async fn send(&self, status: RuntimeStatus) -> Result<Runtime, kube::Error> {
        let mut object = self.rt.clone();
        object.status = Some(status);
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
        let conditions = |rt: &Runtime| {
            rt.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        };
        let old_conditions = conditions(&self.rt);
        let new_conditions = conditions(&written);
        self.rt = written;
        self.publish_events(&old_conditions, &new_conditions);
    }

    /// Publishes one Event per condition whose status or reason changed, in the background
    /// (an Event that cannot be written is logged, never fails the reconcile).
    fn publish_events(&self, old: &[Condition], new: &[Condition]) {
        let reference = self.rt.object_ref(&());
        for c in new {
            let before = old.iter().find(|o| o.type_ == c.type_);
            if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
                continue;
            }
            let type_ = if c.status == CondStatus::False.as_str() {
                EventType::Warning
            } else {
                EventType::Normal
            };
            let mut note: String = c.message.chars().take(1000).collect();
            if note.is_empty() {
                note = format!("{} is {}", c.type_, c.status);
            }
            let event = Event {
                type_,
                reason: c.reason.clone(),
                note: Some(note),
                action: c.type_.clone(),
                secondary: None,
            };
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

/// Whether `next` differs from `current` in conditions' `observedGeneration` only.
fn only_generations_differ(current: Option<&RuntimeStatus>, next: &RuntimeStatus) -> bool {
    let strip = |s: &RuntimeStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.observed_generation = None;
        }
        s
    };
    current.is_some_and(|c| strip(c) == strip(next))
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
