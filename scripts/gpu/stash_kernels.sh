#!/usr/bin/env bash
# Here (no GPU): builds the kernels' C ABI library of the current tree
# (build-gpu, Release, CUDA on) and stores it compressed as
# .devlibs/NAME/libfuseserve_kernels_capi.so.xz, so that several kernel
# variants travel to the GPU host in one call (`device` with carry
# [".devpkg", ".devlibs"]) and scripts/gpu/kernel_ab.sh times them side by
# side on the same GPU. .devlibs/ is git-ignored; each library is ~1.3 MB.
# With --with-tests it also stores the tree's cuda_kernels_test (~3 MB),
# which scripts/gpu/variant_tests.sh runs, plain and under both sanitizers,
# on the GPU host: a variant's own tests travel in the call that times it.
#   scripts/gpu/stash_kernels.sh main          # e.g. before changing a kernel
#   scripts/gpu/stash_kernels.sh v43 --with-tests
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: scripts/gpu/stash_kernels.sh NAME [--with-tests]}
with_tests=${2:-}
BUILD_DIR=${BUILD_DIR:-build-gpu}
targets=(fuseserve_kernels_capi)
[ "$with_tests" = --with-tests ] && targets+=(cuda_kernels_test)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSESERVE_CUDA=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
rm -rf ".devlibs/$name" && mkdir -p ".devlibs/$name"
strip -o ".devlibs/$name/libfuseserve_kernels_capi.so" \
  "$BUILD_DIR/kernels/cuda/libfuseserve_kernels_capi.so"
if [ "$with_tests" = --with-tests ]; then
  strip -o ".devlibs/$name/cuda_kernels_test" "$BUILD_DIR/tests/kernels/cuda/cuda_kernels_test"
fi
xz -T0 -f ".devlibs/$name"/*
du -sh ".devlibs/$name"
