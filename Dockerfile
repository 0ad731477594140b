# syntax=docker/dockerfile:1.7
# handoff container image.
#
#   docker build -t handoff:0.1.0 --build-arg HANDOFF_COMMIT=$(git rev-parse HEAD) .
#   docker run --rm --read-only -p 9464:9464 \
#     -e HANDOFF_DATABASE__URL=postgres://handoff:…@db:5432/owner \
#     -e HANDOFF_REDIS__URL=redis://redis:6379 handoff:0.1.0
#
# The runtime image holds the binary and an example config only: no shell, no package
# manager, runs as the numeric non-root user 65532, needs no writable filesystem. handoff
# handles SIGTERM/SIGINT itself (it drains within shutdown.grace_period), so it runs as PID 1
# without an init. There is no HEALTHCHECK: the runtime image has no shell or HTTP client to
# run one, and orchestrators probe GET /healthz and /readyz on :9464 themselves
# (see helm/handoff).
# checkov:skip=CKV_DOCKER_2: no shell or HTTP client in the distroless runtime image to run a HEALTHCHECK; Kubernetes probes /healthz and /readyz
# checkov:skip=CKV_DOCKER_7: the bases are build arguments (FROM ${BUILDER_IMAGE}) whose defaults below carry pinned tags

# The two bases are build arguments so that an image can be built where these registries are
# out of reach (scripts/image builds this file on bases made locally with debootstrap); the
# defaults are the images a release uses.
# Builder: pinned toolchain (the crate uses edition 2024; rust-version of the dev machines).
ARG BUILDER_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
# Runtime: glibc, libgcc and CA certificates; no shell, user nonroot = 65532.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS builder
WORKDIR /build
# librdkafka (the Kafka client) and the OpenSSL it is linked with are built from source: make,
# perl and a C++ compiler besides the image's gcc. Not pinned to versions: they are whatever the
# pinned base image's Debian release carries (its security updates change the exact ones), and
# only the builder stage has them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends make perl g++ \
 && rm -rf /var/lib/apt/lists/*
# Only what `cargo build` reads: manifests, the build settings (jemalloc's), sources, and
# the SQL that src/migrate/ embeds. bench/ and chaos/ are members of the workspace, which
# cargo loads whole; only the handoff binary is built.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY src ./src
COPY migrations ./migrations
COPY bench ./bench
COPY chaos ./chaos
# The commit handoff_build_info reports: docker build --build-arg HANDOFF_COMMIT=$(git rev-parse HEAD)
ARG HANDOFF_COMMIT=unknown
# Cache mounts keep the registry and target dir between builds (BuildKit); the binary is
# copied out because cache mounts are not part of the image layer.
# The dist profile is release with the symbols stripped (Cargo.toml).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --profile dist --locked --bin handoff \
 && install -D -m 0755 target/dist/handoff /out/handoff

# Runtime: glibc + libgcc only (handoff links nothing else; the OpenSSL librdkafka uses is built
# in). The image is about 63 MB uncompressed: the distroless cc base (~24 MB) and the stripped
# binary (39 MB, measured by scripts/image).
FROM ${RUNTIME_IMAGE}
ARG RUNTIME_IMAGE
ARG HANDOFF_VERSION=0.1.0
ARG HANDOFF_COMMIT=unknown
LABEL org.opencontainers.image.title="handoff" \
      org.opencontainers.image.description="Relays outbox tables to Redis Streams and takes events over into consumer inboxes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${HANDOFF_VERSION}" \
      org.opencontainers.image.revision="${HANDOFF_COMMIT}" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}"
COPY --from=builder /out/handoff /usr/local/bin/handoff
# Default config: listens on 0.0.0.0:9464, JSON logs; URLs come from the environment
# (HANDOFF_DATABASE__URL / HANDOFF_REDIS__URL). Kubernetes mounts its ConfigMap over it.
COPY config/container.toml /etc/handoff/handoff.toml
# distroless "nonroot" is uid/gid 65532; stated numerically so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/handoff"]
CMD ["run", "--config", "/etc/handoff/handoff.toml"]
