#!/usr/bin/env bash
# The NCCL communicator's checks on a machine with CUDA GPUs, in one go: configure and build with
# NCCL, run the NCCL tests (selection, nccl_selftest on 1 and 2 ranks, `tandem train` over NCCL
# against the MPI run), then one NCCL data-parallel run with its log. Two-rank checks need two
# GPUs (NCCL will not put two ranks on one device); with one GPU they skip and say so.
# Usage: bench/gpu_check.sh [BUILD_DIR]. NCCL outside the CUDA toolkit (e.g. the nvidia-nccl pip
# wheel): NCCL_HOME=DIR (holding include/nccl.h and lib/libnccl.so*). Logs go to $OUT when it is
# set, else to BUILD_DIR/gpu_check/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-gpu}"
logs="${OUT:-$build/gpu_check}"
mkdir -p "$logs"
jobs="$(nproc)"

step() { printf '\n== %s\n' "$*"; }

step "machine"
nvidia-smi -L || echo "nvidia-smi failed: no NVIDIA driver visible"
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc not on PATH"
missing=()
for tool in cmake c++ mpirun; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "gpu_check: missing ${missing[*]}; tandem also needs the libraries of scripts/setup.sh"
  exit 2
fi

step "configure and build (NCCL on)"
nccl_args=()
if [[ -n "${NCCL_HOME:-}" ]]; then
  lib="$(ls "$NCCL_HOME"/lib/libnccl.so* | head -1)"
  nccl_args=(-DNCCL_INCLUDE_DIR="$NCCL_HOME/include" -DNCCL_LIBRARY="$lib")
  export LD_LIBRARY_PATH="$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTANDEM_BUILD_BENCH=OFF \
  "${nccl_args[@]}" > "$logs/configure.log" 2>&1; then
  tail -30 "$logs/configure.log"
  echo "gpu_check: configure failed (full log: $logs/configure.log)"
  exit 2
fi
grep "NCCL communicator:" "$logs/configure.log"
if ! grep -q "NCCL communicator: on" "$logs/configure.log"; then
  echo "gpu_check: CMake did not find CUDA with NCCL; set NCCL_HOME or install NCCL"
  exit 2
fi
if ! cmake --build "$build" -j"$jobs" --target tandem test_dist nccl_selftest \
  > "$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30
  echo "gpu_check: build failed (full log: $logs/build.log)"
  exit 2
fi
echo "built"

step "NCCL tests (ctest)"
status=0
ctest --test-dir "$build" -R 'CommunicatorSelection|NcclCommunicator|NcclTraining' -V \
  > "$logs/ctest.log" 2>&1 || status=$?
grep -E "^[0-9]+/[0-9]+ Test|Skipped|SKIPPED|tests passed|FAILED|nccl_selftest:" \
  "$logs/ctest.log" || true

step "one NCCL data-parallel run (curve-parity fixture, 20 steps)"
gpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
world=$((gpus >= 2 ? 2 : 1))
run="$(mktemp -d)"
trap 'rm -rf "$run"' EXIT
fixtures="$root/tests/fixtures"
TANDEM_COMMUNICATOR=nccl TANDEM_DIST_TIMEOUT_S=120 OMP_NUM_THREADS=1 \
  mpirun --oversubscribe --allow-run-as-root -np "$world" "$build/tandem" train \
  "$fixtures/train/parity.yaml" trainer.init_from="$fixtures/train/init_hf" \
  trainer.save_folder="$run" trainer.max_steps=20 trainer.progress=false \
  evaluation.interval=0 data.micro_batch_size=2 > "$logs/nccl_train.log" 2>&1 || status=$?
grep -E "NCCL|rank\(s\)|data-parallel:|error" "$logs/nccl_train.log" || true
[[ -f "$run/metrics.jsonl" ]] && cp "$run/metrics.jsonl" "$logs/nccl_train_metrics.jsonl"

step "result"
if ((status == 0)); then
  echo "gpu_check: passed (W=$world for the run above; logs in $logs)"
else
  echo "gpu_check: FAILED (logs in $logs)"
fi
exit "$status"
