# e2e/run.sh's driver for a kind cluster (sourced): E2E_CLUSTER=kind.
# Needs kind (v0.30.0: `go install sigs.k8s.io/kind@v0.30.0`), kubectl, helm,
# and Docker or Podman. The provider is kind's own KIND_EXPERIMENTAL_PROVIDER;
# unset, it is docker where a Docker engine answers, else podman.
#
# The node image is KIND_NODE_IMAGE: by default the official image of kind
# v0.30.0 (Kubernetes v1.34.0, pinned by digest); KIND_NODE_IMAGE=local builds
# one here without any registry (e2e/kind/node-image.sh, podman only), which
# is how the test ground runs it.
# The images are the e2e's own archives (the release's image, and Redis from
# e2e/images/build.sh), loaded with `kind load image-archive`: no Docker build.
# The S3 server and the store model run on this host; pods reach them at the
# kind network's gateway (E2E_KIND_S3_HOST overrides it, e.g.
# host.docker.internal on Docker Desktop), port 9000.
#
# State of its own ($E2E_STATE, e2e-kind: run.sh sets it), so the local
# cluster of e2e/cluster and this one do not share pid files or data.

KIND_CLUSTER=bucketscan-e2e
KIND_OFFICIAL_NODE_IMAGE=kindest/node:v1.34.0@sha256:7416a61b42b1662ca6ca89f02028ac133a309a2a30ba309614e8ec94d976dc5a
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-$KIND_OFFICIAL_NODE_IMAGE}
. "$HERE/kind/podman.sh"
KIND_KUBECONFIG=$STATE/kubeconfig
KUBECTL=$BIN/kubectl
[ -x "$KUBECTL" ] || KUBECTL=kubectl
HELM=$BIN/helm
[ -x "$HELM" ] || HELM=helm
for tool in kind "$KUBECTL" "$HELM"; do
  command -v "$tool" >/dev/null || die "E2E_CLUSTER=kind needs $tool on PATH (kind: go install sigs.k8s.io/kind@v0.30.0)"
done
if [ -z "${KIND_EXPERIMENTAL_PROVIDER:-}" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    KIND_EXPERIMENTAL_PROVIDER=docker
  elif command -v podman >/dev/null; then
    KIND_EXPERIMENTAL_PROVIDER=podman
  else
    die "E2E_CLUSTER=kind needs a Docker engine or podman"
  fi
fi
export KIND_EXPERIMENTAL_PROVIDER
RUNTIME=$KIND_EXPERIMENTAL_PROVIDER # the CLI of the node containers
if [ "$RUNTIME" = podman ]; then
  podman_env
  # kind mounts /lib/modules into the node; podman fails on a missing source.
  [ -d /lib/modules ] || die "kind's podman provider mounts /lib/modules, which this host lacks: mkdir /lib/modules (it may stay empty)"
fi
if [ "$KIND_NODE_IMAGE" = local ]; then
  [ "$RUNTIME" = podman ] || die "KIND_NODE_IMAGE=local builds a podman image: set KIND_EXPERIMENTAL_PROVIDER=podman"
  KIND_NODE_IMAGE=$("$HERE/kind/node-image.sh")
fi
NODE=$KIND_CLUSTER-control-plane

# node_image: the image the running node was created from ('' when none runs).
node_image() {
  [ "$("$RUNTIME" inspect -f '{{.State.Running}}' "$NODE" 2>/dev/null)" = true ] || return 0
  "$RUNTIME" inspect -f '{{.Config.Image}}' "$NODE"
}

cluster_up() {
  local begin=$SECONDS running
  if [ "$RUNTIME" = podman ]; then podman_network; fi
  running=$(node_image)
  # A node of another image (a rebuilt local image, another KIND_NODE_IMAGE)
  # or a stopped one is replaced.
  if [ -n "$running" ] && [ "$running" != "$KIND_NODE_IMAGE" ] && [ "localhost/$running" != "$KIND_NODE_IMAGE" ]; then
    log "kind node runs $running, not $KIND_NODE_IMAGE: recreating the cluster"
    running=""
  fi
  if [ -z "$running" ]; then
    kind delete cluster --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG" >/dev/null 2>&1 || true
    kind create cluster --config "$HERE/kind/kind.yaml" --image "$KIND_NODE_IMAGE" \
      --kubeconfig "$KIND_KUBECONFIG" --wait 300s
  else
    kind export kubeconfig --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG" >/dev/null 2>&1
  fi
  # Ready for the chart: the node, cluster DNS and the API's Service.
  k wait --for=condition=Ready node --all --timeout=300s >/dev/null
  k -n kube-system rollout status deployment/coredns --timeout=300s >/dev/null
  log "kind cluster $KIND_CLUSTER ready after $((SECONDS - begin))s ($RUNTIME, $KIND_NODE_IMAGE)"
}

cluster_down() {
  # The test servers run on this host: they go with the cluster.
  local name
  for name in s3 store-model synthetic-s3; do stop_server "$name" 2>/dev/null || true; done
  kind delete cluster --name "$KIND_CLUSTER" --kubeconfig "$KIND_KUBECONFIG"
  if [ "$RUNTIME" = podman ] && podman network exists "$KIND_NETWORK"; then
    podman network rm "$KIND_NETWORK" >/dev/null
  fi
}

k() { "$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" --context "kind-$KIND_CLUSTER" "$@"; }
h() {
  HELM_CACHE_HOME=$DATA/helm/cache HELM_CONFIG_HOME=$DATA/helm/config HELM_DATA_HOME=$DATA/helm/data \
    "$HELM" --kubeconfig "$KIND_KUBECONFIG" --kube-context "kind-$KIND_CLUSTER" "$@"
}
kplugin() {
  local command=$1
  shift
  KUBECONFIG=$KIND_KUBECONFIG PATH="$PLUGIN_DIR:$PATH" "$KUBECTL" bucketscan "$command" \
    --context "kind-$KIND_CLUSTER" "$@"
}

# build_images: the release's image archive and the Redis archive of
# e2e/images/build.sh, loaded into the node; the bucketscan image also under
# a tag of its content, so pods always run the binaries just built.
REDIS_IMAGE_REPOSITORY=bucketscan.local/redis
REDIS_IMAGE_TAG=7
build_images() {
  local ref
  kind load image-archive --name "$KIND_CLUSTER" "$RELEASE_IMAGE"
  kind load image-archive --name "$KIND_CLUSTER" "$IMAGES/redis.tar"
  TAG=e2e-$(cut -c1-12 "$IMAGES/bucketscan.sum")
  ref=$(cat "$IMAGES/bucketscan.ref")
  "$RUNTIME" exec "$NODE" ctr -n k8s.io images rm "${ref%:*}:$TAG" >/dev/null 2>&1 || true
  "$RUNTIME" exec "$NODE" ctr -n k8s.io images tag "$ref" "${ref%:*}:$TAG" >/dev/null
  log "images loaded: $ref as ${ref%:*}:$TAG, $(cat "$IMAGES/redis.ref")"
}

# The test servers run on this host, bound to the kind network's gateway
# where the node (and, masqueraded, its pods) reach them; with Docker on
# every interface (Docker Desktop's gateway is inside its VM).
if [ -n "${E2E_KIND_S3_HOST:-}" ]; then
  POD_SIDE_HOST=$E2E_KIND_S3_HOST
elif [ "$RUNTIME" = podman ]; then
  podman_network
  POD_SIDE_HOST=$(podman network inspect "$KIND_NETWORK" -f '{{range .Subnets}}{{.Gateway}} {{end}}' | cut -d' ' -f1)
else
  docker network inspect kind >/dev/null 2>&1 || docker network create kind >/dev/null
  POD_SIDE_HOST=$(docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}')
fi
[ -n "$POD_SIDE_HOST" ] || die "no gateway address of the kind network"
if [ "$RUNTIME" = podman ] && [ -z "${E2E_KIND_S3_HOST:-}" ]; then
  LISTEN_HOST=$POD_SIDE_HOST
  HOST_SIDE_HOST=$POD_SIDE_HOST
else
  LISTEN_HOST=0.0.0.0
  HOST_SIDE_HOST=127.0.0.1
fi

serve() {
  local name=$1
  shift
  rm -f "$RUN/$name.pid"
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$RUN/$name.pid" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  for _ in $(seq 50); do [ -s "$RUN/$name.pid" ] && break; sleep 0.05; done
}

s3_run() { "$@"; }
