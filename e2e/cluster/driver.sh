# e2e/run.sh's driver for the local cluster of e2e/cluster (sourced).
# The S3 server runs inside the node namespace, listening on the node's IP,
# where pods reach it; the test's own S3 client runs there too.

cluster_up() { "$HERE/cluster/up.sh"; }
cluster_down() { "$HERE/cluster/down.sh"; }

k() { in_node "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# kplugin COMMAND ARGS...: `kubectl bucketscan COMMAND ARGS` through kubectl's
# plugin discovery (kubectl-bucketscan on PATH, from $PLUGIN_DIR).
kplugin() { in_node env KUBECONFIG="$KUBECONFIG_ADMIN" PATH="$PLUGIN_DIR:$PATH" "$BIN/kubectl" bucketscan "$@"; }

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
  # The product image is the release's archive ($RELEASE_IMAGE, run.sh),
  # Redis the local one build.sh made beside it.
  ctr images import "$RELEASE_IMAGE" >/dev/null
  ctr images import "$IMAGES/redis.tar" >/dev/null
  TAG=e2e-$(cut -c1-12 "$IMAGES/bucketscan.sum")
  ref=$(cat "$IMAGES/bucketscan.ref")
  ctr images rm "${ref%:*}:$TAG" >/dev/null 2>&1 || true
  ctr images tag "$ref" "${ref%:*}:$TAG" >/dev/null
  log "images imported: $ref as ${ref%:*}:$TAG, $(cat "$IMAGES/redis.ref")"
}

# Test servers listen on the node's IP inside the node namespace: the test's
# own clients (run with s3_run) and the pods reach them there.
LISTEN_HOST=$NODE_IP
HOST_SIDE_HOST=$NODE_IP
POD_SIDE_HOST=$NODE_IP

# serve NAME CMD...: run a test server (a pid file in $RUN, its log in $LOGS).
serve() { launch "$@"; }

# s3_run CMD...: run a command that reaches the test servers.
s3_run() { in_node "$@"; }
