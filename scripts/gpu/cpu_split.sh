#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried; scripts/gpu/package.sh
# builds it): where the host's CPU goes while fuseserve serves (bench/cpu_split.py),
# server and client CPU per inference split by thread name. JSON and logs to $OUT.
#   scripts/gpu/cpu_split.sh                                  # gemm and gemm_nobatch at c64
#   scripts/gpu/cpu_split.sh --run conv:16 --duration-s 10    # any bench/cpu_split.py flag
#   scripts/gpu/cpu_split.sh --shared-memory                  # tensors through system shm
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
nvidia-smi -L || true
runs=(--run gemm:64 --run gemm_nobatch:64)
for arg in "$@"; do [[ $arg == --run ]] && runs=(); done
FUSESERVE_PY_STUBS=$PKG/pystubs python3 bench/cpu_split.py \
  --fuseserve "$PKG/bin/fuseserve" --cli "$PKG/bin/fuseserve-cli" \
  --ld-library-path "$PKG/lib:/usr/local/cuda/lib64" \
  --out "$OUT/cpu_split.json" --logs "$OUT/cpu-split-logs" "${runs[@]}" "$@"
