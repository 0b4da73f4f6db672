#!/usr/bin/env bash
# The chart's monitoring: renders the option set tests/promtool/values.yaml (every alert group and
# the Grafana dashboard ConfigMap on) into target/monitoring-render/, extracts the PrometheusRule's
# rule groups, runs `promtool check rules` and `promtool test rules tests/promtool/*.test.yaml`
# (input series and expected alerts per group), then `cargo test --test monitoring -- --ignored`
# on the render. promtool comes from Debian's `prometheus` package, unpacked with
# `apt-get download` + `dpkg -x` (installing the package would start a Prometheus service).
# Any missing tool is an error: nothing is skipped.
#
#   .ci/promtool.sh             everything
#   .ci/promtool.sh --no-cargo  without the cargo test
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHART=charts/stackgate
OUT=target/monitoring-render
TOOLS="${STACKGATE_TOOLS_DIR:-$ROOT/target/tools}"
RUN_CARGO=1
[[ "${1:-}" == "--no-cargo" ]] && RUN_CARGO=0

fail() {
    echo "promtool.sh: FAILED: $*" >&2
    exit 1
}
step() { echo "==> $*"; }

HELM="$(bash .ci/install-helm.sh "$TOOLS" | tail -n 1)"
[[ -x "$HELM" ]] || fail "Helm could not be installed"

PROMTOOL="$TOOLS/prometheus-deb/usr/bin/promtool"
if command -v promtool >/dev/null; then
    PROMTOOL="$(command -v promtool)"
elif [[ ! -x "$PROMTOOL" ]]; then
    command -v apt-get >/dev/null || fail "promtool is not on PATH and apt-get is missing (Debian package prometheus)"
    command -v dpkg >/dev/null || fail "dpkg is needed to unpack the prometheus package"
    work="$(mktemp -d)"
    # apt-get download writes into the current directory, as the calling user; a fresh
    # container has no package lists yet, so update them (as root) and try once more.
    sudo=()
    [[ "$(id -u)" -eq 0 ]] || sudo=(sudo)
    (cd "$work" && apt-get download prometheus) >"$work/download.log" 2>&1 ||
        { "${sudo[@]}" apt-get update >>"$work/download.log" 2>&1 &&
            (cd "$work" && apt-get download prometheus) >>"$work/download.log" 2>&1; } || {
        cat "$work/download.log"
        fail "apt-get download prometheus"
    }
    rm -rf "$TOOLS/prometheus-deb"
    dpkg -x "$work"/prometheus_*.deb "$TOOLS/prometheus-deb" || fail "dpkg -x prometheus"
    rm -rf "$work"
    # Keep promtool only (the package also holds the Prometheus server and its web assets).
    find "$TOOLS/prometheus-deb" -type f ! -path '*/usr/bin/promtool' -delete
    [[ -x "$PROMTOOL" ]] || fail "the prometheus package has no usr/bin/promtool"
fi
step "$("$PROMTOOL" --version 2>&1 | head -n 1)"

rm -rf "$OUT"
mkdir -p "$OUT"
VALUES=tests/promtool/values.yaml

step "helm lint --strict -f $VALUES"
"$HELM" lint --strict "$CHART" -f "$VALUES" >"$OUT/lint.log" 2>&1 || {
    cat "$OUT/lint.log"
    fail "helm lint --strict -f $VALUES"
}

step "helm template (monitoring option set)"
args=(template stackgate "$CHART" --namespace stackgate -f "$VALUES" --api-versions monitoring.coreos.com/v1)
"$HELM" "${args[@]}" >"$OUT/monitoring.yaml" 2>"$OUT/monitoring.err" || {
    cat "$OUT/monitoring.err"
    fail "helm ${args[*]}"
}
# Off by default, and the rule alone leaves out the groups of features that are off.
"$HELM" template stackgate "$CHART" --namespace stackgate >"$OUT/default.yaml" 2>"$OUT/monitoring.err" || {
    cat "$OUT/monitoring.err"
    fail "helm template (default values)"
}
"$HELM" template stackgate "$CHART" --namespace stackgate --set prometheusRule.enabled=true \
    >"$OUT/rules-only.yaml" 2>"$OUT/monitoring.err" || {
    cat "$OUT/monitoring.err"
    fail "helm template --set prometheusRule.enabled=true"
}
"$HELM" "${args[@]}" --show-only templates/prometheusrule.yaml >"$OUT/prometheusrule.yaml" 2>"$OUT/monitoring.err" || {
    cat "$OUT/monitoring.err"
    fail "no PrometheusRule rendered"
}
# The template ends with `spec:` and its `groups:` list, two spaces in: that block, one level
# out, is a Prometheus rule file. promtool check rules below refuses anything else.
sed -n '/^spec:$/,$p' "$OUT/prometheusrule.yaml" | tail -n +2 | sed 's/^  //' >"$OUT/rules.yaml"
grep -q '^groups:$' "$OUT/rules.yaml" || fail "could not extract spec.groups from $OUT/prometheusrule.yaml"

step "promtool check rules"
"$PROMTOOL" check rules "$OUT/rules.yaml" || fail "promtool check rules"

step "promtool test rules (tests/promtool/*.test.yaml)"
shopt -s nullglob
tests=(tests/promtool/*.test.yaml)
((${#tests[@]} > 0)) || fail "no tests/promtool/*.test.yaml"
"$PROMTOOL" test rules "${tests[@]}" || fail "promtool test rules"

# Every alert of the render has a unit test (promtool passes a rule that no test names).
missing=""
for alert in $(sed -n 's/^ *- alert: *//p' "$OUT/rules.yaml"); do
    grep -q "alertname: *$alert\$" "${tests[@]}" || missing+=" $alert"
done
[[ -z "$missing" ]] || fail "alerts without a promtool test:$missing"
echo "  every alert has a test"

if [[ "$RUN_CARGO" -eq 1 ]]; then
    step "cargo test --test monitoring -- --ignored (the render)"
    cargo test --locked --test monitoring -- --ignored
fi
