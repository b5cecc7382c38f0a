#!/usr/bin/env bash
# Installs Debian's `haproxy` package: the load balancer in front of two `kim webhook` replicas
# in the rollout benchmark (benches/rollout.rs) and its test (tests/suite/real_rollout.rs), as a
# Service spreads a webhook's replicas. Idempotent: nothing to do when haproxy is there. Needs
# root and apt-get; exits non-zero when it cannot install. The package's own service is not
# started (a policy-rc.d forbids it for the install): the tests run their own haproxy on a
# loopback port with a configuration of their own.
set -euo pipefail

say() { echo "install-haproxy: $*"; }

if command -v haproxy >/dev/null 2>&1; then
  say "already installed: $(haproxy -v 2>&1 | head -n1)"
  exit 0
fi
for dir in /usr/sbin /usr/local/sbin; do
  if [ -x "$dir/haproxy" ]; then
    say "haproxy is installed at $dir/haproxy, but $dir is not on PATH; the tests run \`haproxy\` from PATH" >&2
    exit 1
  fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "need root and apt-get to install the Debian package haproxy (run: sudo bash scripts/install-haproxy.sh)" >&2
  exit 1
fi
policy=/usr/sbin/policy-rc.d
created_policy=no
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by kim scripts/install-haproxy.sh for the duration of an install\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  created_policy=yes
fi
cleanup() { if [ "$created_policy" = yes ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
say "apt-get install -y --no-install-recommends haproxy"
if ! apt-get install -y -qq --no-install-recommends haproxy >/dev/null; then
  say "install failed; apt-get update and retry" >&2
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends haproxy >/dev/null ||
    { say "apt-get install haproxy failed" >&2; exit 1; }
fi
command -v haproxy >/dev/null 2>&1 || { say "haproxy missing after the install" >&2; exit 1; }
say "installed: $(haproxy -v 2>&1 | head -n1); no service started"
