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
# Tests that launch mpirun: OpenMPI's progress threads leak a little, and only the slow (DWARF)
# unwinder sees far enough up their stacks to match the suppressions; the rest keep the fast one.
mpi_tests='^(DataParallel|Faults|Zero1|Fsdp|PlanDist|MultiHost|HostLosses/MultiHostLoss|NcclCommunicator|NcclTraining|CommunicatorSelection|CudaDataParallel|EvalSharding)[./]|DeadRankDuringASave'
# The CUDA backend runs here on the CPU emulator (tests/cuda_emulator, docs/cuda.md): every
# test_cuda suite but the training runs, which take about 1 s a step emulated, and four of the six
# downstream tasks (15-19 s each emulated; the two quick ones stay). Run those by hand.
slow_tasks=(arc_easy_rc hellaswag_rc winogrande_rc arc_challenge_mc)
emulated_slow="^CudaTraining[.]|^Tasks/CudaDownstream[.].*/($(IFS='|'; echo "${slow_tasks[*]}"))"
emulated_slow_filter="CudaTraining.*$(printf ':Tasks/CudaDownstream.*/%s' "${slow_tasks[@]}")"
status=0
if ((${#folders[@]} > 0)); then
  # gtest filters of the same split: the MPI tests' suites, and the rest.
  mpi_filter='DataParallel.*:Faults.*:Zero1.*:Fsdp.*:PlanDist.*:MultiHost.*:HostLosses/*:NcclCommunicator.*:NcclTraining.*:CommunicatorSelection.*:CudaDataParallel.*:EvalSharding.*:*DeadRankDuringASave*'
  for f in "${folders[@]}"; do
    LSAN_OPTIONS="$suppressions" OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 \
      "./tests/test_$f" --gtest_filter="-$mpi_filter:$emulated_slow_filter" || status=1
    LSAN_OPTIONS="$suppressions:fast_unwind_on_malloc=0" OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 \
      "./tests/test_$f" --gtest_filter="$mpi_filter" || status=1
  done
  exit $status
fi
LSAN_OPTIONS="$suppressions" OMP_WAIT_POLICY=passive \
  ctest --output-on-failure -j "$(nproc)" --timeout 900 -E "$mpi_tests|$emulated_slow" || status=1
LSAN_OPTIONS="$suppressions:fast_unwind_on_malloc=0" OMP_WAIT_POLICY=passive \
  ctest --output-on-failure -j "$(nproc)" --timeout 900 -R "$mpi_tests" || status=1
exit $status
