#!/usr/bin/env bash
# Prints the release version for a git tag after checking that the tag, Cargo.toml's version
# and the chart's version and appVersion all say the same thing: a release publishes an image
# and a chart whose versions a user can match. Used by .github/workflows/release.yml.
#
#   .ci/release-version.sh vX.Y.Z
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "release-version: ERROR: $*" >&2
    exit 1
}

[[ $# -eq 1 ]] || die "usage: $0 vX.Y.Z"
TAG="$1"
[[ "$TAG" =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]] || die "tag '$TAG' is not vMAJOR.MINOR.PATCH[-PRERELEASE]"
VERSION="${BASH_REMATCH[1]}"

crate="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
chart="$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/stackgate/Chart.yaml)"
app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/stackgate/Chart.yaml)"
[[ "$crate" == "$VERSION" ]] || die "tag $TAG but Cargo.toml version is '$crate'"
[[ "$chart" == "$VERSION" ]] || die "tag $TAG but charts/stackgate/Chart.yaml version is '$chart'"
[[ "$app" == "$VERSION" ]] || die "tag $TAG but charts/stackgate/Chart.yaml appVersion is '$app'"
echo "$VERSION"
