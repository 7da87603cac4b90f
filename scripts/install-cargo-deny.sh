#!/usr/bin/env bash
# Install cargo-deny (the licenses, bans and sources checks of `just lint`,
# configured by deny.toml) into $BUCKETSCAN_CACHE/bin, built from crates.io
# with `cargo install --locked` at the pinned version. Idempotent: a binary
# that reports the pinned version is kept. A cold build takes about 17
# minutes wall on this 2-core machine (at nice 10, beside other cargo builds;
# docs/testing.md), so `just test` runs it in the background with the Go
# builds (scripts/tool-builds.sh), and `just deps` runs it too.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
# Pinned so every machine checks with the same rules; bump on purpose.
CARGO_DENY_VERSION=0.20.2
mkdir -p "$BIN"

say() { printf '%-10s %-28s %s\n' "$1" "$2" "$3"; }

installed=$("$BIN/cargo-deny" --version 2>/dev/null | awk '{print $2}' || true)
if [ "$installed" = "$CARGO_DENY_VERSION" ]; then
  say cargo-deny "$CARGO_DENY_VERSION" present
  exit 0
fi
# Its own temporary target directory (not the workspace's build output),
# removed by cargo when the install is done.
env -u CARGO_TARGET_DIR nice -n 10 cargo install --locked --quiet --root "$CACHE" "cargo-deny@$CARGO_DENY_VERSION"
say cargo-deny "$("$BIN/cargo-deny" --version | awk '{print $2}')" "built (cargo install)"
