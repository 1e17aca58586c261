#!/usr/bin/env python3
"""GPU peer for bench_gpu_train_step (bench/gpu_check.sh): HF transformers' Olmo3ForCausalLM doing a
full training step on the same model config, batch and sequence length: forward + backward of the
next-token loss under bf16 autocast with fp32 master weights (the precision policy tandem's bf16
mode follows), torch's fused AdamW, gradient clipping. Tries the attention implementations that
can run here, fastest first, and reports each; torch.compile is tried when --compile is given and
the compile finishes within --compile-budget seconds.

Usage: bench_hf_gpu_train_step.py --config MODEL.yaml [--batch 1] [--seq 8192] [--steps 5]
         [--attn flex_attention,sdpa,eager] [--compile] [--json OUT]
Prints one JSON object per attention implementation tried and a summary line (JSON) last.
"""
import argparse
import json
import sys
import time
import traceback

import torch
import transformers
import yaml
from transformers import Olmo3ForCausalLM

import bench_torch_train_step  # tools/ is the script's folder, so on sys.path


def hf_config(m, attn):
    # The CPU peer's config builder; sequences of up to 8192 whatever the YAML's limit.
    return bench_torch_train_step.hf_config(m, attn, min_positions=8192)


def run(m, attn, a, compile_model):
    torch.manual_seed(0)
    model = Olmo3ForCausalLM(hf_config(m, attn)).cuda().float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    ids = torch.randint(0, m["vocab_size"], (a.batch, a.seq), device="cuda")
    fwd = torch.compile(model) if compile_model else model

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(2):  # warm-up (and compilation)
        step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        loss = step()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    dt = times[len(times) // 2]
    out = {"attn_implementation": attn, "compiled": compile_model, "step_s_median": dt,
           "tokens_per_s": a.batch * a.seq / dt, "warmup_s": warmup_s,
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
           "loss": float(loss.item())}
    del model, opt, fwd
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--attn", default="flex_attention,sdpa,eager")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.config) as f:
        m = yaml.safe_load(f)["model"]
    results = []
    for attn in a.attn.split(","):
        for compiled in ([False, True] if a.compile else [False]):
            try:
                r = run(m, attn, a, compiled)
            except Exception as e:  # an implementation that cannot run here is reported, not fatal
                r = {"attn_implementation": attn, "compiled": compiled,
                     "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
                traceback.print_exc(file=sys.stderr)
                torch.cuda.empty_cache()
            print(json.dumps(r), flush=True)
            results.append(r)
    ok = [r for r in results if "tokens_per_s" in r]
    best = max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "gpu": torch.cuda.get_device_name(), "batch": a.batch, "seq": a.seq,
               "config": a.config, "results": results, "best": best}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
