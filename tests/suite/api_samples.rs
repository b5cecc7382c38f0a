//! Every real Runtime manifest in `samples/runtimes/` reads into [`Runtime`] and writes
//! back to exactly the same JSON (no field lost, none invented); so do a Runtime with a full
//! status and one that sets every optional spec field the samples leave out.

use kim::api::{Runtime, RuntimeStatus};
use kim::status::State;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// `samples/runtimes/` of the repository.
fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/runtimes")
}

fn load_sample(file: &str) -> Value {
    let path = samples_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The first place where `a` and `b` differ, as a JSON path, for readable failures.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                let p = format!("{path}.{k}");
                match y.get(k) {
                    None => return Some(format!("{p}: lost (was {v})")),
                    Some(w) => {
                        if let Some(d) = first_difference(v, w, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k}: invented ({})", y[k]))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} became {b}")),
    }
}

/// Value -> Runtime -> Value, asserting equality; returns the typed Runtime.
fn round_trip(original: &Value, what: &str) -> Runtime {
    let runtime: Runtime = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{what}: does not deserialize into Runtime: {e}"));
    let back = serde_json::to_value(&runtime).expect("Runtime serialises");
    if let Some(diff) = first_difference(original, &back, "") {
        panic!("{what}: round trip changed the object at {diff}");
    }
    assert_eq!(original, &back, "{what}: round trip changed the object");
    runtime
}

fn round_trip_sample(file: &str) -> Runtime {
    let original = load_sample(file);
    assert_eq!(original["kind"], "Runtime", "{file}");
    let runtime = round_trip(&original, file);
    assert!(runtime.status.is_none(), "{file}: samples carry no status");
    assert_eq!(
        runtime.metadata.namespace.as_deref(),
        Some("kcp-system"),
        "{file}"
    );
    runtime
}

macro_rules! sample_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                round_trip_sample($file);
            }
        )*

        /// Files covered by a test above.
        const SAMPLE_FILES: &[&str] = &[$($file),*];
    };
}

sample_tests! {
    sample_infrastructuremanager_v1_runtime => "infrastructuremanager_v1_runtime.yaml",
    sample_aws => "aws.yaml",
    sample_aws_minimal => "aws-minimal.yaml",
    sample_aws_trial => "aws-trial.yaml",
    sample_azure => "azure.yaml",
    sample_azure_fremium => "azure-fremium.yaml",
}

/// A new sample file must get its own test above.
#[test]
fn every_sample_file_has_a_test() {
    let mut on_disk: Vec<String> = std::fs::read_dir(samples_dir())
        .expect("samples dir exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    on_disk.sort();
    let mut covered: Vec<String> = SAMPLE_FILES.iter().map(|s| s.to_string()).collect();
    covered.sort();
    assert_eq!(on_disk, covered);
}

/// Typed access to the fields the reconciler reads, on the richest sample.
#[test]
fn annotated_sample_reads_into_typed_fields() {
    let rt = round_trip_sample("infrastructuremanager_v1_runtime.yaml");
    let shoot = &rt.spec.shoot;
    assert_eq!(rt.shoot_name(), "shoot-name");
    assert_eq!(shoot.provider.type_, "aws");
    assert_eq!(shoot.enforce_seed_location, Some(true));
    assert_eq!(
        shoot.networking.type_, None,
        "networking.type is absent here"
    );
    let api = shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .expect("kubeAPIServer");
    assert_eq!(
        api.oidc_config
            .as_ref()
            .and_then(|o| o.client_id.as_deref()),
        Some("xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
    );
    let extra = api
        .additional_oidc_config
        .as_ref()
        .expect("additional OIDC");
    assert_eq!(extra[0].oidc.username_prefix.as_deref(), Some("someother"));
    assert_eq!(
        api.acl
            .as_ref()
            .and_then(|a| a.allowed_cidrs.as_ref())
            .map(Vec::len),
        Some(3)
    );
    let worker = &shoot.provider.workers[0];
    assert_eq!(worker.name, "cpu-worker-0");
    assert_eq!((worker.minimum, worker.maximum), (3, 20));
    let cri = worker.cri.as_ref().expect("cri");
    let gvisor = &cri.container_runtimes.as_ref().expect("runtimes")[0];
    assert_eq!(gvisor.type_, "gvisor");
    assert_eq!(
        gvisor.provider_config.as_ref().expect("providerConfig")["kind"],
        "GVisorConfiguration"
    );
    assert_eq!(rt.spec.security.administrators, ["admin@myorg.com"]);
    assert!(!rt.spec.security.networking.filter.egress.enabled);
    assert!(rt.missing_required_labels().is_empty());
}

/// A Runtime with every status field set, as KIM writes it.
fn runtime_with_full_status() -> Value {
    let mut rt = load_sample("aws.yaml");
    rt["status"] = json!({
        "state": "Ready",
        "provisioningCompleted": true,
        "conditions": [
            {
                "type": "Provisioned",
                "status": "True",
                "reason": "ShootCreationCompleted",
                "message": "Shoot creation completed",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "observedGeneration": 1
            },
            {
                "type": "KubeconfigReady",
                "status": "True",
                "reason": "GardenerClusterCRReady",
                "message": "Gardener Cluster CR is ready.",
                "lastTransitionTime": "2024-05-01T10:05:00Z"
            },
            {
                "type": "Configured",
                "status": "True",
                "reason": "AdministratorsConfigured",
                "message": "",
                "lastTransitionTime": "2024-05-01T10:06:30Z",
                "observedGeneration": 1
            }
        ],
        "shootLastOperation": {
            "type": "Reconcile",
            "state": "Succeeded",
            "description": "Shoot cluster has been successfully reconciled.",
            "lastUpdateTime": "2024-05-01T10:04:59Z",
            "progress": 100
        },
        "shootLastErrors": [
            {
                "description": "task \"Waiting until shoot infrastructure has been reconciled\" failed: quota exceeded",
                "codes": ["ERR_INFRA_QUOTA_EXCEEDED", "ERR_RETRYABLE_INFRA_DEPENDENCIES"],
                "taskID": "Waiting until shoot infrastructure has been reconciled",
                "lastUpdateTime": "2024-05-01T09:58:00Z"
            },
            { "description": "a bare error" }
        ]
    });
    rt
}

#[test]
fn full_status_round_trips() {
    let original = runtime_with_full_status();
    let rt = round_trip(&original, "runtime with full status");
    let status = rt.status.expect("status");
    assert_eq!(status.state, Some(State::Ready));
    assert_eq!(status.provisioning_completed, Some(true));
    assert_eq!(status.conditions.len(), 3);
    assert_eq!(status.conditions[0].observed_generation, Some(1));
    assert_eq!(status.conditions[1].observed_generation, None);
    assert_eq!(status.conditions[2].message, "");
    let op = status.shoot_last_operation.expect("last operation");
    assert_eq!((op.type_.as_str(), op.progress), ("Reconcile", 100));
    assert_eq!(status.shoot_last_errors.len(), 2);
    assert_eq!(
        status.shoot_last_errors[0].task_id.as_deref(),
        Some("Waiting until shoot infrastructure has been reconciled")
    );
    assert_eq!(status.shoot_last_errors[1].codes, None);
}

#[test]
fn every_state_round_trips() {
    for state in State::ALL {
        let mut v = load_sample("aws-minimal.yaml");
        v["status"] = json!({ "state": state.as_str() });
        let rt = round_trip(&v, state.as_str());
        assert_eq!(rt.status.and_then(|s| s.state), Some(state));
    }
}

#[test]
fn empty_status_writes_nothing() {
    let status = serde_json::to_value(RuntimeStatus::default()).expect("serialises");
    assert_eq!(status, json!({}));
}

#[test]
fn unknown_state_is_rejected() {
    let mut v = load_sample("aws-minimal.yaml");
    v["status"] = json!({ "state": "Processing" });
    assert!(serde_json::from_value::<Runtime>(v).is_err());
}

/// Every optional spec field the samples leave out (upstream KIM + Gardener `Worker`).
#[test]
fn every_optional_spec_field_round_trips() {
    let mut v = load_sample("azure.yaml");
    let shoot = &mut v["spec"]["shoot"];
    shoot["licenceType"] = json!("TestDevelopmentAndDemo");
    shoot["enableNvidiaOpenshell"] = json!(false);
    shoot["networking"]["dualStack"] = json!(true);
    shoot["networking"]["vpcNetwork"] = json!("vpc-1");
    let api = &mut shoot["kubernetes"]["kubeAPIServer"];
    api["oidcConfig"]["caBundle"] = json!("-----BEGIN CERTIFICATE-----\n...");
    api["oidcConfig"]["groupsPrefix"] = json!("oidc:");
    api["oidcConfig"]["requiredClaims"] = json!({ "aud": "kyma" });
    api["oidcConfig"]["clientAuthentication"] =
        json!({ "secret": "s3cr3t", "extraConfig": { "k": "v" } });
    api["additionalOidcConfig"][0]["jwks"] = json!("eyJrZXlzIjpbXX0=");
    api["acl"] = json!({ "allowedCIDRs": [] });
    let provider = &mut shoot["provider"];
    provider["controlPlaneConfig"] = json!({
        "apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1",
        "kind": "ControlPlaneConfig"
    });
    provider["infrastructureConfig"] = json!({
        "apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1",
        "kind": "InfrastructureConfig",
        "networks": { "vnet": { "cidr": "10.250.0.0/22" }, "zones": [{ "name": 1, "workers": "10.250.0.0/25" }] },
        "zoned": true
    });
    provider["additionalWorkers"] = json!([{
        "name": "gpu",
        "machine": { "type": "Standard_NC4as_T4_v3", "architecture": "amd64",
                     "image": { "name": "gardenlinux", "providerConfig": { "k": 1 } } },
        "minimum": 0,
        "maximum": 2,
        "maxSurge": "25%",
        "maxUnavailable": "0%",
        "annotations": { "a": "b" },
        "labels": { "pool": "gpu" },
        "taints": [
            { "key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule" },
            { "key": "k", "effect": "NoExecute", "timeAdded": "2024-05-01T10:00:00Z" }
        ],
        "caBundle": "-----BEGIN CERTIFICATE-----\n...",
        "clusterAutoscaler": {
            "scaleDownUtilizationThreshold": 0.5,
            "scaleDownGpuUtilizationThreshold": 0.25,
            "scaleDownUnneededTime": "30m",
            "scaleDownUnreadyTime": "20m",
            "maxNodeProvisionTime": "15m"
        },
        "controlPlane": {},
        "cri": { "name": "containerd" },
        "dataVolumes": [{ "name": "data", "size": "100Gi", "type": "Premium_LRS", "encrypted": true }],
        "kubeletDataVolumeName": "data",
        "kubernetes": { "version": "1.30.1", "kubelet": { "maxPods": 64, "kubeReserved": { "cpu": "80m" } } },
        "machineControllerManager": {
            "machineDrainTimeout": "2h",
            "machineHealthTimeout": "10m",
            "machineCreationTimeout": "20m",
            "maxEvictRetries": 30,
            "nodeConditions": ["ReadonlyFilesystem"],
            "inPlaceUpdateTimeout": "1h",
            "disableHealthTimeout": false
        },
        "priority": 10,
        "providerConfig": { "apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1", "kind": "WorkerConfig" },
        "sysctls": { "net.ipv4.ip_forward": "1" },
        "systemComponents": { "allow": false },
        "updateStrategy": "AutoRollingUpdate",
        "volume": { "name": "root", "size": "80Gi", "type": "StandardSSD_LRS", "encrypted": true },
        "zones": []
    }]);
    v["spec"]["imageRegistryCache"] = json!([{
        "name": "cache-config",
        "namespace": "kyma-system",
        "uid": "0b1e2c3d-aaaa-bbbb-cccc-000000000000",
        "config": { "upstream": "docker.io", "volume": { "size": "10Gi" } }
    }]);
    let rt = round_trip(&v, "runtime with every optional field");
    let extra = rt
        .spec
        .shoot
        .provider
        .additional_workers
        .expect("additional workers");
    assert_eq!(extra[0].taints.as_ref().map(Vec::len), Some(2));
    assert_eq!(rt.spec.image_registry_cache.map(|c| c.len()), Some(1));
}

/// Absent optional objects stay absent, empty ones stay empty.
#[test]
fn absent_and_empty_are_kept_apart() {
    let mut v = load_sample("aws-minimal.yaml");
    v["spec"]["shoot"]["provider"]["workers"][0]["zones"] = json!([]);
    v["spec"]["imageRegistryCache"] = json!([]);
    round_trip(&v, "empty lists");
    let v = load_sample("aws-minimal.yaml");
    let back = serde_json::to_value(round_trip(&v, "minimal")).expect("serialises");
    assert!(back["spec"].get("imageRegistryCache").is_none());
    assert!(back["spec"]["shoot"].get("enforceSeedLocation").is_none());
    assert!(back.get("status").is_none());
}
