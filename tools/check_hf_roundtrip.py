#!/usr/bin/env python3
"""Round trip hf -> tandem -> hf, judged by HF transformers itself.

For an HF model directory: `tandem convert --from hf DIR --to tandem`, then `--from tandem ... --to
hf`, then transformers loads both the original and the exported directory (fp32, eager attention)
and runs them on the same token ids. The exported model must be the same function: the RoPE
frequencies and attention scaling of every layer type, the layer types and window, and the logits
must be identical (bit for bit: the weights are copied exactly and the config must resolve to the
same values).

Usage: python3 tools/check_hf_roundtrip.py --tandem build/tandem HF_DIR [HF_DIR ...]
Prints one JSON line per directory; exits 1 if any differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def load(directory):
    config = AutoConfig.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, config=config, dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()


def resolved(model):
    """How transformers reads the config: per-type RoPE tensors, layer types, window, sizes."""
    config, inner = model.config, model.model
    out = {
        "model_type": config.model_type,
        "num_hidden_layers": config.num_hidden_layers,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": inner.layers[0].self_attn.head_dim,
        "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "layer_types": list(getattr(config, "layer_types", None) or []),
        "sliding_window": getattr(config, "sliding_window", None),
        "rope": {},
    }
    rotary = inner.rotary_emb
    if config.model_type == "olmo3":
        for t in sorted(set(config.layer_types)):
            out["rope"][t] = {
                "inv_freq": getattr(rotary, f"{t}_inv_freq").tolist(),
                "attention_scaling": float(getattr(rotary, f"{t}_attention_scaling")),
                "rope_type": rotary.rope_type[t],
            }
    else:
        out["rope"]["all"] = {"inv_freq": rotary.inv_freq.tolist(),
                              "attention_scaling": float(rotary.attention_scaling),
                              "rope_type": rotary.rope_type}
    return out


def roundtrip(tandem, directory, ids, work):
    """Converts `directory` both ways with tandem; returns (exported dir, report)."""
    t_dir, h_dir = os.path.join(work, "tandem"), os.path.join(work, "hf")
    for args in (["--from", "hf", directory, "--to", "tandem", t_dir],
                 ["--from", "tandem", t_dir, "--to", "hf", h_dir]):
        subprocess.run([tandem, "convert", *args], check=True, stdout=subprocess.DEVNULL)
    original, exported = load(directory), load(h_dir)
    with torch.no_grad():
        a = original(input_ids=ids).logits
        b = exported(input_ids=ids).logits
    ra, rb = resolved(original), resolved(exported)
    report = {
        "dir": directory,
        "identical_logits": bool(torch.equal(a, b)),
        "max_abs_logit_diff": float((a - b).abs().max()),
        "identical_config_reading": ra == rb,
        "transformers": transformers.__version__,
    }
    if ra != rb:
        report["original"], report["exported"] = ra, rb
    return h_dir, report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tandem", required=True, help="the tandem binary")
    parser.add_argument("--seq", type=int, default=24)
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(2)
    ok = True
    for directory in args.dirs:
        vocab = AutoConfig.from_pretrained(directory).vocab_size
        ids = torch.randint(0, vocab, (2, args.seq), generator=torch.Generator().manual_seed(7))
        with tempfile.TemporaryDirectory() as work:
            _, report = roundtrip(args.tandem, directory, ids, work)
        ok &= report["identical_logits"] and report["identical_config_reading"]
        print(json.dumps(report))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
