#!/usr/bin/env bash
# Usage: scripts/with-test-servers.sh CMD [ARGS...]
#
# Run CMD with the test ground up: two real S3 servers and Redis on free
# loopback ports, each with its own data in one temporary directory, all
# stopped and removed when CMD ends (also on failure or Ctrl-C). Exits with
# CMD's exit code. Tools come from `just deps` (scripts/install-*.sh).
#
#   moto       In-memory S3 (moto_server). Accepts any credentials: it does NOT
#              verify SigV4 signatures. Stores odd keys faithfully (spaces, +,
#              unicode, control characters, both `a` and `a/b`).
#   versitygw  S3 gateway on the posix backend; VERIFIES SigV4 signatures
#              (a wrong secret gets 403 SignatureDoesNotMatch). Buckets need no
#              pre-created directories: CreateBucket over the API makes one
#              under the data dir (and a directory created there by hand would
#              also show up as a bucket). Objects are files, so it cannot hold
#              both `a` and `a/b`, nor keys with empty or `.`/`..` segments:
#              keep odd-key tests on moto.
#   minio      MinIO (single drive): VERIFIES SigV4 signatures; stores most odd
#              keys but refuses some (see docs/testing.md); credentials random
#              for each run, passed through its environment.
#   redis      redis-server without persistence.
#   etcd + kube-apiserver (only with BUCKETSCAN_TEST_KUBE=1)
#              a real Kubernetes control plane without nodes (no kubelet,
#              no controller-manager): objects are stored and validated,
#              nothing runs pods. Clients authenticate with a static token
#              of a member of system:masters. Admission plugin
#              OwnerReferencesPermissionEnforcement is on, as in OpenShift:
#              owner references an operator running under the chart's RBAC
#              sets (operator/tests/rbac_enforced.rs) are checked as there.
#
# CMD sees:
#   BUCKETSCAN_TEST_MOTO_ENDPOINT   http://127.0.0.1:PORT
#   BUCKETSCAN_TEST_VGW_ENDPOINT    http://127.0.0.1:PORT
#   BUCKETSCAN_TEST_VGW_ACCESS_KEY  root access key of versitygw
#   BUCKETSCAN_TEST_VGW_SECRET_KEY  root secret key (random for each run)
#   BUCKETSCAN_TEST_MINIO_ENDPOINT  http://127.0.0.1:PORT
#   BUCKETSCAN_TEST_MINIO_ACCESS_KEY / _SECRET_KEY  its root credentials
#   BUCKETSCAN_TEST_REDIS_URL       redis://127.0.0.1:PORT
#   BUCKETSCAN_TEST_KUBECONFIG      kubeconfig for the kube-apiserver (also KUBECONFIG)
# Server logs are in the temporary directory while CMD runs; when a server
# fails to start, the tail of its log is printed.

# The trap handler and the launch_*/ready_* functions are called indirectly.
# shellcheck disable=SC2317
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
KUBE=${BUCKETSCAN_TEST_KUBE:-0}
tools=("$BIN/moto_server" "$BIN/versitygw" "$BIN/minio")
if [ "$KUBE" = 1 ]; then tools+=("$BIN/etcd" "$BIN/kube-apiserver" "$BIN/kubectl" "$BIN/gitops-health"); fi
for tool in "${tools[@]}"; do
  [ -x "$tool" ] || { echo "error: $tool missing; run just deps (scripts/install-servers.sh, scripts/install-kube.sh)" >&2; exit 1; }
done
for tool in redis-server redis-cli curl python3 openssl; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing; run scripts/install-deps.sh" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bucketscan-ground.XXXXXX")
PIDS=()

# Stop every server (TERM, then KILL after 5 s) and remove all their data.
cleanup() {
  local pid alive
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=no
    for pid in "${PIDS[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=yes; fi
    done
    [ "$alive" = yes ] || break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
# The EXIT trap does the work; these make Ctrl-C / kill end the script with
# the usual exit codes. CMD runs in the foreground, so Ctrl-C reaches it
# directly; bash acts on a signal sent to this script alone only once CMD has
# returned, so to stop a run from outside, signal its whole process group.
trap 'exit 130' INT
trap 'exit 143' TERM

# A port the kernel just handed out for 127.0.0.1. It is free again when the
# server binds it, so another process could take it in between; start_server
# then retries with a fresh port.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME: pick a port, run launch_NAME PORT in the background
# (output to $WORK/NAME.log), and poll ready_NAME PORT for up to 60 s. Sets
# PORT. Up to 3 tries when the server exits because the port was taken.
start_server() {
  local name=$1 log=$WORK/$1.log attempt pid
  for attempt in 1 2 3; do
    PORT=$(free_port)
    "launch_$name" "$PORT" >"$log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 600); do
      if "ready_$name" "$PORT" >/dev/null 2>&1; then return 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "error: $name did not answer on 127.0.0.1:$PORT within 60 s; last lines of its log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    # Only a lost race for the port is worth another try.
    if ! grep -qi 'address already in use' "$log"; then break; fi
    echo "warning: $name lost port $PORT to another process (attempt $attempt)" >&2
  done
  echo "error: $name exited on start; last lines of its log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

# moto: `exec` so the recorded PID is the server itself, not a subshell.
launch_moto() {
  mkdir -p "$WORK/moto"
  cd "$WORK/moto"
  exec "$BIN/moto_server" -H 127.0.0.1 -p "$1"
}
ready_moto() { curl -sf -o /dev/null "http://127.0.0.1:$1/moto-api/"; }

# versitygw: root credentials go in through its environment variables
# (ROOT_ACCESS_KEY/ROOT_SECRET_KEY, same as --access/--secret) so the secret
# does not show in `ps`. --health serves GET /_health with 200 without auth;
# `_` cannot start a bucket name, so it never shadows a bucket.
VGW_ACCESS=bucketscan-test
VGW_SECRET=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
launch_versitygw() {
  mkdir -p "$WORK/versitygw/data"
  cd "$WORK/versitygw"
  ROOT_ACCESS_KEY=$VGW_ACCESS ROOT_SECRET_KEY=$VGW_SECRET \
    exec "$BIN/versitygw" --port "127.0.0.1:$1" --keep-alive --health /_health \
    posix "$WORK/versitygw/data"
}
ready_versitygw() { curl -sf -o /dev/null "http://127.0.0.1:$1/_health"; }

# minio: root credentials through its environment (not in `ps`); no web
# console; MINIO_CI_CD lets it use a directory on the root disk.
MINIO_ACCESS=bucketscan-minio
MINIO_SECRET=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
# A built-in KMS key (MINIO_KMS_SECRET_KEY, NAME:BASE64 of 32 bytes, random
# for each run): MinIO then encrypts objects PUT with SSE-S3 or SSE-KMS
# (key id bucketscan-key), which the encryption columns' tests need.
MINIO_KMS_KEY=bucketscan-key:$(python3 -c 'import base64, secrets; print(base64.b64encode(secrets.token_bytes(32)).decode())')
launch_minio() {
  mkdir -p "$WORK/minio/data"
  cd "$WORK/minio"
  MINIO_ROOT_USER=$MINIO_ACCESS MINIO_ROOT_PASSWORD=$MINIO_SECRET MINIO_BROWSER=off MINIO_CI_CD=1 \
    MINIO_KMS_SECRET_KEY=$MINIO_KMS_KEY \
    exec "$BIN/minio" server --quiet --address "127.0.0.1:$1" "$WORK/minio/data"
}
ready_minio() { curl -sf -o /dev/null "http://127.0.0.1:$1/minio/health/live"; }

launch_redis() {
  mkdir -p "$WORK/redis"
  exec redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no \
    --dir "$WORK/redis"
}
ready_redis() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping)" = PONG ]; }

launch_etcd() {
  local peer
  peer=$(free_port)
  exec "$BIN/etcd" --data-dir "$WORK/etcd" --name test \
    --listen-client-urls "http://127.0.0.1:$1" --advertise-client-urls "http://127.0.0.1:$1" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "test=http://127.0.0.1:$peer" --log-level warn
}
ready_etcd() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }

# kube-apiserver: serving certificate generated into --cert-dir, service
# account keys from openssl, one static admin token. The endpoint reconciler
# is off: with no nodes and a loopback address there is nothing to publish.
# OwnerReferencesPermissionEnforcement (off by default, on in OpenShift):
# setting blockOwnerDeletion needs update on the owner's finalizers.
KUBE_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
launch_apiserver() {
  local dir=$WORK/apiserver
  mkdir -p "$dir"
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  echo "$KUBE_TOKEN,bucketscan-test,bucketscan-test,system:masters" > "$dir/tokens.csv"
  exec "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$1" --advertise-address 127.0.0.1 \
    --cert-dir "$dir/certs" --token-auth-file "$dir/tokens.csv" --authorization-mode RBAC \
    --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/24 \
    --endpoint-reconciler-type none --enable-priority-and-fairness=false \
    --enable-admission-plugins OwnerReferencesPermissionEnforcement
}
ready_apiserver() {
  curl -sfk -H "Authorization: Bearer $KUBE_TOKEN" "https://127.0.0.1:$1/readyz" | grep -q ok
}

start_server moto
MOTO_PORT=$PORT
start_server versitygw
VGW_PORT=$PORT
start_server minio
MINIO_PORT=$PORT
start_server redis
REDIS_PORT=$PORT
servers="moto :$MOTO_PORT, versitygw :$VGW_PORT, minio :$MINIO_PORT, redis :$REDIS_PORT"
# A kubeconfig for the admin token, trusting the apiserver's own certificate.
write_kubeconfig() {
  printf '%s\n' "apiVersion: v1" "kind: Config" "clusters:" "- name: test" "  cluster:" \
    "    server: https://127.0.0.1:$KUBE_PORT" \
    "    certificate-authority: $WORK/apiserver/certs/apiserver.crt" \
    "contexts:" "- name: test" "  context: {cluster: test, user: admin, namespace: default}" \
    "current-context: test" "users:" "- name: admin" "  user: {token: $KUBE_TOKEN}" > "$1"
}
if [ "$KUBE" = 1 ]; then
  start_server etcd
  ETCD_PORT=$PORT
  start_server apiserver
  KUBE_PORT=$PORT
  servers="$servers, etcd :$ETCD_PORT, kube-apiserver :$KUBE_PORT"
  write_kubeconfig "$WORK/kubeconfig"
  export BUCKETSCAN_TEST_KUBECONFIG=$WORK/kubeconfig KUBECONFIG=$WORK/kubeconfig
fi

export BUCKETSCAN_TEST_MOTO_ENDPOINT=http://127.0.0.1:$MOTO_PORT
export BUCKETSCAN_TEST_VGW_ENDPOINT=http://127.0.0.1:$VGW_PORT
export BUCKETSCAN_TEST_VGW_ACCESS_KEY=$VGW_ACCESS
export BUCKETSCAN_TEST_VGW_SECRET_KEY=$VGW_SECRET
export BUCKETSCAN_TEST_MINIO_ENDPOINT=http://127.0.0.1:$MINIO_PORT
export BUCKETSCAN_TEST_MINIO_ACCESS_KEY=$MINIO_ACCESS
export BUCKETSCAN_TEST_MINIO_SECRET_KEY=$MINIO_SECRET
export BUCKETSCAN_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT
# Never let a test reach for instance metadata (a link-local address).
export AWS_EC2_METADATA_DISABLED=true
echo "test servers: $servers (logs in $WORK)" >&2

# CMD runs in the foreground so Ctrl-C reaches it directly.
set +e
"$@"
status=$?
set -e
exit "$status"
