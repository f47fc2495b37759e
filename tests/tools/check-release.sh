#!/usr/bin/env bash
# The version and the image name agree everywhere they are written: Cargo.toml, the chart's
# version and appVersion, the image tag in manifests/deployment.yaml, and the image repository
# in the manifest and the chart's values. With an argument (the release workflow passes the
# tag without its "v"), they must also equal it.
#
# Usage: check-release.sh [VERSION]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

cargo_version="$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)"
chart_version="$(awk '/^version:/ { print $2; exit }' charts/eviction-autoscaler/Chart.yaml)"
app_version="$(awk '/^appVersion:/ { gsub(/"/, "", $2); print $2; exit }' charts/eviction-autoscaler/Chart.yaml)"
manifest_image="$(awk '$1 == "image:" { print $2; exit }' manifests/deployment.yaml)"
manifest_repo="${manifest_image%:*}"
manifest_tag="${manifest_image##*:}"
values_repo="$(awk '/^image:/ { f = 1; next } f && $1 == "repository:" { print $2; exit }' charts/eviction-autoscaler/values.yaml)"

want="${1:-$cargo_version}"
fail=0
check() { # check <what> <value>
  if [[ "$2" != "$want" ]]; then echo "check-release.sh: $1 is $2, expected $want" >&2; fail=1; fi
}
check "Cargo.toml version" "$cargo_version"
check "Chart.yaml version" "$chart_version"
check "Chart.yaml appVersion" "$app_version"
check "the image tag in manifests/deployment.yaml" "$manifest_tag"
if [[ "$manifest_repo" != "$values_repo" ]]; then
  echo "check-release.sh: manifests/deployment.yaml uses $manifest_repo, the chart's values $values_repo" >&2
  fail=1
fi
((fail == 0)) || exit 1
echo "check-release.sh: version $want, image $values_repo:$want"
