#!/usr/bin/env bash
# Usage: scripts/phase.sh NAME CMD [ARGS...]
#
# Run CMD as one phase of a run: its wall time and the CPU time of CMD and
# everything it started (user + system) are appended to $BUCKETSCAN_PHASES
# (a TSV: name, wall s, cpu s, exit code) when that is set. Exits with CMD's
# exit code. `scripts/phase-table.py` prints the table docs/testing.md keeps.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NAME CMD [ARGS...]" >&2; exit 2; }
name=$1
shift
start=$(date +%s.%N)
# CPU of this shell's children, before and after (bash's `times`, seconds).
# `times` goes to a file: in a pipe or $(...) it would run in a subshell,
# which has no children of its own.
times_file=$(mktemp)
seconds() { tail -1 "$times_file" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1]*60+u[2] + s[1]*60+s[2] }'; }
times >"$times_file"
before=$(seconds)
"$@"
status=$?
times >"$times_file"
after=$(seconds)
rm -f "$times_file"
end=$(date +%s.%N)
if [ -n "${BUCKETSCAN_PHASES:-}" ]; then
  awk -v n="$name" -v w="$(awk "BEGIN { print $end - $start }")" -v c="$(awk "BEGIN { print $after - $before }")" \
    -v s="$status" 'BEGIN { printf "%s\t%.0f\t%.0f\t%d\n", n, w, c, s }' >>"$BUCKETSCAN_PHASES"
fi
exit "$status"
