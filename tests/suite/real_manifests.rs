//! Every kustomize directory of `manifests/` and every render of the Helm chart, applied as a
//! user applies them, against a real kube-apiserver: `kubectl kustomize <dir>` (or `helm
//! template`), then `kubectl apply --server-side --dry-run=server -f -` as the cluster admin on a
//! control plane serving kim's CRD, with namespaces `kcp-system` and `kim-system` created (a
//! server dry run creates nothing, so the base's own Namespace cannot make room for the
//! objects after it; and the monitoring overlay is applied next to a deploying one).
//!
//! The server judges every object (schema, defaulting, the admission chain; nothing stored).
//! Objects of kinds it does not serve — cert-manager's Issuer and Certificate, the Prometheus
//! Operator's ServiceMonitor and PrometheusRule — are named per directory and checked against
//! the expected list; each is also sent to kubectl alone, which must fail with the server's
//! "no matches for kind", so none is dropped without being seen.

use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::Discovery;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use testenv::controlplane::ControlPlane;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A finished command.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `bin args` in the repository root with `stdin`, `HOME` and `KUBECONFIG` of `env`, and
/// prints the command and what it wrote (of a render, the size only).
fn run(env: &Env, bin: &Path, args: &[&str], stdin: Option<&str>) -> Out {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .current_dir(repo())
        .env("HOME", env.home.path())
        .env("KUBECONFIG", &env.kubeconfig)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        cmd.env_remove(var);
    }
    let mut child = cmd.spawn().expect("spawn");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    let out = Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    let render = matches!(args.first(), Some(&"kustomize" | &"template"));
    eprintln!(
        "$ {name} {}{}\n{}{}{}",
        args.join(" "),
        stdin
            .map(|t| format!("   # stdin: {} documents", t.split("\n---\n").count()))
            .unwrap_or_default(),
        if render {
            format!("({} lines of YAML)\n", out.stdout.lines().count())
        } else {
            out.stdout.clone()
        },
        out.stderr,
        if out.ok {
            ""
        } else {
            "(exit status non-zero)\n"
        }
    );
    out
}

/// A control plane serving kim's CRD, with kubectl's kubeconfig and home, and discovery.
struct Env {
    cp: ControlPlane,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
    discovery: Discovery,
}

/// `Kind namespace/name` of a document (`Kind name` when cluster-scoped).
fn label(doc: &Value) -> String {
    let s = |k: &str| doc["metadata"][k].as_str().unwrap_or_default();
    match s("namespace") {
        "" => format!("{} {}", doc["kind"].as_str().unwrap_or_default(), s("name")),
        ns => format!(
            "{} {ns}/{}",
            doc["kind"].as_str().unwrap_or_default(),
            s("name")
        ),
    }
}

fn docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("the rendered YAML parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The documents as one YAML stream (JSON documents, which are YAML).
fn stream(docs: &[&Value]) -> String {
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

impl Env {
    async fn start() -> Env {
        let test = "every_directory_and_chart_render_is_accepted_by_the_server";
        let kubectl = testenv::tools::require("kubectl", test);
        let helm = testenv::tools::require("helm", test);
        let cp = tokio::task::spawn_blocking(ControlPlane::start)
            .await
            .expect("join")
            .expect("control plane");
        let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).unwrap();
        cp.install_crds(&crd).await.expect("kim's CRD installs");
        for ns in ["kcp-system", "kim-system"] {
            cp.create_namespace(ns).await;
        }
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = home.path().join("kubeconfig");
        std::fs::write(&kubeconfig, cp.kubeconfig(cp.admin_cert())).unwrap();
        let discovery = Discovery::new(cp.admin().await)
            .run()
            .await
            .expect("discovery");
        Env {
            cp,
            home,
            kubeconfig,
            kubectl,
            helm,
            discovery,
        }
    }

    /// Whether the server serves the document's kind.
    fn serves(&self, doc: &Value) -> bool {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = doc["kind"].as_str().unwrap_or_default();
        self.discovery
            .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
            .is_some()
    }

    /// Server-side dry-run applies `text` (the YAML of `source`): every object of a served
    /// kind must be accepted, each with its line `kind.group/name serverside-applied (server
    /// dry run)`; each object of a kind the server does not serve must be refused alone with
    /// "no matches for kind". Returns those objects' labels, in order.
    fn dry_run(&self, source: &str, text: &str) -> Vec<String> {
        let all = docs(text);
        assert!(!all.is_empty(), "{source}: no objects");
        let (served, unserved): (Vec<&Value>, Vec<&Value>) =
            all.iter().partition(|d| self.serves(d));
        let apply = ["apply", "--server-side", "--dry-run=server", "-f", "-"];
        if !served.is_empty() {
            let out = run(self, &self.kubectl, &apply, Some(&stream(&served)));
            assert!(
                out.ok && out.stderr.is_empty(),
                "{source}: the server refused an object:\n{}",
                out.stderr
            );
            let mut printed: Vec<&str> = out.stdout.lines().collect();
            let mut expected: Vec<String> = served
                .iter()
                .map(|d| {
                    let api_version = d["apiVersion"].as_str().unwrap_or_default();
                    let kind = d["kind"].as_str().unwrap_or_default().to_lowercase();
                    let resource = match api_version.rsplit_once('/') {
                        Some((group, _)) => format!("{kind}.{group}"),
                        None => kind,
                    };
                    format!(
                        "{resource}/{} serverside-applied (server dry run)",
                        d["metadata"]["name"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            printed.sort();
            expected.sort();
            assert_eq!(printed, expected, "{source}: kubectl's lines");
        }
        let mut skipped = Vec::new();
        for d in unserved {
            eprintln!("# {} alone:", label(d));
            let out = run(self, &self.kubectl, &apply, Some(&stream(&[d])));
            let expected = format!(
                "no matches for kind \"{}\" in version \"{}\"",
                d["kind"].as_str().unwrap_or_default(),
                d["apiVersion"].as_str().unwrap_or_default()
            );
            assert!(
                !out.ok && out.stderr.contains(&expected),
                "{source}: {} is not refused as unknown: {}",
                label(d),
                out.stderr
            );
            skipped.push(label(d));
        }
        eprintln!(
            "{source}: {} objects accepted, {} of kinds the server does not serve: {skipped:?}",
            served.len(),
            skipped.len()
        );
        skipped
    }

    fn kustomize(&self, dir: &str) -> String {
        let out = run(self, &self.kubectl, &["kustomize", dir], None);
        assert!(out.ok, "kubectl kustomize {dir}: {}", out.stderr);
        out.stdout
    }

    fn helm_template(&self, values: &[&str]) -> String {
        let mut args = vec!["template", "kim", "charts/kim", "--namespace", "kim-system"];
        args.extend(values);
        let out = run(self, &self.helm, &args, None);
        assert!(out.ok, "helm {}: {}", args.join(" "), out.stderr);
        out.stdout
    }
}

/// cert-manager's objects (sorted): a self-signed Issuer, the CA Certificate, the CA Issuer
/// and the serving Certificate.
const CERT_MANAGER: [&str; 4] = [
    "Certificate kim-system/kim-ca",
    "Certificate kim-system/kim-webhook-serving",
    "Issuer kim-system/kim-ca",
    "Issuer kim-system/kim-selfsigned",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_directory_and_chart_render_is_accepted_by_the_server() {
    let t0 = Instant::now();
    let env = Env::start().await;
    let none: &[&str] = &[];
    let mut report = Vec::new();

    // kubectl kustomize <dir>, for the CRD's directory, the base and every overlay.
    let mut overlays: Vec<String> = std::fs::read_dir(repo().join("manifests/overlays"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("kustomization.yaml").is_file())
        .map(|e| format!("manifests/overlays/{}", e.file_name().to_string_lossy()))
        .collect();
    overlays.sort();
    assert_eq!(
        overlays,
        [
            "manifests/overlays/cert-manager",
            "manifests/overlays/guard-kim",
            "manifests/overlays/monitoring",
            "manifests/overlays/policy",
            "manifests/overlays/policy-and-defaulting",
            "manifests/overlays/static-ca",
            "manifests/overlays/webhook-and-policy",
        ],
        "a new overlay: add its expected skipped kinds below"
    );
    // The MutatingAdmissionPolicy is served from Kubernetes 1.36 on (admissionregistration/v1).
    let minor = testenv::tools::kubernetes().expect("Kubernetes minor");
    let map_served = minor
        .strip_prefix("1.")
        .and_then(|m| m.parse::<u32>().ok())
        .is_some_and(|n| n >= 36);
    let map_kinds: &[&str] = if map_served {
        none
    } else {
        &[
            "MutatingAdmissionPolicy kim-runtime-status",
            "MutatingAdmissionPolicyBinding kim-runtime-status",
        ]
    };
    let mut dirs = vec!["manifests".to_string(), "manifests/base".to_string()];
    dirs.extend(overlays);
    for dir in &dirs {
        let text = env.kustomize(dir);
        let mut skipped = env.dry_run(dir, &text);
        skipped.sort();
        let expected: &[&str] = match dir.as_str() {
            "manifests/overlays/cert-manager"
            | "manifests/overlays/guard-kim"
            | "manifests/overlays/webhook-and-policy" => &CERT_MANAGER,
            "manifests/overlays/monitoring" => &[
                "PrometheusRule kim-system/kim",
                "ServiceMonitor kim-system/kim-controller",
                "ServiceMonitor kim-system/kim-webhook",
            ],
            "manifests/overlays/policy-and-defaulting" => map_kinds,
            _ => none,
        };
        assert_eq!(skipped, expected, "{dir}: objects of unserved kinds");
        report.push(format!("kubectl kustomize {dir}: skipped {skipped:?}"));
    }

    // helm template, with the defaults and each values file of charts/kim/ci.
    let mut values: Vec<String> = std::fs::read_dir(repo().join("charts/kim/ci"))
        .unwrap()
        .map(|e| format!("charts/kim/ci/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    values.sort();
    let mut renders: Vec<(String, Vec<&str>)> = vec![("defaults".into(), vec![])];
    for v in &values {
        renders.push((v.clone(), vec!["-f", v.as_str()]));
    }
    for (name, args) in &renders {
        let text = env.helm_template(args);
        let source = format!("helm template kim charts/kim ({name})");
        let mut skipped = env.dry_run(&source, &text);
        skipped.sort();
        let expected: &[&str] = match name.as_str() {
            "charts/kim/ci/ca-bundle-values.yaml" => none,
            "charts/kim/ci/policy-and-defaulting-values.yaml" => map_kinds,
            _ => &CERT_MANAGER,
        };
        assert_eq!(skipped, expected, "{source}: objects of unserved kinds");
        report.push(format!("{source}: skipped {skipped:?}"));
    }

    // A dry run stored nothing.
    let client = env.cp.admin().await;
    for (group, version, kind, ns) in [
        ("apps", "v1", "Deployment", Some("kim-system")),
        ("", "v1", "ServiceAccount", Some("kim-system")),
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            None,
        ),
    ] {
        let (ar, _) = env
            .discovery
            .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
            .expect("served");
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let names: Vec<String> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .filter(|n| n.starts_with("kim"))
            .collect();
        assert!(names.is_empty(), "a dry run stored {kind} {names:?}");
    }
    eprintln!(
        "real_manifests: {} in {:.1} s\n{}",
        dirs.len() + renders.len(),
        t0.elapsed().as_secs_f64(),
        report.join("\n")
    );
}
