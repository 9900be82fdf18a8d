#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried): shows that a GPU's
# instances overlap one batch's input copy with another's compute and a
# third's output copy (issue 6 item 3). The default conv model with three
# instances per GPU serves `fuseserve-cli bench` over system shared memory
# while the server writes its batch trace (--batch-trace-file); then
# bench/overlap.py measures the overlap per GPU. The trace (open it in
# chrome://tracing or ui.perfetto.dev), the figures and the logs go to $OUT.
#   scripts/gpu/overlap.sh [CONCURRENCY]      # default 16
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
export LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BIN=$PKG/bin
CONCURRENCY=${1:-16}
MODEL=convtranspose_gelu_groupnorm
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$BIN/fuseserve-cli" make-repository "$WORK/models" > /dev/null
for model in "$WORK"/models/*; do
  [ "$(basename "$model")" = "$MODEL" ] || rm -rf "$model"
done
sed -i 's/instance_group \[ { count: [0-9]*/instance_group [ { count: 3/' \
  "$WORK/models/$MODEL/config.pbtxt"
grep instance_group "$WORK/models/$MODEL/config.pbtxt"

"$BIN/fuseserve" --model-repository="$WORK/models" --grpc-port=0 --metrics-port=0 \
  --allow-shared-memory=true --port-file="$WORK/ports.json" \
  --batch-trace-file="$OUT/batch_trace.json" > "$OUT/overlap-server.log" 2>&1 &
SERVER=$!
for _ in $(seq 600); do
  [ -s "$WORK/ports.json" ] && break
  kill -0 "$SERVER" 2> /dev/null || { cat "$OUT/overlap-server.log"; exit 1; }
  sleep 0.1
done
PORT=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_port"])' \
  "$WORK/ports.json")
"$BIN/fuseserve-cli" bench "$MODEL" --url "localhost:$PORT" --shared-memory system \
  --concurrency "$CONCURRENCY" --warmup-s 2 --duration-s 4 --quiet \
  --json "$OUT/overlap-bench.json" | tail -n 12
kill -TERM "$SERVER"
wait "$SERVER"
python3 bench/overlap.py "$OUT/batch_trace.json" --json "$OUT/overlap.json"
