#!/usr/bin/env bash
# Here (no GPU): builds the kernels' C ABI library of the current tree
# (build-gpu, Release, CUDA on) and stores it compressed as
# .devlibs/NAME/libfuseserve_kernels_capi.so.xz, so that several kernel
# variants travel to the GPU host in one call (`device` with carry
# [".devpkg", ".devlibs"]) and scripts/gpu/kernel_ab.sh times them side by
# side on the same GPU. .devlibs/ is git-ignored; each library is ~1.3 MB.
#   scripts/gpu/stash_kernels.sh main          # e.g. before changing a kernel
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: scripts/gpu/stash_kernels.sh NAME}
BUILD_DIR=${BUILD_DIR:-build-gpu}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSESERVE_CUDA=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target fuseserve_kernels_capi
mkdir -p ".devlibs/$name"
strip -o ".devlibs/$name/libfuseserve_kernels_capi.so" \
  "$BUILD_DIR/kernels/cuda/libfuseserve_kernels_capi.so"
xz -T0 -f ".devlibs/$name/libfuseserve_kernels_capi.so"
du -sh ".devlibs/$name"
