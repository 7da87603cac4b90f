# Sourced by scripts/test-all.sh and scripts/demo.sh: the Go builds of the S3
# servers, then of the Kubernetes pieces (the longest part of a cold run),
# and for `just test` then cargo-deny's (`cargo install`, only when it is
# missing; the demo needs no lint), in the background at low priority, while the caller builds the Rust workspace,
# which needs none of them; each fills the other's single-threaded stretches
# (linking, module downloads). Each is a phase (scripts/phase.sh).
#
#   start_tool_builds [cargo-deny]
#                       start them (cargo-deny too when named); stopped with
#                       the caller (EXIT trap)
#   await_tool NAME     wait for `servers`, `kube` or `cargo-deny`; exit 1, with the
#                       builds' log, unless it succeeded
#   tool_builds_log     print the builds' log

# The builds leave NAME.rc (their exit code) and their log in $tools_dir.
start_tool_builds() {
  tools_dir=$(mktemp -d "${TMPDIR:-/tmp}/bucketscan-tools.XXXXXX")
  # A session of its own, so that a failed foreground step stops the whole
  # background build (its process group), not only the shell that started it.
  setsid bash -c '
    scripts/phase.sh servers scripts/install-servers.sh; echo $? >"$0/servers.rc"
    scripts/phase.sh kube scripts/install-kube.sh; echo $? >"$0/kube.rc"
    if [ "$1" = cargo-deny ]; then
      scripts/phase.sh cargo-deny scripts/install-cargo-deny.sh; echo $? >"$0/cargo-deny.rc"
    fi
  ' "$tools_dir" "${1:-}" >"$tools_dir/log" 2>&1 &
  tools_pid=$!
  trap 'kill -- -$tools_pid 2>/dev/null || true; rm -rf "$tools_dir"' EXIT
}

await_tool() {
  while [ ! -f "$tools_dir/$1.rc" ] && kill -0 "$tools_pid" 2>/dev/null; do sleep 2; done
  if [ "$(cat "$tools_dir/$1.rc" 2>/dev/null)" != 0 ]; then
    tool_builds_log >&2
    echo "the background build of $1 failed (its log is above)" >&2
    exit 1
  fi
}

tool_builds_log() { cat "$tools_dir/log"; }
