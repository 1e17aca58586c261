#!/usr/bin/env bash
# fp32 against bf16 on one model config, each in its own process (peak memory is per process):
# tandem's training step (forward + backward) tokens/s, peak RSS, saved-activation and
# compute-weight bytes; with torch + transformers importable, HF Olmo3's same step in fp32, under
# torch.autocast(cpu, bfloat16) and with model.to(bfloat16) on the same machine in the same run.
# Writes one JSON object per precision to OUT (default: build/bench-precision.jsonl) and prints the
# ratios.
#
# Usage: bench/precision.sh [CONFIG] [BATCH] [SEQ] [STEPS]
#   bench/precision.sh configs/models/olmo3-100m.yaml 4 512 3
# Env: PYTHON (for the torch peers: its directory goes first on PATH), TANDEM_BUILD_DIR, OUT.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
config="${1:-configs/models/olmo3-100m.yaml}"
batch="${2:-4}"
seq="${3:-512}"
steps="${4:-3}"
out="${OUT:-${TANDEM_BUILD_DIR:-build}/bench-precision.jsonl}"
bench="${TANDEM_BUILD_DIR:-build}/bench/bench_train_step"
[[ -x "$bench" ]] || { echo "build first: $bench is missing" >&2; exit 2; }
if [[ -n "${PYTHON:-}" ]]; then PATH="$(dirname "$PYTHON"):$PATH"; fi
: > "$out"
for p in fp32 bf16; do
  "$bench" --config "$config" --batch "$batch" --seq "$seq" --steps "$steps" --precision "$p" |
    tee /dev/stderr | tail -1 >> "$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = {r["precision"]: r for r in map(json.loads, open(sys.argv[1]))}
f, b = rows["fp32"], rows["bf16"]
print(f"bf16 / fp32: tokens/s {b['tandem_tokens_per_s'] / f['tandem_tokens_per_s']:.3f}, "
      f"peak RSS {b['tandem_peak_rss_mib']:.0f} / {f['tandem_peak_rss_mib']:.0f} MiB, "
      f"saved activations {b['tandem_activation_bytes'] / f['tandem_activation_bytes']:.3f}x")
for mode, row in (("fp32", f), ("autocast", b), ("bf16", b)):
    key = f"torch_{mode}_tokens_per_s"
    if key in row:
        print(f"tandem {row['precision']} vs torch {mode}: {row[key]:.0f} tokens/s, "
              f"peak RSS {row[f'torch_{mode}_peak_rss_mib']:.0f} MiB; "
              f"tandem {row['tandem_tokens_per_s'] / row[key]:.2f}x")
PY
