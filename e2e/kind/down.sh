#!/usr/bin/env bash
# Delete the kind cluster of `E2E_CLUSTER=kind e2e/run.sh` (`just kind-down`):
# the node, the podman network kind-bs, and the test servers it started on
# this host. The node image stays (e2e/kind/node-image.sh rebuilds it only
# when an input changes).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
export E2E_STATE=${E2E_STATE:-${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}/e2e-kind}
. "$HERE/cluster/lib.sh"
# The node image is not needed to delete the cluster.
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-none}
[ "$KIND_NODE_IMAGE" != local ] || KIND_NODE_IMAGE=none
. "$HERE/kind/driver.sh"
stop_server() {
  running "$1" || return 0
  kill "$(pid_of "$1")"
  for _ in $(seq 50); do running "$1" || return 0; sleep 0.1; done
  kill -KILL "$(pid_of "$1")" 2>/dev/null || true
}
cluster_down
