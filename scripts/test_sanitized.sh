#!/usr/bin/env bash
# The test suite again, built with AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer
# into build-asan/ (-O1: a third less compile time than -O2, tests still quick; -g1 line tables),
# with the CUDA backend built for the CPU emulator so that its kernels run under the sanitizers.
# A memory error, a leak or undefined behaviour fails the test that ran into it.
#   scripts/test_sanitized.sh                 the whole CTest suite
#   scripts/test_sanitized.sh io data ...     only these test folders (tests/<folder>), built and
#                                             run on their own: CI's default is the folders that
#                                             read untrusted input (io data tokenizer faults)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${TANDEM_ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DTANDEM_SANITIZE=ON \
  -DTANDEM_WITH_CUDA=OFF -DTANDEM_CUDA_EMULATOR=ON -DTANDEM_BUILD_BENCH=OFF >/dev/null
folders=("$@")
if ((${#folders[@]} > 0)); then
  targets=(tandem)
  for f in "${folders[@]}"; do targets+=("test_$f"); done
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build "$BUILD_DIR" -j "$(nproc)"
fi
cd "$BUILD_DIR"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
suppressions="suppressions=$ROOT/scripts/lsan_suppressions.txt:print_suppressions=0"
# OpenMPI's plugins keep a little memory until exit; the sanitizer build never unloads shared
# objects (tests/support/sanitizer_keep_modules.c), so the fast unwinder names them and the
# suppressions match, in the processes mpirun starts too.
export LSAN_OPTIONS="$suppressions"
# The CUDA backend runs here on the CPU emulator (tests/cuda_emulator, docs/cuda.md): every
# test_cuda suite but the training runs, which take about 1 s a step emulated, and four of the six
# downstream tasks (15-19 s each emulated; the two quick ones stay). Run those by hand.
slow_tasks=(arc_easy_rc hellaswag_rc winogrande_rc arc_challenge_mc)
emulated_slow="^CudaTraining[.]|^Tasks/CudaDownstream[.].*/($(IFS='|'; echo "${slow_tasks[*]}"))"
emulated_slow_filter="CudaTraining.*$(printf ':Tasks/CudaDownstream.*/%s' "${slow_tasks[@]}")"
status=0
if ((${#folders[@]} > 0)); then
  for f in "${folders[@]}"; do
    OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 "./tests/test_$f" --gtest_filter="-$emulated_slow_filter" ||
      status=1
  done
  exit $status
fi
bash "$ROOT/scripts/ctest_longest_first.sh" . -E "$emulated_slow" || status=1
exit $status
