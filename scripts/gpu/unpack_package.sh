# Sourced by the GPU-host scripts (run.sh, serving.sh, soak.sh) from the
# repository root: $OUT (created) for results, and the package that
# scripts/gpu/package.sh built (.devpkg/pkg.tar.xz) unpacked into $PKG.
OUT=${OUT:-/tmp/fuseserve-gpu-out}
mkdir -p "$OUT"
PKG=/tmp/fuseserve-devpkg
mkdir -p "$PKG" && tar -C "$PKG" -xJf .devpkg/pkg.tar.xz
