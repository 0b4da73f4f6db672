#!/usr/bin/env bash
# Builds stackgate's gcfg oracle (tests/gcfg-oracle) — the CCM's own config parser, gcfg v1.2.3,
# wrapped as a command — for tests/gcfg_differential.rs.
#
#   .ci/gcfg-oracle.sh [OUTPUT]        default OUTPUT: target/gcfg-oracle
#   STACKGATE_GCFG_ORACLE=$PWD/target/gcfg-oracle cargo test --test gcfg_differential -- --ignored
#
# Uses Debian packages only (golang-go, golang-gopkg-gcfg.v1-dev, golang-gopkg-warnings.v0-dev),
# installed with apt-get when missing; builds in GOPATH mode against /usr/share/gocode.
# Fails loudly (non-zero exit, message on stderr) if anything is missing or does not build.
set -euo pipefail

die() { echo "gcfg-oracle.sh: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo_root/target/gcfg-oracle}"
gopath=/usr/share/gocode
gcfg_src="$gopath/src/gopkg.in/gcfg.v1"
warnings_src="$gopath/src/gopkg.in/warnings.v0"

if ! command -v go >/dev/null 2>&1 || [ ! -d "$gcfg_src" ] || [ ! -d "$warnings_src" ]; then
    command -v apt-get >/dev/null 2>&1 || die "go or the gcfg sources are missing and apt-get is not available"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install the Go toolchain and gcfg sources"
        sudo=(sudo)
    fi
    echo "gcfg-oracle.sh: installing golang-go golang-gopkg-gcfg.v1-dev golang-gopkg-warnings.v0-dev" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get install -y golang-go golang-gopkg-gcfg.v1-dev golang-gopkg-warnings.v0-dev >&2 \
        || { "${sudo[@]}" apt-get update >&2 && "${sudo[@]}" apt-get install -y golang-go golang-gopkg-gcfg.v1-dev golang-gopkg-warnings.v0-dev >&2; } \
        || die "apt-get install failed"
fi
command -v go >/dev/null 2>&1 || die "go not found after installation"
[ -d "$gcfg_src" ] || die "gcfg sources not found at $gcfg_src"
[ -d "$warnings_src" ] || die "warnings sources not found at $warnings_src"

mkdir -p "$(dirname "$out")"
export GO111MODULE=off GOPATH="$gopath" GOFLAGS=
export GOCACHE="${GOCACHE:-${TMPDIR:-/tmp}/stackgate-gcfg-oracle-gocache}"
( cd "$repo_root/tests/gcfg-oracle" && go build -o "$out" . ) || die "go build failed"
[ -x "$out" ] || die "no binary at $out"
echo "$out"
