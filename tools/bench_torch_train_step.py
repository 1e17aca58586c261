#!/usr/bin/env python3
"""PyTorch peer for bench/train_step: HF transformers' Olmo3ForCausalLM (eager attention) doing
the same training step (forward + backward of the next-token loss) on the same shapes, in fp32,
under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights, bf16 matmuls), or with the whole
model cast by model.to(torch.bfloat16).

Usage: bench_torch_train_step.py --config MODEL.yaml --batch B --seq T --steps N --threads K
                                 [--dtype fp32|autocast|bf16]
Prints one JSON line: {"tokens_per_s", "step_s", "peak_rss_mib", "dtype", "torch", "transformers"}.
"""
import argparse
import contextlib
import json
import time

import torch
import transformers
import yaml
from transformers import Olmo3Config, Olmo3ForCausalLM


def hf_config(m, attn="eager", min_positions=0):
    """Olmo3Config of a tandem model config (YAML dict); `min_positions` raises
    max_position_embeddings for benchmarks at longer sequences."""
    sw = m.get("sliding_window") or {}
    pattern = sw.get("pattern")
    n = m["n_layers"]
    if pattern:
        # OLMo-core's SlidingWindowAttentionConfig: a forced-full first layer shifts the pattern.
        first = sw.get("force_full_attention_on_first_layer", True)
        windows = [pattern[(i - 1 if first else i) % len(pattern)] for i in range(n)]
        if first:
            windows[0] = -1
        if sw.get("force_full_attention_on_last_layer", True):
            windows[-1] = -1
        window = max(w for w in windows if w > 0) if any(w > 0 for w in windows) else 4096
        types = ["sliding_attention" if w > 0 else "full_attention" for w in windows]
    else:
        window, types = 4096, ["full_attention"] * n
    vocab = m["vocab_size"]
    mult = m.get("pad_vocab_to_multiple_of", 128)
    vocab = m.get("embedding_size", (vocab + mult - 1) // mult * mult)
    theta = float(m.get("rope_theta", 500000))
    return Olmo3Config(
        hidden_size=m["d_model"], num_hidden_layers=n, num_attention_heads=m["n_heads"],
        num_key_value_heads=m.get("n_kv_heads", m["n_heads"]),
        head_dim=m.get("head_dim", m["d_model"] // m["n_heads"]),
        intermediate_size=m["hidden_size"], vocab_size=vocab, sliding_window=window,
        layer_types=types, rms_norm_eps=float(m.get("layer_norm_eps", 1e-5)),
        rope_parameters={t: {"rope_type": "default", "rope_theta": theta}
                         for t in ("sliding_attention", "full_attention")},
        max_position_embeddings=max(m.get("max_sequence_length", 8192), min_positions),
        attn_implementation=attn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["fp32", "autocast", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.config) as f:
        m = yaml.safe_load(f)["model"]
    model = Olmo3ForCausalLM(hf_config(m)).float().train()
    if a.dtype == "bf16":
        model.to(torch.bfloat16)
    ids = torch.randint(0, m["vocab_size"], (a.batch, a.seq))

    def step():
        model.zero_grad(set_to_none=False)
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if a.dtype == "autocast"
               else contextlib.nullcontext())
        with ctx:
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()

    # Peak memory of the steps alone (Linux resets VmHWM on "5" to clear_refs), as the C++ bench.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    peak_rss_mib = next(int(line.split()[1]) for line in open("/proc/self/status")
                        if line.startswith("VmHWM:")) / 1024.0
    print(json.dumps({"tokens_per_s": a.batch * a.seq / dt, "step_s": dt,
                      "peak_rss_mib": peak_rss_mib, "dtype": a.dtype,
                      "torch": torch.__version__, "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
