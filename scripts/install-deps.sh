#!/usr/bin/env bash
# Install everything the tests and the demo need, on a fresh machine or again.
# A second run only looks (well under a second when all is present).
#
# Tools go to a cache outside the repository, so a fresh clone (CI) reuses
# them: $BUCKETSCAN_CACHE (default ~/.cache/bucketscan), executables in
# $BUCKETSCAN_CACHE/bin. Only registries are reachable here, so everything
# comes from PyPI, Debian's packages, the Go module proxy or crates.io; no
# step downloads a prebuilt binary from anywhere else.
#
# Prints one line per tool: name, version, and what this run did to it.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
VENV=$CACHE/venv
# Pinned so every machine tests against the same servers; bump on purpose.
MOTO_REQ='moto[server]==5.2.1'
JUST_REQ='rust-just==1.59.0'
# Engines no one here wrote, which the result tests read the datasets with.
ENGINES_REQ='duckdb==1.5.6 pyarrow==25.0.1'
VERSITYGW_VERSION=v1.8.0
# MinIO tags its releases RELEASE.<date>, which the module proxy does not
# serve as versions: this pseudo-version is the last commit of the open-source
# repository (February 2026; upstream says it is no longer maintained).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
# Prometheus 3 publishes its Go module as v0.3MM.P (v0.316.0: release 3.16.0).
PROMTOOL_VERSION=v0.316.0
PROMTOOL_BUILD=remove_all_sd
mkdir -p "$BIN"

say() { printf '%-10s %-28s %s\n' "$1" "$2" "$3"; }
die() { echo "install-deps: $*" >&2; exit 1; }

# Root on the machines this project runs on; sudo elsewhere.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi

# apt-get update costs ~10 s, so it runs at most once, and only when a
# package is actually missing.
apt_updated=no
apt_install() {
  if [ "$apt_updated" = no ]; then
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=yes
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- basics the scripts themselves use ----------------------------------------
# with-test-servers.sh polls the HTTP servers with curl; the venv needs python3.
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
# libfaketime: a worker whose clock is hours off (the clock-skew test).
command -v faketime >/dev/null || missing+=(faketime)
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

# --- Python venv: moto's S3 server (and boto3, which it pulls in) -------------
# A stamp of the requirements makes a changed pin reinstall, and makes the
# common case (nothing changed) skip pip entirely.
venv_stamp=$VENV/.bucketscan-requirements
state=present
if [ ! -x "$VENV/bin/python" ]; then
  # Debian's own python3 lacks ensurepip until python3-venv is installed.
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    apt_install python3-venv
    python3 -m venv "$VENV"
  fi
fi
if [ ! -x "$VENV/bin/moto_server" ] || [ "$(cat "$venv_stamp" 2>/dev/null)" != "$MOTO_REQ" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MOTO_REQ"
  echo "$MOTO_REQ" >"$venv_stamp"
  state=installed
fi
ln -sf "$VENV/bin/moto_server" "$BIN/moto_server"
say moto "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)')" "$state"

# --- DuckDB and pyarrow: the result tests read the datasets with them ---------
engines_stamp=$VENV/.bucketscan-engines
state=present
if [ "$(cat "$engines_stamp" 2>/dev/null)" != "$ENGINES_REQ" ]; then
  # shellcheck disable=SC2086 # two requirements, split on purpose
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $ENGINES_REQ
  echo "$ENGINES_REQ" >"$engines_stamp"
  state=installed
fi
say duckdb "$("$VENV/bin/python" -c 'import duckdb, pyarrow; print(duckdb.__version__, "pyarrow", pyarrow.__version__)')" "$state"

# --- just: prebuilt binary from the rust-just wheel, else built by cargo ------
state=present
if [ ! -x "$BIN/just" ] || ! "$BIN/just" --version >/dev/null 2>&1; then
  if "$VENV/bin/pip" install --quiet --disable-pip-version-check "$JUST_REQ" \
      && [ -x "$VENV/bin/just" ]; then
    ln -sf "$VENV/bin/just" "$BIN/just"
    state="installed (PyPI $JUST_REQ)"
  else
    # No wheel for this platform: build it (a few minutes); lands in $BIN.
    echo "rust-just unavailable; building just with cargo" >&2
    rm -f "$BIN/just"
    nice cargo install just --locked --root "$CACHE"
    state="built (cargo install)"
  fi
fi
say just "$("$BIN/just" --version)" "$state"

# --- openssl (the TLS Redis test makes its certificates with it) ---------------
if ! command -v openssl >/dev/null; then
  apt_install openssl
fi
say openssl "$(openssl version | cut -d' ' -f1-2)" present

# --- redis-server from Debian --------------------------------------------------
# Tests start their own instances on free ports; the packaged service is not
# used, so when this run installs the package it also stops and disables it.
state=present
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  apt_install redis-server
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    "${SUDO[@]}" systemctl disable --now redis-server >/dev/null 2>&1 || true
  else
    "${SUDO[@]}" service redis-server stop >/dev/null 2>&1 || true
    "${SUDO[@]}" update-rc.d redis-server disable >/dev/null 2>&1 || true
  fi
  state="installed (system service stopped)"
fi
say redis "$(redis-server --version | awk '{print $3}' | sed 's/^v=//')" "$state"

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
    GOBIN=$BIN GOFLAGS='' nice go install "$@" "$package"
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
# promtool: Prometheus' rule checker for the chart's alert rules.
# remove_all_sd leaves out the service-discovery plugins (cloud SDKs,
# client-go): half the build, and `check rules` needs none of them.
CGO_ENABLED=0 go_tool promtool "$PROMTOOL_VERSION $PROMTOOL_BUILD" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" -tags "$PROMTOOL_BUILD"

# --- Rust components that `just lint` uses ------------------------------------
if command -v rustup >/dev/null; then
  installed=$(rustup component list --installed 2>/dev/null || true)
  state=present
  for component in clippy rustfmt; do
    if ! grep -q "^$component" <<<"$installed"; then
      rustup component add "$component"
      state=installed
    fi
  done
  say rust "$(rustc --version | awk '{print $2}')" "clippy+rustfmt $state"
else
  say rust "-" "rustup not found; install Rust to build and lint"
fi
