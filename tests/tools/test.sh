#!/usr/bin/env bash
# make test: the Go tools the tests run (built once, cached), formatting and lints, the image, then the unit tests and
# the integration tests against a real etcd + kube-apiserver. The control plane is started when it is not running, and
# stopped again at the end if this script started it. Each stage says where it is and how long it has taken; the end
# prints the time of every stage (a cold first run: docs/testing.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

STAGES=5
started=$SECONDS
stage_name=""
stage_started=$SECONDS
summary=()
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
end_stage() {
  if [[ -n $stage_name ]]; then summary+=("$stage_name $(elapsed $((SECONDS - stage_started)))"); fi
}
stage() { # <n> <what>
  end_stage
  stage_name=$2
  stage_started=$SECONDS
  printf '\n==> [%s/%s] %s (make test at %s)\n' "$1" "$STAGES" "$2" "$(elapsed $((SECONDS - started)))"
}
step() { printf -- '--> %s\n' "$*"; }
report() {
  end_stage
  stage_name=""
  printf '\n==> make test: %s in all; ' "$(elapsed $((SECONDS - started)))"
  (IFS=';'; printf '%s\n' "${summary[*]}" | sed 's/;/, /g')
}

stage 1 "Go tools, built once from their Go modules and cached (~/.cache/capi-ipam-in-cluster)"
sets=(k8s capi release kustomize capi-v1.10 caip prometheus image capm3 capv vcsim kcm operator)
for i in "${!sets[@]}"; do
  step "$((i + 1)) of ${#sets[@]}: k8s-bin.sh ${sets[$i]}"
  set_started=$SECONDS
  tests/tools/k8s-bin.sh "${sets[$i]}" >/dev/null
  step "k8s-bin.sh ${sets[$i]}: $(elapsed $((SECONDS - set_started)))"
done

stage 2 "Rust: cargo fmt --all --check, cargo clippy --workspace --all-targets -- -D warnings"
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The mutation check's guards are found by their text: one that a change moved would test nothing (make mutants).
python3 tests/tools/mutants.py --check
# The module graph (issue 35): no cycle beyond the known ones, which only shrink; the reading checked on a tree of its own.
python3 tests/tools/module-graph.py --self-test
python3 tests/tools/module-graph.py --check

# A manager left running by `make run` would allocate alongside the tests' own managers.
if [[ -f .dev/manager.pid ]] && kill -0 "$(cat .dev/manager.pid)" 2>/dev/null; then
  step "stopping the manager of make run (tests run managers of their own)"
  kill "$(cat .dev/manager.pid)" || true
  rm -f .dev/manager.pid
fi

stage 3 "make image and make release: the static manager in its OCI image, and a whole release (tests/image.rs and tests/release.rs take them apart)"
tests/tools/image.sh
tests/tools/release.sh
tests/tools/spdx-tools.sh >/dev/null

stage 4 "the control plane (etcd, kube-apiserver, the Cluster API core manager)"
plane_started=0
if ! tests/tools/control-plane.sh status >/dev/null 2>&1; then
  tests/tools/control-plane.sh up
  plane_started=1
else
  step "already running"
fi
cleanup() {
  if ((plane_started)); then tests/tools/control-plane.sh down; fi
  report
}
trap cleanup EXIT

stage 5 "cargo test: the unit tests and the simulation, then the integration tests against the control plane"
cargo test --no-fail-fast
