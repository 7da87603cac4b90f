#!/usr/bin/env bash
# The node's runtime pieces from Debian: containerd, runc, the CNI plugins and
# nft (kube-proxy's nftables mode). Downloaded and extracted into $ROOTFS,
# never installed, so the host's package state does not change. Also checks
# the host tools the cluster scripts use (installing them with apt if absent).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
host_tools=(nsenter:util-linux unshare:util-linux ip:iproute2 gcc:gcc strip:binutils openssl:openssl curl:curl)
wanted=()
for entry in "${host_tools[@]}"; do
  command -v "${entry%%:*}" >/dev/null || wanted+=("${entry#*:}")
done
# The pause image is a static C program: it needs glibc's static archive.
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || wanted+=(libc6-dev)
if [ ${#wanted[@]} -gt 0 ]; then
  log "installing host tools: ${wanted[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null
fi

PACKAGES=(containerd runc containernetworking-plugins nftables libnftables1 libnftnl11 libjansson4)
stamp=$ROOTFS/.packages
if [ "$(cat "$stamp" 2>/dev/null)" = "${PACKAGES[*]}" ]; then exit 0; fi
debs=$STATE/debs
rm -rf "$debs" "$ROOTFS"
mkdir -p "$debs" "$ROOTFS"
cd "$debs"
download() { apt-get download -q "${PACKAGES[@]}" 2>&1 | grep -v 'unsandboxed' || true; }
download
if [ "$(ls ./*.deb 2>/dev/null | wc -l)" -lt ${#PACKAGES[@]} ]; then
  # A fresh machine may have no package lists yet.
  "${SUDO[@]}" apt-get update -qq
  download
fi
[ "$(ls ./*.deb | wc -l)" -ge ${#PACKAGES[@]} ] || die "apt-get download did not fetch all of: ${PACKAGES[*]}"
for deb in ./*.deb; do dpkg-deb -x "$deb" "$ROOTFS"; done
echo "${PACKAGES[*]}" >"$stamp"
log "extracted $(ls ./*.deb | wc -l) Debian packages into $ROOTFS"
