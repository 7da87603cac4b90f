#!/usr/bin/env bash
# Render the node's configuration into $CONF. A file is replaced only when its
# content changed: kube-proxy exits when its configuration file changes, and
# the others read theirs at start (restart them, or down.sh + up.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mkdir -p "$CONF/cni" "$CONF/sysctl"

# render FILE: write stdin to FILE unless FILE already holds exactly that.
render() {
  local new
  new=$(cat)
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$new" ]; then printf '%s\n' "$new" >"$1"; fi
}

render "$CONF/containerd.toml" <<TOML
version = 2
root = "$DATA/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd/containerd.sock"
[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DATA/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "bucketscan.local/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  # Without CAP_SYS_RESOURCE a negative oom_score_adj fails in runc; clamp it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$ROOTFS/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$ROOTFS/usr/lib/cni"
    conf_dir = "$CONF/cni"
TOML

render "$CONF/cni/10-bridge.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "bucketscan-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DATA/cni-ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON

# The node's own resolver: nothing (there is no network beyond the node).
# Pods with the default dnsPolicy get the cluster DNS instead.
render "$CONF/resolv.conf" </dev/null

render "$CONF/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines run cgroup v1 without systemd as the cgroup manager.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_PARENT
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $DATA/pod-logs
failSwapOn: false
# true would make kubelet insist on host-wide kernel settings; the ones it
# writes are shown fake values inside the node namespace instead (up.sh).
protectKernelDefaults: false
resolvConf: $CONF/resolv.conf
clusterDomain: cluster.local
clusterDNS: [$CLUSTER_DNS]
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
serializeImagePulls: false
maxPods: 64
YAML

render "$CONF/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $PKI/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
# 0: leave the kernel's conntrack settings (host-wide) alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML

# Values kubelet would otherwise write into host-wide sysctls.
echo 1 | render "$CONF/sysctl/vm.overcommit_memory"
echo 0 | render "$CONF/sysctl/vm.panic_on_oom"
echo 10 | render "$CONF/sysctl/kernel.panic"
echo 1 | render "$CONF/sysctl/kernel.panic_on_oops"
