# syntax=docker/dockerfile:1
#
# stackgate container image: a release build of the binary on distroless/cc (glibc, no shell,
# no package manager), running as the distroless "nonroot" user 65532.
#
#   docker build -t stackgate:dev \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#
# Builder and runtime share Debian 12 (bookworm), so the binary's glibc matches. Pin both
# base images by digest in your release pipeline (FROM image:tag@sha256:...).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src

# Dependencies first, so that source edits do not refetch them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo fetch --locked \
    && rm -rf src

COPY . .
RUN --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin stackgate \
    && install -D -m 0755 target/release/stackgate /out/stackgate

# The runtime image has no shell: the healthchecks are the chart's HTTP probes on the admin
# port (/healthz, /readyz on 8080), not a Docker HEALTHCHECK.
FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="stackgate" \
      org.opencontainers.image.description="Admission webhook and GitOps checker that keeps OpenStack-on-Kubernetes platforms out of known failure modes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=build /out/stackgate /usr/local/bin/stackgate

USER 65532:65532
# 8443: HTTPS webhook (POST /mutate, /validate); 8080: admin (/healthz, /readyz, /metrics).
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/stackgate"]
CMD ["serve"]
