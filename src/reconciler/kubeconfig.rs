//! Step 5: the admin kubeconfig of the Shoot, requested through its `adminkubeconfig`
//! subresource (`AdminKubeconfigRequest`, `expirationSeconds` from the configuration) and
//! stored in Secret `kubeconfig-<runtime-id>` (key `config`) in the Runtime's namespace;
//! renewed once it is older than `expirationSeconds × rotationFraction` (annotation
//! `operator.kyma-project.io/last-sync`).
//!
//! The Secret is read from the controller's cache of kubeconfig Secrets, as metadata
//! ([`super::caches`]): whether and when to renew is in its annotations, and the kubeconfig
//! itself is read only when a runtime-cluster client has to be built ([`Stored`]). The
//! kubeconfig is never logged and never put into a condition message or error.

use super::error::{self, Error};
use super::pass::Pass;
use super::reasons::{KUBECONFIG_CREATED, KUBERNETES_ERR};
use super::shoots::timed;
use super::status_update::{Cond, Update};
use crate::api::{ADMIN_KUBECONFIG_SUBRESOURCE, AdminKubeconfigRequest, LABEL_RUNTIME_ID, Shoot};
use crate::status::table::types::KUBECONFIG_READY;
use crate::status::{CondStatus, State};
use chrono::{DateTime, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{ObjectMeta, PartialObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// Prefix of the kubeconfig Secret's name: `kubeconfig-<runtime-id>`.
pub(crate) const SECRET_PREFIX: &str = "kubeconfig-";
/// Data key of the kubeconfig in the Secret.
pub const SECRET_KEY: &str = "config";
/// Label naming who manages the Secret.
pub(crate) const LABEL_MANAGED_BY: &str = "operator.kyma-project.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`] (and of the binding label in [`super::admins`]).
pub(crate) const MANAGED_BY: &str = "infrastructure-manager";
/// Label with the runtime ID as cluster name.
pub(crate) const LABEL_CLUSTER_NAME: &str = "operator.kyma-project.io/cluster-name";
/// Annotation with the time the kubeconfig was last written (RFC 3339).
pub(crate) const ANNOTATION_LAST_SYNC: &str = "operator.kyma-project.io/last-sync";
/// Annotation with the time the stored kubeconfig's credentials expire (RFC 3339), the
/// `status.expirationTimestamp` Gardener answered with it.
pub(crate) const ANNOTATION_EXPIRATION: &str =
    "infrastructuremanager.kyma-project.io/kubeconfig-expiration";

/// Annotation with the uid of the Shoot whose kubeconfig the Secret holds: a Shoot deleted and
/// created again (another cluster under the same name) gets a new kubeconfig at once, not at
/// the next rotation.
pub(crate) const ANNOTATION_SHOOT_UID: &str = "infrastructuremanager.kyma-project.io/shoot-uid";

/// Whether `secret` holds the kubeconfig of another Shoot than `shoot` (a Secret written
/// without [`ANNOTATION_SHOOT_UID`], by KIM or an older kim, is taken to be `shoot`'s).
pub(crate) fn for_another_shoot(secret: &impl ResourceExt, shoot: &Shoot) -> bool {
    match (
        secret.annotations().get(ANNOTATION_SHOOT_UID),
        &shoot.metadata.uid,
    ) {
        (Some(stored), Some(uid)) => stored != uid,
        _ => false,
    }
}

/// Name of the kubeconfig Secret of runtime `runtime_id`.
pub(crate) fn secret_name(runtime_id: &str) -> String {
    format!("{SECRET_PREFIX}{runtime_id}")
}

/// The kubeconfig Secret of a Runtime as step 5 leaves it: its metadata, and the whole
/// Secret when this pass wrote it (so step 6 needs no read of it).
pub(crate) struct Stored {
    /// The Secret's metadata (name, uid, resourceVersion, annotations).
    pub(crate) meta: ObjectMeta,
    /// The Secret with its kubeconfig, when written in this pass.
    pub(crate) secret: Option<Secret>,
}

/// When the Secret's kubeconfig was last written, from [`ANNOTATION_LAST_SYNC`].
pub(crate) fn last_sync(secret: &impl ResourceExt) -> Option<DateTime<Utc>> {
    secret
        .annotations()
        .get(ANNOTATION_LAST_SYNC)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// When the kubeconfig in `secret` expires: [`ANNOTATION_EXPIRATION`], or, for a Secret written
/// without it, its last sync plus `lifetime` (the configured `expirationSeconds`).
pub(crate) fn expires_at(secret: &impl ResourceExt, lifetime: Duration) -> Option<DateTime<Utc>> {
    let annotated = secret
        .annotations()
        .get(ANNOTATION_EXPIRATION)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc));
    annotated.or_else(|| {
        let lifetime = chrono::Duration::from_std(lifetime).ok()?;
        last_sync(secret).map(|t| t + lifetime)
    })
}

/// How long until `secret` must be renewed (zero: now): missing Secret or sync time, or
/// older than `rotate_after`. (A Secret whose kubeconfig turns out unusable when it is read is
/// renewed by the next pass, `Ctx::kubeconfig_unusable`.)
pub(crate) fn renew_in(
    secret: Option<&impl ResourceExt>,
    now: DateTime<Utc>,
    rotate_after: Duration,
) -> Duration {
    let Some(secret) = secret else {
        return Duration::ZERO;
    };
    let Some(synced) = last_sync(secret) else {
        return Duration::ZERO;
    };
    let age = (now - synced).to_std().unwrap_or(Duration::ZERO);
    rotate_after.saturating_sub(age)
}

/// `KubeconfigReady=False/KubernetesErr` with `message`, the condition of a failed step 5.
fn failed(message: String) -> Cond {
    Cond::new(KUBECONFIG_READY, CondStatus::False, KUBERNETES_ERR).with_message(message)
}

/// Ensures a fresh kubeconfig Secret; returns it and how long until it must be renewed.
///
/// Errors: writing the Secret or requesting the kubeconfig failed (after setting
/// `KubeconfigReady=False/KubernetesErr`, unless [`Pass::reports`] holds the error back).
pub(crate) async fn run(pass: &mut Pass<'_>, shoot: &Shoot) -> Result<(Stored, Duration), Error> {
    let ctx = pass.ctx;
    let Some(rid) = pass.rt.runtime_id().map(str::to_string) else {
        return Err(Error::Other(format!(
            "Runtime {} has no {LABEL_RUNTIME_ID} label",
            pass.key()
        )));
    };
    let name = secret_name(&rid);
    let existing: Option<PartialObjectMeta<Secret>> =
        ctx.caches.secrets.get(&name).map(|s| s.as_ref().clone());
    let rotate_after = ctx.settings.config.kubeconfig_rotation_after();
    let now = Utc::now();
    let unusable = ctx.take_unusable(&pass.key());
    let replaced = existing
        .as_ref()
        .is_some_and(|s| for_another_shoot(s, shoot));
    let due = renew_in(existing.as_ref(), now, rotate_after).is_zero();
    let stored = if unusable || replaced || due {
        match renew(pass, shoot, &rid, existing.as_ref(), now).await {
            Ok(s) => Stored {
                meta: s.metadata.clone(),
                secret: Some(s),
            },
            Err((error, message)) => {
                return pass.fail(error, State::Pending, failed(message));
            }
        }
    } else {
        let meta = existing
            .expect("renew_in is zero without a Secret")
            .metadata;
        Stored { meta, secret: None }
    };
    let secret = PartialObjectMeta::<Secret> {
        metadata: stored.meta.clone(),
        ..Default::default()
    };
    let lifetime = Duration::from_secs(
        u64::try_from(ctx.settings.config.kubeconfig.expiration_seconds).unwrap_or(0),
    );
    if let Some(at) = expires_at(&secret, lifetime) {
        ctx.metrics()
            .set_kubeconfig_expiry(&pass.key(), at.timestamp());
    }
    pass.set(Update::new(
        pass.progress_state(),
        vec![Cond::new(
            KUBECONFIG_READY,
            CondStatus::True,
            KUBECONFIG_CREATED,
        )],
    ));
    let renew = renew_in(Some(&secret), Utc::now(), rotate_after).max(Duration::from_secs(1));
    Ok((stored, renew))
}

/// Sets each `(key, value)` in `map`, removing the keys whose value is unknown (not left stale
/// from the version before).
fn set_all(map: &mut Option<BTreeMap<String, String>>, entries: &[(&str, Option<String>)]) {
    let map = map.get_or_insert_with(BTreeMap::new);
    for (key, value) in entries {
        match value {
            Some(v) => map.insert((*key).to_string(), v.clone()),
            None => map.remove(*key),
        };
    }
}

/// Requests a kubeconfig and writes the Secret (create, or replace at the resourceVersion
/// read, keeping the labels, annotations, owners and finalizers others put on it: kim sets
/// only its own three labels and three annotations; kubectl's last-applied configuration is not
/// kept, the cache drops it). Errors carry a message for the condition
/// that holds no secret material.
async fn renew(
    pass: &Pass<'_>,
    shoot: &Shoot,
    rid: &str,
    existing: Option<&PartialObjectMeta<Secret>>,
    now: DateTime<Utc>,
) -> Result<Secret, (Error, String)> {
    let ctx = pass.ctx;
    let shoot_name = shoot.name_any();
    let request = AdminKubeconfigRequest::new(ctx.settings.config.kubeconfig.expiration_seconds);
    // Read as plain JSON and decoded here, so that no decoding error message can quote the
    // credentials.
    let answer: serde_json::Value = timed(
        ctx,
        "adminkubeconfig",
        ctx.shoots.create_subresource(
            ADMIN_KUBECONFIG_SUBRESOURCE,
            &shoot_name,
            &PostParams::default(),
            &request,
        ),
    )
    .await
    .map_err(|e| {
        let what = format!("requesting the admin kubeconfig of Shoot {shoot_name}");
        let message = format!("{what}: {}", error::describe(&e));
        (Error::api(what, e), message)
    })?;
    let answer: AdminKubeconfigRequest = serde_json::from_value(answer).map_err(|_| {
        let message = format!(
            "the AdminKubeconfigRequest answer for Shoot {shoot_name} has an unexpected shape"
        );
        (Error::Other(message.clone()), message)
    })?;
    let expiration = answer.status.as_ref().map(|s| {
        s.expiration_timestamp
            .0
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    });
    let kubeconfig = answer.kubeconfig_bytes().map_err(|e| {
        let message = format!("the admin kubeconfig of Shoot {shoot_name} is unusable: {e}");
        (Error::Other(message.clone()), message)
    })?;
    let name = secret_name(rid);
    let own_labels = [
        (LABEL_RUNTIME_ID, Some(rid.to_string())),
        (LABEL_MANAGED_BY, Some(MANAGED_BY.to_string())),
        (LABEL_CLUSTER_NAME, Some(rid.to_string())),
    ];
    let own_annotations = [
        (
            ANNOTATION_LAST_SYNC,
            Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        ),
        (ANNOTATION_EXPIRATION, expiration),
        (ANNOTATION_SHOOT_UID, shoot.metadata.uid.clone()),
    ];
    // The metadata written over `base` (the Secret as read, if any): kim's labels and
    // annotations set on top of the others.
    let metadata_over = |base: Option<&ObjectMeta>| {
        let mut meta = base.cloned().unwrap_or_default();
        meta.name = Some(name.clone());
        meta.namespace = Some(ctx.settings.namespace.clone());
        meta.managed_fields = None;
        set_all(&mut meta.labels, &own_labels);
        set_all(&mut meta.annotations, &own_annotations);
        meta
    };
    let secret = Secret {
        metadata: metadata_over(existing.map(|s| &s.metadata)),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(kubeconfig),
        )])),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    };
    let written = match existing {
        Some(_) => {
            ctx.secrets
                .replace(&name, &PostParams::default(), &secret)
                .await
        }
        None => match ctx.secrets.create(&PostParams::default(), &secret).await {
            // It exists, but not in the cache: without kim's label (written by hand, or by an
            // older tool). Replaced at the version read, as a cached one is.
            Err(e) if error::is_conflict(&e) => match ctx.secrets.get(&name).await {
                Ok(current) => {
                    let mut secret = secret;
                    secret.metadata = metadata_over(Some(&current.metadata));
                    ctx.secrets
                        .replace(&name, &PostParams::default(), &secret)
                        .await
                }
                Err(e) => Err(e),
            },
            other => other,
        },
    };
    let written = written.map_err(|e| {
        let what = format!("writing Secret {name}");
        let message = format!("{what}: {}", error::describe(&e));
        (Error::api(what, e), message)
    })?;
    tracing::info!(runtime = %pass.key(), secret = %name, "kubeconfig Secret written");
    let meta = PartialObjectMeta::<Secret> {
        metadata: ObjectMeta {
            managed_fields: None,
            ..written.metadata.clone()
        },
        ..Default::default()
    };
    let before = existing.map(|e| PartialObjectMeta::<Secret> {
        metadata: e.metadata.clone(),
        ..Default::default()
    });
    ctx.caches.secrets.wrote(&name, before.as_ref(), meta);
    Ok(written)
}
