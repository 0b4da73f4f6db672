#!/usr/bin/env bash
# Prints the `CHART_TAGS` table of src/sites/generation.rs from a clone of
# kubernetes/cloud-provider-openstack: for every tag openstack-cloud-controller-manager-X, the
# generation its templates belong to, read from the templates at that tag (not from commit
# order: the release branches' tags interleave, 2.29.3 has no [Route] while 2.29.2 has).
#   quoted    _helpers.tpl writes `{{ $value | quote }}`            (3fbdeed79)
#   contents  secret.yaml reads .Values.cloudConfigContents         (8e72fd345)
#   enabled   secret.yaml tests .Values.secret.enabled              (c18f6ca4c)
#   route     _helpers.tpl renders a [Route] section                (dab0f0672)
# Usage: scripts/chart-generations.sh /path/to/cloud-provider-openstack(.git)
set -euo pipefail
repo=${1:?path to a cloud-provider-openstack clone}
chart=charts/openstack-cloud-controller-manager
prefix=openstack-cloud-controller-manager-
git -C "$repo" tag --list "${prefix}*" | sort -V | while read -r tag; do
  helpers=$(git -C "$repo" show "$tag:$chart/templates/_helpers.tpl")
  secret=$(git -C "$repo" show "$tag:$chart/templates/secret.yaml")
  quoted=$(grep -c '\$value | quote' <<<"$helpers" || true)
  contents=$(grep -c 'cloudConfigContents' <<<"$secret" || true)
  enabled=$(grep -c 'secret\.enabled' <<<"$secret" || true)
  route=$(grep -c '^\[Route\]' <<<"$helpers" || true)
  if [ "$quoted" = 0 ] && [ "$contents" = 0 ] && [ "$enabled" = 0 ] && [ "$route" = 0 ]; then gen=Unquoted
  elif [ "$quoted" != 0 ] && [ "$contents" != 0 ] && [ "$enabled" = 0 ] && [ "$route" = 0 ]; then gen=Quoted
  elif [ "$quoted" != 0 ] && [ "$contents" != 0 ] && [ "$enabled" != 0 ] && [ "$route" = 0 ]; then gen=SecretSwitch
  elif [ "$quoted" != 0 ] && [ "$contents" != 0 ] && [ "$enabled" != 0 ] && [ "$route" != 0 ]; then gen=Route
  else echo "tag $tag fits no known generation (quoted=$quoted contents=$contents enabled=$enabled route=$route)" >&2; exit 1
  fi
  commit=$(git -C "$repo" rev-list -n1 "$tag" | cut -c1-9)
  printf '    ("%s", Generation::%s), // %s\n' "${tag#"$prefix"}" "$gen" "$commit"
done
