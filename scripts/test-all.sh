#!/usr/bin/env bash
# `just test`: every check and test, then the real-cluster e2e, in phases
# that are each timed (scripts/phase.sh) and printed as a table at the end
# (docs/testing.md, "A cold run").
#
# The Go builds (the S3 servers, then the Kubernetes pieces: the longest part
# of a cold run) go on in the background, at low priority, while the Rust
# workspace is linted and built, which needs none of them; each fills the
# other's single-threaded stretches (linking, module downloads). The tests
# that need no Kubernetes run as soon as the S3 servers are built, while
# Kubernetes still builds; the operator's and the plugin's tests, then the
# e2e, once it is built.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
TARGET=${CARGO_TARGET_DIR:-$CACHE/target}
mkdir -p "$CACHE/phases"
export BUCKETSCAN_PHASES=${BUCKETSCAN_PHASES:-$CACHE/phases/test-$(date +%Y%m%d-%H%M%S).tsv}
began=$(date +%s)
phase() { scripts/phase.sh "$@"; }

phase deps scripts/install-deps.sh

# The background builds leave NAME.rc (their exit code) in $tools_dir.
tools_dir=$(mktemp -d "${TMPDIR:-/tmp}/bucketscan-tools.XXXXXX")
# A session of its own, so that a failed foreground phase stops the whole
# background build (its process group), not only the shell that started it.
setsid bash -c '
  scripts/phase.sh servers scripts/install-servers.sh; echo $? >"$0/servers.rc"
  scripts/phase.sh kube scripts/install-kube.sh; echo $? >"$0/kube.rc"
' "$tools_dir" >"$tools_dir/log" 2>&1 &
tools=$!
trap 'kill -- -$tools 2>/dev/null || true; rm -rf "$tools_dir"' EXIT

# await NAME: wait until the background build NAME ended; fail, with its
# log, unless it succeeded.
await() {
  while [ ! -f "$tools_dir/$1.rc" ] && kill -0 "$tools" 2>/dev/null; do sleep 2; done
  if [ "$(cat "$tools_dir/$1.rc" 2>/dev/null)" != 0 ]; then
    cat "$tools_dir/log" >&2
    echo "test: the background build of $1 failed (its log is above)" >&2
    exit 1
  fi
}

phase lint just lint
phase build-tests cargo nextest run --workspace --no-run --cargo-quiet
phase crds-check env CRDGEN="$TARGET/debug/crdgen" just crds-check

no_kube='not (package(bucketscan-operator) | package(bucketscan-kubectl))'
# Both halves of the tests run even when the first has failures.
failed=()
await servers
phase tests scripts/with-test-servers.sh \
  cargo nextest run --workspace --no-fail-fast --cargo-quiet -E "$no_kube" || failed+=(tests)
await kube
cat "$tools_dir/log"
phase tests-kube env BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh \
  cargo nextest run --workspace --no-fail-fast --cargo-quiet -E "not ($no_kube)" || failed+=(tests-kube)
if [ ${#failed[@]} -gt 0 ]; then
  python3 scripts/phase-table.py "$BUCKETSCAN_PHASES"
  echo "test: failures in ${failed[*]} (above)" >&2
  exit 1
fi
phase e2e env E2E_DOWN=1 e2e/run.sh test
python3 scripts/phase-table.py "$BUCKETSCAN_PHASES" --total "$(( $(date +%s) - began ))"
