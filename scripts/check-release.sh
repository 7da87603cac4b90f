#!/usr/bin/env bash
# Check the artifacts scripts/release.sh wrote: each is what it says, names
# the release's version, and matches SHA256SUMS. Run by release.sh itself,
# so `just release` fails rather than publish a broken artifact.
# Usage: scripts/check-release.sh DIST VERSION
set -euo pipefail
DIST=$1
VERSION=$2
fail() { echo "check-release: $*" >&2; exit 1; }
cd "$(dirname "$0")/.."
BIN=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}/bin

(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the files"
[ -s "$DIST/RELEASE_NOTES.md" ] || fail "RELEASE_NOTES.md is empty"

# The chart: the release's version, and by default the release's image.
chart=$DIST/bucketscan-$VERSION.tgz
[ -f "$chart" ] || fail "$chart missing"
meta=$(helm show chart "$chart")
grep -qx "version: $VERSION" <<<"$meta" || fail "the chart's version is not $VERSION"
grep -qx "appVersion: $VERSION" <<<"$meta" || fail "the chart's appVersion is not $VERSION"
images=$(helm template bucketscan "$chart" | sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | sort -u)
grep -qx "ghcr.io/bucketscan/bucketscan:$VERSION" <<<"$images" ||
  fail "the packaged chart does not run ghcr.io/bucketscan/bucketscan:$VERSION (it runs: $images)"

# The image: an OCI layout and a docker-save manifest, tagged and labelled.
python3 - "$DIST/bucketscan-image_${VERSION}_linux_amd64.tar" "$VERSION" <<'PY' || fail "the image archive is not right"
import json, sys, tarfile
path, version = sys.argv[1], sys.argv[2]
with tarfile.open(path) as tar:
    read = lambda name: json.load(tar.extractfile(name))
    assert read("oci-layout")["imageLayoutVersion"] == "1.0.0"
    index = read("index.json")
    [entry] = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == f"ghcr.io/bucketscan/bucketscan:{version}", entry
    manifest = read("blobs/sha256/" + entry["digest"].split(":")[1])
    config = read("blobs/sha256/" + manifest["config"]["digest"].split(":")[1])
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == version, config
    assert config["config"]["User"] == "65532:65532", config
    [docker] = read("manifest.json")
    assert docker["RepoTags"] == [f"ghcr.io/bucketscan/bucketscan:{version}"], docker
    names = set(tar.getnames())
    for layer in manifest["layers"]:
        assert "blobs/sha256/" + layer["digest"].split(":")[1] in names, layer
PY

# The plugin: its binary says the version; the krew manifest is valid and
# names the tarball's checksum.
tarball=$DIST/kubectl-bucketscan_${VERSION}_linux_amd64.tar.gz
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -xzf "$tarball" -C "$unpacked"
[ -f "$unpacked/LICENSE" ] || fail "the plugin tarball has no LICENSE"
"$unpacked/kubectl-bucketscan" --version | grep -q " $VERSION$" || fail "kubectl-bucketscan --version is not $VERSION"
"$BIN/validate-krew-manifest" -manifest "$DIST/bucketscan.yaml" -skip-install >/dev/null ||
  fail "krew's validate-krew-manifest refused $DIST/bucketscan.yaml"
grep -q "sha256: $(sha256sum "$tarball" | cut -d' ' -f1)" "$DIST/bucketscan.yaml" ||
  fail "the krew manifest's sha256 is not the tarball's"

# The SBOM: CycloneDX, naming the release and what is linked in.
python3 - "$DIST/bucketscan_$VERSION.cdx.json" "$VERSION" <<'PY' || fail "the SBOM is not right"
import json, sys
bom = json.load(open(sys.argv[1]))
assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
assert bom["metadata"]["component"]["version"] == sys.argv[2]
names = {c["name"] for c in bom["components"]}
for wanted in ("bucketscan-operator", "bucketscan-worker", "bucketscan-kubectl", "tokio", "hyper", "kube", "libc6", "ca-certificates"):
    assert wanted in names, wanted
for c in bom["components"]:
    assert c["purl"] and c["version"], c
PY
echo "check-release: $VERSION artifacts in $DIST are consistent" >&2
