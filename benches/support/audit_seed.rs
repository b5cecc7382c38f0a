//! The Runtimes `benches/apiserver.rs` seeds for `kim audit` (its `audit` part): the specs of
//! the six sample manifests of `samples/runtimes` in turn, 90 % in `kcp-system` and 10 % in
//! `kyma-dev`. Statuses, of every 100: 60 clean `Ready` (as kim writes it); 10 the `pending` and
//! 5 the `failed` example of `samples/seed/status-examples.yaml` (clean); 5 its `ready` example
//! (`Ready` with `Provisioned` only, as in June 2024: two `ready-requires`); 10 `Ready` in KIM's
//! 2024-10 vocabulary (retired `AuditlogConfigured`, `OidcConfigured`); 3 an unknown reason; 3
//! `Failed` without a `False` condition; 2 `conditions` not a list; 2 an unknown state.

use anyhow::Context;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// The sample manifests (specs), sorted by file name.
pub fn sample_specs() -> anyhow::Result<Vec<Value>> {
    let dir = samples_dir().join("runtimes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| dir.display().to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)?;
            serde_saphyr::from_str::<Value>(&text).with_context(|| p.display().to_string())
        })
        .collect()
}

/// The `pending`, `ready` and `failed` statuses of the seed examples.
pub fn seed_statuses() -> anyhow::Result<[Value; 3]> {
    let path = samples_dir().join("seed/status-examples.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).context("status-examples.yaml")?;
    let get = |name: &str| -> anyhow::Result<Value> {
        docs.iter()
            .find(|d| d["name"] == name)
            .map(|d| d["status"].clone())
            .with_context(|| format!("status example {name}"))
    };
    Ok([get("pending")?, get("ready")?, get("failed")?])
}

fn cond(t: &str, s: &str, r: &str, msg: &str) -> Value {
    json!({"type": t, "status": s, "reason": r, "message": msg,
           "lastTransitionTime": "2026-11-02T10:00:00Z", "observedGeneration": 1})
}

/// Runtime `i`: its object and whether its status breaks a per-object rule.
pub fn runtime(i: usize, specs: &[Value], seed: &[Value; 3]) -> (Value, bool) {
    let mut obj = specs[i % specs.len()].clone();
    let name = format!("rt-{i:05}");
    obj["metadata"]["name"] = json!(name);
    obj["metadata"]["namespace"] = json!(if i % 10 == 9 {
        "kyma-dev"
    } else {
        "kcp-system"
    });
    let ready = || {
        vec![
            cond(
                "Provisioned",
                "True",
                "ShootCreationCompleted",
                "Gardener finished creating the Shoot",
            ),
            cond(
                "KubeconfigReady",
                "True",
                "KubeconfigCreated",
                "Kubeconfig Secret written",
            ),
            cond(
                "Configured",
                "True",
                "AdministratorsConfigured",
                "Administrators configured",
            ),
        ]
    };
    let (status, broken) = match i % 100 {
        0..60 => (
            json!({"state": "Ready", "provisioningCompleted": true, "conditions": ready()}),
            false,
        ),
        60..70 => (seed[0].clone(), false),
        70..75 => (seed[2].clone(), false),
        75..80 => (seed[1].clone(), true),
        80..90 => (
            json!({"state": "Ready", "provisioningCompleted": true, "conditions": [
                cond("Provisioned", "True", "ShootCreationCompleted", "Shoot created"),
                cond("KubeconfigReady", "True", "GardenerClusterCRReady", "Kubeconfig ready"),
                cond("AuditlogConfigured", "True", "AuditLogConfigured", "Audit log configured"),
                cond("OidcConfigured", "True", "OidcConfigured", "OIDC configured"),
                cond("Configured", "True", "ConfigurationCompleted", "Configured"),
            ]}),
            true,
        ),
        90..93 => (
            json!({"state": "Pending", "conditions": [
                cond("Provisioned", "Unknown", "ShootCreating", "Shoot creation in progress")
            ]}),
            true,
        ),
        93..96 => (
            json!({"state": "Failed", "conditions": [
                cond("Provisioned", "Unknown", "Pending", "Shoot creation in progress")
            ]}),
            true,
        ),
        96..98 => (
            json!({"state": "Pending", "conditions":
                cond("Provisioned", "Unknown", "Pending", "Shoot creation in progress")}),
            true,
        ),
        _ => (
            json!({"state": "Provisioning", "conditions": ready()}),
            true,
        ),
    };
    obj["status"] = status;
    (obj, broken)
}
