#!/usr/bin/env bash
# Install everything the tests and the demo need, on a fresh machine or again
# (fast when all is present). Tools go to a cache outside the repository so a
# fresh clone reuses them: $BUCKETSCAN_CACHE (default ~/.cache/bucketscan).
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
VENV=$CACHE/venv
VERSITYGW_VERSION=v1.8.0
mkdir -p "$BIN"

say() { printf '%-14s %s\n' "$1" "$2"; }

# Python venv: just (prebuilt, from the rust-just wheel) and moto's S3 server.
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -x "$VENV/bin/just" ] || [ ! -x "$VENV/bin/moto_server" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check rust-just 'moto[server]==5.2.1' boto3
fi
ln -sf "$VENV/bin/just" "$BIN/just"
ln -sf "$VENV/bin/moto_server" "$BIN/moto_server"
say just "$("$BIN/just" --version)"
say moto "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)')"

# redis-server from Debian (the tests start their own instances).
if ! command -v redis-server >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server >/dev/null
  # Our tests run their own servers; the packaged service is not needed.
  (command -v systemctl >/dev/null && systemctl disable --now redis-server) >/dev/null 2>&1 || true
  service redis-server stop >/dev/null 2>&1 || true
fi
say redis "$(redis-server --version | awk '{print $3}')"

# versitygw: the S3 server that verifies SigV4 signatures (about 4 minutes to
# build the first time).
stamp=$CACHE/versitygw.version
if [ ! -x "$BIN/versitygw" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$VERSITYGW_VERSION" ]; then
  echo "building versitygw $VERSITYGW_VERSION (first run only, a few minutes)"
  GOBIN=$BIN GOFLAGS=-mod=mod nice go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" > "$stamp"
fi
say versitygw "$VERSITYGW_VERSION"

# Rust components used by `just test`.
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
say rust "$(rustc --version)"
