#!/usr/bin/env bash
# make run: a local control plane (etcd, kube-apiserver and the real Cluster API v1.14.2 core manager with its CRDs
# and webhooks) with our manager running against it, our CRDs and webhooks registered over TLS, the example Cluster,
# pools and claims applied, and what happened printed. Ctrl-C stops the manager; the control plane keeps running
# until `make cluster-down`.
#
#   RUN_EXIT=1        stop after the demo instead of following the manager's log
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD
dev=$repo/.dev

tests/tools/control-plane.sh up
echo "==> building the manager"
cargo build --quiet --bin manager
kubectl="$(tests/tools/k8s-bin.sh --print-dir)/kubectl"
k() { "$kubectl" --kubeconfig "$dev/kubeconfig" "$@"; }
source tests/tools/lib.sh

if [[ -f $dev/manager.pid ]] && kill -0 "$(cat "$dev/manager.pid")" 2>/dev/null; then
  echo "==> stopping the manager of an earlier make run"
  kill "$(cat "$dev/manager.pid")" 2>/dev/null || true
  sleep 1
fi

tests/tools/dev-certs.sh "$dev/webhook-certs"
webhook_port=$(free_port); health_port=$(free_port); metrics_port=$(free_port)
echo "==> registering our CRDs and webhooks at https://127.0.0.1:$webhook_port"
python3 tests/tools/dev-install.py --kubectl "$kubectl" --kubeconfig "$dev/kubeconfig" \
  --url "https://127.0.0.1:$webhook_port" --ca "$dev/webhook-certs/ca.crt"

echo "==> starting the manager (log: .dev/manager.log)"
target/debug/manager --kubeconfig "$dev/kubeconfig" --log-format text \
  --webhook-host 127.0.0.1 --webhook-port "$webhook_port" --webhook-cert-dir "$dev/webhook-certs" \
  --health-probe-bind-address "127.0.0.1:$health_port" \
  --diagnostics-address "127.0.0.1:$metrics_port" --insecure-diagnostics \
  >"$dev/manager.log" 2>&1 &
manager=$!
echo "$manager" >"$dev/manager.pid"
stop_manager() { kill "$manager" 2>/dev/null || true; wait "$manager" 2>/dev/null || true; rm -f "$dev/manager.pid"; }
trap stop_manager EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null && break
  kill -0 "$manager" 2>/dev/null || { echo "the manager exited:"; tail -n 30 "$dev/manager.log"; exit 1; }
  sleep 0.2
done

echo
echo "==> applying examples/: a Cluster, pools of every shape, claims as CAPV and CAPM3 create them (every Cluster,"
echo "    claim and IPAddress passes Cluster API's own webhooks)"
k apply -f examples/cluster.yaml -f examples/pools -f examples/claims

echo
echo "==> an invalid pool is rejected by our webhook:"
if k apply -f examples/invalid/ 2>&1 | sed 's/^/    /'; then
  echo "    (unexpectedly accepted)"; exit 1
fi

echo
echo "==> the v1alpha1 pool 'legacy' (subnet/start/end), read as v1alpha2:"
k get inclusterippools.v1alpha2.ipam.cluster.x-k8s.io legacy -o jsonpath='    addresses={.spec.addresses} prefix={.spec.prefix} gateway={.spec.gateway}{"\n"}'
echo "    ... and read back as v1alpha1:"
k get inclusterippools.v1alpha1.ipam.cluster.x-k8s.io legacy -o jsonpath='    subnet={.spec.subnet} start={.spec.start} end={.spec.end}{"\n"}'

echo
echo "==> waiting for the claims to be bound"
claims=$(k get ipaddressclaims -n default -o name | wc -l)
for _ in $(seq 1 100); do
  bound=$(k get ipaddressclaims -n default -o jsonpath='{range .items[*]}{.status.addressRef.name}{"\n"}{end}' | grep -c . || true)
  [[ $bound -ge $claims ]] && break
  sleep 0.2
done
sleep 0.6 # one pool status flush

echo
k get inclusterippools,inclusterprefixpools -n default
echo
k get globalinclusterippools shared-vips racks
echo
k get globalinclusterprefixpools tenant-prefixes
echo
k get ipaddressclaims -n default -o custom-columns='CLAIM:.metadata.name,POOL:.spec.poolRef.name,IPADDRESS:.status.addressRef.name,READY:.status.conditions[?(@.type=="Ready")].status,REASON:.status.conditions[?(@.type=="Ready")].reason'
echo
k get ipaddresses.ipam.cluster.x-k8s.io -n default -o custom-columns='IPADDRESS:.metadata.name,ADDRESS:.spec.address,PREFIX:.spec.prefix,GATEWAY:.spec.gateway,POOL-KIND:.spec.poolRef.kind,POOL:.spec.poolRef.name'
cat <<EOF

The provider is running against a local kube-apiserver. In another terminal:
  export KUBECONFIG=$dev/kubeconfig
  $kubectl get ipaddressclaims,ipaddresses.ipam.cluster.x-k8s.io -A
  $kubectl describe ipaddressclaim demo-vip-0-0          # the Ready condition and the Events
  curl -s http://127.0.0.1:$metrics_port/metrics | grep capi_ipam_pool
Ctrl-C stops the manager; make cluster-down stops the control plane.
EOF
if [[ ${RUN_EXIT:-} == 1 ]]; then exit 0; fi
echo
echo "==> manager log (Ctrl-C to stop)"
tail -n +1 -f "$dev/manager.log" &
tailer=$!
trap 'kill $tailer 2>/dev/null; stop_manager' EXIT
wait "$manager"
