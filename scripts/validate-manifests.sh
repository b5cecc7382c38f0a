#!/usr/bin/env bash
# Offline validation of kim's deployment files: kustomize builds, Kubernetes schemas
# (kubernetes-validate, strict), the webhook's and the controller's facts (exact RBAC verbs,
# ConfigMap kim-controller-config == docs/config.example.yaml), the CRD, the sample Runtimes
# against the CRD's schema, cert-manager objects, the Dockerfile, certs/gen-certs.sh and the
# shell scripts.
# Details: scripts/validate_manifests.py. Run from anywhere; exits non-zero on any failure.
#
# Environment:
#   KIM_K8S_VERSIONS     Kubernetes versions to validate against   (default: "1.31 1.37")
#   KIM_VALIDATE_VENV    virtualenv to create/use                   (default: target/validate-venv)
#   KIM_VALIDATE_CRD     CRD file to use while manifests/crd.yaml does not exist
#   KIM_VALIDATE_CARGO=0 do not try `cargo run -- crd` when manifests/crd.yaml does not exist
#   KIM_VALIDATE_NO_INSTALL=1  install nothing with apt-get (shellcheck)
#   KIM_SAMPLES          sample Runtimes, relative to the repo root  (default: ../shared/samples/runtimes)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

venv=${KIM_VALIDATE_VENV:-target/validate-venv}
k8s_versions=${KIM_K8S_VERSIONS:-1.31 1.37}
samples=${KIM_SAMPLES:-../shared/samples/runtimes}
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

# --- kustomize ------------------------------------------------------------------------
# kubectl carries kustomize (`kubectl kustomize`); a standalone kustomize works too. Neither
# is in Debian's archive, PyPI or npm, so nothing is installed here: without them the
# built-in loader of validate_manifests.py (resources + patches, kustomize's load rules)
# renders the kustomizations instead, and says so.
kustomize=""
if command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1; then
  kustomize="kubectl kustomize"
elif command -v kustomize >/dev/null 2>&1; then
  kustomize="kustomize build"
else
  say "no kubectl or kustomize binary (none installable from the reachable registries):" \
      "kustomize builds use the built-in loader instead"
fi

# --- a CRD while manifests/crd.yaml does not exist yet ------------------------------------
crd_arg=()
if [ ! -f manifests/crd.yaml ]; then
  if [ -n "${KIM_VALIDATE_CRD:-}" ]; then
    crd_arg=(--crd "$KIM_VALIDATE_CRD")
  elif [ "${KIM_VALIDATE_CARGO:-1}" != 0 ] && command -v cargo >/dev/null 2>&1; then
    tmp_crd="target/validate-crd.yaml"
    mkdir -p target
    say "manifests/crd.yaml does not exist: trying \`cargo run -q --bin kim -- crd\`"
    if cargo run -q --bin kim -- crd >"$tmp_crd" 2>target/validate-crd.log && [ -s "$tmp_crd" ]; then
      crd_arg=(--crd "$tmp_crd")
    else
      say "could not generate a CRD (see target/validate-crd.log)"
      rm -f "$tmp_crd"
    fi
  fi
fi

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
exec "$py" scripts/validate_manifests.py --repo "$repo" --kustomize "$kustomize" \
  --k8s-versions "$k8s_versions" --samples "$samples" "${crd_arg[@]}"
