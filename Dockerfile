# Multi-stage: a static musl binary on a distroless base, running as non-root.
FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y musl-tools
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin eviction-autoscaler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/eviction-autoscaler /eviction-autoscaler
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/eviction-autoscaler"]
CMD ["serve"]
