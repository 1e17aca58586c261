#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Real data the parity tests read (dolma2 tokenizer, Debian-doc corpus); cached after the first run.
bash scripts/fetch_data.sh
cd "${TANDEM_BUILD_DIR:-build}"
# Passive OpenMP waits: two test processes share the cores without spinning against each other.
OMP_WAIT_POLICY=passive ctest --output-on-failure -j "$(nproc)" --timeout 900
