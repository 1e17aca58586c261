#!/usr/bin/env python3
"""PyTorch reference trainer for tandem's curve-parity test.

HF transformers' Olmo3ForCausalLM (fp32, eager attention) trained with torch.optim.AdamW, OLMo-core's
own scheduler classes, OLMo-core's loss (CE sum / non-ignored labels of the batch + z-loss
1e-5 * mean(logsumexp^2)), torch's clip_grad_norm_, on exactly the batches tandem hands out
(read from `tandem data batches`), starting from the same step-0 weights (tandem's initial
checkpoint exported with `tandem convert`).

Writes (into OUT_DIR, default tests/fixtures/train):
  init_hf/                    step-0 weights (HF directory), used by both sides
  reference_losses.json       per-step loss, z-loss, grad norm, lr; package versions
  reference_final.safetensors final weights (HF names)

Usage: reference_trainer.py --tandem build/tandem --config tests/fixtures/train/parity.yaml

Run it on an otherwise idle machine: two runs of this script made under heavy CPU load were seen to
differ from each other (torch's CPU kernels split work by the threads they get), and Adam amplifies
such rounding differences to ~1e-2 in the weights over 100 steps. On an idle machine repeated runs
are bit-identical, and tandem follows them to ~1e-7 in loss and ~5e-6 in final weights.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import torch
import transformers
import yaml
from safetensors.torch import save_file
from transformers import Olmo3ForCausalLM

import olmo_core
from olmo_core.optim import scheduler as olmo_sched

SCHEDULERS = {
    "cos_with_warmup": olmo_sched.CosWithWarmup,
    "linear_with_warmup": olmo_sched.LinearWithWarmup,
    "half_cos_with_warmup": olmo_sched.HalfCosWithWarmup,
    "wsd": olmo_sched.WSD,
}


def run(cmd):
    print("+", " ".join(cmd))
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def instance_reader(cfg, cfg_dir):
    """Global instance id -> tokens, as OLMo-core's NumpyFSLDataset lays instances out."""
    data = cfg["data"]
    seq = data["sequence_length"]
    dtype = np.dtype(data.get("dtype", "uint16" if data["vocab_size"] <= 65536 else "uint32"))
    arrays = [np.memmap(os.path.join(cfg_dir, p), dtype=dtype, mode="r") for p in data["paths"]]
    counts = [len(a) // seq for a in arrays]
    starts = np.cumsum([0] + counts)

    def read(i):
        f = int(np.searchsorted(starts, i, side="right") - 1)
        local = i - starts[f]
        return np.asarray(arrays[f][local * seq:(local + 1) * seq], dtype=np.int64)

    return read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cfg_dir = os.path.dirname(os.path.abspath(a.config))
    out = a.out or cfg_dir
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    steps = cfg["trainer"]["max_steps"]
    torch.set_num_threads(2)

    with tempfile.TemporaryDirectory() as tmp:
        # Step-0 weights from tandem's own initialisation, exported to HF.
        run([a.tandem, "train", a.config, f"trainer.save_folder={tmp}/run", "trainer.max_steps=1",
             "trainer.save_initial=true", "trainer.progress=false", "evaluation.interval=0"])
        init_hf = os.path.join(out, "init_hf")
        shutil.rmtree(init_hf, ignore_errors=True)
        run([a.tandem, "convert", "--from", "tandem", f"{tmp}/run/checkpoints/step-000000/model",
             "--to", "hf", init_hf])
        batches_out = run([a.tandem, "data", "batches", a.config, "--steps", str(steps)])
    batches = [json.loads(l)["instances"] for l in batches_out.splitlines() if l.strip()]
    assert len(batches) == steps, (len(batches), steps)

    model = Olmo3ForCausalLM.from_pretrained(init_hf, attn_implementation="eager",
                                             torch_dtype=torch.float32).train()
    o = cfg["optim"]
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name == "model.embed_tokens.weight" else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.get("weight_decay", 0.1)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=tuple(o.get("betas", [0.9, 0.95])),
                            eps=o.get("eps", 1e-8), foreach=False)
    sched_cfg = dict(cfg["scheduler"])
    sched = SCHEDULERS[sched_cfg.pop("name")](**sched_cfg)
    z_mult = o.get("z_loss_multiplier", 1e-5)
    max_norm = o.get("max_grad_norm", 1.0)
    read = instance_reader(cfg, cfg_dir)

    records = []
    for step, instances in enumerate(batches, start=1):
        ids = torch.from_numpy(np.stack([read(i) for i in instances]))
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = ids[:, 1:]
        logits = model(input_ids=ids).logits.float()
        flat, lab = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
        mask = lab != -100
        count = int(mask.sum())
        ce_sum = torch.nn.functional.cross_entropy(flat, lab, ignore_index=-100, reduction="sum")
        lse = torch.logsumexp(flat[mask], dim=-1)
        z_sum = (lse ** 2).sum()
        loss = (ce_sum + z_mult * z_sum) / count
        opt.zero_grad(set_to_none=False)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        lr = sched.get_lr(o["lr"], step, steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        records.append({"step": step, "train/loss": float(ce_sum) / count,
                        "train/z_loss": z_mult * float(z_sum) / count,
                        "train/grad_norm": float(norm), "lr": float(lr)})
        if step % 10 == 0:
            print(f"step {step}: loss {records[-1]['train/loss']:.6f}")

    with open(os.path.join(out, "reference_losses.json"), "w") as f:
        json.dump({"reference": "HF Olmo3ForCausalLM + torch.optim.AdamW + olmo_core schedulers",
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "olmo_core": getattr(olmo_core, "__version__", "unknown"),
                   "steps": records}, f, indent=1)
    save_file({n: p.detach().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "reference_final.safetensors"))


if __name__ == "__main__":
    main()
