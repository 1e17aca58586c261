#!/usr/bin/env bash
# The bf16-vs-fp32 curve check of docs/precision.md: the default job's stage-1 model trained for
# 200 steps of 1,024 tokens (8 instances of 128) from the same step-0 weights on the same batches,
# once per precision, held-out loss every 50 steps; then docs/images/precision_bf16_vs_fp32.png and
# the final losses' relative differences (the bound is 1 %). About 30 minutes on 2 cores.
# Env: TANDEM_DATA_DIR (tokens from scripts/run_default.sh), RUNS (default: runs/precision),
#      PYTHON (with matplotlib; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
tokens="${TANDEM_DATA_DIR:-$(pwd)/.cache/data}/tokens"
runs="${RUNS:-runs/precision}"
[[ -d "$tokens/stage1" ]] || { echo "no tokens in $tokens: run scripts/run_default.sh first" >&2; exit 2; }
for p in fp32 bf16; do
  rm -rf "$runs/$p"
  "${TANDEM_BUILD_DIR:-build}/tandem" train configs/demo/olmo3-demo-stage1.yaml \
    "data.paths=[$tokens/stage1/*.npy]" \
    "evaluation.sets=[{name: heldout-val, paths: [$tokens/heldout-val/*.npy]}]" \
    evaluation.downstream=null evaluation.interval=50 \
    "trainer.save_folder=$runs/$p" trainer.max_steps=200 trainer.save_interval=200 \
    trainer.progress=false data.sequence_length=128 data.global_batch_size=1024 "precision=$p"
done
"${PYTHON:-python3}" tools/plot_precision_curves.py "$runs/fp32" "$runs/bf16" \
  docs/images/precision_bf16_vs_fp32.png
