# bucketscan tasks. `just test` runs every check and test; `just demo` a real
# scan on a real (local, single-node) Kubernetes cluster.

set shell := ["bash", "-euo", "pipefail", "-c"]

cache := env_var_or_default("BUCKETSCAN_CACHE", env_var("HOME") + "/.cache/bucketscan")

# Build output lives outside the repository, so fresh clones (CI) reuse it.
export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", cache + "/target")
export PATH := cache + "/bin:" + env_var("PATH")
export AWS_EC2_METADATA_DISABLED := "true"
# How crds-check runs crdgen: `just test` passes the test build's binary, so
# the check costs no build of its own (a plain `cargo run` builds the
# operator with other features than the tests, which rebuilt many crates).
crdgen := env_var_or_default("CRDGEN", "cargo run -q -p bucketscan-operator --bin crdgen")

default: test

# Install the tools, Redis, the S3 servers and the Kubernetes pieces (idempotent).
deps:
    scripts/install-deps.sh
    scripts/install-servers.sh
    scripts/install-kube.sh
    scripts/install-cargo-deny.sh

# Formatting and lints (warnings are errors), the module layers, the
# chart's README against its values.yaml, and the dependencies' licenses,
# versions and sources (cargo-deny).
lint: lint-code chart-docs-check deny

# lint without the chart's README and cargo-deny (`just test` checks those
# once helm-docs and cargo-deny, built in the background, are there).
lint-code: layers
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Modules import only downwards and never in a circle (see docs/architecture.md).
# Also: the chart's version and appVersion are the workspace's (a release
# packages them together; scripts/release.sh).
layers:
    scripts/check-versions.sh
    python3 scripts/check-layers.py --self-test
    python3 scripts/check-layers.py core/src --layers s3 keyspace scan fleet
    python3 scripts/check-layers.py operator/src --layers metrics,pods,fairness,throttle validate,desired,status,autoscale,limits,schedule controller leader
    python3 scripts/check-layers.py worker/src
    python3 scripts/check-layers.py bench/src
    python3 scripts/check-layers.py kubectl-plugin/src
    python3 scripts/check-layers.py api/src

# Every check and test: lints, then the tests (cargo-nextest) against real S3
# servers, Redis and a kube-apiserver started for the run, then the
# real-cluster end to end (stopped afterwards) on the same build. Each phase
# is timed; the table at the end is docs/testing.md's "A cold run".
test:
    scripts/test-all.sh

# The real-cluster end to end: local cluster up (kept running), images,
# helm install, a 20,000-object scan, then the chaos scan. `just e2e-kind`
# runs it on a kind cluster instead.
e2e: deps build-e2e
    e2e/run.sh test

# The same end to end on a kind cluster (Docker or Podman; see e2e/README.md):
# the official kindest/node image, or KIND_NODE_IMAGE=local for one built
# here without registries (e2e/kind/node-image.sh). The cluster keeps running;
# `just kind-down` deletes it.
e2e-kind: deps build-e2e
    E2E_CLUSTER=kind e2e/run.sh test

# Delete the kind cluster of `just e2e-kind`, its network and its test servers.
kind-down:
    e2e/kind/down.sh

# Stop the local e2e cluster (`just cluster-down --purge` also deletes its state).
cluster-down *ARGS:
    e2e/cluster/down.sh {{ARGS}}

# Only the tests whose name contains FILTER (servers started as for `test`).
test-one FILTER: deps
    BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh cargo nextest run --workspace --no-fail-fast {{FILTER}}

# Seeds from a random start, or BUCKETSCAN_TORTURE_FIRST; one seed:
# BUCKETSCAN_TORTURE_SEED=S just torture. `just test` runs its fixed seeds.
# See worker/tests/torture.rs and docs/testing.md.
# The fault-schedule simulator on N seeds: seeds run, faults by kind, violations.
torture N="20":
    scripts/install-deps.sh
    scripts/install-servers.sh
    BUCKETSCAN_TORTURE_SEEDS={{N}} scripts/with-test-servers.sh cargo nextest run -p bucketscan-worker --test torture --run-ignored only --no-capture

# helm-docs' flags: the chart's own template, values in values.yaml's order.
helm_docs := "helm-docs --chart-search-root charts/bucketscan --template-files README.md.gotmpl --sort-values-order file --log-level warning"

# Write charts/bucketscan/README.md from README.md.gotmpl and values.yaml's
# `# --` comments (helm-docs, built by scripts/install-kube.sh).
chart-docs:
    {{helm_docs}}

# Fail when charts/bucketscan/README.md is not what `just chart-docs` writes.
chart-docs-check:
    command -v helm-docs >/dev/null || { echo "helm-docs is missing: run scripts/install-kube.sh" >&2; exit 1; }
    {{helm_docs}} --dry-run | diff -u charts/bucketscan/README.md - \
      || { echo "charts/bucketscan/README.md is stale: run 'just chart-docs'" >&2; exit 1; }

# cargo-deny's licenses, bans and sources checks (deny.toml), offline: only
# the licenses the tree has, one version of each crate unless deny.toml says
# why, no wildcard requirement, crates.io only (docs/testing.md, "Dependencies").
deny:
    command -v cargo-deny >/dev/null || { echo "cargo-deny is missing: run scripts/install-cargo-deny.sh" >&2; exit 1; }
    # `cargo metadata` (which cargo-deny reads) needs every platform's crates in
    # the lockfile; a build downloads only this host's, so a fresh machine had
    # no windows-sys or android_system_properties and the offline check failed.
    cargo fetch --locked --quiet
    cargo deny --offline check licenses bans sources

# Write crds/ (and the chart's copy, which templates/crds.yaml reads) from the Rust types.
crds:
    for crd in bucketscans bucketscanschedules; do \
      cargo run -q -p bucketscan-operator --bin crdgen -- $crd > crds/.new.yaml \
        && mv crds/.new.yaml crds/$crd.bucketscan.dev.yaml \
        && cp crds/$crd.bucketscan.dev.yaml charts/bucketscan/files/crds/ || exit 1; \
    done

# Fail when crds/ or the chart's copy does not match the Rust types. The chart
# has no crds/ directory: Helm would install that copy too, beside the
# template (crds.install), and never upgrade it.
crds-check:
    [ ! -e charts/bucketscan/crds ] || { echo "charts/bucketscan/crds/ must not exist: the chart's CRD is files/crds/ (templates/crds.yaml)" >&2; exit 1; }
    for f in crds charts/bucketscan/files/crds; do for crd in bucketscans bucketscanschedules; do \
      {{crdgen}} $crd | diff -u $f/$crd.bucketscan.dev.yaml - \
        || { echo "$f/$crd.bucketscan.dev.yaml is stale: run 'just crds'" >&2; exit 1; }; \
    done; done

# Release build of the binaries (the kubectl plugin's too: copy
# $CARGO_TARGET_DIR/release/kubectl-bucketscan onto PATH). The benchmarks use it.
build:
    cargo build --release -p bucketscan-operator -p bucketscan-worker -p bucketscan-kubectl -p bucketscan-bench

# The binaries the e2e and the demo put in images and run (profile e2e:
# optimised, no LTO, no debug info; only these four).
build-e2e:
    cargo build --profile e2e -p bucketscan-operator -p bucketscan-worker -p bucketscan-kubectl -p bucketscan-bench \
      --bin bucketscan-operator --bin bucketscan-worker --bin kubectl-bucketscan --bin synthetic-s3

# Every artifact of release VERSION into dist/: the image as an OCI archive,
# the packaged chart, the kubectl plugin's tarball and krew manifest, a
# CycloneDX SBOM, the CHANGELOG section and SHA256SUMS, each checked
# (docs/releasing.md). VERSION is the workspace's; `--snapshot` takes
# CHANGELOG's [Unreleased] for the notes (the e2e installs such a snapshot).
release VERSION *FLAGS: deps
    scripts/release.sh {{VERSION}} {{FLAGS}}

# A real scan end to end: a local Kubernetes cluster, the chart, a seeded
# bucket, `kubectl apply -f e2e/bucketscan.yaml`, its status and result.
demo:
    scripts/demo.sh

# Format the code.
fmt:
    cargo fmt --all

# Benchmarks against the peers (full: >= 3 runs per figure), every phase timed
# (scripts/bench-all.sh; a whole run, cold builds included, must fit a 3-hour
# session: docs/benchmarks.md): writes BENCHMARKS.md and its charts.
bench:
    scripts/bench-all.sh

# The operator's peak RSS while it plans and tracks a 10^9-key scan (issue 13,
# item 7): needs a kube-apiserver, so it runs under with-test-servers.sh; the
# 10^9 section of `just bench` reads the figure it writes.
bench-operator: deps
    nice cargo build --release --workspace
    BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh {{cache}}/venv/bin/python bench/run.py --only operator \
      --bin-dir "$CARGO_TARGET_DIR/release"

# A smoke run of the benchmarks (1 run, small N; docs/benchmarks.md); writes under
# $BUCKETSCAN_CACHE/bench/quick/, not the committed BENCHMARKS.md.
bench-quick: (_bench "quick" (cache + "/bench/quick/BENCHMARKS.md") (cache + "/bench/quick/benchmarks.png"))
    # The harness's small benchmarks of its fleet sections (out of `just test`,
    # and out of the full run, which measures the same sections at full size).
    cargo nextest run -p bucketscan-bench --run-ignored only

_bench MODE MARKDOWN CHART:
    nice cargo build --release -p bucketscan-bench -p bucketscan-worker
    scripts/install-deps.sh
    scripts/install-servers.sh
    bench/install-peers.sh
    mkdir -p "$(dirname {{MARKDOWN}})" "$(dirname {{CHART}})" {{cache}}/bench
    {{cache}}/venv/bin/python bench/run.py --mode {{MODE}} --bin-dir "$CARGO_TARGET_DIR/release" \
      --json {{cache}}/bench/results-{{MODE}}.json --markdown {{MARKDOWN}} --chart {{CHART}} \
      --scale-chart "$(dirname {{CHART}})/scale.png" --saturation-chart "$(dirname {{CHART}})/saturation.png"
    @echo "wrote {{MARKDOWN}} and {{CHART}}"
