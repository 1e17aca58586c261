#!/usr/bin/env bash
# The whole CTest suite again, built with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-asan/ (Release optimisation, so that the training tests stay fast; -g1 line tables). A
# memory error, a leak or undefined behaviour fails the test that ran into it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_SANITIZE=ON \
  -DTANDEM_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
# Leaks inside OpenMPI's and oneDNN's own initialisation are theirs, not ours: suppressed by name.
export LSAN_OPTIONS="suppressions=$PWD/../scripts/lsan_suppressions.txt:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
OMP_WAIT_POLICY=passive ctest --output-on-failure -j "$(nproc)" --timeout 900
