#!/usr/bin/env bash
# Training throughput of tandem against the PyTorch reference trainer (tools/reference_trainer.py
# --bench-steps: HF Olmo3 + torch AdamW + OLMo-core schedule, z-loss, clipping) on the same run
# config, the same batches, the same step-0 weights and the same thread count, in one run on one
# machine. tandem's tokens/s and MFU are the medians over the steps after the first (from its
# metrics.jsonl); the reference's tokens/s likewise. Evaluation is off on both sides; tandem writes
# only the final checkpoint it always writes, into a temporary run directory.
#
# Usage: bench/train_vs_reference.sh CONFIG [STEPS] [key=value ...]
#   bench/train_vs_reference.sh configs/demo/olmo3-demo-stage1.yaml 5
#   bench/train_vs_reference.sh configs/bench/olmo3-100m-train.yaml 5
# Env: THREADS (default: OMP_NUM_THREADS, else the core count), TANDEM_BUILD_DIR (default: build),
#      PYTHON (default: python3). Configs that read the demo corpus (.cache/data/tokens/<part>) get
#      it fetched and tokenized first if it is missing, as scripts/run_default.sh does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ $# -lt 1 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi
config="$(realpath "$1")"
shown="$1"
shift
steps=5
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  steps="$1"
  shift
fi
overrides=("$@")
(( steps >= 2 )) || { echo "STEPS must be at least 2 (step 1 is a warm-up)" >&2; exit 2; }
threads="${THREADS:-${OMP_NUM_THREADS:-$(nproc)}}"
python="${PYTHON:-python3}"
build="${TANDEM_BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
tandem="$build/tandem"
[[ -x "$tandem" ]] || { echo "no $tandem: build it first (bash scripts/build.sh)" >&2; exit 1; }

# The demo corpus, tokenized into the parts the config names, exactly as run_default.sh makes it.
cache="$root/.cache/data"
while read -r part; do
  if ! compgen -G "$cache/tokens/$part/*.npy" > /dev/null; then
    TANDEM_DATA_DIR="$cache" bash "$root/scripts/fetch_data.sh" >&2
    "$tandem" data tokenize --tokenizer "$cache/tokenizers/allenai_dolma2.json" \
      --out "$cache/tokens/$part" --no-progress "$cache/corpus/$part.jsonl" >&2
  fi
done < <(grep -o '\.cache/data/tokens/[A-Za-z0-9_-]*' "$config" | sed 's#.*/##' | sort -u)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
no_eval=(evaluation.interval=0 'evaluation.sets=[]' evaluation.downstream=null)

echo "tandem: $steps steps of $shown, $threads threads" >&2
if ! OMP_NUM_THREADS="$threads" "$tandem" train "$config" "${overrides[@]}" \
  trainer.save_folder="$tmp/tandem" trainer.max_steps="$steps" trainer.max_duration=null \
  trainer.hard_stop=null trainer.save_interval=0 \
  trainer.keep_last=1 trainer.save_initial=false trainer.progress=false "${no_eval[@]}" \
  > "$tmp/tandem.log" 2>&1; then
  cat "$tmp/tandem.log" >&2
  exit 1
fi

reference=none
if "$python" -c "import torch, transformers, olmo_core, yaml, safetensors" 2> /dev/null; then
  echo "reference: $steps steps of the same config, $threads threads" >&2
  if OMP_NUM_THREADS="$threads" "$python" "$root/tools/reference_trainer.py" --tandem "$tandem" \
    --config "$config" --bench-steps "$steps" --threads "$threads" "${overrides[@]}" \
    > "$tmp/reference.json" 2> "$tmp/reference.log"; then
    reference="$tmp/reference.json"
  else
    cat "$tmp/reference.log" >&2
    exit 1
  fi
else
  echo "reference: torch/transformers/ai2-olmo-core not importable with $python; tandem only" >&2
fi

"$python" - "$shown" "$tmp/tandem" "$tmp/tandem.log" "$reference" "$threads" <<'PY'
import json, re, statistics, sys

config, run_dir, log_path, ref_path, threads = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl")]
measured = rows[1:]  # step 1 is a warm-up
tps = statistics.median(r["tokens_per_s"] for r in measured)
mfu = statistics.median(r["mfu"] for r in measured)
tokens_per_step = rows[0]["tokens"]
m = re.search(r"training (\d+) parameters", open(log_path).read())
params = int(m.group(1)) if m else 0


def flops_per_token(cfg):
    """Mirrors ModelConfig::flops_per_token (model_config.cc): 6 x matmul parameters (lm_head
    included) + 12 x the attention span of every layer."""
    mc, seq = cfg["model"], cfg["data"]["sequence_length"]
    d, n, heads = mc["d_model"], mc["n_layers"], mc["n_heads"]
    kv, hd = mc.get("n_kv_heads", heads), mc.get("head_dim", d // heads)
    mult = mc.get("pad_vocab_to_multiple_of", 128)
    emb = mc.get("embedding_size", (mc["vocab_size"] + mult - 1) // mult * mult)
    matmul = n * (2 * d * heads * hd + 2 * d * kv * hd + 3 * d * mc["hidden_size"]) + emb * d
    sw = mc.get("sliding_window")
    windows = [0] * n
    if sw:
        # OLMo-core's SlidingWindowAttentionConfig: a forced-full first layer shifts the pattern.
        p, first = sw["pattern"], sw.get("force_full_attention_on_first_layer", True)
        windows = [max(p[(i - 1 if first else i) % len(p)], 0) for i in range(n)]
        if first:
            windows[0] = 0
        if sw.get("force_full_attention_on_last_layer", True):
            windows[-1] = 0
    span = sum(seq if w == 0 else min(w, seq) for w in windows)
    return 6.0 * matmul + 12.0 * heads * hd * span


try:
    import yaml
    fpt = flops_per_token(yaml.safe_load(open(f"{run_dir}/config.yaml")))
    peak_gflops = statistics.median(fpt * r["tokens_per_s"] / r["mfu"] / 1e9 for r in measured)
except ImportError:
    fpt = peak_gflops = None

ref = json.load(open(ref_path)) if ref_path != "none" else None
out = {"config": config, "steps": len(rows), "measured_steps": len(measured), "threads": int(threads),
       "tokens_per_step": tokens_per_step, "params": params,
       "tandem": {"tokens_per_s": tps, "mfu": mfu, "step_s": tokens_per_step / tps,
                  "peak_gflops": peak_gflops, "step1_loss": rows[0]["train/loss"]},
       "reference": None, "tandem_over_reference": None}
print(f"{config}: {params:,} parameters, {tokens_per_step:,} tokens/step, "
      f"{len(rows)} steps (medians over steps 2-{len(rows)}), {threads} threads")
print(f"{'':<20}{'tokens/s':>12}{'s/step':>10}{'MFU':>9}")
print(f"{'tandem':<20}{tps:>12,.0f}{tokens_per_step / tps:>10.2f}{100 * mfu:>8.1f}%")
if ref:
    ref_mfu = mfu * ref["tokens_per_s"] / tps  # same FLOPs per token, same peak
    out["reference"] = {k: ref[k] for k in ("tokens_per_s", "step_s", "step1_loss", "params",
                                             "max_rss_gib", "threads", "torch", "transformers")}
    out["reference"]["mfu"] = ref_mfu
    out["tandem_over_reference"] = tps / ref["tokens_per_s"]
    print(f"{'PyTorch reference':<20}{ref['tokens_per_s']:>12,.0f}{ref['step_s']:>10.2f}"
          f"{100 * ref_mfu:>8.1f}%")
    print(f"{'tandem / reference':<20}{tps / ref['tokens_per_s']:>11.2f}x")
if peak_gflops:
    print(f"MFU peak: {peak_gflops:.1f} GFLOP/s (tandem's stated hardware peak, all ranks), "
          f"{fpt / 1e6:.1f} MFLOP/token")
if ref:
    print(f"reference: torch {ref['torch']}, transformers {ref['transformers']}, "
          f"{ref['threads']} threads, peak RSS {ref['max_rss_gib']:.1f} GiB")
    # Same weights and first batch: step 1's loss must agree, else the two sides differ in work.
    diff = abs(rows[0]["train/loss"] - ref["step1_loss"])
    print(f"step-1 loss: tandem {rows[0]['train/loss']:.7f}, reference {ref['step1_loss']:.7f} "
          f"(|diff| {diff:.1e})")
    if params != ref["params"]:
        print(f"warning: parameter counts differ (tandem {params}, reference {ref['params']})")
    if diff > 1e-4:
        print("warning: step-1 losses differ by more than 1e-4: the two runs do not train the "
              "same model on the same batch")
print(json.dumps(out))
PY
