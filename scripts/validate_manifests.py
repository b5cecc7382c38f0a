#!/usr/bin/env python3
"""Offline checks of kim's deployment files. Run through scripts/validate-manifests.sh,
which sets up the virtualenv (kubernetes-validate, jsonschema, pyyaml, dockerfile-parse)
and passes the kubectl and helm of scripts/install-tools.sh.

Building is left to the real tools: every kustomization is built with `kubectl kustomize`
(kustomize v5.7.1) and the chart rendered with `helm template`; this script checks what they
produce. What is checked (one line per checked file or build; details under a FAIL):
  kustomize   every kustomization under manifests/ (and certs/out/ if present) builds with
              `kubectl kustomize`.
  helm        charts/kim: `helm lint --strict` and `helm template` with the default values and
              each charts/kim/ci/*-values.yaml; every rendered object gets the schema checks
              below, the default and caBundle renders the conformance checks too.
  schemas     every document of every build: built-in kinds with kubernetes-validate in strict
              mode (unknown fields are errors) for each KIM_K8S_VERSIONS; cert-manager.io/v1
              Issuer/Certificate and monitoring.coreos.com/v1 PrometheusRule/ServiceMonitor
              with the hand-written JSON schemas below; any other kind fails.
  conformance the facts kim's webhook and controller depend on (names, rules, failurePolicy,
              args, ports, probes, security context, exact RBAC verbs, volumes, cert wiring,
              image tag, ConfigMap kim-controller-config == docs/config.example.yaml, no
              committed Gardener kubeconfig Secret); see check_conformance().
  crd         manifests/crd.yaml with kubernetes-validate (CustomResourceDefinition, strict),
              its structure (group, names, v1, status subresource, structural schema) and its
              openAPIV3Schema translated to JSON Schema (meta-validated).
  samples     samples/runtimes/*.yaml against that schema with jsonschema: unknown
              fields are errors (as with the API server's strict field validation),
              x-kubernetes-int-or-string, nullable, formats date-time/int32/int64/byte;
              metadata against the ObjectMeta schema shipped by kubernetes-validate.
              x-kubernetes-validations (CEL) rules are NOT evaluated: counted and reported.
  policy      manifests/overlays/policy and the policy of webhook-and-policy (check_policy()):
              one ValidatingAdmissionPolicy and binding on runtimes/status UPDATEs in every
              namespace (no matchResources), denying, each message starting with a rule id;
              beside it the webhooks fail open. manifests/overlays/policy-and-defaulting: the
              same plus one MutatingAdmissionPolicy and binding (check_mutating_policy()),
              validated against the KIM_K8S_VERSIONS that have the kind (1.36 and newer).
  monitoring  manifests/overlays/monitoring (validate_monitoring.py): the PrometheusRule is the rules
              file (promtool check rules when installed), the ServiceMonitors match the Services,
              ports and prometheus.io/* annotations of base, the dashboard ConfigMap is the JSON.
  dockerfile  Dockerfile parsed with dockerfile-parse; stages, base images, USER, ENTRYPOINT,
              the cargo build line; .dockerignore entries.
  shell       bash -n and (if installed) shellcheck on the shell scripts.
  gen-certs   certs/gen-certs.sh run against a scratch copy of the static-ca overlay: chain,
              SANs, Secret, caBundle patch, the generated kustomization builds and validates.
"""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import yaml

import validate_monitoring

try:
    import kubernetes_validate
    from kubernetes_validate import utils as kv_utils
except ImportError:  # pragma: no cover - the wrapper installs it
    kubernetes_validate = None

# --------------------------------------------------------------------------------------
# reporting

RESULTS = {"PASS": 0, "FAIL": 0, "SKIP": 0}


def report(status: str, what: str, detail: str = "", errors: list[str] | None = None) -> None:
    RESULTS[status] = RESULTS.get(status, 0) + 1
    line = f"{status:4}  {what}"
    if detail:
        line += f"  ({detail})"
    print(line, flush=True)
    for e in errors or []:
        print(f"        - {e}", flush=True)


def note(msg: str) -> None:
    print(f"      {msg}", flush=True)


# --------------------------------------------------------------------------------------
# YAML

def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def doc_id(d: dict) -> str:
    md = d.get("metadata") or {}
    ns = md.get("namespace")
    return f"{d.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def doc_key(d: dict) -> tuple:
    md = d.get("metadata") or {}
    return (d.get("apiVersion", ""), d.get("kind", ""), md.get("namespace") or "", md.get("name") or "")


# --------------------------------------------------------------------------------------
# builds: kustomize (kubectl kustomize) and helm, run as they are

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def find_kustomization(d: Path) -> Path | None:
    for n in KUSTOMIZATION_NAMES:
        if (d / n).is_file():
            return d / n
    return None


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def run_tool(cmd: list[str]) -> str:
    """stdout of `cmd`; ValueError with the last line of its stderr when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        raise ValueError(lines[-1] if lines else f"{' '.join(cmd)}: exit code {p.returncode}")
    return p.stdout


def build(d: Path, tool: list[str]) -> list[dict]:
    """The objects of kustomization `d`, built by `tool` (`kubectl kustomize`)."""
    return load_yaml_docs(run_tool(tool + [str(d)]))


# --------------------------------------------------------------------------------------
# schemas

K8S_GROUPS = {
    "", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apps", "autoscaling", "batch",
    "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io", "networking.k8s.io",
    "policy", "rbac.authorization.k8s.io", "scheduling.k8s.io", "storage.k8s.io",
    "certificates.k8s.io", "node.k8s.io", "flowcontrol.apiserver.k8s.io",
}

# Built-in kinds newer than the oldest KIM_K8S_VERSIONS: validated only against the versions
# that have them (kubernetes-validate has no schema before).
SINCE = {
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36",
}


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:2])


GO_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KEY_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
]

# Hand-written from cert-manager's v1 API reference: the fields kim's overlay uses are typed;
# the other documented top-level spec fields are accepted as they are (`True`); anything else
# is an error. Metadata is checked against ObjectMeta separately.
_CM_META = {"type": "object", "required": ["name", "namespace"],
            "properties": {"name": {"type": "string", "pattern": DNS_SUBDOMAIN, "maxLength": 253},
                           "namespace": {"type": "string"}}}
_ISSUER_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"name": {"type": "string", "minLength": 1},
                              "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                              "group": {"type": "string"}}}
CERT_MANAGER_SCHEMAS = {
    "Issuer": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Issuer"},
            "metadata": _CM_META,
            "spec": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "additionalProperties": False,
                "properties": {
                    "selfSigned": {"type": "object", "additionalProperties": False,
                                   "properties": {"crlDistributionPoints": {"type": "array", "items": {"type": "string"}}}},
                    "ca": {"type": "object", "required": ["secretName"], "additionalProperties": False,
                           "properties": {"secretName": {"type": "string", "pattern": DNS_SUBDOMAIN},
                                          "crlDistributionPoints": {"type": "array", "items": {"type": "string"}},
                                          "ocspServers": {"type": "array", "items": {"type": "string"}},
                                          "issuingCertificateURLs": {"type": "array", "items": {"type": "string"}}}},
                    "acme": True, "vault": True, "venafi": True,
                },
            },
        },
    },
    "Certificate": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Certificate"},
            "metadata": _CM_META,
            "spec": {
                "type": "object", "required": ["secretName", "issuerRef"],
                "additionalProperties": False,
                "properties": {
                    "secretName": {"type": "string", "pattern": DNS_SUBDOMAIN},
                    "issuerRef": _ISSUER_REF,
                    "commonName": {"type": "string", "maxLength": 64},
                    "dnsNames": {"type": "array", "minItems": 1, "uniqueItems": True,
                                 "items": {"type": "string", "pattern": DNS_SUBDOMAIN}},
                    "isCA": {"type": "boolean"},
                    "duration": {"type": "string", "pattern": GO_DURATION},
                    "renewBefore": {"type": "string", "pattern": GO_DURATION},
                    "usages": {"type": "array", "uniqueItems": True, "items": {"enum": KEY_USAGES}},
                    "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]}}},
                    "secretTemplate": {"type": "object", "additionalProperties": False, "properties": {
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}},
                    # documented, unused here:
                    "subject": True, "literalSubject": True, "renewBeforePercentage": True,
                    "ipAddresses": True, "uris": True, "otherNames": True, "emailAddresses": True,
                    "keystores": True, "signatureAlgorithm": True, "encodeUsagesInRequest": True,
                    "revisionHistoryLimit": True, "additionalOutputFormats": True, "nameConstraints": True,
                },
            },
        },
    },
}


def go_duration_seconds(s: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"([0-9]+(\.[0-9]+)?)(ns|us|µs|ms|s|m|h)", s))


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def metadata_errors(d: dict) -> list[str]:
    """What ObjectMeta's JSON schema cannot say: name syntax, label syntax/lengths."""
    errs = []
    md = d.get("metadata") or {}
    name = md.get("name")
    if not isinstance(name, str) or not re.match(DNS_SUBDOMAIN, name) or len(name) > 253:
        errs.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    for k, v in (md.get("labels") or {}).items():
        prefix, _, nm = k.rpartition("/")
        if (prefix and (len(prefix) > 253 or not re.match(DNS_SUBDOMAIN, prefix))) \
                or len(nm) > 63 or not LABEL_NAME.match(nm):
            errs.append(f"label key {k!r} is invalid")
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errs.append(f"label {k}={v!r}: value is invalid")
    return errs


class Validators:
    def __init__(self, versions: list[str]):
        self.versions = versions

    def builtin(self, d: dict) -> list[str]:
        errs = []
        since = SINCE.get((d.get("apiVersion"), d.get("kind")))
        versions = [v for v in self.versions if not since or _minor(v) >= _minor(since)]
        if not versions:
            return [f"{doc_id(d)}: exists from Kubernetes {since} on; no version of {self.versions} to validate it against"]
        for v in versions:
            try:
                kubernetes_validate.validate(d, v, strict=True)
            except kv_utils.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                errs.append(f"{doc_id(d)} [k8s {v}]: {path}: {e.message}")
            except kv_utils.SchemaNotFoundError as e:
                errs.append(f"{doc_id(d)}: {e.message}")
        return errs

    def cert_manager(self, d: dict) -> list[str]:
        schema = CERT_MANAGER_SCHEMAS.get(d.get("kind"))
        if schema is None or d.get("apiVersion") != "cert-manager.io/v1":
            return [f"{doc_id(d)}: no schema for {d.get('apiVersion')} {d.get('kind')}"]
        v = jsonschema.Draft202012Validator(schema)
        return [f"{doc_id(d)} [cert-manager schema]: {'.'.join(map(str, e.path))}: {e.message}"
                for e in sorted(v.iter_errors(d), key=lambda e: list(map(str, e.path)))]

    def monitoring(self, d: dict) -> list[str]:
        return validate_monitoring.schema_errors(d, doc_id(d))

    def any_doc(self, d: dict) -> tuple[str, list[str]]:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind"):
            return "?", ["document without apiVersion/kind"]
        errs = metadata_errors(d)
        g = _group(d["apiVersion"])
        if g in K8S_GROUPS:
            return "k8s", errs + self.builtin(d)
        if g == "cert-manager.io":
            return "cert-manager", errs + self.cert_manager(d)
        if g == "monitoring.coreos.com":
            return "monitoring", errs + self.monitoring(d)
        return "?", errs + [f"{doc_id(d)}: unexpected kind {d['apiVersion']} {d['kind']} (no schema)"]


# --------------------------------------------------------------------------------------
# CRD schema -> JSON Schema

OBJECT_META_REF = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def k8s_schema_to_jsonschema(s: dict, stats: dict, root: bool = False) -> dict:
    out: dict = {}
    for k, v in s.items():
        if k == "x-kubernetes-validations":
            stats["cel_rules"] = stats.get("cel_rules", 0) + len(v)
            continue
        if k.startswith("x-kubernetes-") or k in ("nullable", "description", "example", "externalDocs"):
            continue
        if k in ("properties", "patternProperties"):
            out[k] = {n: k8s_schema_to_jsonschema(c, stats) for n, c in v.items()}
        elif k == "items":
            out[k] = (k8s_schema_to_jsonschema(v, stats) if isinstance(v, dict)
                      else [k8s_schema_to_jsonschema(i, stats) for i in v])
        elif k == "additionalProperties":
            out[k] = k8s_schema_to_jsonschema(v, stats) if isinstance(v, dict) else v
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [k8s_schema_to_jsonschema(i, stats) for i in v]
        elif k == "not":
            out[k] = k8s_schema_to_jsonschema(v, stats)
        else:
            out[k] = v
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    if out.get("type") == "object" and "additionalProperties" not in out and not preserve \
            and not s.get("x-kubernetes-embedded-resource"):
        # the API server prunes unknown fields, and rejects them with strict field validation
        out["additionalProperties"] = False
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if root:
        props = out.setdefault("properties", {})
        props["metadata"] = {"$ref": OBJECT_META_REF}
    return out


def format_checker() -> jsonschema.FormatChecker:
    fc = jsonschema.FormatChecker()

    @fc.checks("date-time", raises=ValueError)
    def _dt(v):
        if not isinstance(v, str):
            return True
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", v):
            raise ValueError("not RFC 3339")
        dt.datetime.fromisoformat(re.sub(r"[Zz]$", "+00:00", re.sub(r"\.(\d{6})\d+", r".\1", v)))
        return True

    @fc.checks("int32")
    def _i32(v):
        return not isinstance(v, int) or -2**31 <= v < 2**31

    @fc.checks("int64")
    def _i64(v):
        return not isinstance(v, int) or -2**63 <= v < 2**63

    @fc.checks("byte", raises=ValueError)
    def _byte(v):
        if isinstance(v, str):
            base64.b64decode(v, validate=True)
        return True

    return fc


def crd_checks(crd: dict, vals: Validators) -> tuple[list[str], dict, dict]:
    """Returns (errors, {version: jsonschema}, stats)."""
    errs = list(vals.builtin(crd)) + metadata_errors(crd)
    spec = crd.get("spec") or {}
    want = {"group": "infrastructuremanager.kyma-project.io", "scope": "Namespaced"}
    for f, v in want.items():
        if spec.get(f) != v:
            errs.append(f"spec.{f} is {spec.get(f)!r}, want {v!r}")
    names = spec.get("names") or {}
    if names.get("plural") != "runtimes" or names.get("kind") != "Runtime":
        errs.append(f"spec.names {names} (want plural runtimes, kind Runtime)")
    if (crd.get("metadata") or {}).get("name") != "runtimes.infrastructuremanager.kyma-project.io":
        errs.append("metadata.name is not runtimes.infrastructuremanager.kyma-project.io")
    schemas, stats = {}, {}
    versions = {v.get("name"): v for v in spec.get("versions") or []}
    v1 = versions.get("v1")
    if not v1:
        errs.append("no version v1")
    else:
        if not v1.get("served") or not v1.get("storage"):
            errs.append("v1 is not served and stored")
        if "status" not in ((v1.get("subresources") or {})):
            errs.append("v1 has no status subresource: the webhook's runtimes/status rule would never fire")
    for name, v in versions.items():
        s = ((v.get("schema") or {}).get("openAPIV3Schema"))
        if not isinstance(s, dict):
            errs.append(f"{name}: no openAPIV3Schema")
            continue
        if s.get("type") != "object":
            errs.append(f"{name}: root schema type is not object (not structural)")
        for part in ("spec", "status"):
            if part not in (s.get("properties") or {}):
                errs.append(f"{name}: schema has no {part}")
        js = k8s_schema_to_jsonschema(s, stats, root=True)
        try:
            jsonschema.Draft202012Validator.check_schema(js)
        except jsonschema.SchemaError as e:
            errs.append(f"{name}: translated schema is not valid JSON Schema: {e.message}")
            continue
        schemas[name] = js
    return errs, schemas, stats


def sample_validator(schema: dict, k8s_version: str) -> jsonschema.Draft202012Validator:
    from referencing import Registry, Resource
    defs_dir = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= k8s_version][-1]
    defs = kv_utils.schema_contents(f"kubernetes-json-schema/v{defs_dir}-local-strict/_definitions.json", defs_dir)
    registry = Resource.from_contents(defs) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=format_checker())


# --------------------------------------------------------------------------------------
# conformance: what the webhook and controller rely on

EXPECTED_RULE = {"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                 "resources": ["runtimes/status"], "operations": ["UPDATE"], "scope": "Namespaced"}
WEBHOOKS = {
    "ValidatingWebhookConfiguration": ("runtime-status.validate.kim.kyma-project.io", "/validate"),
    "MutatingWebhookConfiguration": ("runtime-status.mutate.kim.kyma-project.io", "/mutate"),
}
# Exactly the verbs `kim controller` sends to the control cluster, per namespace and
# (apiGroup, resource, resourceNames or None): more is an error, less is an error.
#   runtimes         list+watch: kube-runtime Controller (watcher ListWatch); get: re-read after
#                    a 409 (reconcile.rs); patch: the finalizer, a JSON patch (reconcile.rs)
#   runtimes/status  update: replace_status (reconcile.rs, Pass::write)
#   secrets          list+watch: the metadata cache (controller.rs); get: the kubeconfig for a
#                    runtime-cluster client (admins.rs); create/patch (a merge patch of kim's
#                    keys)/delete: kubeconfig.rs, delete.rs
#   events.k8s.io    create: events.rs Publisher, in the Runtime's namespace (no EventSeries,
#                    so never a patch)
#   leases           kube-lease-manager 0.13: get, create (AutoCreate), patch (lock, renew,
#                    release); create cannot be narrowed by resourceNames
CONTROLLER_NAMESPACE = "kcp-system"
LEASE_NAMESPACE, LEASE_NAME = "kim-system", "kim-controller"
RT_GROUP = "infrastructuremanager.kyma-project.io"
CONTROLLER_RULES = {
    CONTROLLER_NAMESPACE: {
        (RT_GROUP, "runtimes", None): {"get", "list", "watch", "patch"},
        (RT_GROUP, "runtimes/status", None): {"update"},
        ("", "secrets", None): {"get", "list", "watch", "create", "patch", "delete"},
        ("events.k8s.io", "events", None): {"create"},
    },
    LEASE_NAMESPACE: {
        ("coordination.k8s.io", "leases", None): {"create"},
        ("coordination.k8s.io", "leases", (LEASE_NAME,)): {"get", "patch"},
    },
}
CONTROLLER_FLAGS = {
    "namespace": CONTROLLER_NAMESPACE,
    "config": "/etc/kim/config/config.yaml",
    "gardener-kubeconfig": "/etc/kim/gardener/kubeconfig",
    "metrics-addr": "0.0.0.0:8081",
    "log-format": "json",
}
CONTROLLER_CONFIG_MAP = "kim-controller-config"
GARDENER_KUBECONFIG_SECRET = "kim-gardener-kubeconfig"
PLACEHOLDER_CA = "REPLACE-ME"


def find(docs, kind, name=None, ns=None):
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"].get("name") == name)
            and (ns is None or d["metadata"].get("namespace") == ns)]


def one(docs, errs, kind, name, ns=None):
    hits = find(docs, kind, name, ns)
    if len(hits) != 1:
        errs.append(f"expected one {kind} {ns + '/' if ns else ''}{name}, found {len(hits)}")
        return None
    return hits[0]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def parse_flags(args: list[str]) -> dict:
    """`--flag=value` and `--flag value` (clap accepts both); a bare `--flag` is "true"."""
    flags: dict = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                k, v = a[2:], args[i + 1]
                i += 1
            else:
                k, v = a[2:], "true"
            flags[k] = v
        i += 1
    return flags


def check_restricted(pod: dict, c: dict, who: str) -> list[str]:
    """The restricted Pod Security Standard plus kim's own rules (uid 65532, read-only root
    filesystem), for the pod and its container `c`."""
    errs = []
    psc = pod.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True or psc.get("runAsUser") != 65532:
        errs.append(f"{who} pod securityContext: runAsNonRoot true and runAsUser 65532 required")
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        errs.append(f"{who} pod securityContext: seccompProfile RuntimeDefault required")
    sc = c.get("securityContext") or {}
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
        errs.append(f"{who} container: readOnlyRootFilesystem true, allowPrivilegeEscalation false required")
    if sc.get("privileged", False) is not False:
        errs.append(f"{who} container: privileged")
    if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or (sc.get("capabilities") or {}).get("add"):
        errs.append(f"{who} container: capabilities must drop [ALL] and add nothing")
    if sc.get("runAsUser", 65532) != 65532 or sc.get("runAsNonRoot", True) is not True:
        errs.append(f"{who} container securityContext overrides the non-root user")
    if (sc.get("seccompProfile") or {}).get("type", "RuntimeDefault") != "RuntimeDefault":
        errs.append(f"{who} container: seccompProfile must stay RuntimeDefault")
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            errs.append(f"{who} pod: hostPath volume {v.get('name')}")
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            errs.append(f"{who} pod: {f}")
    return errs


def check_resources(c: dict, who: str) -> list[str]:
    errs = []
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(part) or {}):
                errs.append(f"{who}: resources.{part}.{r} missing")
    return errs


def check_conformance(docs: list[dict], variant: str, crate_version: str | None, crd: dict | None,
                      config_text: str | None = None) -> tuple[list[str], list[str]]:
    """variant: base | cert-manager | static-ca | static-ca-generated | guard-kim (the validating
    webhook alone in front of KIM, certificates from cert-manager). config_text: the content
    of docs/config.example.yaml, which ConfigMap kim-controller-config must carry verbatim.
    Returns (errors, warnings)."""
    errs: list[str] = []
    warns: list[str] = []
    guard = variant == "guard-kim"
    # The policy beside the webhooks: they fail open, the policy holds (webhook-and-policy).
    beside = variant == "webhook-and-policy"
    cert_manager = variant in ("cert-manager", "guard-kim", "webhook-and-policy")
    if beside:
        errs += check_policy([d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")])
        docs = [d for d in docs if not d["kind"].startswith("ValidatingAdmissionPolicy")]
    one(docs, errs, "Namespace", "kim-system")
    if find(docs, "Namespace", "kcp-system"):
        errs.append("Namespace kcp-system must not be managed by kim (kubectl delete -k would remove it)")
    for cluster_kind in ("ClusterRole", "ClusterRoleBinding"):
        if find(docs, cluster_kind):
            errs.append(f"{cluster_kind} present: kim's RBAC is namespaced only")

    # --- service accounts and RBAC
    wsa = one(docs, errs, "ServiceAccount", "kim-webhook", "kim-system")
    if wsa and wsa.get("automountServiceAccountToken") is not False:
        errs.append("ServiceAccount kim-webhook must set automountServiceAccountToken: false")
    if guard:
        for d in docs:
            if d["metadata"].get("name", "").startswith("kim-controller") or d["kind"] in (
                    "CustomResourceDefinition", "MutatingWebhookConfiguration", "Role", "RoleBinding"):
                errs.append(f"{doc_id(d)}: guard-kim installs the validating webhook alone")
    else:
        one(docs, errs, "ServiceAccount", "kim-controller", "kim-system")
    granted: dict = {}
    for rb in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding"):
        for s in rb.get("subjects") or []:
            if s.get("name") == "kim-webhook":
                errs.append(f"{doc_id(rb)} binds kim-webhook: the webhook needs no API access")
            if not (s.get("kind") == "ServiceAccount" and s.get("name") == "kim-controller"
                    and s.get("namespace") == "kim-system"):
                errs.append(f"{doc_id(rb)}: unexpected subject {s}")
        ref = rb.get("roleRef") or {}
        ns = rb["metadata"].get("namespace")
        role = one(docs, errs, ref.get("kind"), ref.get("name"), ns)
        if not role:
            continue
        for r in role.get("rules") or []:
            if r.get("nonResourceURLs"):
                errs.append(f"{doc_id(role)}: nonResourceURLs in a namespaced Role")
                continue
            names = tuple(sorted(r["resourceNames"])) if r.get("resourceNames") else None
            for g in r.get("apiGroups") or []:
                for res in r.get("resources") or []:
                    granted.setdefault(ns, {}).setdefault((g, res, names), set()).update(r.get("verbs") or [])
    for ns in set(granted) | (set() if guard else set(CONTROLLER_RULES)):
        got, want = granted.get(ns, {}), CONTROLLER_RULES.get(ns, {})
        for key in sorted(set(got) | set(want), key=str):
            if got.get(key, set()) != want.get(key, set()):
                names = f" resourceNames {list(key[2])}" if key[2] else ""
                errs.append(f"kim-controller in {ns}: {key[0] or 'core'}/{key[1]}{names} verbs "
                            f"{sorted(got.get(key, set()))}, want {sorted(want.get(key, set()))}")
        if any("*" in v for v in got.values()) or any("*" in k[:2] for k in got):
            errs.append(f"wildcard in kim-controller's rules in {ns}")

    # --- deployment
    dep = one(docs, errs, "Deployment", "kim-webhook", "kim-system")
    tls_secret = None
    pod_labels: dict = {}
    container_ports: dict = {}
    if dep:
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        pod_labels = spec["template"]["metadata"].get("labels") or {}
        if (spec.get("replicas") or 1) < 2:
            errs.append("webhook Deployment: replicas < 2 with failurePolicy Fail")
        if spec.get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") not in (0, "0", "0%"):
            warns.append("webhook Deployment: rolling update may take a replica away before a new one is ready")
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
            errs.append("webhook Deployment selector does not match its pod labels")
        if pod.get("serviceAccountName") != "kim-webhook":
            errs.append("webhook pods must run as ServiceAccount kim-webhook")
        if pod.get("automountServiceAccountToken") is not False:
            errs.append("webhook pods must set automountServiceAccountToken: false")
        if not (pod.get("affinity", {}).get("podAntiAffinity") or pod.get("topologySpreadConstraints")):
            errs.append("webhook pods are not spread (no anti-affinity/topology spread)")
        if pod.get("terminationGracePeriodSeconds") != 30:
            errs.append("terminationGracePeriodSeconds must be 30")
        cs = pod.get("containers") or []
        if len(cs) != 1:
            errs.append(f"webhook pod has {len(cs)} containers, want 1")
        for c in cs:
            want_image = f"ghcr.io/kyma-project/kim:{crate_version}" if crate_version else None
            if want_image and c.get("image") != want_image:
                errs.append(f"image {c.get('image')} != {want_image} (Cargo.toml version)")
            args = c.get("args") or []
            if not args or args[0] != "webhook":
                errs.append("container args must start with the `webhook` subcommand")
            flags = dict(a[2:].split("=", 1) for a in args[1:] if a.startswith("--") and "=" in a)
            want_flags = {"addr": "0.0.0.0:9443", "cert-dir": "/etc/kim/certs",
                          "metrics-addr": "0.0.0.0:8080", "log-format": "json"}
            if guard:
                want_flags.update({
                    "allowed-writers": "system:serviceaccount:kcp-system:infrastructure-manager,group:system:masters",
                    "compat": "terminatingConditionType,kimHistory", "enforcement": "warn"})
            for f, v in want_flags.items():
                if flags.get(f) != v:
                    errs.append(f"container flag --{f}={flags.get(f)!r}, want {v!r}")
            for p in c.get("ports") or []:
                container_ports[p.get("name")] = p.get("containerPort")
            if container_ports.get("https") != 9443 or container_ports.get("metrics") != 8080:
                errs.append(f"container ports {container_ports}, want https 9443, metrics 8080")
            for probe, path in (("startupProbe", None), ("readinessProbe", "/readyz")):
                pr = (c.get(probe) or {}).get("httpGet") or {}
                if pr.get("scheme") != "HTTPS" or pr.get("port") not in ("https", 9443) \
                        or (path and pr.get("path") != path):
                    errs.append(f"{probe}: want HTTPS GET {path or '/healthz'} on 9443, got {pr}")
            # Liveness on the metrics port: a full HTTPS connection cap must not restart the pod.
            pr = (c.get("livenessProbe") or {}).get("httpGet") or {}
            if pr.get("scheme", "HTTP") != "HTTP" or pr.get("port") not in ("metrics", 8080) \
                    or pr.get("path") != "/healthz":
                errs.append(f"livenessProbe: want HTTP GET /healthz on 8080, got {pr}")
            errs += check_resources(c, "webhook")
            errs += check_restricted(pod, c, "webhook")
            mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
            vols = {v["name"]: v for v in pod.get("volumes") or []}
            certs = [m for m in mounts.values() if m.get("mountPath") == "/etc/kim/certs"]
            if len(certs) != 1 or certs[0].get("readOnly") is not True:
                errs.append("the TLS Secret must be mounted read-only at /etc/kim/certs")
            else:
                tls_secret = (vols.get(certs[0]["name"], {}).get("secret") or {}).get("secretName")
                if tls_secret != "kim-webhook-tls":
                    errs.append(f"/etc/kim/certs comes from {tls_secret!r}, want Secret kim-webhook-tls")

    # --- PDB, Service, NetworkPolicy
    pdb = one(docs, errs, "PodDisruptionBudget", "kim-webhook", "kim-system")
    if pdb:
        if pdb["spec"].get("minAvailable") != 1:
            errs.append("PodDisruptionBudget: minAvailable 1 expected")
        sel = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
        if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
            errs.append("PodDisruptionBudget does not select the webhook pods")
    svc = one(docs, errs, "Service", "kim-webhook", "kim-system")
    svc_ports = {}
    if svc:
        sel = svc["spec"].get("selector") or {}
        if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
            errs.append("Service kim-webhook does not select the webhook pods")
        for p in svc["spec"].get("ports") or []:
            tp = p.get("targetPort")
            tp = container_ports.get(tp, tp) if isinstance(tp, str) else tp
            svc_ports[p.get("port")] = tp
        if svc_ports.get(443) != 9443:
            errs.append(f"Service port 443 must reach container port 9443 (got {svc_ports.get(443)})")
        if svc_ports.get(8080) != 8080:
            errs.append("Service port 8080 must reach the metrics port 8080")
    for np in find(docs, "NetworkPolicy", ns="kim-system"):
        if not selects((np["spec"].get("podSelector") or {}).get("matchLabels") or {}, pod_labels):
            continue
        ports = {p.get("port") for r in np["spec"].get("ingress") or [] for p in r.get("ports") or []}
        if "Ingress" in (np["spec"].get("policyTypes") or []) and not {9443, "https"} & ports:
            errs.append(f"{doc_id(np)} does not admit port 9443: the API server could not call the webhook")

    # --- the controller
    if not guard:
        e, w = check_controller(docs, crate_version, config_text, pod_labels)
        errs += e
        warns += w

    # --- webhook configurations
    crd_names = None
    if crd:
        cs = crd.get("spec") or {}
        crd_names = (cs.get("group"), [v["name"] for v in cs.get("versions") or []],
                     (cs.get("names") or {}).get("plural"))
    ca_bundles = []
    for kind, (wname, path) in WEBHOOKS.items():
        if guard and kind.startswith("Mutating"):
            continue
        cfg = one(docs, errs, kind, "kim-runtime-status")
        if not cfg:
            continue
        hooks = cfg.get("webhooks") or []
        if [h.get("name") for h in hooks] != [wname]:
            errs.append(f"{kind}: webhooks {[h.get('name') for h in hooks]}, want [{wname}]")
            continue
        h = hooks[0]
        svcref = (h.get("clientConfig") or {}).get("service") or {}
        if svcref != {"name": "kim-webhook", "namespace": "kim-system", "path": path, "port": 443}:
            errs.append(f"{kind}: clientConfig.service {svcref}")
        if svc and svcref.get("port") not in svc_ports:
            errs.append(f"{kind}: Service kim-webhook has no port {svcref.get('port')}")
        if (h.get("clientConfig") or {}).get("url"):
            errs.append(f"{kind}: clientConfig.url must not be set")
        if h.get("rules") != [EXPECTED_RULE]:
            errs.append(f"{kind}: rules {h.get('rules')}, want [{EXPECTED_RULE}]")
        # In front of KIM while every rule warns, an unreachable guard must not block KIM.
        for f, v in {"sideEffects": "None", "failurePolicy": "Ignore" if guard or beside else "Fail", "timeoutSeconds": 5,
                     "admissionReviewVersions": ["v1"], "matchPolicy": "Equivalent"}.items():
            if h.get(f) != v:
                errs.append(f"{kind}: {f} is {h.get(f)!r}, want {v!r}")
        # Runtime status is guarded in every namespace (manifests/README.md, "Which Runtimes are
        # guarded"): a selector, even an empty one, would be a place for a restriction to creep in.
        for f in ("namespaceSelector", "objectSelector", "matchConditions"):
            if f in h:
                errs.append(f"{kind}: {f} {h[f]!r} set; the webhooks must judge every Runtime status write")
        if kind.startswith("Mutating") and h.get("reinvocationPolicy") != "IfNeeded":
            errs.append(f"{kind}: reinvocationPolicy must be IfNeeded")
        if crd_names:
            g, vs, plural = crd_names
            if g not in EXPECTED_RULE["apiGroups"] or plural + "/status" not in EXPECTED_RULE["resources"] \
                    or "v1" not in vs:
                errs.append(f"{kind}: rules do not name the CRD's group/version/plural {crd_names}")
        ann = (cfg["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        cab = (h.get("clientConfig") or {}).get("caBundle")
        if variant == "base":
            if cab or ann:
                errs.append(f"{kind}: base must carry neither caBundle nor inject-ca-from")
        elif cert_manager:
            if ann != "kim-system/kim-webhook-serving":
                errs.append(f"{kind}: annotation cert-manager.io/inject-ca-from is {ann!r}")
            if cab:
                errs.append(f"{kind}: caBundle set although cert-manager injects it")
        else:
            if not cab:
                errs.append(f"{kind}: no caBundle")
            else:
                ca_bundles.append(cab)
                try:
                    pem = base64.b64decode(cab, validate=True).decode()
                except Exception:
                    errs.append(f"{kind}: caBundle is not standard base64")
                    continue
                if pem.startswith(PLACEHOLDER_CA):
                    (errs if variant == "static-ca-generated" else warns).append(
                        f"{kind}: caBundle is the committed placeholder (run certs/gen-certs.sh before deploying)")
                elif "-----BEGIN CERTIFICATE-----" not in pem:
                    errs.append(f"{kind}: caBundle is not a PEM certificate")
    if len(set(ca_bundles)) > 1:
        errs.append("the two webhook configurations carry different caBundles")

    # --- certificates
    if cert_manager:
        cert = one(docs, errs, "Certificate", "kim-webhook-serving", "kim-system")
        if cert:
            cs = cert["spec"]
            if cs.get("secretName") != (tls_secret or "kim-webhook-tls"):
                errs.append(f"serving Certificate writes {cs.get('secretName')}, the pods mount {tls_secret}")
            want_dns = {"kim-webhook.kim-system.svc", "kim-webhook.kim-system.svc.cluster.local"}
            if not want_dns <= set(cs.get("dnsNames") or []):
                errs.append(f"serving Certificate dnsNames {cs.get('dnsNames')} lack {sorted(want_dns)}")
            if cs.get("isCA"):
                errs.append("serving Certificate must not be a CA")
            if "server auth" not in (cs.get("usages") or ["server auth"]):
                errs.append("serving Certificate lacks usage 'server auth'")
        for c in find(docs, "Certificate"):
            cs = c["spec"]
            if "duration" in cs and "renewBefore" in cs and \
                    go_duration_seconds(cs["renewBefore"]) >= go_duration_seconds(cs["duration"]):
                errs.append(f"{doc_id(c)}: renewBefore >= duration")
            if "duration" in cs and go_duration_seconds(cs["duration"]) < 3600:
                errs.append(f"{doc_id(c)}: duration below cert-manager's minimum of 1h")
            ref = cs.get("issuerRef") or {}
            issuer = one(docs, errs, ref.get("kind", "Issuer"), ref.get("name"), c["metadata"]["namespace"])
            if issuer and "ca" in issuer["spec"]:
                cas = [x for x in find(docs, "Certificate") if x["spec"].get("secretName") == issuer["spec"]["ca"]["secretName"]]
                if len(cas) != 1 or not cas[0]["spec"].get("isCA"):
                    errs.append(f"Issuer {issuer['metadata']['name']}: its CA Secret is not written by an isCA Certificate")
    return errs, warns


def check_controller(docs: list[dict], crate_version: str | None, config_text: str | None,
                     webhook_labels: dict) -> tuple[list[str], list[str]]:
    """Deployment kim-controller and its ConfigMap, Service, PodDisruptionBudget and
    NetworkPolicy; the Gardener kubeconfig Secret must not be part of any build."""
    errs: list[str] = []
    warns: list[str] = []
    labels: dict = {}
    ports: dict = {}
    dep = one(docs, errs, "Deployment", "kim-controller", "kim-system")
    if dep:
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"].get("labels") or {}
        if spec.get("replicas") != 2:
            errs.append(f"controller Deployment: replicas {spec.get('replicas')}, want 2 (leader + standby)")
        if not selects((spec.get("selector") or {}).get("matchLabels") or {}, labels):
            errs.append("controller Deployment selector does not match its pod labels")
        if selects((spec.get("selector") or {}).get("matchLabels") or {}, webhook_labels):
            errs.append("controller Deployment selector also matches the webhook pods")
        if pod.get("serviceAccountName") != "kim-controller":
            errs.append("controller pods must run as ServiceAccount kim-controller")
        if pod.get("automountServiceAccountToken") is False:
            errs.append("controller pods need the ServiceAccount token (in-cluster client)")
        if not (pod.get("affinity", {}).get("podAntiAffinity") or pod.get("topologySpreadConstraints")):
            errs.append("controller pods are not spread (no anti-affinity/topology spread)")
        cs = pod.get("containers") or []
        if len(cs) != 1 or pod.get("initContainers"):
            errs.append(f"controller pod has {len(cs)} containers (+ init containers?), want 1")
        vols = {v["name"]: v for v in pod.get("volumes") or []}
        for c in cs[:1]:
            want_image = f"ghcr.io/kyma-project/kim:{crate_version}" if crate_version else None
            if want_image and c.get("image") != want_image:
                errs.append(f"controller image {c.get('image')} != {want_image} (Cargo.toml version)")
            args = c.get("args") or []
            if not args or args[0] != "controller":
                errs.append("controller container args must start with the `controller` subcommand")
            flags = parse_flags(args[1:])
            for f, v in CONTROLLER_FLAGS.items():
                if flags.get(f) != v:
                    errs.append(f"controller flag --{f}={flags.get(f)!r}, want {v!r}")
            # leader election on, on the Lease the leader-election Role names
            if flags.get("leader-elect", "true") != "true":
                errs.append("controller: --leader-elect must stay on with 2 replicas")
            for f, v in (("lease-name", LEASE_NAME), ("lease-namespace", LEASE_NAMESPACE)):
                if flags.get(f, v) != v:
                    errs.append(f"controller --{f}={flags[f]}: the leader-election Role allows {v}")
            for f in ("kubeconfig", "policy-file", "allowed-writers", "compat", "controller-user"):
                if f in flags:
                    warns.append(f"controller flag --{f} set: keep it consistent with the webhook and RBAC")
            env = {e.get("name"): e for e in c.get("env") or []}
            for e in env:
                if e and e.startswith("KIM_"):
                    errs.append(f"controller env {e}: flags are set as args only (one place to check)")
            pn = ((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}
            if pn.get("fieldPath") != "metadata.name":
                errs.append("controller env POD_NAME must come from metadata.name (Lease identity, Event instance)")
            for p in c.get("ports") or []:
                ports[p.get("name")] = p.get("containerPort")
            if ports != {"metrics": 8081}:
                errs.append(f"controller container ports {ports}, want metrics 8081 only")
            for probe, path, required in (("startupProbe", "/healthz", False), ("readinessProbe", "/readyz", True),
                                          ("livenessProbe", "/healthz", True)):
                if probe not in c and not required:
                    continue
                pr = (c.get(probe) or {}).get("httpGet") or {}
                if pr.get("scheme", "HTTP") != "HTTP" or pr.get("port") not in ("metrics", 8081) \
                        or pr.get("path") != path:
                    errs.append(f"controller {probe}: want HTTP GET {path} on 8081, got {pr}")
            errs += check_resources(c, "controller")
            errs += check_restricted(pod, c, "controller")
            mounts = {m.get("mountPath"): m for m in c.get("volumeMounts") or []}
            for path, kind, name, key in (
                    ("/etc/kim/config", "configMap", CONTROLLER_CONFIG_MAP, "config.yaml"),
                    ("/etc/kim/gardener", "secret", GARDENER_KUBECONFIG_SECRET, "kubeconfig")):
                m = mounts.get(path)
                if not m or m.get("readOnly") is not True or m.get("subPath"):
                    errs.append(f"controller: {kind} {name} must be mounted read-only at {path} (no subPath)")
                    continue
                src = vols.get(m.get("name"), {}).get(kind) or {}
                src_name = src.get("name") if kind == "configMap" else src.get("secretName")
                if src_name != name:
                    errs.append(f"controller: {path} comes from {kind} {src_name!r}, want {name}")
                if src.get("optional") not in (None, False) or (kind == "secret" and src.get("optional") is not False):
                    errs.append(f"controller: volume {m.get('name')} must be optional: false")
                items = src.get("items")
                if items is not None and {"key": key, "path": key} not in [{"key": i.get("key"), "path": i.get("path")} for i in items]:
                    errs.append(f"controller: volume {m.get('name')} does not project key {key} to {path}/{key}")
                mode = src.get("defaultMode", 0o644)
                if kind == "secret" and mode & 0o007:
                    errs.append(f"controller: Secret {name} is world-readable (defaultMode {oct(mode)})")
            if set(mounts) - {"/etc/kim/config", "/etc/kim/gardener"}:
                warns.append(f"controller: extra mounts {sorted(set(mounts) - {'/etc/kim/config', '/etc/kim/gardener'})}")

    # --- the converter configuration: docs/config.example.yaml, verbatim
    cm = one(docs, errs, "ConfigMap", CONTROLLER_CONFIG_MAP, "kim-system")
    if cm:
        data = cm.get("data") or {}
        if set(data) != {"config.yaml"} or cm.get("binaryData"):
            errs.append(f"ConfigMap {CONTROLLER_CONFIG_MAP}: keys {sorted(data)}, want [config.yaml]")
        if config_text is None:
            errs.append("docs/config.example.yaml not found: cannot compare ConfigMap kim-controller-config")
        elif data.get("config.yaml") != config_text:
            import difflib
            diff = list(difflib.unified_diff(config_text.splitlines(), (data.get("config.yaml") or "").splitlines(),
                                             "docs/config.example.yaml", f"ConfigMap {CONTROLLER_CONFIG_MAP}",
                                             lineterm="", n=0))
            errs.append(f"ConfigMap {CONTROLLER_CONFIG_MAP} config.yaml differs from docs/config.example.yaml: "
                        + " | ".join(diff[2:8]) + (" | ..." if len(diff) > 8 else ""))

    # --- the Gardener kubeconfig is the operator's, never part of a build
    for s in find(docs, "Secret"):
        if s["metadata"].get("name") == GARDENER_KUBECONFIG_SECRET:
            errs.append(f"{doc_id(s)} is part of the build: the Gardener kubeconfig must not be committed")

    # --- Service, PodDisruptionBudget, NetworkPolicy
    svc = one(docs, errs, "Service", "kim-controller-metrics", "kim-system")
    if svc and labels:
        if not selects(svc["spec"].get("selector") or {}, labels):
            errs.append("Service kim-controller-metrics does not select the controller pods")
        if selects(svc["spec"].get("selector") or {}, webhook_labels):
            errs.append("Service kim-controller-metrics also selects the webhook pods")
        sp = [(p.get("name"), p.get("port"), ports.get(p.get("targetPort"), p.get("targetPort")))
              for p in svc["spec"].get("ports") or []]
        if sp != [("metrics", 8081, 8081)]:
            errs.append(f"Service kim-controller-metrics ports {sp}, want [metrics 8081 -> 8081]")
    pdb = one(docs, errs, "PodDisruptionBudget", "kim-controller", "kim-system")
    if pdb and labels:
        sel = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
        if pdb["spec"].get("minAvailable") != 1 or "maxUnavailable" in pdb["spec"]:
            errs.append("PodDisruptionBudget kim-controller: minAvailable 1 expected")
        if not selects(sel, labels) or selects(sel, webhook_labels):
            errs.append("PodDisruptionBudget kim-controller must select the controller pods only")
    np = one(docs, errs, "NetworkPolicy", "kim-controller", "kim-system")
    if np and labels:
        sel = (np["spec"].get("podSelector") or {}).get("matchLabels") or {}
        if not selects(sel, labels) or selects(sel, webhook_labels):
            errs.append("NetworkPolicy kim-controller must select the controller pods only")
        if np["spec"].get("policyTypes") != ["Ingress"] or "egress" in np["spec"]:
            errs.append("NetworkPolicy kim-controller: policyTypes must be [Ingress] (egress to the API servers stays open)")
        rules = np["spec"].get("ingress") or []
        nports = [(p.get("protocol", "TCP"), p.get("port"), p.get("endPort")) for r in rules for p in r.get("ports") or []]
        if not rules or any(not r.get("ports") for r in rules) or set(nports) != {("TCP", 8081, None)}:
            errs.append(f"NetworkPolicy kim-controller: ingress must admit TCP 8081 only, got {rules}")
    # no other NetworkPolicy may restrict the controller pods
    for other in find(docs, "NetworkPolicy", ns="kim-system"):
        if other is not np and labels and \
                selects((other["spec"].get("podSelector") or {}).get("matchLabels") or {}, labels):
            errs.append(f"{doc_id(other)} also selects the controller pods")
    return errs, warns


# --------------------------------------------------------------------------------------
# Dockerfile

def check_dockerfile(repo: Path) -> list[str]:
    from dockerfile_parse import DockerfileParser
    errs = []
    path = repo / "Dockerfile"
    dfp = DockerfileParser(path=str(path))
    instr = dfp.structure
    known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
             "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "COMMENT"}
    for i in instr:
        if i["instruction"] not in known:
            errs.append(f"line {i['startline'] + 1}: unknown instruction {i['instruction']}")
    stages: list[list[dict]] = []
    for i in instr:
        if i["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(i)
        elif i["instruction"] not in ("ARG", "COMMENT"):
            errs.append(f"line {i['startline'] + 1}: {i['instruction']} before the first FROM")
    if len(stages) < 2:
        errs.append("not a multi-stage build")
        return errs
    names = set()
    for s in stages:
        parts = s[0]["value"].split()
        if len(parts) == 3 and parts[1].upper() == "AS":
            names.add(parts[2])
    build_img = stages[0][0]["value"].split()[0]
    if not re.match(r"^(docker\.io/(library/)?)?rust:\d+\.\d+", build_img):
        errs.append(f"builder image {build_img} is not an official rust image")
    runs = " ".join(i["value"] for s in stages[:-1] for i in s if i["instruction"] == "RUN")
    if not re.search(r"cargo build --release --locked --bin kim", runs):
        errs.append("no `cargo build --release --locked --bin kim` in the builder")
    final = stages[-1]
    if final[0]["value"].split()[0] != "gcr.io/distroless/cc-debian12:nonroot":
        errs.append(f"runtime image {final[0]['value']} (want gcr.io/distroless/cc-debian12:nonroot)")
    users = [i["value"].strip() for i in final if i["instruction"] == "USER"]
    if users[-1:] != ["65532:65532"]:
        errs.append(f"final stage USER {users[-1:] or None}, want 65532:65532")
    eps = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    try:
        if not eps or json.loads(eps[-1]) != ["/kim"]:
            errs.append(f"ENTRYPOINT {eps[-1:]} (want exec form [\"/kim\"])")
    except json.JSONDecodeError:
        errs.append(f"ENTRYPOINT {eps[-1]} is not exec (JSON) form")
    for s in stages:
        for i in s:
            if i["instruction"] == "COPY" and "--from=" in i["value"]:
                src = re.search(r"--from=(\S+)", i["value"]).group(1)
                if src not in names and not re.match(r"^\d+$", src):
                    errs.append(f"COPY --from={src}: no such stage")
            if i["instruction"] == "ADD" and re.search(r"https?://", i["value"]):
                errs.append("ADD of a URL: not reproducible")
    di = repo / ".dockerignore"
    if not di.is_file():
        errs.append("no .dockerignore")
    else:
        entries = {ln.strip().rstrip("/") for ln in di.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
        for need in ("target", "certs/out", ".git"):
            if need not in entries:
                errs.append(f".dockerignore does not exclude {need}")
    return errs


# --------------------------------------------------------------------------------------
# gen-certs.sh

def check_gen_certs(repo: Path, tool, vals: Validators, crate_version) -> tuple[list[str], str]:
    errs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kim-gen-certs-") as tmp:
        t = Path(tmp)
        shutil.copytree(repo / "manifests" / "base", t / "manifests" / "base")
        shutil.copytree(repo / "manifests" / "overlays" / "static-ca", t / "manifests" / "overlays" / "static-ca")
        out = t / "out"
        p = subprocess.run(["bash", str(repo / "certs" / "gen-certs.sh"), "--out", str(out), "--overlay",
                            str(t / "manifests" / "overlays" / "static-ca"), "--days", "30"],
                           capture_output=True, text=True, cwd=tmp)
        if p.returncode != 0:
            return [f"gen-certs.sh exited {p.returncode}: {(p.stderr or p.stdout).strip()}"], ""
        for f in ("ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml", "kustomization.yaml"):
            if not (out / f).is_file():
                errs.append(f"{f} not written")
        for f in ("ca.key", "tls.key", "secret.yaml"):
            if (out / f).is_file() and (out / f).stat().st_mode & 0o077:
                errs.append(f"{f} is readable by others")
        if errs:
            return errs, ""

        def ossl(*a):
            return subprocess.run(["openssl", *a], capture_output=True, text=True)
        v = ossl("verify", "-CAfile", str(out / "ca.crt"), "-purpose", "sslserver", str(out / "tls.crt"))
        if v.returncode != 0:
            errs.append(f"openssl verify: {v.stdout.strip()} {v.stderr.strip()}")
        text = ossl("x509", "-in", str(out / "tls.crt"), "-noout", "-text").stdout
        for san in ("kim-webhook.kim-system.svc", "kim-webhook.kim-system.svc.cluster.local", "kim-webhook"):
            if f"DNS:{san}," not in text + "," and f"DNS:{san}\n" not in text + "\n":
                errs.append(f"serving cert lacks SAN DNS:{san}")
        if "TLS Web Server Authentication" not in text:
            errs.append("serving cert lacks extendedKeyUsage serverAuth")
        m = ossl("pkey", "-in", str(out / "tls.key"), "-pubout").stdout
        if m != ossl("x509", "-in", str(out / "tls.crt"), "-noout", "-pubkey").stdout:
            errs.append("tls.key does not match tls.crt")
        ca_pem = (out / "ca.crt").read_text()
        try:
            docs = build(out, tool)
        except (ValueError, yaml.YAMLError) as e:
            return errs + [f"the generated kustomization does not build: {e}"], ""
        for d in docs:
            _, e = vals.any_doc(d)
            errs += e
        e, w = check_conformance(docs, "static-ca-generated", crate_version, None, example_config(repo))
        errs += e
        sec = find(docs, "Secret", "kim-webhook-tls", "kim-system")
        if len(sec) != 1 or sec[0].get("type") != "kubernetes.io/tls":
            errs.append("no Secret kim-system/kim-webhook-tls of type kubernetes.io/tls in the generated build")
        else:
            data = sec[0].get("data") or {}
            if base64.b64decode(data.get("tls.crt", "")) != (out / "tls.crt").read_bytes() or \
                    base64.b64decode(data.get("tls.key", "")) != (out / "tls.key").read_bytes():
                errs.append("Secret data differs from tls.crt/tls.key")
        for cfg in find(docs, "ValidatingWebhookConfiguration") + find(docs, "MutatingWebhookConfiguration"):
            cab = cfg["webhooks"][0]["clientConfig"].get("caBundle", "")
            if base64.b64decode(cab).decode() != ca_pem:
                errs.append(f"{doc_id(cfg)}: caBundle is not certs/out/ca.crt")
        # a second run reuses the CA: the caBundle must not change
        before = (t / "manifests/overlays/static-ca/cabundle-patch.yaml").read_text()
        p2 = subprocess.run(["bash", str(repo / "certs" / "gen-certs.sh"), "--out", str(out), "--overlay",
                             str(t / "manifests" / "overlays" / "static-ca")], capture_output=True, text=True, cwd=tmp)
        if p2.returncode != 0 or (t / "manifests/overlays/static-ca/cabundle-patch.yaml").read_text() != before:
            errs.append("a second run did not keep the CA (caBundle changed or the run failed)")
        return errs, f"{len(docs)} objects, chain + SANs verified, CA reused on re-run"


# --------------------------------------------------------------------------------------

def example_config(repo: Path) -> str | None:
    p = repo / "docs" / "config.example.yaml"
    return p.read_text() if p.is_file() else None


def crate_version(repo: Path) -> str | None:
    try:
        import tomllib
        return tomllib.loads((repo / "Cargo.toml").read_text())["package"]["version"]
    except Exception:
        return None


def check_policy(docs: list[dict]) -> list[str]:
    """The shipped ValidatingAdmissionPolicy (manifests/overlays/policy): one policy and its
    binding, both kim-runtime-status, matching runtimes/status UPDATEs in every namespace (the
    binding has no matchResources), denying, each validation's message starting with a rule id."""
    errs: list[str] = []
    kinds = sorted(d["kind"] for d in docs)
    if kinds != ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]:
        return [f"policy objects {kinds}, want a ValidatingAdmissionPolicy and its binding"]
    pol = one(docs, errs, "ValidatingAdmissionPolicy", "kim-runtime-status")
    bind = one(docs, errs, "ValidatingAdmissionPolicyBinding", "kim-runtime-status")
    if not pol or not bind:
        return errs
    spec, bspec = pol.get("spec") or {}, bind.get("spec") or {}
    want_rule = {"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                 "operations": ["UPDATE"], "resources": ["runtimes/status"]}
    if (spec.get("matchConstraints") or {}).get("resourceRules") != [want_rule]:
        errs.append(f"ValidatingAdmissionPolicy: resourceRules {spec.get('matchConstraints')}, want [{want_rule}]")
    if spec.get("failurePolicy") != "Fail":
        errs.append("ValidatingAdmissionPolicy: failurePolicy must be Fail")
    vs = spec.get("validations") or []
    if not vs:
        errs.append("ValidatingAdmissionPolicy: no validations")
    for i, v in enumerate(vs):
        if not str(v.get("messageExpression", "")).startswith("'["):
            errs.append(f"ValidatingAdmissionPolicy: validations[{i}] message does not start with a rule id")
    if bspec.get("policyName") != "kim-runtime-status" or bspec.get("validationActions") != ["Deny"]:
        errs.append(f"ValidatingAdmissionPolicyBinding: {bspec}, want policyName kim-runtime-status, [Deny]")
    if "matchResources" in bspec:
        errs.append(f"ValidatingAdmissionPolicyBinding: matchResources {bspec['matchResources']!r} set; "
                    "the policy must judge Runtime status writes in every namespace")
    if "matchConditions" in spec and [c.get("name") for c in spec["matchConditions"]] != ["status-changed"]:
        errs.append(f"ValidatingAdmissionPolicy: matchConditions {spec['matchConditions']!r}, want status-changed only")
    return errs


def check_mutating_policy(docs: list[dict]) -> list[str]:
    """The shipped MutatingAdmissionPolicy (manifests/overlays/policy-and-defaulting): one
    policy and its binding, both kim-runtime-status, on runtimes/status UPDATEs in every
    namespace (no matchResources, no matchConditions), failurePolicy Fail, reinvocationPolicy
    IfNeeded, one JSONPatch mutation (`kim policy --format map`)."""
    errs: list[str] = []
    kinds = sorted(d["kind"] for d in docs)
    if kinds != ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]:
        return [f"mutating policy objects {kinds}, want a MutatingAdmissionPolicy and its binding"]
    pol = one(docs, errs, "MutatingAdmissionPolicy", "kim-runtime-status")
    bind = one(docs, errs, "MutatingAdmissionPolicyBinding", "kim-runtime-status")
    if not pol or not bind:
        return errs
    spec, bspec = pol.get("spec") or {}, bind.get("spec") or {}
    want_rule = {"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                 "operations": ["UPDATE"], "resources": ["runtimes/status"]}
    if (spec.get("matchConstraints") or {}).get("resourceRules") != [want_rule]:
        errs.append(f"MutatingAdmissionPolicy: resourceRules {spec.get('matchConstraints')}, want [{want_rule}]")
    if spec.get("failurePolicy") != "Fail" or spec.get("reinvocationPolicy") != "IfNeeded":
        errs.append("MutatingAdmissionPolicy: failurePolicy must be Fail, reinvocationPolicy IfNeeded")
    if "matchConditions" in spec:
        errs.append("MutatingAdmissionPolicy: matchConditions set; every status write must be defaulted")
    ms = spec.get("mutations") or []
    if len(ms) != 1 or ms[0].get("patchType") != "JSONPatch" or not (ms[0].get("jsonPatch") or {}).get("expression"):
        errs.append(f"MutatingAdmissionPolicy: mutations {ms!r}, want one JSONPatch")
    if bspec != {"policyName": "kim-runtime-status"}:
        errs.append(f"MutatingAdmissionPolicyBinding: {bspec}, want policyName kim-runtime-status only "
                    "(no matchResources: every namespace)")
    return errs


def check_build(docs: list[dict], vals: Validators, variant: str | None, version, crd, config,
                monitoring: tuple[list[dict], Path] | None = None):
    """Schemas of every object, and conformance unless `variant` is None (the monitoring
    overlay: validate_monitoring.check_overlay against `monitoring` = (base's objects, the
    overlay's directory)). Returns (errors, warnings, detail)."""
    errs, kinds = [], {}
    for doc in docs:
        cls, e = vals.any_doc(doc)
        kinds[cls] = kinds.get(cls, 0) + 1
        errs += e
    warns = []
    if variant == "monitoring" and monitoring is not None:
        e, warns = validate_monitoring.check_overlay(docs, monitoring[0], monitoring[1])
        errs += e
    elif variant == "policy":
        errs += check_policy(docs)
    elif variant == "policy-and-defaulting":
        errs += check_policy([d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")])
        errs += check_mutating_policy([d for d in docs if not d["kind"].startswith("ValidatingAdmissionPolicy")])
    elif variant is not None:
        e, warns = check_conformance(docs, variant, version, crd, config)
        errs += e
    detail = f"{len(docs)} objects: {kinds.get('k8s', 0)} built-in (kubernetes-validate)"
    if kinds.get("cert-manager"):
        detail += f", {kinds['cert-manager']} cert-manager (hand-written schema)"
    if kinds.get("monitoring"):
        detail += f", {kinds['monitoring']} monitoring.coreos.com (hand-written schema)"
    if variant is not None:
        detail += ", conformance"
    return errs, warns, detail


# charts/kim renders with each values file and the conformance variant to check it as (None:
# schemas only). The guard-only render has no controller, which conformance requires.
HELM_VARIANTS = {
    "ca-bundle-values.yaml": "static-ca",
    "guard-only-values.yaml": "guard-kim",
    "admission-policy-values.yaml": "webhook-and-policy",
    "policy-values.yaml": None,
    "policy-and-defaulting-values.yaml": None,
}


def check_chart(repo: Path, helm: list[str], vals: Validators, version, crd, config) -> None:
    chart = repo / "charts" / "kim"
    values = sorted((chart / "ci").glob("*-values.yaml"))
    for f in [None] + values:
        args = ["-f", str(f)] if f else []
        name = f"charts/kim ({os.path.relpath(f, repo) if f else 'default values'})"
        try:
            run_tool(helm + ["lint", "--strict", str(chart)] + args)
            docs = load_yaml_docs(run_tool(helm + ["template", "kim", str(chart), "--namespace", "kim-system"] + args))
        except (ValueError, yaml.YAMLError) as e:
            report("FAIL", name, "helm lint --strict / helm template", [str(e)])
            continue
        variant = "cert-manager" if f is None else HELM_VARIANTS.get(f.name)
        if f is not None and f.name not in HELM_VARIANTS:
            report("FAIL", name, "", [f"{f.name} is not in HELM_VARIANTS of scripts/validate_manifests.py"])
            continue
        # The CRD is manifests/crd.yaml (checked above); the rest as any build.
        rest = [d for d in docs if d.get("kind") != "CustomResourceDefinition"]
        errs, warns, detail = check_build(rest, vals, variant, version, crd, config)
        report("FAIL" if errs else "PASS", name, "helm lint --strict, helm template; " + detail, errs)
        for w in warns:
            note(f"note: {w}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=".")
    ap.add_argument("--kubectl", required=True, help="the kubectl binary (kustomize builds)")
    ap.add_argument("--helm", required=True, help="the helm binary (charts/kim)")
    ap.add_argument("--samples", default="samples/runtimes")
    ap.add_argument("--k8s-versions", default="1.31 1.37")
    ap.add_argument("--skip-gen-certs", action="store_true")
    a = ap.parse_args()
    repo = Path(a.repo).resolve()
    tool = [a.kubectl, "kustomize"]
    helm = [a.helm]
    versions = a.k8s_versions.split()
    vals = Validators(versions)
    version = crate_version(repo)
    config = example_config(repo)
    kustomize_version = run_tool([a.kubectl, "version", "--client"]).strip().splitlines()[-1]
    print(f"kubernetes-validate {kubernetes_validate.__version__} (strict) for Kubernetes {', '.join(versions)}; "
          f"kubectl kustomize ({kustomize_version})", flush=True)

    # --- the CRD
    crd = None
    crd_schemas: dict = {}
    try:
        docs = load_yaml_docs((repo / "manifests" / "crd.yaml").read_text())
        if len(docs) != 1 or docs[0].get("kind") != "CustomResourceDefinition":
            raise ValueError(f"expected one CustomResourceDefinition, found {[doc_id(d) for d in docs]}")
        crd = docs[0]
        errs, crd_schemas, stats = crd_checks(crd, vals)
    except (OSError, ValueError, yaml.YAMLError) as e:
        errs, stats = [str(e)], {}
    report("FAIL" if errs else "PASS", "manifests/crd.yaml",
           f"CustomResourceDefinition, k8s {'/'.join(versions)} strict; structure; schema translated"
           + (f"; {stats.get('cel_rules', 0)} x-kubernetes-validations rules not evaluated" if not errs else ""),
           errs)

    # --- kustomizations
    builds = [("manifests", None), ("manifests/base", "base")]
    builds += [(f"manifests/overlays/{p.name}", p.name)
               for p in sorted((repo / "manifests" / "overlays").iterdir()) if find_kustomization(p)]
    out = repo / "certs" / "out"
    if find_kustomization(out):
        builds.append(("certs/out", "static-ca-generated"))
    for rel, variant in builds:
        try:
            docs = build(repo / rel, tool)
        except (ValueError, yaml.YAMLError) as e:
            report("FAIL", f"{rel}/ (kubectl kustomize)", "", [str(e)])
            continue
        monitoring = (build(repo / "manifests" / "base", tool), repo / rel) if variant == "monitoring" else None
        errs, warns, detail = check_build(docs, vals, variant, version, crd, config, monitoring)
        report("FAIL" if errs else "PASS", f"{rel}/ (kubectl kustomize)", detail, errs)
        for w in warns:
            note(f"note: {w}")

    # --- the Helm chart
    check_chart(repo, helm, vals, version, crd, config)

    # --- samples
    samples = (repo / a.samples).resolve()
    files = sorted(samples.glob("*.yaml")) + sorted(samples.glob("*.yml")) if samples.is_dir() else []
    if not files:
        report("FAIL", f"{a.samples}/*.yaml", "no sample Runtimes found")
    elif not crd_schemas:
        report("SKIP", f"{a.samples}/*.yaml", f"{len(files)} samples: no CRD schema to validate against")
    else:
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        validators = {v: sample_validator(s, versions[-1]) for v, s in crd_schemas.items()}
        for f in files:
            errs = []
            try:
                docs = load_yaml_docs(f.read_text())
            except yaml.YAMLError as e:
                docs, errs = [], [f"YAML: {e}"]
            for doc in docs:
                av = doc.get("apiVersion", "")
                if _group(av) != group or doc.get("kind") != kind:
                    errs.append(f"{doc_id(doc)}: not a {group} {kind}")
                    continue
                v = validators.get(av.split("/")[-1])
                if v is None:
                    errs.append(f"{doc_id(doc)}: the CRD has no version {av}")
                    continue
                errs += metadata_errors(doc)
                for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.path))):
                    errs.append(f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}")
            report("FAIL" if errs else "PASS", f"{os.path.relpath(f, repo)}",
                   f"{len(docs)} Runtime(s) against the CRD's openAPIV3Schema (unknown fields rejected)", errs)

    # --- Dockerfile
    if (repo / "Dockerfile").is_file():
        try:
            errs = check_dockerfile(repo)
        except Exception as e:  # a parser failure is a failure
            errs = [f"dockerfile-parse: {e}"]
        report("FAIL" if errs else "PASS", "Dockerfile", "dockerfile-parse; stages, images, USER, ENTRYPOINT; .dockerignore", errs)
    else:
        report("FAIL", "Dockerfile", "missing")

    # --- gen-certs.sh
    if a.skip_gen_certs:
        report("SKIP", "certs/gen-certs.sh", "skipped on request")
    elif not shutil.which("openssl"):
        report("SKIP", "certs/gen-certs.sh", "no openssl CLI")
    else:
        errs, detail = check_gen_certs(repo, tool, vals, version)
        report("FAIL" if errs else "PASS", "certs/gen-certs.sh", detail or "smoke run in a scratch directory", errs)

    # --- shell scripts
    for f in ("certs/gen-certs.sh", "scripts/validate-manifests.sh", "scripts/install-tools.sh",
              "scripts/install-prometheus.sh", "scripts/install-haproxy.sh",
              "scripts/install-control-plane.sh", "scripts/test.sh"):
        if not (repo / f).is_file():
            report("FAIL", f, "missing")
            continue
        p = subprocess.run(["bash", "-n", f], cwd=repo, capture_output=True, text=True)
        if p.returncode != 0:
            report("FAIL", f, "bash -n", p.stderr.strip().splitlines())
        elif shutil.which("shellcheck"):
            p = subprocess.run(["shellcheck", "-S", "warning", f], cwd=repo, capture_output=True, text=True)
            report("FAIL" if p.returncode else "PASS", f, "bash -n, shellcheck -S warning",
                   p.stdout.strip().splitlines() if p.returncode else None)
        else:
            report("PASS", f, "bash -n; shellcheck not available")

    print(f"validate-manifests: {RESULTS['PASS']} passed, {RESULTS['FAIL']} failed, {RESULTS['SKIP']} skipped", flush=True)
    return 1 if RESULTS["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
