#!/usr/bin/env bash
# `just test`: every check and test, then the real-cluster e2e, in phases
# that are each timed (scripts/phase.sh) and printed as a table at the end
# (docs/testing.md, "A cold run").
#
# The Go builds of the S3 servers and Kubernetes go on in the background
# (scripts/tool-builds.sh) while the Rust workspace is linted and built. The
# tests that need no Kubernetes run as soon as the S3 servers are built, while
# Kubernetes still builds; the operator's and the plugin's tests, then the
# e2e, once it is built.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
TARGET=${CARGO_TARGET_DIR:-$CACHE/target}
mkdir -p "$CACHE/phases"
export BUCKETSCAN_PHASES=${BUCKETSCAN_PHASES:-$CACHE/phases/test-$(date +%Y%m%d-%H%M%S).tsv}
began=${BUCKETSCAN_RUN_BEGAN:-$(date +%s)}
phase() { scripts/phase.sh "$@"; }

phase deps scripts/install-deps.sh

. scripts/tool-builds.sh
start_tool_builds cargo-deny

phase lint just lint-code
phase build-tests cargo nextest run --workspace --no-run --cargo-quiet
phase crds-check env CRDGEN="$TARGET/debug/crdgen" just crds-check
phase build-e2e just build-e2e

no_kube='not (package(bucketscan-operator) | package(bucketscan-kubectl))'
# Both halves of the tests run even when the first has failures.
failed=()
await_tool servers
phase tests scripts/with-test-servers.sh \
  cargo nextest run --workspace --no-fail-fast --cargo-quiet -E "$no_kube" || failed+=(tests)
await_tool kube
tool_builds_log
# The rest of `just lint`: helm-docs is built with Kubernetes.
phase chart-docs-check just chart-docs-check
phase tests-kube env BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh \
  cargo nextest run --workspace --no-fail-fast --cargo-quiet -E "not ($no_kube)" || failed+=(tests-kube)
# cargo-deny, built last in the background (nothing when it is there already).
await_tool cargo-deny
phase deny just deny || failed+=(deny)
if [ ${#failed[@]} -gt 0 ]; then
  python3 scripts/phase-table.py "$BUCKETSCAN_PHASES"
  echo "test: failures in ${failed[*]} (above)" >&2
  exit 1
fi
phase e2e env E2E_DOWN=1 e2e/run.sh test
python3 scripts/phase-table.py "$BUCKETSCAN_PHASES" --total "$(( $(date +%s) - began ))"
