#!/usr/bin/env python3
"""Writes bf16 model parity fixtures from HF transformers' Olmo3ForCausalLM cast to bf16.

Three small configs (gqa: GQA; window: sliding window smaller than the sequence; deep: 6 layers,
GQA, head_dim != d_model / heads), each first trained briefly in fp32 (AdamW, 150 steps) on a
sparse Markov chain so that its next-token distributions are peaked like a trained language
model's: top-1 agreement is meaningless on a random model, whose logits are nearly tied. For each,
in tests/fixtures/model/bf16/NAME: the fp32 HF model directory, token ids [B, T] from the same
chain (ids.npy), the fp32 logits and gradients of HF's mean next-token cross-entropy
(logits.npy, grads.safetensors), the same after `model.to(torch.bfloat16)` with eager attention
(logits_bf16.npy, grads_bf16.safetensors, widened to float32), and meta.json with the package
versions and how far HF's own bf16 run is from its fp32 run (per-token KL, top-1, each gradient's
relative L2): the yardstick for tandem's bf16 path.

It also writes bf16_rounding/: torch's fp32 -> bf16 rounding of bit patterns (f32_bits.npy
uint32 in, bf16_bits.npy uint16 out) covering ties, subnormals, infinities, NaNs and overflow.

Usage: python3 tools/make_bf16_model_fixtures.py [OUT_DIR]  (default tests/fixtures/model)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Olmo3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import hf_olmo3_config  # noqa: E402

CONFIGS = {
    "gqa": dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=96, vocab_size=160, sliding_window=128, rope_theta=500000.0,
                rms_norm_eps=1e-6, batch=4, seq=64),
    "window": dict(hidden_size=40, num_hidden_layers=4, num_attention_heads=5,
                   num_key_value_heads=5, intermediate_size=72, vocab_size=131, sliding_window=8,
                   rope_theta=10000.0, rms_norm_eps=1e-5, batch=4, seq=64),
    "deep": dict(hidden_size=48, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2,
                 head_dim=10, intermediate_size=80, vocab_size=149, sliding_window=12,
                 rope_theta=1000.0, rms_norm_eps=1e-6, batch=4, seq=64),
}
TRAIN_STEPS = 150


def markov_chain(vocab, seed):
    """Each token has 3 successors with probabilities 0.7, 0.2, 0.1."""
    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(vocab, generator=g)[:3] for _ in range(vocab)])
    return succ, g


def sample(succ, g, batch, seq):
    vocab = succ.shape[0]
    out = torch.empty(batch, seq, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
    probs = torch.tensor([0.7, 0.2, 0.1])
    for t in range(1, seq):
        choice = torch.multinomial(probs.expand(batch, 3), 1, generator=g).squeeze(1)
        out[:, t] = succ[out[:, t - 1], choice]
    return out


def kl_per_token(ref_logits, logits):
    p = torch.log_softmax(ref_logits.double(), -1)
    q = torch.log_softmax(logits.double(), -1)
    return (p.exp() * (p - q)).sum(-1)


def make(name, spec, root, seed):
    config, batch, seq, _ = hf_olmo3_config(spec)
    torch.manual_seed(seed)
    model = Olmo3ForCausalLM(config).float()
    succ, g = markov_chain(config.vocab_size, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for step in range(TRAIN_STEPS):
        x = sample(succ, g, 8, seq)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.zero_grad()
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    ids = sample(succ, g, batch, seq)
    np.save(os.path.join(d, "ids.npy"), ids.numpy().astype(np.int64))

    fp32 = Olmo3ForCausalLM.from_pretrained(d, attn_implementation="eager",
                                            dtype=torch.float32).eval()
    ref = fp32(input_ids=ids, labels=ids)
    ref.loss.backward()
    np.save(os.path.join(d, "logits.npy"), ref.logits.detach().numpy().astype(np.float32))
    fp32_grads = {n: p.grad.detach().contiguous() for n, p in fp32.named_parameters()}
    save_file(fp32_grads, os.path.join(d, "grads.safetensors"))

    bf16 = Olmo3ForCausalLM.from_pretrained(d, attn_implementation="eager",
                                            dtype=torch.float32).eval()
    bf16.to(torch.bfloat16)
    out = bf16(input_ids=ids, labels=ids)
    out.loss.backward()
    logits = out.logits.detach().float()
    np.save(os.path.join(d, "logits_bf16.npy"), logits.numpy().astype(np.float32))
    grads = {n: p.grad.detach().float().contiguous() for n, p in bf16.named_parameters()}
    save_file(grads, os.path.join(d, "grads_bf16.safetensors"))

    kl = kl_per_token(ref.logits.detach(), logits)
    top1 = (ref.logits.argmax(-1) == logits.argmax(-1)).double().mean()
    grad_rel = {n: float((grads[n] - fp32_grads[n]).norm() / fp32_grads[n].norm()) for n in grads}
    meta = {
        "reference": "transformers.Olmo3ForCausalLM; fp32 and model.to(torch.bfloat16), eager",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "numpy": np.__version__, "seed": seed, "train_steps": TRAIN_STEPS,
        "batch": batch, "seq": seq, "layer_types": config.layer_types,
        "loss_fp32": ref.loss.item(), "loss_bf16": out.loss.item(),
        "hf_bf16_vs_fp32": {"max_kl": float(kl.max()), "mean_kl": float(kl.mean()),
                            "top1": float(top1), "grad_rel_l2": grad_rel,
                            "max_grad_rel_l2": max(grad_rel.values())},
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: loss fp32 {ref.loss.item():.4f}; HF bf16 vs fp32 max KL {float(kl.max()):.3e}, "
          f"top-1 {float(top1):.4f}, max grad rel L2 {max(grad_rel.values()):.3e}")


def rounding_cases():
    rng = np.random.default_rng(7)
    special = np.array([0x00000000, 0x80000000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F80FFFF,
                        0x3F807FFF, 0x3F808001, 0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000, 0x7F800000,
                        0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001, 0x7FBFFFFF, 0x00000001,
                        0x00008000, 0x00018000, 0x007FFFFF, 0x80008000, 0x00800000],
                       dtype=np.uint32)
    random_bits = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32)
    # Exact ties (low 16 bits 0x8000) with both parities of the kept bit.
    ties = (rng.integers(0, 2**16, size=512, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    bits = np.concatenate([special, random_bits, ties])
    f = torch.from_numpy(bits.view(np.float32).copy())
    out = f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return bits, out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "model")
    torch.set_num_threads(2)
    for i, (name, spec) in enumerate(CONFIGS.items()):
        make(name, spec, os.path.join(root, "bf16"), seed=2000 + i)
    bits, out = rounding_cases()
    rdir = os.path.join(root, "bf16_rounding")
    os.makedirs(rdir, exist_ok=True)
    np.save(os.path.join(rdir, "f32_bits.npy"), bits)
    np.save(os.path.join(rdir, "bf16_bits.npy"), out)
    with open(os.path.join(rdir, "meta.json"), "w") as f:
        json.dump({"reference": "torch.Tensor.to(torch.bfloat16) on fp32 bit patterns",
                   "torch": torch.__version__, "numpy": np.__version__, "cases": int(len(bits))},
                  f, indent=1)
    print(f"bf16 rounding: {len(bits)} cases")


if __name__ == "__main__":
    main()
