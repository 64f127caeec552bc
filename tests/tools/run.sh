#!/usr/bin/env bash
# make run: a local control plane with the manager running against it. Ctrl-C stops the manager; the control plane
# keeps running until `make cluster-down`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tests/tools/control-plane.sh up
cargo build --bin manager
kubectl="$(tests/tools/k8s-bin.sh --print-dir)/kubectl"
cat <<EOF_MSG

The control plane is up. In another terminal:
  export KUBECONFIG=$PWD/.dev/kubeconfig
  $kubectl get namespaces
Stop the manager with Ctrl-C; stop the control plane with: make cluster-down

EOF_MSG
exec target/debug/manager --kubeconfig .dev/kubeconfig --log-format text
