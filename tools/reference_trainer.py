#!/usr/bin/env python3
"""PyTorch reference trainer for tandem's curve-parity test and its training benchmark.

HF transformers' Olmo3ForCausalLM (fp32, eager attention) trained with torch.optim.AdamW, OLMo-core's
own scheduler classes, OLMo-core's loss (CE sum / non-ignored labels of the batch + z-loss
1e-5 * mean(logsumexp^2)), torch's clip_grad_norm_, on exactly the batches tandem hands out
(read from `tandem data batches`), starting from the same step-0 weights (tandem's initial
checkpoint exported with `tandem convert`).

Parity mode writes (into OUT_DIR, default tests/fixtures/train):
  init_hf/                    step-0 weights (HF directory), used by both sides
  reference_losses.json       per-step loss, z-loss, grad norm, lr; package versions
  reference_final.safetensors final weights (HF names)

Usage: reference_trainer.py --tandem build/tandem --config tests/fixtures/train/parity.yaml

Run it on an otherwise idle machine: two runs of this script made under heavy CPU load were seen to
differ from each other (torch's CPU kernels split work by the threads they get), and Adam amplifies
such rounding differences to ~1e-2 in the weights over 100 steps. On an idle machine repeated runs
are bit-identical, and tandem follows them to ~1e-7 in loss and ~5e-6 in final weights.

Bench mode (bench/train_vs_reference.sh) runs the same training loop for N steps of any run config
(key=value overrides as for `tandem train`), writes nothing outside a temporary directory and prints
one JSON line: median tokens/s and seconds per step over the steps after the first, step 1's loss,
parameter count, threads and package versions.

Usage: reference_trainer.py --tandem build/tandem --config RUN.yaml --bench-steps N [--threads T]
                            [key=value ...]
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers
import yaml
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Olmo3ForCausalLM

import olmo_core

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from olmo_groups import group_overrides, torch_options  # noqa: E402
from olmo_schedulers import olmo_scheduler, scheduled_lr, trainer_durations  # noqa: E402


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where 1e-3 (no dot) is a string; tandem's yaml-cpp, like YAML 1.2,
    reads a number, and writes an override such as optim.lr=1e-3 back that way."""


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))

# A benchmark measures training only: no held-out sets, no downstream tasks.
NO_EVALUATION = ["evaluation.interval=0", "evaluation.sets=[]", "evaluation.downstream=null"]


def run(cmd, log=sys.stdout):
    print("+", " ".join(cmd), file=log)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"reference_trainer: exit status {r.returncode} from: {' '.join(cmd)}\n"
                 f"{r.stdout[-4000:]}{r.stderr[-4000:]}")
    return r.stdout


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


def export_initial_weights(tandem, config, overrides, tmp, init_hf, log=sys.stdout):
    """tandem's own step-0 weights (one tandem step with save_initial), exported to HF."""
    run([tandem, "train", config, *overrides, f"trainer.save_folder={tmp}/run",
         "trainer.max_steps=1", "trainer.max_duration=null", "trainer.hard_stop=null",
         "trainer.save_initial=true", "trainer.progress=false",
         "evaluation.interval=0"], log)
    shutil.rmtree(init_hf, ignore_errors=True)
    run([tandem, "convert", "--from", "tandem", f"{tmp}/run/checkpoints/step-000000/model",
         "--to", "hf", init_hf], log)


def global_batches(tandem, config, overrides, steps, log=sys.stdout):
    out = run([tandem, "data", "batches", config, *overrides, "--steps", str(steps)], log)
    batches = [json.loads(l)["instances"] for l in out.splitlines() if l.strip()]
    assert len(batches) == steps, (len(batches), steps)
    return batches


HF_TO_OLMO_CORE = [  # HF Olmo3 parameter names -> OLMo-core's, which group_overrides match
    (r"^model\.embed_tokens\.weight$", "embeddings.weight"),
    (r"^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight$", r"blocks.\1.attention.w_\2.weight"),
    (r"^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$", r"blocks.\1.attention.w_out.weight"),
    (r"^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight$", r"blocks.\1.attention.\2_norm.weight"),
    (r"^model\.layers\.(\d+)\.post_attention_layernorm\.weight$", r"blocks.\1.attention_norm.weight"),
    (r"^model\.layers\.(\d+)\.mlp\.gate_proj\.weight$", r"blocks.\1.feed_forward.w1.weight"),
    (r"^model\.layers\.(\d+)\.mlp\.down_proj\.weight$", r"blocks.\1.feed_forward.w2.weight"),
    (r"^model\.layers\.(\d+)\.mlp\.up_proj\.weight$", r"blocks.\1.feed_forward.w3.weight"),
    (r"^model\.layers\.(\d+)\.post_feedforward_layernorm\.weight$",
     r"blocks.\1.feed_forward_norm.weight"),
    (r"^model\.norm\.weight$", "lm_head.norm.weight"),
    (r"^lm_head\.weight$", "lm_head.w_out.weight"),
]


def olmo_core_name(hf_name):
    for pattern, replacement in HF_TO_OLMO_CORE:
        if re.match(pattern, hf_name):
            return re.sub(pattern, replacement, hf_name)
    raise ValueError(f"no OLMo-core name for HF parameter {hf_name}")


def make_optimizer(model, o):
    """torch's AdamW with tandem's (OLMo-core's) parameter groups: `group_overrides` matched
    against OLMo-core's names as fnmatch globs, each group's options (lr, weight_decay, betas,
    eps) over the optimiser's; or AI2's recipe (the embedding at 0) without it. Each group keeps
    its initial lr, as OLMo-core's does, for the schedule."""
    overrides = group_overrides(o)
    groups = [{"params": [], **torch_options(g["opts"])} for g in overrides]
    default = {"params": []}
    for name, p in model.named_parameters():
        core = olmo_core_name(name)
        matched = [i for i, g in enumerate(overrides)
                   if any(fnmatch.fnmatchcase(core, pat) for pat in g["params"])]
        (groups[matched[0]] if matched else default)["params"].append(p)
    opt = torch.optim.AdamW([g for g in groups + [default] if g["params"]],
                            lr=o["lr"], betas=tuple(o.get("betas", [0.9, 0.95])),
                            eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0.1),
                            foreach=False)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    return opt


def make_scheduler(cfg, max_tokens=None):
    """Any scheduler tandem reads (OLMo-core's classes), the global batch in tokens that a
    token-unit schedule counts, and the trainer's max_tokens where its duration is in tokens."""
    return (olmo_scheduler(dict(cfg["scheduler"])), int(cfg["data"]["global_batch_size"]),
            max_tokens)


def durations(cfg):
    """trainer_durations(cfg), or the reason this trainer cannot run it."""
    try:
        return trainer_durations(cfg)
    except ValueError as e:
        sys.exit(f"reference_trainer: {e}")


def train_step(model, opt, sched, o, ids, step, steps):
    """One optimiser step on a batch of token ids; returns the step's metrics record."""
    z_mult = o.get("z_loss_multiplier", 1e-5) or 0.0  # null: z-loss off
    max_norm = o.get("max_grad_norm", 1.0)
    if max_norm is None:  # clipping off: the norm is still measured and logged
        max_norm = float("inf")
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
    scheduler, batch_tokens, max_tokens = sched
    lr = scheduled_lr(scheduler, o["lr"], step, steps, batch_tokens, max_tokens)
    for g in opt.param_groups:
        g["lr"] = scheduled_lr(scheduler, g["initial_lr"], step, steps, batch_tokens, max_tokens)
    opt.step()
    return {"step": step, "train/loss": float(ce_sum) / count,
            "train/z_loss": z_mult * float(z_sum) / count,
            "train/grad_norm": float(norm), "lr": float(lr)}


def load_model(init_hf):
    return Olmo3ForCausalLM.from_pretrained(init_hf, attn_implementation="eager",
                                            torch_dtype=torch.float32).train()


def parity(a):
    cfg_dir = os.path.dirname(os.path.abspath(a.config))
    out = a.out or cfg_dir
    with open(a.config) as f:
        cfg = yaml.safe_load(f)
    run_steps, steps, max_tokens = durations(cfg)
    torch.set_num_threads(2)

    with tempfile.TemporaryDirectory() as tmp:
        init_hf = os.path.join(out, "init_hf")
        export_initial_weights(a.tandem, a.config, [], tmp, init_hf)
        batches = global_batches(a.tandem, a.config, [], run_steps)

    model = load_model(init_hf)
    o = cfg["optim"]
    opt = make_optimizer(model, o)
    sched = make_scheduler(cfg, max_tokens)
    read = instance_reader(cfg, cfg_dir)

    records = []
    for step, instances in enumerate(batches, start=1):
        ids = torch.from_numpy(np.stack([read(i) for i in instances]))
        records.append(train_step(model, opt, sched, o, ids, step, steps))
        if step % 10 == 0:
            print(f"step {step}: loss {records[-1]['train/loss']:.6f}")

    with open(os.path.join(out, "reference_losses.json"), "w") as f:
        json.dump({"reference": "HF Olmo3ForCausalLM + torch.optim.AdamW + olmo_core schedulers",
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "olmo_core": getattr(olmo_core, "__version__", "unknown"),
                   "steps": records}, f, indent=1)
    save_file({n: p.detach().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "reference_final.safetensors"))


def tandem_tensor(model_dir, name):
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            if name in f.keys():
                return f.get_tensor(name).float()
    raise KeyError(f"{model_dir}: no tensor {name}")


def restore_padded_vocab(model, tandem_model_dir):
    """`tandem convert --to hf` drops the embedding rows beyond the tokenizer's vocabulary, but
    tandem (like OLMo-core) trains them and its softmax spans them: put them back so that both
    sides train the same function."""
    emb = tandem_tensor(tandem_model_dir, "embeddings.weight")
    head = tandem_tensor(tandem_model_dir, "lm_head.w_out.weight")
    if emb.shape[0] == model.config.vocab_size:
        return
    model.resize_token_embeddings(emb.shape[0], mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(emb)
        model.get_output_embeddings().weight.copy_(head)


def expand_data_paths(cfg, cfg_dir):
    """Data paths may be globs: expand them in sorted order, as tandem's core/glob does."""
    paths = []
    for p in cfg["data"]["paths"]:
        full = os.path.join(cfg_dir, p)
        matched = sorted(glob.glob(full)) if glob.has_magic(full) else [full]
        if not matched:
            sys.exit(f"reference_trainer: data path {p} matches no file")
        paths += matched
    cfg["data"]["paths"] = paths


def bench(a):
    steps = a.bench_steps
    if steps < 2:
        sys.exit("reference_trainer: --bench-steps needs at least 2 (step 1 is a warm-up)")
    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or len(
        os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    cfg_dir = os.path.dirname(os.path.abspath(a.config))
    # The step-0 checkpoint must outlive the final one that the one-step run writes.
    init_overrides = list(a.overrides) + NO_EVALUATION + ["trainer.keep_last=2"]

    with tempfile.TemporaryDirectory() as tmp:
        init_hf = os.path.join(tmp, "init_hf")
        export_initial_weights(a.tandem, a.config, init_overrides, tmp, init_hf, sys.stderr)
        # The run's own resolved config: the file with every override applied (relative paths
        # in it are still relative to the original config's directory).
        with open(os.path.join(tmp, "run", "config.yaml")) as f:
            cfg = yaml.load(f, Loader=Yaml12Loader)
        batches = global_batches(a.tandem, a.config, list(a.overrides), steps, sys.stderr)
        model = load_model(init_hf)
        restore_padded_vocab(model, os.path.join(tmp, "run", "checkpoints", "step-000000", "model"))

    expand_data_paths(cfg, cfg_dir)
    o = cfg["optim"]
    opt = make_optimizer(model, o)
    sched = make_scheduler(cfg)
    read = instance_reader(cfg, cfg_dir)

    seconds, tokens, records = [], [], []
    for step, instances in enumerate(batches, start=1):
        t0 = time.perf_counter()
        ids = torch.from_numpy(np.stack([read(i) for i in instances]))
        records.append(train_step(model, opt, sched, o, ids, step, steps))
        seconds.append(time.perf_counter() - t0)
        tokens.append(ids.numel())
        print(f"reference step {step}/{steps}: loss {records[-1]['train/loss']:.6f}, "
              f"{seconds[-1]:.2f} s", file=sys.stderr)

    measured = range(1, steps)  # step 1 is a warm-up (allocations, first-touch, thread start)
    print(json.dumps({
        "reference": "HF Olmo3ForCausalLM + torch.optim.AdamW + olmo_core schedulers",
        "steps": steps, "measured_steps": len(measured),
        "tokens_per_step": tokens[0],
        "tokens_per_s": statistics.median(tokens[i] / seconds[i] for i in measured),
        "step_s": statistics.median(seconds[i] for i in measured),
        "step_seconds": seconds,
        "step1_loss": records[0]["train/loss"],
        "params": sum(p.numel() for p in model.parameters()),
        "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", default=None, help="parity mode: where the fixtures go")
    ap.add_argument("--bench-steps", type=int, default=0,
                    help="bench mode: train this many steps, write nothing, print one JSON line")
    ap.add_argument("--threads", type=int, default=0,
                    help="bench mode: torch threads (default: OMP_NUM_THREADS, else the cores)")
    ap.add_argument("overrides", nargs="*", help="bench mode: key=value config overrides")
    a = ap.parse_args()
    if a.bench_steps:
        bench(a)
    else:
        if a.overrides or a.threads:
            ap.error("overrides and --threads are for --bench-steps only")
        parity(a)


if __name__ == "__main__":
    main()
