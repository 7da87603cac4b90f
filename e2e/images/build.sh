#!/usr/bin/env bash
# Build the e2e cluster's images as tarballs, without Docker, into $IMAGES:
#   cluster   bucketscan.local/pause:1    the pod sandbox, a static C program
#             bucketscan.local/coredns:1  CoreDNS, a static Go binary
#   product   ghcr.io/bucketscan/bucketscan:VERSION
#                                         bucketscan-operator + bucketscan-worker (from
#                                         $BUILD_DIR, stripped) with exactly the libraries they load
#             bucketscan.local/redis:7    Debian's redis-server with its libraries, sh and
#                                         sed (the chart writes the password to a config file)
# Usage: build.sh [cluster|product|all]   (default all)
# Each tarball has a NAME.ref beside it: the name containerd lists it under.
# An image is rebuilt only when its inputs changed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cluster/lib.sh"
WHAT=${1:-all}
mkdir -p "$IMAGES"
cd "$IMAGES"

# image NAME REF INPUT... -- IMAGE_TAR_ARGS...: rebuild NAME.tar when the
# checksum of the inputs and the arguments changed since the last build.
image() {
  local name=$1 ref=$2 inputs=() sum
  shift 2
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  # The arguments count too: adding a file to an image must rebuild it even
  # when no input file changed (the Redis image once kept its old tarball
  # without /bin/sh, and its pod could not start).
  sum=$({ cat "${inputs[@]}" "$HERE/image_tar.py"; printf '%s\n' "$ref" "$@"; } | sha256sum | cut -d' ' -f1)
  if [ -f "$name.tar" ] && [ "$(cat "$name.sum" 2>/dev/null)" = "$sum" ]; then return 0; fi
  python3 "$HERE/image_tar.py" "$ref" "$name.tar" "$@" >&2
  echo "$sum" >"$name.sum"
  # containerd names images the way Docker does: docker.io/library/ for a bare name.
  case $ref in
    */*) echo "$ref" >"$name.ref" ;;
    *) echo "docker.io/library/$ref" >"$name.ref" ;;
  esac
}

# stripped NAME SOURCE: a copy of a binary without symbols, as ./NAME.
stripped() {
  if [ ! -x "$1" ] || [ "$2" -nt "$1" ]; then strip -o "$1" "$2"; fi
}

# /etc/passwd and /etc/group with the image's users, so tools and logs can
# name them.
accounts() {
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nredis:x:999:999:redis:/data:/sbin/nologin\n' >passwd
  printf 'root:x:0:\nnonroot:x:65532:\nredis:x:999:\n' >group
}

if [ "$WHAT" = cluster ] || [ "$WHAT" = all ]; then
  if [ ! -x pause ] || [ "$HERE/pause.c" -nt pause ]; then
    gcc -static -Os -s -o pause "$HERE/pause.c"
  fi
  image pause bucketscan.local/pause:1 pause -- --entrypoint '["/pause"]' --file pause=/pause
  stripped coredns "$BIN/coredns"
  image coredns bucketscan.local/coredns:1 coredns -- \
    --entrypoint '["/coredns"]' --user 65532:65532 --file coredns=/coredns
fi

if [ "$WHAT" = product ] || [ "$WHAT" = all ]; then
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$HERE/../../charts/bucketscan/Chart.yaml")
  operator=$BUILD_DIR/bucketscan-operator
  worker=$BUILD_DIR/bucketscan-worker
  for b in "$operator" "$worker"; do
    [ -x "$b" ] || die "$b missing: run 'just build-e2e' first"
  done
  # Builds keep line tables for backtraces and profiling; images do not need them.
  stripped bucketscan-operator "$operator"
  stripped bucketscan-worker "$worker"
  operator=$IMAGES/bucketscan-operator
  worker=$IMAGES/bucketscan-worker
  accounts
  certs=()
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    certs=(--file /etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt)
  fi
  image bucketscan "$PRODUCT_IMAGE:$version" "$operator" "$worker" passwd group -- \
    --entrypoint '["/usr/local/bin/bucketscan-worker"]' --user 65532:65532 \
    --label org.opencontainers.image.title=bucketscan --label "org.opencontainers.image.version=$version" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --label org.opencontainers.image.source=https://github.com/bucketscan/bucketscan \
    --binary "$operator=/usr/local/bin/bucketscan-operator" \
    --binary "$worker=/usr/local/bin/bucketscan-worker" \
    --file passwd=/etc/passwd --file group=/etc/group "${certs[@]}" --dir tmp
  redis=$(command -v redis-server) || die "redis-server missing: run scripts/install-deps.sh"
  image redis bucketscan.local/redis:7 "$redis" passwd group -- \
    --entrypoint '["/usr/local/bin/redis-server"]' --user 999:999 \
    --binary "$redis=/usr/local/bin/redis-server" \
    --binary "$(readlink -f /bin/sh)=/bin/sh" --binary "$(command -v sed)=/bin/sed" \
    --file passwd=/etc/passwd --file group=/etc/group --dir data --dir tmp
fi
