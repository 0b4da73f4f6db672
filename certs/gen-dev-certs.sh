#!/usr/bin/env bash
# Makes a development CA and a serving certificate for stackgate with openssl, and prints the
# caBundle (base64 of the CA certificate) for a webhook configuration.
#
#   certs/gen-dev-certs.sh [--namespace NS] [--service NAME] [--out DIR] [--days N] [--force]
#
# Files written to DIR (default certs/out, git-ignored): ca.crt, ca.key, tls.crt, tls.key,
# caBundle.b64. The serving certificate names <service>, <service>.<ns>, <service>.<ns>.svc,
# <service>.<ns>.svc.cluster.local, localhost and 127.0.0.1 (for `stackgate serve` on a laptop).
# For development only: production installs use the Helm chart's tls.mode.
set -euo pipefail

NAMESPACE=stackgate
SERVICE=stackgate
OUT=""
DAYS=365
FORCE=0

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
    echo "gen-dev-certs: ERROR: $*" >&2
    exit 1
}

while [[ $# -gt 0 ]]; do
    case "$1" in
    --namespace) NAMESPACE="${2:?--namespace needs a value}"; shift 2 ;;
    --service) SERVICE="${2:?--service needs a value}"; shift 2 ;;
    --out) OUT="${2:?--out needs a value}"; shift 2 ;;
    --days) DAYS="${2:?--days needs a value}"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done

command -v openssl >/dev/null || die "openssl is not installed"
[[ "$DAYS" =~ ^[0-9]+$ && "$DAYS" -gt 0 ]] || die "--days must be a positive number"
for name in "$NAMESPACE" "$SERVICE"; do
    [[ "$name" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "$name is not a valid Kubernetes name"
done
[[ -n "$OUT" ]] || OUT="$(cd "$(dirname "$0")" && pwd)/out"
mkdir -p "$OUT"
if [[ -e "$OUT/tls.key" && "$FORCE" -ne 1 ]]; then
    die "$OUT/tls.key exists; pass --force to replace the certificates"
fi

umask 077
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = stackgate development CA
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF

cat >"$WORK/leaf.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = $SERVICE.$NAMESPACE.svc
[v3_leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = @sans
[sans]
DNS.1 = $SERVICE
DNS.2 = $SERVICE.$NAMESPACE
DNS.3 = $SERVICE.$NAMESPACE.svc
DNS.4 = $SERVICE.$NAMESPACE.svc.cluster.local
DNS.5 = localhost
IP.1 = 127.0.0.1
EOF

# ECDSA P-256 keys in PKCS#8: small, fast handshakes, accepted by the apiserver and rustls.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/ca.key" 2>/dev/null
openssl req -x509 -new -key "$WORK/ca.key" -sha256 -days "$((DAYS * 2))" \
    -config "$WORK/ca.cnf" -out "$WORK/ca.crt"

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$WORK/tls.key" 2>/dev/null
openssl req -new -key "$WORK/tls.key" -config "$WORK/leaf.cnf" -out "$WORK/tls.csr"
openssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days "$DAYS" -sha256 \
    -extfile "$WORK/leaf.cnf" -extensions v3_leaf -out "$WORK/tls.crt" 2>/dev/null

openssl verify -CAfile "$WORK/ca.crt" "$WORK/tls.crt" >/dev/null ||
    die "the generated serving certificate does not verify against the CA"

base64 -w0 <"$WORK/ca.crt" >"$WORK/caBundle.b64"
for f in ca.crt ca.key tls.crt tls.key caBundle.b64; do
    mv -f "$WORK/$f" "$OUT/$f"
done
chmod 0644 "$OUT/ca.crt" "$OUT/tls.crt" "$OUT/caBundle.b64"
chmod 0600 "$OUT/ca.key" "$OUT/tls.key"

{
    echo "gen-dev-certs: wrote $OUT/{ca.crt,ca.key,tls.crt,tls.key,caBundle.b64}"
    echo "  serving certificate for $SERVICE.$NAMESPACE.svc, valid $DAYS days"
    echo "  run locally:  stackgate serve --tls-cert $OUT/tls.crt --tls-key $OUT/tls.key"
    echo "  in a cluster: kubectl -n $NAMESPACE create secret tls $SERVICE-serving --cert=$OUT/tls.crt --key=$OUT/tls.key"
    echo "                helm install ... --set tls.mode=existingSecret --set tls.existingSecret.name=$SERVICE-serving \\"
    echo "                  --set tls.existingSecret.caBundle=\$(cat $OUT/caBundle.b64)"
    echo "caBundle:"
} >&2
cat "$OUT/caBundle.b64"
echo
