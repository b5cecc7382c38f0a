//! The Gardener side of a Runtime: its Shoot, read, annotated and applied through calls that are
//! timed and counted ([`timed`]), shared by the steps that create, update, wait on and delete it.

use super::context::Ctx;
use super::error::Error;
use crate::api::{
    ANNOTATION_CONFIRM_DELETION, ANNOTATION_OPERATION, ANNOTATION_RUNTIME_GENERATION,
    ANNOTATION_RUNTIME_ID, LastError, LastOperation, OPERATION_RETRY, Runtime, Shoot, ShootStatus,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

/// Field manager of every server-side apply `kim` sends.
pub(crate) const FIELD_MANAGER: &str = "kim";

/// Runs the Gardener call `call`, recording its latency as operation `operation` and, when it
/// fails, the error by code.
pub(crate) async fn timed<T>(
    ctx: &Ctx,
    operation: &'static str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    let started = Instant::now();
    let out = call.await;
    ctx.metrics().gardener_call(operation, started);
    if let Err(e) = &out {
        ctx.metrics()
            .gardener_error(operation, super::metrics::gardener_error_code(e));
    }
    out
}

/// The Runtime's Shoot as the controller's cache holds it ([`ShootHead`]: no `spec`), if it
/// exists.
pub(crate) fn cached_shoot(ctx: &Ctx, name: &str) -> Option<Shoot> {
    ctx.caches.shoots.get(name).map(|s| s.to_shoot())
}

/// The annotations of a Shoot a reconcile reads; the cache keeps no other. The runtime ID first
/// ([`ShootHead::runtime_id`]).
const ANNOTATIONS_READ: [&str; 4] = [
    ANNOTATION_RUNTIME_ID,
    ANNOTATION_RUNTIME_GENERATION,
    ANNOTATION_OPERATION,
    ANNOTATION_CONFIRM_DELETION,
];

/// A Shoot as the controller's watch cache holds it: what a reconcile reads — its identity
/// (name, uid, resourceVersion, generation, deletion), [`ANNOTATIONS_READ`], and the status
/// fields [`ShootStatus`] names — and nothing else.
///
/// A type of its own rather than a [`Shoot`] with an empty `spec`: a `Shoot` is 2.5 KiB before
/// any of its fields holds data (its typed `spec` is inline), this about 0.6 KiB, and the watch
/// decodes it without building the `spec` at all (serde skips fields a type does not name). The
/// update, the one step that reads the `spec`, GETs the Shoot ([`get_shoot`]).
///
/// The annotations read are kept as fields (`metadata.annotations` is emptied): a map of four
/// entries costs a whole B-tree node, about 0.6 KiB per Shoot.
///
/// Decoded from the wire through [`WireShoot`], which names only these fields: a Shoot's
/// `managedFields`, labels, conditions and constraints (most of its ~19 KiB besides the `spec`)
/// are skipped by the decoder, never built, so a page of a first list costs its bytes and not
/// their decoded copies.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ShootHead {
    metadata: ObjectMeta,
    status: Option<ShootStatus>,
    /// The values of [`ANNOTATIONS_READ`], in that order (filled by [`ShootHead::slim`]).
    read: [Option<String>; ANNOTATIONS_READ.len()],
}

/// The fields of a Shoot's metadata a [`ShootHead`] keeps, as they arrive.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    annotations: Option<BTreeMap<String, String>>,
}

/// The fields of a Shoot's status a [`ShootHead`] keeps, as they arrive.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireStatus {
    last_operation: Option<LastOperation>,
    last_errors: Vec<LastError>,
    observed_generation: Option<i64>,
    seed_name: Option<String>,
    #[serde(rename = "technicalID")]
    technical_id: Option<String>,
}

/// A Shoot as the watch decodes it for a [`ShootHead`]: every other field is skipped unbuilt.
#[derive(Deserialize, Default)]
#[serde(default)]
struct WireShoot {
    metadata: WireMeta,
    status: Option<WireStatus>,
}

impl<'de> Deserialize<'de> for ShootHead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShootHead, D::Error> {
        let WireShoot {
            metadata: m,
            status,
        } = WireShoot::deserialize(d)?;
        let mut head = ShootHead {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                generation: m.generation,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                annotations: m.annotations,
                ..ObjectMeta::default()
            },
            status: status.map(|s| ShootStatus {
                last_operation: s.last_operation,
                last_errors: s.last_errors,
                observed_generation: s.observed_generation,
                seed_name: s.seed_name,
                technical_id: s.technical_id,
                extra: Default::default(),
            }),
            read: Default::default(),
        };
        head.slim();
        Ok(head)
    }
}

impl ShootHead {
    /// The head of `shoot`, cut as the cache holds it.
    pub(crate) fn of(shoot: &Shoot) -> ShootHead {
        let mut head = ShootHead {
            metadata: shoot.metadata.clone(),
            status: shoot.status.clone(),
            read: Default::default(),
        };
        head.slim();
        head
    }

    /// Drops what a reconcile does not read (see the type's docs); applied to every object the
    /// watch delivers.
    pub(crate) fn slim(&mut self) {
        let meta = &mut self.metadata;
        // Only the fields `WireMeta` names.
        meta.managed_fields = None;
        meta.labels = None;
        meta.owner_references = None;
        meta.finalizers = None;
        meta.generate_name = None;
        meta.self_link = None;
        if let Some(mut annotations) = meta.annotations.take() {
            for (value, key) in self.read.iter_mut().zip(ANNOTATIONS_READ) {
                *value = annotations.remove(key);
            }
        }
        if let Some(status) = self.status.as_mut() {
            // Conditions, constraints, credentials…: kept for a Shoot read with a GET, not here.
            status.extra = Default::default();
        }
    }

    /// A [`Shoot`] with this head and an empty `spec`, for the steps that take a Shoot (the
    /// annotations read back in `metadata.annotations`).
    pub(crate) fn to_shoot(&self) -> Shoot {
        let annotations: BTreeMap<String, String> = ANNOTATIONS_READ
            .iter()
            .zip(&self.read)
            .filter_map(|(key, value)| Some((key.to_string(), value.clone()?)))
            .collect();
        let mut metadata = self.metadata.clone();
        metadata.annotations = (!annotations.is_empty()).then_some(annotations);
        Shoot {
            metadata,
            spec: Default::default(),
            status: self.status.clone(),
        }
    }

    /// The runtime ID from the `kyma-project.io/runtime-id` annotation, if any.
    pub(crate) fn runtime_id(&self) -> Option<&str> {
        self.read[0].as_deref()
    }
}

/// Addressed as `core.gardener.cloud/v1beta1` `shoots`, exactly as [`Shoot`].
impl Resource for ShootHead {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Shoot::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Shoot::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Shoot::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        Shoot::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Shoot::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Records `written`, the answer of a write of Shoot `name` that replaced `before` (`None`:
/// created), as the current copy until the watch delivers it (cut as the cache holds Shoots,
/// [`ShootHead`]).
pub(crate) fn wrote_shoot(ctx: &Ctx, name: &str, before: Option<&Shoot>, written: &Shoot) {
    let before = before.map(ShootHead::of);
    ctx.caches
        .shoots
        .wrote(name, before.as_ref(), ShootHead::of(written));
}

/// The Runtime's Shoot read from Gardener (with its `spec`), if it exists.
///
/// Errors: the GET fails.
pub(crate) async fn get_shoot(ctx: &Ctx, name: &str) -> Result<Option<Shoot>, kube::Error> {
    timed(ctx, "get", ctx.shoots.get_opt(name)).await
}

/// Whether `shoot` was created for `rt` (its runtime-id annotation is the Runtime's).
pub(crate) fn owned_by(shoot: &Shoot, rt: &Runtime) -> bool {
    shoot.runtime_id().is_some() && shoot.runtime_id() == rt.runtime_id()
}

/// The Shoot's `status.lastOperation` and `status.lastErrors`, to copy into the Runtime's
/// status.
pub(crate) fn last_operation(shoot: &Shoot) -> (Option<LastOperation>, Vec<LastError>) {
    shoot
        .status
        .as_ref()
        .map(|s| (s.last_operation.clone(), s.last_errors.clone()))
        .unwrap_or_default()
}

/// For an operation of `shoot` that failed with retryable codes (`description`, `codes`): once
/// [`super::Settings::gardener_retry_delay`] has passed since it was first seen, annotate the
/// Shoot `gardener.cloud/operation: retry` (Gardener does not retry a `Failed` operation by
/// itself); until then, requeue for then. The failure is told apart from a later one by its
/// `lastOperation.lastUpdateTime` and description.
///
/// Errors: the annotation cannot be written.
pub(crate) async fn request_retry(
    ctx: &Ctx,
    key: &str,
    shoot: &Shoot,
    description: &str,
    codes: &[String],
) -> Result<Action, Error> {
    let updated = shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .map(|o| o.last_update_time.0.to_string())
        .unwrap_or_default();
    let fingerprint = format!("{updated}|{description}");
    if let Some(wait) = ctx.retry_due(key, &fingerprint) {
        return Ok(Action::requeue(wait.max(Duration::from_millis(10))));
    }
    let already = shoot
        .annotations()
        .get(ANNOTATION_OPERATION)
        .is_some_and(|v| v == OPERATION_RETRY);
    if !already {
        let name = shoot.name_any();
        let patch = json!({"metadata": {"annotations": {ANNOTATION_OPERATION: OPERATION_RETRY}}});
        let annotated = timed(
            ctx,
            "annotate",
            ctx.shoots
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .map_err(|e| Error::api(format!("annotating Shoot {name} for a retry"), e))?;
        wrote_shoot(ctx, &name, Some(shoot), &annotated);
        tracing::info!(runtime = %key, shoot = %name, ?codes, "asked Gardener to retry the failed operation");
    }
    ctx.clear_retry(key);
    Ok(Action::requeue(ctx.settings.resync))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shoot_head_keeps_what_a_reconcile_reads_and_gives_it_back_as_a_shoot() {
        let shoot: Shoot = serde_json::from_value(json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {
                "name": "s", "namespace": "garden-p", "uid": "u1", "resourceVersion": "7",
                "generation": 3,
                "creationTimestamp": "2026-12-02T09:00:00Z",
                "generateName": "s-",
                "labels": {"account": "a"},
                "finalizers": ["gardener"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                    "uid": "u2"}],
                "managedFields": [{"manager": "kim", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "annotations": {
                    ANNOTATION_RUNTIME_ID: "rid",
                    ANNOTATION_OPERATION: "retry",
                    "other": "dropped",
                },
            },
            "spec": {"region": "eu-west-1"},
            "status": {
                "lastOperation": {"type": "Create", "state": "Succeeded", "progress": 100,
                    "description": "done", "lastUpdateTime": "2026-12-02T10:00:00Z"},
                "observedGeneration": 3,
                "constraints": [{"type": "X"}],
            },
        }))
        .unwrap();
        // Decoded from the wire as the watch does, and cut from a Shoot as an own write is.
        let mut decoded: ShootHead =
            serde_json::from_value(serde_json::to_value(&shoot).unwrap()).unwrap();
        decoded.slim();
        let head = ShootHead::of(&shoot);
        assert_eq!(decoded, head);
        assert_eq!(head.runtime_id(), Some("rid"));
        assert_eq!(
            head.meta().annotations,
            None,
            "kept as fields, not as a map"
        );

        let back = head.to_shoot();
        assert_eq!(back.runtime_id(), Some("rid"));
        assert_eq!(
            back.metadata.annotations,
            Some(BTreeMap::from([
                (ANNOTATION_RUNTIME_ID.to_string(), "rid".to_string()),
                (ANNOTATION_OPERATION.to_string(), "retry".to_string()),
            ]))
        );
        assert_eq!(back.metadata.labels, None);
        assert_eq!(back.metadata.finalizers, None);
        assert_eq!(back.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(back.metadata.generation, Some(3));
        assert_eq!(back.spec, Default::default());
        let status = back.status.unwrap();
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.last_operation.unwrap().description, "done");
        assert!(
            status.extra.is_empty(),
            "conditions, constraints… are not cached"
        );
    }
}
