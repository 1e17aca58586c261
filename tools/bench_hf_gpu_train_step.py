#!/usr/bin/env python3
"""GPU peer for bench_gpu_train_step (bench/gpu_check.sh): HF transformers' Olmo3ForCausalLM doing a
full training step on the same model config, batch and sequence length: forward + backward of the
next-token loss under bf16 autocast with fp32 master weights (the precision policy tandem's bf16
mode follows), torch's fused AdamW, gradient clipping. Tries each attention implementation given,
eager modules, torch.compile'd or both (--compiled), and reports each; the fastest is `best`.

A compiled candidate compiles during its two warm-up steps; --compile-budget S abandons a compile
still running after S seconds (reported as an error, the next candidate runs), so that the device
check can give torch.compile the time it has left and no more. The JSON file is rewritten after
every candidate (with `running` naming the one under way), so a run its caller cuts short still
leaves the finished candidates' results.

Usage: bench_hf_gpu_train_step.py --config MODEL.yaml [--batch 1] [--seq 8192] [--steps 5]
         [--attn flex_attention,sdpa,eager] [--compiled no|yes|both] [--compile-budget S]
         [--device cuda] [--json OUT]
--device cpu rehearses the script without a GPU (small configs: it is the same code path, with
host timers and no device memory figure).
Prints one JSON object per candidate and the summary (JSON) last.
"""
import argparse
import json
import signal
import sys
import time
import traceback

import torch
import transformers
import yaml
from transformers import Olmo3ForCausalLM

import bench_torch_train_step  # tools/ is the script's folder, so on sys.path


class CompileBudgetSpent(Exception):
    pass


def hf_config(m, attn):
    # The CPU peer's config builder; sequences of up to 8192 whatever the YAML's limit.
    return bench_torch_train_step.hf_config(m, attn, min_positions=8192)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(device, fn):
    """Seconds fn() takes on the device: CUDA events there, the host clock on the CPU."""
    if device.type == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = fn()
        e.record()
        torch.cuda.synchronize()
        return out, s.elapsed_time(e) / 1e3
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(m, attn, a, compile_model, device):
    torch.manual_seed(0)
    model = Olmo3ForCausalLM(hf_config(m, attn)).to(device).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    ids = torch.randint(0, m["vocab_size"], (a.batch, a.seq), device=device)
    fwd = torch.compile(model) if compile_model else model

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    budget = a.compile_budget if compile_model else 0
    if budget > 0:
        def spent(*_):
            raise CompileBudgetSpent(f"torch.compile did not finish within {budget} s")
        previous = signal.signal(signal.SIGALRM, spent)
        signal.alarm(budget)
    try:
        for _ in range(2):  # warm-up (and compilation)
            step()
        synchronize(device)
    finally:
        if budget > 0:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    warmup_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        loss, dt = timed(device, step)
        times.append(dt)
    times.sort()
    dt = times[len(times) // 2]
    out = {"attn_implementation": attn, "compiled": compile_model, "step_s_median": dt,
           "tokens_per_s": a.batch * a.seq / dt, "warmup_s": warmup_s,
           "peak_memory_gib": (torch.cuda.max_memory_allocated() / 2**30
                               if device.type == "cuda" else None),
           "loss": float(loss.item())}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--attn", default="flex_attention,sdpa,eager")
    ap.add_argument("--compiled", choices=("no", "yes", "both"), default="no",
                    help="eager modules (no), torch.compile'd (yes) or each both ways")
    ap.add_argument("--compile-budget", type=int, default=0,
                    help="seconds a compiled candidate's warm-up may take (0: no limit)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    a = ap.parse_args()
    device = torch.device(a.device)
    with open(a.config) as f:
        m = yaml.safe_load(f)["model"]
    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
               "device": str(device), "batch": a.batch, "seq": a.seq, "config": a.config,
               "results": [], "best": None}

    def write(running=None):
        ok = [r for r in summary["results"] if "tokens_per_s" in r]
        summary["best"] = max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
        summary["running"] = running
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=2)

    compiled = {"no": [False], "yes": [True], "both": [False, True]}[a.compiled]
    for attn in a.attn.split(","):
        for compile_model in compiled:
            write(running={"attn_implementation": attn, "compiled": compile_model})
            try:
                r = run(m, attn, a, compile_model, device)
            except Exception as e:  # an implementation that cannot run here is reported, not fatal
                first_line = str(e).splitlines()[0] if str(e) else ""
                r = {"attn_implementation": attn, "compiled": compile_model,
                     "error": f"{type(e).__name__}: {first_line}"[:300]}
                traceback.print_exc(file=sys.stderr)
            if compile_model:
                torch._dynamo.reset()  # drops the compiled graphs (and the model they hold)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(json.dumps(r), flush=True)
            summary["results"].append(r)
    write()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
