#!/usr/bin/env bash
# Bring up the e2e cluster: a real single-node Kubernetes on this machine,
# without Docker. Idempotent: what already runs is left alone, so a second
# run only checks. Prints how long each stage took.
#
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler   (control plane)
#   containerd + runc + bridge CNI, kubelet, kube-proxy (nftables)  (the node)
#   CoreDNS                                                         (cluster DNS)
#
# Binaries: scripts/install-kube.sh (Go module proxy) and packages.sh (Debian
# packages, extracted). Images: pause and CoreDNS are built here; the
# product's images come from e2e/images/build.sh and are imported when present.
# Use e2e/cluster/kubectl to talk to the cluster; e2e/cluster/down.sh stops it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
started=$SECONDS

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run scripts/install-kube.sh"
done
"$HERE/packages.sh"
"$HERE/pki.sh"
"$HERE/config.sh"
"$HERE/../images/build.sh" cluster
log "binaries, packages, certificates, configuration and images ready after $((SECONDS - started))s"

# --- the node namespace ------------------------------------------------------------
if ! running holder; then
  rm -f "$RUN/holder.pid"
  setsid bash -c 'echo $$ > "$0"; exec unshare --net --mount --propagation private sleep infinity' \
    "$RUN/holder.pid" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 100); do
    pid=$(holder || true)
    if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ]; then break; fi
    sleep 0.05
  done
  in_node ip link set lo up
  # A veth pair gives the node a non-loopback address (there is no dummy driver).
  in_node ip link add node0 type veth peer name node0-peer
  in_node ip addr add "$NODE_IP/24" dev node0
  in_node ip link set node0 up
  in_node ip link set node0-peer up
  # The node's own processes reach ClusterIPs through kube-proxy's rules.
  in_node ip route add "$SERVICE_CIDR" dev node0
  # Paths containerd, CNI and kubelet hard-code get private tmpfs mounts, so
  # nothing of the cluster lands in the host's /run or /var.
  : >"$RUN/created-dirs"
  for dir in /run/containerd /run/netns /var/lib/cni /var/log/containers /var/log/pods; do
    if [ ! -d "$dir" ]; then mkdir -p "$dir" && echo "$dir" >>"$RUN/created-dirs"; fi
    in_node mount -t tmpfs -o mode=755 bucketscan-e2e "$dir"
  done
  for fake in "$CONF"/sysctl/*; do
    name=$(basename "$fake")
    in_node mount --bind "$fake" "/proc/sys/${name//.//}"
  done
  log "node namespace held by pid $(holder), node IP $NODE_IP"
fi
for hierarchy in /sys/fs/cgroup/*/; do
  if [ -f "$hierarchy/cgroup.procs" ] && [ "$hierarchy" != /sys/fs/cgroup/unified/ ]; then
    mkdir -p "$hierarchy/$CGROUP_PARENT"
  fi
done

# --- control plane -----------------------------------------------------------------
mkdir -p "$DATA/etcd"
chmod 700 "$DATA/etcd"
launch etcd "$BIN/etcd" --name e2e --data-dir "$DATA/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster e2e=http://127.0.0.1:2380 --log-level warn
await etcd 60 in_node curl -sf http://127.0.0.1:2379/health
launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP --allow-privileged=true --profiling=false
await kube-apiserver 180 kubectl_node get --raw /readyz
for component in controller-manager scheduler; do
  kubeconfig=$PKI/$component.kubeconfig
  extra=()
  if [ "$component" = controller-manager ]; then
    extra=(--use-service-account-credentials --service-account-private-key-file "$PKI/sa.key"
      --root-ca-file "$PKI/ca.crt" --cluster-signing-cert-file "$PKI/ca.crt"
      --cluster-signing-key-file "$PKI/ca.key")
  fi
  launch "kube-$component" "$BIN/kube-$component" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false "${extra[@]}"
done
await kube-controller-manager 120 in_node curl -skf https://127.0.0.1:10257/healthz
await kube-scheduler 120 in_node curl -skf https://127.0.0.1:10259/healthz

# --- the node ------------------------------------------------------------------------
mkdir -p "$RUN/containerd" "$DATA/containerd"
launch containerd env "PATH=$ROOTFS/usr/bin:$ROOTFS/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
  "$ROOTFS/usr/bin/containerd" --config "$CONF/containerd.toml"
await containerd 60 ctr version
# The cluster's own images (the product's are imported by whoever tests it).
for image in pause coredns; do
  if ! ctr images ls -q | grep -qx "$(cat "$IMAGES/$image.ref")"; then
    ctr images import "$IMAGES/$image.tar" >/dev/null
    log "imported $(cat "$IMAGES/$image.ref")"
  fi
done
mkdir -p "$DATA/kubelet" "$DATA/pod-logs"
# The pods' cgroup weighs as much as the node's cores, as a node's kubepods
# does (kubelet gives it its allocatable CPU): made by kubelet under a parent
# left at the default, all pods together would weigh one nice-0 thread
# against the host processes beside them (the store model, MinIO), and a
# busy machine would give a fleet of pods a third of what one process
# scanning beside the same store gets (issue 29, item 6).
# (cgroup v1, what this cluster runs on: config.sh; under cgroup v2 threads
# do not weigh against groups, and this is left as it is.)
cpu_parent=/sys/fs/cgroup/cpu/$CGROUP_PARENT
if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
  mkdir -p "$cpu_parent"
  echo $((1024 * $(nproc))) >"$cpu_parent/cpu.shares"
fi
launch kubelet "$BIN/kubelet" --config "$CONF/kubelet.yaml" --kubeconfig "$PKI/kubelet.kubeconfig" \
  --root-dir "$DATA/kubelet" --cert-dir "$DATA/kubelet/pki" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
await kubelet 60 in_node curl -sf http://127.0.0.1:10248/healthz
# A Ready condition may be left over from a previous run: wait for one whose
# heartbeat is newer than this kubelet.
kubelet_start=$(date -u -d "@$(stat -c %Y "$RUN/kubelet.pid")" +%Y-%m-%dT%H:%M:%SZ)
node_ready() {
  local ready
  ready=$(kubectl_node get node "$NODE_NAME" -o \
    jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
  [ "${ready% *}" = True ] && [[ ! "${ready#* }" < "$kubelet_start" ]]
}
await "node $NODE_NAME Ready" 180 node_ready
launch kube-proxy env "PATH=$ROOTFS/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
  "LD_LIBRARY_PATH=$ROOTFS/usr/lib/x86_64-linux-gnu" \
  "$BIN/kube-proxy" --config "$CONF/kube-proxy.yaml"
await kube-proxy 60 in_node curl -sf http://127.0.0.1:10256/healthz

# --- cluster DNS -----------------------------------------------------------------------
await "default service account" 60 kubectl_node get serviceaccount default
sed "s/CLUSTER_DNS/$CLUSTER_DNS/" "$HERE/coredns.yaml" | kubectl_node apply -f - >/dev/null
await coredns 120 kubectl_node -n kube-system rollout status deployment/coredns --timeout=5s
log "cluster up after $((SECONDS - started))s; kubectl: e2e/cluster/kubectl get nodes"
