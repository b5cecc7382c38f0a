//! Step 5: the admin kubeconfig of the Shoot, requested through its `adminkubeconfig`
//! subresource (`AdminKubeconfigRequest`, `expirationSeconds` from the configuration) and
//! stored in Secret `kubeconfig-<runtime-id>` (key `config`) in the Runtime's namespace;
//! renewed once it is older than `expirationSeconds × rotationFraction` (annotation
//! `operator.kyma-project.io/last-sync`).
//!
//! The Secret is read from the controller's cache of kubeconfig Secrets, as the few fields of
//! its metadata a reconcile reads ([`SecretHead`]): whether and when to renew is in its
//! annotations, and the kubeconfig itself is read only when a runtime-cluster client has to be
//! built ([`Stored`]). The kubeconfig is never logged and never put into a condition message or
//! error.

use super::error::{self, Error};
use super::pass::Pass;
use super::reasons::{KUBECONFIG_CREATED, KUBERNETES_ERR};
use super::shoots::timed;
use super::status_update::{Cond, Update};
use crate::api::{ADMIN_KUBECONFIG_SUBRESOURCE, AdminKubeconfigRequest, LABEL_RUNTIME_ID, Shoot};
use crate::status::table::types::KUBECONFIG_READY;
use crate::status::{CondStatus, State};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::{ByteString, NamespaceResourceScope};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
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

/// kubectl's annotation holding the last applied configuration.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotation with the uid of the Shoot whose kubeconfig the Secret holds: a Shoot deleted and
/// created again (another cluster under the same name) gets a new kubeconfig at once, not at
/// the next rotation.
pub(crate) const ANNOTATION_SHOOT_UID: &str = "infrastructuremanager.kyma-project.io/shoot-uid";

/// The annotations of a kubeconfig Secret a reconcile reads; the cache keeps no other.
const ANNOTATIONS_READ: [&str; 3] = [
    ANNOTATION_LAST_SYNC,
    ANNOTATION_EXPIRATION,
    ANNOTATION_SHOOT_UID,
];

/// A kubeconfig Secret as the controller's watch cache holds it: its identity (name, namespace,
/// uid, resourceVersion, deletion), its runtime-id label and [`ANNOTATIONS_READ`] — nothing
/// else.
///
/// Watched as `PartialObjectMetadata` (kube-runtime's metadata watcher), so neither a list nor
/// a watch event carries a kubeconfig, and cut to these fields when it arrives: the whole
/// `ObjectMeta` of a Secret kim wrote holds two maps (three labels, three annotations, more on
/// a Secret KIM wrote), a B-tree node each. A renewal writes the Secret with a merge patch of
/// kim's own labels, annotations and key ([`renew`]), so it needs none of the others.
///
/// (`Deserialize` only for the Controller's bounds: the cache is filled with [`SecretHead::of`].)
#[derive(Deserialize, Debug, Clone, PartialEq, Default)]
pub(crate) struct SecretHead {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(skip)]
    runtime_id: Option<String>,
    /// The values of [`ANNOTATIONS_READ`], in that order.
    #[serde(skip)]
    read: [Option<String>; ANNOTATIONS_READ.len()],
}

impl SecretHead {
    /// The head of a Secret with metadata `meta`.
    pub(crate) fn of(meta: &ObjectMeta) -> SecretHead {
        let annotation = |key: &str| meta.annotations.as_ref()?.get(key).cloned();
        SecretHead {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                deletion_timestamp: meta.deletion_timestamp.clone(),
                ..ObjectMeta::default()
            },
            runtime_id: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_RUNTIME_ID))
                .cloned(),
            read: ANNOTATIONS_READ.map(annotation),
        }
    }

    /// The value of the runtime-id label ([`LABEL_RUNTIME_ID`]), if any.
    pub(crate) fn runtime_id(&self) -> Option<&str> {
        self.runtime_id.as_deref()
    }

    /// The value of annotation `key` of [`ANNOTATIONS_READ`].
    fn annotation(&self, key: &str) -> Option<&str> {
        let i = ANNOTATIONS_READ.iter().position(|k| *k == key)?;
        self.read[i].as_deref()
    }
}

/// Addressed as core/v1 `secrets`, exactly as [`Secret`].
impl Resource for SecretHead {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Secret::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Secret::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Secret::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        Secret::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Secret::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Whether `secret` holds the kubeconfig of another Shoot than `shoot` (a Secret written
/// without [`ANNOTATION_SHOOT_UID`], by KIM or an older kim, is taken to be `shoot`'s).
pub(crate) fn for_another_shoot(secret: &SecretHead, shoot: &Shoot) -> bool {
    match (secret.annotation(ANNOTATION_SHOOT_UID), &shoot.metadata.uid) {
        (Some(stored), Some(uid)) => stored != uid,
        _ => false,
    }
}

/// Name of the kubeconfig Secret of runtime `runtime_id`.
pub(crate) fn secret_name(runtime_id: &str) -> String {
    format!("{SECRET_PREFIX}{runtime_id}")
}

/// The kubeconfig Secret of a Runtime as step 5 leaves it: its head, and the whole Secret when
/// this pass wrote it (so step 6 needs no read of it).
pub(crate) struct Stored {
    /// The Secret's head (name, uid, resourceVersion, the annotations read).
    pub(crate) head: SecretHead,
    /// The Secret with its kubeconfig, when written in this pass.
    pub(crate) secret: Option<Secret>,
}

/// Parses an RFC 3339 time.
fn time(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// When the Secret's kubeconfig was last written, from [`ANNOTATION_LAST_SYNC`].
pub(crate) fn last_sync(secret: &SecretHead) -> Option<DateTime<Utc>> {
    secret.annotation(ANNOTATION_LAST_SYNC).and_then(time)
}

/// When the kubeconfig in `secret` expires: [`ANNOTATION_EXPIRATION`], or, for a Secret written
/// without it, its last sync plus `lifetime` (the configured `expirationSeconds`).
pub(crate) fn expires_at(secret: &SecretHead, lifetime: Duration) -> Option<DateTime<Utc>> {
    let annotated = secret.annotation(ANNOTATION_EXPIRATION).and_then(time);
    annotated.or_else(|| {
        let lifetime = chrono::Duration::from_std(lifetime).ok()?;
        last_sync(secret).map(|t| t + lifetime)
    })
}

/// How long until `secret` must be renewed (zero: now): missing Secret or sync time, or
/// older than `rotate_after`. (A Secret whose kubeconfig turns out unusable when it is read is
/// renewed by the next pass, `Ctx::kubeconfig_unusable`.)
pub(crate) fn renew_in(
    secret: Option<&SecretHead>,
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
    let existing = ctx.caches.secrets.get(&name);
    let rotate_after = ctx.settings.config.kubeconfig_rotation_after();
    let now = Utc::now();
    let unusable = ctx.take_unusable(&pass.key());
    let replaced = existing
        .as_deref()
        .is_some_and(|s| for_another_shoot(s, shoot));
    let due = renew_in(existing.as_deref(), now, rotate_after).is_zero();
    let stored = match existing {
        Some(head) if !(unusable || replaced || due) => Stored {
            head: head.as_ref().clone(),
            secret: None,
        },
        existing => match renew(pass, shoot, &rid, existing.as_deref(), now).await {
            Ok(s) => Stored {
                head: SecretHead::of(&s.metadata),
                secret: Some(s),
            },
            Err((error, message)) => {
                return pass.fail(error, State::Pending, failed(message));
            }
        },
    };
    let lifetime = Duration::from_secs(
        u64::try_from(ctx.settings.config.kubeconfig.expiration_seconds).unwrap_or(0),
    );
    if let Some(at) = expires_at(&stored.head, lifetime) {
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
    let renew = renew_in(Some(&stored.head), Utc::now(), rotate_after).max(Duration::from_secs(1));
    Ok((stored, renew))
}

/// Requests a kubeconfig and writes the Secret: created, or, when it exists, changed with a JSON
/// merge patch (RFC 7386) of kim's three labels, three annotations and the `config` key only
/// (with `type: Opaque`, and kubectl's last-applied copy removed) — the labels, annotations,
/// keys, owners and finalizers others put on it stay as they are, with no read of the Secret
/// first, and the patch cannot conflict. A Secret of that name that the
/// cache does not hold (without kim's label: written by hand or by another tool) is taken over
/// the same way. Errors carry a message for the condition that holds no secret material.
async fn renew(
    pass: &Pass<'_>,
    shoot: &Shoot,
    rid: &str,
    existing: Option<&SecretHead>,
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
    let labels = [
        (LABEL_RUNTIME_ID, Some(rid.to_string())),
        (LABEL_MANAGED_BY, Some(MANAGED_BY.to_string())),
        (LABEL_CLUSTER_NAME, Some(rid.to_string())),
    ];
    let annotations = [
        (
            ANNOTATION_LAST_SYNC,
            Some(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        ),
        (ANNOTATION_EXPIRATION, expiration),
        (ANNOTATION_SHOOT_UID, shoot.metadata.uid.clone()),
    ];
    let data = ByteString(kubeconfig);
    let name = &name;
    let create = || {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ctx.settings.namespace.clone()),
                labels: Some(known(&labels)),
                annotations: Some(known(&annotations)),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(SECRET_KEY.to_string(), data.clone())])),
            type_: Some("Opaque".to_string()),
            ..Secret::default()
        };
        async move { ctx.secrets.create(&PostParams::default(), &secret).await }
    };
    let patch = || {
        // An annotation whose value is unknown (no expiration answered) is removed (null), not
        // left stale from the kubeconfig before; so is kubectl's copy of an applied Secret,
        // which may hold an older credential. `type` is immutable: a Secret of another type
        // (TLS, a ServiceAccount token) is refused with 422, never filled with a kubeconfig.
        let mut annotations = merged(&annotations);
        annotations.insert(LAST_APPLIED.to_string(), Value::Null);
        let body = json!({
            "metadata": {"labels": merged(&labels), "annotations": annotations},
            "type": "Opaque",
            "data": {SECRET_KEY: data.clone()},
        });
        async move {
            ctx.secrets
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
        }
    };
    let written = match existing {
        // Deleted since the cache saw it.
        Some(_) => match patch().await {
            Err(e) if error::is_not_found(&e) => create().await,
            other => other,
        },
        // It exists, but not in the cache.
        None => match create().await {
            Err(e) if error::is_conflict(&e) => patch().await,
            other => other,
        },
    };
    let written = written.map_err(|e| {
        let what = format!("writing Secret {name}");
        let message = format!("{what}: {}", error::describe(&e));
        (Error::api(what, e), message)
    })?;
    tracing::info!(runtime = %pass.key(), secret = %name, "kubeconfig Secret written");
    ctx.caches
        .secrets
        .wrote(name, existing, SecretHead::of(&written.metadata));
    Ok(written)
}

/// The entries of `entries` whose value is known, as a label or annotation map.
fn known(entries: &[(&str, Option<String>)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter_map(|(key, value)| Some((key.to_string(), value.clone()?)))
        .collect()
}

/// `entries` as a JSON merge patch of a map: an unknown value as `null` (the key removed).
fn merged(entries: &[(&str, Option<String>)]) -> Map<String, Value> {
    entries
        .iter()
        .map(|(key, value)| (key.to_string(), json!(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |entries: &[(&str, &str)]| {
            Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        ObjectMeta {
            name: Some("kubeconfig-rid".into()),
            namespace: Some("kcp-system".into()),
            uid: Some("u1".into()),
            resource_version: Some("7".into()),
            labels: map(labels),
            annotations: map(annotations),
            finalizers: Some(vec!["someone/else".into()]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_head_keeps_what_a_reconcile_reads_and_nothing_else() {
        let head = SecretHead::of(&meta(
            &[(LABEL_RUNTIME_ID, "rid"), ("team", "a")],
            &[
                (ANNOTATION_LAST_SYNC, "2026-12-03T10:00:00Z"),
                (ANNOTATION_SHOOT_UID, "s1"),
                ("note", "large"),
            ],
        ));
        assert_eq!(head.runtime_id(), Some("rid"));
        assert_eq!(
            head.annotation(ANNOTATION_LAST_SYNC),
            Some("2026-12-03T10:00:00Z")
        );
        assert_eq!(head.annotation(ANNOTATION_SHOOT_UID), Some("s1"));
        assert_eq!(head.annotation(ANNOTATION_EXPIRATION), None);
        assert_eq!(head.annotation("note"), None);
        let m = head.meta();
        assert_eq!(
            (
                m.name.as_deref(),
                m.uid.as_deref(),
                m.resource_version.as_deref()
            ),
            (Some("kubeconfig-rid"), Some("u1"), Some("7"))
        );
        assert!(m.labels.is_none() && m.annotations.is_none() && m.finalizers.is_none());
        let expected = DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z").unwrap();
        assert_eq!(last_sync(&head), Some(expected.with_timezone(&Utc)));
        // Without an expiration annotation: the last sync plus the configured lifetime.
        assert_eq!(
            expires_at(&head, Duration::from_secs(3600)),
            Some(expected.with_timezone(&Utc) + chrono::Duration::hours(1))
        );
    }

    #[test]
    fn a_renewal_patch_removes_an_unknown_annotation_and_sets_the_others() {
        let patch = merged(&[
            (ANNOTATION_LAST_SYNC, Some("t".to_string())),
            (ANNOTATION_EXPIRATION, None),
        ]);
        assert_eq!(
            Value::Object(patch),
            json!({ANNOTATION_LAST_SYNC: "t", ANNOTATION_EXPIRATION: null})
        );
        let created = known(&[
            (ANNOTATION_LAST_SYNC, Some("t".to_string())),
            (ANNOTATION_EXPIRATION, None),
        ]);
        assert_eq!(created.len(), 1);
    }
}
