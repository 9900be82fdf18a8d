#!/usr/bin/env bash
# Builds the GPU test, benchmark and server binaries here (Release, CUDA on)
# and packs them with the shared libraries they need that a GPU host lacks
# (gRPC, protobuf, Abseil, prometheus-cpp, cpp-httplib, OpenBLAS, ...) into
# .devpkg/, which `device` carries to the GPU host (see scripts/gpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSESERVE_CUDA=ON >/dev/null
TARGETS=(cuda_runtime_test cuda_kernels_test cuda_graph_cache_test gpu_instance_test fuseserve
         fuseserve-cli server_e2e_test reliability_test reliability_infer_child
         fuseserve_kernels_capi grpc_api_cpu)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}"

rm -rf .devpkg && mkdir -p .devpkg/bin .devpkg/lib
cp "$BUILD_DIR"/tests/kernels/cuda/cuda_runtime_test "$BUILD_DIR"/tests/kernels/cuda/cuda_kernels_test \
   "$BUILD_DIR"/server/fuseserve "$BUILD_DIR"/client/fuseserve-cli \
   "$BUILD_DIR"/tests/e2e/server_e2e_test "$BUILD_DIR"/tests/e2e/reliability/reliability_test \
   "$BUILD_DIR"/tests/e2e/reliability/reliability_infer_child \
   "$BUILD_DIR"/tests/server/runtime/cuda_graph_cache_test \
   "$BUILD_DIR"/tests/server/runtime/gpu_instance_test \
   "$BUILD_DIR"/bench/grpc_api/grpc_api_cpu .devpkg/bin/
cp "$BUILD_DIR"/kernels/cuda/libfuseserve_kernels_capi.so .devpkg/lib/
strip .devpkg/bin/* .devpkg/lib/*.so

# Non-system libraries, resolved by the loader here; the GPU host has its
# own C/C++ runtime and CUDA.
system='^(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|linux-vdso)\.'
for binary in .devpkg/bin/* .devpkg/lib/*.so; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  if [[ ! "$name" =~ $system ]]; then cp -L "$lib" .devpkg/lib/; fi
done
strip .devpkg/lib/*.so* 2>/dev/null || true

# The Python suites' gRPC stubs (the GPU host's Python lacks grpc_tools).
/usr/bin/python3 tests/python/generate_stubs.py .devpkg/pystubs

# Compressed: the carried tree is limited to 64 MiB (OpenBLAS alone is 36).
tar -C .devpkg -cJf /tmp/fuseserve-devpkg.tar.xz bin lib pystubs
rm -rf .devpkg/bin .devpkg/lib .devpkg/pystubs
mv /tmp/fuseserve-devpkg.tar.xz .devpkg/pkg.tar.xz
du -sh .devpkg/pkg.tar.xz
