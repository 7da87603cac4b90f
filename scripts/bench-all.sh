#!/usr/bin/env bash
# `just bench`: every figure of BENCHMARKS.md in one run, in phases that are
# each timed (scripts/phase.sh) and printed as a table at the end, as `just
# test` does (docs/benchmarks.md, "Running": a whole run must fit a 3-hour
# session on a fresh 2-core machine, builds included).
#
# The Go builds (the S3 servers, Kubernetes for the e2e cluster, the bench's
# Go peer and rclone) go on in the background while the release build runs;
# all of them have ended before the first figure is measured, so nothing is
# built beside a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
TARGET=${CARGO_TARGET_DIR:-$CACHE/target}
mkdir -p "$CACHE/phases" "$CACHE/bench"
export BUCKETSCAN_PHASES=${BUCKETSCAN_PHASES:-$CACHE/phases/bench-$(date +%Y%m%d-%H%M%S).tsv}
began=$(date +%s)
phase() { scripts/phase.sh "$@"; }

phase deps scripts/install-deps.sh

. scripts/tool-builds.sh
start_tool_builds
# The peers (boto3 and matplotlib in the venv, the Go peer, rclone) beside
# the Kubernetes build: both are mostly downloads and Go compiles.
peers_rc=$(mktemp)
(phase peers bench/install-peers.sh >"$CACHE/bench/install-peers.log" 2>&1; echo $? >"$peers_rc") &
peers_pid=$!

# One release build of every binary the run uses (the e2e images, the
# harness's clients and fleets, the operator of the 10^9 figure): the same
# package set and features as `just build`, so nothing builds twice.
phase build nice cargo build --release --locked -p bucketscan-operator -p bucketscan-worker \
  -p bucketscan-kubectl -p bucketscan-bench

await_tool servers
await_tool kube
wait "$peers_pid" || true
if [ "$(cat "$peers_rc")" != 0 ]; then
  cat "$CACHE/bench/install-peers.log" >&2
  echo "bench/install-peers.sh failed (its log is above)" >&2
  exit 1
fi
rm -f "$peers_rc"

# The end-to-end figure (a 10^6-object scan in the e2e cluster, then the
# incremental one), then the operator's memory at 10^9 keys: both files are
# read by the harness's report below.
phase e2e-bench env E2E_DOWN=1 BUCKETSCAN_BUILD=release e2e/run.sh bench
phase bench-operator env BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh "$CACHE/venv/bin/python" \
  bench/run.py --only operator --bin-dir "$TARGET/release"
phase measure "$CACHE/venv/bin/python" bench/run.py --mode full --bin-dir "$TARGET/release" \
  --json "$CACHE/bench/results-full.json" --markdown BENCHMARKS.md --chart docs/benchmarks.png \
  --scale-chart docs/scale.png --saturation-chart docs/saturation.png
echo "wrote BENCHMARKS.md, docs/benchmarks.png, docs/scale.png and docs/saturation.png"
python3 scripts/phase-table.py "$BUCKETSCAN_PHASES" --total "$(( $(date +%s) - began ))"
