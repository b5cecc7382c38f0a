//! kim's Shoots on a real gardener-apiserver (`testenv::garden`, Gardener v1.140.1, all default
//! admission plugins): every Runtime of `samples/runtimes`, converted by kim's converter with
//! the configuration of `docs/config.example.yaml`, is created with server-side dry-run and then
//! for real, and must be admitted. Gardener's warnings (deprecated fields) are collected and
//! printed: a Shoot whose DNS providers name their credentials by `secretName` draws its
//! deprecation on each write (measured 2026-12-02: "you are setting the
//! spec.dns.providers[0].secretName field. The field is deprecated and is forbidden to be set
//! starting from Kubernetes 1.35. Use spec.dns.providers[0].credentialsRef instead."), one
//! naming `credentialsRef` must draw none.
//!
//! One change to the samples: their `secretBindingName` "hyperscaler secret" is a placeholder
//! that cannot name any object (a space), so each Runtime names the fixtures' binding of its
//! provider, `hyperscaler-<provider type>`; that Gardener refuses the placeholder is asserted
//! too.
//!
//! Beyond the samples, one Runtime per provider (aws, azure, gcp, openstack) and feature
//! (additional worker pools, a single zone, an additional OIDC provider through structured
//! authentication, a zone-tolerant control plane, gVisor, dual-stack, the experimental audit
//! policy) is converted and created the same way; each Shoot must carry its feature and be
//! admitted.

use kim::api::Runtime;
use kim::testing::gardener::runtime_to_shoot;
use serde_json::{Value, json};
use testenv::controlplane::ControlPlane;
use testenv::garden;

use crate::support::reconciler::{config, samples_dir};

/// The Gardener project of these Shoots: a project of their own, so that other tests on the
/// same control plane may use the example's `kyma-dev`.
const PROJECT: &str = "samples";

fn shoot_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<kim::api::Shoot>(&())
}

/// Every `*.yaml` of `samples/runtimes` (file name, Runtime), in name order.
fn samples() -> Vec<(String, Runtime)> {
    let mut files: Vec<_> = std::fs::read_dir(samples_dir())
        .expect("samples/runtimes")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("sample readable");
            let rt: Runtime =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), rt)
        })
        .collect()
}

/// The structured-authentication ConfigMap a Shoot names (`kubeAPIServer.structuredAuthentication`),
/// as the reconciler creates it before the Shoot: one JWT authenticator for the Runtime's main
/// OIDC provider. `None` when the Shoot names none.
fn structured_auth_config_map(shoot: &Value, rt: &Runtime) -> Option<Value> {
    let name =
        shoot["spec"]["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]["configMapName"]
            .as_str()?;
    let oidc = rt
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.oidc_config.clone())
        .unwrap_or_default();
    let config = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {
                "url": oidc.issuer_url.unwrap_or_else(|| "https://issuer.example.com".into()),
                "audiences": [oidc.client_id.unwrap_or_else(|| "kim".into())],
            },
            "claimMappings": {"username": {"claim": "sub", "prefix": ""}},
        }],
    });
    Some(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"config.yaml": serde_json::to_string(&config).unwrap()},
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_sample_runtime_becomes_a_shoot_gardener_admits() {
    let cp = tokio::task::block_in_place(ControlPlane::shared_with_gardener);
    let client = cp.admin().await;
    garden::install_fixtures(&client, PROJECT)
        .await
        .expect("fixtures installed");
    let namespace = format!("garden-{PROJECT}");
    let mut config = config();
    config.gardener.project = PROJECT.to_string();
    let shoots = shoot_resource();

    let mut refusals = Vec::new();
    let mut report = Vec::new();
    let all = samples();
    assert!(all.len() >= 6, "{} samples", all.len());
    // Every sample as it is, then once more on Kubernetes 1.35, where Gardener forbids
    // `secretName`: kim's Shoots must be admitted there too, and without any warning.
    let mut cases: Vec<(String, Runtime)> = Vec::new();
    for (file, rt) in all {
        let mut newest = rt.clone();
        // A name Gardener admits in this project (kim refuses a longer one, see below).
        let stem: String = rt.spec.shoot.name.chars().take(12).collect();
        newest.spec.shoot.name = format!("{}-n", stem.trim_end_matches('-'));
        newest
            .spec
            .shoot
            .kubernetes
            .get_or_insert_with(Default::default)
            .version = Some("1.35.2".into());
        cases.push((file.clone(), rt));
        cases.push((format!("{file} on 1.35"), newest));
    }
    for (file, mut rt) in cases {
        let provider = rt.spec.shoot.provider.type_.clone();
        rt.spec.shoot.secret_binding_name = format!("hyperscaler-{provider}");
        let shoot = runtime_to_shoot(&rt, &config).unwrap_or_else(|e| panic!("{file}: {e}"));
        let shoot = serde_json::to_value(&shoot).unwrap();
        let name = shoot["metadata"]["name"].as_str().unwrap().to_string();
        if let Some(cm) = structured_auth_config_map(&shoot, &rt) {
            let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(client.clone(), &namespace);
            cms.create(
                &kube::api::PostParams::default(),
                &serde_json::from_value(cm).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("{file}: structured authentication ConfigMap: {e}"));
        }
        // kim names the DNS credentials by `credentialsRef` only, never by `secretName`.
        let providers = shoot["spec"]["dns"]["providers"].as_array();
        assert!(
            providers.is_some_and(|ps| ps
                .iter()
                .all(|p| p.get("secretName").is_none() && p.get("credentialsRef").is_some())),
            "{file}: DNS providers {providers:?}"
        );
        let newest = shoot["spec"]["kubernetes"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("1.35."));

        let mut warnings = Vec::new();
        let mut admitted = true;
        for dry_run in [true, false] {
            let mode = if dry_run { "dry-run" } else { "create" };
            match garden::create_with_warnings(&client, &shoots, Some(&namespace), &shoot, dry_run)
                .await
            {
                Ok((_, w)) => warnings.extend(w.into_iter().map(|w| format!("{mode}: {w}"))),
                Err(kube::Error::Api(s)) => {
                    refusals.push(format!("{file} ({mode}): {} {}", s.code, s.message));
                    admitted = false;
                    break;
                }
                Err(e) => panic!("{file} ({mode}): {e}"),
            }
        }
        // Below 1.35 Gardener copies `credentialsRef` back into `secretName` itself and then
        // warns of that field (measured with v1.140.1), so only 1.35 shows that kim's Shoot
        // draws no warning.
        if admitted && newest {
            assert!(warnings.is_empty(), "{file}: {warnings:?}");
        }
        report.push(format!(
            "{file} -> Shoot {namespace}/{name}: {}; warnings: {warnings:#?}",
            if admitted { "admitted" } else { "REFUSED" },
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        refusals.is_empty(),
        "Gardener refused:\n{}",
        refusals.join("\n")
    );

    // kim's name rule is Gardener's: one character more than kim admits, and Gardener refuses
    // the Shoot too (kim's refusal comes before any write).
    let (_, mut rt) = samples().into_iter().next().unwrap();
    let provider = rt.spec.shoot.provider.type_.clone();
    rt.spec.shoot.secret_binding_name = format!("hyperscaler-{provider}");
    let longest = "x".repeat(21 - PROJECT.len());
    rt.spec.shoot.name = format!("{longest}y");
    let err = runtime_to_shoot(&rt, &config).expect_err("kim refuses a name one too long");
    assert!(err.to_string().starts_with("spec.shoot.name: "), "{err}");
    rt.spec.shoot.name = longest.clone();
    let mut shoot = serde_json::to_value(runtime_to_shoot(&rt, &config).unwrap()).unwrap();
    if let Some(cm) = structured_auth_config_map(&shoot, &rt) {
        kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &namespace)
            .create(
                &kube::api::PostParams::default(),
                &serde_json::from_value(cm).unwrap(),
            )
            .await
            .expect("structured authentication ConfigMap");
    }
    shoot["metadata"]["name"] = json!(format!("{longest}y"));
    let refused =
        garden::create_with_warnings(&client, &shoots, Some(&namespace), &shoot, true).await;
    let Err(kube::Error::Api(s)) = refused else {
        panic!("Gardener admitted the Shoot name kim refuses: {refused:?}");
    };
    assert!(s.message.contains("21 characters"), "{}", s.message);
    shoot["metadata"]["name"] = json!(longest);
    garden::create_with_warnings(&client, &shoots, Some(&namespace), &shoot, true)
        .await
        .expect("the longest name kim admits is admitted by Gardener");

    // The samples' placeholder binding name is refused as such.
    let (_, mut rt) = samples().into_iter().next().unwrap();
    rt.spec.shoot.name = "placeholder".into();
    let shoot = serde_json::to_value(runtime_to_shoot(&rt, &config).unwrap()).unwrap();
    let refused =
        garden::create_with_warnings(&client, &shoots, Some(&namespace), &shoot, true).await;
    let Err(kube::Error::Api(s)) = refused else {
        panic!(
            "a binding named {:?} was admitted",
            rt.spec.shoot.secret_binding_name
        );
    };
    eprintln!(
        "Gardener refuses \"hyperscaler secret\": {} {}",
        s.code, s.message
    );
    assert!(
        s.message.contains("hyperscaler secret"),
        "the refusal names the binding: {}",
        s.message
    );
}

/// The project of [`every_provider_and_feature_becomes_a_shoot_gardener_admits`].
const FEATURES_PROJECT: &str = "features";

/// A provider's Runtime values the fixtures' CloudProfile offers: (name prefix, provider
/// type, region with an audit log tenant, machine type, volume type (none: OpenStack pools
/// have no volume), the region's zones).
type ProviderCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    [&'static str; 3],
);

const PROVIDERS: &[ProviderCase] = &[
    (
        "aws",
        "aws",
        "eu-central-1",
        "m6i.large",
        Some("gp3"),
        ["eu-central-1a", "eu-central-1b", "eu-central-1c"],
    ),
    (
        "az",
        "azure",
        "westeurope",
        "Standard_D2s_v5",
        Some("StandardSSD_LRS"),
        ["1", "2", "3"],
    ),
    (
        "gcp",
        "gcp",
        "europe-west3",
        "n2-standard-2",
        Some("pd-balanced"),
        ["europe-west3-a", "europe-west3-b", "europe-west3-c"],
    ),
    (
        "os",
        "openstack",
        "eu-de-1",
        "g_c2_m8",
        None,
        ["eu-de-1a", "eu-de-1b", "eu-de-1d"],
    ),
];

/// A feature: (name suffix, the change of a provider's base Runtime).
type Feature = (&'static str, fn(&mut Value, &ProviderCase));

/// The features, each a change of a provider's base Runtime (a pool over three zones, HA
/// control plane tolerating node failures, the default Kubernetes version): (name suffix,
/// change).
fn features() -> Vec<Feature> {
    fn pool(p: &ProviderCase, name: &str, zones: &[&str]) -> Value {
        let mut w = json!({
            "name": name,
            "machine": {"type": p.3},
            "zones": zones,
            "minimum": zones.len(), "maximum": 3 * zones.len(),
            "maxSurge": zones.len(), "maxUnavailable": 0,
        });
        if let Some(volume) = p.4 {
            w["volume"] = json!({"type": volume, "size": "50Gi"});
        }
        w
    }
    vec![
        ("base", |_, _| {}),
        ("workers", |rt, p| {
            rt["spec"]["shoot"]["provider"]["additionalWorkers"] =
                json!([pool(p, "extra", &p.5[..2]), pool(p, "extra2", &p.5[2..])]);
        }),
        ("zone1", |rt, p| {
            rt["spec"]["shoot"]["provider"]["workers"] = json!([pool(p, "worker-0", &p.5[..1])]);
        }),
        ("oidc", |rt, _| {
            let shoot = &mut rt["spec"]["shoot"];
            shoot["kubernetes"]["version"] = json!("1.33.5");
            shoot["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] = json!([{
                "clientID": "second-client",
                "issuerURL": "https://second.issuer.example.com",
                "groupsClaim": "groups",
                "usernameClaim": "email",
                "usernamePrefix": "second:",
                "signingAlgs": ["RS256"],
            }]);
        }),
        ("ha", |rt, _| {
            rt["spec"]["shoot"]["controlPlane"]["highAvailability"]["failureTolerance"]["type"] =
                json!("zone");
        }),
        ("gvisor", |rt, _| {
            rt["spec"]["shoot"]["provider"]["workers"][0]["cri"] =
                json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]});
        }),
        ("dual", |rt, _| {
            rt["spec"]["shoot"]["networking"]["dualStack"] = json!(true);
        }),
        ("audit", |rt, _| {
            rt["metadata"]["annotations"]["operator.kyma-project.io/experimental-audit-policy"] =
                json!("true");
        }),
    ]
}

/// Whether kim's `shoot` carries `feature` of [`features`] (dual-stack: kim writes none, see
/// docs/reconciler.md, "Shoots equal to KIM's", so its Shoot is single-stack IPv4).
fn carries(feature: &str, shoot: &Value) -> bool {
    let spec = &shoot["spec"];
    let workers = spec["provider"]["workers"].as_array().map_or(0, Vec::len);
    match feature {
        "base" => {
            workers == 1
                && spec["provider"]["workers"][0]["zones"]
                    .as_array()
                    .map_or(0, Vec::len)
                    == 3
        }
        "workers" => workers == 3,
        "zone1" => {
            spec["provider"]["workers"][0]["zones"]
                .as_array()
                .map_or(0, Vec::len)
                == 1
        }
        "oidc" => spec["kubernetes"]["kubeAPIServer"]["structuredAuthentication"]["configMapName"]
            .is_string(),
        "ha" => spec["controlPlane"]["highAvailability"]["failureTolerance"]["type"] == "zone",
        "gvisor" => {
            spec["provider"]["workers"][0]["cri"]["containerRuntimes"][0]["type"] == "gvisor"
        }
        "dual" => spec["networking"].get("ipFamilies").is_none(),
        "audit" => {
            spec["kubernetes"]["kubeAPIServer"]["auditConfig"]["auditPolicy"]["configMapRef"]["name"]
                == "experimental-audit-policy"
        }
        _ => false,
    }
}

/// The base Runtime of provider `p` named `name`: `aws-minimal.yaml` with the provider's
/// type, region, machine, volume, zones and binding.
fn provider_runtime(p: &ProviderCase, name: &str) -> Value {
    let path = samples_dir().join("aws-minimal.yaml");
    let text = std::fs::read_to_string(&path).expect("aws-minimal.yaml");
    let mut rt: Value = serde_saphyr::from_str(&text).expect("the sample");
    rt["metadata"]["name"] = json!(name);
    rt["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!(name);
    rt["metadata"]["labels"]["kyma-project.io/shoot-name"] = json!(name);
    let shoot = &mut rt["spec"]["shoot"];
    shoot["name"] = json!(name);
    shoot["region"] = json!(p.2);
    shoot["secretBindingName"] = json!(format!("hyperscaler-{}", p.1));
    shoot["provider"]["type"] = json!(p.1);
    let worker = &mut shoot["provider"]["workers"][0];
    worker["machine"]["type"] = json!(p.3);
    worker["zones"] = json!(p.5);
    match p.4 {
        Some(volume) => worker["volume"]["type"] = json!(volume),
        None => {
            worker.as_object_mut().unwrap().remove("volume");
        }
    }
    rt
}

#[tokio::test(flavor = "multi_thread")]
async fn every_provider_and_feature_becomes_a_shoot_gardener_admits() {
    let cp = tokio::task::block_in_place(ControlPlane::shared_with_gardener);
    let client = cp.admin().await;
    garden::install_fixtures(&client, FEATURES_PROJECT)
        .await
        .expect("fixtures installed");
    let namespace = format!("garden-{FEATURES_PROJECT}");
    let mut config = config();
    config.gardener.project = FEATURES_PROJECT.to_string();
    let shoots = shoot_resource();

    let mut refusals = Vec::new();
    let mut report = Vec::new();
    for p in PROVIDERS {
        for (feature, change) in features() {
            let name = format!("{}-{feature}", p.0);
            let mut value = provider_runtime(p, &name);
            change(&mut value, p);
            let case = format!("{} × {feature}", p.1);
            let rt: Runtime =
                serde_json::from_value(value).unwrap_or_else(|e| panic!("{case}: {e}"));
            let shoot = match runtime_to_shoot(&rt, &config) {
                Ok(s) => serde_json::to_value(&s).unwrap(),
                Err(e) => {
                    refusals.push(format!("{case}: kim's converter: {e}"));
                    report.push(format!("{case}: kim refused: {e}"));
                    continue;
                }
            };
            assert!(
                carries(feature, &shoot),
                "{case}: the Shoot does not carry the feature: {shoot:#}"
            );
            if let Some(cm) = structured_auth_config_map(&shoot, &rt) {
                kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                    client.clone(),
                    &namespace,
                )
                .create(
                    &kube::api::PostParams::default(),
                    &serde_json::from_value(cm).unwrap(),
                )
                .await
                .unwrap_or_else(|e| panic!("{case}: structured authentication ConfigMap: {e}"));
            }
            let mut outcome = "admitted (dry-run and create)".to_string();
            let mut warnings = Vec::new();
            for dry_run in [true, false] {
                let mode = if dry_run { "dry-run" } else { "create" };
                match garden::create_with_warnings(
                    &client,
                    &shoots,
                    Some(&namespace),
                    &shoot,
                    dry_run,
                )
                .await
                {
                    Ok((_, w)) => warnings.extend(w.into_iter().map(|w| format!("{mode}: {w}"))),
                    Err(kube::Error::Api(s)) => {
                        refusals.push(format!("{case} ({mode}): {} {}", s.code, s.message));
                        outcome = format!("REFUSED ({mode})");
                        break;
                    }
                    Err(e) => panic!("{case} ({mode}): {e}"),
                }
            }
            report.push(format!(
                "{case} -> Shoot {namespace}/{name}: {outcome}; warnings: {warnings:?}"
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(refusals.is_empty(), "refused:\n{}", refusals.join("\n"));
}
