#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried; scripts/gpu/package.sh
# builds it): fuseserve against the PyTorch-eager peer (bench/peer_server.py)
# and against itself with batching off, driven by fuseserve-cli bench at the
# same settings (bench/serving_bench.py). The table is printed last; the JSON,
# every bench report and both server logs go to $OUT.
#   scripts/gpu/serving.sh                 # reference sizes, ~5 minutes
#   scripts/gpu/serving.sh --quick         # small sizes, a smoke test
#   scripts/gpu/serving.sh --peer-server aio --duration-s 5   # any serving_bench.py flag
# The peer runs on the host's python3 (PyTorch CUDA + grpcio; the stubs come
# from the package, as for the Python suites of run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
for binary in fuseserve fuseserve-cli; do
  if [ ! -x "$PKG/bin/$binary" ]; then
    echo "serving.sh: $binary is not in .devpkg (scripts/gpu/package.sh must pack it)" >&2
    exit 1
  fi
done
nvidia-smi -L || true
python3 -c 'import sys, grpc, torch; print("python", sys.version.split()[0], "grpcio",
  grpc.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())' ||
  echo "serving.sh: python3 cannot import grpc and torch: the peer needs both, serving_bench.py grpcio"
# The packaged libraries go to fuseserve and the CLI only: in the peer's
# process they would shadow PyTorch's own (protobuf, OpenSSL, ...).
FUSESERVE_PY_STUBS=$PKG/pystubs python3 bench/serving_bench.py \
  --fuseserve "$PKG/bin/fuseserve" --cli "$PKG/bin/fuseserve-cli" \
  --ld-library-path "$PKG/lib:/usr/local/cuda/lib64" \
  --out "$OUT/serving.json" --logs "$OUT/serving-logs" "$@"
