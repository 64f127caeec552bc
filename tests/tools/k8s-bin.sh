#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the pinned Go modules in tests/tools/{k8s,etcd} into a cache
# folder outside the repository, keyed by the pins and the go.sum files, only when they are missing.
# Prints the folder on the last line of stdout. Progress goes to stderr.
#   usage: tests/tools/k8s-bin.sh [--print-dir]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

key=$(cat "$here/k8s/go.mod" "$here/k8s/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" | sha256sum | cut -c1-12)
dir="${CAPI_IPAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-ipam-in-cluster}/k8s-bin/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-${key}"
if [[ ${1:-} == --print-dir ]]; then echo "$dir"; exit 0; fi

command -v go >/dev/null || { echo "k8s-bin: Go is required (go1.26+), see README.md" >&2; exit 1; }

# go build -v prints one line per compiled package; show every 100th so a cold build visibly progresses.
progress() { awk -v what="$1" '{ n++; if (n % 100 == 0) { printf "k8s-bin: %s: %d packages compiled (%s)\n", what, n, $0; fflush() } }
                               END { printf "k8s-bin: %s: done (%d packages compiled)\n", what, n }' >&2; }

build() { # <what> <module dir> <output> <binaries...> -- <go build args...>
  local what=$1 mod=$2 out=$3; shift 3
  local missing=0 bins=()
  while [[ $1 != -- ]]; do bins+=("$1"); [[ -x "$dir/$1" ]] || missing=1; shift; done; shift
  if (( missing == 0 )); then echo "k8s-bin: $what: cached in $dir" >&2; return; fi
  echo "k8s-bin: building $what (a cold build takes several minutes; later runs reuse the Go build cache)" >&2
  mkdir -p "$dir.tmp"
  local log="$dir.tmp/build-$mod.log" rc
  set +e
  ( cd "$here/$mod" && go build -v -trimpath -o "$out" "$@" ) 2>&1 | tee "$log" | progress "$what"
  rc=${PIPESTATUS[0]}
  set -e
  if (( rc != 0 )); then echo "k8s-bin: building $what failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; fi
  rm -f "$log"
  for b in "${bins[@]}"; do [[ -x "$dir.tmp/$b" ]] || { echo "k8s-bin: $b was not built" >&2; exit 1; }; done
}

# The same version variables as upstream's kube::version::ldflags, so /version reports the pin (clusterctl checks it).
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

build "kube-apiserver + kubectl ($K8S_VERSION)" k8s "$dir.tmp/" kube-apiserver kubectl -- \
  -tags selinux,notest -ldflags "$ldflags" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
build "etcd ($ETCD_VERSION)" etcd "$dir.tmp/etcd" etcd -- -ldflags "-s -w" go.etcd.io/etcd/server/v3
if [[ -d "$dir.tmp" ]]; then
  mkdir -p "$dir"
  for f in "$dir.tmp"/*; do mv -f "$f" "$dir/"; done
  rmdir "$dir.tmp"
fi
for b in kube-apiserver kubectl etcd; do [[ -x "$dir/$b" ]] || { echo "k8s-bin: $dir/$b is missing" >&2; exit 1; }; done
echo "$dir"
