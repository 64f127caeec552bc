# syntax=docker/dockerfile:1
# The manager image: built from Cargo.lock in a Rust builder, run as non-root 65532 on distroless (glibc: ring and
# the manager need nothing else), entrypoint /manager.
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# Dependencies first, so that a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src tests/benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && echo 'fn main() {}' > tests/benches/allocator.rs && cp tests/benches/allocator.rs tests/benches/e2e.rs \
 && cp tests/benches/allocator.rs tests/benches/memory.rs \
 && cargo build --release --locked --bin manager \
 && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin manager \
 && cp target/release/manager /manager

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="capi-ipam-in-cluster" \
      org.opencontainers.image.description="Cluster API IPAM provider for in-cluster pools" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /manager /manager
USER 65532:65532
EXPOSE 9443 8081 8443
ENTRYPOINT ["/manager"]
