#!/usr/bin/env bash
# Stop the e2e cluster: every daemon up.sh started, every pod process, and
# the node namespace (its network, veths, bridge and mounts go with it).
# `down.sh --purge` also deletes the cluster's state (etcd, containerd,
# kubelet), so the next up.sh starts empty; binaries, images and certificates
# stay. Only touches processes this setup started: pid files checked against
# the executable's name, pods by their cgroup, the rest by namespace.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

# stop NAME EXECUTABLE: TERM, then KILL after 20 s.
stop() {
  local name=$1 exe pid
  running "$name" || { rm -f "$RUN/$name.pid"; return 0; }
  pid=$(pid_of "$name")
  exe=$(basename "$(readlink "/proc/$pid/exe")")
  if [ "$exe" != "$2" ]; then
    log "pid $pid is $exe, not $2: left alone"
  else
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null && log "$name ignored TERM: killed"
  fi
  rm -f "$RUN/$name.pid"
}

# Every process in the node namespace other than the holder.
node_processes() {
  running holder || return 0
  local h mnt net dir
  h=$(holder)
  mnt=$(readlink "/proc/$h/ns/mnt")
  net=$(readlink "/proc/$h/ns/net")
  for dir in /proc/[0-9]*; do
    [ "${dir#/proc/}" = "$h" ] && continue
    if [ "$(readlink "$dir/ns/mnt" 2>/dev/null)" = "$mnt" ] && [ "$(readlink "$dir/ns/net" 2>/dev/null)" = "$net" ]; then
      echo "${dir#/proc/}"
    fi
  done
}

stop kube-proxy kube-proxy
stop kubelet kubelet
# Pod processes, found by the cgroup all pods live under (they have their own
# network namespaces, so the sweep below would not see them).
pods=/sys/fs/cgroup/pids/$CGROUP_PARENT
for _ in 1 2 3; do
  [ -d "$pods" ] || break
  pids=$(find "$pods" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
  [ -n "$pids" ] || break
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
  sleep 0.5
done
stop containerd containerd
stop kube-scheduler kube-scheduler
stop kube-controller-manager kube-controller-manager
stop kube-apiserver kube-apiserver
stop etcd etcd
# Whatever else runs in the node namespace: containerd shims, test servers.
leftover=$(node_processes)
if [ -n "$leftover" ]; then
  # shellcheck disable=SC2086
  kill -TERM $leftover 2>/dev/null
  sleep 1
  # shellcheck disable=SC2086
  kill -KILL $(node_processes) 2>/dev/null
fi
stop holder sleep
if [ -f "$RUN/created-dirs" ]; then
  while read -r dir; do rmdir "$dir" 2>/dev/null; done <"$RUN/created-dirs"
  rm -f "$RUN/created-dirs"
fi
for hierarchy in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
  [ -d "$hierarchy" ] && find "$hierarchy" -depth -type d -exec rmdir {} \; 2>/dev/null
done
if [ "${1:-}" = --purge ]; then
  rm -rf "$DATA" "$RUN"
  log "cluster stopped; state deleted ($DATA)"
else
  log "cluster stopped; state kept in $DATA (--purge deletes it)"
fi
