#!/usr/bin/env bash
# Build the Kubernetes pieces the tests use from the Go module proxy (no git
# clone, no prebuilt downloads), into $BUCKETSCAN_CACHE/bin:
#   etcd, kube-apiserver, kubectl   (a real control plane for the operator tests)
#   kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#                                   (the node of the e2e cluster, e2e/cluster)
#   coredns                         (cluster DNS of the e2e cluster)
#   helm                            (chart lint and template)
#   kubeconform                     (schema check of rendered manifests)
#   validate-krew-manifest          (krew's check of the release's plugin manifest)
#   helm-docs                       (the chart's README from values.yaml: `just chart-docs`)
#   gitops-health                   (kstatus, Argo CD's Lua and Flux's CEL
#                                   health of real BucketScans: scripts/gitops-health)
# Idempotent: a binary of the pinned version is kept. A cold build takes about
# 25 CPU-minutes for the Kubernetes binaries, 4 for helm and 3 for CoreDNS; the
# Go caches (~/go, ~/.cache/go-build) make a rebuild cheap.
#
# How: Kubernetes' own module cannot be `go install`ed (its go.mod points its
# k8s.io/* staging modules at ./staging). A small wrapper module requires
# k8s.io/kubernetes at the pinned version and replaces each staging module
# with its published v0.MINOR.PATCH, then builds the commands from there.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
BIN=$CACHE/bin
K8S_VERSION=v1.34.4
HELM_VERSION=v4.3.1
HELM_DOCS_VERSION=v1.14.2
KUBECONFORM_VERSION=v0.7.0
KREW_VERSION=v0.4.3
COREDNS_VERSION=v1.12.4
mkdir -p "$BIN"

say() { printf '%-10s %-28s %s\n' "$1" "$2" "$3"; }
stamp_of() { cat "$BIN/.$1.version" 2>/dev/null || true; }
stamp() { echo "$2" > "$BIN/.$1.version"; }

command -v go >/dev/null || { echo "install-kube: go is missing (Debian: golang-go)" >&2; exit 1; }

# --- etcd and the Kubernetes commands -------------------------------------------
KUBE_BINS=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)
missing=()
for b in "${KUBE_BINS[@]}"; do
  if [ ! -x "$BIN/$b" ] || [ "$(stamp_of "$b")" != "$K8S_VERSION" ]; then missing+=("$b"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  WRAP=$CACHE/src/k8s-wrapper-$K8S_VERSION
  mkdir -p "$WRAP"
  # The wrapper's imports name every command; a changed list needs a new tidy.
  if [ ! -f "$WRAP/go.sum" ] || [ "$(cat "$WRAP/.commands" 2>/dev/null)" != "${KUBE_BINS[*]}" ]; then
    staging_version=v0.${K8S_VERSION#v1.}
    go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
    kube_mod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
    {
      printf 'module bucketscan.dev/k8s-wrapper\n\ngo 1.24.0\n\ngodebug default=go1.24\n\n'
      printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
      grep -oE '^\s+k8s\.io/[a-z0-9-]+ => \./staging' "$kube_mod" |
        awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
      printf ')\n'
    } > "$WRAP/go.mod"
    cat > "$WRAP/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
    (cd "$WRAP" && rm -f go.sum && go mod tidy)
    echo "${KUBE_BINS[*]}" > "$WRAP/.commands"
  fi
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  pkgs=()
  for b in "${missing[@]}"; do
    case $b in
      etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    esac
  done
  out=$(mktemp -d)
  (cd "$WRAP" && CGO_ENABLED=0 nice go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}")
  [ -x "$out/server" ] && mv "$out/server" "$out/etcd" # go names it after the path: .../server/v3
  for b in "${missing[@]}"; do
    mv "$out/$b" "$BIN/$b"
    stamp "$b" "$K8S_VERSION"
  done
  rm -rf "$out"
  state="built (${missing[*]})"
else
  state=present
fi
say kube "$K8S_VERSION" "$state"

# --- helm and kubeconform --------------------------------------------------------
go_tool() { # name version module-path
  if [ -x "$BIN/$1" ] && [ "$(stamp_of "$1")" = "$2" ]; then
    say "$1" "$2" present
    return
  fi
  GOBIN=$BIN CGO_ENABLED=0 nice go install -ldflags "-s -w" "$3@$2"
  stamp "$1" "$2"
  say "$1" "$2" "built (go install)"
}
go_tool helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm
go_tool kubeconform "$KUBECONFORM_VERSION" github.com/yannh/kubeconform/cmd/kubeconform
# krew's own manifest check, for the plugin manifest `just release` writes.
go_tool validate-krew-manifest "$KREW_VERSION" sigs.k8s.io/krew/cmd/validate-krew-manifest
# The chart's README, generated from values.yaml's `# --` comments
# (`just chart-docs`; `just lint` checks it is current). About 0.8
# CPU-minutes cold.
go_tool helm-docs "$HELM_DOCS_VERSION" github.com/norwoodj/helm-docs/cmd/helm-docs
# CoreDNS's main package is its module root; static, so the image is the binary.
go_tool coredns "$COREDNS_VERSION" github.com/coredns/coredns
# The GitOps health reader of operator/tests/gitops_health.rs, from this
# repository's module (kstatus, gopher-lua, cel-go from the module proxy):
# rebuilt when its source changes. About 1 CPU-minute cold.
gitops_src=$(cd "$(dirname "$0")/gitops-health" && pwd)
gitops_stamp=$(cat "$gitops_src/go.mod" "$gitops_src/go.sum" "$gitops_src/main.go" | sha256sum | cut -c1-16)
if [ -x "$BIN/gitops-health" ] && [ "$(stamp_of gitops-health)" = "$gitops_stamp" ]; then
  say gitops-health "$gitops_stamp" present
else
  (cd "$gitops_src" && GOFLAGS='' CGO_ENABLED=0 nice go build -ldflags "-s -w" -o "$BIN/gitops-health" .)
  stamp gitops-health "$gitops_stamp"
  say gitops-health "$gitops_stamp" "built (go build)"
fi
