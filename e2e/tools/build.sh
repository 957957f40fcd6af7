#!/usr/bin/env bash
# build.sh builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok and kwok's fast stages) from the Go module proxy into
# $CONVERGE_CACHE/controlplane/<key>/, where <key> hashes this module's go.mod, go.sum, this
# script and the Go version. A second run with the same key does nothing.
#
#   build.sh          build if needed, print the bin directory on the last line
#   build.sh --dir    print the bin directory only (no build)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${CONVERGE_CACHE:-$HOME/.cache/converge}
k8s_version=v1.36.3
key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" <(go env GOVERSION GOARCH) | sha256sum | cut -c1-16)
dir=$cache/controlplane/$k8s_version-$key
bin=$dir/bin

if [ "${1:-}" = "--dir" ]; then echo "$bin"; exit 0; fi
if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi

# One build at a time per cache: concurrent callers wait for it, then find it complete.
mkdir -p "$cache/controlplane"
exec 9>"$cache/controlplane/.lock"
flock 9
if [ -f "$dir/.complete" ]; then echo "$bin"; exit 0; fi

echo "building the local control plane ($k8s_version) into $dir; this takes ~10 minutes the first time" >&2
start=$(date +%s)
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
cd "$here"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=36 \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-07-23T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
go build -trimpath -ldflags "$ldflags" -o "$dir.tmp/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  sigs.k8s.io/kwok/cmd/kwok
go build -trimpath -ldflags "-s -w" -o "$dir.tmp/bin/etcd" go.etcd.io/etcd/server/v3

# kwok's "fast" stages (as its kustomize/stage/fast bundle): nodes Ready with lease heartbeats,
kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
{
  for f in "$kwok_dir"/kustomize/stage/{node/fast,node/heartbeat-with-lease,pod/fast}/*.yaml; do
    case "$f" in */kustomization.yaml) continue ;; esac
    echo "---"; cat "$f"
  done
} > "$dir.tmp/kwok-stages.yaml"

rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
echo "control plane built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
