#!/usr/bin/env python3
"""Fixtures for OLMo-core's model-config semantics (tests/model/olmo_core_config_test.cc).

Each case is an OLMo-core TransformerConfig built with OLMo-core's own constructors
(TransformerConfig.olmo3_1M / olmo2_1M), its SlidingWindowAttentionConfig options (first/last layer
forcing on, off and left at OLMo-core's defaults; several patterns) and, for some, its YaRN
(TransformerConfig.with_rope_scaling). For each case the directory holds:
  model.yaml         the tandem `model:` mapping with OLMo-core's key names, written from the very
                     keyword arguments given to OLMo-core (keys left to OLMo-core's defaults are
                     left out here too), so tandem must apply OLMo-core's defaults and rules
  model.safetensors  the built model's random fp32 weights, OLMo-core names (= tandem's)
  olmo_core.json     OLMo-core's own config dict (as_config_dict) and the layout its built model
                     uses: the attention window of every layer (0 = full) and which layers carry
                     a RoPE scaling
  ids.npy, logits.npy  token ids and OLMo-core's forward logits (torch attention backend, fp32)
  grads.safetensors, grads_reference_error.json  (when make() is asked, as main() and
                     tools/check_olmo_core_model_random.py do) the gradients of the mean
                     next-token cross-entropy of OLMo-core's model in float64, under HF's names
                     through OLMo-core's own convert_state_to_hf, and how far OLMo-core's fp32
                     gradients are from them
  hf/                (some cases) OLMo-core's save_hf_model export of the same model, as written,
                     with hf_logits.npy: transformers' logits for that directory
  meta.json          versions and the KL between OLMo-core's logits and transformers' on hf/

Usage: python3 tools/make_olmo_core_model_fixtures.py [OUT_DIR]
       (default: tests/fixtures/model/olmo_core)
"""
import copy
import json
import os
import shutil
import sys

import numpy as np
from importlib.metadata import version
import torch
import transformers
import yaml
from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
from olmo_core.nn.hf.checkpoint import save_hf_model
from olmo_core.nn.hf.convert import convert_state_to_hf
from olmo_core.nn.rope import YaRNRoPEScalingConfig
from olmo_core.nn.transformer import TransformerConfig
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

VOCAB = 64  # OLMo-core's vocab_size: the embedding rows

# Each case: the constructor, its keyword arguments (n_layers, rope_theta, n_heads, ...), the
# SlidingWindowAttentionConfig arguments (None: no window), YaRNRoPEScalingConfig arguments (None:
# no scaling), with_rope_scaling's full_attn_layers_only (None: its default) and whether to export
# with save_hf_model. OLMo-core's HF export writes no head_dim, so exported cases use 3 heads
# (head_dim 4 = d_model / n_heads).
CASES = {
    # OLMo 3's own layout (the olmo3_* constructors' flags), small windows.
    "olmo3_layout": dict(ctor="olmo3_1M", kwargs=dict(n_layers=6, n_heads=3),
                         sw=dict(pattern=[4, 4, 4, -1], force_full_attention_on_first_layer=False,
                                 force_full_attention_on_last_layer=True),
                         export=True),
    # Only a pattern: OLMo-core's defaults force both the first and the last layer to full
    # attention, and the pattern starts at layer 1.
    "flags_default": dict(ctor="olmo3_1M", kwargs=dict(n_layers=7), sw=dict(pattern=[3, 5, -1])),
    # First forced, last not; YaRN on the full-attention layers (with_rope_scaling's default).
    "first_forced_yarn": dict(ctor="olmo3_1M", kwargs=dict(n_layers=6),
                              sw=dict(pattern=[3, 5, -1], force_full_attention_on_first_layer=True,
                                      force_full_attention_on_last_layer=False),
                              yarn=dict(factor=4.0, beta_fast=32, beta_slow=1, old_context_len=8)),
    # Neither forced, an uneven pattern, another theta, GQA.
    "none_forced": dict(ctor="olmo3_1M", kwargs=dict(n_layers=7, rope_theta=10000, n_kv_heads=2),
                        sw=dict(pattern=[4, -1, 6], force_full_attention_on_first_layer=False,
                                force_full_attention_on_last_layer=False)),
    # YaRN on every layer (full_attn_layers_only=False); OLMo-core's HF exporter refuses scaling
    # on sliding layers, so no export.
    "yarn_all_layers": dict(ctor="olmo3_1M", kwargs=dict(n_layers=5),
                            sw=dict(pattern=[5, 5, -1], force_full_attention_on_first_layer=False),
                            yarn=dict(factor=2.0, beta_fast=16, beta_slow=2, old_context_len=12),
                            full_only=False),
    # OLMo 3's layout with YaRN on the full layers, exported to HF (max_position_embeddings -1,
    # legacy rope_theta + rope_scaling with attention_factor, as OLMo-core writes them).
    "olmo3_yarn_export": dict(ctor="olmo3_1M", kwargs=dict(n_layers=8, n_heads=3),
                              sw=dict(pattern=[6, 6, 6, -1],
                                      force_full_attention_on_first_layer=False,
                                      force_full_attention_on_last_layer=True),
                              yarn=dict(factor=8.0, beta_fast=32, beta_slow=1, old_context_len=16),
                              export=True),
    # OLMo-core's export of a model with theta != 500000: it writes the legacy flat rope_theta,
    # which transformers 5 applies to the full-attention layers only.
    "theta_export": dict(ctor="olmo3_1M", kwargs=dict(n_layers=4, n_heads=3, rope_theta=20000),
                         sw=dict(pattern=[5, 5, 5, -1], force_full_attention_on_first_layer=False,
                                 force_full_attention_on_last_layer=True),
                         export=True),
    # OLMo 2: no sliding window, exported as Olmo2.
    "olmo2": dict(ctor="olmo2_1M", kwargs=dict(n_layers=3, n_heads=3), export=True),
}


def build(ctor, kwargs, sw, yarn, full_only):
    # hidden_size_multiple_of=16 keeps the SwiGLU width at 32 (OLMo-core's default rounds to 256).
    kwargs = dict(vocab_size=VOCAB, attn_backend=AttentionBackendName.torch,
                  hidden_size_multiple_of=16, **kwargs)
    if sw is not None:
        kwargs["sliding_window"] = SlidingWindowAttentionConfig(**sw)
    config = getattr(TransformerConfig, ctor)(**kwargs)
    if yarn is not None:
        scaling = YaRNRoPEScalingConfig(**yarn)
        config = (config.with_rope_scaling(scaling) if full_only is None
                  else config.with_rope_scaling(scaling, full_attn_layers_only=full_only))
    return config


def tandem_yaml(config, kwargs, sw, yarn, full_only, seq):
    """The tandem model mapping, from the arguments given to OLMo-core (defaults left out)."""
    block = config.block
    mixer = block.sequence_mixer
    m = {
        "d_model": config.d_model,
        "n_layers": config.n_layers,
        "n_heads": mixer.n_heads,
        "hidden_size": block.feed_forward.hidden_size,
        "vocab_size": config.vocab_size,
        "embedding_size": config.vocab_size,
        "layer_norm_eps": block.layer_norm.eps,
        "max_sequence_length": seq,
    }
    if mixer.n_kv_heads is not None:
        m["n_kv_heads"] = mixer.n_kv_heads
    if mixer.head_dim is not None:
        m["head_dim"] = mixer.head_dim
    if "rope_theta" in kwargs:
        m["rope_theta"] = kwargs["rope_theta"]
    if sw is not None:
        m["sliding_window"] = dict(sw)
    if yarn is not None:
        m["rope_scaling"] = {"name": "yarn", **yarn}
        if full_only is not None:
            m["rope_scaling"]["full_attn_layers_only"] = full_only
    return {"model": m}


def layout(model):
    windows, scaled = [], []
    for block in model.blocks.values():
        left, _ = block.attention.backend.window_size
        windows.append(0 if left == -1 else left + 1)
        scaled.append(block.attention.rope is not None and block.attention.rope.scaling is not None)
    return windows, scaled


def kl_max(ref, ours):
    p = torch.log_softmax(torch.from_numpy(ref).double(), -1)
    q = torch.log_softmax(torch.from_numpy(ours).double(), -1)
    return float((p.exp() * (p - q)).sum(-1).max())


def next_token_grads(model, ids):
    """The gradients of the mean next-token CE (what `tandem parity --grads` recomputes)."""
    model.zero_grad(set_to_none=True)
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             ids[:, 1:].reshape(-1))
    loss.backward()
    return {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def save_grads(out, model, ctor, ids):
    """grads.safetensors: the gradients of a float64 copy of the model (as fp32, HF's names through
    OLMo-core's converter, which needs only the model type and the layer count from a config;
    its RoPE tables stay fp32, which OLMo-core computes them in whatever the model's dtype);
    grads_reference_error.json: each tensor's relative L2 distance of OLMo-core's own fp32
    gradients from those, the rounding error a judge of another fp32 computation must allow."""
    fp32 = next_token_grads(model, ids)
    exact = next_token_grads(copy.deepcopy(model).double(), ids)
    olmo2 = ctor.startswith("olmo2")  # the constructor family picks the HF model type
    hf_config = (transformers.Olmo2Config if olmo2 else transformers.Olmo3Config)(
        num_hidden_layers=len(model.blocks))
    exact, fp32 = convert_state_to_hf(hf_config, exact), convert_state_to_hf(hf_config, fp32)
    assert len(exact) == len(list(model.parameters())), "OLMo-core's converter dropped a gradient"
    save_file({k: v.float().contiguous() for k, v in exact.items()},
              os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})
    # Relative, or absolute for a zero gradient (as `tandem parity` measures its own distance).
    error = {k: float((fp32[k].double() - v).norm() / (v.norm() if v.norm() > 0 else 1.0))
             for k, v in exact.items()}
    with open(os.path.join(out, "grads_reference_error.json"), "w") as f:
        json.dump(error, f, indent=1)


def make(name, case, out_root, seed, batch=2, seq=20, grads=False):
    ctor, kwargs, sw, yarn = case["ctor"], case["kwargs"], case.get("sw"), case.get("yarn")
    full_only, export = case.get("full_only"), case.get("export", False)
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    config = build(ctor, kwargs, sw, yarn, full_only)
    torch.manual_seed(seed)
    model = config.build(init_device="cpu").float().eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.3 * torch.randn_like(p))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "model.yaml"), "w") as f:
        f.write(f"# Written by tools/make_olmo_core_model_fixtures.py from OLMo-core's "
                f"TransformerConfig.{ctor}(...) arguments.\n")
        yaml.safe_dump(tandem_yaml(config, kwargs, sw, yarn, full_only, seq), f, sort_keys=False)
    windows, scaled = layout(model)
    with open(os.path.join(out, "olmo_core.json"), "w") as f:
        json.dump({"config": config.as_config_dict(), "windows": windows, "rope_scaled": scaled},
                  f, indent=1, default=str)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        logits = model(ids).float().numpy()
    np.save(os.path.join(out, "ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    if grads:
        save_grads(out, model, ctor, ids)
    meta = {"reference": f"olmo_core TransformerConfig.{ctor}, torch attention backend, fp32",
            "ai2-olmo-core": version("ai2-olmo-core"), "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__, "seed": seed,
            "windows": windows, "rope_scaled": scaled}
    if export:
        hf_dir = os.path.join(out, "hf")
        save_hf_model(hf_dir, model.state_dict(), model)
        hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
        with torch.no_grad():
            hf_logits = hf(input_ids=ids).logits.float().numpy()
        np.save(os.path.join(hf_dir, "hf_logits.npy"), hf_logits.astype(np.float32))
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(hf_dir, extra)):
                os.remove(os.path.join(hf_dir, extra))
        meta["hf_export_max_kl_vs_olmo_core"] = kl_max(logits, hf_logits)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: windows {windows}, scaled {scaled}"
          + (f", HF export KL vs OLMo-core {meta['hf_export_max_kl_vs_olmo_core']:.2e}"
             if export else ""))


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "model", "olmo_core")
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    for i, (name, case) in enumerate(CASES.items()):
        make(name, case, out_root, seed=3000 + 10 * i, grads=True)


if __name__ == "__main__":
    main()
