#!/usr/bin/env bash
# Data-parallel step time and communication share at W = 1, 2, 4 CPU processes (mpirun,
# oversubscribed when W exceeds the cores), then the memory per rank at W = 2, 4 with and without
# ZeRO-1 (Adam-moment bytes per rank and rank 0's peak RSS). Model: the curve-parity fixture widened to
# d_model 256 (3.17M parameters), random init, fp32, 16 instances of 64 tokens per step.
# Usage: bench/dist_step.sh [BUILD_DIR] [STEPS]; THREADS=n sets OpenMP threads per rank (default 1:
# OpenMP teams slow down badly when ranks x threads exceed the free cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-20}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
args=("$root/tests/fixtures/train/parity.yaml" model.d_model=256 model.n_heads=8
  model.n_kv_heads=4 model.hidden_size=688 data.global_batch_size=1024 data.micro_batch_size=1
  trainer.max_steps="$steps" trainer.progress=false evaluation.interval=0 trainer.peak_tflops=0.001)
printf '%-3s %-10s %-14s %s\n' W threads ms/step "collectives (% of step)"
for w in 1 2 4; do
  threads=${THREADS:-1}
  out="$tmp/w$w"
  if (( w == 1 )); then
    # Single process: the MPI communicator at W=1 would skip every collective anyway.
    OMP_NUM_THREADS=$threads "$build/tandem" train "${args[@]}" trainer.save_folder="$out" \
      > "$out.log" 2>&1
    ms=$(python3 -c "import json,sys;m=[json.loads(l) for l in open('$out/metrics.jsonl')];\
t=[1024/x['tokens_per_s'] for x in m[2:]];print(f'{1e3*sum(t)/len(t):.2f}')")
    printf '%-3s %-10s %-14s %s\n' 1 "$threads" "$ms" "0 (no collectives)"
  else
    OMP_NUM_THREADS=$threads mpirun --oversubscribe --allow-run-as-root -np $w "$build/tandem" \
      train "${args[@]}" trainer.save_folder="$out" > "$out.log" 2>&1
    line=$(grep "data-parallel:" "$out.log")
    ms=$(sed -E 's/.* ([0-9.]+) ms\/step.*/\1/' <<< "$line")
    share=$(sed -E 's/.*, ([0-9.]+)% in collectives.*/\1/' <<< "$line")
    printf '%-3s %-10s %-14s %s\n' "$w" "$threads" "$ms" "$share"
  fi
done

printf '\n%-3s %-8s %-24s %s\n' W strategy "Adam moments/rank (B)" "peak RSS rank 0 (MB)"
for w in 2 4; do
  for z in ddp zero1; do
    out="$tmp/mem-w$w-$z"
    OMP_NUM_THREADS=${THREADS:-1} mpirun --oversubscribe --allow-run-as-root -np $w \
      "$build/tandem" train "${args[@]}" trainer.max_steps=3 dist.strategy=$z \
      trainer.save_folder="$out" > "$out.log" 2>&1
    moments=$(sed -nE 's/.*Adam moments ([0-9]+) B .*/\1/p' "$out.log")
    rss=$(sed -nE 's/.*peak RSS ([0-9.]+) MB.*/\1/p' "$out.log")
    printf '%-3s %-8s %-24s %s\n' "$w" "$z" "$moments" "$rss"
  done
done
