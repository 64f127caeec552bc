#!/usr/bin/env bash
# Installs what the scripts need beyond Rust and Go (from Debian's packages), when it is missing.
#   deps.sh           what make test needs
#   deps.sh release   that, and the arm64 cross toolchain make release (and so make test) builds with: Rust's
#                     aarch64-unknown-linux-gnu standard library, Debian's aarch64 linker and libc, qemu-user
set -euo pipefail
need=()
python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
if [[ ${1:-} == release ]]; then
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
  # The static libc the arm64 manager links (crt-static).
  [[ -f /usr/aarch64-linux-gnu/lib/libc.a ]] || need+=(libc6-dev-arm64-cross)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  command -v rustup >/dev/null || { echo "deps: rustup is required to add Rust's aarch64 target (https://rustup.rs)" >&2; exit 1; }
  if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    echo "deps: adding Rust's aarch64-unknown-linux-gnu target" >&2
    rustup target add aarch64-unknown-linux-gnu >&2
  fi
fi
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl ca-certificates)
command -v python3 >/dev/null || need+=(python3)
command -v go >/dev/null || { echo "deps: Go 1.26 is required (https://go.dev/dl/); it builds kube-apiserver and etcd" >&2; exit 1; }
command -v cargo >/dev/null || { echo "deps: Rust (cargo) is required (https://rustup.rs)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "deps: please install: ${need[*]}" >&2; exit 1
  fi
  echo "deps: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
