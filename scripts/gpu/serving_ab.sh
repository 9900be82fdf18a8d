#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried; scripts/gpu/package.sh
# builds it): issue 6's open serving questions in one call, ~4 minutes.
#  1. gRPC's own CPU per call, callback API against completion-queue API
#     (bench/grpc_api/compare.sh), on this host's real core count;
#  2. bench/cpu_split.py at gemm c64 with --response-threads 0, 2 and 4, over
#     gRPC messages and over system shared memory, and gemm_nobatch c64 once
#     (the denominator of the 5x batching target).
# A summary table is printed last; JSON and logs go to $OUT.
#   scripts/gpu/serving_ab.sh [--duration-s 6 --warmup-s 2]   # any cpu_split.py flag
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
nvidia-smi -L || true
LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64 \
  bench/grpc_api/compare.sh "$PKG/bin/grpc_api_cpu" 64 32768 5 | tee "$OUT/grpc_api.txt"
split() {
  local name=$1; shift
  scripts/gpu/cpu_split.sh --out "$OUT/$name.json" --logs "$OUT/$name-logs" "$@" |
    tee "$OUT/$name.txt"
}
split nobatch --run gemm_nobatch:64 --duration-s 6 --warmup-s 2 "$@"
for threads in 0 2 4; do
  split "grpc-rt$threads" --run gemm:64 --duration-s 6 --warmup-s 2 \
    --server-arg=--response-threads=$threads "$@"
  split "shm-rt$threads" --run gemm:64 --duration-s 6 --warmup-s 2 --shared-memory \
    --server-arg=--response-threads=$threads "$@"
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def run(name):
  with open(os.path.join(out, name + ".json")) as f:
    return json.load(f)["runs"][0]
base = run("nobatch")["inferences_per_s"]
print("\ngemm c64 (batching off: %.0f infer/s)" % base)
print("%-10s %-14s %10s %6s %8s %12s %12s" % ("tensors", "--response-", "infer/s", "batch",
                                              "vs off", "server us", "client us"))
for transport in ("grpc", "shm"):
  for threads in (0, 2, 4):
    r = run("%s-rt%d" % (transport, threads))
    print("%-10s %-14s %10.0f %6.1f %7.2fx %12.1f %12.1f" % (
        transport, "threads=%d" % threads, r["inferences_per_s"], r["avg_batch_size"] or 0,
        r["inferences_per_s"] / base, r["server"]["us_per_inference"],
        r["client"]["us_per_inference"]))
PY
