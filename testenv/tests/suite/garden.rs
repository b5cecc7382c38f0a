//! The real Gardener API (`testenv::garden`): gardener-apiserver aggregated behind the control
//! plane's kube-apiserver, the fixtures a Shoot needs, Gardener's own admission of a
//! hand-written Shoot and its refusal of one, gardener-apiserver SIGKILLed and started again,
//! nothing left behind by a SIGKILLed supervisor, and a control plane on a given RSA CA.

use std::sync::atomic::{AtomicU32, Ordering};

use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use testenv::controlplane::{ControlPlane, Options, RsaCa};
use testenv::garden;

use crate::support::{shoot_resource, shoots, status};

/// A Shoot name unique in this process: Gardener allows at most 21 characters for project
/// and Shoot name together (`kyma-dev` leaves 13).
fn shoot_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}", N.fetch_add(1, Ordering::Relaxed))
}

/// An AWS Shoot written by hand, with only values the fixtures offer.
fn hand_written_shoot(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Shoot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "cloudProfile": {"kind": "CloudProfile", "name": "aws"},
            "region": "eu-central-1",
            "purpose": "evaluation",
            "credentialsBindingName": "hyperscaler-aws",
            "kubernetes": {"version": "1.35.2"},
            // The DNS provider's credentials by `credentialsRef` (`secretName` is forbidden
            // from Kubernetes 1.35 on).
            "dns": {
                "domain": format!("{name}.dev.kyma.example.com"),
                "providers": [{
                    "type": "aws-route53",
                    "primary": true,
                    "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": "route53-secret"},
                }],
            },
            "networking": {
                "type": "calico",
                "nodes": "10.250.0.0/16",
                "pods": "100.64.0.0/12",
                "services": "100.104.0.0/13",
            },
            "provider": {
                "type": "aws",
                "workers": [{
                    "name": "worker-0",
                    "machine": {
                        "type": "m6i.large",
                        "image": {"name": "gardenlinux", "version": "1592.1.0"},
                    },
                    "volume": {"type": "gp3", "size": "50Gi"},
                    "zones": ["eu-central-1a"],
                    "minimum": 1,
                    "maximum": 2,
                    "maxSurge": 1,
                    "maxUnavailable": 0,
                }],
            },
        },
    })
}

/// The control plane with Gardener of this test binary, the fixtures installed (once; an
/// apply, so each test may call it).
async fn garden() -> (&'static ControlPlane, kube::Client, String) {
    let cp = tokio::task::block_in_place(ControlPlane::shared_with_gardener);
    let client = cp.admin().await;
    garden::install_fixtures(&client, garden::DEFAULT_PROJECT)
        .await
        .expect("fixtures installed");
    (cp, client, format!("garden-{}", garden::DEFAULT_PROJECT))
}

#[tokio::test(flavor = "multi_thread")]
async fn gardener_admits_a_hand_written_shoot_and_refuses_a_machine_type_not_in_the_profile() {
    let (_cp, client, ns) = garden().await;
    let name = shoot_name("hand");
    let shoot = hand_written_shoot(&name, &ns);
    let api = shoots(&client, &ns);

    let (dry, warnings) =
        garden::create_with_warnings(&client, &shoot_resource(), Some(&ns), &shoot, true)
            .await
            .expect("dry-run admitted");
    assert_eq!(dry.metadata.name.as_deref(), Some(name.as_str()));
    // Gardener defaulted it (e.g. the maintenance window), and stored nothing.
    assert!(dry.data["spec"]["maintenance"]["timeWindow"]["begin"].is_string());
    assert!(api.get_opt(&name).await.unwrap().is_none());
    assert_eq!(warnings, Vec::<String>::new(), "no deprecated field");

    let (created, _) =
        garden::create_with_warnings(&client, &shoot_resource(), Some(&ns), &shoot, false)
            .await
            .expect("created");
    let read = api.get(&name).await.expect("read back");
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(
        read.data["spec"]["provider"]["workers"][0]["machine"]["type"],
        "m6i.large"
    );
    assert_eq!(read.data["spec"]["kubernetes"]["version"], "1.35.2");

    let mut foreign = hand_written_shoot(&shoot_name("hand"), &ns);
    foreign["spec"]["provider"]["workers"][0]["machine"]["type"] = json!("m6i.huge");
    let refused = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &serde_json::from_value::<DynamicObject>(foreign).unwrap(),
        )
        .await
        .expect_err("an unknown machine type is refused");
    let s = status(refused);
    eprintln!("Gardener refuses m6i.huge: {} {}", s.code, s.message);
    // Refused by Gardener's admission (ShootValidator), hence Forbidden.
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
    assert!(
        s.message
            .contains("spec.provider.workers[0].machine.type: Unsupported value: \"m6i.huge\""),
        "{}",
        s.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gardener_apiserver_killed_and_started_again_serves_its_data() {
    let cp = tokio::task::block_in_place(|| {
        ControlPlane::start_with(Options {
            gardener: true,
            ca: None,
        })
    })
    .expect("control plane with Gardener");
    let client = cp.admin().await;
    garden::install_fixtures(&client, garden::DEFAULT_PROJECT)
        .await
        .expect("fixtures");
    let ns = format!("garden-{}", garden::DEFAULT_PROJECT);
    let api = shoots(&client, &ns);
    let name = shoot_name("kill");
    api.create(
        &PostParams::default(),
        &serde_json::from_value::<DynamicObject>(hand_written_shoot(&name, &ns)).unwrap(),
    )
    .await
    .expect("created");

    let (etcd, apiserver) = cp.pids();
    let old = cp.gardener_pid().expect("gardener-apiserver started");
    cp.kill_gardener().expect("killed");
    assert!(
        !std::path::Path::new(&format!("/proc/{old}")).exists(),
        "reaped"
    );
    assert!(!cp.running());
    // kube-apiserver answers for the missing aggregated server (a client of its own: kube's
    // default client retries a 503 for minutes).
    let down = shoots(&cp.admin_without_retries().await, &ns)
        .list(&ListParams::default())
        .await
        .expect_err("no Gardener API");
    assert_eq!(status(down).code, 503);

    let took = tokio::task::block_in_place(|| cp.start_gardener()).expect("started again");
    eprintln!("gardener-apiserver available again in {took:?}");
    let new = cp.gardener_pid().unwrap();
    assert_ne!(new, old);
    assert!(cp.running());
    let listed = api.list(&ListParams::default()).await.expect("listed");
    assert_eq!(
        listed
            .items
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec![name]
    );

    drop(cp);
    for pid in [etcd, apiserver, new] {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived the control plane"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_rsa_ca_from_openssl_signs_a_control_plane() {
    let ca = RsaCa::generate("runtime ca-client").expect("RSA CA");
    assert!(
        ca.key_pkcs1_pem
            .starts_with("-----BEGIN RSA PRIVATE KEY-----")
    );
    assert!(ca.key_pkcs8_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    // One key in two encodings: openssl reads each and derives the same public key.
    let public = |key: &str| {
        let mut child = std::process::Command::new("openssl")
            .args(["pkey", "-pubout"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("openssl");
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(key.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(public(&ca.key_pkcs1_pem), public(&ca.key_pkcs8_pem));
    rcgen::KeyPair::from_pem(&ca.key_pkcs8_pem).expect("rcgen reads the PKCS#8 key");
    assert!(!format!("{ca:?}").contains("PRIVATE"), "Debug shows no key");

    let cp = tokio::task::block_in_place(|| {
        ControlPlane::start_with(Options {
            gardener: false,
            ca: Some(ca.clone()),
        })
    })
    .expect("control plane on the RSA CA");
    assert_eq!(cp.ca_pem(), ca.cert_pem);
    // A certificate the CA signs outside the control plane is a cluster admin there, over TLS
    // verified against the same CA.
    let user = ca
        .client_cert("runtime-admin", &["system:masters"])
        .expect("client certificate");
    let client = cp.client(&user).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("listed as runtime-admin")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");
}

/// The supervisor SIGKILLed (no clean-up of its own): gardener-apiserver goes with
/// kube-apiserver and etcd (`setpriv --pdeathsig`), and the handle removes the directory.
#[test]
fn a_killed_supervisor_takes_gardener_apiserver_with_it() {
    let cp = ControlPlane::start_with(Options {
        gardener: true,
        ca: None,
    })
    .expect("control plane with Gardener");
    let (etcd, apiserver) = cp.pids();
    let gardener = cp.gardener_pid().expect("gardener-apiserver started");
    let dir = cp.dir().to_path_buf();
    let supervisor = cp.supervisor_pid().expect("running");
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &supervisor.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    // The kernel delivers the parent-death signal when the supervisor exits; the servers are
    // not this process's children, so their end is seen in /proc (reaped by init).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
            .is_some_and(|state| !state.starts_with('Z') && !state.starts_with('X'))
    };
    while [etcd, apiserver, gardener].into_iter().any(alive) {
        assert!(
            std::time::Instant::now() < deadline,
            "servers outlived their supervisor: etcd {}, kube-apiserver {}, gardener-apiserver {}",
            alive(etcd),
            alive(apiserver),
            alive(gardener)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(cp);
    assert!(!dir.exists(), "{} still exists", dir.display());
}
