# Sourced by the GPU-host scripts (run.sh, serving.sh, soak.sh, kernel_ab.sh) from the
# repository root: $OUT (created) for results, and the package that
# scripts/gpu/package.sh built (.devpkg/pkg.tar.xz) unpacked into $PKG.
OUT=${OUT:-/tmp/fuseserve-gpu-out}
mkdir -p "$OUT"
PKG=/tmp/fuseserve-devpkg
mkdir -p "$PKG" && tar -C "$PKG" -xJf .devpkg/pkg.tar.xz

# Makes DIR a folder for Python (bench/kernel_bench.py) holding the kernels'
# C ABI library LIBRARY (default: the package's) and only that library's own
# dependencies (Abseil): the rest of the package (OpenSSL, protobuf, ...)
# would shadow PyTorch's, and PyTorch has already loaded the CUDA runtime and
# cuBLAS the library uses. Run with LD_LIBRARY_PATH=DIR.
kernel_library_dir() {
  local dir=$1
  local library=${2:-$PKG/lib/libfuseserve_kernels_capi.so}
  mkdir -p "$dir"
  ln -sf "$PKG"/lib/libabsl_* "$dir/"
  ln -sf "$library" "$dir/libfuseserve_kernels_capi.so"
}
