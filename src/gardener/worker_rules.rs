//! Rules KIM applies to every worker pool after the pools are assembled
//! (`pkg/gardener/shoot/extender/workers/**` and `extender/gvisor_net_raw.go`): the kubelet
//! `maxPods` caps, the machine-controller-manager defaults and gVisor's `net-raw` flag. All
//! functions are pure and change the pools in place.

use super::convert::ConversionError;
use super::duration::format_go_duration;
use crate::api::{MachineControllerManagerSettings, OpenObject, Worker};
use ipnet::IpNet;
use serde_json::Value;

/// Highest kubelet `maxPods` of any node: the usable addresses of a `/24` pod range, which
/// is what Gardener gives each node (as KIM's `ApplyPerNodeMaxPodsCap`).
pub(crate) const MAX_PODS_PER_NODE: i64 = 254;
/// Type of the gVisor container runtime.
pub(crate) const GVISOR_RUNTIME_TYPE: &str = "gvisor";
/// API version of the gVisor extension's `GVisorConfiguration`.
pub(crate) const GVISOR_CONFIG_API_VERSION: &str =
    "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1";
/// gVisor flag that lets containers open raw sockets (Istio's sidecars need it).
pub(crate) const GVISOR_NET_RAW_FLAG: &str = "net-raw";

/// Usable IPv4 addresses of the pod range `cidr`, as KIM's `MaxPodsFromCIDR` counts them:
/// `/32` → 1, `/31` → 2, otherwise `2^(32-p) - 2` (network and broadcast reserved), capped at
/// `i32::MAX`. Host bits may be set (the prefix length alone counts).
///
/// Errors (the reason, for `spec.shoot.networking.pods`): unparsable, IPv6, or a prefix
/// shorter than `/2`.
pub(crate) fn usable_pod_addresses(cidr: &str) -> Result<i64, String> {
    let net: IpNet = cidr.trim().parse().map_err(|_| {
        format!("{cidr:?} is not a CIDR (a.b.c.d/n) to derive the pod capacity from")
    })?;
    let IpNet::V4(v4) = net else {
        return Err(format!(
            "{cidr:?}: the maxPods calculation supports IPv4 pod ranges only"
        ));
    };
    Ok(match v4.prefix_len() {
        p if p < 2 => {
            return Err(format!(
                "{cidr:?}: the prefix length must be between /2 and /32 for the maxPods calculation"
            ));
        }
        32 => 1,
        31 => 2,
        p => ((1_i64 << (32 - u32::from(p))) - 2).min(i64::from(i32::MAX)),
    })
}

/// The kubelet `maxPods` of a pool, if it sets one. Errors when it is not an integer in the
/// `int32` range (KIM could not even read such a Runtime).
fn max_pods(worker: &Worker, field: &str) -> Result<Option<i64>, ConversionError> {
    let Some(value) = worker
        .kubernetes
        .as_ref()
        .and_then(|k| k.kubelet.as_ref())
        .and_then(|k| k.get("maxPods"))
    else {
        return Ok(None);
    };
    value
        .as_i64()
        .filter(|v| i32::try_from(*v).is_ok())
        .map(Some)
        .ok_or_else(|| ConversionError::InvalidField {
            field: format!("{field}.kubernetes.kubelet.maxPods"),
            reason: format!("{value} is not a 32-bit integer"),
        })
}

fn set_max_pods(worker: &mut Worker, value: i64) {
    if let Some(kubelet) = worker.kubernetes.as_mut().and_then(|k| k.kubelet.as_mut()) {
        kubelet.insert("maxPods".into(), Value::from(value));
    }
}

/// Caps the pools' kubelet `maxPods` as KIM's provider extender does: first each pool at
/// [`MAX_PODS_PER_NODE`]; then, when the pools' sum exceeds what the pod range `pods_cidr`
/// holds ([`usable_pod_addresses`]), lowers them starting from the last pool (never below 1)
/// until it fits. Pools without `maxPods` are left alone; an empty `pods_cidr` skips the
/// second cap.
///
/// Errors: `spec.shoot.networking.pods` unusable (see [`usable_pod_addresses`]); a
/// `maxPods` that is not an `int32`; more pools with `maxPods` than the range has addresses.
pub(crate) fn cap_max_pods(workers: &mut [Worker], pods_cidr: &str) -> Result<(), ConversionError> {
    let mut declared = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        let field = format!("spec.shoot.provider.workers[name={:?}]", w.name);
        if let Some(v) = max_pods(w, &field)? {
            let capped = v.min(MAX_PODS_PER_NODE);
            if capped != v {
                set_max_pods(w, capped);
            }
            declared.push((i, capped));
        }
    }
    if pods_cidr.is_empty() {
        return Ok(());
    }
    let total =
        usable_pod_addresses(pods_cidr).map_err(|reason| ConversionError::InvalidField {
            field: "spec.shoot.networking.pods".into(),
            reason,
        })?;
    let sum: i64 = declared.iter().map(|(_, v)| v).sum();
    let mut excess = sum - total;
    for (i, v) in declared.iter().rev() {
        if excess <= 0 {
            break;
        }
        if *v <= 1 {
            continue;
        }
        let reduction = excess.min(v - 1);
        set_max_pods(&mut workers[*i], v - reduction);
        excess -= reduction;
    }
    if excess > 0 {
        return Err(ConversionError::InvalidField {
            field: "spec.shoot.provider.workers".into(),
            reason: format!(
                "{} pools set maxPods (at least 1 each) but the pod range {pods_cidr} has only {total} addresses",
                declared.len()
            ),
        });
    }
    Ok(())
}

/// Fills each pool's `machineControllerManager` settings where the Runtime leaves them
/// unset: `machineDrainTimeout` (`drain_timeout_seconds`, written as Go writes durations,
/// e.g. `15m0s`) and `maxEvictRetries` (as KIM's `ApplyMachineControllerManagerConfig`).
pub(crate) fn set_machine_controller_manager_defaults(
    workers: &mut [Worker],
    drain_timeout_seconds: u64,
    max_evict_retries: i32,
) {
    for w in workers.iter_mut() {
        let settings = w
            .machine_controller_manager
            .get_or_insert_with(MachineControllerManagerSettings::default);
        settings.max_evict_retries.get_or_insert(max_evict_retries);
        settings
            .machine_drain_timeout
            .get_or_insert_with(|| format_go_duration(drain_timeout_seconds));
    }
}

/// Sets gVisor's `net-raw` flag to `"true"` on every gVisor container runtime whose
/// configuration does not set it (Istio needs raw sockets), as KIM's
/// `ExtendWithGVisorNetRawDefault`: no configuration or one without `configFlags` → a
/// `GVisorConfiguration` with `configFlags: {net-raw: "true"}` (plus the flags already
/// there); a configuration with flags keeps its `apiVersion`/`kind` and flags and gains the
/// missing one. Like KIM, which decodes into the typed configuration, only `apiVersion`,
/// `kind` and `configFlags` are kept.
///
/// Errors: a `configFlags` that is not a map of strings.
pub(crate) fn set_gvisor_net_raw(workers: &mut [Worker]) -> Result<(), ConversionError> {
    for w in workers.iter_mut() {
        let name = w.name.clone();
        let runtimes = w.cri.as_mut().and_then(|c| c.container_runtimes.as_mut());
        for (j, rt) in runtimes.into_iter().flatten().enumerate() {
            if rt.type_ != GVISOR_RUNTIME_TYPE {
                continue;
            }
            let field = format!(
                "spec.shoot.provider.workers[name={name:?}].cri.containerRuntimes[{j}].providerConfig"
            );
            rt.provider_config = Some(gvisor_config_with_net_raw(
                rt.provider_config.as_ref(),
                &field,
            )?);
        }
    }
    Ok(())
}

fn gvisor_config_with_net_raw(
    given: Option<&OpenObject>,
    field: &str,
) -> Result<OpenObject, ConversionError> {
    let flags = given
        .and_then(|c| c.get("configFlags"))
        .filter(|f| !f.is_null());
    let mut out = OpenObject::new();
    let Some(flags) = flags else {
        out.insert("apiVersion".into(), GVISOR_CONFIG_API_VERSION.into());
        out.insert("kind".into(), "GVisorConfiguration".into());
        out.insert(
            "configFlags".into(),
            serde_json::json!({GVISOR_NET_RAW_FLAG: "true"}),
        );
        return Ok(out);
    };
    let Some(flags) = flags
        .as_object()
        .filter(|m| m.values().all(Value::is_string))
    else {
        return Err(ConversionError::InvalidField {
            field: format!("{field}.configFlags"),
            reason: "must be a map of strings".into(),
        });
    };
    for key in ["apiVersion", "kind"] {
        if let Some(v) = given
            .and_then(|c| c.get(key))
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        {
            out.insert(key.into(), v.clone());
        }
    }
    let mut flags = flags.clone();
    flags
        .entry(GVISOR_NET_RAW_FLAG)
        .or_insert_with(|| Value::from("true"));
    out.insert("configFlags".into(), Value::Object(flags));
    Ok(out)
}
