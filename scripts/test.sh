#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds fuseserve and runs every test, in
# four stages:
#   normal  the build in build/ (CUDA code compiled when nvcc is found) and
#           every ctest test: GoogleTest suites, the end-to-end tests against
#           the real server binary, the PyTorch parity and protocol suites and
#           the deployment tests. GPU tests skip (and are counted) without a
#           CUDA device.
#   asan    clang ASan + UBSan (+ LeakSanitizer) build in build-asan/, CPU
#           only: every C++ test, the e2e tests running the sanitized server.
#   tsan    clang TSan build in build-tsan/ (with Debian's Abseil rebuilt
#           under TSan, scripts/tsan_abseil.sh): the server, batcher, client
#           and common tests, the e2e tests running the TSan server.
#   fuzz    the libFuzzer targets in build-fuzz/, 60 s each on the committed
#           seed corpora (fuzz/README.md).
# A sanitizer report from any process -- a test or a server it started --
# fails its stage (reports are collected from log files, because a server
# killed at the end of a test cannot fail it through its exit code).
#
# Usage: scripts/test.sh [--stage=normal|asan|tsan|fuzz|all]...   (default: all)
# Ends with one line per stage and 'summary: P passed, F failed, S skipped'
# over all stages; exits non-zero if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STAGES=()
for arg in "$@"; do
  case "$arg" in
    --stage=normal|--stage=asan|--stage=tsan|--stage=fuzz) STAGES+=("${arg#--stage=}") ;;
    --stage=all) STAGES+=(normal asan tsan fuzz) ;;
    *) sed -n '2,24p' "$0" >&2; exit 2 ;;
  esac
done
if [ ${#STAGES[@]} -eq 0 ]; then STAGES=(normal asan tsan fuzz); fi

BUILD_DIR=${BUILD_DIR:-build}
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
TSAN_BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=$(nproc)
SANITIZER_DIR="$ROOT/scripts/sanitizers"
# Sanitizer builds: CPU only (the CUDA code compiles in the normal stage),
# clang (one compiler for every sanitizer and libFuzzer; it also checks the
# lock annotations with -Wthread-safety), -O1 with line tables for readable
# reports at a fraction of full debug info's build time.
SANITIZER_CMAKE_ARGS=(-DFUSESERVE_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
                      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only")
# Tests that need Python, Prometheus or nginx, or a GPU, run in the normal
# stage only.
NOT_SANITIZED_LABELS="python|deploy|gpu"

if ! scripts/setup.sh; then
  echo "summary: 0 passed, 1 failed, 0 skipped"
  exit 1
fi

declare -A STAGE_LINE
total_passed=0
total_failed=0
total_skipped=0

# record STAGE PASSED FAILED SKIPPED NOTE [FAILED TEST NAMES]
record() {
  STAGE_LINE[$1]=$(printf '%-10s %d passed, %d failed, %d skipped%s' "$1" "$2" "$3" "$4" "$5")
  if [ -n "${6:-}" ]; then STAGE_LINE[$1]+=" [failed: $6]"; fi
  total_passed=$((total_passed + $2))
  total_failed=$((total_failed + $3))
  total_skipped=$((total_skipped + $4))
}

# stage_failed STAGE WHAT: records a stage that could not run its tests.
stage_failed() {
  record "$1" 0 1 0 " ($2 failed)"
}

# run_ctest BUILD_DIR [CTEST ARGS...]: runs ctest, sets PASSED FAILED SKIPPED,
# CTEST_STATUS and FAILED_NAMES (the failed tests' names, space-separated,
# repeated in the summary so that the end of a long log says what failed).
run_ctest() {
  local dir=$1 log
  shift
  log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@" 2>&1 | tee "$log"
  CTEST_STATUS=${PIPESTATUS[0]}
  SKIPPED=$(grep -c "\*\*\*Skipped\|Not Run (Skipped)" "$log" || true)
  local total failed
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  FAILED_NAMES=$(sed -n '/The following tests FAILED:/,$s/^[[:space:]]*[0-9]* - \([^ ]*\) .*/\1/p' "$log" |
                 tr '\n' ' ' | sed 's/ $//')
  rm -f "$log"
  FAILED=${failed:-0}
  PASSED=$(( ${total:-0} - FAILED - SKIPPED ))
  if [ -z "$total" ] && [ "$CTEST_STATUS" -ne 0 ]; then FAILED=1; fi
}

# reports_dir BUILD_DIR: an empty directory for the sanitizers' log_path.
reports_dir() {
  local dir="$ROOT/$1/sanitizer-reports"
  rm -rf "$dir" && mkdir -p "$dir" && echo "$dir"
}

# build_sanitized STAGE BUILD_DIR CMAKE_ARGS... -- TARGETS...: configures
# and builds, going on past a target that does not compile so that every
# other test still runs. Sets BUILD_NOTE (empty when the build succeeded);
# returns 1 only when configuring failed.
build_sanitized() {
  local stage=$1 dir=$2 configure=() targets=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do configure+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targets=("$@")
  BUILD_NOTE=""
  if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "${SANITIZER_CMAKE_ARGS[@]}" "${configure[@]}"; then
    stage_failed "$stage" "configure"
    return 1
  fi
  local target_args=()
  if [ ${#targets[@]} -gt 0 ]; then target_args=(--target "${targets[@]}"); fi
  if ! cmake --build "$dir" -j "$JOBS" "${target_args[@]}" -- -k 0; then
    BUILD_NOTE=", build errors (see the compiler output above)"
  fi
}

# record_sanitized STAGE REPORTS_DIR: prints every report file written by
# the stage's processes and records the stage from run_ctest's counts; a
# report or a build error fails the stage even when every test passed.
record_sanitized() {
  local reports=0 file
  for file in "$2"/*; do
    [ -f "$file" ] || continue
    reports=$((reports + 1))
    echo "---- sanitizer report $file"
    cat "$file"
  done
  if [ "$reports" -gt 0 ] && [ "$FAILED" -eq 0 ]; then FAILED=1; fi
  if [ -n "$BUILD_NOTE" ]; then FAILED=$((FAILED + 1)); fi
  record "$1" "$PASSED" "$FAILED" "$SKIPPED" ", $reports sanitizer reports$BUILD_NOTE" "$FAILED_NAMES"
}

stage_normal() {
  echo "=== stage normal: build in $BUILD_DIR, every test"
  if ! BUILD_DIR="$BUILD_DIR" scripts/build.sh; then
    stage_failed normal "build"
    return
  fi
  run_ctest "$BUILD_DIR"
  echo "GPU tests skip without a CUDA device."
  record normal "$PASSED" "$FAILED" "$SKIPPED" "" "$FAILED_NAMES"
}

stage_asan() {
  echo "=== stage asan: ASan + UBSan + LeakSanitizer build in $ASAN_BUILD_DIR"
  build_sanitized asan "$ASAN_BUILD_DIR" -DFUSESERVE_SANITIZE=address,undefined || return
  local reports
  reports=$(reports_dir "$ASAN_BUILD_DIR")
  ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan" \
  LSAN_OPTIONS="suppressions=$SANITIZER_DIR/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
    run_ctest "$ASAN_BUILD_DIR" -LE "$NOT_SANITIZED_LABELS"
  record_sanitized asan "$reports"
}

stage_tsan() {
  echo "=== stage tsan: TSan build in $TSAN_BUILD_DIR (server, batcher, client tests)"
  local abseil="$ROOT/$TSAN_BUILD_DIR/abseil"
  if ! scripts/tsan_abseil.sh "$abseil"; then
    stage_failed tsan "instrumented Abseil build"
    return
  fi
  # Configured first: the targets are read from the generated build.
  build_sanitized tsan "$TSAN_BUILD_DIR" -DFUSESERVE_SANITIZE=thread -- fuseserve || return
  # The multi-threaded parts: every test binary under tests/server (except
  # the single-threaded models, repository and metrics suites), tests/e2e,
  # tests/client and tests/common, and the binaries they start.
  local targets
  targets=$(ninja -C "$TSAN_BUILD_DIR" -t targets all |
            sed -n 's#^\(tests/\(server\|e2e\|client\|common\)/[^:]*_test\): CXX_EXECUTABLE_LINKER.*#\1#p' |
            grep -v '^tests/server/\(models\|repository\|metrics\)/' | xargs -n1 basename)
  # shellcheck disable=SC2086
  build_sanitized tsan "$TSAN_BUILD_DIR" -DFUSESERVE_SANITIZE=thread -- fuseserve-cli $targets ||
    return
  local reports
  reports=$(reports_dir "$TSAN_BUILD_DIR")
  # Tests of binaries not built here register as <target>_NOT_BUILT.
  # ignore_noninstrumented_modules: Debian's gRPC, protobuf, OpenSSL and
  # c-ares are not instrumented; their libc calls are not checked
  # (scripts/sanitizers/tsan.supp says why).
  LD_LIBRARY_PATH="$abseil/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  TSAN_OPTIONS="ignore_noninstrumented_modules=1:suppressions=$SANITIZER_DIR/tsan.supp:second_deadlock_stack=1:log_path=$reports/tsan" \
    run_ctest "$TSAN_BUILD_DIR" -LE "$NOT_SANITIZED_LABELS" -E "_NOT_BUILT$"
  record_sanitized tsan "$reports"
}

stage_fuzz() {
  echo "=== stage fuzz: libFuzzer targets in $FUZZ_BUILD_DIR, $FUZZ_SECONDS s each"
  if ! cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "${SANITIZER_CMAKE_ARGS[@]}" -DFUSESERVE_FUZZ=ON -DFUSESERVE_BUILD_TESTS=OFF ||
     ! cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target fuzzers; then
    stage_failed fuzz "build"
    return
  fi
  local log
  log=$(mktemp)
  fuzz/run_fuzzers.sh "$FUZZ_BUILD_DIR" "$FUZZ_SECONDS" | tee "$log"
  local passed failed
  passed=$(sed -n 's/^fuzz: \([0-9]*\) passed.*/\1/p' "$log")
  failed=$(sed -n 's/^fuzz: [0-9]* passed, \([0-9]*\) failed.*/\1/p' "$log")
  rm -f "$log"
  record fuzz "${passed:-0}" "${failed:-1}" 0 " (targets, ${FUZZ_SECONDS} s each)"
}

for stage in "${STAGES[@]}"; do
  started=$(date +%s)
  "stage_$stage"
  STAGE_LINE[$stage]+=" in $(( $(date +%s) - started )) s"
done

echo
for stage in "${STAGES[@]}"; do
  echo "stage ${STAGE_LINE[$stage]}"
done
echo "summary: ${total_passed} passed, ${total_failed} failed, ${total_skipped} skipped"
[ "$total_failed" -eq 0 ]
