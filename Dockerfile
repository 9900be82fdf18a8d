# syntax=docker/dockerfile:1
#
# fuseserve: the gRPC inference server and its CLI on NVIDIA's CUDA runtime.
#
#   docker build -t fuseserve .
#   docker run --gpus all -p 8001:8001 -p 8002:8002 -v fuseserve-models:/models fuseserve
#
# The build stage installs and builds through the scripts CI runs
# (scripts/setup.sh, scripts/build.sh), in NVIDIA's CUDA devel image; the
# runtime stage is the CUDA runtime image of the same version with only the
# shared libraries the two binaries link. NVIDIA publishes its CUDA images on
# Ubuntu, not Debian: Ubuntu 24.04 carries the same library series as Debian
# 12 (gRPC 1.51, protobuf 3.21, Abseil 20220623) under the same -dev package
# names, but has no python3-torch, which only the tests need; --build-only
# leaves the test-only packages out.
#
# /models is the model repository; an empty one (a fresh volume) is filled
# with the default repository on start (deploy/docker/entrypoint.sh). Port
# 8001 is gRPC (KServe v2 + grpc.health.v1), 8002 HTTP (/metrics,
# /v2/health/*). Give `docker stop` more time than --exit-timeout-secs
# (default 30) so that queued requests can finish: docker stop -t 40.

ARG CUDA_VERSION=13.0.1
ARG UBUNTU_VERSION=24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The packages first, so that a source change does not reinstall them.
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN BUILD_DIR=/build BUILD_TYPE=Release scripts/build.sh \
      -DFUSESERVE_CUDA=ON -DFUSESERVE_BUILD_TESTS=OFF
# The Ubuntu packages that own the shared libraries the binaries link (the
# CUDA libraries come with the runtime image), for the runtime stage to
# install: derived, not listed, so they follow setup.sh.
RUN mkdir -p /out/bin \
 && cp /build/server/fuseserve /build/client/fuseserve-cli /out/bin/ \
 && ldd /out/bin/fuseserve /out/bin/fuseserve-cli \
      | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' \
      | xargs readlink -f | sort -u | grep -v '^/usr/local/cuda' \
      | while read -r lib; do \
          dpkg -S "$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null \
            || { echo "no package owns $lib" >&2; exit 1; }; \
        done \
      | cut -d: -f1 | sort -u > /out/runtime-packages \
 && cat /out/runtime-packages

FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages \
      apt-get install -y -q --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages
RUN groupadd --system --gid 10001 fuseserve \
 && useradd --system --uid 10001 --gid fuseserve --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin fuseserve \
 && mkdir /models && chown fuseserve:fuseserve /models
COPY --from=build /out/bin/ /usr/local/bin/
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/fuseserve-entrypoint

USER fuseserve:fuseserve
VOLUME /models
EXPOSE 8001 8002
# Ready = every model that loaded is ready (503 while loading and draining).
# The start period covers writing the default repository and loading it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8002/v2/health/ready || exit 1
ENTRYPOINT ["/usr/local/bin/fuseserve-entrypoint"]
CMD []
