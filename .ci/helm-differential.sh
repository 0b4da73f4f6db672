#!/usr/bin/env bash
# Differential test against real Helm (tests/helm_differential.rs): installs Helm with
# .ci/install-helm.sh (the pinned Helm v3.17.2, built with go1.23.7) and runs the ignored
# tests that need it — 30,000 generated cases compared byte for byte with `helm template`
# (`helm template` runs as many at a time as the machine has cores: about 8 min on 2 shared
# cores, BENCHMARKS.md), and every Unicode code point through Helm's `quote`.
#
#   .ci/helm-differential.sh [TOOLS_DIR]     default TOOLS_DIR: target/tools
#
# More cases / another seed: STACKGATE_HELM_DIFF_CASES=60000 STACKGATE_HELM_DIFF_SEED=7;
# parallel helm runs: STACKGATE_HELM_DIFF_JOBS=N. Against the upstream chart at every version
# of its index (by hand, fetched, not in CI): STACKGATE_HELM_DIFF_UPSTREAM_CHARTS=<dir>
# (BENCHMARKS.md has the commands that extract the charts).
# Fails loudly (non-zero exit) if Helm cannot be installed or any case disagrees.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
tools="${1:-target/tools}"

helm="$(bash .ci/install-helm.sh "$tools" | tail -n1)"
[ -x "$helm" ] || { echo "helm-differential.sh: no helm binary at '$helm'" >&2; exit 1; }

STACKGATE_HELM="$helm" cargo test --locked --test helm_differential -- --ignored --nocapture \
    --test-threads 1
