#!/usr/bin/env bash
# `just demo`: a real scan end to end (e2e/run.sh demo). On a cold machine the
# Go builds of the S3 servers and Kubernetes go on in the background while the
# binaries the demo puts in its images are built (scripts/tool-builds.sh).
# Each phase is timed, as in `just test`.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
mkdir -p "$CACHE/phases"
export BUCKETSCAN_PHASES=${BUCKETSCAN_PHASES:-$CACHE/phases/demo-$(date +%Y%m%d-%H%M%S).tsv}
began=${BUCKETSCAN_RUN_BEGAN:-$(date +%s)}

scripts/phase.sh deps scripts/install-deps.sh
. scripts/tool-builds.sh
start_tool_builds
scripts/phase.sh build just build-e2e
await_tool servers
await_tool kube
scripts/phase.sh demo e2e/run.sh demo
python3 scripts/phase-table.py "$BUCKETSCAN_PHASES" --total "$(( $(date +%s) - began ))"
