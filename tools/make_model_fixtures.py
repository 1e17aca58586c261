#!/usr/bin/env python3
"""Writes model parity fixtures from HF transformers' Olmo3ForCausalLM (fp32, eager attention).

For each small random config: the HF model directory (config.json + model.safetensors), token ids
[B, T] (.npy), the reference logits [B, T, V] (.npy) and the gradients of HF's mean next-token
cross-entropy (labels = input ids, shifted inside HF) with respect to every parameter
(grads.safetensors, HF names), plus meta.json with the package versions that made them.

Usage: python3 tools/make_model_fixtures.py [OUT_DIR]   (default: tests/fixtures/model)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Olmo3Config, Olmo3ForCausalLM

# Odd sizes on purpose; each config exercises a different feature.
CONFIGS = {
    # GQA (4 query heads share 2 kv heads); window larger than the sequence.
    "gqa": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=56, vocab_size=101, sliding_window=64, rope_theta=500000.0,
                rms_norm_eps=1e-6, batch=2, seq=12),
    # Window (4) smaller than the sequence (16): the sliding window matters.
    "window": dict(hidden_size=24, num_hidden_layers=4, num_attention_heads=3,
                   num_key_value_heads=3, intermediate_size=40, vocab_size=83, sliding_window=4,
                   rope_theta=10000.0, rms_norm_eps=1e-5, batch=2, seq=16),
    # 6 layers: full iff i % 4 == 3, last layer forced full; head_dim != d_model / heads; GQA.
    "deep": dict(hidden_size=36, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2,
                 head_dim=10, intermediate_size=50, vocab_size=131, sliding_window=5,
                 rope_theta=1000.0, rms_norm_eps=1e-6, batch=3, seq=20),
}


def olmo3_layer_types(n_layers):
    return ["full_attention" if (i % 4 == 3 or i == n_layers - 1) else "sliding_attention"
            for i in range(n_layers)]


def hf_olmo3_config(spec):
    """(Olmo3Config, batch, seq, theta) of a spec of CONFIGS (also tools/make_bf16_model_fixtures.py)."""
    spec = dict(spec)
    batch, seq = spec.pop("batch"), spec.pop("seq")
    theta = spec.pop("rope_theta")
    config = Olmo3Config(**spec, layer_types=olmo3_layer_types(spec["num_hidden_layers"]),
                         rope_parameters={t: {"rope_type": "default", "rope_theta": theta}
                                          for t in ("sliding_attention", "full_attention")},
                         max_position_embeddings=256, pad_token_id=None, eos_token_id=None,
                         bos_token_id=None, attn_implementation="eager")
    return config, batch, seq, theta


def make(name, spec, out_root, seed):
    config, batch, seq, theta = hf_olmo3_config(spec)
    torch.manual_seed(seed)
    model = Olmo3ForCausalLM(config).float().eval()
    # Larger-than-init random weights (and non-unit norms) so every term matters in the logits.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    # Guard against config-format drift: the model must really use the intended theta.
    inv_freq = model.model.rotary_emb.sliding_attention_inv_freq
    head_dim = model.model.layers[0].self_attn.head_dim
    assert abs(float(inv_freq[1]) / theta ** (-2.0 / head_dim) - 1) < 1e-5, (theta, inv_freq)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)

    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed + 1))
    out_hf = model(input_ids=ids, labels=ids)
    out_hf.loss.backward()
    np.save(os.path.join(out, "ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), out_hf.logits.detach().numpy().astype(np.float32))
    grads = {pname: p.grad.detach().contiguous() for pname, p in model.named_parameters()}
    save_file(grads, os.path.join(out, "grads.safetensors"))
    meta = {
        "reference": "transformers.Olmo3ForCausalLM, fp32, eager attention",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "numpy": np.__version__, "seed": seed, "batch": batch, "seq": seq,
        "loss": float(out_hf.loss), "layer_types": config.layer_types,
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    # save_pretrained may add generation_config.json; it is not needed.
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    print(f"{name}: loss {float(out_hf.loss):.6f} -> {out}")


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "model")
    torch.set_num_threads(2)
    for i, (name, spec) in enumerate(CONFIGS.items()):
        make(name, spec, out_root, seed=1000 + i)


if __name__ == "__main__":
    main()
