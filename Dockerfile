# syntax=docker/dockerfile:1
# The exporter's container image: a release build, then a slim Debian bookworm runtime with the
# RDMA user-space libraries (libibverbs and its providers) and no set-user-ID program, running as
# an unprivileged user whose binary carries the one capability it needs, IPC_LOCK
# (docs/deploy.md); and a debug image (--target debug) with tools to inspect by hand.
#
#   docker build -t rdma-probe-exporter:0.1.0 .
#
# The runtime stage's steps are deploy/image/setup-runtime and deploy/image/install-binary, with
# the package list in deploy/image/runtime-packages; deploy/image/build-rootfs runs the same
# steps in an mmdebstrap root, and the lab runs the exporter from that root (CI has no container
# engine). A container of this image needs IPC_LOCK (`docker run --cap-add IPC_LOCK ...`):
# without it the kernel refuses to start the binary ("operation not permitted").

ARG RUST_VERSION=1.95
ARG DEBIAN_SUITE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_SUITE} AS build
# cmake and libclang-dev: rdma-mummy-sys (under sideway) runs cmake and bindgen.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends cmake libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin rdma-probe-exporter \
 && mkdir -p /out \
 && strip --strip-debug -o /out/rdma-probe-exporter target/release/rdma-probe-exporter

FROM debian:${DEBIAN_SUITE}-slim AS runtime
# Packages, the user and the mount points; no layer of their own for the scripts.
RUN --mount=type=bind,source=deploy/image,target=/mnt/image \
    /mnt/image/setup-runtime
# The binary, with its file capability, in one layer.
RUN --mount=type=bind,source=deploy/image,target=/mnt/image \
    --mount=type=bind,from=build,source=/out,target=/mnt/build \
    /mnt/image/install-binary /mnt/build/rdma-probe-exporter
USER 65532:65532
EXPOSE 9587 18516
ENTRYPOINT ["/usr/local/bin/rdma-probe-exporter"]
CMD ["run", "--config", "/etc/rdma-probe/config/config.yaml"]

# The debug image: the runtime image with tools to inspect and compare by hand (ibv_devinfo,
# ib_write_bw, getcap and getpcaps; deploy/image/debug-packages), which the exporter never runs:
#   docker build --target debug -t rdma-probe-exporter:0.1.0-debug .
FROM runtime AS debug
USER root
RUN --mount=type=bind,source=deploy/image,target=/mnt/image \
    /mnt/image/setup-runtime --packages /mnt/image/debug-packages
USER 65532:65532

# The default target is the last stage: the runtime image.
FROM runtime
