#!/usr/bin/env bash
# Configures and builds fuseserve into ${BUILD_DIR:-build}. CUDA is
# auto-detected (nvcc in PATH or /usr/local/cuda): with it the CUDA backend is
# compiled (for sm_90a and sm_80), without it the CPU build is complete.
# Extra arguments are passed to cmake (e.g. -DFUSESERVE_SANITIZE=address;undefined).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
