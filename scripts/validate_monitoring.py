"""Offline checks of manifests/overlays/monitoring, called by validate_manifests.py: the
monitoring.coreos.com/v1 objects against hand-written schemas (schema_errors) and the
overlay's facts (check_overlay)."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import yaml

_CM_META = {"type": "object", "required": ["name", "namespace"],
            "properties": {"name": {"type": "string", "maxLength": 253},
                           "namespace": {"type": "string"}}}


def _doc_id(d: dict) -> str:
    md = d.get("metadata") or {}
    ns = md.get("namespace")
    return f"{d.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def _find(docs, kind, name=None, ns=None):
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"].get("name") == name)
            and (ns is None or d["metadata"].get("namespace") == ns)]


def _one(docs, errs, kind, name, ns=None):
    hits = _find(docs, kind, name, ns)
    if len(hits) != 1:
        errs.append(f"expected one {kind} {ns + '/' if ns else ''}{name}, found {len(hits)}")
        return None
    return hits[0]


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# Hand-written from the Prometheus Operator's monitoring.coreos.com/v1 API reference (the CRDs
# are not to be had from PyPI or npm; the generated models there accept unknown fields): the
# fields kim's overlay uses are typed, the other documented fields are accepted as they are
# (`True`), anything else is an error. Rule expressions are checked by promtool (below and in
# tests/suite/ops_rules.rs), not here.
PROM_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_PROM_RULE = {
    "type": "object", "required": ["expr"], "additionalProperties": False,
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string", "minLength": 1}, "record": {"type": "string", "minLength": 1},
        "expr": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
        "for": {"type": "string", "pattern": PROM_DURATION},
        "keep_firing_for": {"type": "string", "pattern": PROM_DURATION, "minLength": 1},
        "labels": _STRING_MAP, "annotations": _STRING_MAP,
    },
}
_SM_ENDPOINT = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "port": {"type": "string", "minLength": 1},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": {"type": "string", "pattern": PROM_DURATION},
        "scrapeTimeout": {"type": "string", "pattern": PROM_DURATION},
        "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
        # documented, unused here:
        "targetPort": True, "params": True, "relabelings": True, "metricRelabelings": True,
        "tlsConfig": True, "bearerTokenFile": True, "bearerTokenSecret": True, "authorization": True,
        "basicAuth": True, "oauth2": True, "proxyUrl": True, "noProxy": True, "proxyFromEnvironment": True,
        "proxyConnectHeader": True, "followRedirects": True, "enableHttp2": True, "filterRunning": True,
        "trackTimestampsStaleness": True,
    },
}
MONITORING_SCHEMAS = {
    "PrometheusRule": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
            "metadata": _CM_META,
            "spec": {"type": "object", "required": ["groups"], "additionalProperties": False, "properties": {
                "groups": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["name", "rules"], "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "pattern": PROM_DURATION},
                        "rules": {"type": "array", "items": _PROM_RULE},
                        "query_offset": True, "limit": True, "partial_response_strategy": True, "labels": True,
                    }}}}},
        },
    },
    "ServiceMonitor": {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
            "metadata": _CM_META,
            "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
                     "properties": {
                         "jobLabel": {"type": "string"},
                         "selector": {"type": "object", "additionalProperties": False, "properties": {
                             "matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}}},
                         "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                             "any": {"type": "boolean"},
                             "matchNames": {"type": "array", "items": {"type": "string"}}}},
                         "endpoints": {"type": "array", "minItems": 1, "items": _SM_ENDPOINT},
                         # documented, unused here:
                         "targetLabels": True, "podTargetLabels": True, "sampleLimit": True,
                         "targetLimit": True, "labelLimit": True, "labelNameLengthLimit": True,
                         "labelValueLengthLimit": True, "keepDroppedTargets": True, "attachMetadata": True,
                         "scrapeClass": True, "scrapeProtocols": True, "fallbackScrapeProtocol": True,
                         "bodySizeLimit": True, "nativeHistogramBucketLimit": True,
                         "nativeHistogramMinBucketFactor": True, "scrapeClassicHistograms": True,
                         "convertClassicHistogramsToNHCB": True, "serviceDiscoveryRole": True,
                         "selectorMechanism": True,
                     }},
        },
    },
}


def schema_errors(d: dict, what: str) -> list[str]:
    """`d` against its monitoring.coreos.com/v1 schema (unknown fields are errors)."""
    schema = MONITORING_SCHEMAS.get(d.get("kind"))
    if schema is None or d.get("apiVersion") != "monitoring.coreos.com/v1":
        return [f"{what}: no schema for {d.get('apiVersion')} {d.get('kind')}"]
    v = jsonschema.Draft202012Validator(schema)
    return [f"{what} [monitoring.coreos.com schema]: {'.'.join(map(str, e.path))}: {e.message}"
            for e in sorted(v.iter_errors(d), key=lambda e: list(map(str, e.path)))]


def check_overlay(docs: list[dict], base: list[dict], overlay: Path) -> tuple[list[str], list[str]]:
    """manifests/overlays/monitoring: the PrometheusRule is rules/kim.rules.yaml (and promtool
    accepts it, when installed), every alert has severity, summary, description, runbook_url;
    each ServiceMonitor selects the one Service of its component in base, scrapes its plain-HTTP
    `metrics` port (the port the pods' prometheus.io/* annotations name) and yields the job name
    the alerts select; the dashboard ConfigMap is dashboards/kim.json with the sidecar label.
    `base`: the documents of manifests/base. Returns (errors, notes)."""
    errs: list[str] = []
    notes: list[str] = []
    for d in docs:
        if (d.get("kind"), d["metadata"].get("name")) not in {
                ("PrometheusRule", "kim"), ("ServiceMonitor", "kim-webhook"),
                ("ServiceMonitor", "kim-controller"), ("ConfigMap", "kim-grafana-dashboard")}:
            errs.append(f"{_doc_id(d)}: not expected in the monitoring overlay")
    rule = _one(docs, errs, "PrometheusRule", "kim", "kim-system")
    if rule:
        rules_file = overlay / "rules" / "kim.rules.yaml"
        if rule.get("spec") != yaml.safe_load(rules_file.read_text()):
            errs.append("PrometheusRule kim: spec differs from rules/kim.rules.yaml "
                        "(regenerate: KIM_UPDATE_RULES=1 cargo test --test suite ops_rules)")
        for g in (rule.get("spec") or {}).get("groups") or []:
            for r in g.get("rules") or []:
                name = r.get("alert") or r.get("record")
                if "alert" not in r:
                    continue
                if (r.get("labels") or {}).get("severity") not in ("critical", "warning"):
                    errs.append(f"alert {name}: severity must be critical or warning")
                for a in ("summary", "description", "runbook_url"):
                    if not (r.get("annotations") or {}).get(a):
                        errs.append(f"alert {name}: no {a} annotation")
        if shutil.which("promtool"):
            with tempfile.NamedTemporaryFile("w", suffix=".rules.yaml") as f:
                yaml.safe_dump(rule.get("spec"), f)
                f.flush()
                p = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
            if p.returncode != 0:
                errs.append(f"promtool check rules on the PrometheusRule's spec: {(p.stdout + p.stderr).strip()}")
            else:
                notes.append("PrometheusRule spec: promtool check rules passed")
        else:
            notes.append("promtool not installed (scripts/install-prometheus.sh): rules not parsed here")
    for name, deployment, honor in (("kim-webhook", "kim-webhook", False), ("kim-controller", "kim-controller", True)):
        sm = _one(docs, errs, "ServiceMonitor", name, "kim-system")
        if not sm:
            continue
        spec = sm["spec"]
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        svcs = [x for x in _find(base, "Service", ns="kim-system") if _selects(sel, x["metadata"].get("labels") or {})]
        if len(svcs) != 1:
            errs.append(f"ServiceMonitor {name} selects {[_doc_id(x) for x in svcs]}, want one Service")
            continue
        svc = svcs[0]
        if "kim-system" not in ((spec.get("namespaceSelector") or {}).get("matchNames") or []):
            errs.append(f"ServiceMonitor {name}: namespaceSelector must name kim-system")
        job = (svc["metadata"].get("labels") or {}).get(spec.get("jobLabel") or "", svc["metadata"]["name"])
        if job != name:
            errs.append(f"ServiceMonitor {name}: job would be {job!r}; the alerts select job={name!r}")
        ports = {x.get("name"): x for x in svc["spec"].get("ports") or []}
        dep = _one(base, errs, "Deployment", deployment, "kim-system")
        if not dep:
            continue
        pod = dep["spec"]["template"]
        cports = {x.get("name"): x.get("containerPort") for c in pod["spec"]["containers"] for x in c.get("ports") or []}
        ann = pod["metadata"].get("annotations") or {}
        for ep in spec.get("endpoints") or []:
            sp = ports.get(ep.get("port"))
            if ep.get("port") != "metrics" or sp is None:
                errs.append(f"ServiceMonitor {name}: endpoint port {ep.get('port')!r} is not the Service's metrics port")
                continue
            tp = sp.get("targetPort")
            target = cports.get(tp) if isinstance(tp, str) else tp
            if ep.get("scheme", "http").lower() != "http" or ep.get("path", "/metrics") != "/metrics":
                errs.append(f"ServiceMonitor {name}: the metrics port serves plain HTTP /metrics")
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(target) \
                    or ann.get("prometheus.io/path", "/metrics") != "/metrics":
                errs.append(f"Deployment {deployment}: prometheus.io/* annotations {ann} disagree with "
                            f"the ServiceMonitor's port {target}")
            if honor and ep.get("honorLabels") is not True:
                errs.append(f"ServiceMonitor {name}: honorLabels must be true (the per-Runtime series' "
                            "namespace label would become exported_namespace)")
    cm = _one(docs, errs, "ConfigMap", "kim-grafana-dashboard", "kim-system")
    if cm:
        if (cm["metadata"].get("labels") or {}).get("grafana_dashboard") != "1":
            errs.append("ConfigMap kim-grafana-dashboard: label grafana_dashboard: \"1\" missing")
        data = cm.get("data") or {}
        want = json.loads((overlay / "dashboards" / "kim.json").read_text())
        if list(data) != ["kim.json"] or json.loads(data["kim.json"]) != want:
            errs.append("ConfigMap kim-grafana-dashboard does not carry dashboards/kim.json")
    return errs, notes
