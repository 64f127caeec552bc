#!/usr/bin/env bash
# make test: formatting, lints, unit tests, then the integration tests against a real etcd + kube-apiserver.
# The control plane is started when it is not running, and stopped again at the end if this script started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
step() { printf '\n==> %s\n' "$*"; }

step "building helm, clusterctl and the Cluster API v1.14.2 and v1.10.10 managers (cached after the first time)"
tests/tools/k8s-bin.sh release >/dev/null
tests/tools/k8s-bin.sh capi >/dev/null
tests/tools/k8s-bin.sh capi-v1.10 >/dev/null

step "building the Go provider v1.1.0, promtool (with the Prometheus Operator CRDs), oci-image and crane (cached)"
tests/tools/k8s-bin.sh caip >/dev/null
tests/tools/k8s-bin.sh prometheus >/dev/null
tests/tools/k8s-bin.sh image >/dev/null

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings

# A manager left running by `make run` would allocate alongside the tests' own managers.
if [[ -f .dev/manager.pid ]] && kill -0 "$(cat .dev/manager.pid)" 2>/dev/null; then
  step "stopping the manager of make run (tests run managers of their own)"
  kill "$(cat .dev/manager.pid)" || true
  rm -f .dev/manager.pid
fi

step "make image (tests/image.rs takes it apart and runs its entrypoint)"
tests/tools/image.sh

started=0
if ! tests/tools/control-plane.sh status >/dev/null 2>&1; then
  step "starting the control plane"
  tests/tools/control-plane.sh up
  started=1
fi
cleanup() { if ((started)); then tests/tools/control-plane.sh down; fi; }
trap cleanup EXIT

step "cargo test (unit tests, then the integration tests against the control plane)"
cargo test --no-fail-fast
