#!/usr/bin/env bash
# `just release VERSION`: every artifact of a release, into dist/ (or
# $BUCKETSCAN_DIST), built here without Docker or a registry. The CI workflow
# (.github/workflows/release.yml) runs exactly this on a version tag, then
# only uploads what it wrote (docs/releasing.md).
#
#   bucketscan-image_VERSION_linux_amd64.tar   the operator/worker image, an OCI
#                                               image archive (also `docker load`able)
#   bucketscan-VERSION.tgz                     the Helm chart (`helm package`)
#   kubectl-bucketscan_VERSION_linux_amd64.tar.gz   the kubectl plugin
#   bucketscan.yaml                            its krew plugin manifest
#   bucketscan_VERSION.cdx.json                CycloneDX SBOM: the crates in the
#                                               binaries, the Debian packages in the image
#   RELEASE_NOTES.md                           CHANGELOG.md's section of VERSION
#   SHA256SUMS                                 of all of the above
#
# Usage: scripts/release.sh VERSION [--snapshot]
#   VERSION must be the workspace's version (Cargo.toml), which the chart's
#   version and appVersion and the image tag follow. Without --snapshot,
#   CHANGELOG.md must have a `## [VERSION]` section; with it (the tests and
#   the e2e), [Unreleased] stands in.
# Environment: BUCKETSCAN_RELEASE_PROFILE (default release; the tests use e2e,
#   the profile their images are built with), BUCKETSCAN_DIST (default dist).
# arm64: not built. This machine has no aarch64 Rust target or cross linker
# (rustup's targets come from static.rust-lang.org, which is not reachable
# here); the workflow runs the same script on an arm64 runner for that.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
die() { echo "release: $*" >&2; exit 1; }

VERSION=${1:-}
SNAPSHOT=${2:-}
[ -n "$VERSION" ] || die "usage: scripts/release.sh VERSION [--snapshot]"
[ -z "$SNAPSHOT" ] || [ "$SNAPSHOT" = --snapshot ] || die "unknown option $SNAPSHOT"
workspace=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ "$VERSION" = "$workspace" ] ||
  die "version $VERSION is not the workspace's ($workspace in Cargo.toml): set it there first, with CHANGELOG.md's section"
PROFILE=${BUCKETSCAN_RELEASE_PROFILE:-release}
DIST=${BUCKETSCAN_DIST:-$REPO/dist}
CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
ARCH=linux_amd64

# The release notes first: a release without them is refused before any build.
section=$VERSION
if [ "$SNAPSHOT" = --snapshot ]; then section=Unreleased; fi
notes=$(python3 scripts/changelog-section.py CHANGELOG.md "$section") ||
  die "CHANGELOG.md has no '## [$section]' section: write what changed first (Keep a Changelog)"

rm -rf "$DIST"
mkdir -p "$DIST"
printf '%s\n' "$notes" >"$DIST/RELEASE_NOTES.md"

echo "release: building $VERSION (profile $PROFILE)" >&2
# The same packages as `just build-e2e` and `just build` (synthetic-s3 too,
# though it is not released): another package set resolves other features,
# and cargo would compile the shared dependencies a second time (`just
# bench` did, 18 minutes, in the release profile).
cargo build --locked --profile "$PROFILE" -p bucketscan-operator -p bucketscan-worker -p bucketscan-kubectl \
  -p bucketscan-bench --bin synthetic-s3 --bin bucketscan-operator --bin bucketscan-worker --bin kubectl-bucketscan
BUILD=$TARGET/$PROFILE

# The image: the same tarball the e2e cluster imports (e2e/images/build.sh).
CARGO_TARGET_DIR=$TARGET BUCKETSCAN_BUILD=$PROFILE e2e/images/build.sh product >&2
images=${E2E_STATE:-$CACHE/e2e}/images # e2e/cluster/lib.sh IMAGES
ref=$(cat "$images/bucketscan.ref")
[ "$ref" = "ghcr.io/bucketscan/bucketscan:$VERSION" ] || die "the image is $ref, not ghcr.io/bucketscan/bucketscan:$VERSION"
cp "$images/bucketscan.tar" "$DIST/bucketscan-image_${VERSION}_$ARCH.tar"

# The chart, its version and appVersion the release's.
helm package charts/bucketscan --version "$VERSION" --app-version "$VERSION" -d "$DIST" >&2

# The kubectl plugin, and its krew manifest.
plugin=$(mktemp -d)
trap 'rm -rf "$plugin"' EXIT
strip -o "$plugin/kubectl-bucketscan" "$BUILD/kubectl-bucketscan"
cp LICENSE "$plugin/"
tarball=kubectl-bucketscan_${VERSION}_$ARCH.tar.gz
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$plugin" \
  -cf - kubectl-bucketscan LICENSE | gzip -n >"$DIST/$tarball"
sha=$(sha256sum "$DIST/$tarball" | cut -d' ' -f1)
sed -e "s/@VERSION@/$VERSION/g" -e "s/@SHA256@/$sha/g" -e "s/@TARBALL@/$tarball/g" \
  scripts/krew-manifest.yaml >"$DIST/bucketscan.yaml"

# The SBOM: the crates linked into the three binaries and the Debian
# packages whose libraries the image carries.
python3 scripts/sbom.py "$VERSION" "$BUILD/bucketscan-operator" "$BUILD/bucketscan-worker" \
  >"$DIST/bucketscan_$VERSION.cdx.json"

(cd "$DIST" && sha256sum -- * | grep -v ' SHA256SUMS$' >SHA256SUMS)
scripts/check-release.sh "$DIST" "$VERSION"
echo "release: $VERSION in $DIST" >&2
ls -l "$DIST" >&2
