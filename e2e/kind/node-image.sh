#!/usr/bin/env bash
# Build a kind node image without any container registry, the way
# `kind build node-image` assembles one (kind v0.30.0's images/base Dockerfile
# and pkg/build/nodeimage), for machines that cannot pull kindest/node:
#   base        a Debian bookworm root filesystem (mmdebstrap) with systemd,
#               containerd 1.6, runc 1.1, the CNI plugins, iptables/nftables,
#               plus kind's entrypoint, units and containerd config, read from
#               kind's module in the Go module cache
#   Kubernetes  kubeadm (built here with version ldflags), kubelet and kubectl
#               in /usr/bin; the control-plane, kube-proxy, etcd, CoreDNS and
#               pause images built by e2e/images/image_tar.py from the binaries
#               of scripts/install-kube.sh, imported into the node's containerd
#               under the exact names kubeadm and kind ask for
#   CNI         a stand-in for kindnetd (which is not on the Go module proxy):
#               /kind/manifests/default-cni.yaml runs a busybox pod that writes
#               the same ptp + host-local + portmap conflist kindnetd writes
# Differences from kindest/node, each needed on this machine (e2e/README.md):
# containerd's restrict_oom_score_adj (no CAP_SYS_RESOURCE), no host-wide
# sysctl files, kubelet's kernel tunables shielded, no crictl.
#
# Usage: node-image.sh            prints the image reference (podman image)
# The image is rebuilt only when an input changes (a stamp of every input);
# the Debian root filesystem only when its package list changes.
set -euo pipefail
# Only the image reference goes to stdout; everything else to stderr.
exec 3>&1 1>&2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cluster/lib.sh"
KIND_VERSION=v0.30.0
K8S_VERSION=v1.34.4
. "$HERE/podman.sh"
podman_env
mkdir -p "$KIND_CACHE/images"

# Packages: those of kind's base image (nfs-common and open-iscsi left out:
# no network storage here) and containerd, runc and the CNI plugins that kind
# builds from source.
PACKAGES=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod
PACKAGES+=,libseccomp2,pigz,fuse-overlayfs,bash,ca-certificates,curl,jq,procps
PACKAGES+=,containerd,runc,containernetworking-plugins
MIRRORS=("deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main")

KIND_SRC=$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION
if [ ! -d "$KIND_SRC/images/base" ]; then
  (cd /tmp && GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kind@$KIND_VERSION")
fi
BASE_FILES=$KIND_SRC/images/base/files

# kubeadm is not among install-kube.sh's binaries: built here from the same
# Kubernetes version, with the version ldflags kubeadm checks.
KUBEADM=$KIND_CACHE/bin/kubeadm
build_kubeadm() {
  if [ -x "$KUBEADM" ] && [ "$("$KUBEADM" version -o short)" = "$K8S_VERSION" ]; then return 0; fi
  local wrap=$E2E_CACHE/src/k8s-wrapper-$K8S_VERSION own=$E2E_CACHE/src/kind-kubeadm-$K8S_VERSION ldflags="-s -w"
  [ -f "$wrap/go.mod" ] || die "$wrap missing: run scripts/install-kube.sh first"
  mkdir -p "$own" "$KIND_CACHE/bin"
  cp "$wrap/go.mod" "$wrap/go.sum" "$own/"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kubeadm"\n' >"$own/tools.go"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X $p.gitTreeState=clean"
  done
  (cd "$own" && GOFLAGS=-mod=mod go mod tidy &&
    CGO_ENABLED=0 nice -n 15 go build -ldflags "$ldflags" -o "$KUBEADM" k8s.io/kubernetes/cmd/kubeadm)
  [ "$("$KUBEADM" version -o short)" = "$K8S_VERSION" ] || die "kubeadm reports $("$KUBEADM" version -o short), not $K8S_VERSION"
}
build_kubeadm
# kind's storage provisioner at the version kind's images/local-path-provisioner
# pins, from the Go module proxy.
LOCAL_PATH=$KIND_CACHE/bin/local-path-provisioner
LOCAL_PATH_VERSION=$(sed -n 's/^VERSION=//p' "$KIND_SRC/images/local-path-provisioner/Makefile")
if [ ! -x "$LOCAL_PATH" ] || [ "$(cat "$LOCAL_PATH.version" 2>/dev/null)" != "$LOCAL_PATH_VERSION" ]; then
  (cd /tmp && GOBIN=$KIND_CACHE/bin CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 15 \
    go install -ldflags "-s -w" "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION")
  echo "$LOCAL_PATH_VERSION" >"$LOCAL_PATH.version"
fi
for b in kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run scripts/install-kube.sh"
done

# The stamp: every input of the image.
stamp=$({
  echo "$KIND_VERSION $K8S_VERSION $PACKAGES ${MIRRORS[*]}"
  cat "$0" "$HERE/../images/image_tar.py" "$HERE/../images/pause.c" "$HERE/kind-cni.yaml"
  find "$BASE_FILES" -type f -print0 | sort -z | xargs -0 cat
  for b in kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns; do
    cat "$BIN/.$b.version" 2>/dev/null || sha256sum "$BIN/$b"
  done
  "$KUBEADM" version -o short
  echo "local-path-provisioner $LOCAL_PATH_VERSION"
  sha256sum /usr/sbin/nft /usr/bin/busybox
} | sha256sum | cut -c1-12)
IMAGE=localhost/bucketscan/kind-node:$K8S_VERSION-$stamp
if podman image exists "$IMAGE"; then
  echo "$IMAGE" >&3
  exit 0
fi
begin=$SECONDS
log "building kind node image $IMAGE"

# --- the Debian root filesystem (cached by its package list) ---------------------
base_sum=$(echo "$PACKAGES ${MIRRORS[*]}" | sha256sum | cut -c1-12)
BASE_TAR=$KIND_CACHE/debian-base-$base_sum.tar
if [ ! -f "$BASE_TAR" ]; then
  log "mmdebstrap bookworm ($PACKAGES)"
  nice -n 15 mmdebstrap --variant=minbase --format=tar --include="$PACKAGES" bookworm "$BASE_TAR.part" "${MIRRORS[@]}" \
    >"$KIND_CACHE/mmdebstrap.log" 2>&1 || { tail -n 20 "$KIND_CACHE/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  mv "$BASE_TAR.part" "$BASE_TAR"
fi

# --- kind's base image layout, as its Dockerfile writes it -------------------------
ROOT=$KIND_CACHE/node-root
rm -rf "$ROOT"
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$BASE_TAR"
install -d -m 0755 "$ROOT/kind/bin" "$ROOT/LICENSES" "$ROOT/etc/kubernetes/manifests" "$ROOT/opt/cni/bin" \
  "$ROOT/kind/manifests" "$ROOT/etc/systemd/system/kubelet.service.d" "$ROOT/etc/containerd"
install -m 0755 "$BASE_FILES"/usr/local/bin/* "$ROOT/usr/local/bin/"
install -m 0644 "$BASE_FILES"/kind/README.txt "$ROOT/kind/"
install -m 0755 "$BASE_FILES"/kind/bin/* "$ROOT/kind/bin/"
install -m 0644 "$BASE_FILES"/LICENSES/* "$ROOT/LICENSES/"
install -m 0644 "$BASE_FILES"/etc/crictl.yaml "$ROOT/etc/"
install -m 0644 "$BASE_FILES"/etc/containerd/* "$ROOT/etc/containerd/"
install -m 0644 "$BASE_FILES"/etc/default/* "$ROOT/etc/default/"
install -m 0644 "$BASE_FILES"/etc/sysctl.d/* "$ROOT/etc/sysctl.d/"
install -m 0644 "$BASE_FILES"/etc/systemd/system/*.service "$BASE_FILES"/etc/systemd/system/*.slice "$ROOT/etc/systemd/system/"
install -m 0644 "$BASE_FILES"/etc/systemd/system/kubelet.service.d/* "$ROOT/etc/systemd/system/kubelet.service.d/"
# The package cleanup of kind's RUN.
find "$ROOT/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$ROOT"/lib/systemd/system/multi-user.target.wants/* "$ROOT"/etc/systemd/system/*.wants/* \
  "$ROOT"/lib/systemd/system/local-fs.target.wants/* "$ROOT"/lib/systemd/system/sockets.target.wants/*udev* \
  "$ROOT"/lib/systemd/system/sockets.target.wants/*initctl* "$ROOT"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$ROOT/etc/systemd/journald.conf"
ln -sf /lib/systemd/systemd "$ROOT/sbin/init"
# containerd and runc from Debian where kind's units and config expect its own builds.
for b in containerd ctr containerd-shim-runc-v2; do ln -sf "/usr/bin/$b" "$ROOT/usr/local/bin/$b"; done
for p in host-local loopback ptp portmap; do cp "$ROOT/usr/lib/cni/$p" "$ROOT/opt/cni/bin/"; done
chroot "$ROOT" sh -c 'ctr oci spec |
  jq ".hooks.createContainer[.hooks.createContainer| length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" |
  jq "del(.process.rlimits)" > /etc/containerd/cri-base.json'
# No CAP_SYS_RESOURCE in the bounding set: containerd must not lower a
# container's oom_score_adj below its own (kind does the same in a user namespace).
sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$ROOT/etc/containerd/config.toml"
grep -q 'restrict_oom_score_adj = true' "$ROOT/etc/containerd/config.toml" || die "containerd config: restrict_oom_score_adj not set"
# systemd-sysctl would write these host-wide keys from the node (kernel.pid_max
# and fs.protected_*); the node keeps only kind's per-network-namespace ones.
rm -f "$ROOT/usr/lib/sysctl.d/50-pid-max.conf" "$ROOT/usr/lib/sysctl.d/99-protect-links.conf"
# kubelet writes kernel tunables that are host-wide (vm.overcommit_memory,
# kernel.panic, ...): it finds files of the values it wants bind-mounted over
# them in the node's mount namespace, as e2e/cluster does.
cat >"$ROOT/kind/bin/shield-kernel-tunables.sh" <<'EOF'
#!/bin/sh
# Bind files of the values kubelet wants over host-wide sysctls (node only).
set -eu
mkdir -p /kind/sysctl
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  key=${kv%%=*} file=/kind/sysctl/$(echo "${kv%%=*}" | tr / .)
  echo "${kv#*=}" >"$file"
  if ! grep -q " /proc/sys/$key " /proc/self/mountinfo; then mount --bind "$file" "/proc/sys/$key"; fi
done
EOF
chmod 0755 "$ROOT/kind/bin/shield-kernel-tunables.sh"
printf '[Service]\nExecStartPre=/kind/bin/shield-kernel-tunables.sh\n' \
  >"$ROOT/etc/systemd/system/kubelet.service.d/20-bucketscan-shield.conf"
chroot "$ROOT" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$ROOT" systemctl mask systemd-binfmt.service >/dev/null 2>&1

# --- what `kind build node-image` adds -------------------------------------------
for b in kubelet kubectl; do install -m 0755 "$BIN/$b" "$ROOT/usr/bin/$b"; done
install -m 0755 "$KUBEADM" "$ROOT/usr/bin/kubeadm"
printf '%s' "$K8S_VERSION" >"$ROOT/kind/version"
install -m 0644 "$HERE/kind-cni.yaml" "$ROOT/kind/manifests/default-cni.yaml"
# kind's default storage manifest (local-path-provisioner), from its source.
python3 - "$KIND_SRC/pkg/build/nodeimage/const_storage.go" "$ROOT/kind/manifests/default-storage.yaml" <<'EOF'
import re, sys
src = open(sys.argv[1]).read()
consts = dict(re.findall(r'const (\w+) = "([^"]*)"', src))
# A Go expression: raw strings joined by `+ name +`.
expr = re.search(r'const defaultStorageManifest = ((?:`[^`]*`(?:\s*\+\s*\w+\s*\+\s*)?)+)', src).group(1)
body = "".join(consts[part] if not part.startswith("`") else part[1:-1]
               for part in re.findall(r'`[^`]*`|\w+', expr))
open(sys.argv[2], "w").write(body)
EOF

# --- the images kubeadm and kind ask for, built here -------------------------------
cd "$KIND_CACHE/images"
sed -n 's/^const \(storage\w*Image\) = "\(.*\)"$/\2/p' "$KIND_SRC/pkg/build/nodeimage/const_storage.go" >storage-images
required=$("$KUBEADM" config images list --kubernetes-version "$K8S_VERSION")
image_of() { grep "/$1:" <<<"$required"; }
gcc -static -Os -s -o pause "$HERE/../images/pause.c"
sandbox=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$ROOT/etc/containerd/config.toml")
python3 "$HERE/../images/image_tar.py" "$sandbox" pause.tar --entrypoint '["/pause"]' --file pause=/pause
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  python3 "$HERE/../images/image_tar.py" "$(image_of "$c")" "$c.tar" \
    --entrypoint "[\"/usr/local/bin/$c\"]" --binary "$BIN/$c=/usr/local/bin/$c"
done
# kube-proxy in nftables mode (kind.yaml) runs nft, found on the image's PATH.
python3 "$HERE/../images/image_tar.py" "$(image_of kube-proxy)" kube-proxy.tar \
  --entrypoint '["/usr/local/bin/kube-proxy"]' --binary "$BIN/kube-proxy=/usr/local/bin/kube-proxy" \
  --binary /usr/sbin/nft=/usr/bin/nft
python3 "$HERE/../images/image_tar.py" "$(image_of etcd)" etcd.tar \
  --entrypoint '["/usr/local/bin/etcd"]' --binary "$BIN/etcd=/usr/local/bin/etcd" --dir var/lib/etcd
strip -o coredns "$BIN/coredns"
# Root, not e2e/images' nonroot user: kubeadm's Deployment gives CoreDNS only
# NET_BIND_SERVICE for port 53, which a nonroot process holds only through a
# file capability (the official image's), and image_tar.py writes none.
python3 "$HERE/../images/image_tar.py" "$(image_of coredns)" coredns.tar \
  --entrypoint '["/coredns"]' --file coredns=/coredns
python3 "$HERE/../images/image_tar.py" "$(sed -n 1p storage-images)" local-path-provisioner.tar \
  --entrypoint '["/usr/local/bin/local-path-provisioner"]' \
  --binary "$LOCAL_PATH=/usr/local/bin/local-path-provisioner"
# busybox for the CNI stand-in and kind's local-path helper pods (sh, mkdir, rm).
python3 "$HERE/../images/image_tar.py" bucketscan.local/kind-cni:1 kind-cni.tar \
  --entrypoint '["/bin/sh"]' --file /usr/bin/busybox=/bin/busybox --file /usr/bin/busybox=/bin/sh
python3 "$HERE/../images/image_tar.py" "$(sed -n 2p storage-images)" local-path-helper.tar \
  --entrypoint '["/bin/sh"]' --file /usr/bin/busybox=/bin/busybox --file /usr/bin/busybox=/bin/sh \
  --file /usr/bin/busybox=/bin/mkdir --file /usr/bin/busybox=/bin/rm --file /usr/bin/busybox=/bin/chmod

# --- into the node's containerd: a build container, as kind does ------------------
tar -C "$ROOT" -cf - . | podman import --change 'ENV container=docker' --change 'STOPSIGNAL SIGRTMIN+3' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$IMAGE-base" >/dev/null
builder=kind-bs-build-$$
trap 'podman rm -f -t 0 "$builder" >/dev/null 2>&1; podman rmi "$IMAGE-base" >/dev/null 2>&1 || true' EXIT
podman run -d --name "$builder" --privileged --entrypoint sleep -v "$KIND_CACHE/images:/kind-images:ro" \
  "$IMAGE-base" infinity >/dev/null
podman exec "$builder" sh -c 'nohup containerd >/var/log/containerd-build.log 2>&1 & echo $! >/run/containerd-build.pid'
for _ in $(seq 50); do podman exec "$builder" ctr version >/dev/null 2>&1 && break; sleep 0.2; done
for t in pause kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns kind-cni local-path-provisioner local-path-helper; do
  podman exec "$builder" ctr -n k8s.io images import --all-platforms --no-unpack "/kind-images/$t.tar" >/dev/null
done
# kubeadm also lists a newer pause than containerd's sandbox image.
podman exec "$builder" ctr -n k8s.io images tag "$sandbox" "$(image_of pause)" >/dev/null
podman exec "$builder" ctr -n k8s.io images ls -q | sed 's/^/  /' >&2
podman exec "$builder" sh -c 'kill "$(cat /run/containerd-build.pid)"; sleep 1; rm -rf /var/log/containerd-build.log /run/containerd-build.pid /run/containerd'
podman commit -q --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$builder" "$IMAGE" >/dev/null
podman rm -f -t 0 "$builder" >/dev/null
podman rmi "$IMAGE-base" >/dev/null
# Earlier builds go (1 GB each), unless a cluster still runs on one.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep "^${IMAGE%:*}:" | grep -vx "$IMAGE" || true); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
rm -rf "$ROOT"
log "kind node image $IMAGE built in $((SECONDS - begin))s"
echo "$IMAGE" >&3
