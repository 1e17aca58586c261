#!/usr/bin/env python3
"""Fixtures for reading HF config.json exactly as transformers does (tests/model/hf_config_test.cc).

Each case is a config.json as a user may have it (transformers 4.x's flat rope_theta, no
layer_types, nested rope_parameters, the released OLMo 3 YaRN rope_scaling, olmo2 defaults, ...)
with small random fp32 weights. For each, HF transformers (eager attention) writes:
  config.json           the input, exactly as given (not rewritten by save_pretrained)
  model.safetensors     the weights (HF names)
  ids.npy, logits.npy   token ids [B, T] and transformers' logits [B, T, V]
  grads.safetensors     (YaRN cases) gradients of HF's mean next-token loss
  resolved.json         how transformers read the config: layer types, window, head_dim, and per
                        layer type the RoPE inv_freq and attention scaling it built
  exported_config.json  tandem's hf -> tandem -> hf export of this directory, after transformers
                        reloaded it and gave bit-identical logits and the same resolved.json
                        (tools/check_hf_roundtrip.py); the test guards that tandem still writes it
  meta.json             versions, seed, shapes, the round-trip verdict

It also writes, under tests/fixtures/model/released/, the config.json of the released OLMo 3 7B
and 32B (reconstructed: docs/formats.md says from what) and, for each, how transformers reads it
(the RoPE of both layer types at head_dim 128; no weights needed).

Usage: python3 tools/make_hf_config_fixtures.py --tandem build/tandem [OUT_DIR]
       (default OUT_DIR: tests/fixtures/model/hf_configs)
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, Olmo3Config
from transformers.models.olmo3.modeling_olmo3 import Olmo3RotaryEmbedding

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_hf_roundtrip import resolved, roundtrip  # noqa: E402

SMALL = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=24,
             vocab_size=37, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None,
             pad_token_id=None)


def olmo3_types(n, full):
    return ["full_attention" if i in full else "sliding_attention" for i in range(n)]


# The released OLMo 3 7B/32B long-context fields (config.json of allenai/Olmo-3-1025-7B and
# Olmo-3-1125-32B; docs/formats.md says where these values come from), on a small model.
RELEASED_ROPE_SCALING = {"attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0,
                         "factor": 8.0, "original_max_position_embeddings": 8192,
                         "rope_type": "yarn"}

CASES = {
    # transformers 4.x wrote a flat rope_theta and (before layer_types existed) no layer types:
    # 5.x gives full attention iff (i + 1) % 4 == 0 and applies the theta to full layers only.
    "legacy_theta_no_layer_types": dict(
        config=dict(model_type="olmo3", **SMALL, num_hidden_layers=7, sliding_window=5,
                    rope_theta=10000.0, max_position_embeddings=64),
        batch=2, seq=20),
    # Nothing about RoPE or layers: every default (theta 500000 for both types).
    "defaults_only": dict(
        config=dict(model_type="olmo3", **SMALL, num_hidden_layers=5, sliding_window=6),
        batch=2, seq=16),
    # transformers 5.x's own form: rope_parameters per type with different thetas; custom layer
    # types (the first layer full), head_dim != hidden / heads, GQA.
    "nested_thetas_custom_types": dict(
        config=dict(model_type="olmo3", **{**SMALL, "num_attention_heads": 4,
                                           "num_key_value_heads": 2},
                    head_dim=6, num_hidden_layers=6, sliding_window=4,
                    layer_types=olmo3_types(6, {0, 3}), max_position_embeddings=128,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 50000.0},
                                     "sliding_attention": {"rope_type": "default",
                                                           "rope_theta": 1000.0}}),
        batch=2, seq=18),
    # A flat rope_parameters is ignored by Olmo3Config (both types keep 500000).
    "flat_rope_parameters": dict(
        config=dict(model_type="olmo3", **SMALL, num_hidden_layers=5, sliding_window=3,
                    layer_types=olmo3_types(5, {3, 4}),
                    rope_parameters={"rope_type": "default", "rope_theta": 1234.0}),
        batch=2, seq=14),
    # The released OLMo 3 long-context fields: legacy rope_theta + rope_scaling (YaRN on the
    # full-attention layers only), 65536 positions, the released layer types and window.
    "released_yarn": dict(
        config=dict(model_type="olmo3", **{**SMALL, "hidden_size": 32}, num_hidden_layers=8,
                    sliding_window=4096, layer_types=olmo3_types(8, {3, 7}),
                    max_position_embeddings=65536, rope_theta=500000, use_cache=False,
                    rope_scaling=RELEASED_ROPE_SCALING),
        batch=2, seq=24, grads=True),
    # YaRN past its original context (16 positions, factor 4, sequence 48), attention factor
    # derived from the factor, sliding layers at theta 10000, a window of 8.
    "yarn_beyond_original": dict(
        config=dict(model_type="olmo3", **{**SMALL, "hidden_size": 32}, num_hidden_layers=6,
                    sliding_window=8, max_position_embeddings=64,
                    rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 16},
                                     "sliding_attention": {"rope_type": "default",
                                                           "rope_theta": 10000.0}}),
        batch=2, seq=48, grads=True),
    # Legacy {"type": "yarn"} merged into full_attention, which already says rope_type "default":
    # transformers keeps plain RoPE.
    "legacy_type_key_ignored": dict(
        config=dict(model_type="olmo3", **SMALL, num_hidden_layers=4, sliding_window=4,
                    rope_scaling={"type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": 8}),
        batch=1, seq=12),
    # OLMo 2: no windows, rope_theta defaults to 10000 (the generic RoPE mixin).
    "olmo2_default_theta": dict(
        config=dict(model_type="olmo2", **SMALL, num_hidden_layers=3),
        batch=2, seq=12),
    # OLMo 2 with YaRN: truncate false (read from the flat dict), mscale / mscale_all_dim.
    "olmo2_yarn_mscale": dict(
        config=dict(model_type="olmo2", **{**SMALL, "hidden_size": 32}, num_hidden_layers=3,
                    rope_theta=20000.0, max_position_embeddings=40,
                    rope_scaling={"rope_type": "yarn", "factor": 2.5,
                                  "original_max_position_embeddings": 10, "truncate": False,
                                  "mscale": 1.0, "mscale_all_dim": 0.5}),
        batch=2, seq=30),
}


def released_config(hidden, layers, heads, kv_heads, intermediate):
    """config.json of allenai/Olmo-3-1025-7B / Olmo-3-1125-32B as released (transformers 4.57)."""
    return {
        "architectures": ["Olmo3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": None, "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": intermediate,
        "layer_types": olmo3_types(layers, {i for i in range(layers) if (i + 1) % 4 == 0}),
        "max_position_embeddings": 65536, "model_type": "olmo3", "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "pad_token_id": 100277,
        "rms_norm_eps": 1e-06, "rope_scaling": RELEASED_ROPE_SCALING, "rope_theta": 500000,
        "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": False, "vocab_size": 100278,
    }


def make_released(out_root):
    for name, sizes in {"olmo3-7b": (4096, 32, 32, 32, 11008),
                        "olmo3-32b": (5120, 64, 40, 8, 27648)}.items():
        config = released_config(*sizes)
        with open(os.path.join(out_root, f"{name}-config.json"), "w") as f:
            json.dump(config, f, indent=2)
        hf = Olmo3Config.from_dict(config)
        rotary = Olmo3RotaryEmbedding(hf)
        reading = {"layer_types": hf.layer_types, "sliding_window": hf.sliding_window,
                   "max_position_embeddings": hf.max_position_embeddings, "rope": {
                       t: {"rope_type": rotary.rope_type[t],
                           "inv_freq": getattr(rotary, f"{t}_inv_freq").tolist(),
                           "attention_scaling": float(getattr(rotary, f"{t}_attention_scaling"))}
                       for t in sorted(set(hf.layer_types))},
                   "transformers": transformers.__version__}
        with open(os.path.join(out_root, f"{name}-resolved.json"), "w") as f:
            json.dump(reading, f, indent=1)
        print(f"released {name}: {reading['rope']['full_attention']['rope_type']} on full layers")


def make(name, case, out_root, tandem, seed):
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(case["config"], f, indent=1)
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.15 * torch.randn_like(p))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    # Reload from disk so the reference is what transformers makes of the directory as given.
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ids = torch.randint(0, config.vocab_size, (case["batch"], case["seq"]),
                        generator=torch.Generator().manual_seed(seed + 1))
    result = model(input_ids=ids, labels=ids)
    np.save(os.path.join(out, "ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), result.logits.detach().numpy().astype(np.float32))
    if case.get("grads"):
        result.loss.backward()
        save_file({n: p.grad.detach().contiguous() for n, p in model.named_parameters()},
                  os.path.join(out, "grads.safetensors"))
    reading = resolved(model)
    with open(os.path.join(out, "resolved.json"), "w") as f:
        json.dump(reading, f, indent=1)

    with tempfile.TemporaryDirectory() as work:
        exported, report = roundtrip(tandem, out, ids, work)
        assert report["identical_logits"] and report["identical_config_reading"], report
        shutil.copy(os.path.join(exported, "config.json"), os.path.join(out, "exported_config.json"))
    report["dir"] = name  # not this machine's path
    meta = {
        "reference": "transformers AutoModelForCausalLM from this config.json, fp32, eager",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "numpy": np.__version__, "seed": seed, "batch": case["batch"], "seq": case["seq"],
        "loss": float(result.loss.detach()), "roundtrip": report,
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: layer types {reading['layer_types']}, round trip identical -> {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tandem", required=True)
    parser.add_argument("out", nargs="?", default=os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "model", "hf_configs"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    for i, (name, case) in enumerate(CASES.items()):
        make(name, case, args.out, args.tandem, seed=2000 + 10 * i)
    released = os.path.join(os.path.dirname(os.path.abspath(args.out)), "released")
    os.makedirs(released, exist_ok=True)
    make_released(released)


if __name__ == "__main__":
    main()
