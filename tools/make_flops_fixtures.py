#!/usr/bin/env python3
"""Fixture for OLMo-core's FLOP count (tests/model/olmo_core_flops_test.cc).

OLMo-core 3.0's Transformer.num_flops_per_token(seq_len) counts the attention's (query, key) pairs
under the causal mask and the sliding window; tandem's ModelConfig::olmo_core_flops_per_token must
give the same integer. For each case the fixture holds the tandem `model:` mapping and OLMo-core's
count at several sequence lengths (shorter than, equal to and longer than the windows):
  - OLMo-core's own recipes (TransformerConfig.olmo3_7B, olmo3_32B, olmo3_1B, olmo2_7B with the
    dolma2 tokenizer's padded vocabulary), each paired with the tandem recipe of the same model
    (configs/models/*.yaml, named by `tandem_recipe`: the test loads that file);
  - small OLMo 3 and OLMo 2 models built with OLMo-core's constructors (sliding-window patterns,
    first/last layer forcing, GQA, head_dim), their mapping written from the arguments given to
    OLMo-core as tools/make_olmo_core_model_fixtures.py writes it.
The models are built on the meta device: no weights, only the modules whose parameters are counted.

Usage: python3 tools/make_flops_fixtures.py [OUT_FILE]
       (default: tests/fixtures/model/olmo_core_flops.json)
"""
import json
import os
import sys
from importlib.metadata import version

import torch
from olmo_core.data import TokenizerConfig
from olmo_core.nn.transformer import TransformerConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_olmo_core_model_fixtures import build, tandem_yaml  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LENS = [1, 2, 3, 5, 8, 13, 64, 100, 4095, 4096, 4097, 8192, 65536]

RECIPES = {  # OLMo-core's constructor -> the tandem recipe of the same model
    "olmo3_7B": "olmo3-7b",
    "olmo3_32B": "olmo3-32b",
    "olmo3_1B": "olmo3-1b",
    "olmo2_7B": "olmo2-7b",
}

SMALL = {  # as in make_olmo_core_model_fixtures.CASES: constructor, kwargs, sliding window
    "olmo3_layout": dict(ctor="olmo3_1M", kwargs=dict(n_layers=6, n_heads=3),
                         sw=dict(pattern=[4, 4, 4, -1], force_full_attention_on_first_layer=False,
                                 force_full_attention_on_last_layer=True)),
    "flags_default": dict(ctor="olmo3_1M", kwargs=dict(n_layers=7), sw=dict(pattern=[3, 5, -1])),
    "gqa_uneven": dict(ctor="olmo3_1M", kwargs=dict(n_layers=7, n_heads=4, n_kv_heads=2),
                       sw=dict(pattern=[4, -1, 6], force_full_attention_on_first_layer=False,
                               force_full_attention_on_last_layer=False)),
    "head_dim_mqa": dict(ctor="olmo3_1M", kwargs=dict(n_layers=5, n_heads=6, n_kv_heads=1,
                                                      head_dim=8),
                         sw=dict(pattern=[2, 9], force_full_attention_on_first_layer=True,
                                 force_full_attention_on_last_layer=False)),
    "window_one": dict(ctor="olmo3_1M", kwargs=dict(n_layers=3, n_heads=2),
                       sw=dict(pattern=[1, -1], force_full_attention_on_first_layer=False,
                               force_full_attention_on_last_layer=False)),
    "olmo2_full": dict(ctor="olmo2_1M", kwargs=dict(n_layers=3, n_heads=3), sw=None),
}


def counts(config):
    with torch.device("meta"):
        model = config.build(init_device="meta")
    return {str(s): int(model.num_flops_per_token(s)) for s in SEQ_LENS}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "fixtures", "model",
                                                            "olmo_core_flops.json")
    vocab = TokenizerConfig.dolma2().padded_vocab_size()
    cases = {}
    for ctor, recipe in RECIPES.items():
        config = getattr(TransformerConfig, ctor)(vocab_size=vocab)
        cases[ctor] = {"tandem_recipe": f"configs/models/{recipe}.yaml",
                       "params": int(config.num_params),
                       "olmo_core_flops_per_token": counts(config)}
    for name, case in SMALL.items():
        config = build(case["ctor"], case["kwargs"], case["sw"], None, None)
        mapping = tandem_yaml(config, case["kwargs"], case["sw"], None, None, -1)
        cases[name] = {"model": mapping["model"], "params": int(config.num_params),
                       "olmo_core_flops_per_token": counts(config)}
    fixture = {
        "written_by": "tools/make_flops_fixtures.py",
        "versions": {"ai2-olmo-core": version("ai2-olmo-core"), "torch": torch.__version__},
        "seq_lens": SEQ_LENS,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} cases x {len(SEQ_LENS)} sequence lengths")


if __name__ == "__main__":
    main()
