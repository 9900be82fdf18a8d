#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds fuseserve, generates the default
# model repository (./models, one model per family at the reference sizes)
# if there is none, and runs the server on ports 8001 (gRPC) and 8002
# (metrics and health). GPU instances are used when a CUDA device is present,
# the CPU backend otherwise. Extra arguments go to fuseserve.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
MODELS=${MODEL_REPOSITORY:-models}
if [ ! -d "$MODELS" ]; then
  "$BUILD_DIR/client/fuseserve-cli" make-repository "$MODELS"
fi
exec "$BUILD_DIR/server/fuseserve" --model-repository="$MODELS" "$@"
