# syntax=docker/dockerfile:1
# A static musl binary on a distroless base, running as non-root, for linux/amd64 and linux/arm64.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t IMAGE .
#       builds the binary from source for each platform (the arm64 one under QEMU emulation
#       on an amd64 machine: slow, about an hour).
#   docker buildx build --target prebuilt --platform linux/amd64,linux/arm64 -t IMAGE .
#       copies binaries built natively beforehand into dist/linux-<arch>/eviction-autoscaler,
#       as .github/workflows/release.yml does.
ARG RUST_IMAGE=rust:1.95-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${RUST_IMAGE} AS build
ARG TARGETARCH
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac > /rust-target \
 && rustup target add "$(cat /rust-target)" \
 && apt-get update && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --target "$(cat /rust-target)" --bin eviction-autoscaler \
 && cp "target/$(cat /rust-target)/release/eviction-autoscaler" /eviction-autoscaler

FROM ${BASE_IMAGE} AS prebuilt
ARG TARGETARCH
COPY dist/linux-${TARGETARCH}/eviction-autoscaler /eviction-autoscaler
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/eviction-autoscaler"]
CMD ["serve"]

FROM ${BASE_IMAGE}
COPY --from=build /eviction-autoscaler /eviction-autoscaler
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/eviction-autoscaler"]
CMD ["serve"]
