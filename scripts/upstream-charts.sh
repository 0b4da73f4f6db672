#!/usr/bin/env bash
# Extracts the upstream openstack-cloud-controller-manager chart at every version of its
# official chart index, one directory per version, for the Helm differential's opt-in run
# against the real chart (tests/helm_differential.rs, STACKGATE_HELM_DIFF_UPSTREAM_CHARTS).
# Nothing extracted here is committed.
#
#   scripts/upstream-charts.sh CPO_CLONE BITNAMI_CHARTS_CLONE OUT_DIR
#
# CPO_CLONE: a clone of kubernetes/cloud-provider-openstack with its tags and the gh-pages
# branch (the index: gh-pages:index.yaml). BITNAMI_CHARTS_CLONE: a clone of bitnami/charts with
# its tags: chart versions 2.29.1 on depend on bitnami's `common` library chart (2.14.1, for
# `common.labels.standard`), which `helm dependency build` would fetch; it is taken from the
# tag `common/<version>` instead. Prints the versions of the index that have no tag (none on
# 2026-05-13's index).
set -euo pipefail
cpo=${1:?clone of kubernetes/cloud-provider-openstack}
bitnami=${2:?clone of bitnami/charts}
out=${3:?output directory}
chart=charts/openstack-cloud-controller-manager
gitc() { if [ -d "$1/.git" ]; then git -C "$1" "${@:2}"; else git --git-dir="$1" "${@:2}"; fi; }
mkdir -p "$out"
versions=$(gitc "$cpo" show gh-pages:index.yaml |
  sed -n '/^  openstack-cloud-controller-manager:/,/^  [a-z]/p' | sed -n 's/^    version: //p')
for v in $versions; do
  tag="openstack-cloud-controller-manager-$v"
  if ! gitc "$cpo" rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    echo "index version $v has no tag" >&2
    continue
  fi
  rm -rf "${out:?}/$v" "$out/.x"
  mkdir -p "$out/.x"
  gitc "$cpo" archive "$tag" "$chart" | tar -x -C "$out/.x"
  mv "$out/.x/$chart" "$out/$v"
  # A dependency on bitnami's common chart: `name: common` with its version on the next line.
  common=$(sed -n '/- name: common/{n;s/^ *version: *//p}' "$out/$v/Chart.yaml")
  if [ -n "$common" ]; then
    mkdir -p "$out/$v/charts"
    gitc "$bitnami" archive "common/$common" bitnami/common | tar -x -C "$out/.x"
    mv "$out/.x/bitnami/common" "$out/$v/charts/common"
  fi
  rm -rf "$out/.x"
done
echo "$(echo "$versions" | wc -w) versions in the index; extracted: $(ls "$out" | wc -l)"
