#!/usr/bin/env bash
# The real-cluster end-to-end test, done the way a user does it:
#   images -> helm install (operator, bundled Redis, CRD) -> an S3 server with
#   a seeded bucket reachable from the pods -> kubectl apply -f bucketscan.yaml
#   -> kubectl wait --for=condition=Complete -> the merged result in S3 equals
#   the seeded set exactly.
# Then the chaos scan: worker pods deleted every few seconds, the operator pod
# deleted, the workers scaled up and down by editing the BucketScan, Redis
# restarted (its data lost), and again the exact seeded set. The chaos scan
# reaches versitygw through a store model (synthetic-s3 --passthrough) that
# resets connections, answers 500s and 503s beyond its capacity.
#
# Usage: e2e/run.sh [test|demo|bench]
#   test  (default, `just e2e`) the clean scan and the chaos scan
#   demo  (`just demo`) the clean scan, showing `kubectl get bucketscans` while
#         it runs, then the scan's status and the first records of the result
#   bench (`just bench`) the end-to-end figure of BENCHMARKS.md: a scan of
#         E2E_BENCH_OBJECTS (default 1,000,000) objects on synthetic-s3 (1 ms
#         per request; results forwarded to versitygw) against the raw HEAD
#         rate of one bucketscan-worker scan of the same endpoint
# Environment: E2E_OBJECTS (default 20000) objects to seed;
#   E2E_CLUSTER=local (default: e2e/cluster, no Docker) or kind (a kind cluster
#   on Docker or Podman, node image KIND_NODE_IMAGE; see e2e/README.md);
#   E2E_DOWN=1 stops the cluster at the end (`just test` does; otherwise it
#   keeps running for the next run).
# Needs the workspace's binaries in $BUILD_DIR (cluster/lib.sh: profile e2e,
# `just build-e2e`; BUCKETSCAN_BUILD=release for `just bench`) and the tools of
# scripts/install-*.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CLUSTER=${E2E_CLUSTER:-local}
# A kind run keeps its state (pid files, logs, images, S3 data) apart from
# the local cluster's, so the two never stop each other's servers.
if [ "$CLUSTER" = kind ]; then export E2E_STATE=${E2E_STATE:-${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}/e2e-kind}; fi
. "$HERE/cluster/lib.sh"
MODE=${1:-test}
OBJECTS=${E2E_OBJECTS:-20000}
if [ "$MODE" = bench ]; then OBJECTS=0; fi # versitygw only holds the results
PYTHON=$E2E_CACHE/venv/bin/python
RELEASE_NS=bucketscan
SCAN_NS=e2e
BUCKET=e2e-source
RESULTS=e2e-source-results
started=$SECONDS
step() { log "== $* ($((SECONDS - started))s)"; }

case $CLUSTER in
  local) . "$HERE/cluster/driver.sh" ;;
  kind) . "$HERE/kind/driver.sh" ;;
  *) die "E2E_CLUSTER must be local or kind, not $CLUSTER" ;;
esac
# The driver provides: cluster_up, cluster_down, build_images (sets TAG and
# REDIS_IMAGE_REPOSITORY/_TAG; the images are then in the cluster), k
# (kubectl), h (helm), kplugin (`kubectl bucketscan`, the plugin in $PLUGIN_DIR), serve NAME CMD (starts a test server), s3_run CMD
# (runs a command that reaches the test servers), LISTEN_HOST (the address
# test servers bind), HOST_SIDE_HOST (where s3_run reaches them) and
# POD_SIDE_HOST (where pods do).
s3_python() { s3_run "$PYTHON" "$@"; }
PLUGIN_DIR=$BUILD_DIR
[ -x "$PLUGIN_DIR/kubectl-bucketscan" ] || die "$PLUGIN_DIR/kubectl-bucketscan missing: run 'just build-e2e'"

# stop_server NAME: TERM, and KILL after 5 s.
stop_server() {
  running "$1" || return 0
  kill "$(pid_of "$1")"
  for _ in $(seq 50); do running "$1" || return 0; sleep 0.1; done
  kill -KILL "$(pid_of "$1")" 2>/dev/null
  sleep 0.2
}

# restart_server NAME PORT PATH CMD...: stop NAME if it runs, start CMD, wait
# until http://HOST:PORT/PATH answers.
restart_server() {
  local name=$1 port=$2 path=$3
  shift 3
  stop_server "$name"
  serve "$name" "$@"
  await "$name" 30 s3_run curl -sf -o /dev/null "http://$HOST_SIDE_HOST:$port/$path"
}
S3_HOST_ENDPOINT=http://$HOST_SIDE_HOST:9000
S3_POD_ENDPOINT=http://$POD_SIDE_HOST:9000

# s3_start ACCESS SECRET: a fresh versitygw (empty data, new credentials;
# given through its environment, so they are not in `ps`).
s3_start() {
  stop_server s3
  rm -rf "$DATA/s3"
  mkdir -p "$DATA/s3"
  if [ "$MODE" = bench ]; then
    # The bench's results store is MinIO: its incremental scan trusts
    # LastModified only where a metadata replace moves it (the store check),
    # and versitygw's does not move.
    MINIO_ROOT_USER=$1 MINIO_ROOT_PASSWORD=$2 MINIO_BROWSER=off MINIO_CI_CD=1 restart_server s3 9000 \
      minio/health/live "$BIN/minio" server --quiet --address "$LISTEN_HOST:9000" "$DATA/s3"
  else
    ROOT_ACCESS_KEY=$1 ROOT_SECRET_KEY=$2 restart_server s3 9000 _health \
      "$BIN/versitygw" --port "$LISTEN_HOST:9000" --health /_health posix "$DATA/s3"
  fi
}
if [ "${E2E_DOWN:-0}" = 1 ]; then trap cluster_down EXIT; fi

step "cluster"
cluster_up

# Installed the way users install a release: the packaged chart and the
# image archive `just release` writes (here a snapshot of this tree, built in
# the e2e's profile), not the source directory.
step "release artifacts (scripts/release.sh --snapshot)"
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml")
DIST=$STATE/dist
BUCKETSCAN_DIST=$DIST BUCKETSCAN_RELEASE_PROFILE=${BUCKETSCAN_BUILD:-e2e} \
  "$REPO/scripts/release.sh" "$VERSION" --snapshot 2>&1 | tail -n 3
RELEASE_IMAGE=$DIST/bucketscan-image_${VERSION}_linux_amd64.tar
RELEASE_CHART=$DIST/bucketscan-$VERSION.tgz

step "images"
build_images

step "S3 server with bucket $BUCKET ($OBJECTS objects)"
# Scans left from an earlier run go first, while their operator and S3 server
# still run to finish them (finalizers).
k -n "$SCAN_NS" delete bucketscans --all --timeout=120s >/dev/null 2>&1 || true
S3_ACCESS=e2e-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
S3_SECRET=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
s3_start "$S3_ACCESS" "$S3_SECRET"
EXPECTED=$STATE/expected.json
AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET \
  s3_python "$HERE/s3data.py" seed "$S3_HOST_ENDPOINT" "$BUCKET" "$OBJECTS" "$EXPECTED"

step "helm install bucketscan"
# The chart installs and upgrades the CRD (crds.install). A kept cluster whose
# CRD came from an older chart (its crds/ directory, which Helm never
# upgrades) is handed to the release first, the way docs/operations.md tells
# users to: Helm adopts an object carrying the release's ownership metadata,
# and --force-conflicts takes over the fields an earlier `kubectl apply
# --server-side` owns (Helm 4 applies server-side).
if k get crd bucketscans.bucketscan.dev >/dev/null 2>&1; then
  k label crd bucketscans.bucketscan.dev app.kubernetes.io/managed-by=Helm --overwrite >/dev/null
  k annotate crd bucketscans.bucketscan.dev meta.helm.sh/release-name=bucketscan \
    meta.helm.sh/release-namespace="$RELEASE_NS" --overwrite >/dev/null
fi
# The namespaces that run scans exist before the release: the chart binds the
# operator's Secret access in each (operator.scanNamespaces).
k create namespace "$SCAN_NS" --dry-run=client -o yaml | k apply -f - >/dev/null
h upgrade --install bucketscan "$RELEASE_CHART" -n "$RELEASE_NS" --create-namespace \
  --set-string image.tag="$TAG" --set-string worker.image.tag="$TAG" \
  --set "operator.scanNamespaces={default,$SCAN_NS}" \
  --set redis.image.repository="$REDIS_IMAGE_REPOSITORY" --set-string redis.image.tag="$REDIS_IMAGE_TAG" \
  --set operator.logFormat=text --force-conflicts --wait --timeout 5m
k -n "$RELEASE_NS" get pods
step "helm test bucketscan"
# The chart's test pod: the operator ready on /readyz, BucketScans served.
h test bucketscan -n "$RELEASE_NS" --logs --timeout 3m

# Scans run in a namespace enforcing the Pod Security Standard `restricted`
# (the apiserver's PodSecurity admission): their worker and merge pods must
# pass it. A pod without a security context is refused there, so the label
# does enforce.
k create namespace "$SCAN_NS" --dry-run=client -o yaml | k apply -f - >/dev/null
k label namespace "$SCAN_NS" pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/enforce-version=latest --overwrite >/dev/null
if refused=$(k -n "$SCAN_NS" run psa-probe --image="$PRODUCT_IMAGE:$TAG" --restart=Never --dry-run=server 2>&1); then
  die "namespace $SCAN_NS admitted a pod without a security context: Pod Security is not enforced"
fi
[[ $refused == *'violates PodSecurity "restricted:latest"'* ]] || die "psa-probe refused for another reason: $refused"

# Scans are run by a tenant, as on a shared cluster: a ServiceAccount of the
# scan namespace with only the built-in `edit` role there. It reaches
# BucketScans through the chart's aggregate-to-edit ClusterRole, and nothing
# of the cluster: the check below fails the run if it could.
step "tenant: only the aggregated edit role in namespace $SCAN_NS"
k -n "$SCAN_NS" create serviceaccount tenant --dry-run=client -o yaml | k apply -f - >/dev/null
k -n "$SCAN_NS" create rolebinding tenant-edit --clusterrole=edit --serviceaccount="$SCAN_NS:tenant" \
  --dry-run=client -o yaml | k apply -f - >/dev/null
TENANT=system:serviceaccount:$SCAN_NS:tenant
kt() { k --as="$TENANT" "$@"; }
# can_i VERB RESOURCE [NAMESPACE]: the tenant's answer (yes/no).
can_i() { kt auth can-i "$1" "$2" -n "${3:-$SCAN_NS}" 2>/dev/null || true; }
# The aggregation controller adds the chart's rules to `edit` within seconds.
for _ in $(seq 30); do [ "$(can_i create bucketscans.bucketscan.dev)" = yes ] && break; sleep 1; done
[ "$(can_i create bucketscans.bucketscan.dev)" = yes ] ||
  die "the tenant with the edit role may not create BucketScans: the chart's aggregate-to-edit ClusterRole did not aggregate"
for denied in "create deployments $RELEASE_NS" "get secrets $RELEASE_NS" "create pods kube-system" \
  "patch customresourcedefinitions default" "create clusterroles default"; do
  # shellcheck disable=SC2086
  [ "$(can_i $denied)" = no ] || die "the tenant may $denied: it must not"
done
log "tenant $TENANT: BucketScans in $SCAN_NS only"
credentials=$(mktemp)
chmod 600 "$credentials"
printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$S3_ACCESS" "$S3_SECRET" >"$credentials"
kt -n "$SCAN_NS" create secret generic s3-credentials --from-env-file="$credentials" \
  --dry-run=client -o yaml | kt apply -f - >/dev/null
rm -f "$credentials"

# apply_scan FILE: kubectl apply -f as the tenant, with the endpoint the pods reach.
apply_scan() {
  sed "s|http://10.200.0.1:|http://$POD_SIDE_HOST:|" "$1" | kt -n "$SCAN_NS" apply -f -
}

phase_of() { k -n "$SCAN_NS" get bucketscan "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }

# wait_complete NAME SECONDS [WATCH]: kubectl wait for Complete; with WATCH,
# print `kubectl get bucketscans` every few seconds meanwhile. Fails at once
# when the scan fails.
wait_complete() {
  local name=$1 seconds=$2 watch=${3:-} begin=$SECONDS phase
  while true; do
    phase=$(phase_of "$name")
    [ -n "$watch" ] && k -n "$SCAN_NS" get bucketscans "$name" --no-headers 2>/dev/null | sed 's/^/  /'
    case $phase in
      Complete) break ;;
      Failed)
        k -n "$SCAN_NS" describe bucketscan "$name" | tail -n 30
        die "scan $name failed"
        ;;
    esac
    if [ $((SECONDS - begin)) -ge "$seconds" ]; then
      k -n "$SCAN_NS" describe bucketscan "$name" | tail -n 30
      k -n "$SCAN_NS" get pods
      die "scan $name not complete after ${seconds}s (phase ${phase:-none})"
    fi
    sleep 3
  done
  k -n "$SCAN_NS" wait --for=condition=Complete "bucketscan/$name" --timeout=10s >/dev/null
  log "scan $name complete after $((SECONDS - begin))s"
}

# result_key NAME: the result's key in $RESULTS, from the scan's status.
result_key() {
  local output
  output=$(k -n "$SCAN_NS" get bucketscan "$1" -o jsonpath='{.status.output}')
  [[ $output == "s3://$RESULTS/"* ]] || die "scan $1: unexpected output '$output'"
  echo "${output#"s3://$RESULTS/"}"
}

verify() { # NAME [HEAD_LINES]
  AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET \
    s3_python "$HERE/s3data.py" verify "$S3_HOST_ENDPOINT" "$RESULTS" "$(result_key "$1")" "$EXPECTED" --head "${2:-0}"
}

manifest_fields() { # NAME FIELD[.FIELD...]...: the values, one line, from one read of the manifest
  local key
  key=$(result_key "$1")
  shift
  AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET \
    s3_python "$HERE/s3data.py" manifest "$S3_HOST_ENDPOINT" "$RESULTS" "${key%/*}/manifest.json" |
    python3 -c "import functools, json, sys; m = json.load(sys.stdin)
print(*(functools.reduce(lambda v, f: v[f], path.split('.'), m) for path in sys.argv[1:]))" "$@"
}

# workspace_bin NAME: the path of one of the workspace's binaries ($BUILD_DIR).
workspace_bin() {
  local bin=$BUILD_DIR/$1
  [ -x "$bin" ] || die "$bin missing: just build-e2e"
  echo "$bin"
}

# The end-to-end benchmark (mode bench): synthetic-s3 serves the bucket and
# passes the results bucket on to versitygw, so the scan can be large.
bench_in_cluster() {
  local objects=${E2E_BENCH_OBJECTS:-1000000}
  # The fleet's shape (E2E_BENCH_WORKERS x E2E_BENCH_CONCURRENCY HEADs in
  # flight; the raw rate is measured with as many in one process).
  # Each worker's CPU limit (E2E_BENCH_CPU_LIMIT, default 1; empty: none):
  # a worker runs a runtime thread per core it may use, and without a limit
  # three workers ran six threads on this machine's two cores, beside the
  # store, and spent 28 % more CPU per HEAD (docs/capacity.md).
  BENCH_WORKERS=${E2E_BENCH_WORKERS:-3} BENCH_CONCURRENCY=${E2E_BENCH_CONCURRENCY:-64}
  local cpu_limit=${E2E_BENCH_CPU_LIMIT-1}
  BENCH_CPU_LIMIT=${cpu_limit:+cpu: \"$cpu_limit\",}
  local synthetic raw_before raw_rate full_heads_before full_heads
  synthetic=$(workspace_bin synthetic-s3)
  step "synthetic-s3 with $objects objects, 1 ms per request"
  restart_server synthetic-s3 9100 _stats "$synthetic" --listen "$LISTEN_HOST:9100" \
    --objects "$objects" --layout nested --latency-us 1000 --threads 2 --forward "$S3_HOST_ENDPOINT"
  kt -n "$SCAN_NS" delete bucketscan e2e-bench --ignore-not-found --timeout=120s >/dev/null
  # The raw rate before the scan and after it (the machine's speed drifts
  # between runs: their mean is the figure's).
  step "raw HEAD rate, before the scan: one bucketscan-worker scan of the same endpoint"
  raw_before=$(AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET \
    BUCKET=synthetic OBJECTS=$objects S3_HOST_ENDPOINT=http://$HOST_SIDE_HOST:9100 raw_scan_rate $((BENCH_WORKERS * BENCH_CONCURRENCY)))
  # The timeline (issue 29, item 6): the store's counters and every
  # process's CPU, twice a second, while the scan runs.
  rm -f "$STATE/samples.stop"
  s3_run python3 "$HERE/sample.py" "http://$HOST_SIDE_HOST:9100/_stats" "$STATE/samples.jsonl" \
    "$STATE/samples.stop" &
  local sampler=$!
  full_heads_before=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
  kt -n "$SCAN_NS" apply -f - <<YAML
apiVersion: bucketscan.dev/v1alpha1
kind: BucketScan
metadata: {name: e2e-bench}
spec:
  source: {endpoint: "http://$POD_SIDE_HOST:9100", bucket: synthetic, pathStyle: true, credentialsSecret: {name: s3-credentials}}
  output: {bucket: $RESULTS}
  workers: {replicas: $BENCH_WORKERS, concurrency: $BENCH_CONCURRENCY, resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {$BENCH_CPU_LIMIT memory: 1Gi}}}
  sharding: {targetShards: 64}
YAML
  wait_complete e2e-bench 1800 watch
  full_heads=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats" | python3 -c 'import json, sys
print(json.load(sys.stdin)["heads"] - json.loads(sys.argv[1])["heads"])' "$full_heads_before")
  touch "$STATE/samples.stop"
  wait "$sampler" || die "the timeline sampler failed"
  [ "$(manifest_fields e2e-bench counts.objects)" = "$objects" ] ||
    die "the bench scan's manifest does not count $objects objects"
  step "raw HEAD rate, after the scan: one bucketscan-worker scan of the same endpoint"
  raw_rate=$raw_before,$(AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET \
    BUCKET=synthetic OBJECTS=$objects S3_HOST_ENDPOINT=http://$HOST_SIDE_HOST:9100 raw_scan_rate $((BENCH_WORKERS * BENCH_CONCURRENCY)))
  # BENCHMARKS.md's end-to-end row (bench/run.py reads it).
  mkdir -p "$E2E_CACHE/bench"
  figure e2e-bench "$objects" "$raw_rate" "synthetic-s3, 1 ms" "$STATE/samples.jsonl" |
    tee "$E2E_CACHE/bench/e2e.json"
  incremental_in_cluster "$objects" "$synthetic" "$full_heads"
  stop_server synthetic-s3
}

# incremental_in_cluster OBJECTS SYNTHETIC FULL_HEADS (issue 30, item 7): the bucket
# changed by 1 % (added, deleted, content rewritten, metadata replaced in
# equal parts), an incremental scan in the cluster against e2e-bench, and a
# full scan of the changed bucket by one process to judge it by, record by
# record; its change set against the store's own list of the changes made.
incremental_in_cluster() {
  local objects=$1 synthetic=$2 full_heads=$3 heads_before heads_after full2=e2e-bench-changed-full/
  # The changes are modified the second after the server starts: later than
  # e2e-bench's start by the store's clock.
  sleep 1
  step "the bucket changed by 1 %, then an incremental scan against e2e-bench"
  restart_server synthetic-s3 9100 _stats "$synthetic" --listen "$LISTEN_HOST:9100" \
    --objects "$objects" --layout nested --latency-us 1000 --threads 2 --forward "$S3_HOST_ENDPOINT" \
    --change-share 0.01 --change-seed 30
  heads_before=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
  # Its timeline too: where an incremental scan's seconds and CPU go.
  rm -f "$STATE/samples.stop"
  s3_run python3 "$HERE/sample.py" "http://$HOST_SIDE_HOST:9100/_stats" "$STATE/samples-inc.jsonl" \
    "$STATE/samples.stop" &
  local sampler=$!
  kt -n "$SCAN_NS" delete bucketscan e2e-bench-inc --ignore-not-found --timeout=120s >/dev/null
  kt -n "$SCAN_NS" apply -f - <<YAML
apiVersion: bucketscan.dev/v1alpha1
kind: BucketScan
metadata: {name: e2e-bench-inc}
spec:
  source: {endpoint: "http://$POD_SIDE_HOST:9100", bucket: synthetic, pathStyle: true, credentialsSecret: {name: s3-credentials}}
  output: {bucket: $RESULTS}
  baseline: {scan: e2e-bench}
  workers: {replicas: 3, concurrency: 64, resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 1Gi}}}
  sharding: {targetShards: 64}
YAML
  wait_complete e2e-bench-inc 1800 watch
  heads_after=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
  touch "$STATE/samples.stop"
  wait "$sampler" || die "the timeline sampler failed"
  figure e2e-bench-inc "$objects" "$raw_rate" "synthetic-s3, 1 ms" "$STATE/samples-inc.jsonl" \
    >"$E2E_CACHE/bench/e2e-incremental-timeline.json"
  s3_run curl -sf -o "$STATE/changes.jsonl" "http://$HOST_SIDE_HOST:9100/_changes"
  step "a full scan of the changed bucket (one bucketscan-worker scan), to judge the incremental one by"
  AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET s3_run "$(workspace_bin bucketscan-worker)" scan \
    --quiet --endpoint "http://$HOST_SIDE_HOST:9100" --path-style --bucket synthetic --concurrency 192 \
    --layout dataset --metadata-source head -o "s3://$RESULTS/$full2"
  k -n "$SCAN_NS" get bucketscan e2e-bench -o json >"$STATE/scan-full.json"
  k -n "$SCAN_NS" get bucketscan e2e-bench-inc -o json >"$STATE/scan-inc.json"
  AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET s3_python "$HERE/incremental_check.py" \
    "$S3_HOST_ENDPOINT" "$STATE/scan-full.json" "$STATE/scan-inc.json" "s3://$RESULTS/${full2}manifest.json" \
    "$STATE/changes.jsonl" "$full_heads" "$heads_before" "$heads_after" "$CLUSTER" | tee "$E2E_CACHE/bench/e2e-incremental.json"
  python3 -c 'import json, sys; r = json.load(sys.stdin)
sys.exit(0 if r["records_equal"] and r["changes_exact"] else "the incremental scan in the cluster is not exact")' \
    <"$E2E_CACHE/bench/e2e-incremental.json" || die "see $E2E_CACHE/bench/e2e-incremental.json"
}

# figure NAME OBJECTS RAW_RATE SOURCE [SAMPLES]: the scan's end-to-end figure
# (JSON), with its timeline when e2e/sample.py's SAMPLES are given.
figure() {
  k -n "$SCAN_NS" get bucketscan "$1" -o json >"$STATE/scan.json"
  k -n "$SCAN_NS" get events -o json >"$STATE/events.json"
  python3 "$HERE/timeline.py" "$STATE/scan.json" "$STATE/events.json" "$2" "$3" "$CLUSTER" "$4" ${5:+"$5"}
}

raw_scan_rate() { # CONCURRENCY: objects/s of one `bucketscan-worker scan` of the bucket
  # --metadata-source head: the raw HEAD rate is a HEAD per object, whatever
  # the store's listing carries (the CLI's default, auto, may take records
  # from a listing that has metadata).
  local begin end
  begin=$(date +%s.%N)
  s3_run "$(workspace_bin bucketscan-worker)" scan --quiet --metadata-source head \
    --endpoint "$S3_HOST_ENDPOINT" --path-style --bucket "$BUCKET" --concurrency "$1" --output /dev/null
  end=$(date +%s.%N)
  python3 -c "print(round($OBJECTS / ($end - $begin)))"
}

if [ "$MODE" = bench ]; then
  bench_in_cluster
  log "bench done in $((SECONDS - started))s"
  exit 0
fi

step "kubectl apply -f e2e/bucketscan.yaml"
apply_scan "$HERE/bucketscan.yaml"
if [ "$MODE" = test ]; then
  # The kubectl plugin follows it (a line per change: stdout is no terminal)
  # and exits 0 only on Complete.
  kplugin watch e2e -n "$SCAN_NS" --timeout 600 | sed "s/^/  /" ||
    { k -n "$SCAN_NS" describe bucketscan e2e | tail -n 30; die "kubectl bucketscan watch e2e failed"; }
fi
wait_complete e2e 600 "${MODE/test/}"
step "result of the scan"
verify e2e "$([ "$MODE" = demo ] && echo 5 || echo 0)"
plugin_result=$(kplugin result e2e -n "$SCAN_NS")
echo "$plugin_result"
[[ $plugin_result == *"result:     s3://$RESULTS/$(result_key e2e)"* ]] ||
  die "kubectl bucketscan result e2e does not name the result s3://$RESULTS/$(result_key e2e)"
if [ "$MODE" = demo ]; then
  k -n "$SCAN_NS" get bucketscans
  k -n "$SCAN_NS" get bucketscan e2e -o yaml | sed -n '/^status:/,$p'
  log "demo done in $((SECONDS - started))s; the cluster keeps running (e2e/cluster/kubectl get pods -A;"
  log "e2e/cluster/down.sh stops it)"
  exit 0
fi

# This scan's objects per second, start to completion, against the workers'
# raw HEAD rate: one bucketscan-worker scan of the same bucket with the same
# HEADs in flight, without Kubernetes, Redis or merging. (Mode bench measures
# the same on a bucket large enough to amortise planning, pod start and merge.)
step "end to end against the raw HEAD rate"
raw_rate=$(AWS_ACCESS_KEY_ID=$S3_ACCESS AWS_SECRET_ACCESS_KEY=$S3_SECRET raw_scan_rate 192)
figure e2e "$OBJECTS" "$raw_rate" "versitygw"

step "chaos scan: pods killed, workers scaled, operator and Redis restarted, a faulty store"
# The store model in front of versitygw: 1 % of connections reset, 4 % 500
# InternalError (5 % of faults whatever the load), and 503 SlowDown beyond
# 200 requests per second (the scan asks for 250), so the rate governor has
# a knee to find.
store_model=$(workspace_bin synthetic-s3)
restart_server store-model 9100 _stats "$store_model" --listen "$LISTEN_HOST:9100" \
  --bucket "$BUCKET" --passthrough --forward "$S3_HOST_ENDPOINT" --threads 1 \
  --latency-us 1000 --capacity 200 --queue-limit-ms 50 --reset-share 0.01 --error-share 0.04
apply_scan "$HERE/bucketscan-chaos.yaml"
workers="app.kubernetes.io/instance=e2e-chaos,app.kubernetes.io/component=worker"
chaos_log=$STATE/chaos.log
: >"$chaos_log"
act() { log "chaos: $*" 2>&1 | tee -a "$chaos_log" >&2; }
# Chaos starts once the workers scan, and stops when the scan merges.
for _ in $(seq 120); do [ "$(phase_of e2e-chaos)" = Scanning ] && break; sleep 1; done
[ "$(phase_of e2e-chaos)" = Scanning ] || die "chaos scan never reached Scanning"
# What the store served while the fleet scanned, for the fleet's share of
# its capacity (issue 29: exact is not enough, the fleet must also use the
# store). Requests are counted as the store model forwards them.
served_before=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
scan_began=$SECONDS
tick=0
killed=0
# (A Redis that lost the scan sends it back through Planning: chaos goes on.)
while [[ "$(phase_of e2e-chaos)" =~ ^(Scanning|Planning|Pending)$ ]]; do
  tick=$((tick + 1))
  case $tick in
    2) # The plugin's logs of the running workers, as a user looks at a scan.
       worker_logs=$(kplugin logs e2e-chaos -n "$SCAN_NS" --component worker --tail 2)
       [[ $worker_logs == *"[e2e-chaos-workers-"* ]] ||
         die "kubectl bucketscan logs e2e-chaos shows no worker's log: $worker_logs"
       act "kubectl bucketscan logs: $(grep -c '^\[' <<<"$worker_logs") lines of the workers" ;;
    3) kt -n "$SCAN_NS" patch bucketscan e2e-chaos --type merge -p '{"spec":{"workers":{"replicas":4}}}' >/dev/null
       act "workers scaled 2 -> 4" ;;
    5) k -n "$RELEASE_NS" delete pod -l app.kubernetes.io/component=operator --wait=false >/dev/null
       act "operator pod deleted" ;;
    8) k -n "$RELEASE_NS" delete pod -l app.kubernetes.io/component=redis --wait=false >/dev/null
       act "Redis pod deleted (its data goes with it)" ;;
    11) kt -n "$SCAN_NS" patch bucketscan e2e-chaos --type merge -p '{"spec":{"workers":{"replicas":2}}}' >/dev/null
        act "workers scaled 4 -> 2" ;;
  esac
  victim=$(k -n "$SCAN_NS" get pods -l "$workers" --field-selector=status.phase=Running -o name | shuf -n 1)
  # A pod being deleted still shows as Running, so the victim may be gone by
  # now: that is no failure, and no kill to count.
  if [ -n "$victim" ] && [ -n "$(kt -n "$SCAN_NS" delete "$victim" --wait=false --ignore-not-found)" ]; then
    killed=$((killed + 1))
    act "worker ${victim#pod/} deleted"
  fi
  k -n "$SCAN_NS" get bucketscan e2e-chaos --no-headers | sed 's/^/  /'
  sleep 5
done
served_after=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
scan_secs=$((SECONDS - scan_began))
[ "$tick" -ge 11 ] || die "the chaos scan ended after $tick rounds, before every chaos step ran (too few objects?)"
wait_complete e2e-chaos 900
step "result of the chaos scan"
verify e2e-chaos
read -r shards retried attempts splits < <(manifest_fields e2e-chaos shards shards_retried attempts splits)
log "chaos: $killed worker pods deleted, operator and Redis restarted, workers scaled 2 -> 4 -> 2;" \
  "shards: $shards, retried or resumed: $retried, leases taken: $attempts, split while running: $splits"
# The store's faults really happened (and were all retried away: verify
# found every object exactly once, none as an error record).
faults=$(s3_run curl -sf "http://$HOST_SIDE_HOST:9100/_stats")
log "chaos store model: $faults"
read -r resets errors throttled share < <(echo "$faults" | python3 -c '
import json, sys; s = json.load(sys.stdin)
faulted = s["resets"] + s["internal_errors"] + s["throttled"]
print(s["resets"], s["internal_errors"], s["throttled"], round(100 * faulted / max(1, faulted + s["forwarded"])))')
[ "$resets" -gt 0 ] && [ "$errors" -gt 0 ] && [ "$throttled" -gt 0 ] ||
  die "the store model injected no resets, 500s or 503s: $faults"
# Issue 14: the chaos scan goes through at least 5 % of 503s, 500s and resets.
[ "$share" -ge 5 ] || die "only $share % of the store's answers were faults (at least 5 % wanted): $faults"
log "chaos store model: $share % of the answers were faults (503, 500, reset), all retried away"
# The fleet's share of the store's capacity while it scanned (through pod
# kills, an operator and a Redis restart, and rescaling): requests the store
# model served per second against its 200/s.
read -r served_rate capacity_share < <(python3 -c '
import json, sys
before, after, secs = json.loads(sys.argv[1]), json.loads(sys.argv[2]), max(1, int(sys.argv[3]))
rate = (after["forwarded"] - before["forwarded"]) / secs
print(round(rate), round(100 * rate / 200))' "$served_before" "$served_after" "$scan_secs")
[ "$served_rate" -gt 0 ] || die "the store model served nothing while the chaos scan scanned"
log "chaos store model: the fleet was served $served_rate requests/s over ${scan_secs}s of scanning," \
  "$capacity_share % of the store's capacity (200/s), through the chaos above"
stop_server store-model
log "e2e passed in $((SECONDS - started))s"
