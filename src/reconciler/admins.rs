//! Step 6 (docs/reconciler.md): the administrators of `spec.security.administrators` as
//! `ClusterRoleBinding`s to `ClusterRole/cluster-admin` in the runtime cluster, reached with the
//! kubeconfig of step 5 through [`super::runtime_clients`]. Bindings have deterministic names
//! ([`binding_name`]) and kim's `managed-by` label; labelled bindings of users no longer listed are
//! deleted, and bindings without the label are never read, changed or deleted.

use super::context::Ctx;
use super::error::{self, Error};
use super::kubeconfig::{MANAGED_BY, SECRET_KEY, Stored};
use super::pass::Pass;
use super::reasons::{ADMINISTRATORS_CONFIGURED, CONFIGURATION_ERROR};
use super::status_update::{Cond, Update, condition};
use crate::status::table::types::CONFIGURED;
use crate::status::{CondStatus, State};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::BTreeMap;

/// Label on every binding this reconciler manages.
pub(crate) const LABEL_MANAGED_BY: &str = "reconciler.kyma-project.io/managed-by";
/// Name prefix of the bindings.
pub(crate) const BINDING_PREFIX: &str = "kim-admin-";
/// The role bound.
pub(crate) const CLUSTER_ROLE: &str = "cluster-admin";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// Longest sanitised user part of a binding name (the name stays a DNS-1123 label, ≤ 63).
const MAX_USER_PART: usize = 40;

/// FNV-1a (32 bit): a small, stable hash for name suffixes (not for security).
fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The binding name of administrator `user`: `kim-admin-<sanitised user>-<8 hex digits>`.
/// Lower-case letters and digits are kept, every other run of characters becomes one `-`, the
/// user part is cut to 40 characters; the hash of the exact user name keeps names of users
/// that sanitise alike apart. Always a valid DNS-1123 label (≤ 59 characters).
pub fn binding_name(user: &str) -> String {
    let mut part = String::new();
    for c in user.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            part.push(c);
        } else if !part.ends_with('-') && !part.is_empty() {
            part.push('-');
        }
    }
    let mut part: String = part.chars().take(MAX_USER_PART).collect();
    while part.ends_with('-') {
        part.pop();
    }
    let hash = fnv1a(user);
    if part.is_empty() {
        format!("{BINDING_PREFIX}{hash:08x}")
    } else {
        format!("{BINDING_PREFIX}{part}-{hash:08x}")
    }
}

/// The binding for `user`.
pub(crate) fn binding(user: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding_name(user)),
            labels: Some(BTreeMap::from([(
                LABEL_MANAGED_BY.to_string(),
                MANAGED_BY.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_string()),
            kind: "ClusterRole".to_string(),
            name: CLUSTER_ROLE.to_string(),
        },
        subjects: Some(vec![Subject {
            api_group: Some(RBAC_GROUP.to_string()),
            kind: "User".to_string(),
            name: user.to_string(),
            namespace: None,
        }]),
    }
}

fn same_binding(a: &ClusterRoleBinding, b: &ClusterRoleBinding) -> bool {
    a.role_ref == b.role_ref && a.subjects == b.subjects
}

/// What [`sync`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Bindings created (or recreated because they differed).
    pub created: Vec<String>,
    /// Stale bindings deleted.
    pub deleted: Vec<String>,
}

/// Makes the labelled bindings in the cluster of `client` exactly one per user in `users`.
///
/// Errors: a list, create or delete fails; a binding with a wanted name exists without the
/// label (never touched; reported).
pub async fn sync(client: Client, users: &[String]) -> Result<SyncReport, Error> {
    let api: Api<ClusterRoleBinding> = Api::all(client);
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    let existing = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::api("listing ClusterRoleBindings", e))?;
    let mut wanted: BTreeMap<String, ClusterRoleBinding> = BTreeMap::new();
    for user in users {
        let b = binding(user);
        wanted.insert(b.name_any(), b);
    }
    let mut report = SyncReport::default();
    for b in &existing.items {
        let name = b.name_any();
        let keep = wanted.get(&name).is_some_and(|w| same_binding(w, b));
        if !keep {
            // Stale (user removed) or different (roleRef is immutable): delete.
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if error::is_not_found(&e) => {}
                Err(e) => return Err(Error::api(format!("deleting ClusterRoleBinding {name}"), e)),
            }
            if !wanted.contains_key(&name) {
                report.deleted.push(name);
            }
        }
    }
    for (name, b) in &wanted {
        let present = existing
            .items
            .iter()
            .any(|e| e.name_any() == *name && same_binding(b, e));
        if present {
            continue;
        }
        match api.create(&PostParams::default(), b).await {
            Ok(_) => report.created.push(name.clone()),
            Err(e) if error::is_conflict(&e) => {
                let current = api
                    .get(name)
                    .await
                    .map_err(|e| Error::api(format!("reading ClusterRoleBinding {name}"), e))?;
                let labelled =
                    current.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY);
                if !labelled {
                    return Err(Error::RuntimeCluster(format!(
                        "ClusterRoleBinding {name} exists and is not managed by kim (no {LABEL_MANAGED_BY} label); not touching it"
                    )));
                }
                if !same_binding(b, &current) {
                    return Err(Error::RuntimeCluster(format!(
                        "ClusterRoleBinding {name} changed while being replaced; retrying"
                    )));
                }
            }
            Err(e) => return Err(Error::api(format!("creating ClusterRoleBinding {name}"), e)),
        }
    }
    Ok(report)
}

/// The runtime-cluster client of the Runtime `key` from its kubeconfig Secret as step 5 left
/// it: the cached client of that Secret version, else one built from the Secret written in this
/// pass or read now (one GET). A Secret without a usable kubeconfig is marked for renewal.
///
/// Errors: the Secret cannot be read or holds no usable kubeconfig.
async fn client_for(ctx: &Ctx, key: &str, stored: &Stored) -> Result<Client, Error> {
    let fingerprint = super::runtime_clients::fingerprint(stored.head.meta());
    if let Some(c) = ctx.cached_client(key, &fingerprint) {
        return Ok(c);
    }
    let read;
    let secret = match &stored.secret {
        Some(s) => s,
        None => {
            let name = stored.head.name_any();
            read = ctx
                .secrets
                .get(&name)
                .await
                .map_err(|e| Error::api(format!("reading Secret {name}"), e))?;
            &read
        }
    };
    let client = runtime_client(ctx, key, secret).await;
    if matches!(client, Err(Error::RuntimeCluster(_))) {
        ctx.kubeconfig_unusable(key);
    }
    client
}

/// The runtime-cluster client built from the kubeconfig Secret `secret` (cached per runtime in
/// a bounded cache, `super::runtime_clients`, by the Secret's uid and resourceVersion, so a
/// changed kubeconfig gets a new client). Error messages never contain the kubeconfig.
///
/// Errors: the Secret holds no usable kubeconfig.
pub async fn runtime_client(ctx: &Ctx, key: &str, secret: &Secret) -> Result<Client, Error> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(SECRET_KEY))
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| Error::RuntimeCluster(format!("Secret {name} has no key {SECRET_KEY:?}")))?;
    let fingerprint = super::runtime_clients::fingerprint(&secret.metadata);
    if let Some(c) = ctx.cached_client(key, &fingerprint) {
        return Ok(c);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| {
        Error::RuntimeCluster(format!("Secret {name}: the kubeconfig is not UTF-8"))
    })?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text).map_err(|_| {
        Error::RuntimeCluster(format!("Secret {name}: the kubeconfig cannot be parsed"))
    })?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|_| {
            Error::RuntimeCluster(format!("Secret {name}: the kubeconfig cannot be loaded"))
        })?;
    // Every request has a deadline counted from when it is sent (see [`super::deadline`]).
    let timeout = ctx.settings.runtime_timeout;
    if !timeout.is_zero() {
        config.connect_timeout = Some(timeout);
    }
    let client = super::deadline::build(config, timeout)
        .map_err(|e| Error::RuntimeCluster(format!("Secret {name}: cannot build a client: {e}")))?;
    ctx.cache_client(key, &fingerprint, client.clone());
    Ok(client)
}

/// Step 6: bind the administrators, then `Ready`, `Configured=True/AdministratorsConfigured`,
/// `provisioningCompleted: true`. The runtime cluster is not asked when its bindings are in sync
/// for the Runtime's generation ([`Ctx::admins_in_sync`]): a reconcile of a `Ready` Runtime
/// sends nothing to its cluster until the next resync.
///
/// Errors: the runtime cluster cannot be reached or the bindings cannot be applied (after
/// setting `Pending`, `Configured=False/ConfigurationError`, unless [`Pass::reports`] holds a
/// transient error of a `Ready` Runtime back).
pub(crate) async fn run(pass: &mut Pass<'_>, stored: &Stored) -> Result<(), Error> {
    let ctx = pass.ctx;
    let key = pass.key();
    let generation = pass.rt.metadata.generation;
    let configured = condition(pass.rt.status.as_ref(), CONFIGURED).is_some_and(|c| {
        c.status == CondStatus::True.as_str() && c.observed_generation == generation
    });
    // A kubeconfig written in this pass may be for a new cluster (a Shoot created again):
    // its bindings are synced whatever the memory says.
    if stored.secret.is_none() && ctx.admins_in_sync(&key, generation, configured) {
        pass.set(ready());
        return Ok(());
    }
    let mut users: Vec<String> = Vec::new();
    for u in &pass.rt.spec.security.administrators {
        if !u.is_empty() && !users.contains(u) {
            users.push(u.clone());
        }
    }
    let result = match client_for(ctx, &key, stored).await {
        Ok(client) => sync(client, &users).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(report) => {
            if !report.created.is_empty() || !report.deleted.is_empty() {
                tracing::info!(runtime = %key, created = ?report.created, deleted = ?report.deleted, "administrators' bindings updated");
            }
            ctx.admins_synced(&key, generation);
            pass.set(ready());
            Ok(())
        }
        Err(e) => {
            let condition = Cond::new(CONFIGURED, CondStatus::False, CONFIGURATION_ERROR)
                .with_message(e.to_string());
            pass.fail(e, State::Pending, condition)
        }
    }
}

/// `Ready`, `Configured=True/AdministratorsConfigured`, `provisioningCompleted: true`.
fn ready() -> Update {
    Update::new(
        State::Ready,
        vec![Cond::new(
            CONFIGURED,
            CondStatus::True,
            ADMINISTRATORS_CONFIGURED,
        )],
    )
    .completed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_names_are_stable_dns_labels() {
        let a = binding_name("admin@myorg.com");
        assert_eq!(a, binding_name("admin@myorg.com"));
        assert!(a.starts_with("kim-admin-admin-myorg-com-"), "{a}");
        assert_ne!(a, binding_name("admin.myorg@com"), "hash keeps them apart");
        for user in [
            "admin@myorg.com",
            "Ädmin@X.org",
            "@@@",
            "",
            &"very-long-user-name.".repeat(10),
            "UPPER_case+tag@example.COM",
        ] {
            let n = binding_name(user);
            assert!(n.len() <= 63, "{n}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{n}"
            );
            assert!(!n.ends_with('-') && !n.contains("--"), "{n}");
        }
    }
}
