//! Provider-specific `infrastructureConfig` and `controlPlaneConfig` objects in the formats of
//! Gardener's provider extensions, derived from the node CIDR and the workers' zones exactly as
//! upstream KIM does (`pkg/gardener/shoot/hyperscaler/{aws,azure,gcp,openstack}`):
//!
//! | provider | infrastructureConfig | controlPlaneConfig |
//! |---|---|---|
//! | aws (`aws.provider.extensions.gardener.cloud/v1alpha1`) | `networks.vpc.cidr` = nodes; `networks.zones[]` = `{name, workers, public, internal}` cut by [`aws_zone_subnets`] | `{}` |
//! | azure (`azure.provider.extensions.gardener.cloud/v1alpha1`) | `networks.vnet.cidr` = nodes; `networks.zones[]` = `{name: <int>, cidr, natGateway: {enabled: true, idleConnectionTimeoutMinutes: 4}}` cut by [`azure_zone_subnets`]; `zoned: true` | `{}` |
//! | gcp (`gcp.provider.extensions.gardener.cloud/v1alpha1`) | `networks.workers` = nodes (and the deprecated `networks.worker`, as KIM sets both) | `zone` = the first zone |
//! | openstack (`openstack.provider.extensions.gardener.cloud/v1alpha1`) | `floatingPoolName` (configured), `networks.workers` = nodes (and the deprecated `networks.worker` empty, as KIM writes it) | `loadBalancerProvider` (configured) |
//!
//! Zones are the distinct zones of all workers in order of first appearance (main worker
//! first). All CIDR math is IPv4 (upstream's bit arithmetic assumes 32-bit addresses).

use crate::api::OpenObject;
use ipnet::Ipv4Net;
use serde_json::{Value, json};
use std::net::Ipv4Addr;

/// Provider types kim converts (`spec.shoot.provider.type`).
pub(crate) const SUPPORTED_PROVIDERS: [&str; 4] = ["aws", "azure", "gcp", "openstack"];

/// API version of the AWS provider extension's configs.
pub(crate) const AWS_API_VERSION: &str = "aws.provider.extensions.gardener.cloud/v1alpha1";
/// API version of the Azure provider extension's configs.
pub(crate) const AZURE_API_VERSION: &str = "azure.provider.extensions.gardener.cloud/v1alpha1";
/// API version of the GCP provider extension's configs.
pub(crate) const GCP_API_VERSION: &str = "gcp.provider.extensions.gardener.cloud/v1alpha1";
/// API version of the OpenStack provider extension's configs.
pub(crate) const OPENSTACK_API_VERSION: &str =
    "openstack.provider.extensions.gardener.cloud/v1alpha1";
/// Idle timeout of the Azure per-zone NAT gateways (upstream `defaultConnectionTimeOutMinutes`).
pub(crate) const AZURE_NAT_IDLE_TIMEOUT_MINUTES: i64 = 4;
/// Most zones a provider config may list (upstream `maxNumberOfZones`).
pub(crate) const MAX_ZONES: usize = 8;

/// The three subnets of one AWS availability zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AwsZoneSubnets {
    /// Zone name, e.g. `eu-central-1a`.
    pub name: String,
    /// Subnet of the worker machines.
    pub workers: Ipv4Net,
    /// Public subnet (load balancers, NAT gateway, bastion).
    pub public: Ipv4Net,
    /// Internal subnet (internal load balancers).
    pub internal: Ipv4Net,
}

/// The subnet of one Azure zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AzureZoneSubnet {
    /// Zone number 1–8.
    pub name: u8,
    /// Subnet of the zone.
    pub cidr: Ipv4Net,
}

/// Why subnets could not be cut from the node CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubnetError {
    /// The node CIDR does not parse as an IPv4 `a.b.c.d/n`.
    #[error("{cidr:?} is not an IPv4 CIDR (a.b.c.d/n)")]
    Unparsable {
        /// The given CIDR.
        cidr: String,
    },
    /// The address has bits set beyond the prefix.
    #[error("{cidr:?} has host bits set; did you mean {network}?")]
    NotCanonical {
        /// The given CIDR.
        cidr: String,
        /// The network it truncates to.
        network: Ipv4Net,
    },
    /// AWS needs a prefix between /16 and /24: a longer prefix cuts zone subnets below
    /// AWS's smallest subnet (/28), a shorter one asks for a VPC above AWS's largest (/16).
    #[error(
        "{cidr:?}: aws needs a prefix length between /16 and /24 (a longer prefix gives zone subnets below AWS's /28 minimum, a shorter one a VPC above AWS's /16 maximum)"
    )]
    AwsPrefix {
        /// The given CIDR.
        cidr: String,
    },
    /// Azure needs a prefix between /16 and /24.
    #[error("{cidr:?}: azure needs a prefix length between /16 and /24")]
    AzurePrefix {
        /// The given CIDR.
        cidr: String,
    },
    /// Zero or more than [`MAX_ZONES`] zones.
    #[error("{count} zone(s) given; between 1 and 8 are supported")]
    ZoneCount {
        /// Number of zones.
        count: usize,
    },
    /// A zone appears twice.
    #[error("zone {0:?} is listed twice")]
    DuplicateZone(String),
    /// An Azure zone that is not a number 1–8.
    #[error("azure zone {0:?} is not a zone number 1-8")]
    AzureZoneName(String),
}

impl SubnetError {
    /// True when the error is about the zones rather than the node CIDR.
    pub(crate) fn is_zone_error(&self) -> bool {
        matches!(
            self,
            SubnetError::ZoneCount { .. }
                | SubnetError::DuplicateZone(_)
                | SubnetError::AzureZoneName(_)
        )
    }
}

/// Parses a canonical IPv4 CIDR (host bits must be zero).
pub(crate) fn parse_ipv4_cidr(cidr: &str) -> Result<Ipv4Net, SubnetError> {
    let net: Ipv4Net = cidr.trim().parse().map_err(|_| SubnetError::Unparsable {
        cidr: cidr.to_string(),
    })?;
    if net.addr() != net.network() {
        return Err(SubnetError::NotCanonical {
            cidr: cidr.to_string(),
            network: net.trunc(),
        });
    }
    Ok(net)
}

fn check_zones(zones: &[String]) -> Result<(), SubnetError> {
    if zones.is_empty() || zones.len() > MAX_ZONES {
        return Err(SubnetError::ZoneCount { count: zones.len() });
    }
    for (i, z) in zones.iter().enumerate() {
        if zones[..i].contains(z) {
            return Err(SubnetError::DuplicateZone(z.clone()));
        }
    }
    Ok(())
}

fn net(base: u64, prefix: u8) -> Ipv4Net {
    // `base` stays inside the node range, which is a valid IPv4 range, and `prefix` ≤ 32 is
    // checked by the callers.
    Ipv4Net::new(Ipv4Addr::from(base as u32), prefix).expect("prefix length checked")
}

/// AWS zone subnets as upstream KIM's `generateAWSZones` cuts them from the node CIDR `/p`:
/// the first three zones get workers `/(p+3)`, public `/(p+4)` and internal `/(p+4)`, laid out
/// back to back (each zone uses a quarter of the range); zones four to eight get three
/// `/(p+6)` subnets each, after the first three zones. For `10.250.0.0/16` the first zone is
/// workers `10.250.0.0/19`, public `10.250.32.0/20`, internal `10.250.48.0/20`, the fourth
/// `10.250.192.0/22`, `10.250.196.0/22`, `10.250.200.0/22`.
///
/// Errors: unparsable or non-canonical CIDR, 0 or more than 8 zones, a duplicate zone, a
/// prefix outside /16–/24 (as KIM's `generateAWSZones`).
pub(crate) fn aws_zone_subnets(
    nodes_cidr: &str,
    zones: &[String],
) -> Result<Vec<AwsZoneSubnets>, SubnetError> {
    let nodes = parse_ipv4_cidr(nodes_cidr)?;
    check_zones(zones)?;
    if !(16..=24).contains(&nodes.prefix_len()) {
        return Err(SubnetError::AwsPrefix {
            cidr: nodes_cidr.to_string(),
        });
    }
    let worker_prefix = nodes.prefix_len() + 3;
    let small_prefix = worker_prefix + 3;
    // delta: size of a /(p+4) — the public and internal subnets of the first three zones.
    let delta: u64 = 1 << (31 - u32::from(worker_prefix));
    let small_delta = delta >> 2;
    let mut base = u64::from(u32::from(nodes.network()));
    let mut out = Vec::with_capacity(zones.len());
    for (i, name) in zones.iter().enumerate() {
        // First three zones: workers /(p+3) (two steps), public and internal /(p+4).
        // Further zones: three /(p+6), one small step each.
        let (step, worker_steps, [w, p, n]) = if i < 3 {
            (
                delta,
                2,
                [worker_prefix, worker_prefix + 1, worker_prefix + 1],
            )
        } else {
            (small_delta, 1, [small_prefix; 3])
        };
        let workers = net(base, w);
        base += worker_steps * step;
        let public = net(base, p);
        base += step;
        let internal = net(base, n);
        base += step;
        out.push(AwsZoneSubnets {
            name: name.clone(),
            workers,
            public,
            internal,
        });
    }
    Ok(out)
}

/// Azure zone subnets as upstream KIM's `generateAzureZones` cuts them: the node CIDR `/p`
/// (16 ≤ p ≤ 24) is split into `/(p+3)` blocks handed to the zones in the order given, e.g.
/// `10.250.0.0/22` → zone 1 `10.250.0.0/25`, zone 2 `10.250.0.128/25`, zone 3 `10.250.1.0/25`.
///
/// Errors: unparsable or non-canonical CIDR, prefix outside 16–24, 0 or more than 8 zones, a
/// duplicate zone, a zone name that is not a number 1–8 (upstream silently drops those).
pub(crate) fn azure_zone_subnets(
    nodes_cidr: &str,
    zones: &[String],
) -> Result<Vec<AzureZoneSubnet>, SubnetError> {
    let nodes = parse_ipv4_cidr(nodes_cidr)?;
    check_zones(zones)?;
    if !(16..=24).contains(&nodes.prefix_len()) {
        return Err(SubnetError::AzurePrefix {
            cidr: nodes_cidr.to_string(),
        });
    }
    let prefix = nodes.prefix_len() + 3;
    let delta: u64 = 1 << (32 - u32::from(prefix));
    let start = u64::from(u32::from(nodes.network()));
    zones
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let name = z
                .parse::<u8>()
                .ok()
                .filter(|n| (1..=8).contains(n))
                .ok_or_else(|| SubnetError::AzureZoneName(z.clone()))?;
            Ok(AzureZoneSubnet {
                name,
                cidr: net(start + i as u64 * delta, prefix),
            })
        })
        .collect()
}

fn object(v: Value) -> OpenObject {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! object literal"),
    }
}

/// AWS `InfrastructureConfig` for the node CIDR and zones.
pub(crate) fn aws_infrastructure_config(
    nodes_cidr: &str,
    zones: &[String],
) -> Result<OpenObject, SubnetError> {
    let zones: Vec<Value> = aws_zone_subnets(nodes_cidr, zones)?
        .into_iter()
        .map(|z| {
            json!({
                "name": z.name,
                "workers": z.workers.to_string(),
                "public": z.public.to_string(),
                "internal": z.internal.to_string(),
            })
        })
        .collect();
    Ok(object(json!({
        "apiVersion": AWS_API_VERSION,
        "kind": "InfrastructureConfig",
        "networks": {"vpc": {"cidr": nodes_cidr}, "zones": zones},
    })))
}

/// AWS `ControlPlaneConfig` (empty apart from the type).
pub(crate) fn aws_control_plane_config() -> OpenObject {
    object(json!({"apiVersion": AWS_API_VERSION, "kind": "ControlPlaneConfig"}))
}

/// AWS `WorkerConfig` requiring IMDSv2 (`httpTokens: required`, hop limit 2), upstream
/// `NewWorkerConfig`.
pub(crate) fn aws_imdsv2_worker_config() -> OpenObject {
    object(json!({
        "apiVersion": AWS_API_VERSION,
        "kind": "WorkerConfig",
        "instanceMetadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
    }))
}

/// Azure `InfrastructureConfig` for the node CIDR and zones (`zoned: true`).
pub(crate) fn azure_infrastructure_config(
    nodes_cidr: &str,
    zones: &[String],
) -> Result<OpenObject, SubnetError> {
    let zones: Vec<Value> = azure_zone_subnets(nodes_cidr, zones)?
        .into_iter()
        .map(|z| {
            json!({
                "name": z.name,
                "cidr": z.cidr.to_string(),
                "natGateway": {
                    "enabled": true,
                    "idleConnectionTimeoutMinutes": AZURE_NAT_IDLE_TIMEOUT_MINUTES,
                },
            })
        })
        .collect();
    Ok(object(json!({
        "apiVersion": AZURE_API_VERSION,
        "kind": "InfrastructureConfig",
        "networks": {"vnet": {"cidr": nodes_cidr}, "zones": zones},
        "zoned": true,
    })))
}

/// Azure `ControlPlaneConfig` (empty apart from the type).
pub(crate) fn azure_control_plane_config() -> OpenObject {
    object(json!({"apiVersion": AZURE_API_VERSION, "kind": "ControlPlaneConfig"}))
}

/// GCP `InfrastructureConfig`: `networks.workers` (and the deprecated `networks.worker`) =
/// the node CIDR.
pub(crate) fn gcp_infrastructure_config(nodes_cidr: &str) -> Result<OpenObject, SubnetError> {
    parse_ipv4_cidr(nodes_cidr)?;
    Ok(object(json!({
        "apiVersion": GCP_API_VERSION,
        "kind": "InfrastructureConfig",
        "networks": {"worker": nodes_cidr, "workers": nodes_cidr},
    })))
}

/// GCP `ControlPlaneConfig` with `zone` = the first zone.
pub(crate) fn gcp_control_plane_config(zones: &[String]) -> Result<OpenObject, SubnetError> {
    check_zones(zones)?;
    Ok(object(json!({
        "apiVersion": GCP_API_VERSION,
        "kind": "ControlPlaneConfig",
        "zone": zones[0],
    })))
}

/// OpenStack `InfrastructureConfig`: the floating pool, `networks.workers` = node CIDR and
/// the deprecated `networks.worker` empty, as KIM writes it (the extension's type has no
/// `omitempty` on it).
pub(crate) fn openstack_infrastructure_config(
    nodes_cidr: &str,
    floating_pool_name: &str,
) -> Result<OpenObject, SubnetError> {
    parse_ipv4_cidr(nodes_cidr)?;
    Ok(object(json!({
        "apiVersion": OPENSTACK_API_VERSION,
        "kind": "InfrastructureConfig",
        "floatingPoolName": floating_pool_name,
        "networks": {"worker": "", "workers": nodes_cidr},
    })))
}

/// OpenStack `ControlPlaneConfig` with the load balancer provider.
pub(crate) fn openstack_control_plane_config(load_balancer_provider: &str) -> OpenObject {
    object(json!({
        "apiVersion": OPENSTACK_API_VERSION,
        "kind": "ControlPlaneConfig",
        "loadBalancerProvider": load_balancer_provider,
    }))
}

/// For an update that adds zones: the existing `InfrastructureConfig` (everything in it kept,
/// e.g. a VPC ID or elastic IPs) with the `networks.zones` entries of `generated` whose
/// `name` is not yet there appended. `generated` must have been computed from the existing
/// zones followed by the new ones, so the new zones get the next free subnets.
pub(crate) fn append_new_zones(existing: &OpenObject, generated: &OpenObject) -> OpenObject {
    let mut merged = existing.clone();
    let new_zones = generated
        .get("networks")
        .and_then(|n| n.get("zones"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let networks = merged
        .entry("networks")
        .or_insert_with(|| Value::Object(OpenObject::new()));
    if let Value::Object(networks) = networks {
        let zones = networks
            .entry("zones")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(zones) = zones {
            for z in new_zones {
                let name = z.get("name");
                if !zones.iter().any(|e| e.get("name") == name) {
                    zones.push(z);
                }
            }
        }
    }
    merged
}

/// Number of zones listed in an `InfrastructureConfig`'s `networks.zones` (0 when absent).
pub(crate) fn infrastructure_zone_count(config: &OpenObject) -> usize {
    config
        .get("networks")
        .and_then(|n| n.get("zones"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn triple(z: &AwsZoneSubnets) -> [String; 3] {
        [
            z.workers.to_string(),
            z.public.to_string(),
            z.internal.to_string(),
        ]
    }

    /// Upstream `zones_test.go`: eight zones in 10.250.0.0/16.
    #[test]
    fn aws_eight_zones_match_upstream() {
        let names = zones(&["a", "b", "c", "d", "e", "f", "g", "h"]);
        let got = aws_zone_subnets("10.250.0.0/16", &names).unwrap();
        let expected = [
            ["10.250.0.0/19", "10.250.32.0/20", "10.250.48.0/20"],
            ["10.250.64.0/19", "10.250.96.0/20", "10.250.112.0/20"],
            ["10.250.128.0/19", "10.250.160.0/20", "10.250.176.0/20"],
            ["10.250.192.0/22", "10.250.196.0/22", "10.250.200.0/22"],
            ["10.250.204.0/22", "10.250.208.0/22", "10.250.212.0/22"],
            ["10.250.216.0/22", "10.250.220.0/22", "10.250.224.0/22"],
            ["10.250.228.0/22", "10.250.232.0/22", "10.250.236.0/22"],
            ["10.250.240.0/22", "10.250.244.0/22", "10.250.248.0/22"],
        ];
        assert_eq!(got.len(), 8);
        for (z, e) in got.iter().zip(expected) {
            assert_eq!(triple(z), e.map(String::from), "zone {}", z.name);
        }
    }

    /// Upstream: three zones in 10.180.0.0/23.
    #[test]
    fn aws_small_range_matches_upstream() {
        let got = aws_zone_subnets("10.180.0.0/23", &zones(&["a", "b", "c"])).unwrap();
        let expected = [
            ["10.180.0.0/26", "10.180.0.64/27", "10.180.0.96/27"],
            ["10.180.0.128/26", "10.180.0.192/27", "10.180.0.224/27"],
            ["10.180.1.0/26", "10.180.1.64/27", "10.180.1.96/27"],
        ];
        for (z, e) in got.iter().zip(expected) {
            assert_eq!(triple(z), e.map(String::from));
        }
    }

    #[test]
    fn aws_subnets_stay_inside_and_do_not_overlap() {
        for prefix in 16..=24u8 {
            let cidr = format!("10.0.0.0/{prefix}");
            let names: Vec<String> = (0..8).map(|i| format!("z{i}")).collect();
            let nodes: Ipv4Net = cidr.parse().unwrap();
            let got = aws_zone_subnets(&cidr, &names).unwrap();
            let all: Vec<Ipv4Net> = got
                .iter()
                .flat_map(|z| [z.workers, z.public, z.internal])
                .collect();
            for (i, a) in all.iter().enumerate() {
                assert!(nodes.contains(a), "{a} outside {cidr}");
                for b in &all[i + 1..] {
                    assert!(
                        !a.contains(b) && !b.contains(a),
                        "{a} overlaps {b} in {cidr}"
                    );
                }
            }
        }
    }

    #[test]
    fn aws_errors() {
        let one = zones(&["a"]);
        assert!(matches!(
            aws_zone_subnets("888.888.888.0/77", &one),
            Err(SubnetError::Unparsable { .. })
        ));
        assert!(matches!(
            aws_zone_subnets("10.250.1.0/16", &one),
            Err(SubnetError::NotCanonical { .. })
        ));
        for bad in [
            "10.250.0.0/25",
            "10.250.0.0/28",
            "10.240.0.0/12",
            "10.0.0.0/15",
        ] {
            assert!(
                matches!(
                    aws_zone_subnets(bad, &one),
                    Err(SubnetError::AwsPrefix { .. })
                ),
                "{bad}"
            );
        }
        assert!(aws_zone_subnets("10.250.0.0/24", &one).is_ok());
        assert!(aws_zone_subnets("10.0.0.0/16", &one).is_ok());
        assert!(matches!(
            aws_zone_subnets("10.250.0.0/16", &[]),
            Err(SubnetError::ZoneCount { count: 0 })
        ));
        let nine: Vec<String> = (0..9).map(|i| i.to_string()).collect();
        assert!(matches!(
            aws_zone_subnets("10.250.0.0/16", &nine),
            Err(SubnetError::ZoneCount { count: 9 })
        ));
        assert!(matches!(
            aws_zone_subnets("10.250.0.0/16", &zones(&["a", "a"])),
            Err(SubnetError::DuplicateZone(_))
        ));
        assert!(matches!(
            aws_zone_subnets("fd00::/64", &one),
            Err(SubnetError::Unparsable { .. })
        ));
    }

    /// Upstream `zones_test.go` / `config_test.go` for Azure.
    #[test]
    fn azure_zones_match_upstream() {
        let got = azure_zone_subnets("10.250.0.0/22", &zones(&["1", "2", "3"])).unwrap();
        let cidrs: Vec<String> = got.iter().map(|z| z.cidr.to_string()).collect();
        assert_eq!(cidrs, ["10.250.0.0/25", "10.250.0.128/25", "10.250.1.0/25"]);
        let got = azure_zone_subnets("10.250.0.0/16", &zones(&["3", "2", "1"])).unwrap();
        let pairs: Vec<(u8, String)> = got.iter().map(|z| (z.name, z.cidr.to_string())).collect();
        assert_eq!(
            pairs,
            [
                (3, "10.250.0.0/19".to_string()),
                (2, "10.250.32.0/19".to_string()),
                (1, "10.250.64.0/19".to_string())
            ]
        );
        let eight: Vec<String> = (1..=8).map(|i| i.to_string()).collect();
        let got = azure_zone_subnets("10.180.0.0/17", &eight).unwrap();
        assert_eq!(got[7].cidr.to_string(), "10.180.112.0/20");
    }

    #[test]
    fn azure_errors() {
        assert!(matches!(
            azure_zone_subnets("10.250.0.0/25", &zones(&["1"])),
            Err(SubnetError::AzurePrefix { .. })
        ));
        assert!(matches!(
            azure_zone_subnets("10.0.0.0/15", &zones(&["1"])),
            Err(SubnetError::AzurePrefix { .. })
        ));
        assert!(matches!(
            azure_zone_subnets("10.250.0.0/22", &zones(&["eastus-1"])),
            Err(SubnetError::AzureZoneName(_))
        ));
        assert!(matches!(
            azure_zone_subnets("10.250.0.0/22", &zones(&["9"])),
            Err(SubnetError::AzureZoneName(_))
        ));
        assert!(matches!(
            azure_zone_subnets("10.250.0.0/22", &[]),
            Err(SubnetError::ZoneCount { count: 0 })
        ));
    }

    #[test]
    fn append_new_zones_keeps_existing_entries() {
        let existing = aws_infrastructure_config("10.250.0.0/16", &zones(&["a", "b"])).unwrap();
        let mut existing = existing;
        existing["networks"]["vpc"]["id"] = json!("vpc-123");
        existing["networks"]["zones"][0]["elasticIPAllocationID"] = json!("eipalloc-1");
        let generated =
            aws_infrastructure_config("10.250.0.0/16", &zones(&["a", "b", "c"])).unwrap();
        let merged = append_new_zones(&existing, &generated);
        assert_eq!(merged["networks"]["vpc"]["id"], "vpc-123");
        assert_eq!(
            merged["networks"]["zones"][0]["elasticIPAllocationID"],
            "eipalloc-1"
        );
        assert_eq!(infrastructure_zone_count(&merged), 3);
        assert_eq!(merged["networks"]["zones"][2]["workers"], "10.250.128.0/19");
    }
}
