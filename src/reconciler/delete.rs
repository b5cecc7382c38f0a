//! Deletion (`metadata.deletionTimestamp` set, finalizer present): docs/reconciler.md, "Steps
//! and the status they write" (Delete) and "A Runtime without spec".
//!
//! While the Shoot exists it is confirmed and deleted and Gardener's `Delete` operation is copied
//! into the status; a `Delete` that failed for good is `Failed`, a stop on the way (Gardener's or
//! an operator's retry brings it back to `Terminating`). Once the Shoot is gone (or was never
//! created, or belongs to another runtime), the kubeconfig Secret and the structured-authentication
//! ConfigMap go, then the finalizer. A Runtime whose spec names no Shoot is not released while a
//! Shoot of its own may exist: its Shoot is found by its runtime ID among those no other Runtime
//! names, and two such Shoots are an error (nothing deleted, the finalizer stays).

use super::error::{self, Error};
use super::kubeconfig::secret_name;
use super::pass::Pass;
use super::reasons::{GARDENER_ERR, GARDENER_SHOOT_DELETED};
use super::shoots::{
    cached_shoot, get_shoot, last_operation, owned_by, request_retry, timed, wrote_shoot,
};
use super::status_update::{Cond, Update};
use crate::api::{ANNOTATION_CONFIRM_DELETION, LABEL_RUNTIME_ID, Shoot};
use crate::gardener::convert::{
    STRUCTURED_AUTH_CONFIG_MAP_PREFIX, structured_auth_config_map_name,
};
use crate::gardener::{OperationType, ShootProgress, classify_shoot};
use crate::status::table::types::DEPROVISIONED;
use crate::status::{CondStatus, State};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use std::borrow::Cow;

/// Writes `Terminating`, `Deprovisioned=False/GardenerErr` and returns the error (deletion
/// reports every error, see [`Pass::reports`]).
fn gardener_failed<T>(pass: &mut Pass<'_>, what: String, e: kube::Error) -> Result<T, Error> {
    let message = format!("{what}: {}", error::describe(&e));
    let condition = Cond::new(DEPROVISIONED, CondStatus::False, GARDENER_ERR).with_message(message);
    pass.fail(Error::api(what, e), State::Terminating, condition)
}

fn confirmed(shoot: &Shoot) -> bool {
    shoot
        .annotations()
        .get(ANNOTATION_CONFIRM_DELETION)
        .is_some_and(|v| v == "true")
}

/// Deletion of a Runtime that carries the finalizer.
///
/// Errors: API errors (after writing `Deprovisioned=False/GardenerErr` for Gardener calls)
/// and status write errors.
pub(crate) async fn run(pass: &mut Pass<'_>) -> Result<Action, Error> {
    let ctx = pass.ctx;
    // The kubeconfig is no longer rotated and is deleted with the Shoot.
    ctx.metrics().forget_kubeconfig(&pass.key());
    match owned_shoot(pass).await? {
        None => release(pass).await,
        Some(shoot) if shoot.metadata.deletion_timestamp.is_none() => {
            request_deletion(pass, &shoot).await
        }
        Some(shoot) => follow_deletion(pass, &shoot).await,
    }
}

/// The Runtime's Shoot, if it exists (see the module documentation).
///
/// Errors: reading or listing Shoots fails (after writing `Deprovisioned=False/GardenerErr`),
/// listing the Runtimes fails, or two Shoots may be the Runtime's.
async fn owned_shoot(pass: &mut Pass<'_>) -> Result<Option<Shoot>, Error> {
    let ctx = pass.ctx;
    if !pass.rt.spec.names_no_shoot() {
        let name = pass.rt.spec.shoot.name.clone();
        if let Some(shoot) = cached_shoot(ctx, &name) {
            return Ok(Some(shoot).filter(|s| owned_by(s, &pass.rt)));
        }
        // Releasing is final: that the Shoot is gone is Gardener's word, not the cache's (a
        // watch can lag for minutes), or the Shoot would be orphaned.
        return match get_shoot(ctx, &name).await {
            Ok(s) => Ok(s.filter(|s| owned_by(s, &pass.rt))),
            Err(e) => gardener_failed(pass, format!("reading Shoot {name}"), e),
        };
    }
    let Some(rid) = pass.rt.runtime_id().map(str::to_string) else {
        // No runtime ID: no Shoot was ever created for it (see `owned_by`).
        return Ok(None);
    };
    // A rare deletion (a Runtime whose spec names no Shoot): read from the servers, as the
    // release that may follow is final.
    let listed = timed(ctx, "list", ctx.shoots.list(&ListParams::default())).await;
    let candidates: Vec<Shoot> = match listed {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|s| owned_by(s, &pass.rt))
            .collect(),
        Err(e) => {
            let what = format!("listing Shoots in {}", ctx.settings.config.namespace());
            return gardener_failed(pass, what, e);
        }
    };
    if candidates.is_empty() {
        return Ok(None);
    }
    let runtimes = ctx
        .runtimes
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::api(format!("listing Runtimes in {}", ctx.settings.namespace), e))?;
    let named_by_another = |shoot: &Shoot| {
        runtimes.items.iter().any(|other| {
            other.name_any() != pass.rt.name_any()
                && other.spec.shoot.name == shoot.name_any()
                && other.runtime_id() == Some(rid.as_str())
        })
    };
    let mut ours: Vec<Shoot> = candidates
        .into_iter()
        .filter(|s| !named_by_another(s))
        .collect();
    if ours.len() > 1 {
        let names: Vec<String> = ours.iter().map(|s| s.name_any()).collect();
        return Err(Error::Other(format!(
            "Runtime {} names no Shoot, and Shoots {} all carry its runtime ID {rid}: not deleting any",
            pass.key(),
            names.join(", ")
        )));
    }
    Ok(ours.pop())
}

/// The Shoot exists and is not being deleted: confirm its deletion (annotation), delete it,
/// then `Terminating`, `Deprovisioned=Unknown/GardenerShootDeleted`; released at once if it is
/// gone meanwhile.
async fn request_deletion(pass: &mut Pass<'_>, shoot: &Shoot) -> Result<Action, Error> {
    let ctx = pass.ctx;
    let name = shoot.name_any();
    // The copy the deletion replaces: the annotated one once the annotation is written. Recorded
    // as replacing the unannotated copy, the deletion would not stand in the cache when the
    // watch delivered the annotation first, and the next pass would delete again.
    let mut latest = Cow::Borrowed(shoot);
    if !confirmed(shoot) {
        let patch = json!({"metadata": {"annotations": {ANNOTATION_CONFIRM_DELETION: "true"}}});
        let annotated = timed(
            ctx,
            "annotate",
            ctx.shoots
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match annotated {
            Ok(annotated) => {
                wrote_shoot(ctx, &name, Some(shoot), &annotated);
                latest = Cow::Owned(annotated);
            }
            Err(e) if error::is_not_found(&e) => {}
            Err(e) => {
                let what = format!("confirming the deletion of Shoot {name}");
                return gardener_failed(pass, what, e);
            }
        }
    }
    match timed(
        ctx,
        "delete",
        ctx.shoots.delete(&name, &DeleteParams::default()),
    )
    .await
    {
        Ok(answer) => {
            if let Some(deleting) = answer.left() {
                wrote_shoot(ctx, &name, Some(&latest), &deleting);
            }
            tracing::info!(runtime = %pass.key(), shoot = %name, "Shoot deletion requested")
        }
        Err(e) if error::is_not_found(&e) => return release(pass).await,
        Err(e) => return gardener_failed(pass, format!("deleting Shoot {name}"), e),
    }
    pass.set(Update::new(
        State::Terminating,
        vec![Cond::new(
            DEPROVISIONED,
            CondStatus::Unknown,
            GARDENER_SHOOT_DELETED,
        )],
    ));
    Ok(Action::requeue(ctx.settings.resync))
}

/// Gardener is deleting the Shoot: its `Delete` operation is copied into the status
/// (`Terminating`, `Deprovisioned=Unknown/GardenerShootDeleted`); one that failed for good is
/// `Failed`, `Deprovisioned=False/GardenerShootDeleted`; a retryable failure is retried as in
/// creation.
async fn follow_deletion(pass: &mut Pass<'_>, shoot: &Shoot) -> Result<Action, Error> {
    let ctx = pass.ctx;
    let key = pass.key();
    let (op, errors) = last_operation(shoot);
    let (state, condition) = match classify_shoot(shoot) {
        ShootProgress::Failed {
            operation: OperationType::Delete,
            retryable: true,
            codes,
            description,
        } => {
            pass.set(
                Update::new(
                    State::Terminating,
                    vec![
                        Cond::new(DEPROVISIONED, CondStatus::Unknown, GARDENER_SHOOT_DELETED)
                            .with_message(description.clone()),
                    ],
                )
                .with_shoot(op, errors),
            );
            return request_retry(ctx, &key, shoot, &description, &codes).await;
        }
        ShootProgress::Failed {
            operation: OperationType::Delete,
            retryable: false,
            codes,
            description,
        } => {
            tracing::warn!(runtime = %key, shoot = %shoot.name_any(), ?codes, "Shoot deletion failed for good");
            let condition = Cond::new(DEPROVISIONED, CondStatus::False, GARDENER_SHOOT_DELETED)
                .with_message(description);
            (State::Failed, condition)
        }
        _ => {
            ctx.clear_retry(&key);
            let condition = Cond::new(DEPROVISIONED, CondStatus::Unknown, GARDENER_SHOOT_DELETED);
            (State::Terminating, condition)
        }
    };
    pass.set(Update::new(state, vec![condition]).with_shoot(op, errors));
    Ok(Action::requeue(ctx.settings.resync))
}

/// The Shoot is gone: delete the kubeconfig Secret and the structured-authentication
/// ConfigMap (absent ones are fine), then remove the finalizer.
async fn release(pass: &mut Pass<'_>) -> Result<Action, Error> {
    let ctx = pass.ctx;
    let key = pass.key();
    if let Some(rid) = pass.rt.runtime_id() {
        let name = secret_name(rid);
        match ctx.secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(runtime = %key, secret = %name, "kubeconfig Secret deleted"),
            Err(e) if error::is_not_found(&e) => {}
            Err(e) => return Err(Error::api(format!("deleting Secret {name}"), e)),
        }
        if pass.rt.spec.names_no_shoot() {
            delete_orphaned_auth_configs(pass, rid).await?;
        } else {
            delete_auth_config(pass, rid).await?;
        }
    }
    pass.remove_finalizer().await?;
    tracing::info!(runtime = %key, "finalizer removed; Runtime released");
    ctx.forget(&key);
    Ok(Action::await_change())
}

/// Deletes the structured-authentication ConfigMap of the Shoot `spec.shoot.name` names, if it
/// carries the runtime-id label `rid` (only ours; an absent one is fine).
async fn delete_auth_config(pass: &Pass<'_>, rid: &str) -> Result<(), Error> {
    let ctx = pass.ctx;
    let cm = structured_auth_config_map_name(&pass.rt.spec.shoot.name);
    match timed(ctx, "get_auth_config", ctx.garden_config_maps.get_opt(&cm)).await {
        Ok(Some(c)) if c.labels().get(LABEL_RUNTIME_ID).map(String::as_str) == Some(rid) => {
            delete_config_map(pass, &cm).await
        }
        Ok(_) => Ok(()),
        Err(e) => Err(Error::api(format!("reading ConfigMap {cm}"), e)),
    }
}

/// For a Runtime whose spec names no Shoot: deletes the structured-authentication ConfigMaps
/// labelled with its runtime ID `rid` whose Shoot is gone.
async fn delete_orphaned_auth_configs(pass: &Pass<'_>, rid: &str) -> Result<(), Error> {
    let ctx = pass.ctx;
    let params = ListParams::default().labels(&format!("{LABEL_RUNTIME_ID}={rid}"));
    let listed = timed(
        ctx,
        "list_auth_configs",
        ctx.garden_config_maps.list(&params),
    )
    .await
    .map_err(|e| Error::api("listing structured-authentication ConfigMaps", e))?;
    for cm in listed.items {
        let name = cm.name_any();
        let Some(shoot) = name.strip_prefix(STRUCTURED_AUTH_CONFIG_MAP_PREFIX) else {
            continue;
        };
        let exists = get_shoot(ctx, shoot)
            .await
            .map_err(|e| Error::api(format!("reading Shoot {shoot}"), e))?
            .is_some();
        if !exists {
            delete_config_map(pass, &name).await?;
        }
    }
    Ok(())
}

/// Deletes the structured-authentication ConfigMap `name` (an absent one is fine).
async fn delete_config_map(pass: &Pass<'_>, name: &str) -> Result<(), Error> {
    let ctx = pass.ctx;
    match timed(
        ctx,
        "delete_auth_config",
        ctx.garden_config_maps
            .delete(name, &DeleteParams::default()),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if error::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(format!("deleting ConfigMap {name}"), e)),
    }
}
