# e2e/run.sh's driver for the local cluster of e2e/cluster (sourced).
# The S3 server runs inside the node namespace, listening on the node's IP,
# where pods reach it; the test's own S3 client runs there too.

cluster_up() { "$HERE/cluster/up.sh"; }
cluster_down() { "$HERE/cluster/down.sh"; }

k() { in_node "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

h() {
  HELM_CACHE_HOME=$DATA/helm/cache HELM_CONFIG_HOME=$DATA/helm/config HELM_DATA_HOME=$DATA/helm/data \
    in_node "$BIN/helm" --kubeconfig "$KUBECONFIG_ADMIN" "$@"
}

# build_images: image tarballs (e2e/images/build.sh) imported into containerd;
# the bucketscan image also under a tag of its content, so pods always run
# the binaries just built.
REDIS_IMAGE_REPOSITORY=bucketscan.local/redis
REDIS_IMAGE_TAG=7
build_images() {
  local ref
  "$HERE/images/build.sh" product
  for image in bucketscan redis; do
    ctr images import "$IMAGES/$image.tar" >/dev/null
  done
  TAG=e2e-$(cut -c1-12 "$IMAGES/bucketscan.sum")
  ref=$(cat "$IMAGES/bucketscan.ref")
  ctr images rm "${ref%:*}:$TAG" >/dev/null 2>&1 || true
  ctr images tag "$ref" "${ref%:*}:$TAG" >/dev/null
  log "images imported: $ref as ${ref%:*}:$TAG, $(cat "$IMAGES/redis.ref")"
}

S3_HOST_ENDPOINT=http://$NODE_IP:9000
S3_POD_ENDPOINT=$S3_HOST_ENDPOINT

# s3_start ACCESS SECRET: a fresh versitygw (empty data, new credentials).
s3_start() {
  if running s3; then
    kill "$(pid_of s3)"
    for _ in $(seq 50); do running s3 || break; sleep 0.1; done
  fi
  rm -rf "$DATA/s3" "$RUN/s3.pid"
  mkdir -p "$DATA/s3"
  # Credentials through the environment, so they are not in `ps`.
  ROOT_ACCESS_KEY=$1 ROOT_SECRET_KEY=$2 launch s3 "$BIN/versitygw" \
    --port "$NODE_IP:9000" --health /_health posix "$DATA/s3"
  await s3 30 in_node curl -sf "$S3_HOST_ENDPOINT/_health"
}

# s3_run CMD...: run a command that reaches the S3 server (in the node namespace).
s3_run() { in_node "$@"; }
