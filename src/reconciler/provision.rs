//! Steps 2–4 and the update (docs/reconciler.md): accept the Runtime, convert it and create
//! the Shoot, apply spec changes to an existing Shoot, and wait on the Shoot's
//! `lastOperation`. Once it is done, the orchestrator ([`super::reconcile`]) goes on with
//! [`super::kubeconfig`] and [`super::admins`].
//!
//! "Waiting" applies until `Provisioned=True` has been written for the Runtime's current
//! `metadata.generation`; after that, operations Gardener runs on its own (maintenance,
//! periodic reconciles) do not touch the Runtime's status.

use super::error::{self, Error};
use super::pass::{Pass, Step};
use super::reasons::*;
use super::shoots::{
    FIELD_MANAGER, cached_shoot, get_shoot, last_operation, owned_by, request_retry, timed,
    wrote_shoot,
};
use super::status_update::{Cond, Update, condition};
use crate::api::{Runtime, Shoot};
use crate::gardener::{
    ConversionError, OperationType, ShootProgress, check_names_shoot, classify_shoot,
    runtime_to_shoot, runtime_to_shoot_for_update, structured_authentication_config,
};
use crate::status::table::types::PROVISIONED;
use crate::status::{CondStatus, State};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use std::collections::BTreeMap;

/// Whether the Runtime is being updated rather than created: it was `Ready` once, or an
/// update was submitted (`Provisioned` reason `Processing`).
fn updating(pass: &Pass<'_>) -> bool {
    pass.status().and_then(|s| s.provisioning_completed) == Some(true)
        || condition(pass.status(), PROVISIONED).is_some_and(|c| c.reason == PROCESSING)
}

/// Writes `Pending`, `Provisioned=False/GardenerErr` with the error (unless
/// [`Pass::reports`] holds it back), and returns the error (retried with backoff).
fn gardener_failed<T>(pass: &mut Pass<'_>, what: String, e: kube::Error) -> Result<T, Error> {
    let message = format!("{what}: {}", error::describe(&e));
    let condition = Cond::new(PROVISIONED, CondStatus::False, GARDENER_ERR).with_message(message);
    pass.fail(Error::api(what, e), State::Pending, condition)
}

/// Writes `Failed`, `Provisioned=False/ConversionErr` with `message`; the Runtime waits for a
/// change of its own.
fn conversion_failed(pass: &mut Pass<'_>, message: String) -> Result<Action, Error> {
    failed_for_good(pass, CONVERSION_ERR, message)
}

/// Writes `Failed`, `Provisioned=False/<reason>` with `message`; the Runtime waits for a
/// change of its own.
fn failed_for_good(
    pass: &mut Pass<'_>,
    reason: &'static str,
    message: String,
) -> Result<Action, Error> {
    tracing::warn!(runtime = %pass.key(), error = %message, "Runtime cannot be converted into a Shoot");
    pass.set(Update::new(
        State::Failed,
        vec![Cond::new(PROVISIONED, CondStatus::False, reason).with_message(message)],
    ));
    Ok(Action::await_change())
}

/// Writes the failure of a conversion error: `AuditLogErr` with KIM's message "Failed to
/// configure audit logs" (and the missing tenant) when no audit log tenant is configured,
/// `ConversionErr` otherwise.
fn conversion_error(pass: &mut Pass<'_>, e: &ConversionError) -> Result<Action, Error> {
    match e {
        ConversionError::AuditLogTenantMissing { .. } => {
            let message = format!("Failed to configure audit logs: {e}");
            failed_for_good(pass, AUDIT_LOG_ERR, message)
        }
        _ => conversion_failed(pass, conversion_message(e)),
    }
}

fn not_owned_message(rt: &Runtime, shoot: &Shoot) -> String {
    format!(
        "spec.shoot.name: Shoot {}/{} already exists and belongs to runtime {:?}, not {:?}",
        shoot.namespace().unwrap_or_default(),
        shoot.name_any(),
        shoot.runtime_id().unwrap_or(""),
        rt.runtime_id().unwrap_or(""),
    )
}

/// Steps 2–4 and the update of a Runtime that is not being deleted: the Shoot, created or
/// updated, once Gardener has finished with it ([`Step::Continue`]); [`Step::Stop`] while it has
/// to wait (or has failed for good).
///
/// Errors: API errors (after writing the step's `False` condition) and status write errors.
pub(crate) async fn run(pass: &mut Pass<'_>) -> Result<Step<Shoot>, Error> {
    let ctx = pass.ctx;
    // Step 2: accepted, nothing created yet.
    if condition(pass.status(), PROVISIONED).is_none() {
        pass.set(Update::new(
            State::Pending,
            vec![Cond::new(PROVISIONED, CondStatus::Unknown, INITIALISED)],
        ));
    }
    // A Runtime without spec (the CRD does not require one) names no Shoot to look up.
    if let Err(e) = check_names_shoot(&pass.rt) {
        return conversion_failed(pass, conversion_message(&e)).map(Step::Stop);
    }
    let name = pass.rt.spec.shoot.name.clone();
    let step = match cached_shoot(ctx, &name) {
        None => create(pass).await?,
        Some(shoot) if !owned_by(&shoot, &pass.rt) => {
            let message = not_owned_message(&pass.rt, &shoot);
            return conversion_failed(pass, message).map(Step::Stop);
        }
        Some(shoot)
            if pass.rt.metadata.generation.unwrap_or(0)
                > shoot.runtime_generation().unwrap_or(0) =>
        {
            // The cache holds no spec; the update converts against the Shoot as it is.
            match get_shoot(ctx, &name).await {
                Ok(Some(full)) => update(pass, &shoot, full).await?,
                Ok(None) => create(pass).await?,
                Err(e) => return gardener_failed(pass, format!("reading Shoot {name}"), e),
            }
        }
        Some(shoot) => Step::Continue(shoot),
    };
    let shoot = match step {
        Step::Continue(s) => s,
        Step::Stop(action) => return Ok(Step::Stop(action)),
    };
    Ok(match wait(pass, &shoot).await? {
        Step::Continue(()) => Step::Continue(shoot),
        Step::Stop(action) => Step::Stop(action),
    })
}

/// Step 3: convert and create the Shoot.
async fn create(pass: &mut Pass<'_>) -> Result<Step<Shoot>, Error> {
    let ctx = pass.ctx;
    let desired = match runtime_to_shoot(&pass.rt, &ctx.settings.config) {
        Ok(s) => s,
        Err(e) => return conversion_error(pass, &e).map(Step::Stop),
    };
    ensure_auth_config(pass, &desired).await?;
    let name = desired.name_any();
    match timed(
        ctx,
        "create",
        ctx.shoots.create(&PostParams::default(), &desired),
    )
    .await
    {
        Ok(created) => {
            wrote_shoot(ctx, &name, None, &created);
            tracing::info!(runtime = %pass.key(), shoot = %name, "Shoot created");
            pass.set(Update::new(
                State::Pending,
                vec![Cond::new(PROVISIONED, CondStatus::Unknown, PENDING)],
            ));
            Ok(Step::Continue(created))
        }
        Err(e) if error::is_conflict(&e) => {
            // Created by an earlier pass whose answer was lost, or someone else's.
            match get_shoot(ctx, &name).await {
                Ok(Some(s)) if owned_by(&s, &pass.rt) => Ok(Step::Continue(s)),
                Ok(Some(s)) => {
                    let message = not_owned_message(&pass.rt, &s);
                    conversion_failed(pass, message).map(Step::Stop)
                }
                Ok(None) => Err(Error::api(format!("creating Shoot {name}"), e)),
                Err(e) => gardener_failed(pass, format!("reading Shoot {name}"), e),
            }
        }
        Err(e) => gardener_failed(pass, format!("creating Shoot {name}"), e),
    }
}

fn conversion_message(e: &ConversionError) -> String {
    e.to_string()
}

/// The update: `metadata.generation` is ahead of the Shoot's runtime-generation annotation.
/// Server-side apply of the converted Shoot (field manager `kim`, forced), versions never
/// downgraded; `Pending`, `Provisioned=Unknown/Processing` when the Shoot's spec changed.
async fn update(
    pass: &mut Pass<'_>,
    cached: &Shoot,
    existing: Shoot,
) -> Result<Step<Shoot>, Error> {
    let ctx = pass.ctx;
    let mut desired = match runtime_to_shoot_for_update(&pass.rt, &ctx.settings.config, &existing) {
        Ok(s) => s,
        Err(e) => return conversion_error(pass, &e).map(Step::Stop),
    };
    desired.status = None;
    ensure_auth_config(pass, &desired).await?;
    let name = existing.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patched = match timed(
        ctx,
        "apply",
        ctx.shoots.patch(&name, &params, &Patch::Apply(&desired)),
    )
    .await
    {
        Ok(p) => p,
        Err(e) => return gardener_failed(pass, format!("applying Shoot {name}"), e),
    };
    // Both the cached copy and the one just read (newer, if Gardener wrote in between) are
    // behind the answer.
    wrote_shoot(ctx, &name, Some(cached), &patched);
    wrote_shoot(ctx, &name, Some(&existing), &patched);
    tracing::info!(
        runtime = %pass.key(),
        shoot = %name,
        generation = ?pass.rt.metadata.generation,
        spec_changed = patched.metadata.generation != existing.metadata.generation,
        "Shoot updated"
    );
    if patched.metadata.generation != existing.metadata.generation {
        pass.set(Update::new(
            State::Pending,
            vec![Cond::new(PROVISIONED, CondStatus::Unknown, PROCESSING)],
        ));
    }
    Ok(Step::Continue(patched))
}

/// Creates or updates the structured-authentication ConfigMap a Shoot references (OIDC for
/// Kubernetes ≥ 1.32, or additional providers), before the Shoot that needs it.
async fn ensure_auth_config(pass: &mut Pass<'_>, shoot: &Shoot) -> Result<(), Error> {
    let ctx = pass.ctx;
    let wanted = shoot
        .spec
        .kubernetes
        .kube_api_server
        .as_ref()
        .and_then(|a| a.structured_authentication.as_ref());
    let Some(wanted) = wanted else {
        return Ok(());
    };
    let Some(auth) = structured_authentication_config(&pass.rt, &ctx.settings.config) else {
        return Ok(());
    };
    if auth.config_map_name != wanted.config_map_name {
        return Ok(());
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(auth.config_map_name.clone()),
            namespace: Some(ctx.settings.config.namespace()),
            labels: pass.rt.runtime_id().map(|rid| {
                BTreeMap::from([(crate::api::LABEL_RUNTIME_ID.to_string(), rid.to_string())])
            }),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(auth.key.to_string(), auth.content)])),
        ..ConfigMap::default()
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let result = timed(
        ctx,
        "apply_auth_config",
        ctx.garden_config_maps
            .patch(&auth.config_map_name, &params, &Patch::Apply(&cm)),
    )
    .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) => gardener_failed(
            pass,
            format!("applying ConfigMap {}", auth.config_map_name),
            e,
        ),
    }
}

/// Step 4: wait on the Shoot's `lastOperation`, copying it and `lastErrors` into the status.
async fn wait(pass: &mut Pass<'_>, shoot: &Shoot) -> Result<Step<()>, Error> {
    let ctx = pass.ctx;
    let key = pass.key();
    let generation = pass.rt.metadata.generation;
    if condition(pass.status(), PROVISIONED).is_some_and(|c| {
        c.status == CondStatus::True.as_str() && c.observed_generation == generation
    }) {
        ctx.clear_retry(&key);
        return Ok(Step::Continue(()));
    }
    let (op, errors) = last_operation(shoot);
    let in_progress_reason = if updating(pass) { PROCESSING } else { PENDING };
    match classify_shoot(shoot) {
        ShootProgress::InProgress { .. } => {
            ctx.clear_retry(&key);
            pass.set(
                Update::new(
                    State::Pending,
                    vec![Cond::new(
                        PROVISIONED,
                        CondStatus::Unknown,
                        in_progress_reason,
                    )],
                )
                .with_shoot(op, errors),
            );
            Ok(Step::Stop(Action::requeue(ctx.settings.resync)))
        }
        ShootProgress::Succeeded { operation } => {
            ctx.clear_retry(&key);
            let reason = if operation == OperationType::Create {
                SHOOT_CREATION_COMPLETED
            } else {
                CONFIGURATION_COMPLETED
            };
            let state = pass.progress_state();
            pass.set(
                Update::new(
                    state,
                    vec![Cond::new(PROVISIONED, CondStatus::True, reason)],
                )
                .with_shoot(op, errors),
            );
            Ok(Step::Continue(()))
        }
        ShootProgress::Failed {
            operation,
            retryable: false,
            codes,
            description,
        } => {
            ctx.clear_retry(&key);
            let reason = if operation == OperationType::Create {
                CREATION_ERR
            } else {
                PROCESSING_ERR
            };
            tracing::warn!(runtime = %key, shoot = %shoot.name_any(), ?codes, "Gardener operation failed for good");
            pass.set(
                Update::new(
                    State::Failed,
                    vec![
                        Cond::new(PROVISIONED, CondStatus::False, reason).with_message(description),
                    ],
                )
                .with_shoot(op, errors),
            );
            Ok(Step::Stop(Action::requeue(ctx.settings.resync)))
        }
        ShootProgress::Failed {
            retryable: true,
            codes,
            description,
            ..
        } => {
            pass.set(
                Update::new(
                    State::Pending,
                    vec![
                        Cond::new(PROVISIONED, CondStatus::Unknown, in_progress_reason)
                            .with_message(description.clone()),
                    ],
                )
                .with_shoot(op, errors),
            );
            let action = request_retry(ctx, &key, shoot, &description, &codes).await?;
            Ok(Step::Stop(action))
        }
    }
}
