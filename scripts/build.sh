#!/usr/bin/env bash
# Configures and builds tandem (Release) into ./build; used by both README commands.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
