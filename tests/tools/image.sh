#!/usr/bin/env bash
# make image: the manager's OCI image, built without a container engine and without a base image to pull.
#   1. a statically linked manager (the GNU target with crt-static: it needs no libc in the image),
#   2. one layer holding /manager only, user 65532:65532, entrypoint /manager, OCI labels (tests/tools/oci-image,
#      on go-containerregistry), written as
#        out/image/oci/        an OCI image layout (crane push out/image/oci REF --index, skopeo, podman)
#        out/image/image.tar   a docker tarball (docker load -i, crane push out/image/image.tar REF)
#   IMAGE (default ghcr.io/capi-ipam-in-cluster/manager:v<crate version>) names it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

tools=$(tests/tools/k8s-bin.sh image | tail -n1)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
image=${IMAGE:-ghcr.io/capi-ipam-in-cluster/manager:v$version}
triple=$(rustc -vV | sed -n 's/^host: //p')
case $triple in
  x86_64-*) arch=amd64 ;;
  aarch64-*) arch=arm64 ;;
  *) echo "image: no image architecture for $triple" >&2; exit 1 ;;
esac

echo "image: building a statically linked manager for $triple" >&2
# An explicit --target keeps these flags off the host build (build scripts, the tests' own binary).
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked --quiet --target "$triple" --bin manager
binary=target/$triple/release/manager

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
mkdir -p out/image
digest=$("$tools/oci-image" --binary "$binary" --tag "$image" --arch "$arch" \
  --layout out/image/oci --tarball out/image/image.tar \
  --label org.opencontainers.image.title=capi-ipam-in-cluster \
  --label "org.opencontainers.image.description=Cluster API IPAM provider for in-cluster pools" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.version=v$version" \
  --label "org.opencontainers.image.revision=$revision")
echo "$image" > out/image/name
echo "image: $image $digest; docker tarball $(du -k out/image/image.tar | cut -f1) KiB (out/image/image.tar), OCI layout out/image/oci" >&2
