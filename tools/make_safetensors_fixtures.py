#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/io with the real `safetensors` package (and torch for
BF16/F16 rounding, huggingface_hub for the sharded checkpoint layout).

Output, in tests/fixtures/io/ (or --out):
  mixed.safetensors + mixed.expected.json     F32/BF16/F16/I64 tensors, a scalar, an empty one,
                                              metadata; expected values as bit patterns
  conversions.safetensors                     f32 -> bf16/f16 narrowing and bf16/f16 -> f32
                                              widening as torch does them (specials, ties, random)
  sharded/ + sharded.expected.json            a 2-shard HF checkpoint with model.safetensors.index.json
  python_written.safetensors + .json          reference bytes our writer must reproduce exactly

  --check FILE   instead: read FILE (e.g. written by tandem) with safetensors and print its tensors
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import save_file


def versions():
    import huggingface_hub

    return {
        "safetensors": safetensors.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "huggingface_hub": huggingface_hub.__version__,
    }


def u16_bits(t):
    return [int(v) for v in t.contiguous().view(torch.int16).numpy().view(np.uint16).ravel()]


def f32_bits(t):
    return [int(v) for v in t.float().contiguous().numpy().view(np.uint32).ravel()]


def raw_sha256(t):
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def describe(t):
    entry = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
             "raw_sha256": raw_sha256(t)}
    if t.dtype in (torch.float32, torch.bfloat16, torch.float16):
        entry["f32_bits"] = f32_bits(t)
    if t.dtype in (torch.bfloat16, torch.float16):
        entry["u16_bits"] = u16_bits(t)
    return entry


def header_order(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    names = [k for k in header if k != "__metadata__"]
    return sorted(names, key=lambda k: header[k]["data_offsets"][0])


def write_mixed(out, gen):
    tensors = {
        "f32_matrix": torch.randn(3, 5, generator=gen),
        "bf16_vec": torch.randn(7, generator=gen).to(torch.bfloat16),
        "f16_cube": torch.randn(2, 3, 4, generator=gen).to(torch.float16),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "i64_ids": torch.tensor([1, 100277, -5], dtype=torch.int64),
    }
    meta = {"format": "pt", "producer": "tools/make_safetensors_fixtures.py"}
    path = os.path.join(out, "mixed.safetensors")
    save_file(tensors, path, metadata=meta)
    expected = {"versions": versions(), "metadata": meta,
                "tensors": {k: describe(v) for k, v in tensors.items()}}
    with open(os.path.join(out, "mixed.expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def conversion_sources(rng):
    def f(bits):
        return np.array(bits, dtype=np.uint32).view(np.float32)

    specials = f([0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
                  0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                  0x7F7F8000, 0x7F7F7FFF, 0x00800000, 0x00000001, 0x807FFFFF,
                  0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000, 0x38800000, 0x387FFFFF,
                  0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x32FFFFFF,
                  0x3F801000, 0x3F803000, 0x3F802000, 0x3F808000, 0x3F818000, 0x3F810000])
    random_bits = rng.integers(0, 2**32, size=2000, dtype=np.uint64).astype(np.uint32)
    # Ties for f16: 13 dropped bits exactly half, across the f16 normal and subnormal ranges.
    exp = rng.integers(100, 143, size=300, dtype=np.uint32)
    mant = rng.integers(0, 2**10, size=300, dtype=np.uint32)
    f16_ties = (exp << 23) | (mant << 13) | 0x1000
    # Ties for bf16: 16 dropped bits exactly half.
    bf16_ties = (rng.integers(0, 2**16, size=300, dtype=np.uint32) << 16) | 0x8000
    src = np.concatenate([specials, f(random_bits), f(f16_ties), f(bf16_ties)])
    return torch.from_numpy(src.astype(np.float32))


def write_conversions(out, rng):
    src = conversion_sources(rng)
    widen_f16 = torch.from_numpy(rng.integers(0, 2**16, size=2048).astype(np.uint16).view(np.int16))
    widen_bf16 = torch.from_numpy(rng.integers(0, 2**16, size=2048).astype(np.uint16).view(np.int16))
    widen_f16 = widen_f16.view(torch.float16)
    widen_bf16 = widen_bf16.view(torch.bfloat16)
    tensors = {
        "conv_src": src,
        "conv_src_to_bf16": src.to(torch.bfloat16),
        "conv_src_to_f16": src.to(torch.float16),
        "widen_f16": widen_f16,
        "widen_f16_f32": widen_f16.float(),
        "widen_bf16": widen_bf16,
        "widen_bf16_f32": widen_bf16.float(),
    }
    meta = {"versions": json.dumps(versions(), sort_keys=True)}
    save_file(tensors, os.path.join(out, "conversions.safetensors"), metadata=meta)


def write_sharded(out, gen):
    from huggingface_hub import save_torch_state_dict

    state = {
        "model.embed_tokens.weight": torch.randn(11, 8, generator=gen).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=gen).to(torch.bfloat16),
        "model.layers.0.post_attention_layernorm.weight": torch.randn(8, generator=gen),
        "model.norm.weight": torch.randn(8, generator=gen),
        "lm_head.weight": torch.randn(11, 8, generator=gen).to(torch.bfloat16),
    }
    directory = os.path.join(out, "sharded")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    save_torch_state_dict(state, directory, max_shard_size=400)
    with open(os.path.join(directory, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    shards = sorted(set(weight_map.values()))
    if len(shards) != 2:
        sys.exit(f"expected 2 shards, huggingface_hub wrote {shards}")
    expected = {"versions": versions(), "shards": shards,
                "tensors": {k: dict(describe(v), shard=weight_map[k]) for k, v in state.items()}}
    with open(os.path.join(out, "sharded.expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def write_python_written(out, gen):
    tensors = {
        "a_weight": torch.randn(4, 3, generator=gen),
        "b_bias": torch.randn(3, generator=gen),
        "c_half": torch.randn(5, generator=gen).to(torch.float16),
        "d_brain": torch.randn(2, 3, generator=gen).to(torch.bfloat16),
        "e_empty": torch.zeros(2, 0, dtype=torch.bfloat16),
        "f_scalar": torch.tensor(-1.25),
    }
    path = os.path.join(out, "python_written.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    expected = {"versions": versions(), "order": header_order(path)}
    with open(os.path.join(out, "python_written.json"), "w") as f:
        json.dump(expected, f, indent=1)


def check(path):
    with safe_open(path, framework="pt") as f:
        print("metadata:", f.metadata())
        for name in f.keys():
            t = f.get_tensor(name)
            print(name, t.dtype, list(t.shape), t.float().flatten()[:8].tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "io"))
    parser.add_argument("--check", help="read a .safetensors file with the Python package")
    args = parser.parse_args()
    if args.check:
        check(args.check)
        return
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    rng = np.random.default_rng(1234)
    write_mixed(args.out, gen)
    write_conversions(args.out, rng)
    write_sharded(args.out, gen)
    write_python_written(args.out, gen)
    print("wrote safetensors fixtures to", os.path.normpath(args.out), versions())


if __name__ == "__main__":
    main()
