#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${TANDEM_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 900
