# Podman settings for kind's podman provider (sourced by e2e/kind/driver.sh
# and e2e/kind/node-image.sh). They go to podman through CONTAINERS_CONF, a
# file of this directory's cache, so the host's own podman configuration
# stays as it is. Needs lib.sh (E2E_CACHE, log, die).

KIND_CACHE=$E2E_CACHE/kind
# The podman network of the kind node and its bridge interface, named apart
# from anything else on the host.
KIND_NETWORK=${E2E_KIND_NETWORK:-kind-bs}

# podman_env: write $KIND_CACHE/containers.conf and export CONTAINERS_CONF.
podman_env() {
  local conf=$KIND_CACHE/containers.conf nofile nproc runtime=""
  mkdir -p "$KIND_CACHE/networks"
  # Podman's default limits (nofile 1048576, nproc 4194304) are above the
  # hard limits where CAP_SYS_RESOURCE is missing from the bounding set: runc
  # then fails with "setrlimit RLIMIT_NOFILE: Operation not permitted". The
  # hard limits of this shell, and podman's own nproc cap (32768), fit.
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ] && nofile=1048576
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  # crun 1.8 (Debian 12) refuses a hybrid cgroup host, cgroup v1 with a
  # controller left on the cgroup2 mount ("cgroups in hybrid mode not
  # supported, drop all controllers from cgroupv2"); runc runs there.
  if [ ! -f /sys/fs/cgroup/cgroup.controllers ] && grep -q . /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
    command -v runc >/dev/null || die "cgroup v1 with controllers on cgroup2 (hybrid): podman needs runc (apt-get install runc)"
    runtime='runtime = "runc"'
  fi
  cat >"$conf.new" <<CONF
# Written by e2e/kind/podman.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
$runtime
[network]
# The kind network's definition lives here, with its own bridge name.
network_config_dir = "$KIND_CACHE/networks"
CONF
  mv "$conf.new" "$conf"
  export CONTAINERS_CONF=$conf
}

# podman_network: the kind network, its bridge named $KIND_NETWORK (podman 4.3
# has no flag for the interface name: its network file is edited once).
podman_network() {
  local file=$KIND_CACHE/networks/$KIND_NETWORK.json
  if ! podman network exists "$KIND_NETWORK"; then
    podman network create "$KIND_NETWORK" >/dev/null
    python3 - "$file" "$KIND_NETWORK" <<'PY'
import json, sys
network = json.load(open(sys.argv[1]))
network["network_interface"] = sys.argv[2][:15]
json.dump(network, open(sys.argv[1], "w"), indent=1)
PY
    log "podman network $KIND_NETWORK (bridge $KIND_NETWORK)"
  fi
  export KIND_EXPERIMENTAL_PODMAN_NETWORK=$KIND_NETWORK
}
