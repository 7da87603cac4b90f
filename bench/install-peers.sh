#!/usr/bin/env bash
# Usage: bench/install-peers.sh
#
# Install what `just bench` needs beyond the Rust binaries, each step skipped
# when already done (idempotent):
#   - boto3 and matplotlib in the Python venv ($BUCKETSCAN_CACHE/venv);
#   - the Go peer, built from bench/peers/go into $BUCKETSCAN_CACHE/bench/go-pool;
#   - rclone, built from the Go module proxy (pinned) into $BUCKETSCAN_CACHE/bin.
# rclone is optional: when it does not install, the reason goes to
# $BUCKETSCAN_CACHE/bench/rclone-install.err and BENCHMARKS.md says so.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
RCLONE_VERSION=v1.76.0
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$CACHE/bench" "$CACHE/bin"

VENV=$CACHE/venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import boto3, matplotlib' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet boto3 matplotlib
fi

# go build is itself incremental (its build cache); the binary is rebuilt
# only when the peer's sources changed.
GO_POOL=$CACHE/bench/go-pool
if [ ! -x "$GO_POOL" ] || [ -n "$(find "$HERE/peers/go" -newer "$GO_POOL" -type f)" ]; then
  (cd "$HERE/peers/go" && nice go build -o "$GO_POOL" .)
fi

RCLONE=$CACHE/bin/rclone
# (Read whole: a pipe into `head` would break rclone's output under pipefail.)
installed=$([ -x "$RCLONE" ] && "$RCLONE" version 2>/dev/null || true)
if [[ $installed != "rclone ${RCLONE_VERSION}"* ]]; then
  echo "building rclone $RCLONE_VERSION from the Go module proxy (a few minutes, once)" >&2
  if (cd "$CACHE/bench" && GOBIN=$CACHE/bin nice go install "github.com/rclone/rclone@$RCLONE_VERSION") \
      2>"$CACHE/bench/rclone-install.log"; then
    rm -f "$CACHE/bench/rclone-install.err"
  else
    tail -n 5 "$CACHE/bench/rclone-install.log" > "$CACHE/bench/rclone-install.err"
    echo "warning: rclone did not install; the benchmark goes on without it:" >&2
    cat "$CACHE/bench/rclone-install.err" >&2
  fi
fi
