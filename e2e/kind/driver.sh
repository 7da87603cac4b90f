# e2e/run.sh's driver for a kind cluster (sourced), where a Docker engine
# exists: laptops, hosted CI. Needs docker, kind, kubectl and helm on PATH.
# Images are built from the repository's Dockerfile and loaded with
# `kind load docker-image`; Redis is the chart's default image, pulled once.
# The S3 server (versitygw, from scripts/install-servers.sh) runs on this host;
# pods reach it at the kind network's gateway (E2E_KIND_S3_HOST overrides it,
# e.g. host.docker.internal on Docker Desktop), port 9000.

KIND_CLUSTER=bucketscan-e2e
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || die "E2E_CLUSTER=kind needs $tool on PATH"
done

cluster_up() {
  if ! kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    kind create cluster --config "$HERE/kind/kind.yaml" --wait 180s
  fi
}
cluster_down() { kind delete cluster --name "$KIND_CLUSTER"; }

k() { kubectl --context "kind-$KIND_CLUSTER" "$@"; }
h() { helm --kube-context "kind-$KIND_CLUSTER" "$@"; }
kplugin() {
  local command=$1
  shift
  PATH="$PLUGIN_DIR:$PATH" kubectl bucketscan "$command" --context "kind-$KIND_CLUSTER" "$@"
}

REDIS_IMAGE_REPOSITORY=redis
REDIS_IMAGE_TAG=7.2-alpine
build_images() {
  local id
  id=$(docker build -q "$REPO")
  TAG=e2e-$(echo "${id#sha256:}" | cut -c1-12)
  docker tag "$id" "$PRODUCT_IMAGE:$TAG"
  docker image inspect "$REDIS_IMAGE_REPOSITORY:$REDIS_IMAGE_TAG" >/dev/null 2>&1 ||
    docker pull "$REDIS_IMAGE_REPOSITORY:$REDIS_IMAGE_TAG"
  kind load docker-image --name "$KIND_CLUSTER" "$PRODUCT_IMAGE:$TAG" "$REDIS_IMAGE_REPOSITORY:$REDIS_IMAGE_TAG"
}

# Test servers listen on every interface of this host: the kind node reaches
# them through the kind network's gateway.
LISTEN_HOST=0.0.0.0
HOST_SIDE_HOST=127.0.0.1
POD_SIDE_HOST=${E2E_KIND_S3_HOST:-$(docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}')}

serve() {
  local name=$1
  shift
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$RUN/$name.pid" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  for _ in $(seq 50); do [ -s "$RUN/$name.pid" ] && break; sleep 0.05; done
}

s3_run() { "$@"; }
