#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds fuseserve and runs every test:
# GoogleTest suites (under ctest), the end-to-end tests against the real
# server binary, and the PyTorch parity suite. GPU tests skip cleanly (and are
# counted) on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
log=$(mktemp)
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
skipped=$(grep -c "\*\*\*Skipped\|Not Run (Skipped)" "$log" || true)
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
rm -f "$log"
passed=$(( ${total:-0} - ${failed:-0} - skipped ))
echo "GPU tests skip without a CUDA device; ctest ran ${total:-0} tests."
echo "summary: ${passed} passed, ${failed:-0} failed, ${skipped} skipped"
exit "$status"
