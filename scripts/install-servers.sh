#!/usr/bin/env bash
# Build the S3 servers the tests run, from the Go module proxy, into
# $BUCKETSCAN_CACHE/bin: versitygw (verifies SigV4) and MinIO ("works on
# MinIO", its metadata listing, 5 MiB parts). Idempotent: a binary of the
# pinned version is kept. Cold: see docs/testing.md's per-phase table.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
# Pinned so every machine tests against the same servers; bump on purpose.
VERSITYGW_VERSION=v1.8.0
# MinIO tags its releases RELEASE.<date>, which the module proxy does not
# serve as versions: this pseudo-version is the last commit of the open-source
# repository (February 2026; upstream says it is no longer maintained).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
mkdir -p "$BIN"

say() { printf '%-10s %-28s %s\n' "$1" "$2" "$3"; }
die() { echo "install-servers: $*" >&2; exit 1; }

# --- Go tools built from source through the Go module proxy -------------------
# go_tool NAME STAMP PACKAGE@VERSION [GO_INSTALL_FLAG...]: `go install` into
# $BIN unless $BIN/NAME exists and $CACHE/NAME.version holds STAMP (a bumped
# version or build flag rebuilds). GOFLAGS cleared: a caller's -mod=vendor or
# similar breaks `go install @version`. nice: these are the longest builds of
# a cold run (see docs/testing.md for each one's time).
go_tool() {
  local name=$1 stamp=$2 package=$3 file=$CACHE/$1.version
  shift 3
  state=present
  if [ ! -x "$BIN/$name" ] || [ "$(cat "$file" 2>/dev/null)" != "$stamp" ]; then
    command -v go >/dev/null || die "go is needed to build $name (Go >= 1.25)"
    echo "building $name $stamp (first run only, several minutes)" >&2
    rm -f "$file"
    GOBIN=$BIN GOFLAGS='' nice go install -ldflags "-s -w" "$@" "$package"
    echo "$stamp" >"$file"
    state=built
  fi
  say "$name" "${stamp%% *}" "$state"
}

# versitygw: the S3 server that verifies SigV4 signatures (about 4 minutes of
# 2 cores on a cold Go build cache).
go_tool versitygw "$VERSITYGW_VERSION" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
# MinIO: the tests' third S3 server ("works on MinIO" is tested), the largest
# of the test servers to build.
go_tool minio "$MINIO_VERSION" "github.com/minio/minio@$MINIO_VERSION"
