#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried; scripts/gpu/package.sh
# builds it): issue 6's open serving questions in one call, ~4 minutes.
#  1. gRPC's own CPU per call, callback API against completion-queue API
#     (bench/grpc_api/compare.sh), on this host's real core count;
#  2. bench/cpu_split.py at gemm c64 with each value of one server flag
#     (--response-threads 0, 2 and 4 unless --vary says otherwise), over gRPC
#     messages and over system shared memory, and gemm_nobatch c64 once per
#     value (the denominator of the 5x batching target);
#  3. (--delay) instead of 1 and 2: conv and groupnorm over system shared memory
#     at c1 and c16, with the repository's max_queue_delay_microseconds and
#     with 0, and the server's decomposition of a request at each.
# A summary table is printed last; JSON and logs go to $OUT.
#   scripts/gpu/serving_ab.sh [--duration-s 6 --warmup-s 2]   # any cpu_split.py flag
#   scripts/gpu/serving_ab.sh --vary grpc-infer-threads "0 4" --rounds 2 --no-grpc-api
#   scripts/gpu/serving_ab.sh --delay
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
nvidia-smi -L || true
split() {
  local name=$1; shift
  scripts/gpu/cpu_split.sh --out "$OUT/$name.json" --logs "$OUT/$name-logs" "$@" |
    tee "$OUT/$name.txt"
}
if [ "${1:-}" = --delay ]; then
  shift
  for delay in -1 0; do
    split "delay$delay" --run conv:1 --run conv:16 --run groupnorm:1 --run groupnorm:16 \
      --shared-memory --queue-delay-us $delay --duration-s 6 --warmup-s 2 "$@"
  done
  exec python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("\nconv and groupnorm over system shared memory: the repository's batching delay (-1) and 0")
print("%-28s %4s %6s %9s %8s %8s %8s %8s %8s %8s %9s %7s" % (
    "model", "conc", "delay", "infer/s", "p50 ms", "avg ms", "request", "queue", "c.in",
    "c.infer", "c.out", "rest"))
for delay in (-1, 0):
  with open(os.path.join(out, "delay%d.json" % delay)) as f:
    runs = json.load(f)["runs"]
  for r in runs:
    p = r["server_phases_us"]
    rest = p["request"] - p["queue"] - p["compute_input"] - p["compute_infer"] - p["compute_output"]
    print("%-28s %4d %6s %9.1f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f %6.1f%%" % (
        r["model"][:28], r["concurrency"], "repo" if delay < 0 else delay, r["inferences_per_s"],
        r["latency_us"]["p50"] / 1e3, r["latency_us"]["avg"] / 1e3, p["request"] / 1e3,
        p["queue"] / 1e3, p["compute_input"] / 1e3, p["compute_infer"] / 1e3,
        p["compute_output"] / 1e3, 100 * rest / r["latency_us"]["avg"]))
print("(ms: the server's averages per request; rest = request - queue - compute: its share of avg)")
PY
fi
# The GEMM section's options: --vary FLAG "V1 V2 ..." (the server flag and its
# values; default response-threads "0 2 4"), --rounds N (each value N times,
# interleaved), --no-grpc-api (skip step 1).
flag=response-threads; values="0 2 4"; rounds=1; grpc_api=1
while [ $# -gt 0 ]; do
  case $1 in
    --vary) flag=$2; values=$3; shift 3 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-grpc-api) grpc_api=0; shift ;;
    *) break ;;
  esac
done
if [ $grpc_api = 1 ]; then
  LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64 \
    bench/grpc_api/compare.sh "$PKG/bin/grpc_api_cpu" 64 32768 5 | tee "$OUT/grpc_api.txt"
fi
for value in $values; do
  split "nobatch-v$value" --run gemm_nobatch:64 --duration-s 6 --warmup-s 2 \
    --server-arg=--$flag=$value "$@"
done
for round in $(seq "$rounds"); do
  for value in $values; do
    split "grpc-v$value-r$round" --run gemm:64 --duration-s 6 --warmup-s 2 \
      --server-arg=--$flag=$value "$@"
    split "shm-v$value-r$round" --run gemm:64 --duration-s 6 --warmup-s 2 --shared-memory \
      --server-arg=--$flag=$value "$@"
  done
done
python3 - "$OUT" "$rounds" "$flag" $values <<'PY'
import json, os, sys
out, rounds, flag, values = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def run(name):
  with open(os.path.join(out, name + ".json")) as f:
    return json.load(f)["runs"][0]
print("\ngemm c64, batching on against off at the same --%s" % flag)
print("%-8s %-24s %6s %10s %6s %10s %8s %12s %12s" % (
    "tensors", "server flag", "round", "infer/s", "batch", "off", "vs off", "server us",
    "client us"))
for transport in ("grpc", "shm"):
  for value in values:
    base = run("nobatch-v%s" % value)["inferences_per_s"]
    for round in range(1, rounds + 1):
      r = run("%s-v%s-r%d" % (transport, value, round))
      print("%-8s %-24s %6d %10.0f %6.1f %10.0f %7.2fx %12.1f %12.1f" % (
          transport, "--%s=%s" % (flag, value), round, r["inferences_per_s"],
          r["avg_batch_size"] or 0, base, r["inferences_per_s"] / base,
          r["server"]["us_per_inference"], r["client"]["us_per_inference"]))
PY
