#!/usr/bin/env bash
# make release: everything a release publishes, in out/release/, building only what it ships (no Kubernetes, no
# control plane). make test runs it (tests/tools/test.sh) and tests/release.rs takes each part apart; docs/install.md
# ("A release") says how to publish them.
#
#   image/oci/                   one OCI image index: the manager for linux/amd64 and linux/arm64
#                                (crane push out/release/image/oci <registry>/…/manager:<version>)
#   image/image-<arch>.tar       each architecture's image as a docker tarball (docker load)
#   sbom/crates.spdx.json        SPDX 2.3: the crate graph both targets build the manager from
#   sbom/image-linux-<arch>.spdx.json   SPDX 2.3: each image, its /manager and the crates compiled into it
#   clusterctl/ipam-in-cluster/<version>/{ipam-components.yaml,metadata.yaml}
#                                a clusterctl repository (file:// or the assets of a GitHub release)
#   operator/ipam-in-cluster-<version>.configmap.yaml   the Cluster API Operator's air-gapped release (fetchConfig.selector)
#   operator/oci/                the release as the OCI artifact fetchConfig.oci reads
#                                (crane push out/release/operator/oci <registry>/…/ipam-in-cluster:<version>)
#   capi-ipam-in-cluster-<chart version>.tgz   the Helm chart
#   SHA256SUMS                   every file above (sha256sum -c SHA256SUMS)
#
# The arm64 manager is cross-linked with Debian's aarch64 toolchain and run under qemu-aarch64 before it is packed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

version=v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
repository=ghcr.io/capi-ipam-in-cluster/manager
image=$repository:$version
# The artifact's reference (its tag is all the layout records; push it under any name).
artifact=ghcr.io/capi-ipam-in-cluster/ipam-in-cluster:$version
out=out/release
say() { echo "release: $*" >&2; }
# The arm64 manager is cross-linked and run under qemu-aarch64: from an x86_64 machine, as CI's.
[[ $(uname -m) == x86_64 ]] || { say "make release builds on x86_64 (here: $(uname -m))"; exit 1; }

tests/tools/deps.sh release
kustomize=$(tests/tools/k8s-bin.sh kustomize | tail -n1)/kustomize
helm=$(tests/tools/k8s-bin.sh release | tail -n1)/helm
oci_image=$(tests/tools/k8s-bin.sh image | tail -n1)/oci-image
rm -rf "$out"
mkdir -p "$out/image" "$out/sbom" "$out/operator" "$out/clusterctl/ipam-in-cluster/$version"

# 1. The manager for each architecture, statically linked (as make image builds it: the amd64 build is shared).
declare -A triples=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
platforms=()
for arch in amd64 arm64; do
  triple=${triples[$arch]}
  say "building the manager for linux/$arch ($triple)"
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build --release --locked --quiet --target "$triple" --bin manager
  binary=target/$triple/release/manager
  runner=()
  [[ $arch == arm64 ]] && runner=(qemu-aarch64)
  # The binary runs on its architecture (arm64 under qemu-user here): the exec format error users met is caught here.
  ran=$("${runner[@]}" "$binary" --version) || { say "$binary does not run${runner:+ under ${runner[*]}}"; exit 1; }
  [[ $ran == *"${version#v}"* ]] || { say "$binary --version says '$ran', not ${version#v}"; exit 1; }
  say "linux/$arch: ${runner[*]:+${runner[*]} }$binary --version: $ran"
  platforms+=(--platform "$arch=$binary")
done

# 2. One image index of both.
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
index=$("$oci_image" "${platforms[@]}" --tag "$image" --layout "$out/image/oci" --tarball "$out/image/image-{arch}.tar" \
  --label org.opencontainers.image.title=capi-ipam-in-cluster \
  --label "org.opencontainers.image.description=Cluster API IPAM provider for in-cluster pools" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision")
say "image index $image $index"

# 3. SBOMs: the crate graph, and each image.
python3 tests/tools/sbom.py crates --out "$out/sbom/crates.spdx.json"
for arch in amd64 arm64; do
  triple=${triples[$arch]}
  python3 tests/tools/sbom.py image --layout "$out/image/oci" --arch "$arch" --triple "$triple" \
    --binary "target/$triple/release/manager" --image "$image" --out "$out/sbom/image-linux-$arch.spdx.json"
done

# 4. The clusterctl release: its components and metadata, in a repository's layout.
release_dir=$out/clusterctl/ipam-in-cluster/$version
"$kustomize" build config/clusterctl > "$release_dir/ipam-components.yaml"
cp config/metadata.yaml "$release_dir/metadata.yaml"

# 5. The Cluster API Operator's two forms of the same release.
python3 - "$release_dir" "$version" > "$out/operator/ipam-in-cluster-$version.configmap.yaml" <<'EOF'
import json, sys
folder, version = sys.argv[1:]
read = lambda name: open(f"{folder}/{name}", encoding="utf-8").read()
# The labels an IPAMProvider's fetchConfig.selector matches (docs/install.md): one ConfigMap per version, its version
# in a label, as the Operator reads it.
print(json.dumps({
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": f"ipam-in-cluster-{version}", "namespace": "capi-ipam-in-cluster-system",
                 "labels": {"provider-components": "ipam-in-cluster", "provider.cluster.x-k8s.io/version": version}},
    "data": {"components": read("ipam-components.yaml"), "metadata": read("metadata.yaml")},
}, indent=2))
EOF
"$oci_image" artifact --layout "$out/operator/oci" --tag "$artifact" "$release_dir/ipam-components.yaml" "$release_dir/metadata.yaml" >/dev/null

# 6. The chart.
"$helm" package charts/capi-ipam-in-cluster --destination "$out" >/dev/null

# 7. Checksums of every file.
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
say "wrote $out ($(wc -l < "$out/SHA256SUMS") files, $(du -sh "$out" | cut -f1)): $image, $artifact"
