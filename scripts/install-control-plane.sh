#!/usr/bin/env bash
# Builds the tests' control plane, kube-apiserver, etcd and gardener-apiserver, from the Go
# modules that pin them, into target/tools/bin (git-ignored, beside kubectl and helm):
#
#   tools/control-plane/kube-apiserver/go.mod       k8s.io/kubernetes (cmd/kube-apiserver)
#   tools/control-plane/etcd/go.mod                 go.etcd.io/etcd/server/v3 (package main)
#   tools/control-plane/gardener-apiserver/go.mod   github.com/gardener/gardener
#                                                   (cmd/gardener-apiserver)
#
# One module each, so that each binary is built with exactly the dependency versions its own
# release pins (one module would let etcd's newer gRPC and OpenTelemetry win over kubernetes'
# choices). The versions are read from the go.mod files; the binaries are static
# (CGO_ENABLED=0), stripped, and carry their versions (kube-apiserver --version says the
# release, not v0.0.0-master; gardener-apiserver --version says "Gardener v1.140.1").
#
# Idempotent: when all binaries report the pinned versions it only prints them. A cold build
# downloads the modules through the Go module proxy (GOPROXY as configured) and compiles for
# several minutes on 2 cores (gardener-apiserver alone about as long as kube-apiserver); Go's
# module and build caches (outside the repo) make a rebuild fast.
#
# Environment: KIM_TOOLS_DIR (default: <repo>/target/tools) — the binaries go to $KIM_TOOLS_DIR/bin.
# Needs: go 1.26 or newer.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${KIM_TOOLS_DIR:-$repo/target/tools}
# The builds run inside the module directories: make a relative directory absolute first.
case $tools in /*) ;; *) tools=$PWD/$tools ;; esac
bin="$tools/bin"
mods="$repo/tools/control-plane"

say() { echo "install-control-plane: $*"; }

command -v go >/dev/null || { say "go not found (Go 1.26 or newer builds kube-apiserver, etcd and gardener-apiserver)"; exit 2; }

modversion() { # module dir, module path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}
kube_version=$(modversion "$mods/kube-apiserver" k8s.io/kubernetes)
etcd_version=$(modversion "$mods/etcd" go.etcd.io/etcd/server/v3)
gardener_version=$(modversion "$mods/gardener-apiserver" github.com/gardener/gardener)

have_kube() { [ -x "$bin/kube-apiserver" ] && [ "$("$bin/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $kube_version" ]; }
# The first line only, without a pipe into `grep -q`: under pipefail etcd's SIGPIPE on its
# later lines would fail the check now and then.
have_etcd() { [ -x "$bin/etcd" ] && [ "$("$bin/etcd" --version 2>/dev/null | sed -n 1p)" = "etcd Version: ${etcd_version#v}" ]; }

# gardener-apiserver prints its program name (set by -X below) and version.
have_gardener() { [ -x "$bin/gardener-apiserver" ] && [ "$("$bin/gardener-apiserver" --version 2>/dev/null)" = "Gardener $gardener_version" ]; }

tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
build() { # name, module dir, package, ldflags
  local start=$SECONDS
  say "building $1 ($3) with $(go env GOVERSION)"
  mkdir -p "$bin"
  # A name of this run's own: an interrupted or concurrent run never leaves or moves a
  # half-written binary into place.
  tmp="$bin/.$1.$$.tmp"
  (cd "$2" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$4" -o "$tmp" "$3")
  mv -f "$tmp" "$bin/$1"
  tmp=
  say "built $1 in $((SECONDS - start)) s ($(du -h "$bin/$1" | cut -f1))"
}

if ! have_kube; then
  minor=${kube_version#v1.}
  minor=${minor%%.*}
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  build kube-apiserver "$mods/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$flags"
  have_kube || { say "kube-apiserver --version: $("$bin/kube-apiserver" --version 2>&1), expected Kubernetes $kube_version"; exit 1; }
fi
if ! have_etcd; then
  build etcd "$mods/etcd" go.etcd.io/etcd/server/v3 "-s -w"
  have_etcd || { say "etcd --version: $("$bin/etcd" --version 2>&1 | head -n1), expected ${etcd_version#v}"; exit 1; }
fi
if ! have_gardener; then
  minor=${gardener_version#v1.}
  minor=${minor%%.*}
  flags="-s -w -X k8s.io/component-base/version/verflag.programName=Gardener"
  flags+=" -X k8s.io/component-base/version.gitVersion=$gardener_version -X k8s.io/component-base/version.gitMajor=1"
  flags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  build gardener-apiserver "$mods/gardener-apiserver" github.com/gardener/gardener/cmd/gardener-apiserver "$flags"
  have_gardener || { say "gardener-apiserver --version: $("$bin/gardener-apiserver" --version 2>&1), expected Gardener $gardener_version"; exit 1; }
fi
say "$("$bin/kube-apiserver" --version), etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p'), $("$bin/gardener-apiserver" --version 2>/dev/null) in $bin"
