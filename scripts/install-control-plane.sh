#!/usr/bin/env bash
# Builds the tests' control plane, kube-apiserver, etcd and gardener-apiserver, from the Go
# modules that pin them, into target/tools (git-ignored, beside kubectl and helm):
#
#   tools/control-plane/k8s-1.<minor>/kube-apiserver/go.mod   k8s.io/kubernetes (cmd/kube-apiserver)
#   tools/control-plane/k8s-1.<minor>/etcd/go.mod             go.etcd.io/etcd/server/v3 (package
#                                                             main), the etcd that release pins
#   tools/control-plane/gardener-apiserver/go.mod             github.com/gardener/gardener
#                                                             (cmd/gardener-apiserver)
#
# One directory k8s-1.<minor> per supported Kubernetes minor (1.35, the oldest and the default,
# and 1.37, the newest). KIM_KUBERNETES selects which: unset or empty means 1.35, `all` every
# one. kube-apiserver and etcd of 1.35 go to $tools/bin, those of any other minor to
# $tools/k8s-1.<minor>/bin, so that several coexist; the tests pick them by the same variable
# (testenv/src/tools.rs). gardener-apiserver and the client tools are one for every minor.
#
# One module each, so that each binary is built with exactly the dependency versions its own
# release pins (one module would let etcd's newer gRPC and OpenTelemetry win over kubernetes'
# choices). The versions are read from the go.mod files; the binaries are static
# (CGO_ENABLED=0), stripped, and carry their versions (kube-apiserver --version says the
# release, not v0.0.0-master; gardener-apiserver --version says "Gardener v1.140.1").
#
# Idempotent: when all binaries report the pinned versions it only prints them. A cold build
# downloads the modules through the Go module proxy (GOPROXY as configured) and compiles for
# several minutes on 2 cores per minor (gardener-apiserver alone about as long as
# kube-apiserver); Go's module and build caches (outside the repo) make a rebuild fast.
#
# Environment:
#   KIM_KUBERNETES  1.35 (default), 1.37, or all
#   KIM_TOOLS_DIR   default <repo>/target/tools
# Needs: go 1.26 or newer.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${KIM_TOOLS_DIR:-$repo/target/tools}
# The builds run inside the module directories: make a relative directory absolute first.
case $tools in /*) ;; *) tools=$PWD/$tools ;; esac
mods="$repo/tools/control-plane"
# The tests' default minor; testenv/src/tools.rs (DEFAULT_KUBERNETES) says the same.
default_minor=1.35

say() { echo "install-control-plane: $*"; }

command -v go >/dev/null || { say "go not found (Go 1.26 or newer builds kube-apiserver, etcd and gardener-apiserver)"; exit 2; }

supported=$(cd "$mods" && for d in k8s-1.*/; do d=${d%/}; echo "${d#k8s-}"; done | sort -t. -k2,2n)
selected=${KIM_KUBERNETES:-$default_minor}
if [ "$selected" = all ]; then
  minors=$supported
elif grep -qxF -- "$selected" <<<"$supported"; then
  minors=$selected
else
  say "KIM_KUBERNETES=$selected: not a supported Kubernetes minor; one of ${supported//$'\n'/, } or all"
  exit 2
fi

modversion() { # module dir, module path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
build() { # name, module dir, package, ldflags, bin dir
  local start=$SECONDS
  say "building $1 ($3, $(modversion "$2" "${3%/cmd/*}")) with $(go env GOVERSION) into $5"
  mkdir -p "$5"
  # A name of this run's own: an interrupted or concurrent run never leaves or moves a
  # half-written binary into place.
  tmp="$5/.$1.$$.tmp"
  (cd "$2" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$4" -o "$tmp" "$3")
  mv -f "$tmp" "$5/$1"
  tmp=
  say "built $1 in $((SECONDS - start)) s ($(du -h "$5/$1" | cut -f1))"
}

summary=()
for minor in $minors; do
  if [ "$minor" = "$default_minor" ]; then bin="$tools/bin"; else bin="$tools/k8s-$minor/bin"; fi
  kube_mod="$mods/k8s-$minor/kube-apiserver"
  etcd_mod="$mods/k8s-$minor/etcd"
  kube_version=$(modversion "$kube_mod" k8s.io/kubernetes)
  etcd_version=$(modversion "$etcd_mod" go.etcd.io/etcd/server/v3)
  case $kube_version in "v$minor".*) ;; *)
    say "$kube_mod pins k8s.io/kubernetes $kube_version, not a $minor release"; exit 1 ;;
  esac

  have_kube() { [ -x "$bin/kube-apiserver" ] && [ "$("$bin/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $kube_version" ]; }
  # The first line only, without a pipe into `grep -q`: under pipefail etcd's SIGPIPE on its
  # later lines would fail the check now and then.
  have_etcd() { [ -x "$bin/etcd" ] && [ "$("$bin/etcd" --version 2>/dev/null | sed -n 1p)" = "etcd Version: ${etcd_version#v}" ]; }

  if ! have_kube; then
    date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    flags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      flags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor#1.}"
      flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    build kube-apiserver "$kube_mod" k8s.io/kubernetes/cmd/kube-apiserver "$flags" "$bin"
    have_kube || { say "kube-apiserver --version: $("$bin/kube-apiserver" --version 2>&1), expected Kubernetes $kube_version"; exit 1; }
  fi
  if ! have_etcd; then
    build etcd "$etcd_mod" go.etcd.io/etcd/server/v3 "-s -w" "$bin"
    have_etcd || { say "etcd --version: $("$bin/etcd" --version 2>&1 | head -n1), expected ${etcd_version#v}"; exit 1; }
  fi
  summary+=("$("$bin/kube-apiserver" --version), etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p') in $bin")
done

bin="$tools/bin"
gardener_version=$(modversion "$mods/gardener-apiserver" github.com/gardener/gardener)
# gardener-apiserver prints its program name (set by -X below) and version.
have_gardener() { [ -x "$bin/gardener-apiserver" ] && [ "$("$bin/gardener-apiserver" --version 2>/dev/null)" = "Gardener $gardener_version" ]; }
if ! have_gardener; then
  minor=${gardener_version#v1.}
  minor=${minor%%.*}
  flags="-s -w -X k8s.io/component-base/version/verflag.programName=Gardener"
  flags+=" -X k8s.io/component-base/version.gitVersion=$gardener_version -X k8s.io/component-base/version.gitMajor=1"
  flags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  build gardener-apiserver "$mods/gardener-apiserver" github.com/gardener/gardener/cmd/gardener-apiserver "$flags" "$bin"
  have_gardener || { say "gardener-apiserver --version: $("$bin/gardener-apiserver" --version 2>&1), expected Gardener $gardener_version"; exit 1; }
fi
for line in "${summary[@]}"; do say "$line"; done
say "$("$bin/gardener-apiserver" --version 2>/dev/null) in $bin"
