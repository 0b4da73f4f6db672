# syntax=docker/dockerfile:1
#
# stackgate container image for people who build with Docker: a release build of the binary on
# an empty (`scratch`) image holding only the binary, the libraries `ldd` names for it, Debian's
# CA roots and an nsswitch.conf, running as the numeric user 65532. No shell, no package manager.
#
#   docker build -t stackgate:dev \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#
# The root filesystem is made by scripts/image-rootfs.sh, the same script that CI's daemonless
# build uses (.ci/image.sh, which also checks that this file's final stage copies that tree and
# declares the same USER, ENTRYPOINT, CMD, EXPOSE and LABEL keys). Pin the build image by digest
# for a release (RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm@sha256:...).

ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm

FROM ${RUST_IMAGE} AS build
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

# The root filesystem: the binary, its libraries and CA roots from this Debian image's
# packages, owners root, fixed modes, mtimes SOURCE_DATE_EPOCH (0 unless given).
FROM build AS rootfs
ARG SOURCE_DATE_EPOCH=0
RUN SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH}" bash scripts/image-rootfs.sh /out/stackgate /rootfs

# The runtime image has no shell: the healthchecks are the chart's HTTP probes on the admin
# port (/healthz, /readyz on 8080), not a Docker HEALTHCHECK.
FROM scratch

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG DEBIAN_PACKAGES=unknown
LABEL org.opencontainers.image.title="stackgate" \
      org.opencontainers.image.description="Admission webhook and GitOps checker that keeps OpenStack-on-Kubernetes platforms out of known failure modes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      dev.stackgate.image.debian-packages="${DEBIAN_PACKAGES}"

COPY --from=rootfs /rootfs/ /

USER 65532:65532
# 8443: HTTPS webhook (POST /mutate, /validate); 8080: admin (/healthz, /readyz, /metrics).
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/stackgate"]
CMD ["serve"]
