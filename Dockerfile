# syntax=docker/dockerfile:1
# The manager image for those with a container engine. It is built the way `make image` builds it without one
# (tests/tools/image.sh): a statically linked manager (GNU target, crt-static, symbols stripped) alone in an empty
# image, run as non-root 65532, entrypoint /manager.
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
ENV RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols
# Dependencies first, so that a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
# The tests' support crate is a workspace member: cargo reads its manifest to resolve the lockfile.
COPY tests/support ./tests/support
RUN mkdir -p src tests/benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && for b in allocator e2e memory vs_caip; do echo 'fn main() {}' > tests/benches/$b.rs; done \
 && cargo build --release --locked --target "$(rustc -vV | sed -n 's/^host: //p')" --bin manager \
 && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs \
 && triple="$(rustc -vV | sed -n 's/^host: //p')" \
 && cargo build --release --locked --target "$triple" --bin manager \
 && cp "target/$triple/release/manager" /manager

FROM scratch
LABEL org.opencontainers.image.title="capi-ipam-in-cluster" \
      org.opencontainers.image.description="Cluster API IPAM provider for in-cluster pools" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /manager /manager
USER 65532:65532
EXPOSE 9443 8081 8443
ENTRYPOINT ["/manager"]
