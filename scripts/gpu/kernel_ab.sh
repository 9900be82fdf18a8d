#!/usr/bin/env bash
# On the GPU host (through `device`, carry [".devpkg", ".devlibs"]): the
# kernel benchmark (bench/kernel_bench.py) of the package's library and of
# each library stored by scripts/gpu/stash_kernels.sh, one after another on
# the same GPU, so that kernel variants compare within one call (timings of
# different calls may come from different GPUs or hosts). The package's
# library runs first and last, to show the drift within the call. Extra
# arguments go to kernel_bench.py (default: --families A --no-compile).
# JSON per library under $OUT/NAME/ (the package's as package_first and
# package_last), its table after each run.
#   scripts/gpu/kernel_ab.sh main tma -- --families A
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/unpack_package.sh
nvidia-smi -L || true
names=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do names+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
bench_args=("$@")
[ ${#bench_args[@]} -eq 0 ] && bench_args=(--families A --no-compile)
status=0
runs=(package "${names[@]}" package)
for i in "${!runs[@]}"; do
  name=${runs[$i]}
  # The package's two runs keep their own results.
  label=$name
  [ "$name" = package ] && { [ "$i" -eq 0 ] && label=package_first || label=package_last; }
  dir=$PKG/ab_$name
  mkdir -p "$OUT/$label"
  if [ "$name" = package ]; then
    kernel_library_dir "$dir"
  else
    xz -dc ".devlibs/$name/libfuseserve_kernels_capi.so.xz" > "$PKG/stored_$name.so"
    kernel_library_dir "$dir" "$PKG/stored_$name.so"
  fi
  LD_LIBRARY_PATH=$dir python3 bench/kernel_bench.py --lib "$dir/libfuseserve_kernels_capi.so" \
    --out "$OUT/$label" "${bench_args[@]}" > "$OUT/bench_$label.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  echo "=== $label (exit $rc)"
  grep -E "^(config|[ABC] )" "$OUT/bench_$label.log"
done
exit $status
