//! Runtime → Shoot conversion over the real Runtime samples in `samples/runtimes/`
//! (plus GCP and OpenStack runtimes made by editing a sample), checked field by field against
//! hand-computed values; conversion errors; the update path (no downgrade, added zones); the
//! error-code classification table; the example configuration file.
//!
//! All conversions use `docs/config.example.yaml`.

use crate::api::{
    ANNOTATION_LICENCE_TYPE, ANNOTATION_RUNTIME_GENERATION, ANNOTATION_RUNTIME_ID, LastError,
    LastOperation, REQUIRED_LABELS, Runtime, Shoot, Worker,
};
use crate::gardener::config::Config;
use crate::gardener::convert::{
    ConversionError, StructuredAuthConfig, apply_no_downgrade, runtime_to_shoot,
    runtime_to_shoot_for_update, structured_authentication_config,
};
use crate::gardener::errors::{OperationType, ShootProgress, classify};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn samples_dir() -> PathBuf {
    manifest_dir().join("samples/runtimes")
}

fn config() -> Config {
    Config::load(manifest_dir().join("docs/config.example.yaml")).expect("example config loads")
}

fn sample(file: &str) -> Runtime {
    let path = samples_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut rt: Runtime =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    rt.metadata.generation = Some(5);
    rt
}

fn convert(rt: &Runtime) -> Value {
    let shoot = runtime_to_shoot(rt, &config()).unwrap_or_else(|e| panic!("conversion: {e}"));
    serde_json::to_value(&shoot).unwrap()
}

/// `value` at a `/`-separated JSON pointer, with a readable panic.
fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} missing in {value:#}"))
}

fn assert_at(value: &Value, pointer: &str, expected: Value) {
    assert_eq!(at(value, pointer), &expected, "at {pointer}");
}

const OIDC: &str = r#"{"clientID": "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "groupsClaim": "groups",
  "issuerURL": "https://my.cool.tokens.com", "signingAlgs": ["RS256"], "usernameClaim": "sub"}"#;

fn imdsv2() -> Value {
    json!({
        "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
        "kind": "WorkerConfig",
        "instanceMetadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}
    })
}

fn aws_infra(nodes: &str, zones: &[(&str, &str, &str, &str)]) -> Value {
    let zones: Vec<Value> = zones
        .iter()
        .map(|(name, workers, public, internal)| {
            json!({"name": name, "workers": workers, "public": public, "internal": internal})
        })
        .collect();
    json!({
        "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
        "kind": "InfrastructureConfig",
        "networks": {"vpc": {"cidr": nodes}, "zones": zones}
    })
}

fn azure_infra(nodes: &str, zones: &[(u8, &str)]) -> Value {
    let zones: Vec<Value> = zones
        .iter()
        .map(|(name, cidr)| {
            json!({"name": name, "cidr": cidr,
                   "natGateway": {"enabled": true, "idleConnectionTimeoutMinutes": 4}})
        })
        .collect();
    json!({
        "apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1",
        "kind": "InfrastructureConfig",
        "networks": {"vnet": {"cidr": nodes}, "zones": zones},
        "zoned": true
    })
}

/// The parts every converted sample shares with the example configuration.
fn assert_common(shoot: &Value, rt: &Runtime) {
    let name = &rt.spec.shoot.name;
    assert_at(shoot, "/apiVersion", json!("core.gardener.cloud/v1beta1"));
    assert_at(shoot, "/kind", json!("Shoot"));
    assert_at(shoot, "/metadata/name", json!(name));
    assert_at(shoot, "/metadata/namespace", json!("garden-kyma-dev"));
    assert_at(
        shoot,
        "/metadata/labels",
        json!({"account": "global-account-id", "subaccount": "subAccount-id"}),
    );
    let annotations = at(shoot, "/metadata/annotations");
    assert_eq!(annotations[ANNOTATION_RUNTIME_ID], "runtime-id");
    assert_eq!(annotations[ANNOTATION_RUNTIME_GENERATION], "5");
    assert_at(shoot, "/spec/region", json!(rt.spec.shoot.region));
    assert_at(shoot, "/spec/purpose", json!(rt.spec.shoot.purpose));
    assert_at(
        shoot,
        "/spec/credentialsBindingName",
        json!("hyperscaler secret"),
    );
    assert!(shoot["spec"].get("secretBindingName").is_none());
    assert!(shoot["spec"].get("cloudProfileName").is_none());
    assert_at(
        shoot,
        "/spec/provider/workersSettings",
        json!({"sshAccess": {"enabled": false}}),
    );
    assert_at(
        shoot,
        "/spec/maintenance/autoUpdate",
        json!({"kubernetesVersion": true, "machineImageVersion": false}),
    );
    assert_dns(shoot, name);
    let extensions: Vec<&str> = at(shoot, "/spec/extensions")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        extensions[..5],
        [
            "shoot-networking-filter",
            "shoot-cert-service",
            "shoot-dns-service",
            "shoot-oidc-service",
            "shoot-auditlog-service"
        ]
    );
    assert_at(
        shoot,
        "/spec/extensions/3",
        json!({"type": "shoot-oidc-service", "disabled": false}),
    );
    assert!(shoot.get("status").is_none());
}

/// DNS as KIM writes it: the provider's credentials as `credentialsRef` (never the
/// `secretName` Gardener forbids from Kubernetes 1.35 on), no DNS Secret in `spec.resources`,
/// and the extension naming the credentials `shoot-dns-service-<secret>`.
fn assert_dns(shoot: &Value, name: &str) {
    let domain = format!("{name}.dev.kyma.example.com");
    assert_at(
        shoot,
        "/spec/dns",
        json!({
            "domain": domain,
            "providers": [{"domains": {"include": [domain]}, "primary": true,
                           "type": "aws-route53",
                           "credentialsRef": {"apiVersion": "v1", "kind": "Secret",
                                              "name": "route53-secret"}}]
        }),
    );
    let resources = at(shoot, "/spec/resources").as_array().unwrap();
    assert!(
        resources.iter().all(|r| r["name"] != "route53-secret"),
        "{resources:?}"
    );
    assert_at(
        shoot,
        "/spec/extensions/2",
        json!({
            "type": "shoot-dns-service",
            "providerConfig": {
                "apiVersion": "service.dns.extensions.gardener.cloud/v1alpha1",
                "kind": "DNSConfig",
                "dnsProviderReplication": {"enabled": true},
                "providers": [{"domains": {"include": [domain]},
                               "credentials": "shoot-dns-service-route53-secret",
                               "type": "aws-route53"}],
                "syncProvidersFromShootSpecDNS": true
            }
        }),
    );
}

/// What KIM adds to every worker pool that sets no `machineControllerManager` settings.
fn mcm_defaults() -> Value {
    json!({"machineDrainTimeout": "15m0s", "maxEvictRetries": 2})
}

/// The kube-apiserver settings every Shoot of the example configuration gets besides OIDC:
/// service-account tokens and the audit policy.
fn api_server_with(oidc: Value) -> Value {
    let mut api = json!({
        "serviceAccountConfig": {"extendTokenExpiration": false, "maxTokenExpiration": "720h0m0s"},
        "auditConfig": {"auditPolicy": {"configMapRef": {"name": "audit-policy"}}}
    });
    for (k, v) in oidc.as_object().unwrap() {
        api[k] = v.clone();
    }
    api
}

fn filter_extension(disabled: bool, blackholing: bool) -> Value {
    let mut e = json!({"type": "shoot-networking-filter", "disabled": disabled});
    if blackholing {
        e["providerConfig"] = json!({"egressFilter": {"blackholingEnabled": true}});
    }
    e
}

#[test]
fn example_config_loads() {
    let c = config();
    assert_eq!(c.namespace(), "garden-kyma-dev");
    for p in ["aws", "azure", "gcp", "openstack"] {
        assert!(c.provider_defaults(p).is_some(), "{p}");
    }
    assert_eq!(c.kubeconfig.expiration_seconds, 86_400);
    assert_eq!(c.maintenance_window("eastus").unwrap().begin, "030000+0000");
    // KIM-equivalent: no seed region mapping, the seed selector names the Shoot's region.
    assert_eq!(c.seed_region("eastus"), "eastus");
}

#[test]
fn every_sample_converts() {
    let mut n = 0;
    for entry in std::fs::read_dir(samples_dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let rt = sample(&file);
        let shoot = convert(&rt);
        assert_common(&shoot, &rt);
        n += 1;
    }
    assert!(n >= 6, "only {n} samples");
}

#[test]
fn aws_minimal() {
    let rt = sample("aws-minimal.yaml");
    let shoot = convert(&rt);
    assert_at(&shoot, "/spec/provider/type", json!("aws"));
    assert_at(
        &shoot,
        "/spec/cloudProfile",
        json!({"kind": "CloudProfile", "name": "aws"}),
    );
    assert_at(
        &shoot,
        "/spec/networking",
        json!({"type": "calico", "pods": "100.64.0.0/12", "nodes": "10.250.0.0/16",
               "services": "100.104.0.0/13"}),
    );
    assert_at(
        &shoot,
        "/spec/provider/workers",
        json!([{
            "machine": {"type": "m6i.large", "image": {"name": "gardenlinux", "version": "1443.9.0"}},
            "maxSurge": 3, "maxUnavailable": 0, "maximum": 20, "minimum": 3,
            "name": "worker-0",
            "machineControllerManager": mcm_defaults(),
            "providerConfig": imdsv2(),
            "volume": {"type": "gp2", "size": "50Gi"},
            "zones": ["eu-central-1a", "eu-central-1b", "eu-central-1c"]
        }]),
    );
    // 10.250.0.0/16: each of the first three zones takes a /18 quarter: workers /19, public
    // and internal /20.
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        aws_infra(
            "10.250.0.0/16",
            &[
                (
                    "eu-central-1a",
                    "10.250.0.0/19",
                    "10.250.32.0/20",
                    "10.250.48.0/20",
                ),
                (
                    "eu-central-1b",
                    "10.250.64.0/19",
                    "10.250.96.0/20",
                    "10.250.112.0/20",
                ),
                (
                    "eu-central-1c",
                    "10.250.128.0/19",
                    "10.250.160.0/20",
                    "10.250.176.0/20",
                ),
            ],
        ),
    );
    assert_at(
        &shoot,
        "/spec/provider/controlPlaneConfig",
        json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "ControlPlaneConfig"}),
    );
    // No version in the Runtime: the configured default; from 1.30 on OIDC goes through
    // structured authentication, as KIM's.
    assert_at(&shoot, "/spec/kubernetes/version", json!("1.31.4"));
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer",
        api_server_with(json!({"structuredAuthentication":
            {"configMapName": "structured-auth-config-aws-minimal"}})),
    );
    assert_at(&shoot, "/spec/kubernetes/kubelet", json!({}));
    assert_at(
        &shoot,
        "/spec/controlPlane",
        json!({"highAvailability": {"failureTolerance": {"type": "node"}}}),
    );
    assert_at(&shoot, "/spec/extensions/0", filter_extension(true, false));
    assert_eq!(at(&shoot, "/spec/extensions").as_array().unwrap().len(), 5);
    assert_at(
        &shoot,
        "/spec/maintenance/timeWindow",
        json!({"begin": "220000+0000", "end": "000000+0000"}),
    );
    assert!(shoot["spec"].get("seedSelector").is_none());
    assert!(
        at(&shoot, "/metadata/annotations")
            .get(ANNOTATION_LICENCE_TYPE)
            .is_none()
    );
}

#[test]
fn aws_trial_small_range_one_zone() {
    let rt = sample("aws-trial.yaml");
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        &format!(
            "/metadata/annotations/{}",
            ANNOTATION_LICENCE_TYPE.replace('/', "~1")
        ),
        json!("TestDevelopmentAndDemo"),
    );
    assert_at(&shoot, "/spec/purpose", json!("evaluation"));
    // 10.250.0.0/22 (1024 addresses): the zone takes the first 256 — workers /25 (128),
    // public /26 and internal /26 (64 each).
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        aws_infra(
            "10.250.0.0/22",
            &[(
                "eu-central-1b",
                "10.250.0.0/25",
                "10.250.0.128/26",
                "10.250.0.192/26",
            )],
        ),
    );
    assert_at(
        &shoot,
        "/spec/networking",
        json!({"type": "calico", "pods": "10.96.0.0/13", "nodes": "10.250.0.0/22",
               "services": "10.104.0.0/13"}),
    );
    assert_at(
        &shoot,
        "/spec/provider/workers/0/zones",
        json!(["eu-central-1b"]),
    );
    assert_at(&shoot, "/spec/provider/workers/0/minimum", json!(1));
    assert_at(
        &shoot,
        "/spec/controlPlane/highAvailability/failureTolerance/type",
        json!("zone"),
    );
}

#[test]
fn aws_full_seed_location_and_old_kubernetes() {
    let rt = sample("aws.yaml");
    let shoot = convert(&rt);
    assert_at(&shoot, "/metadata/name", json!("aws-full"));
    assert_at(
        &shoot,
        "/spec/seedSelector",
        json!({"matchLabels": {"seed.gardener.cloud/region": "eu-central-1"}}),
    );
    assert_at(&shoot, "/spec/kubernetes/version", json!("1.28.7"));
    // Kubernetes 1.28 has no structured authentication: only the main provider, as flags.
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer",
        api_server_with(json!({"oidcConfig": serde_json::from_str::<Value>(OIDC).unwrap()})),
    );
    // Egress filter off, ingress on: the extension is disabled, without blackholing config.
    assert_at(&shoot, "/spec/extensions/0", filter_extension(true, false));
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig/networks/zones/2",
        json!({"name": "eu-central-1c", "workers": "10.250.128.0/19",
               "public": "10.250.160.0/20", "internal": "10.250.176.0/20"}),
    );
}

#[test]
fn config_sample_runtime_with_gvisor_and_default_networking_type() {
    let rt = sample("infrastructuremanager_v1_runtime.yaml");
    let shoot = convert(&rt);
    assert_at(&shoot, "/metadata/name", json!("shoot-name"));
    assert_at(&shoot, "/spec/networking/type", json!("calico"));
    let worker = at(&shoot, "/spec/provider/workers/0");
    assert_eq!(worker["name"], "cpu-worker-0");
    assert_eq!(
        worker["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1312.3.0"})
    );
    assert_eq!(worker["cri"]["containerRuntimes"][0]["type"], "gvisor");
    assert_eq!(worker["providerConfig"], imdsv2());
    assert_at(
        &shoot,
        "/spec/seedSelector/matchLabels/seed.gardener.cloud~1region",
        json!("eu-central-1"),
    );
}

#[test]
fn azure_fremium_one_zone() {
    let rt = sample("azure-fremium.yaml");
    let shoot = convert(&rt);
    assert_at(&shoot, "/spec/provider/type", json!("azure"));
    assert_at(
        &shoot,
        "/spec/cloudProfile",
        json!({"kind": "CloudProfile", "name": "az"}),
    );
    // 10.250.0.0/22 → /25 per zone.
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        azure_infra("10.250.0.0/22", &[(1, "10.250.0.0/25")]),
    );
    assert_at(
        &shoot,
        "/spec/provider/controlPlaneConfig",
        json!({"apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "ControlPlaneConfig"}),
    );
    assert_at(
        &shoot,
        "/spec/provider/workers",
        json!([{
            "machine": {"type": "Standard_D2s_v5",
                        "image": {"name": "gardenlinux", "version": "1443.9.0"}},
            "maxSurge": 1, "maxUnavailable": 0, "maximum": 1, "minimum": 1,
            "name": "worker-0",
            "machineControllerManager": mcm_defaults(),
            "volume": {"type": "Standard_LRS", "size": "50Gi"},
            "zones": ["1"]
        }]),
    );
    // An evaluation Shoot: Gardener picks the maintenance window.
    assert!(at(&shoot, "/spec/maintenance").get("timeWindow").is_none());
}

#[test]
fn azure_full_three_zones_region_window_and_seed_mapping() {
    let rt = sample("azure.yaml");
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        azure_infra(
            "10.250.0.0/22",
            &[
                (1, "10.250.0.0/25"),
                (2, "10.250.0.128/25"),
                (3, "10.250.1.0/25"),
            ],
        ),
    );
    // eastus has its own window in the example configuration, and the seed selector names
    // the region itself, as KIM's.
    assert_at(
        &shoot,
        "/spec/maintenance/timeWindow",
        json!({"begin": "030000+0000", "end": "050000+0000"}),
    );
    assert_at(
        &shoot,
        "/spec/seedSelector",
        json!({"matchLabels": {"seed.gardener.cloud/region": "eastus"}}),
    );
    assert_at(&shoot, "/spec/extensions/0", filter_extension(true, false));
}

#[test]
fn filter_enabled_with_blackholing() {
    let mut rt = sample("aws.yaml");
    rt.spec.security.networking.filter.egress.enabled = true;
    assert_at(
        &convert(&rt),
        "/spec/extensions/0",
        filter_extension(false, true),
    );
    rt.spec.security.networking.filter.ingress = None;
    assert_at(
        &convert(&rt),
        "/spec/extensions/0",
        filter_extension(false, false),
    );
}

fn gcp_runtime() -> Runtime {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.name = "gcp-edit".into();
    rt.spec.shoot.region = "europe-west3".into();
    rt.spec.shoot.provider.type_ = "gcp".into();
    let w = &mut rt.spec.shoot.provider.workers[0];
    w.machine.type_ = "n2-standard-4".into();
    w.machine.image = None;
    w.volume = None;
    w.zones = Some(vec!["europe-west3-a".into(), "europe-west3-b".into()]);
    rt.spec.shoot.kubernetes.get_or_insert_default().version = Some("1.32.1".into());
    rt
}

#[test]
fn gcp_edited_sample_with_defaults_and_structured_auth() {
    let rt = gcp_runtime();
    let shoot = convert(&rt);
    assert_at(&shoot, "/spec/provider/type", json!("gcp"));
    assert_at(
        &shoot,
        "/spec/cloudProfile",
        json!({"kind": "CloudProfile", "name": "gcp"}),
    );
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        json!({"apiVersion": "gcp.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "InfrastructureConfig",
               "networks": {"worker": "10.250.0.0/16", "workers": "10.250.0.0/16"}}),
    );
    assert_at(
        &shoot,
        "/spec/provider/controlPlaneConfig",
        json!({"apiVersion": "gcp.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "ControlPlaneConfig", "zone": "europe-west3-a"}),
    );
    // Image from the configuration (no volume default, as KIM); no IMDSv2 outside AWS.
    assert_at(
        &shoot,
        "/spec/provider/workers/0",
        json!({
            "machine": {"type": "n2-standard-4",
                        "image": {"name": "gardenlinux", "version": "1592.1.0"}},
            "maxSurge": 3, "maxUnavailable": 0, "maximum": 20, "minimum": 3,
            "name": "worker-0",
            "machineControllerManager": mcm_defaults(),
            "zones": ["europe-west3-a", "europe-west3-b"]
        }),
    );
    // Kubernetes 1.32: oidcConfig is forbidden, structured authentication instead.
    assert_at(&shoot, "/spec/kubernetes/version", json!("1.32.1"));
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer",
        api_server_with(json!({"structuredAuthentication":
            {"configMapName": "structured-auth-config-gcp-edit"}})),
    );
    let StructuredAuthConfig {
        config_map_name,
        key,
        content,
    } = structured_authentication_config(&rt, &config()).unwrap();
    assert_eq!(config_map_name, "structured-auth-config-gcp-edit");
    assert_eq!(key, "config.yaml");
    let doc: Value = serde_saphyr::from_str(&content).unwrap();
    assert_eq!(
        doc,
        json!({
            "apiVersion": "apiserver.config.k8s.io/v1beta1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {"url": "https://my.cool.tokens.com",
                           "audiences": ["xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"]},
                "claimMappings": {
                    "username": {"claim": "sub", "prefix": "https://my.cool.tokens.com#"},
                    "groups": {"claim": "groups", "prefix": ""}
                }
            }]
        })
    );
}

#[test]
fn additional_oidc_providers_use_structured_auth_from_1_30() {
    let mut rt = sample("aws.yaml");
    rt.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.30.5".into());
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer/structuredAuthentication",
        json!({"configMapName": "structured-auth-config-aws-full"}),
    );
    let auth = structured_authentication_config(&rt, &config()).unwrap();
    let doc: Value = serde_saphyr::from_str(&auth.content).unwrap();
    let jwt = doc["jwt"].as_array().unwrap();
    assert_eq!(jwt.len(), 2);
    assert_eq!(jwt[1]["issuer"]["url"], "https://some.others.tokens.com");
    assert_eq!(jwt[1]["claimMappings"]["username"]["prefix"], "someother");
}

#[test]
fn default_oidc_from_configuration() {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.kubernetes = None;
    // Below 1.30 (no structured authentication) the provider is visible in the Shoot.
    let mut c = config();
    c.kubernetes.default_version = "1.29.9".into();
    let shoot = convert_with(&rt, &c);
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer/oidcConfig",
        json!({"clientID": "9bd05ed7-a930-44e6-8c79-e6defeb7dec9", "groupsClaim": "groups",
               "issuerURL": "https://kyma.accounts.ondemand.com", "signingAlgs": ["RS256"],
               "usernameClaim": "sub", "usernamePrefix": "-"}),
    );
}

#[test]
fn openstack_edited_sample() {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.provider.type_ = "openstack".into();
    rt.spec.shoot.region = "eu-de-1".into();
    let w = &mut rt.spec.shoot.provider.workers[0];
    w.machine.type_ = "g_c4_m16".into();
    w.machine.image.as_mut().unwrap().version = None;
    w.volume = None;
    w.zones = Some(vec!["eu-de-1a".into(), "eu-de-1b".into()]);
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        "/spec/cloudProfile",
        json!({"kind": "CloudProfile", "name": "converged-cloud-kyma"}),
    );
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig",
        json!({"apiVersion": "openstack.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "InfrastructureConfig",
               "floatingPoolName": "FloatingIP-external-kyma-01",
               "networks": {"worker": "", "workers": "10.250.0.0/16"}}),
    );
    assert_at(
        &shoot,
        "/spec/provider/controlPlaneConfig",
        json!({"apiVersion": "openstack.provider.extensions.gardener.cloud/v1alpha1",
               "kind": "ControlPlaneConfig", "loadBalancerProvider": "f5"}),
    );
    // Image name given without version: the configured version of that image; no volume
    // default for openstack in the example.
    let worker = at(&shoot, "/spec/provider/workers/0");
    assert_eq!(
        worker["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1592.1.0"})
    );
    assert!(worker.get("volume").is_none());
    assert!(worker.get("providerConfig").is_none());
}

#[test]
fn additional_workers_are_appended_and_zones_merged() {
    let mut rt = sample("aws-minimal.yaml");
    let mut extra: Worker = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "gpu".into();
    extra.machine.image = None;
    extra.volume = None;
    extra.zones = Some(vec!["eu-central-1c".into(), "eu-central-1d".into()]);
    rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    let shoot = convert(&rt);
    let workers = at(&shoot, "/spec/provider/workers").as_array().unwrap();
    assert_eq!(workers.len(), 2);
    assert_eq!(workers[0]["name"], "worker-0");
    assert_eq!(workers[1]["name"], "gpu");
    assert_eq!(
        workers[1]["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1592.1.0"})
    );
    assert!(workers[1].get("volume").is_none(), "no volume default");
    // Four distinct zones: the fourth gets three /22 subnets after the first three zones.
    assert_at(
        &shoot,
        "/spec/provider/infrastructureConfig/networks/zones/3",
        json!({"name": "eu-central-1d", "workers": "10.250.192.0/22",
               "public": "10.250.196.0/22", "internal": "10.250.200.0/22"}),
    );
}

#[test]
fn nvidia_openshell_extension() {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.enable_nvidia_openshell = Some(true);
    assert_at(
        &convert(&rt),
        "/spec/extensions/5",
        json!({"type": "shoot-nvidia-openshell", "disabled": false}),
    );
}

// ---- errors -------------------------------------------------------------------------------

fn convert_err(rt: &Runtime) -> ConversionError {
    match runtime_to_shoot(rt, &config()) {
        Ok(_) => panic!("conversion should fail"),
        Err(e) => e,
    }
}

#[test]
fn each_missing_label_is_named() {
    for label in REQUIRED_LABELS {
        let mut rt = sample("aws.yaml");
        rt.metadata.labels.as_mut().unwrap().remove(label);
        let err = convert_err(&rt);
        assert_eq!(
            err,
            ConversionError::MissingLabels {
                labels: vec![label]
            }
        );
        assert_eq!(
            err.to_string(),
            format!("metadata.labels: missing required labels: {label}")
        );
    }
    let mut rt = sample("aws.yaml");
    rt.metadata.labels = None;
    let msg = convert_err(&rt).to_string();
    for label in REQUIRED_LABELS {
        assert!(msg.contains(label), "{label} not in {msg}");
    }
    // An empty value counts as missing.
    let mut rt = sample("aws.yaml");
    rt.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kyma-project.io/region".into(), String::new());
    assert!(
        convert_err(&rt)
            .to_string()
            .contains("kyma-project.io/region")
    );
}

#[test]
fn main_worker_count() {
    let mut rt = sample("aws.yaml");
    let w = rt.spec.shoot.provider.workers[0].clone();
    rt.spec.shoot.provider.workers.push(Worker {
        name: "worker-1".into(),
        ..w
    });
    let err = convert_err(&rt);
    assert_eq!(err, ConversionError::MainWorkerCount { count: 2 });
    assert!(
        err.to_string()
            .starts_with("spec.shoot.provider.workers: exactly one main worker")
    );
    rt.spec.shoot.provider.workers.clear();
    assert_eq!(
        convert_err(&rt),
        ConversionError::MainWorkerCount { count: 0 }
    );
}

#[test]
fn bad_node_cidrs() {
    for (provider, nodes, fragment) in [
        ("aws", "10.250.0.0", "not an IPv4 CIDR"),
        ("aws", "10.250.0.0/33", "not an IPv4 CIDR"),
        ("aws", "10.250.0.0/25", "between /16 and /24"),
        (
            "aws",
            "10.250.3.0/16",
            "host bits set; did you mean 10.250.0.0/16?",
        ),
        ("azure", "10.250.0.0/26", "between /16 and /24"),
        ("gcp", "nodes", "not an IPv4 CIDR"),
        ("openstack", "2001:db8::/64", "not an IPv4 CIDR"),
    ] {
        let mut rt = sample(if provider == "azure" {
            "azure.yaml"
        } else {
            "aws-trial.yaml"
        });
        rt.spec.shoot.provider.type_ = provider.into();
        rt.spec.shoot.region = tenant_region(provider).into();
        rt.spec.shoot.networking.nodes = nodes.into();
        let err = convert_err(&rt);
        assert!(
            matches!(err, ConversionError::InvalidNodeCidr { .. }),
            "{provider} {nodes}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.shoot.networking.nodes: ") && msg.contains(fragment),
            "{provider} {nodes}: {msg}"
        );
    }
}

/// A region of `provider` with an audit log tenant in the example configuration.
fn tenant_region(provider: &str) -> &'static str {
    match provider {
        "azure" => "eastus",
        "gcp" => "europe-west3",
        "openstack" => "eu-de-1",
        _ => "eu-central-1",
    }
}

#[test]
fn zone_errors() {
    let mut rt = sample("aws.yaml");
    rt.spec.shoot.provider.workers[0].zones = Some((0..9).map(|i| format!("z{i}")).collect());
    let err = convert_err(&rt);
    assert!(matches!(err, ConversionError::InvalidZones { .. }), "{err}");
    assert!(err.to_string().contains("between 1 and 8"), "{err}");

    rt.spec.shoot.provider.workers[0].zones = Some(vec![]);
    assert_eq!(
        convert_err(&rt).to_string(),
        "spec.shoot.provider.workers[0].zones: at least one zone is required"
    );
    rt.spec.shoot.provider.workers[0].zones = Some(vec!["a".into(), "a".into()]);
    assert_eq!(
        convert_err(&rt).to_string(),
        "spec.shoot.provider.workers[0].zones: zone \"a\" is listed twice"
    );

    let mut rt = sample("azure.yaml");
    rt.spec.shoot.provider.workers[0].zones = Some(vec!["eastus-1".into()]);
    let msg = convert_err(&rt).to_string();
    assert!(msg.contains("azure zone \"eastus-1\""), "{msg}");
}

#[test]
fn duplicate_worker_names() {
    let mut rt = sample("aws.yaml");
    let w = rt.spec.shoot.provider.workers[0].clone();
    rt.spec.shoot.provider.additional_workers = Some(vec![w]);
    assert_eq!(
        convert_err(&rt).to_string(),
        "spec.shoot.provider.additionalWorkers[0].name: worker name \"worker-0\" is already used by spec.shoot.provider.workers[0]"
    );
}

#[test]
fn unknown_and_unconfigured_providers() {
    for provider in ["alicloud", "ionos", ""] {
        let mut rt = sample("aws.yaml");
        rt.spec.shoot.provider.type_ = provider.into();
        let err = convert_err(&rt);
        assert_eq!(
            err,
            ConversionError::UnsupportedProvider {
                provider: provider.into()
            }
        );
        assert!(err.to_string().starts_with("spec.shoot.provider.type: "));
    }
    let mut c = config();
    c.providers.gcp = None;
    let err = runtime_to_shoot(&gcp_runtime(), &c).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.shoot.provider.type: provider \"gcp\" is not configured (no providers.gcp in the converter configuration)"
    );
}

// ---- update path ----------------------------------------------------------------------------

fn shoot_of(rt: &Runtime) -> Shoot {
    runtime_to_shoot(rt, &config()).unwrap()
}

#[test]
fn kubernetes_version_is_never_downgraded() {
    let rt = sample("aws.yaml"); // 1.28.7
    let mut existing = shoot_of(&rt);
    existing.spec.kubernetes.version = "1.29.3".into();
    let updated = runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap();
    assert_eq!(updated.spec.kubernetes.version, "1.29.3");

    existing.spec.kubernetes.version = "1.27.9".into();
    let updated = runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap();
    assert_eq!(updated.spec.kubernetes.version, "1.28.7");

    // 1.28.10 > 1.28.7 numerically (not as strings).
    let mut desired = shoot_of(&rt);
    existing.spec.kubernetes.version = "1.28.10".into();
    apply_no_downgrade(&mut desired, &existing);
    assert_eq!(desired.spec.kubernetes.version, "1.28.10");

    // Raised to 1.32: legacy OIDC flags are forbidden there and move to structured auth.
    let mut desired = shoot_of(&rt);
    existing.spec.kubernetes.version = "1.32.0".into();
    apply_no_downgrade(&mut desired, &existing);
    let api = desired.spec.kubernetes.kube_api_server.unwrap();
    assert!(api.oidc_config.is_none());
    assert_eq!(
        api.structured_authentication.unwrap().config_map_name,
        "structured-auth-config-aws-full"
    );
}

#[test]
fn machine_image_version_is_never_downgraded() {
    let rt = sample("aws.yaml"); // gardenlinux 1443.9.0
    let mut existing = shoot_of(&rt);
    existing.spec.provider.workers[0]
        .machine
        .image
        .as_mut()
        .unwrap()
        .version = Some("1443.10.0".into());
    let updated = runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap();
    assert_eq!(
        updated.spec.provider.workers[0]
            .machine
            .image
            .as_ref()
            .unwrap()
            .version
            .as_deref(),
        Some("1443.10.0")
    );
}

#[test]
fn update_keeps_provider_configs_and_appends_new_zones() {
    let rt = sample("aws-minimal.yaml");
    let mut existing = shoot_of(&rt);
    // Gardener/operators may have added fields; they must survive.
    let infra = existing
        .spec
        .provider
        .infrastructure_config
        .as_mut()
        .unwrap();
    infra["networks"]["vpc"]["id"] = json!("vpc-0123");
    existing.spec.dns.as_mut().unwrap().domain = Some("legacy.example.com".into());
    existing.spec.provider.workers[0].update_strategy = Some("AutoRollingUpdate".into());

    // Same zones, worker max changed: configs untouched.
    let mut changed = rt.clone();
    changed.spec.shoot.provider.workers[0].maximum = 30;
    let updated = runtime_to_shoot_for_update(&changed, &config(), &existing).unwrap();
    assert_eq!(
        updated.spec.provider.infrastructure_config,
        existing.spec.provider.infrastructure_config
    );
    assert_eq!(updated.spec.provider.workers[0].maximum, 30);
    assert_eq!(
        updated.spec.provider.workers[0].update_strategy.as_deref(),
        Some("AutoRollingUpdate")
    );
    assert_eq!(
        updated.spec.dns.as_ref().unwrap().domain.as_deref(),
        Some("legacy.example.com")
    );

    // A zone removed and one added: the existing zones stay (Gardener forbids removing), the
    // new one is appended, and gets the fourth-zone subnets.
    changed.spec.shoot.provider.workers[0].zones =
        Some(vec!["eu-central-1d".into(), "eu-central-1a".into()]);
    let updated = runtime_to_shoot_for_update(&changed, &config(), &existing).unwrap();
    assert_eq!(
        updated.spec.provider.workers[0].zones,
        Some(
            ["a", "b", "c", "d"]
                .iter()
                .map(|z| format!("eu-central-1{z}"))
                .collect()
        )
    );
    let infra = serde_json::to_value(updated.spec.provider.infrastructure_config.unwrap()).unwrap();
    assert_eq!(infra["networks"]["vpc"]["id"], "vpc-0123");
    let zones = infra["networks"]["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 4);
    assert_eq!(
        zones[3],
        json!({"name": "eu-central-1d", "workers": "10.250.192.0/22",
               "public": "10.250.196.0/22", "internal": "10.250.200.0/22"})
    );
    assert_eq!(
        zones[0],
        serde_json::to_value(
            &existing
                .spec
                .provider
                .infrastructure_config
                .as_ref()
                .unwrap()["networks"]["zones"][0]
        )
        .unwrap()
    );
}

#[test]
fn update_keeps_worker_order_and_secret_binding() {
    let mut rt = sample("aws-minimal.yaml");
    let mut extra = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "b-pool".into();
    rt.spec.shoot.provider.additional_workers = Some(vec![extra.clone()]);
    let mut existing = shoot_of(&rt);
    existing.spec.provider.workers.reverse(); // Gardener's stored order
    existing.spec.credentials_binding_name = None;
    existing.spec.secret_binding_name = Some("hyperscaler secret".into());

    let mut c = extra.clone();
    c.name = "a-new".into();
    rt.spec.shoot.provider.additional_workers = Some(vec![c, extra]);
    let updated = runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap();
    let names: Vec<&str> = updated
        .spec
        .provider
        .workers
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    assert_eq!(names, ["b-pool", "worker-0", "a-new"]);
    assert_eq!(
        updated.spec.secret_binding_name.as_deref(),
        Some("hyperscaler secret")
    );
    assert_eq!(updated.spec.credentials_binding_name, None);
}

/// Gardener keeps `extensions` and `resources` as atomic lists: the update keeps what the
/// Shoot has beyond kim's own entries (as KIM's patch converter), replaces kim's in place,
/// and disables an NVIDIA OpenShell extension the Runtime no longer enables.
#[test]
fn update_keeps_foreign_extensions_and_resources() {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.enable_nvidia_openshell = Some(true);
    let mut existing = shoot_of(&rt);
    let mut extensions = existing.spec.extensions.take().unwrap();
    extensions.insert(
        0,
        serde_json::from_value(json!({"type": "registry-cache", "providerConfig": {"a": 1}}))
            .unwrap(),
    );
    extensions[2].provider_config = None; // cert-service changed by someone else
    existing.spec.extensions = Some(extensions);
    let mut resources = existing.spec.resources.take().unwrap();
    resources.push(
        serde_json::from_value(json!({"name": "registry-cache-secret", "resourceRef":
            {"apiVersion": "v1", "kind": "Secret", "name": "rc"}}))
        .unwrap(),
    );
    existing.spec.resources = Some(resources);
    rt.spec.shoot.enable_nvidia_openshell = None;
    let updated =
        serde_json::to_value(runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap())
            .unwrap();
    let types: Vec<&str> = at(&updated, "/spec/extensions")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "registry-cache",
            "shoot-networking-filter",
            "shoot-cert-service",
            "shoot-dns-service",
            "shoot-oidc-service",
            "shoot-auditlog-service",
            "shoot-nvidia-openshell"
        ]
    );
    assert_at(
        &updated,
        "/spec/extensions/0/providerConfig",
        json!({"a": 1}),
    );
    assert_at(
        &updated,
        "/spec/extensions/2/providerConfig/shootIssuers",
        json!({"enabled": true}),
    );
    assert_at(
        &updated,
        "/spec/extensions/6",
        json!({"type": "shoot-nvidia-openshell", "disabled": true}),
    );
    let names: Vec<&str> = at(&updated, "/spec/resources")
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["auditlog-credentials", "registry-cache-secret"]);
}

/// A Shoot KIM created below Kubernetes 1.30 already uses structured authentication: the
/// update keeps it (Gardener refuses `oidcConfig` beside it), and a new one gets the flags.
#[test]
fn update_keeps_structured_authentication_below_1_30() {
    let rt = sample("aws.yaml"); // Kubernetes 1.28.7
    let created = shoot_of(&rt);
    let api = created.spec.kubernetes.kube_api_server.as_ref().unwrap();
    assert!(api.oidc_config.is_some() && api.structured_authentication.is_none());
    let mut existing = created.clone();
    let api = existing.spec.kubernetes.kube_api_server.as_mut().unwrap();
    api.oidc_config = None;
    api.structured_authentication = Some(crate::api::StructuredAuthentication {
        config_map_name: "structured-auth-config-aws-full".into(),
    });
    let updated = runtime_to_shoot_for_update(&rt, &config(), &existing).unwrap();
    let api = updated.spec.kubernetes.kube_api_server.unwrap();
    assert_eq!(api.oidc_config, None);
    assert_eq!(
        api.structured_authentication.unwrap().config_map_name,
        "structured-auth-config-aws-full"
    );
}

// ---- lastOperation / lastErrors classification ------------------------------------------

fn failed_with(codes: &[&str]) -> ShootProgress {
    let op: LastOperation = serde_json::from_value(json!({
        "type": "Create", "state": "Failed", "progress": 80, "description": "op failed",
        "lastUpdateTime": "2024-05-01T10:00:00Z"
    }))
    .unwrap();
    let errors: Vec<LastError> = codes
        .iter()
        .map(|c| {
            serde_json::from_value(json!({"description": format!("{c} happened"), "codes": [c]}))
                .unwrap()
        })
        .collect();
    classify(Some(&op), &errors)
}

#[test]
fn error_code_classification_table() {
    // Gardener's codes (the one table of errors.rs's tests), and one it may invent later.
    let table = super::errors::tests::ERROR_CODES
        .into_iter()
        .chain([("ERR_NOT_YET_INVENTED", true)]);
    for (code, retryable) in table {
        assert_eq!(
            failed_with(&[code]),
            ShootProgress::Failed {
                operation: OperationType::Create,
                retryable,
                codes: vec![code.to_string()],
                description: format!("1) {code} happened"),
            },
            "{code}"
        );
    }
    // Any terminal code makes the failure terminal.
    assert!(matches!(
        failed_with(&["ERR_INFRA_QUOTA_EXCEEDED", "ERR_INFRA_UNAUTHENTICATED"]),
        ShootProgress::Failed {
            retryable: false,
            ..
        }
    ));
    // Failed without any lastErrors: terminal (as KIM).
    assert!(matches!(
        failed_with(&[]),
        ShootProgress::Failed { retryable: false, ref description, .. } if description == "op failed"
    ));
}

// ---- Shoots equal to KIM's (docs/reconciler.md) --------------------------------------------

fn convert_with(rt: &Runtime, config: &Config) -> Value {
    let shoot = runtime_to_shoot(rt, config).unwrap_or_else(|e| panic!("conversion: {e}"));
    serde_json::to_value(&shoot).unwrap()
}

fn annotation(shoot: &Value, key: &str) -> Option<String> {
    at(shoot, "/metadata/annotations")
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// KIM adds `shoot-cert-service` with shoot issuers to every Shoot, without any input.
#[test]
fn kim_cert_service_extension_on_every_shoot() {
    for file in ["aws-minimal.yaml", "azure-fremium.yaml"] {
        assert_at(
            &convert(&sample(file)),
            "/spec/extensions/1",
            json!({"type": "shoot-cert-service", "providerConfig": {
                "apiVersion": "service.cert.extensions.gardener.cloud/v1alpha1",
                "kind": "CertConfig", "shootIssuers": {"enabled": true}}}),
        );
    }
}

/// KIM's token extender: `extendTokenExpiration: false`, `maxTokenExpiration` the configured
/// lifetime (30 days by default), in Go's duration format.
#[test]
fn kim_service_account_token_settings() {
    let rt = sample("aws-minimal.yaml");
    let expected = json!({"extendTokenExpiration": false, "maxTokenExpiration": "720h0m0s"});
    assert_at(
        &convert(&rt),
        "/spec/kubernetes/kubeAPIServer/serviceAccountConfig",
        expected.clone(),
    );
    let mut c = config();
    c.kubernetes.max_token_expiration = None;
    assert_at(
        &convert_with(&rt, &c),
        "/spec/kubernetes/kubeAPIServer/serviceAccountConfig",
        expected,
    );
    c.kubernetes.max_token_expiration = Some("2160h".into());
    assert_at(
        &convert_with(&rt, &c),
        "/spec/kubernetes/kubeAPIServer/serviceAccountConfig/maxTokenExpiration",
        json!("2160h0m0s"),
    );
}

/// KIM's three cleanup grace-period annotations, on every Shoot.
#[test]
fn kim_cleanup_grace_period_annotations() {
    let shoot = convert(&sample("aws-trial.yaml"));
    for (key, value) in [
        (
            "shoot.gardener.cloud/cleanup-extended-apis-finalize-grace-period-seconds",
            "120",
        ),
        (
            "shoot.gardener.cloud/cleanup-kubernetes-resources-finalize-grace-period-seconds",
            "120",
        ),
        (
            "shoot.gardener.cloud/cleanup-webhooks-finalize-grace-period-seconds",
            "60",
        ),
    ] {
        assert_eq!(annotation(&shoot, key).as_deref(), Some(value), "{key}");
    }
}

/// Every pool gets KIM's drain timeout and evict retries where the Runtime sets none; a
/// pool's own settings are kept.
#[test]
fn kim_machine_controller_manager_defaults_per_pool() {
    let mut rt = sample("aws-minimal.yaml");
    let mut own = rt.spec.shoot.provider.workers[0].clone();
    own.name = "own".into();
    own.machine_controller_manager = Some(crate::api::MachineControllerManagerSettings {
        machine_drain_timeout: Some("30m0s".into()),
        ..Default::default()
    });
    rt.spec.shoot.provider.additional_workers = Some(vec![own]);
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        "/spec/provider/workers/0/machineControllerManager",
        mcm_defaults(),
    );
    assert_at(
        &shoot,
        "/spec/provider/workers/1/machineControllerManager",
        json!({"machineDrainTimeout": "30m0s", "maxEvictRetries": 2}),
    );
    let mut c = config();
    c.workers.machine_drain_timeout = "1h".into();
    c.workers.max_evict_retries = 5;
    assert_at(
        &convert_with(&rt, &c),
        "/spec/provider/workers/0/machineControllerManager",
        json!({"machineDrainTimeout": "1h0m0s", "maxEvictRetries": 5}),
    );
}

/// DNS credentials through `credentialsRef`, never `secretName`, and no DNS Secret in
/// `spec.resources` (KIM's DNS extenders).
#[test]
fn kim_dns_credentials_ref() {
    let shoot = convert(&sample("aws-minimal.yaml"));
    assert_dns(&shoot, "aws-minimal");
    assert!(
        at(&shoot, "/spec/dns/providers/0")
            .get("secretName")
            .is_none()
    );
    // Without `dns`: no spec.dns, and the extension as KIM's "Gardener internal" DNS.
    let mut c = config();
    c.dns = None;
    let shoot = convert_with(&sample("aws-minimal.yaml"), &c);
    assert!(shoot["spec"].get("dns").is_none());
    assert_at(
        &shoot,
        "/spec/extensions/2",
        json!({"type": "shoot-dns-service", "providerConfig": {
            "apiVersion": "service.dns.extensions.gardener.cloud/v1alpha1", "kind": "DNSConfig",
            "dnsProviderReplication": {"enabled": true}, "syncProvidersFromShootSpecDNS": true}}),
    );
}

/// `eu-access-only` for the EU-only platform regions (KIM's list), nothing elsewhere.
#[test]
fn kim_eu_access_only_for_eu_platform_regions() {
    let expected = json!([{"name": "eu-access-only", "options": {
        "support.gardener.cloud/eu-access-for-cluster-addons": "true",
        "support.gardener.cloud/eu-access-for-cluster-nodes": "true"}}]);
    let mut rt = sample("aws-minimal.yaml");
    for region in ["cf-eu11", "cf-ch20", "cf-eu01", "cf-eu02", "cf-eu31"] {
        rt.spec.shoot.platform_region = region.into();
        assert_at(&convert(&rt), "/spec/accessRestrictions", expected.clone());
    }
    for region in ["cf-eu10", "cf-eu20", "cf-us10", ""] {
        rt.spec.shoot.platform_region = region.into();
        assert!(
            convert(&rt)["spec"].get("accessRestrictions").is_none(),
            "{region}"
        );
    }
}

/// OpenStack Shoots are exposed through KIM's exposure class; other providers get none.
#[test]
fn kim_openstack_exposure_class() {
    let mut rt = sample("aws-minimal.yaml");
    assert!(convert(&rt)["spec"].get("exposureClassName").is_none());
    rt.spec.shoot.provider.type_ = "openstack".into();
    rt.spec.shoot.region = "eu-de-1".into();
    rt.spec.shoot.provider.workers[0].zones = Some(vec!["eu-de-1a".into()]);
    assert_at(
        &convert(&rt),
        "/spec/exposureClassName",
        json!("converged-cloud-internet"),
    );
}

/// gVisor gets `net-raw: "true"` unless the Runtime sets the flag (Istio needs it).
#[test]
fn kim_gvisor_net_raw_default() {
    let gvisor = |provider_config: Option<Value>| {
        let mut rt = sample("aws-minimal.yaml");
        let mut runtime = json!({"type": "gvisor"});
        if let Some(pc) = provider_config {
            runtime["providerConfig"] = pc;
        }
        rt.spec.shoot.provider.workers[0].cri = Some(
            serde_json::from_value(json!({"name": "containerd", "containerRuntimes": [runtime]}))
                .unwrap(),
        );
        at(
            &convert(&rt),
            "/spec/provider/workers/0/cri/containerRuntimes/0/providerConfig",
        )
        .clone()
    };
    let api = "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1";
    assert_eq!(
        gvisor(None),
        json!({"apiVersion": api, "kind": "GVisorConfiguration",
               "configFlags": {"net-raw": "true"}})
    );
    assert_eq!(
        gvisor(Some(
            json!({"apiVersion": api, "kind": "GVisorConfiguration",
                           "configFlags": {"debug": "true"}})
        )),
        json!({"apiVersion": api, "kind": "GVisorConfiguration",
               "configFlags": {"debug": "true", "net-raw": "true"}})
    );
    assert_eq!(
        gvisor(Some(
            json!({"apiVersion": api, "kind": "GVisorConfiguration",
                           "configFlags": {"net-raw": "false"}})
        )),
        json!({"apiVersion": api, "kind": "GVisorConfiguration",
               "configFlags": {"net-raw": "false"}})
    );
}

fn with_max_pods(values: &[i64], pods: &str) -> Runtime {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.networking.pods = pods.into();
    let mut pools: Vec<Worker> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut w = rt.spec.shoot.provider.workers[0].clone();
            w.name = format!("pool-{i}");
            w.kubernetes =
                Some(serde_json::from_value(json!({"kubelet": {"maxPods": v}})).unwrap());
            w
        })
        .collect();
    rt.spec.shoot.provider.workers = vec![pools.remove(0)];
    rt.spec.shoot.provider.additional_workers = Some(pools);
    rt
}

fn max_pods_of(shoot: &Value) -> Vec<Value> {
    at(shoot, "/spec/provider/workers")
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kubernetes"]["kubelet"]["maxPods"].clone())
        .collect()
}

/// `maxPods` capped at 254 per pool (a /24 per node), then to what the pod range holds,
/// lowering the last pools first (KIM's maxpods extender).
#[test]
fn kim_max_pods_caps() {
    let shoot = convert(&with_max_pods(&[300, 110], "100.64.0.0/12"));
    assert_eq!(max_pods_of(&shoot), [json!(254), json!(110)]);
    // A /23 holds 510 pods: 200 + 200 + 200 → 200 + 200 + 110.
    let shoot = convert(&with_max_pods(&[200, 200, 200], "100.64.0.0/23"));
    assert_eq!(max_pods_of(&shoot), [json!(200), json!(200), json!(110)]);
    // A /31 holds 2 pods: three pools of at least 1 cannot fit.
    let err = convert_err(&with_max_pods(&[1, 1, 1], "100.64.0.0/31"));
    assert!(
        err.to_string().starts_with("spec.shoot.provider.workers: "),
        "{err}"
    );
    let err = convert_err(&with_max_pods(&[110], "fd00::/64"));
    assert!(
        err.to_string().starts_with("spec.shoot.networking.pods: "),
        "{err}"
    );
}

/// Only production Shoots get the configured window; the others get Gardener's.
#[test]
fn kim_maintenance_window_only_for_production() {
    let mut rt = sample("aws-minimal.yaml");
    assert_at(
        &convert(&rt),
        "/spec/maintenance/timeWindow",
        json!({"begin": "220000+0000", "end": "000000+0000"}),
    );
    for purpose in ["development", "evaluation", "testing"] {
        rt.spec.shoot.purpose = purpose.into();
        assert!(
            at(&convert(&rt), "/spec/maintenance")
                .get("timeWindow")
                .is_none(),
            "{purpose}"
        );
    }
}

/// AWS node ranges outside /16–/24 are refused before anything is written, naming the field.
#[test]
fn kim_aws_node_cidr_between_16_and_24() {
    let mut rt = sample("aws-minimal.yaml");
    for nodes in ["10.250.0.0/25", "10.240.0.0/12"] {
        rt.spec.shoot.networking.nodes = nodes.into();
        let err = convert_err(&rt);
        assert!(
            matches!(err, ConversionError::InvalidNodeCidr { .. }),
            "{nodes}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.shoot.networking.nodes: ") && msg.contains("/16 and /24"),
            "{msg}"
        );
    }
    rt.spec.shoot.networking.nodes = "10.250.0.0/24".into();
    assert!(runtime_to_shoot(&rt, &config()).is_ok());
}

/// A Shoot name that Gardener would refuse with the project's name (more than 21 characters
/// together) is refused before any write, naming the field and both names.
#[test]
fn shoot_and_project_name_longer_than_gardener_admits_are_refused() {
    let mut rt = sample("aws-minimal.yaml");
    let project = config().gardener.project;
    let fits = "a".repeat(21 - project.len());
    rt.spec.shoot.name = fits.clone();
    assert!(runtime_to_shoot(&rt, &config()).is_ok(), "{fits} fits");
    rt.spec.shoot.name = format!("{fits}b");
    let err = convert_err(&rt);
    assert!(
        matches!(&err, ConversionError::InvalidField { field, .. } if field == "spec.shoot.name"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&project) && msg.contains("22 characters") && msg.contains("21"),
        "{msg}"
    );
}

/// Audit logging as KIM's: the extension with the region's tenant, its credentials Secret
/// as resource `auditlog-credentials`, the audit policy ConfigMap.
#[test]
fn kim_audit_log() {
    let mut rt = sample("azure.yaml");
    let shoot = convert(&rt);
    assert_at(
        &shoot,
        "/spec/extensions/4",
        json!({"type": "shoot-auditlog-service", "providerConfig": {
            "apiVersion": "service.auditlog.extensions.gardener.cloud/v1alpha1",
            "kind": "AuditlogConfig", "type": "standard",
            "tenantID": "5e1f0000-0000-4000-8000-000000000004",
            "serviceURL": "https://auditlog.us20.example.com:8081",
            "secretReferenceName": "auditlog-credentials"}}),
    );
    assert_at(
        &shoot,
        "/spec/resources",
        json!([{"name": "auditlog-credentials", "resourceRef":
            {"apiVersion": "v1", "kind": "Secret", "name": "auditlog-secret"}}]),
    );
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer/auditConfig",
        json!({"auditPolicy": {"configMapRef": {"name": "audit-policy"}}}),
    );
    rt.metadata.annotations = Some(
        [(
            "operator.kyma-project.io/experimental-audit-policy".to_string(),
            "True".to_string(),
        )]
        .into(),
    );
    assert_at(
        &convert(&rt),
        "/spec/kubernetes/kubeAPIServer/auditConfig/auditPolicy/configMapRef/name",
        json!("experimental-audit-policy"),
    );
}

/// A region without a tenant fails as KIM's does while audit logging is mandatory (the
/// reconciler writes `AuditLogErr`); otherwise the Shoot has no audit logging.
#[test]
fn kim_audit_log_missing_tenant() {
    let mut rt = sample("aws-minimal.yaml");
    rt.spec.shoot.region = "ap-south-1".into();
    let err = convert_err(&rt);
    assert_eq!(
        err,
        ConversionError::AuditLogTenantMissing {
            provider: "aws".into(),
            region: "ap-south-1".into()
        }
    );
    assert!(err.to_string().starts_with("spec.shoot.region: "), "{err}");
    let mut c = config();
    c.audit_log.as_mut().unwrap().mandatory = false;
    let shoot = convert_with(&rt, &c);
    assert!(shoot["spec"].get("resources").is_none());
    assert!(
        at(&shoot, "/spec/kubernetes/kubeAPIServer")
            .get("auditConfig")
            .is_none()
    );
    let types: Vec<&Value> = at(&shoot, "/spec/extensions")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["type"])
        .collect();
    assert!(
        !types.contains(&&json!("shoot-auditlog-service")),
        "{types:?}"
    );
}

/// KIM's tolerations per region, feature gates and runtime config, from the configuration;
/// none configured writes none (an empty kubelet config, as KIM).
#[test]
fn kim_tolerations_feature_gates_and_runtime_config() {
    let rt = sample("aws-minimal.yaml");
    let shoot = convert(&rt);
    assert!(shoot["spec"].get("tolerations").is_none());
    let api = at(&shoot, "/spec/kubernetes/kubeAPIServer");
    assert!(api.get("featureGates").is_none() && api.get("runtimeConfig").is_none());
    let mut c = config();
    c.tolerations.insert(
        "eu-central-1".into(),
        vec![crate::api::Toleration {
            key: "ksa-assured-workload".into(),
            value: None,
        }],
    );
    c.kubernetes
        .feature_gates
        .kube_api_server
        .insert("MutatingAdmissionPolicy".into(), true);
    c.kubernetes
        .feature_gates
        .kubelet
        .insert("KubeletPodResourcesDynamicResources".into(), false);
    c.kubernetes
        .runtime_config
        .insert("admissionregistration.k8s.io/v1alpha1".into(), true);
    let shoot = convert_with(&rt, &c);
    assert_at(
        &shoot,
        "/spec/tolerations",
        json!([{"key": "ksa-assured-workload"}]),
    );
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer/featureGates",
        json!({"MutatingAdmissionPolicy": true}),
    );
    assert_at(
        &shoot,
        "/spec/kubernetes/kubeAPIServer/runtimeConfig",
        json!({"admissionregistration.k8s.io/v1alpha1": true}),
    );
    assert_at(
        &shoot,
        "/spec/kubernetes/kubelet",
        json!({"featureGates": {"KubeletPodResourcesDynamicResources": false}}),
    );
}
