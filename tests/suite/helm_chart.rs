//! The Helm chart (`charts/kim`) against the kustomize directories of `manifests/`: one source
//! of truth. `helm template` renders what `kubectl kustomize` builds, values change only what
//! they name, bad values are refused.
//!
//! Needs kubectl and helm (`bash scripts/install-tools.sh`); a missing one fails the test.

use crate::support::reconciler::manifest_dir;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};

/// Labels Helm adds to the objects it renders (not in manifests/); removed before comparing.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];
/// Annotations Helm needs that manifests/ does not have: the CRD is kept on `helm uninstall`.
const HELM_ANNOTATIONS: [&str; 1] = ["helm.sh/resource-policy"];
/// The release the comparisons render: `helm template kim charts/kim -n kim-system`.
const RELEASE: [&str; 4] = ["kim", "charts/kim", "--namespace", "kim-system"];

/// Runs a tool from the repository root and returns its stdout (panics with stderr on failure).
fn run_tool(bin: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(manifest_dir())
        .env("HOME", std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run tool");
    assert!(
        out.status.success(),
        "{} {} failed:\n{}",
        bin.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("rendered YAML parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// `kind namespace/name` of an object (its identity in a build).
fn id(doc: &Value) -> String {
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!(
        "{} {} {}/{}",
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name")
    )
}

/// A Helm-rendered object without Helm's own labels and annotations.
fn without_helm(mut doc: Value) -> Value {
    for (field, keys) in [
        ("labels", &HELM_LABELS[..]),
        ("annotations", &HELM_ANNOTATIONS[..]),
    ] {
        let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
            for k in keys {
                map.remove(*k);
            }
            if map.is_empty() {
                meta.remove(field);
            }
        }
    }
    doc
}

/// Paths at which two values differ (`/spec/ports/0/port: 443 != 8443`).
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => differences(&p, u, v, out),
                    (u, v) => out.push(format!("{p}: {u:?} != {v:?}")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}/{i}"), u, v, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} != {b}")),
        _ => {}
    }
}

/// Compares two builds object by object; returns every difference (objects on one side only,
/// fields that differ), empty when equal.
fn compare(helm: &[Value], kustomize: &[Value]) -> Vec<String> {
    let by_id = |docs: &[Value]| -> std::collections::BTreeMap<String, Value> {
        docs.iter().map(|d| (id(d), d.clone())).collect()
    };
    let (h, k) = (by_id(helm), by_id(kustomize));
    assert_eq!(h.len(), helm.len(), "duplicate objects in the Helm render");
    let mut out = Vec::new();
    for key in h.keys().chain(k.keys()).collect::<BTreeSet<_>>() {
        match (h.get(key), k.get(key)) {
            (Some(a), Some(b)) => {
                let mut d = Vec::new();
                differences("", a, b, &mut d);
                out.extend(d.into_iter().map(|d| format!("{key}: {d}")));
            }
            (Some(_), None) => out.push(format!("{key}: only in the Helm render")),
            (None, _) => out.push(format!("{key}: only in the kustomize build")),
        }
    }
    out
}

/// `helm template` of the release with `args`, Helm's labels removed.
fn helm_render(helm: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template"];
    all.extend(RELEASE);
    all.extend(args);
    yaml_docs(&run_tool(helm, &all))
        .into_iter()
        .map(without_helm)
        .collect()
}

/// `kubectl kustomize <overlay>` plus the CRD (`kubectl kustomize manifests`).
fn kustomize_build(kubectl: &std::path::Path, overlay: &str) -> Vec<Value> {
    let mut docs = yaml_docs(&run_tool(kubectl, &["kustomize", "manifests"]));
    docs.extend(yaml_docs(&run_tool(kubectl, &["kustomize", overlay])));
    docs
}

#[test]
fn helm_chart_renders_what_kustomize_builds() {
    let test = "helm_chart_renders_what_kustomize_builds";
    let helm = testenv::tools::require("helm", test);
    let kubectl = testenv::tools::require("kubectl", test);
    // Default values: cert-manager, as manifests/overlays/cert-manager.
    let rendered = helm_render(&helm, &[]);
    let built = kustomize_build(&kubectl, "manifests/overlays/cert-manager");
    assert_eq!(rendered.len(), 23, "CRD + 22 objects of the overlay");
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (defaults) differs from kubectl kustomize manifests/overlays/cert-manager:\n{}",
        diff.join("\n")
    );

    // A provided caBundle, as manifests/overlays/static-ca (with the overlay's value).
    let built = kustomize_build(&kubectl, "manifests/overlays/static-ca");
    let ca_bundle = built
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .and_then(|d| d.pointer("/webhooks/0/clientConfig/caBundle"))
        .and_then(Value::as_str)
        .expect("the static-ca overlay's caBundle")
        .to_string();
    let rendered = helm_render(
        &helm,
        &[
            "--set",
            "certificates.mode=caBundle",
            "--set",
            &format!("certificates.caBundle={ca_bundle}"),
        ],
    );
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (caBundle) differs from kubectl kustomize manifests/overlays/static-ca:\n{}",
        diff.join("\n")
    );

    // Guard only, in front of KIM: as manifests/overlays/guard-kim (no CRD there).
    let rendered = helm_render(&helm, &["-f", "charts/kim/ci/guard-only-values.yaml"]);
    let built: Vec<Value> = yaml_docs(&run_tool(
        &kubectl,
        &["kustomize", "manifests/overlays/guard-kim"],
    ))
    .into_iter()
    .map(without_helm)
    .collect();
    assert_eq!(
        rendered.len(),
        11,
        "the webhook's objects and its certificates"
    );
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (guard only) differs from kubectl kustomize manifests/overlays/guard-kim:\n{}",
        diff.join("\n")
    );

    // The ValidatingAdmissionPolicy beside the webhooks (failurePolicy Ignore), as
    // manifests/overlays/webhook-and-policy.
    let rendered = helm_render(&helm, &["-f", "charts/kim/ci/admission-policy-values.yaml"]);
    let built = kustomize_build(&kubectl, "manifests/overlays/webhook-and-policy");
    assert_eq!(
        rendered.len(),
        25,
        "the defaults plus a policy and its binding"
    );
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (admission policy) differs from kubectl kustomize manifests/overlays/webhook-and-policy:\n{}",
        diff.join("\n")
    );
}

/// `admissionPolicy.enabled` adds the shipped policy and binding and nothing else; with
/// `webhook.enabled=false` the policy guards alone: every webhook object is gone, the
/// controller's stay; the bindings match every namespace whatever `runtimeNamespace` says (a
/// `matchResources` in the content is dropped); a policy generated with the webhook's flags is
/// taken as given.
#[test]
fn helm_admission_policy_alone_or_beside_the_webhook() {
    let helm = testenv::tools::require("helm", "helm_admission_policy_alone_or_beside_the_webhook");
    let defaults = helm_render(&helm, &[]);
    let beside = helm_render(&helm, &["--set", "admissionPolicy.enabled=true"]);
    let mut diff = compare(&beside, &defaults);
    diff.sort();
    assert_eq!(
        diff,
        [
            "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy /kim-runtime-status: only in the Helm render",
            "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding /kim-runtime-status: only in the Helm render",
        ]
    );
    let shipped: Vec<Value> = yaml_docs(
        &std::fs::read_to_string(
            manifest_dir().join("manifests/overlays/policy/validating-admission-policy.yaml"),
        )
        .unwrap(),
    );
    let rendered_policy: Vec<Value> = beside
        .iter()
        .filter(|d| {
            d["apiVersion"] == "admissionregistration.k8s.io/v1"
                && d["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .cloned()
        .map(without_helm)
        .collect();
    assert_eq!(rendered_policy, shipped, "the policy is the shipped file");

    let alone = helm_render(
        &helm,
        &[
            "--set",
            "admissionPolicy.enabled=true",
            "--set",
            "webhook.enabled=false",
            "--set",
            "runtimeNamespace=runtimes",
        ],
    );
    let component = |d: &Value| {
        d.pointer("/metadata/labels/app.kubernetes.io~1component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    assert!(
        !alone.iter().any(|d| component(d) == "webhook"
            || d["kind"] == "Certificate"
            || d["kind"] == "Issuer"),
        "no webhook object without the webhook"
    );
    let controller = |docs: &[Value]| docs.iter().filter(|d| component(d) == "controller").count();
    assert!(controller(&alone) > 0 && controller(&alone) == controller(&defaults));
    let binding = alone
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .expect("binding");
    assert!(
        binding["spec"].get("matchResources").is_none(),
        "the binding selects no namespace: {binding}"
    );

    // A policy bound to one namespace (as earlier kims generated it) is bound to every one.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vap.yaml");
    let shipped_text = std::fs::read_to_string(
        manifest_dir().join("manifests/overlays/policy/validating-admission-policy.yaml"),
    )
    .unwrap();
    let restricted = shipped_text.replace(
        "  validationActions:\n",
        "  matchResources:\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: kcp-system\n  validationActions:\n",
    );
    assert_ne!(restricted, shipped_text, "the binding got a matchResources");
    std::fs::write(&file, &restricted).unwrap();
    let from_restricted = helm_render(
        &helm,
        &[
            "--set",
            "admissionPolicy.enabled=true",
            "--set-file",
            &format!("admissionPolicy.content={}", file.display()),
        ],
    );
    assert_eq!(
        from_restricted, beside,
        "the content's matchResources is dropped"
    );

    // kimHistory on the webhook: the policy must be generated with it and given as content.
    let generated = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args([
            "policy",
            "--format",
            "vap",
            "--compat",
            "kimHistory",
            "--enforcement",
            "warn",
        ])
        .output()
        .unwrap();
    assert!(generated.status.success());
    std::fs::write(&file, &generated.stdout).unwrap();
    let custom = helm_render(
        &helm,
        &[
            "--set",
            "admissionPolicy.enabled=true",
            "--set",
            "webhook.compat=kimHistory",
            "--set",
            "webhook.enforcement=warn",
            "--set-file",
            &format!("admissionPolicy.content={}", file.display()),
        ],
    );
    let names: Vec<&str> = custom
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["kim-runtime-status-warn"],
        "all rules warn: one warn binding"
    );

    // The same content with CRLF line ends and commented separators renders the same; without
    // its binding it is refused.
    let text = String::from_utf8(generated.stdout.clone()).unwrap();
    let odd = text
        .replace("\n---\n", "\n--- # next\n")
        .replace('\n', "\r\n");
    std::fs::write(&file, odd).unwrap();
    let content = format!("admissionPolicy.content={}", file.display());
    let args = [
        "--set",
        "admissionPolicy.enabled=true",
        "--set",
        "webhook.compat=kimHistory",
        "--set",
        "webhook.enforcement=warn",
        "--set-file",
        &content,
    ];
    assert_eq!(
        helm_render(&helm, &args),
        custom,
        "CRLF and commented separators change nothing"
    );
    let unbound = &text[..text.find("kind: ValidatingAdmissionPolicyBinding").unwrap()];
    let unbound = &unbound[..unbound.rfind("---").unwrap()];
    std::fs::write(&file, unbound).unwrap();
    let mut all = vec!["template"];
    all.extend(RELEASE);
    all.extend(args);
    let out = Command::new(&helm)
        .args(&all)
        .current_dir(manifest_dir())
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no binding"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The webhook container's args in a render.
fn webhook_args(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "kim-webhook")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/args"))
        .and_then(Value::as_array)
        .expect("the webhook Deployment")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

#[test]
fn helm_values_change_only_what_they_name() {
    let helm = testenv::tools::require("helm", "helm_values_change_only_what_they_name");
    let defaults = helm_render(&helm, &[]);

    // Guard only: the default render less the CRD, the controller's objects and the mutating
    // webhook; the webhook gets the writers, switches, enforcement and failurePolicy of the
    // values file.
    let guard = helm_render(&helm, &["-f", "charts/kim/ci/guard-only-values.yaml"]);
    let expected: Vec<Value> = defaults
        .iter()
        .filter(|d| {
            d["kind"] != "CustomResourceDefinition"
                && d["kind"] != "MutatingWebhookConfiguration"
                && d.pointer("/metadata/labels/app.kubernetes.io~1component")
                    != Some(&Value::from("controller"))
        })
        .cloned()
        .collect();
    let mut diff = compare(&guard, &expected);
    diff.sort();
    let args_path = "/spec/template/spec/containers/0/args";
    assert!(
        diff.iter()
            .all(|d| (d.contains("Deployment") && d.contains(args_path))
                || d.ends_with("/webhooks/0/failurePolicy: \"Ignore\" != \"Fail\"")),
        "guard-only differs beyond the webhook's args and failurePolicy:\n{}",
        diff.join("\n")
    );
    let args = webhook_args(&guard);
    assert_eq!(
        args[6..],
        [
            "--allowed-writers=system:serviceaccount:kcp-system:infrastructure-manager,group:system:masters",
            "--compat=terminatingConditionType,kimHistory",
            "--enforcement=warn",
        ]
    );
    assert!(
        !guard
            .iter()
            .any(|d| d["metadata"]["name"] == "kim-controller"),
        "no controller object in guard-only mode"
    );
    // runtimeNamespace moves the controller only: the webhooks judge every namespace.
    let moved = helm_render(&helm, &["--set", "runtimeNamespace=runtimes"]);
    let mut diff = compare(&moved, &defaults);
    diff.sort();
    assert_eq!(
        diff,
        [
            "apps/v1 Deployment kim-system/kim-controller: /spec/template/spec/containers/0/args/1: \"--namespace=runtimes\" != \"--namespace=kcp-system\"",
            "rbac.authorization.k8s.io/v1 Role kcp-system/kim-controller: only in the kustomize build",
            "rbac.authorization.k8s.io/v1 Role runtimes/kim-controller: only in the Helm render",
            "rbac.authorization.k8s.io/v1 RoleBinding kcp-system/kim-controller: only in the kustomize build",
            "rbac.authorization.k8s.io/v1 RoleBinding runtimes/kim-controller: only in the Helm render",
        ],
        "all differences:\n{}",
        diff.join("\n")
    );
    let actions = helm_render(&helm, &["--set", "webhook.ruleActions=writer=deny"]);
    assert_eq!(
        webhook_args(&actions).last().unwrap(),
        "--rule-action=writer=deny"
    );

    // Replicas, image, resources, monitoring off, a policy file.
    let set = helm_render(
        &helm,
        &[
            "-f",
            "charts/kim/ci/policy-values.yaml",
            "--set",
            "webhook.replicas=3",
            "--set",
            "controller.replicas=1",
            "--set",
            "image.tag=9.9.9",
            "--set",
            "webhook.resources.limits.memory=256Mi",
        ],
    );
    let mut diff = compare(&set, &defaults);
    diff.sort();
    let expected = [
        "apps/v1 Deployment kim-system/kim-controller: /spec/replicas: 1 != 2",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/path: None != Some(String(\"/metrics\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/port: None != Some(String(\"8081\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/metadata/annotations/prometheus.io/scrape: None != Some(String(\"true\"))",
        "apps/v1 Deployment kim-system/kim-controller: /spec/template/spec/containers/0/image: \"ghcr.io/kyma-project/kim:9.9.9\" != \"ghcr.io/kyma-project/kim:0.1.0\"",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/replicas: 3 != 2",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/path: None != Some(String(\"/metrics\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/port: None != Some(String(\"8080\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/metadata/annotations/prometheus.io/scrape: None != Some(String(\"true\"))",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/spec/containers/0/image: \"ghcr.io/kyma-project/kim:9.9.9\" != \"ghcr.io/kyma-project/kim:0.1.0\"",
        "apps/v1 Deployment kim-system/kim-webhook: /spec/template/spec/containers/0/resources/limits/memory: \"256Mi\" != \"192Mi\"",
        "v1 ConfigMap kim-system/kim-webhook-policy: only in the Helm render",
    ];
    let (policy_wiring, rest): (Vec<_>, Vec<_>) = diff.iter().partition(|d| {
        d.contains("kim-webhook:")
            && (d.contains("/args")
                || d.contains("/volumeMounts")
                || d.contains("/volumes")
                || d.contains("policy-checksum"))
    });
    assert_eq!(rest, expected, "all differences:\n{}", diff.join("\n"));
    assert!(!policy_wiring.is_empty(), "the policy file is wired in");
    let args = webhook_args(&set);
    assert_eq!(
        args.last().map(String::as_str),
        Some("--policy-file=/etc/kim/policy/policy.yaml")
    );
    // The policy the chart mounts is one kim accepts.
    let policy = set
        .iter()
        .find(|d| d["metadata"]["name"] == "kim-webhook-policy")
        .and_then(|d| d.pointer("/data/policy.yaml"))
        .and_then(Value::as_str)
        .expect("policy ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, policy).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["policy", "--format", "json", "--policy-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kim rejects the chart's example policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("BackupConfigured"));
}

#[test]
fn helm_refuses_bad_values() {
    let helm = testenv::tools::require("helm", "helm_refuses_bad_values");
    for (args, message) in [
        (
            &["--set", "certificates.mode=caBundle"][..],
            "certificates.caBundle (base64 PEM of the CA of Secret kim-webhook-tls) is required with certificates.mode caBundle",
        ),
        (
            &["--set", "certificates.mode=selfMade"][..],
            "at '/certificates/mode': value must be one of 'certManager', 'caBundle'",
        ),
        (
            &["--set", "webhook.replicas=0"][..],
            "at '/webhook/replicas': minimum: got 0, want 1",
        ),
        (
            &["--set", "webhook.allowedWriter=x"][..],
            "additional properties 'allowedWriter' not allowed",
        ),
        (
            &["--set", "webhook.policy.enabled=true"][..],
            "webhook.policy.content is required when webhook.policy.enabled is true",
        ),
        (
            &[
                "--set",
                "admissionPolicy.enabled=true",
                "--set",
                "webhook.compat=kimHistory",
            ][..],
            "admissionPolicy.content is required: the shipped policy holds the built-in table",
        ),
        (
            &[
                "--set",
                "admissionPolicy.enabled=true",
                "--set",
                "admissionPolicy.content=kind: Secret",
            ][..],
            "admissionPolicy.content: kind Secret; expected the output of kim policy --format vap",
        ),
        (
            &[
                "--set",
                "admissionPolicy.enabled=true",
                "--set",
                "webhook.extraArgs={--allowed-writers=alice}",
            ][..],
            "admissionPolicy.content is required",
        ),
        (
            &["--set", "webhook.enabled=false"][..],
            "nothing would guard Runtime status",
        ),
        (
            &["--set-json", "runtimeNamespace=null"][..],
            "runtimeNamespace",
        ),
    ] {
        let mut all = vec!["template"];
        all.extend(RELEASE);
        all.extend(args);
        let out = Command::new(&helm)
            .args(&all)
            .current_dir(manifest_dir())
            .env("HOME", std::env::temp_dir())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} rendered");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// `mutatingAdmissionPolicy.enabled` adds the shipped MutatingAdmissionPolicy and binding and
/// nothing else; `ci/policy-and-defaulting-values.yaml` (no webhook) renders the policies
/// `manifests/overlays/policy-and-defaulting` builds; a policy generated with the webhook's
/// `--compat` is taken as given, and without it such a release is refused, as is content of
/// another kind.
#[test]
fn helm_mutating_admission_policy_from_the_shipped_file_or_the_webhook_s_flags() {
    let test = "helm_mutating_admission_policy_from_the_shipped_file_or_the_webhook_s_flags";
    let helm = testenv::tools::require("helm", test);
    let kubectl = testenv::tools::require("kubectl", test);
    let defaults = helm_render(&helm, &[]);
    let with = helm_render(&helm, &["--set", "mutatingAdmissionPolicy.enabled=true"]);
    let mut diff = compare(&with, &defaults);
    diff.sort();
    assert_eq!(
        diff,
        [
            "admissionregistration.k8s.io/v1 MutatingAdmissionPolicy /kim-runtime-status: only in the Helm render",
            "admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding /kim-runtime-status: only in the Helm render",
        ]
    );
    let policies = |docs: &[Value], prefix: &str| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"].as_str().is_some_and(|k| k.starts_with(prefix)))
            .cloned()
            .map(without_helm)
            .collect()
    };
    let shipped = yaml_docs(
        &std::fs::read_to_string(
            manifest_dir()
                .join("manifests/overlays/policy-and-defaulting/mutating-admission-policy.yaml"),
        )
        .unwrap(),
    );
    assert_eq!(
        policies(&with, "MutatingAdmissionPolicy"),
        shipped,
        "the policy is the shipped file"
    );

    let alone = helm_render(
        &helm,
        &["-f", "charts/kim/ci/policy-and-defaulting-values.yaml"],
    );
    let built = yaml_docs(&run_tool(
        &kubectl,
        &["kustomize", "manifests/overlays/policy-and-defaulting"],
    ));
    let mut rendered = policies(&alone, "MutatingAdmissionPolicy");
    rendered.extend(policies(&alone, "ValidatingAdmissionPolicy"));
    let diff = compare(&rendered, &built);
    assert!(
        diff.is_empty(),
        "helm template (policy and defaulting) differs from kubectl kustomize manifests/overlays/policy-and-defaulting:\n{}",
        diff.join("\n")
    );
    assert!(
        !alone.iter().any(|d| d["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("WebhookConfiguration"))),
        "no webhook configuration"
    );

    // kimHistory on the webhook: its retired vocabulary has default messages too, so the
    // policy must be generated with it.
    let refused = |args: &[&str], message: &str| {
        let mut all = vec!["template"];
        all.extend(RELEASE);
        all.extend(args);
        let out = Command::new(&helm)
            .args(&all)
            .current_dir(manifest_dir())
            .env("HOME", std::env::temp_dir())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} rendered");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    };
    refused(
        &[
            "--set",
            "mutatingAdmissionPolicy.enabled=true",
            "--set",
            "webhook.compat=kimHistory",
        ],
        "mutatingAdmissionPolicy.content is required",
    );
    refused(
        &[
            "--set",
            "mutatingAdmissionPolicy.enabled=true",
            "--set",
            "mutatingAdmissionPolicy.content=kind: Secret",
        ],
        "mutatingAdmissionPolicy.content: kind Secret; expected the output of kim policy --format map",
    );
    let generated = Command::new(env!("CARGO_BIN_EXE_kim"))
        .args(["policy", "--format", "map", "--compat", "kimHistory"])
        .output()
        .unwrap();
    assert!(generated.status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("map.yaml");
    std::fs::write(&file, &generated.stdout).unwrap();
    let custom = helm_render(
        &helm,
        &[
            "--set",
            "mutatingAdmissionPolicy.enabled=true",
            "--set",
            "webhook.compat=kimHistory",
            "--set-file",
            &format!("mutatingAdmissionPolicy.content={}", file.display()),
        ],
    );
    let rendered = policies(&custom, "MutatingAdmissionPolicy");
    assert_eq!(
        rendered,
        yaml_docs(&String::from_utf8(generated.stdout).unwrap())
    );
    assert!(
        rendered[0].to_string().contains("(retired KIM vocabulary)"),
        "the retired vocabulary's default messages are in the policy"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let unbound = &text[..text.find("kind: MutatingAdmissionPolicyBinding").unwrap()];
    std::fs::write(&file, &unbound[..unbound.rfind("---").unwrap()]).unwrap();
    refused(
        &[
            "--set",
            "mutatingAdmissionPolicy.enabled=true",
            "--set-file",
            &format!("mutatingAdmissionPolicy.content={}", file.display()),
        ],
        "has no binding",
    );
}
