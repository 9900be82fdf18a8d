#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried; scripts/gpu/package.sh
# builds it): the soak of issue 8 — fuseserve at saturation on all three
# families at once, host and device memory sampled (bench/soak.py). The
# verdict is printed last; the JSON, the bench reports and the server log go
# to $OUT.
#   scripts/gpu/soak.sh                    # 600 s
#   scripts/gpu/soak.sh --duration-s 540   # any bench/soak.py flag
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
nvidia-smi -L || true
# The packaged libraries go to fuseserve and the CLI only (see serving.sh).
FUSESERVE_PY_STUBS=$PKG/pystubs python3 bench/soak.py \
  --fuseserve "$PKG/bin/fuseserve" --cli "$PKG/bin/fuseserve-cli" \
  --ld-library-path "$PKG/lib:/usr/local/cuda/lib64" \
  --out "$OUT/soak.json" --logs "$OUT/soak-logs" "$@"
