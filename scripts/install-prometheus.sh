#!/usr/bin/env bash
# Installs Debian's `prometheus` package (Prometheus 2.42 and promtool) for the operations-kit
# tests (tests/suite/ops_rules.rs, tests/suite/real_ops.rs, tests/suite/prometheus.rs). Idempotent: does
# nothing when both binaries are there. Needs root and apt-get (CI runs as root on Debian);
# exits non-zero when it cannot install.
#
# The package's postinst starts a Prometheus service on :9090 where it can: with systemd, or
# through /etc/init.d when invoke-rc.d is allowed to. The tests start their own Prometheus on a
# free port and must not find one already running, so the install runs under a policy-rc.d
# that forbids starting services (kept if the machine already has one, as Docker images do),
# and the script fails if a Prometheus is listening on :9090 afterwards that was not before.
#
# Environment: PROMETHEUS_PACKAGE  package to install (default: prometheus)
set -euo pipefail

package=${PROMETHEUS_PACKAGE:-prometheus}
say() { echo "install-prometheus: $*"; }

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  say "already installed: $(promtool --version 2>&1 | head -n1)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "need root and apt-get to install the Debian package $package" \
      "(run: sudo bash scripts/install-prometheus.sh)" >&2
  exit 1
fi

listening_9090() {
  # ss from iproute2 when there; else /proc/net/tcp (port 9090 = 0x2382, state 0A = LISTEN).
  if command -v ss >/dev/null 2>&1; then
    ss -ltn 2>/dev/null | awk '$4 ~ /[:.]9090$/ {found = 1} END {exit !found}'
  else
    awk 'NR > 1 && $4 == "0A" && $2 ~ /:2382$/ {found = 1} END {exit !found}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
  fi
}
busy_before=no
if listening_9090; then busy_before=yes; fi

policy=/usr/sbin/policy-rc.d
created_policy=no
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by kim scripts/install-prometheus.sh for the duration of an install\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  created_policy=yes
fi
cleanup() { if [ "$created_policy" = yes ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
say "apt-get install -y --no-install-recommends $package"
if ! apt-get install -y -qq --no-install-recommends "$package" >/dev/null; then
  say "install failed; apt-get update and retry"
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "$package" >/dev/null
fi

for tool in promtool prometheus; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool missing after installing $package" >&2; exit 1; }
done
if [ "$busy_before" = no ] && listening_9090; then
  say "a Prometheus service was started on :9090 by the install; stop it (invoke-rc.d prometheus stop)" >&2
  exit 1
fi
say "installed: $(promtool --version 2>&1 | head -n1); no service started"
