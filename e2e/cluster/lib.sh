# Shared settings and helpers of the e2e cluster scripts (sourced, not run).
#
# The cluster lives in one private network + mount namespace (the "node
# namespace"), held open by one `sleep` process. Every daemon, every pod and
# the test's S3 server run inside it, so no traffic reaches the host's network:
#   node IP   10.200.0.1 on a veth pair (kubelet refuses a loopback node IP)
#   pods      10.244.0.0/24 on bridge cni0
#   services  10.96.0.0/24 (kubernetes 10.96.0.1, cluster DNS 10.96.0.10)

E2E_CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$E2E_CACHE/bin
STATE=${E2E_STATE:-$E2E_CACHE/e2e} # everything the cluster writes (E2E_CLUSTER=kind: e2e-kind)
ROOTFS=$STATE/root              # Debian packages, extracted (never installed)
PKI=$STATE/pki
RUN=$STATE/run                  # pid files, sockets
LOGS=$STATE/logs
DATA=$STATE/data
CONF=$STATE/etc                 # configuration rendered from e2e/cluster/config
IMAGES=$STATE/images            # image tarballs
PRODUCT_IMAGE=ghcr.io/bucketscan/bucketscan # the chart's image.repository
# The workspace's binaries the images and the e2e use: `just build-e2e`'s
# (cargo profile e2e) unless BUCKETSCAN_BUILD names another profile's
# directory (`just bench`: release).
BUILD_DIR=${CARGO_TARGET_DIR:-$E2E_CACHE/target}/${BUCKETSCAN_BUILD:-e2e}

NODE_NAME=bucketscan-e2e
NODE_IP=10.200.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
CLUSTER_DNS=10.96.0.10
# Pod cgroups go under this parent in every cgroup hierarchy.
CGROUP_PARENT=bucketscan-e2e

KUBECONFIG_ADMIN=$PKI/admin.kubeconfig
mkdir -p "$RUN" "$LOGS" "$DATA"

log() { echo "[$(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }

pid_of() { cat "$RUN/$1.pid" 2>/dev/null; }
running() { local pid; pid=$(pid_of "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
holder() { pid_of holder; }

# Run a command inside the node namespace (network and mounts).
in_node() { nsenter -t "$(holder)" -m -n -- "$@"; }

# Start a daemon inside the node namespace, once; its pid file holds the
# daemon's own pid (nsenter execs it), so stopping it needs no process tree.
launch() {
  local name=$1
  shift
  if running "$name"; then return 0; fi
  rm -f "$RUN/$name.pid"
  setsid bash -c 'echo $$ > "$0"; exec nsenter -t "$1" -m -n -- "${@:2}"' \
    "$RUN/$name.pid" "$(holder)" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  for _ in $(seq 50); do [ -s "$RUN/$name.pid" ] && break; sleep 0.05; done
  log "started $name (pid $(pid_of "$name"), log $LOGS/$name.log)"
}

# Poll a check (a command) until it succeeds; fail with the daemon's log tail
# if the daemon dies or the time runs out.
await() {
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  while ! "$@" >/dev/null 2>&1; do
    if [ -f "$RUN/$name.pid" ] && ! running "$name"; then
      tail -n 20 "$LOGS/$name.log" >&2
      die "$name exited during start-up (log above: $LOGS/$name.log)"
    fi
    if [ $((SECONDS - start)) -ge "$seconds" ]; then
      tail -n 20 "$LOGS/$name.log" >&2 2>/dev/null || true
      die "$name not ready after ${seconds}s"
    fi
    sleep 0.3
  done
  log "$name ready after $((SECONDS - start))s"
}

kubectl_node() { in_node "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr() { "$ROOTFS/usr/bin/ctr" -a "$RUN/containerd/containerd.sock" -n k8s.io "$@"; }
