#!/usr/bin/env bash
# On the GPU host (through `device`, with .devpkg carried): the GPU unit
# tests, compute-sanitizer memcheck and racecheck on them, the server end to
# end on GPU instances, and (with --bench) the kernel benchmark against
# PyTorch eager and torch.compile. Logs and JSON go to $OUT.
#   scripts/gpu/run.sh tests     # tests + sanitizers + e2e
#   scripts/gpu/run.sh python    # the Python parity and protocol suites only
#   scripts/gpu/run.sh runtime   # GPU instance + CUDA graph tests (and memcheck) + e2e
#   scripts/gpu/run.sh server    # runtime + reliability + the Python suites (no kernel tests)
#   scripts/gpu/run.sh bench     # kernel benchmark
#   scripts/gpu/run.sh kernels   # GPU unit tests + sanitizers + kernel benchmark
#   scripts/gpu/run.sh kernel_tests  # GPU unit tests + sanitizers only
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/unpack_package.sh
export LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BIN=$PKG/bin
status=0
step() {
  local name=$1; shift
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "=== $name: exit $rc in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || status=1
}

# The PyTorch parity and protocol suites against the server on the GPU, with
# PyTorch CUDA's float64 result as the reference (stubs generated here by
# scripts/gpu/package.sh: the host's Python has no grpc_tools).
python_suites() {
  for suite in parity protocol; do
    step "python_$suite" env FUSESERVE_BINARY=$BIN/fuseserve FUSESERVE_PROTO_DIR=$PWD/proto \
      FUSESERVE_PY_STUBS=$PKG/pystubs FUSESERVE_REFERENCE_DEVICE=cuda \
      python3 tests/python/${suite}_test.py
  done
}

kernel_tests() {
  step unit_tests sh -c "$BIN/cuda_runtime_test && $BIN/cuda_kernels_test"
  runtime_tests
  # The sanitizers run every kernel test except the reference-size ones
  # (minutes under instrumentation); those run above, uninstrumented.
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$BIN/cuda_kernels_test" --gtest_filter='-*ReferenceShape*:*Reference*Size*'
  # racecheck twice: every kernel test with the wgmma convolution switched
  # off (the mma.sync kernels then serve its cases), and the convolution,
  # family and concurrent GroupNorm tests with it on (its producer's
  # in-place transposition and the normaliser beside it). Until v15 the
  # consumers rounded each stage in place and racecheck, which does not
  # follow the stages' mbarrier ordering, reported that as races; since
  # then only the producer writes a stage and the report is clean
  # (bench/kernel_notes.md v21).
  step racecheck env FUSESERVE_DISABLE_WGMMA=1 compute-sanitizer --tool racecheck \
    --error-exitcode 1 "$BIN/cuda_kernels_test" --gtest_filter='-*ReferenceShape*:*Reference*Size*'
  step racecheck_wgmma compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$BIN/cuda_kernels_test" \
    --gtest_filter='*ConvTranspose*:*Famil*:*GroupNormConcurrent*:-*ReferenceShape*:*Reference*Size*'
}

# The GPU instance and its CUDA graphs, plain and under memcheck.
runtime_tests() {
  step runtime_tests sh -c "$BIN/cuda_graph_cache_test && $BIN/gpu_instance_test"
  # The test of a capture that fails provokes the CUDA API error it is
  # about (cudaErrorStreamCaptureUnsupported), which memcheck reports: it is
  # left out there and runs in runtime_tests.
  step runtime_memcheck sh -c "compute-sanitizer --tool memcheck --error-exitcode 1 \
    $BIN/cuda_graph_cache_test --gtest_filter=-*CannotBeCaptured* && \
    compute-sanitizer --tool memcheck --error-exitcode 1 $BIN/gpu_instance_test"
}

reliability_tests() {
  step reliability env FUSESERVE_BINARY=$BIN/fuseserve \
    FUSESERVE_INFER_CHILD=$BIN/reliability_infer_child "$BIN/reliability_test"
}

e2e_tests() {
  step e2e env FUSESERVE_BINARY=$BIN/fuseserve FUSESERVE_EXPECT_GPU=1 "$BIN/server_e2e_test"
}

kernel_bench() {
  kernel_library_dir "$PKG/capi"
  step kernel_bench env LD_LIBRARY_PATH="$PKG/capi" python3 bench/kernel_bench.py \
    --lib "$PKG/capi/libfuseserve_kernels_capi.so" --out "$OUT" "$@"
  tail -n 40 "$OUT/kernel_bench.log"
}

nvidia-smi -L
case "${1:-tests}" in
  kernel_tests)
    kernel_tests
    ;;
  tests)
    kernel_tests
    e2e_tests
    reliability_tests
    python_suites
    ;;
  python)
    python_suites
    ;;
  runtime)
    runtime_tests
    e2e_tests
    ;;
  server)
    runtime_tests
    e2e_tests
    reliability_tests
    python_suites
    ;;
  bench)
    kernel_bench "${@:2}"
    ;;
  kernels)
    kernel_tests
    kernel_bench "${@:2}"
    ;;
esac
exit $status
