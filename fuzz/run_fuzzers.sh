#!/usr/bin/env bash
# Runs the libFuzzer targets built in BUILD_DIR (cmake -DFUSESERVE_FUZZ=ON) for
# SECONDS each, one after another, starting from the committed seed corpora in
# fuzz/corpus/<name>/ (read only: new inputs go to BUILD_DIR/fuzz/work/<name>/)
# with fuzz/<name>.dict. A crash, leak, timeout (-timeout=10 s per input) or
# out-of-memory (-rss_limit_mb=2048) fails the target; libFuzzer writes the
# reproducer to BUILD_DIR/fuzz/artifacts/<name>/ (rerun it with
# `BUILD_DIR/fuzz/<name>_fuzzer <file>`).
# Prints one line per target (executions, cov: and ft: from libFuzzer's final
# stats) and a closing 'fuzz: P passed, F failed' line; exits 1 if any failed.
#
# Usage: fuzz/run_fuzzers.sh BUILD_DIR SECONDS [NAME...]   (default: every target)
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
FUZZ_DIR=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=$(cd "$1" && pwd)
SECONDS_EACH=$2
shift 2
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(infer_request_decoder safetensors model_config npy shared_memory_params)
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The models' CPU path must not start one OpenBLAS thread per core per input.
export OPENBLAS_NUM_THREADS=1

passed=0
failed=0
for name in "${TARGETS[@]}"; do
  binary="$BUILD_DIR/fuzz/${name}_fuzzer"
  work="$BUILD_DIR/fuzz/work/$name"
  artifacts="$BUILD_DIR/fuzz/artifacts/$name"
  log="$BUILD_DIR/fuzz/$name.log"
  mkdir -p "$work" "$artifacts"
  dict=()
  if [ -f "$FUZZ_DIR/$name.dict" ]; then dict=(-dict="$FUZZ_DIR/$name.dict"); fi
  "$binary" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" \
      "$work" "$FUZZ_DIR/corpus/$name" >"$log" 2>&1
  status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz $name: ${SECONDS_EACH} s, ${executions:-0} executions, ${coverage:-no stats}, 0 crashes"
  else
    failed=$((failed + 1))
    echo "fuzz $name: FAILED (exit $status) after ${executions:-?} executions; log $log"
    grep -E "ERROR: |SUMMARY: |runtime error|Test unit written|ALARM|out-of-memory" "$log" | head -20
    ls "$artifacts"
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
