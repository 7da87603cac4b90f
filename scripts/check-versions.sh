#!/usr/bin/env bash
# The chart's version and appVersion, and the workspace's version, are one
# (a release packages the chart at the workspace's version, and the
# operator's default image is tagged with it).
set -euo pipefail
cd "$(dirname "$0")/.."
workspace=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
chart=$(sed -n 's/^version: *//p' charts/bucketscan/Chart.yaml)
app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/bucketscan/Chart.yaml)
[ "$chart" = "$workspace" ] && [ "$app" = "$workspace" ] || {
  echo "check-versions: Cargo.toml says $workspace, charts/bucketscan/Chart.yaml version $chart and appVersion $app: make them one" >&2
  exit 1
}
# Artifact Hub's image list (Chart.yaml annotations) names what the chart
# runs by default: the operator at appVersion, Redis at values.yaml's tag.
images=$(sed -n '/artifacthub.io\/images/,/^  [a-z]/s/^ *image: *//p' charts/bucketscan/Chart.yaml)
redis_tag=$(sed -n '/^redis:/,/^[a-z]/s/^    tag: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/bucketscan/values.yaml)
for want in "ghcr.io/bucketscan/bucketscan:$workspace" "redis:$redis_tag"; do
  grep -qx "$want" <<<"$images" || {
    echo "check-versions: Chart.yaml's artifacthub.io/images does not list $want (it lists: $(echo $images))" >&2
    exit 1
  }
done
