#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried): CUDA graphs on
# against off (issue 6 item 2). The default repository's three models are
# each served twice by one server: as generated (graphs on, the default) and
# as <model>_nographs (`optimization { cuda { graphs: false } }`, otherwise
# identical), and `fuseserve-cli bench` measures both at concurrency 1 and 16
# in turn. Reports (text and JSON) go to $OUT.
#   scripts/gpu/graphs.sh [DURATION_S]      # default 5
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/unpack_package.sh
export LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BIN=$PKG/bin
DURATION=${1:-5}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$BIN/fuseserve-cli" make-repository "$WORK/models" > /dev/null
for model_dir in "$WORK"/models/*; do
  model=$(basename "$model_dir")
  copy="$WORK/models/${model}_nographs"
  mkdir -p "$copy/1"
  ln "$model_dir"/1/* "$copy/1/"  # hard links: the same weights, no copy
  sed -e "s/^name: \"$model\"/name: \"${model}_nographs\"/" "$model_dir/config.pbtxt" > "$copy/config.pbtxt"
  echo 'optimization { cuda { graphs: false } }' >> "$copy/config.pbtxt"
done

"$BIN/fuseserve" --model-repository="$WORK/models" --grpc-port=0 --metrics-port=0 \
  --port-file="$WORK/ports.json" > "$OUT/graphs-server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1200); do
  [ -s "$WORK/ports.json" ] && break
  kill -0 "$SERVER" 2> /dev/null || { cat "$OUT/graphs-server.log"; exit 1; }
  sleep 0.1
done
PORT=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_port"])' \
  "$WORK/ports.json")
shape_of() {  # -1 dims (groupnorm) get 512
  case "$1" in groupnorm*) echo "--shape 64,512,512" ;; *) echo "" ;; esac
}
for model in gemm_bias_hardtanh_mish_groupnorm convtranspose_gelu_groupnorm groupnorm; do
  for variant in "$model" "${model}_nographs"; do
    # shellcheck disable=SC2046
    "$BIN/fuseserve-cli" bench "$variant" --url "localhost:$PORT" --concurrency 1,16 \
      --warmup-s 2 --duration-s "$DURATION" --quiet $(shape_of "$model") \
      --json "$OUT/graphs-$variant.json" > "$OUT/graphs-$variant.txt"
    python3 - "$OUT/graphs-$variant.json" << 'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for level in report["levels"]:
  print("%-45s c%-3d %9.1f infer/s  p50 %8.3f ms  p99 %8.3f ms  compute infer %7.3f ms" % (
      report["model"], level["concurrency"], level["throughput"]["inferences_per_s"],
      level["latency_us"]["p50"] / 1e3, level["latency_us"]["p99"] / 1e3,
      level["server"]["avg_compute_infer_us"] / 1e3))
PY
  done
done
kill -TERM "$SERVER"
wait "$SERVER"
grep -c "without a CUDA graph" "$OUT/graphs-server.log" || true
