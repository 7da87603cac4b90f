# bucketscan tasks. `just test` runs every check and test; `just demo` a real scan.

set shell := ["bash", "-euo", "pipefail", "-c"]

cache := env_var_or_default("BUCKETSCAN_CACHE", env_var("HOME") + "/.cache/bucketscan")

# Build output lives outside the repository, so fresh clones (CI) reuse it.
export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", cache + "/target")
export PATH := cache + "/bin:" + env_var("PATH")
export AWS_EC2_METADATA_DISABLED := "true"

default: test

# Install the tools, Redis and the S3 servers (idempotent).
deps:
    scripts/install-deps.sh

# Formatting and lints (warnings are errors).
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Every test, against real S3 servers and Redis started for the run.
test: deps lint
    scripts/with-test-servers.sh cargo test --workspace --no-fail-fast

# Only the tests whose name contains FILTER (servers started as for `test`).
test-one FILTER: deps
    scripts/with-test-servers.sh cargo test --workspace -- {{FILTER}}

# Release build of the binaries.
build:
    cargo build --release --workspace

# A real scan end to end: seed a bucket on a local S3 server and scan it.
demo: deps build
    scripts/with-test-servers.sh scripts/demo.sh

# Format the code.
fmt:
    cargo fmt --all
