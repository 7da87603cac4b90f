#!/usr/bin/env bash
# Run a command with the test ground up: two real S3 servers and Redis on free
# loopback ports, each with its own data in a temporary directory, all stopped
# and removed when the command ends (also on failure or Ctrl-C).
#
#   moto       in-memory S3; stores every odd key faithfully; does not verify
#              signatures (accepts any credentials).
#   versitygw  posix-backed S3 that verifies SigV4 signatures; cannot hold both
#              `a` and `a/b` (objects are files), so no odd-key tests there.
#   redis      redis-server without persistence.
#
# The command sees BUCKETSCAN_TEST_MOTO_ENDPOINT, BUCKETSCAN_TEST_VGW_ENDPOINT,
# BUCKETSCAN_TEST_VGW_ACCESS_KEY, BUCKETSCAN_TEST_VGW_SECRET_KEY and
# BUCKETSCAN_TEST_REDIS_URL, and exits with the command's exit code.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bucketscan-ground.XXXXXX")
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_for NAME LOG CHECK...: retry CHECK for up to 30 s.
wait_for() {
  local name=$1 log=$2; shift 2
  for _ in $(seq 1 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "error: $name did not start; last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

MOTO_PORT=$(free_port)
"$BIN/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)

VGW_PORT=$(free_port)
VGW_ACCESS=bucketscan-test
VGW_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(20))')
mkdir -p "$WORK/vgw-data"
ROOT_ACCESS_KEY=$VGW_ACCESS ROOT_SECRET_KEY=$VGW_SECRET \
  "$BIN/versitygw" --port "127.0.0.1:$VGW_PORT" --keep-alive posix "$WORK/vgw-data" >"$WORK/versitygw.log" 2>&1 &
PIDS+=($!)

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  >"$WORK/redis.log" 2>&1 &
PIDS+=($!)

wait_for moto "$WORK/moto.log" curl -sf "http://127.0.0.1:$MOTO_PORT/moto-api/"
wait_for versitygw "$WORK/versitygw.log" curl -s -o /dev/null "http://127.0.0.1:$VGW_PORT/"
wait_for redis "$WORK/redis.log" redis-cli -p "$REDIS_PORT" ping

export BUCKETSCAN_TEST_MOTO_ENDPOINT=http://127.0.0.1:$MOTO_PORT
export BUCKETSCAN_TEST_VGW_ENDPOINT=http://127.0.0.1:$VGW_PORT
export BUCKETSCAN_TEST_VGW_ACCESS_KEY=$VGW_ACCESS
export BUCKETSCAN_TEST_VGW_SECRET_KEY=$VGW_SECRET
export BUCKETSCAN_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT
# Never let a test reach for instance metadata (a link-local address).
export AWS_EC2_METADATA_DISABLED=true

set +e
"$@"
status=$?
set -e
exit "$status"
