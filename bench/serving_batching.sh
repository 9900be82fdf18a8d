#!/usr/bin/env bash
# Dynamic batching against no batching, on the GEMM family at the reference
# size (8192 -> 8192 features, a 256 MiB weight): the comparison of README.md
# "Bench".
#
#   1. writes the default repository (fuseserve-cli make-repository) and keeps
#      its GEMM model as generated (dynamic batching, max_batch_size 1024);
#   2. adds gemm_nobatch: the same weights, max_batch_size 0 and no
#      dynamic_batching, so every request (dims [1, 8192]) runs alone;
#   3. starts the server on free ports, benches both models at concurrency
#      1, 16 and 64 (1-row requests), then the batching model at concurrency
#      64 for a fixed 30 s;
#   4. stops the server and prints the side-by-side throughput table.
#
# Usage: bench/serving_batching.sh            (from a built tree: scripts/build.sh)
# Environment: BUILD_DIR (default build), OUT_DIR (where the JSON reports and
# the server log go; default a fresh temporary directory), CONCURRENCY
# (default 1,16,64), WARMUP_S (2), WINDOW_S (5), MAX_WINDOWS (5), LONG_S (30).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
SERVER="$BUILD_DIR/server/fuseserve"
CLI="$BUILD_DIR/client/fuseserve-cli"
CONCURRENCY=${CONCURRENCY:-1,16,64}
WARMUP_S=${WARMUP_S:-2}
WINDOW_S=${WINDOW_S:-5}
MAX_WINDOWS=${MAX_WINDOWS:-5}
LONG_S=${LONG_S:-30}
BATCHING=gemm_bias_hardtanh_mish_groupnorm
NOBATCH=gemm_nobatch

for binary in "$SERVER" "$CLI"; do
  [ -x "$binary" ] || { echo "missing $binary: build first (scripts/build.sh)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/fuseserve-batching-XXXXXX)
OUT_DIR=${OUT_DIR:-$WORK}
mkdir -p "$OUT_DIR"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
  rm -rf "$WORK/models"
}
trap cleanup EXIT

echo "== repository: $WORK/models"
"$CLI" make-repository "$WORK/models"
# Only the two GEMM models are served (less memory, faster start).
rm -rf "$WORK/models/convtranspose_gelu_groupnorm" "$WORK/models/groupnorm"
mkdir -p "$WORK/models/$NOBATCH/1"
ln "$WORK/models/$BATCHING/1/model.safetensors" "$WORK/models/$NOBATCH/1/model.safetensors" 2>/dev/null ||
  cp "$WORK/models/$BATCHING/1/model.safetensors" "$WORK/models/$NOBATCH/1/model.safetensors"
sed -e "s/^name: .*/name: \"$NOBATCH\"/" \
    -e 's/^max_batch_size: .*/max_batch_size: 0/' \
    -e 's/dims: \[ 8192 \]/dims: [ 1, 8192 ]/g' \
    -e '/^dynamic_batching {/,/^}/d' \
    "$WORK/models/$BATCHING/config.pbtxt" > "$WORK/models/$NOBATCH/config.pbtxt"
if ! grep -q '^max_batch_size: 0$' "$WORK/models/$NOBATCH/config.pbtxt" ||
   grep -q dynamic_batching "$WORK/models/$NOBATCH/config.pbtxt" ||
   [ "$(grep -c 'dims: \[ 1, 8192 \]' "$WORK/models/$NOBATCH/config.pbtxt")" != 2 ]; then
  echo "the generated GEMM config changed shape; cannot derive $NOBATCH:" >&2
  cat "$WORK/models/$BATCHING/config.pbtxt" >&2
  exit 1
fi
echo "== $NOBATCH/config.pbtxt"
cat "$WORK/models/$NOBATCH/config.pbtxt"

echo "== server (log: $OUT_DIR/server.log)"
"$SERVER" --model-repository="$WORK/models" --grpc-port=0 --metrics-port=0 \
  --port-file="$WORK/ports.json" > "$OUT_DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 600); do
  [ -s "$WORK/ports.json" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT_DIR/server.log" >&2; exit 1; }
  sleep 0.5
done
GRPC_PORT=$(sed -n 's/.*"grpc_port": *\([0-9]*\).*/\1/p' "$WORK/ports.json")
[ -n "$GRPC_PORT" ] || { echo "the server wrote no port" >&2; exit 1; }
URL="localhost:$GRPC_PORT"

SWEEP=(--concurrency "$CONCURRENCY" --warmup-s "$WARMUP_S" --window-s "$WINDOW_S"
       --max-windows "$MAX_WINDOWS" --allow-errors)
echo "== $BATCHING (dynamic batching)"
"$CLI" bench "$BATCHING" --url "$URL" "${SWEEP[@]}" --json "$OUT_DIR/batching.json"
echo "== $NOBATCH (max_batch_size 0)"
"$CLI" bench "$NOBATCH" --url "$URL" "${SWEEP[@]}" --json "$OUT_DIR/nobatch.json"
echo "== $BATCHING at concurrency 64 for ${LONG_S} s"
LONG_STATUS=0
"$CLI" bench "$BATCHING" --url "$URL" --concurrency 64 --warmup-s "$WARMUP_S" \
  --duration-s "$LONG_S" --json "$OUT_DIR/long_c64.json" || LONG_STATUS=$?

echo "== dynamic batching against none (1-row requests; inferences/s, p99 ms, server avg batch)"
/usr/bin/python3 - "$OUT_DIR/batching.json" "$OUT_DIR/nobatch.json" <<'PY'
import json, sys
batching, nobatch = (json.load(open(path)) for path in sys.argv[1:3])
rows = [("concurrency", "batching infer/s", "p99 ms", "avg batch",
         "no batching infer/s", "p99 ms", "speed-up")]
for b, n in zip(batching["levels"], nobatch["levels"]):
    speedup = b["throughput"]["inferences_per_s"] / max(n["throughput"]["inferences_per_s"], 1e-9)
    rows.append((str(b["concurrency"]),
                 "%.1f" % b["throughput"]["inferences_per_s"], "%.1f" % (b["latency_us"]["p99"] / 1e3),
                 "%.1f" % b["server"]["avg_batch_size"],
                 "%.1f" % n["throughput"]["inferences_per_s"], "%.1f" % (n["latency_us"]["p99"] / 1e3),
                 "%.1fx" % speedup))
widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
for row in rows:
    print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
PY
echo "reports: $OUT_DIR/{batching,nobatch,long_c64}.json"
exit "$LONG_STATUS"
