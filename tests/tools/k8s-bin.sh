#!/usr/bin/env bash
# Builds the real upstream tools the tests use, from the pinned Go modules under tests/tools/, into a cache folder
# outside the repository keyed by the pins and the go.sum files, only when they are missing. Prints the folder on the
# last line of stdout; progress goes to stderr.
#
#   tests/tools/k8s-bin.sh [--print-dir] [k8s|release|kustomize|capi|capi-v1.10|caip|image|capm3|capv|vcsim|kcm|operator|prometheus]
#     k8s         kube-apiserver and kubectl (k8s.io/kubernetes v1.36.3) and etcd (v3.6.16)   (default)
#     release     helm (v3.22.0) and clusterctl (v1.14.2), for the packaging checks and make release
#     kustomize   kustomize (sigs.k8s.io/kustomize/kustomize/v5 v5.8.1: kustomize/api v0.21.1, as in kubectl v1.36.3),
#                 which renders the release manifests without building Kubernetes
#     capi        the Cluster API core controller-manager v1.14.2 (`manager`), with its CRDs (`crd/`) and webhook
#                 configuration (`webhook.yaml`) from the same module, for every test control plane
#     capi-v1.10  the same for Cluster API v1.10.10 (IPAM v1beta1 storage), for the v1beta1 tests
#     caip        the Go provider (sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.1.0, `caip`, its webhook server
#                 on 127.0.0.1 and its Lease in $POD_NAMESPACE) with its config/ and metadata.yaml from the same
#                 module, for `make bench-vs-caip` and the migration tests; and `caip-oracle`
#                 (tests/tools/caip-oracle, built inside a copy of that module's tree so that it may import its
#                 internal packages), for tests/differential.rs
#     image       oci-image (tests/tools/oci-image, `make image`) and crane, on go-containerregistry v0.22.1
#     capm3       the Metal3 provider's controller-manager (github.com/metal3-io/cluster-api-provider-metal3
#                 v1.13.2, `manager`) with its CRDs (`crd/`, and the BareMetalHost CRD from its examples) and webhook
#                 configuration (`webhook.yaml`), a consumer of our pools (issue 23)
#     capv        the vSphere provider's controller-manager (sigs.k8s.io/cluster-api-provider-vsphere v1.16.1,
#                 `manager`) with its govmomi-mode CRDs and webhook configuration, a consumer of our pools (issue 23;
#                 govmomi's own vcsim and govc commands are not served by the module proxy as modules, so vCenter's
#                 stand-in is to be a program of ours on govmomi v0.53.0's simulator package)
#     vcsim       vCenter's stand-in for the CAPV test (tests/tools/vcsim, `vcsim`): govmomi v0.53.0's simulator with a
#                 template to clone, a ready-file and an endpoint serving a VM's decoded guestinfo.metadata
#     kcm         kube-controller-manager (k8s.io/kubernetes v1.36.3, its own tools module: it needs more of the
#                 module's dependencies than kube-apiserver), whose garbage collector alone runs in the planes of the
#                 consumer tests (`control-plane.sh up --garbage-collector`): CAPV leaves its claims to it
#     operator    the Cluster API Operator (sigs.k8s.io/cluster-api-operator v0.29.0, `operator`, its webhook server on
#                 127.0.0.1) with its CRDs (`crd/`), run as a local process by tests/install.rs, and its kubectl plugin
#                 (`capioperator`, whose `publish` pushes the OCI artifact of a release; issue 34)
#     prometheus  promtool (github.com/prometheus/prometheus v0.316.0, without service discovery), to test the chart's alert rules, and the
#                 Prometheus Operator's ServiceMonitor and PrometheusRule CRDs (`crd/`, from its Go module v0.85.0)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
KUSTOMIZE_VERSION=v5.8.1
CLUSTERCTL_VERSION=v1.14.2
CAPI_VERSION=v1.14.2
CAPI_V110_VERSION=v1.10.10
CAIP_VERSION=v1.1.0
GGCR_VERSION=v0.22.1
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_OPERATOR_VERSION=v0.85.0
CAPM3_VERSION=v1.13.2
CAPV_VERSION=v1.16.1
GOVMOMI_VERSION=v0.53.0
OPERATOR_VERSION=v0.29.0
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

print_dir=0
set_name=k8s
for arg in "$@"; do
  case $arg in
    --print-dir) print_dir=1 ;;
    k8s|release|kustomize|capi|capi-v1.10|caip|image|prometheus|capm3|capv|vcsim|kcm|operator) set_name=$arg ;;
    *) echo "k8s-bin: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
case $set_name in
  k8s) modules=(k8s etcd); label="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"; bins=(kube-apiserver kubectl etcd) ;;
  kustomize) modules=(kustomize); label="kustomize-${KUSTOMIZE_VERSION}"; bins=(kustomize) ;;
  release) modules=(helm clusterctl); label="helm-${HELM_VERSION}-clusterctl-${CLUSTERCTL_VERSION}"; bins=(helm clusterctl) ;;
  capi) modules=(capi); label="capi-${CAPI_VERSION}"; bins=(manager) ;;
  capi-v1.10) modules=(capi-v1.10); label="capi-${CAPI_V110_VERSION}"; bins=(manager) ;;
  caip) modules=(caip caip-oracle); label="caip-${CAIP_VERSION}-loopback"; bins=(caip caip-oracle) ;;
  image) modules=(oci-image); label="ggcr-${GGCR_VERSION}"; bins=(oci-image crane) ;;
  capm3) modules=(capm3); label="capm3-${CAPM3_VERSION}"; bins=(manager) ;;
  capv) modules=(capv); label="capv-${CAPV_VERSION}"; bins=(manager) ;;
  kcm) modules=(kube-controller-manager); label="kcm-${K8S_VERSION}"; bins=(kube-controller-manager) ;;
  operator) modules=(capi-operator); label="capi-operator-${OPERATOR_VERSION}"; bins=(operator capioperator) ;;
  vcsim) modules=(vcsim); label="vcsim-govmomi-${GOVMOMI_VERSION}"; bins=(vcsim) ;;
  prometheus) modules=(promtool); label="prometheus-${PROMETHEUS_VERSION}-nosd-operator-${PROMETHEUS_OPERATOR_VERSION}"; bins=(promtool) ;;
esac
# Keyed by the pins and by our own Go sources (oci-image, vcsim), so a change to either rebuilds.
key=$(for m in "${modules[@]}"; do
  find "$here/$m" -maxdepth 1 \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z | xargs -0 cat
done | sha256sum | cut -c1-12)
dir="${CAPI_IPAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-ipam-in-cluster}/$set_name-bin/${label}-${key}"
if ((print_dir)); then echo "$dir"; exit 0; fi

command -v go >/dev/null || { echo "k8s-bin: Go is required (go1.26+), see README.md" >&2; exit 1; }

# go build -v prints one line per compiled package; show every 100th so a cold build visibly progresses.
progress() { awk -v what="$1" '{ n++; if (n % 100 == 0) { printf "k8s-bin: %s: %d packages compiled (%s)\n", what, n, $0; fflush() } }
                               END { printf "k8s-bin: %s: done (%d packages compiled)\n", what, n }' >&2; }

build() { # <what> <module dir> <output> <binaries...> -- <go build args...>
  local what=$1 mod=$2 out=$3; shift 3
  local missing=0 built=()
  while [[ $1 != -- ]]; do built+=("$1"); [[ -x "$dir/$1" ]] || missing=1; shift; done; shift
  if ((missing == 0)); then echo "k8s-bin: $what: cached in $dir" >&2; return; fi
  echo "k8s-bin: building $what (a cold build takes several minutes; later runs reuse the Go build cache)" >&2
  mkdir -p "$dir.tmp"
  local log="$dir.tmp/build-$mod.log" rc
  set +e
  (cd "$here/$mod" && go build -v -trimpath -o "$out" "$@") 2>&1 | tee "$log" | progress "$what"
  rc=${PIPESTATUS[0]}
  set -e
  if ((rc != 0)); then echo "k8s-bin: building $what failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; fi
  rm -f "$log"
  for b in "${built[@]}"; do [[ -x "$dir.tmp/$b" ]] || { echo "k8s-bin: $b was not built" >&2; exit 1; }; done
}

# The same version variables as upstream's kube::version::ldflags, so /version reports the pin (clusterctl checks it).
k8s_ldflags() {
  local minor=${K8S_VERSION#v1.} p flags="-s -w"
  minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    flags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

if [[ $set_name == k8s ]]; then
  ldflags=$(k8s_ldflags)
  build "kube-apiserver + kubectl ($K8S_VERSION)" k8s "$dir.tmp/" kube-apiserver kubectl -- \
    -tags selinux,notest -ldflags "$ldflags" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
  build "etcd ($ETCD_VERSION)" etcd "$dir.tmp/etcd" etcd -- -ldflags "-s -w" go.etcd.io/etcd/server/v3
elif [[ $set_name == kcm ]]; then
  ldflags=$(k8s_ldflags)
  build "kube-controller-manager ($K8S_VERSION)" kube-controller-manager "$dir.tmp/kube-controller-manager" \
    kube-controller-manager -- -tags selinux,notest -ldflags "$ldflags" k8s.io/kubernetes/cmd/kube-controller-manager
elif [[ $set_name == capi* ]]; then
  # The core manager's main package and its config/ folder: under core/ since v1.11, at the module root before.
  if [[ $set_name == capi ]]; then version=$CAPI_VERSION main=sigs.k8s.io/cluster-api/core sub=core
  else version=$CAPI_V110_VERSION main=sigs.k8s.io/cluster-api sub=.; fi
  cv=sigs.k8s.io/cluster-api/version
  minor=${version#v1.}; minor=${minor%%.*}
  build "Cluster API core manager ($version)" "$set_name" "$dir.tmp/manager" manager -- \
    -ldflags "-s -w -X $cv.gitVersion=$version -X $cv.gitMajor=1 -X $cv.gitMinor=$minor" "$main"
  if [[ ! -f $dir/webhook.yaml ]]; then
    src=$(cd "$here/$set_name" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)/$sub/config
    mkdir -p "$dir.tmp/crd"
    cp "$src"/crd/bases/*.yaml "$dir.tmp/crd/"
    cp "$src/webhook/manifests.yaml" "$dir.tmp/webhook.yaml"
    chmod -R u+w "$dir.tmp"
  fi
elif [[ $set_name == kustomize ]]; then
  build "kustomize ($KUSTOMIZE_VERSION)" kustomize "$dir.tmp/kustomize" kustomize -- \
    -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$KUSTOMIZE_VERSION" \
    sigs.k8s.io/kustomize/kustomize/v5
elif [[ $set_name == operator ]]; then
  # Downloaded first: `go list -m` prints an empty Dir for a module not in the module cache yet (a fresh machine).
  src=$(cd "$here/capi-operator" && go mod download sigs.k8s.io/cluster-api-operator &&
    go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-operator)
  [[ -n $src && -d $src ]] || { echo "k8s-bin: downloading the Cluster API Operator module failed" >&2; exit 1; }
  if [[ ! -x $dir/operator || ! -x $dir/capioperator ]]; then
    # Its webhook server has no host flag and would listen on every interface; tests listen on 127.0.0.1 only. So
    # it is built from a copy of its module whose main sets the host (one line; the build fails if it moved).
    echo "k8s-bin: building the Cluster API Operator ($OPERATOR_VERSION), its webhook server on 127.0.0.1" >&2
    tree="$dir.tmp/operator-module"
    rm -rf "$tree"; mkdir -p "$dir.tmp"
    cp -r "$src" "$tree"; chmod -R u+w "$tree"
    grep -qE '^[[:space:]]+Port:[[:space:]]+webhookPort,$' "$tree/cmd/main.go" ||
      { echo "k8s-bin: the operator's webhook options moved; update the patch" >&2; exit 1; }
    sed -i 's/^\([[:space:]]*\)Port:\([[:space:]]*\)webhookPort,$/&\n\1Host:\2"127.0.0.1",/' "$tree/cmd/main.go"
    log="$dir.tmp/build-operator.log"
    set +e
    # Its kubectl plugin too: `capioperator publish` pushes a release as the OCI artifact an IPAMProvider's
    # fetchConfig.oci reads (make release, tests/install.rs).
    (cd "$tree" && go build -v -trimpath -ldflags "-s -w" -o "$dir.tmp/operator" ./cmd &&
      go build -v -trimpath -ldflags "-s -w" -o "$dir.tmp/capioperator" ./cmd/plugin) 2>&1 | tee "$log" |
      progress "the operator"
    set -e
    rm -rf "$tree"
    [[ -x "$dir.tmp/operator" && -x "$dir.tmp/capioperator" ]] || { echo "k8s-bin: building the operator failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
    rm -f "$log"
  else
    echo "k8s-bin: the Cluster API Operator: cached in $dir" >&2
  fi
  if [[ ! -d $dir/crd ]]; then
    mkdir -p "$dir.tmp/crd"
    cp "$src"/config/crd/bases/*.yaml "$dir.tmp/crd/"
    chmod -R u+w "$dir.tmp"
  fi
elif [[ $set_name == caip ]]; then
  # Downloaded first: `go list -m` prints an empty Dir for a module not in the module cache yet (a fresh machine).
  src=$(cd "$here/caip" && go mod download sigs.k8s.io/cluster-api-ipam-provider-in-cluster &&
    go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-ipam-provider-in-cluster)
  [[ -n $src && -d $src ]] || { echo "k8s-bin: downloading the Go provider's module failed" >&2; exit 1; }
  if [[ ! -f $dir/metadata.yaml ]]; then
    mkdir -p "$dir.tmp"
    cp -r "$src/config" "$src/metadata.yaml" "$dir.tmp/"
    chmod -R u+w "$dir.tmp"
  fi
  if [[ ! -x $dir/caip || ! -x $dir/caip-oracle ]]; then
    # Both are built inside a copy of the module's tree, with its own go.mod and go.sum: Go lets only packages under
    # the module's root import its internal/ packages, as caip-oracle's main package does. The Go provider's main gets
    # two lines, each checked (the build fails if the line it follows moved): its webhook server has no host flag and
    # would listen on every interface, and tests listen on 127.0.0.1 only; and out of a cluster it cannot find its
    # pod's namespace for its Lease, so it reads POD_NAMESPACE, as a pod's downward API would give it (unset, the
    # manager behaves as upstream's). The migration tests run its own webhooks and leader election this way.
    echo "k8s-bin: building the Go provider ($CAIP_VERSION, its webhook server on 127.0.0.1) and caip-oracle" >&2
    tree="$dir.tmp/caip-module"
    rm -rf "$tree"; mkdir -p "$dir.tmp"
    cp -r "$src" "$tree"; chmod -R u+w "$tree"
    grep -qE '^[[:space:]]+Port:[[:space:]]+webhookPort,$' "$tree/main.go" &&
      grep -qE '^[[:space:]]+LeaderElectionID:[[:space:]]+"7bb7acb4.ipam.cluster.x-k8s.io",$' "$tree/main.go" ||
      { echo "k8s-bin: the Go provider's manager options moved; update the patch" >&2; exit 1; }
    sed -i -e 's/^\([[:space:]]*\)Port:\([[:space:]]*\)webhookPort,$/&\n\1Host:\2"127.0.0.1",/' \
      -e 's/^\([[:space:]]*\)LeaderElectionID:.*$/&\n\1LeaderElectionNamespace: os.Getenv("POD_NAMESPACE"),/' \
      "$tree/main.go"
    mkdir "$tree/caiporacle"; cp "$here"/caip-oracle/*.go "$tree/caiporacle/"
    log="$dir.tmp/build-caip.log"
    set +e
    (cd "$tree" && go build -v -trimpath -ldflags "-s -w" -o "$dir.tmp/caip" . &&
      go build -v -trimpath -ldflags "-s -w" -o "$dir.tmp/caip-oracle" ./caiporacle) 2>&1 | tee "$log" |
      progress "the Go provider"
    set -e
    rm -rf "$tree"
    [[ -x "$dir.tmp/caip" && -x "$dir.tmp/caip-oracle" ]] ||
      { echo "k8s-bin: building the Go provider failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
    rm -f "$log"
  else
    echo "k8s-bin: the Go provider ($CAIP_VERSION) and caip-oracle: cached in $dir" >&2
  fi
elif [[ $set_name == capm3 ]]; then
  build "the Metal3 provider ($CAPM3_VERSION)" capm3 "$dir.tmp/manager" manager -- -ldflags "-s -w" \
    github.com/metal3-io/cluster-api-provider-metal3
  if [[ ! -f $dir/webhook.yaml ]]; then
    src=$(cd "$here/capm3" && go list -m -f '{{.Dir}}' github.com/metal3-io/cluster-api-provider-metal3)
    mkdir -p "$dir.tmp/crd"
    cp "$src"/config/crd/bases/*.yaml "$dir.tmp/crd/"
    cp "$src"/examples/metal3crds/metal3.io_baremetalhosts.yaml "$dir.tmp/crd/"
    cp "$src/config/webhook/manifests.yaml" "$dir.tmp/webhook.yaml"
    chmod -R u+w "$dir.tmp"
  fi
elif [[ $set_name == capv ]]; then
  build "the vSphere provider ($CAPV_VERSION)" capv "$dir.tmp/manager" manager -- -ldflags "-s -w" \
    sigs.k8s.io/cluster-api-provider-vsphere
  if [[ ! -f $dir/webhook.yaml ]]; then
    src=$(cd "$here/capv" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-provider-vsphere)
    mkdir -p "$dir.tmp/crd"
    # The govmomi (vCenter) mode's CRDs and webhooks, not the supervisor's.
    cp "$src"/config/default/crd/bases/*.yaml "$dir.tmp/crd/"
    cp "$src/config/govmomi/webhook/manifests.yaml" "$dir.tmp/webhook.yaml"
    chmod -R u+w "$dir.tmp"
  fi
elif [[ $set_name == vcsim ]]; then
  build "vCenter's stand-in (govmomi $GOVMOMI_VERSION simulator)" vcsim "$dir.tmp/vcsim" vcsim -- -ldflags "-s -w" .
elif [[ $set_name == image ]]; then
  build "oci-image and crane (go-containerregistry $GGCR_VERSION)" oci-image "$dir.tmp/" oci-image crane -- \
    -ldflags "-s -w" . github.com/google/go-containerregistry/cmd/crane
elif [[ $set_name == prometheus ]]; then
  pv=github.com/prometheus/common/version
  # Without the service discovery plugins (Prometheus's own build tag): the cloud SDKs they pull in were most of a
  # cold build, and `promtool check rules` / `test rules` need none of them.
  build "promtool (prometheus $PROMETHEUS_VERSION)" promtool "$dir.tmp/promtool" promtool -- \
    -tags remove_all_sd -ldflags "-s -w -X $pv.Version=${PROMETHEUS_VERSION#v0.}" \
    github.com/prometheus/prometheus/cmd/promtool
  if [[ ! -f $dir/crd/monitoring.coreos.com_prometheusrules.yaml ]]; then
    operator=$(cd "$here/promtool" && GOFLAGS=-mod=mod go mod download -json \
      "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [[ -n $operator ]] || { echo "k8s-bin: downloading the Prometheus Operator module failed" >&2; exit 1; }
    mkdir -p "$dir.tmp/crd"
    cp "$operator"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml "$dir.tmp/crd/"
    chmod -R u+w "$dir.tmp"
  fi
else
  # helm v3 assumes Kubernetes v1.20 unless told otherwise; its Makefile sets these.
  k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
  helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    helm_ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
  done
  build "helm ($HELM_VERSION)" helm "$dir.tmp/helm" helm -- -ldflags "$helm_ldflags" helm.sh/helm/v3/cmd/helm
  cv=sigs.k8s.io/cluster-api/version
  minor=${CLUSTERCTL_VERSION#v1.}; minor=${minor%%.*}
  build "clusterctl ($CLUSTERCTL_VERSION)" clusterctl "$dir.tmp/clusterctl" clusterctl -- \
    -ldflags "-s -w -X $cv.gitVersion=$CLUSTERCTL_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor" \
    sigs.k8s.io/cluster-api/cmd/clusterctl
fi
if [[ -d "$dir.tmp" ]]; then
  mkdir -p "$dir"
  for f in "$dir.tmp"/*; do [[ -e $f ]] && { rm -rf "${dir:?}/${f##*/}"; mv -f "$f" "$dir/"; }; done
  rmdir "$dir.tmp"
fi
for b in "${bins[@]}"; do [[ -x "$dir/$b" ]] || { echo "k8s-bin: $dir/$b is missing" >&2; exit 1; }; done
echo "$dir"
