#!/usr/bin/env bash
# On the GPU host (through `device`, carry [".devpkg", ".devlibs"]): the
# GPU kernel tests that scripts/gpu/stash_kernels.sh NAME --with-tests stored
# for each NAME, plain (FILTER, default every test), then under
# compute-sanitizer memcheck and racecheck (FILTER without the
# reference-size tests, minutes under instrumentation). Logs go to
# $OUT/tests_NAME_TOOL.log; the last lines say which passed.
#   bash scripts/gpu/variant_tests.sh v41c v43 -- 'CudaGroupNorm*'
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/unpack_package.sh
export LD_LIBRARY_PATH=$PKG/lib:/usr/local/cuda/lib64
names=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do names+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
filter=${1:-*}
sanitized="$filter:-*ReferenceShape*:*Reference*Size*"
summary=()
status=0
for name in "${names[@]}"; do
  binary=$PKG/tests_$name
  xz -dc ".devlibs/$name/cuda_kernels_test.xz" > "$binary" && chmod +x "$binary"
  for tool in plain memcheck racecheck; do
    log=$OUT/tests_${name}_$tool.log
    if [ $tool = plain ]; then
      "$binary" --gtest_filter="$filter" > "$log" 2>&1
    else
      compute-sanitizer --tool $tool --error-exitcode 1 "$binary" \
        --gtest_filter="$sanitized" > "$log" 2>&1
    fi
    rc=$?
    [ $rc -eq 0 ] || status=1
    summary+=("$name $tool: exit $rc, $(grep -c '^\[       OK \]' "$log") OK, $(grep -c '^\[  FAILED  \]' "$log") FAILED lines, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)")
  done
done
printf '%s\n' "${summary[@]}"
exit $status
