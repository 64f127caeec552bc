#!/usr/bin/env bash
# A real etcd + kube-apiserver + Cluster API core controller-manager on free 127.0.0.1 ports, for `make run`,
# `make test` and the integration tests.
#
#   control-plane.sh up     [--dir DIR] [--no-watch-cache] [--capi v1.14|v1.10|none] [--garbage-collector]
#                                                  start (or keep) a control plane; returns once /readyz is OK,
#                                                  namespace default exists and CAPI's webhooks answer. Harmless when
#                                                  it is already running.
#                                                  --no-watch-cache: lists and watches go to etcd (the memory bench:
#                                                  the API server's cache of 200,000 custom objects needs > 20 GB)
#                                                  --capi: which Cluster API core manager runs beside the API server,
#                                                  with all its CRDs (conversion webhooks) and admission webhooks
#                                                  registered over TLS: v1.14 (v1.14.2, the default), v1.10 (v1.10.10,
#                                                  IPAM v1beta1 storage), crds (v1.14.2's CRDs alone, without
#                                                  conversion webhooks: no manager, no webhook; the side-by-side
#                                                  bench with the Go provider) or none
#                                                  --garbage-collector: kube-controller-manager with its garbage
#                                                  collector alone (dependents of a deleted owner are deleted, as in
#                                                  a real cluster; CAPV leaves its claims to it)
#   control-plane.sh down   [--dir DIR]            stop everything it started and remove its state
#   control-plane.sh status [--dir DIR]            exit 0 when it is running and ready
#   control-plane.sh stop   [--dir DIR] etcd|apiserver|capi|gc   stop one component, keeping the state (restart tests)
#   control-plane.sh start  [--dir DIR] etcd|apiserver|capi|gc   start one component again on the same port and data
#
# DIR defaults to <repo>/.dev. It receives kubeconfig (admin, group system:masters), kubeconfig-restricted (user
# it-restricted in group it:restricted, with no permissions until a test grants some), pki/, etcd/, logs/ and
# control-plane.env. The binaries come from tests/tools/k8s-bin.sh (built once, cached outside the repository).
# CAPI's CRDs carry the labels `clusterctl init` gives them, so `clusterctl move` sees Cluster API's kinds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

cmd=${1:-}; shift || true
dir="$repo/.dev"
component=""
watch_cache=true
capi=v1.14
gc=false
while (($#)); do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --no-watch-cache) watch_cache=false; shift ;;
    --garbage-collector) gc=true; shift ;;
    --capi) capi=$2; shift 2
      [[ $capi =~ ^(v1\.14|v1\.10|crds|none)$ ]] ||
        { echo "control-plane: --capi takes v1.14, v1.10, crds or none" >&2; exit 2; } ;;
    etcd|apiserver|capi|gc) component=$1; shift ;;
    *) echo "control-plane: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
env_file="$dir/control-plane.env"
log() { echo "control-plane: $*" >&2; }

source "$here/lib.sh"
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_env() { # via a temporary file: a crash mid-write must not leave a truncated env file behind
  cat >"$env_file.tmp" <<EOF
BIN_DIR=$BIN_DIR
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
WATCH_CACHE=$WATCH_CACHE
CAPI=$CAPI
CAPI_DIR=$CAPI_DIR
CAPI_WEBHOOK_PORT=$CAPI_WEBHOOK_PORT
CAPI_HEALTH_PORT=$CAPI_HEALTH_PORT
CAPI_METRICS_PORT=$CAPI_METRICS_PORT
GC=$GC
EOF
  mv -f "$env_file.tmp" "$env_file"
}

generate_pki() {
  local pki="$dir/pki"
  [[ -f $pki/apiserver.crt ]] && return
  log "generating certificates in $pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=capi-ipam-test-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=kube-apiserver" \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext \
      -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f apiserver.csr apiserver.ext ca.srl
  )
  local admin restricted
  admin=$(openssl rand -hex 16)
  restricted=$(openssl rand -hex 16)
  printf '%s,it-admin,it-admin,"system:masters"\n%s,it-restricted,it-restricted,"it:restricted"\n' "$admin" "$restricted" \
    >"$dir/tokens.csv"
  chmod 600 "$dir/tokens.csv" "$pki"/*.key
}

write_kubeconfig() { # <file> <user> <token>
  local ca
  ca=$(base64 -w0 <"$dir/pki/ca.crt")
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capi-ipam-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@capi-ipam-test
  context: {cluster: capi-ipam-test, user: $2, namespace: default}
current-context: $2@capi-ipam-test
EOF
  chmod 600 "$1"
}

start_etcd() {
  pid_alive "$dir/etcd.pid" && return
  mkdir -p "$dir/logs"
  "$BIN_DIR/etcd" --name=it --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="it=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync=true --log-level=warn \
    --listen-metrics-urls="" >>"$dir/logs/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  local deadline=$((SECONDS + 60))
  until curl -sf "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; do
    if ! pid_alive "$dir/etcd.pid" || ((SECONDS > deadline)); then
      log "etcd did not become healthy; the end of $dir/logs/etcd.log:"; tail -n 30 "$dir/logs/etcd.log" >&2; exit 1
    fi
    sleep 0.1
  done
}

start_apiserver() {
  pid_alive "$dir/apiserver.pid" && return
  mkdir -p "$dir/logs"
  # An audit log of every write to the ipam.cluster.x-k8s.io group (who changed what, when), for debugging tests.
  cat >"$dir/audit-policy.yaml" <<'EOF_POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: ipam.cluster.x-k8s.io}]
- level: None
EOF_POLICY
  # Flags after envtest's defaults (docs/testing.md): RBAC, token users, no ServiceAccount admission, no endpoint
  # reconciler (a loopback advertise address would make it log errors forever).
  "$BIN_DIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" --token-auth-file="$dir/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer="https://127.0.0.1:$API_PORT" \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --disable-admission-plugins=ServiceAccount \
    --allow-privileged=true --endpoint-reconciler-type=none \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/logs/audit.log" \
    --audit-log-maxsize=100 --audit-log-maxbackup=1 \
    --watch-cache="${WATCH_CACHE:-true}" --profiling=false --v=1 >>"$dir/logs/apiserver.log" 2>&1 &
  echo $! >"$dir/apiserver.pid"
  wait_ready
}

wait_ready() {
  local deadline=$((SECONDS + 120))
  until curl -sf --cacert "$dir/pki/ca.crt" "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1 &&
    "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" get namespace default >/dev/null 2>&1; do
    if ! pid_alive "$dir/apiserver.pid" || ((SECONDS > deadline)); then
      log "kube-apiserver did not become ready; the end of $dir/logs/apiserver.log:"
      tail -n 40 "$dir/logs/apiserver.log" >&2; exit 1
    fi
    sleep 0.2
  done
}

# The CAPI core manager, out of cluster like ours: its CRDs' conversion and its admission webhooks point at
# https://127.0.0.1:<port> with a throw-away CA. (Its webhook server has no bind-address flag; the other ports do.)
start_capi() {
  [[ $CAPI == none ]] && return
  if [[ $CAPI == crds ]]; then
    "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply --server-side -f "$CAPI_DIR/crd" >/dev/null
    "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" wait --for=condition=Established --timeout=60s \
      -f "$CAPI_DIR/crd" >/dev/null
    return
  fi
  pid_alive "$dir/capi.pid" && return
  mkdir -p "$dir/logs"
  "$here/dev-certs.sh" "$dir/capi-certs"
  python3 "$here/dev-install.py" --kubectl "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" \
    --url "https://127.0.0.1:$CAPI_WEBHOOK_PORT" --ca "$dir/capi-certs/ca.crt" \
    --crds "$CAPI_DIR/crd" --webhooks "$CAPI_DIR/webhook.yaml" --name-prefix capi- \
    --label clusterctl.cluster.x-k8s.io= --label cluster.x-k8s.io/provider=cluster-api
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply --server-side --force-conflicts \
    -f "$repo/tests/fixtures/stand-in-providers.yaml" >/dev/null
  "$CAPI_DIR/manager" --kubeconfig="$dir/kubeconfig" --leader-elect=false \
    --webhook-port="$CAPI_WEBHOOK_PORT" --webhook-cert-dir="$dir/capi-certs" \
    --health-addr="127.0.0.1:$CAPI_HEALTH_PORT" \
    --diagnostics-address="127.0.0.1:$CAPI_METRICS_PORT" --insecure-diagnostics \
    --v=1 >>"$dir/logs/capi.log" 2>&1 &
  echo $! >"$dir/capi.pid"
  local deadline=$((SECONDS + 120))
  # Ready, and the API server reaches its webhook: an empty Cluster spec is refused by CAPI's schema or webhook.
  until curl -sf "http://127.0.0.1:$CAPI_HEALTH_PORT/readyz" >/dev/null 2>&1 &&
    "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" get clusters.cluster.x-k8s.io -A >/dev/null 2>&1; do
    if ! pid_alive "$dir/capi.pid" || ((SECONDS > deadline)); then
      log "the Cluster API manager did not become ready; the end of $dir/logs/capi.log:"
      tail -n 40 "$dir/logs/capi.log" >&2; exit 1
    fi
    sleep 0.2
  done
}

# kube-controller-manager with the garbage collector alone, out of cluster as admin; it serves nothing.
start_gc() {
  [[ ${GC:-false} == true ]] || return 0
  pid_alive "$dir/gc.pid" && return
  mkdir -p "$dir/logs"
  # Only this run's lines count as started (a restart appends to the log).
  local skip=$(($(cat "$dir/logs/gc.log" 2>/dev/null | wc -l) + 1))
  "$("$here/k8s-bin.sh" kcm | tail -n 1)/kube-controller-manager" --kubeconfig="$dir/kubeconfig" \
    --controllers=garbagecollector --leader-elect=false --secure-port=0 --v=1 >>"$dir/logs/gc.log" 2>&1 &
  echo $! >"$dir/gc.pid"
  local deadline=$((SECONDS + 60))
  until tail -n "+$skip" "$dir/logs/gc.log" 2>/dev/null | grep -q "all resource monitors have synced"; do
    if ! pid_alive "$dir/gc.pid" || ((SECONDS > deadline)); then
      log "the garbage collector did not start; the end of $dir/logs/gc.log:"; tail -n 30 "$dir/logs/gc.log" >&2; exit 1
    fi
    sleep 0.2
  done
}

stop_pid() { # <pid file> <name>
  local f=$1 pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $2 (pid $pid)"
  fi
  rm -f "$f"
}

load_env() {
  [[ -f $env_file ]] || { log "no control plane in $dir (run: $0 up --dir $dir)"; exit 1; }
  # shellcheck disable=SC1090
  source "$env_file"
}

case $cmd in
  up)
    if [[ -f $env_file ]]; then
      source "$env_file"
      if [[ -n ${CAPI:-} ]] && pid_alive "$dir/etcd.pid" && pid_alive "$dir/apiserver.pid" &&
        { [[ $CAPI == none || $CAPI == crds ]] || pid_alive "$dir/capi.pid"; } &&
        { [[ ${GC:-false} != true ]] || pid_alive "$dir/gc.pid"; }; then
        log "already running: https://127.0.0.1:$API_PORT (kubeconfig: $dir/kubeconfig)"; exit 0
      fi
    fi
    started=$SECONDS
    BIN_DIR=${K8S_BIN_DIR:-$("$here/k8s-bin.sh" | tail -n 1)}
    # New ports unless a stopped plane left complete settings (a machine restart can leave an empty file).
    if [[ -z ${ETCD_PORT:-} || -z ${ETCD_PEER_PORT:-} || -z ${API_PORT:-} ]]; then
      ETCD_PORT=$(free_port); ETCD_PEER_PORT=$(free_port); API_PORT=$(free_port)
      WATCH_CACHE=$watch_cache
    fi
    GC=${GC:-false}
    if [[ $gc == true ]]; then GC=true; fi
    if [[ -z ${CAPI:-} || -z ${CAPI_WEBHOOK_PORT:-} ]]; then
      CAPI=$capi CAPI_WEBHOOK_PORT=$(free_port) CAPI_HEALTH_PORT=$(free_port) CAPI_METRICS_PORT=$(free_port)
    fi
    case $CAPI in
      v1.14|crds) CAPI_DIR=$("$here/k8s-bin.sh" capi | tail -n 1) ;;
      v1.10) CAPI_DIR=$("$here/k8s-bin.sh" capi-v1.10 | tail -n 1) ;;
      *) CAPI_DIR= ;;
    esac
    write_env
    generate_pki
    write_kubeconfig "$dir/kubeconfig" it-admin "$(sed -n 1p "$dir/tokens.csv" | cut -d, -f1)"
    write_kubeconfig "$dir/kubeconfig-restricted" it-restricted "$(sed -n 2p "$dir/tokens.csv" | cut -d, -f1)"
    start_etcd
    start_apiserver
    start_capi
    start_gc
    log "ready in $((SECONDS - started)) s: https://127.0.0.1:$API_PORT  (kubectl --kubeconfig $dir/kubeconfig ...)"
    ;;
  down)
    if [[ -f $env_file ]]; then
      stop_pid "$dir/gc.pid" "the garbage collector"
      stop_pid "$dir/capi.pid" "Cluster API manager"
      stop_pid "$dir/apiserver.pid" kube-apiserver
      stop_pid "$dir/etcd.pid" etcd
    fi
    rm -rf "$dir/pki" "$dir/capi-certs" "$dir/etcd" "$dir/logs" "$dir/audit-policy.yaml" "$dir/tokens.csv" "$dir/kubeconfig" "$dir/kubeconfig-restricted" "$env_file"
    log "removed the control plane in $dir"
    ;;
  status)
    load_env
    pid_alive "$dir/etcd.pid" && pid_alive "$dir/apiserver.pid" &&
      { [[ ${CAPI:-none} == none ]] || pid_alive "$dir/capi.pid"; } &&
      { [[ ${GC:-false} != true ]] || pid_alive "$dir/gc.pid"; } &&
      curl -sf --cacert "$dir/pki/ca.crt" "https://127.0.0.1:$API_PORT/readyz" >/dev/null
    ;;
  stop)
    load_env
    case $component in
      etcd) stop_pid "$dir/etcd.pid" etcd ;;
      apiserver) stop_pid "$dir/apiserver.pid" kube-apiserver ;;
      capi) stop_pid "$dir/capi.pid" "Cluster API manager" ;;
      gc) stop_pid "$dir/gc.pid" "the garbage collector" ;;
      *) log "stop needs etcd, apiserver, capi or gc"; exit 2 ;;
    esac
    ;;
  start)
    load_env
    case $component in
      etcd) start_etcd ;;
      apiserver) start_apiserver ;;
      capi) start_capi ;;
      gc) start_gc ;;
      *) log "start needs etcd, apiserver, capi or gc"; exit 2 ;;
    esac
    ;;
  *) sed -n '2,28p' "$0" >&2; exit 2 ;;
esac
