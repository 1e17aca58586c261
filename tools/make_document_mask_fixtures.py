#!/usr/bin/env python3
"""Fixture for intra-document masking (tests/model/document_mask_test.cc).

OLMo-core's long-context stage packs documents into an instance and, with generate_doc_lengths,
passes doc_lens to the model: attention stays inside each document (cu_doc_lens) and RoPE
positions restart at each document (RotaryEmbedding with cu_doc_lens). OLMo-core implements the
masking in its flash-attention backends only, so the reference here masks explicitly: HF
transformers' Olmo3 (fp32, eager attention) with a 4-D additive mask per layer type (causal, the
sliding window, same document) and position ids that restart at each document. Two assertions tie
this reference to OLMo-core and to the plain meaning: its logits equal running each document
alone, and OLMo-core's RotaryEmbedding with cu_doc_lens rotates exactly as each document alone.

The model is a small OLMo 3 with YaRN on the full-attention layers, as in the long-context stage.
Writes (OUT_DIR, default tests/fixtures/model/document_mask): config.json, model.safetensors,
ids.npy [B, T], logits.npy [B, T, V], grads.safetensors (HF's mean next-token loss under the
mask), documents.json (EOS id, OLMo-core's get_document_lengths for every row, without and with a
BOS id), meta.json.

Usage: python3 tools/make_document_mask_fixtures.py [OUT_DIR]
"""
import json
import os
import shutil
import sys
from importlib.metadata import version

import numpy as np
import torch
import transformers
from olmo_core.data.utils import get_cumulative_document_lengths, get_document_lengths
from olmo_core.nn.rope import RotaryEmbedding
from safetensors.torch import save_file
from transformers import Olmo3Config, Olmo3ForCausalLM

EOS, BOS, VOCAB, T = 3, 5, 37, 40
# EOS positions per row: several documents, one row without EOS, one starting with two
# one-token documents and ending with EOS.
EOS_AT = [[7, 19, 31], [], [0, 1, 20, 39]]
BOS_AFTER = [[19], [], [1]]  # where the token after an EOS is BOS (for the BOS variant)


def make_ids(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, VOCAB, (len(EOS_AT), T), generator=g)
    for b, positions in enumerate(EOS_AT):
        for t in positions:
            ids[b, t] = EOS
        for t in BOS_AFTER[b]:
            ids[b, t + 1] = BOS
    return ids


def doc_starts(doc_lens_row):
    """For every position of the row, where its document begins."""
    out, start = [], 0
    for n in doc_lens_row:
        out += [start] * n
        start += n
    return out


def masks(starts, window):
    """Additive [B, 1, T, T] masks for full and sliding layers: causal, same document, window."""
    s = torch.tensor(starts)
    i = torch.arange(T).view(1, T, 1)
    j = torch.arange(T).view(1, 1, T)
    same_doc = j >= s.view(-1, T, 1)
    full = (j <= i) & same_doc
    sliding = full & (i - j < window)
    neg = torch.finfo(torch.float32).min
    to_additive = lambda m: torch.where(m, 0.0, neg).unsqueeze(1)  # noqa: E731
    return {"full_attention": to_additive(full), "sliding_attention": to_additive(sliding)}


def check_olmo_core_rope(doc_lens):
    """OLMo-core's intra-document RoPE equals rotating each document from position 0."""
    rope = RotaryEmbedding(head_size=8, theta=10000)
    B = len(doc_lens)
    q = torch.randn(B, T, 2, 8, generator=torch.Generator().manual_seed(5))
    k = torch.randn(B, T, 2, 8, generator=torch.Generator().manual_seed(6))
    cu = get_cumulative_document_lengths(torch.tensor([list(d) + [0] * (T - len(d))
                                                       for d in doc_lens]))
    q_doc, k_doc = rope(q, k, head_first=False, cu_doc_lens=cu)
    for b, lens in enumerate(doc_lens):
        start = 0
        for n in lens:
            qa, ka = rope(q[b:b + 1, start:start + n], k[b:b + 1, start:start + n], head_first=False)
            assert torch.allclose(qa, q_doc[b:b + 1, start:start + n], atol=1e-6)
            assert torch.allclose(ka, k_doc[b:b + 1, start:start + n], atol=1e-6)
            start += n


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "model", "document_mask")
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    window = 6
    config = Olmo3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, sliding_window=window,
        max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 500000.0,
                                            "factor": 4.0, "original_max_position_embeddings": 16},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        attn_implementation="eager")
    torch.manual_seed(4000)
    model = Olmo3ForCausalLM(config).float().eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.15 * torch.randn_like(p))

    ids = make_ids(4001)
    doc_lens = [get_document_lengths(ids[b], EOS).tolist() for b in range(ids.shape[0])]
    doc_lens_bos = [get_document_lengths(ids[b], EOS, bos_token_id=BOS).tolist()
                    for b in range(ids.shape[0])]
    starts = [doc_starts(d) for d in doc_lens]
    position_ids = torch.tensor([[t - s for t, s in enumerate(row)] for row in starts])
    check_olmo_core_rope(doc_lens)

    out_masked = model(input_ids=ids, attention_mask=masks(starts, window),
                       position_ids=position_ids, labels=ids)
    # The explicit mask is the same as each document on its own.
    with torch.no_grad():
        for b, lens in enumerate(doc_lens):
            start = 0
            for n in lens:
                alone = model(input_ids=ids[b:b + 1, start:start + n]).logits[0]
                diff = (alone - out_masked.logits[b, start:start + n]).abs().max()
                assert diff < 1e-5, (b, start, n, float(diff))
                start += n
        unmasked = model(input_ids=ids).logits
    out_masked.loss.backward()

    model.save_pretrained(out, safe_serialization=True)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    np.save(os.path.join(out, "ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), out_masked.logits.detach().numpy().astype(np.float32))
    save_file({n: p.grad.detach().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "grads.safetensors"))
    with open(os.path.join(out, "documents.json"), "w") as f:
        json.dump({"eos_token_id": EOS, "bos_token_id": BOS, "doc_lens": doc_lens,
                   "doc_lens_with_bos": doc_lens_bos}, f, indent=1)
    meta = {
        "reference": "transformers Olmo3ForCausalLM, fp32, eager, explicit 4-D document mask and "
                     "per-document position ids; equal to each document alone; OLMo-core's "
                     "cu_doc_lens RoPE checked against per-document RoPE",
        "transformers": transformers.__version__, "torch": torch.__version__,
        "ai2-olmo-core": version("ai2-olmo-core"), "numpy": np.__version__,
        "loss": float(out_masked.loss.detach()),
        "max_abs_logit_change_without_mask": float((unmasked - out_masked.logits).abs().max()),
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"doc_lens {doc_lens}, with BOS {doc_lens_bos}; loss {meta['loss']:.5f} -> {out}")


if __name__ == "__main__":
    main()
