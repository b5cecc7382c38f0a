#!/usr/bin/env bash
# Make a private CA and a serving certificate for kim's admission webhook with
# the openssl CLI, and wire them into the static-ca kustomize overlay:
#
#   <out>/ca.crt, ca.key         the CA (reused on later runs unless --new-ca)
#   <out>/tls.crt, tls.key       serving cert for <service>.<namespace>.svc
#                                (+ .svc.cluster.local, + <service>)
#   <out>/secret.yaml            Secret <secret> (kubernetes.io/tls: tls.crt, tls.key, ca.crt)
#   <out>/kustomization.yaml     the static-ca overlay + secret.yaml
#   <overlay>/cabundle-patch.yaml  caBundle (base64 PEM of ca.crt) for both webhooks
#
# Then: kubectl apply --server-side -k manifests && kubectl apply -k <out>
#
# <out> holds private keys: it defaults to certs/out/, which git ignores.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

service=kim-webhook
namespace=kim-system
secret=kim-webhook-tls
out="$repo_root/certs/out"
overlay="$repo_root/manifests/overlays/static-ca"
days=365
ca_days=3650
new_ca=false

usage() {
  cat <<EOF
Usage: $(basename "$0") [options]

Options:
  --service NAME     webhook Service name            (default: $service)
  --namespace NS     webhook namespace               (default: $namespace)
  --secret NAME      TLS Secret name                 (default: $secret)
  --out DIR          output directory                (default: certs/out)
  --overlay DIR      overlay whose cabundle-patch.yaml gets the caBundle
                                                     (default: manifests/overlays/static-ca)
  --days N           serving certificate lifetime    (default: $days)
  --ca-days N        CA lifetime (new CA only)       (default: $ca_days)
  --new-ca           make a new CA even if <out>/ca.crt exists
  -h, --help         this text

An existing CA in <out> is reused, so re-running the script renews the serving
certificate without changing the caBundle.
EOF
}

die() { echo "gen-certs: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --service)   service=${2:?--service needs a value}; shift 2 ;;
    --namespace) namespace=${2:?--namespace needs a value}; shift 2 ;;
    --secret)    secret=${2:?--secret needs a value}; shift 2 ;;
    --out)       out=${2:?--out needs a value}; shift 2 ;;
    --overlay)   overlay=${2:?--overlay needs a value}; shift 2 ;;
    --days)      days=${2:?--days needs a value}; shift 2 ;;
    --ca-days)   ca_days=${2:?--ca-days needs a value}; shift 2 ;;
    --new-ca)    new_ca=true; shift ;;
    -h|--help)   usage; exit 0 ;;
    *)           usage >&2; die "unknown argument: $1" ;;
  esac
done

command -v openssl >/dev/null 2>&1 || die "openssl not found (Debian: apt-get install openssl)"
case "$days" in ''|*[!0-9]*) die "--days must be a positive integer" ;; esac
case "$ca_days" in ''|*[!0-9]*) die "--ca-days must be a positive integer" ;; esac
if [ "$days" -eq 0 ] || [ "$ca_days" -eq 0 ]; then die "--days/--ca-days must be > 0"; fi
dns_label='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
for v in "$service" "$namespace" "$secret"; do
  [[ "$v" =~ $dns_label ]] || die "not a DNS-1123 label: $v"
done
patch_file="$overlay/cabundle-patch.yaml"
[ -f "$patch_file" ] || die "no $patch_file (use --overlay)"
grep -qE '^  value: ' "$patch_file" || die "$patch_file has no '  value: ' line to replace"

mkdir -p "$out"
out=$(cd "$out" && pwd)
overlay=$(cd "$overlay" && pwd)
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fqdn="$service.$namespace.svc"

# --- CA -----------------------------------------------------------------------
if [ "$new_ca" = false ] && [ -s "$out/ca.crt" ] && [ -s "$out/ca.key" ] &&
   openssl x509 -in "$out/ca.crt" -noout -checkend $((days * 86400)) >/dev/null 2>&1; then
  echo "gen-certs: reusing CA $out/ca.crt ($(openssl x509 -in "$out/ca.crt" -noout -enddate))"
else
  [ -s "$out/ca.crt" ] && [ "$new_ca" = false ] &&
    echo "gen-certs: existing CA expires within $days days: making a new one"
  cat >"$tmp/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
O = kim
CN = kim-webhook-ca
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$tmp/ca.key" -sha256 -days "$ca_days" \
    -config "$tmp/ca.cnf" -out "$tmp/ca.crt"
  mv "$tmp/ca.key" "$out/ca.key"
  mv "$tmp/ca.crt" "$out/ca.crt"
  echo "gen-certs: new CA $out/ca.crt (valid $ca_days days)"
fi

# --- serving certificate ------------------------------------------------------
cat >"$tmp/leaf.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
O = kim
CN = $fqdn
[v3_leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = DNS:$fqdn, DNS:$fqdn.cluster.local, DNS:$service
EOF
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/tls.key" 2>/dev/null
openssl req -new -key "$tmp/tls.key" -config "$tmp/leaf.cnf" -out "$tmp/tls.csr"
openssl x509 -req -in "$tmp/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
  -extfile "$tmp/leaf.cnf" -extensions v3_leaf -out "$tmp/tls.crt" 2>/dev/null
openssl verify -CAfile "$out/ca.crt" -purpose sslserver "$tmp/tls.crt" >/dev/null ||
  die "the new serving certificate does not verify against $out/ca.crt"
mv "$tmp/tls.key" "$out/tls.key"
mv "$tmp/tls.crt" "$out/tls.crt"

b64() { openssl base64 -A -in "$1"; }
ca_bundle=$(b64 "$out/ca.crt")

# --- Secret + kustomization under <out> ---------------------------------------
cat >"$out/secret.yaml" <<EOF
# Generated by certs/gen-certs.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ). Holds a private key: do not commit.
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: $namespace
  labels:
    app.kubernetes.io/name: $service
    app.kubernetes.io/component: webhook
    app.kubernetes.io/part-of: kim
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$out/tls.crt")
  tls.key: $(b64 "$out/tls.key")
  ca.crt: $ca_bundle
EOF

rel_overlay=$(realpath -m --relative-to="$out" "$overlay")
cat >"$out/kustomization.yaml" <<EOF
# Generated by certs/gen-certs.sh: the static-ca overlay plus the TLS Secret.
#   kubectl apply --server-side -k manifests   # the CRD, first
#   kubectl apply -k $(realpath -m --relative-to="$PWD" "$out")
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel_overlay
  - secret.yaml
EOF
chmod 0644 "$out/ca.crt" "$out/tls.crt" "$out/kustomization.yaml"

# --- caBundle into the overlay's patch ----------------------------------------
sed "s|^  value: .*|  value: $ca_bundle|" "$patch_file" >"$tmp/patch"
cat "$tmp/patch" >"$patch_file"

echo "gen-certs: serving cert $out/tls.crt for DNS:$fqdn, DNS:$fqdn.cluster.local, DNS:$service"
echo "gen-certs:   $(openssl x509 -in "$out/tls.crt" -noout -enddate)"
echo "gen-certs: Secret $namespace/$secret -> $out/secret.yaml"
echo "gen-certs: caBundle -> $patch_file"
if [ "$service" != kim-webhook ] || [ "$namespace" != kim-system ] || [ "$secret" != kim-webhook-tls ]; then
  echo "gen-certs: note: the manifests name kim-webhook / kim-system / kim-webhook-tls; adapt them to your names" >&2
fi
echo "gen-certs: deploy with:"
echo "  kubectl apply --server-side -k $(realpath -m --relative-to="$PWD" "$repo_root/manifests")"
echo "  kubectl apply -k $(realpath -m --relative-to="$PWD" "$out")"
