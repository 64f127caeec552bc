#!/usr/bin/env bash
# Installs what the scripts need beyond Rust and Go (from Debian's packages), when it is missing.
set -euo pipefail
need=()
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
