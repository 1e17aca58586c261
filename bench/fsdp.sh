#!/usr/bin/env bash
# FSDP (dist.strategy fsdp) on the ~116M-parameter benchmark config (configs/bench/olmo3-100m-train.yaml,
# fp32, 4 instances of 512 tokens per step, micro-batches of 1 instance so every W runs the same
# activations), at W = 1, 2, 4 CPU processes (mpirun, oversubscribed past the cores):
#   1. memory per rank (rank 0, which holds the largest shard): what allocating the parameters,
#      gradients and Adam moments added to the process's resident memory (the trainer's
#      "resident memory of parameters, gradients and Adam moments" line) against the replicated
#      run's, the run's peak RSS, and `tandem plan`'s backend total against the backend peak the
#      trainer measures in its first step;
#   2. step time and the communication share at W = 2, 4 with dist.prefetch true and false, from the
#      trainer's own timers ("in collectives": the training thread inside or waiting for
#      collectives; "unit collectives": time inside the shard group's collectives on any thread),
#      on the 116M config and on bench/dist_step.sh's 3.17M widening of the curve-parity model
#      (16 instances of 64 tokens, micro-batches of 1: many small collectives).
# OpenMPI's waiting ranks yield their core (OMPI_MCA_mpi_yield_when_idle=1, the default here):
# busy-polling ranks and communication threads otherwise starve the compute on a machine with
# fewer free cores than threads.
# Usage: bench/fsdp.sh [BUILD_DIR] [STEPS] (default 3 steps; the first is not excluded).
# ONLY=memory or ONLY=time runs one part. OMPI_MCA_* variables pass through to mpirun.
# The data: the benchmark config's stage-1 tokens (scripts/fetch_data.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-3}"
tmp="$(mktemp -d)"
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
trap 'rm -rf "$tmp"' EXIT
config="$root/configs/bench/olmo3-100m-train.yaml"
args=("$config" data.micro_batch_size=1 trainer.max_steps="$steps" trainer.progress=false
  trainer.peak_tflops=0.001)
small=("$root/tests/fixtures/train/parity.yaml" model.d_model=256 model.n_heads=8 model.n_kv_heads=4
  model.hidden_size=688 data.global_batch_size=1024 data.micro_batch_size=1 trainer.max_steps=15
  trainer.progress=false evaluation.interval=0 trainer.peak_tflops=0.001)

run() {  # run W OUT EXTRA...
  local w=$1 out=$2
  shift 2
  OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np "$w" "$build/tandem" train \
    "${args[@]}" trainer.save_folder="$out" "$@" > "$out.log" 2>&1
}
field() { sed -nE "s/$1/\\1/p" "$2" | head -1; }

if [[ ${ONLY:-} != time ]]; then
  printf '%-3s %-8s %-20s %-22s %-20s %-20s %s\n' W strategy "state RSS/rank (MB)" \
    "vs replicated (1/W)" "peak RSS rank 0 (MB)" "plan backend (B)" "measured backend peak (B)"
  base=""
  for spec in "1 ddp" "1 fsdp" "2 fsdp" "4 fsdp"; do
    read -r w s <<< "$spec"
    out="$tmp/mem-$w-$s"
    run "$w" "$out" dist.strategy="$s"
    state=$(field '.*resident memory of parameters, gradients and Adam moments per rank: ([0-9.]+) MB.*' "$out.log")
    peak=$(field '.*peak RSS ([0-9.]+) MB.*' "$out.log")
    measured=$(field '.*after the first step: [0-9]+ B \([0-9.]+ MiB\) held, peak ([0-9]+) B.*' "$out.log")
    planned=$("$build/tandem" plan "$config" data.micro_batch_size=1 --device cpu --json \
      --world-size "$w" --strategy "$s" | python3 -c "import json,sys;print(int(json.load(sys.stdin)['memory_backend']))")
    if [[ $s == ddp ]]; then base=$state; fi
    ratio=$(python3 -c "print(f'{$state/$base:.3f} ({1/$w:.3f})')")
    printf '%-3s %-8s %-20s %-22s %-20s %-20s %s\n' "$w" "$s" "$state" "$ratio" "${peak:--}" \
      "$planned" "$measured"
  done
fi

[[ ${ONLY:-} == memory ]] && exit 0
printf '\n%-6s %-3s %-9s %-12s %-22s %s\n' model W prefetch ms/step "in collectives (%)" \
  "unit collectives (%)"
for model in 116M 3.17M; do
  for w in 2 4; do
    for pf in true false; do
      out="$tmp/time-$model-$w-$pf"
      if [[ $model == 116M ]]; then
        run "$w" "$out" dist.strategy=fsdp dist.prefetch=$pf
      else
        OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np "$w" "$build/tandem" \
          train "${small[@]}" dist.strategy=fsdp dist.prefetch=$pf trainer.save_folder="$out" \
          > "$out.log" 2>&1
      fi
      line=$(grep "data-parallel:" "$out.log")
      ms=$(sed -E 's/.* ([0-9.]+) ms\/step.*/\1/' <<< "$line")
      share=$(sed -E 's/.*, ([0-9.]+)% in collectives.*/\1/' <<< "$line")
      unit=$(sed -E 's/.*unit collectives ([0-9.]+)% .*/\1/' <<< "$line")
      printf '%-6s %-3s %-9s %-12s %-22s %s\n' "$model" "$w" "$pf" "$ms" "$share" "$unit"
    done
  done
done
