#!/usr/bin/env bash
# Offline validation of kim's deployment files: kustomize builds (kubectl kustomize), the Helm
# chart (helm lint --strict, helm template), Kubernetes schemas (kubernetes-validate, strict),
# the webhook's and the controller's facts (exact RBAC verbs, ConfigMap kim-controller-config ==
# docs/config.example.yaml), the CRD, the sample Runtimes against the CRD's schema, cert-manager
# objects, the Dockerfile, certs/gen-certs.sh and the shell scripts.
# Details: scripts/validate_manifests.py. Run from anywhere; exits non-zero on any failure.
#
# Environment:
#   KIM_K8S_VERSIONS     Kubernetes versions to validate against   (default: "1.31 1.37")
#   KIM_VALIDATE_VENV    virtualenv to create/use                   (default: target/validate-venv)
#   KIM_TOOLS_DIR        where scripts/install-tools.sh installs kubectl and helm (default: target/tools)
#   KIM_VALIDATE_NO_INSTALL=1  install nothing with apt-get (shellcheck)
#   KIM_SAMPLES          sample Runtimes, relative to the repo root  (default: samples/runtimes)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

venv=${KIM_VALIDATE_VENV:-target/validate-venv}
k8s_versions=${KIM_K8S_VERSIONS:-1.31 1.37}
samples=${KIM_SAMPLES:-samples/runtimes}
# kubernetes-validate is pinned: it carries the schemas, so its version fixes the result.
requirements=(
  "kubernetes-validate==1.37.0"
  "jsonschema>=4.18,<5"
  "pyyaml>=6,<7"
  "dockerfile-parse>=2,<3"
)

say() { echo "validate-manifests: $*"; }

# --- Python environment ---------------------------------------------------------------
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { say "python3 not found"; exit 2; }
stamp="$venv/.kim-requirements"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]; then
  say "setting up $venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${requirements[@]}"
  echo "${requirements[*]}" >"$stamp"
fi
py="$venv/bin/python"

# --- kubectl (kustomize) and helm ----------------------------------------------------------
# Builds are made by the real tools only: scripts/install-tools.sh puts kubectl (kustomize
# built in) and helm into target/tools/bin (a no-op when they are there).
bash scripts/install-tools.sh
tools=${KIM_TOOLS_DIR:-$repo/target/tools}/bin

# --- shellcheck, for the shell-script checks -------------------------------------------
if ! command -v shellcheck >/dev/null 2>&1 && [ "${KIM_VALIDATE_NO_INSTALL:-0}" != 1 ] &&
   [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing shellcheck (Debian package)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq shellcheck >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq shellcheck >/dev/null 2>&1; } ||
    say "shellcheck could not be installed: shell scripts get bash -n only"
fi

# --- manifests, CRD, samples, Dockerfile, gen-certs, shell scripts -----------------------
# One line per checked file or build; the last line is the "N passed, N failed" summary.
exec "$py" scripts/validate_manifests.py --repo "$repo" --kubectl "$tools/kubectl" --helm "$tools/helm" \
  --k8s-versions "$k8s_versions" --samples "$samples"
