#!/usr/bin/env bash
# Installs everything fuseserve needs to build, serve and test on Debian 12
# (all from Debian's packages; no other network access is needed).
#   scripts/setup.sh               build + test packages (what .ci/run needs)
#   scripts/setup.sh --build-only  only what building the server and CLI needs
#                                  (the Dockerfile's build stage)
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev
  libopenblas-dev
)
# The unit tests, the PyTorch parity and protocol suites, the deployment
# tests with a real Prometheus and nginx, and the sanitizer and fuzz stages of
# scripts/test.sh (clang with its sanitizer and libFuzzer runtimes; dpkg-dev
# unpacks the Abseil source that scripts/tsan_abseil.sh rebuilds under TSan).
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-grpcio python3-grpc-tools python3-protobuf python3-torch
  python3-yaml prometheus nginx openssl
  clang libclang-rt-14-dev dpkg-dev
)
case "${1:-}" in
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --build-only) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "usage: scripts/setup.sh [--build-only]" >&2; exit 2 ;;
esac

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
else
  echo "setup: all packages present"
fi
