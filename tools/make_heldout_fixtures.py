#!/usr/bin/env python3
"""Padded held-out evaluation fixtures: OLMo-core's own LM evaluator on a tiny model.

Writes tests/fixtures/eval/padded_heldout/:
  eval-data/perplexity/v3_small_dolma2-tokenizer/<set>/val/part-0-00000.npy
      token files laid out exactly like AI2's v3 small perplexity validation sets (OLMo-core's
      DataMix.v3_small_ppl_validation, all 11 sets, uint32 as the dolma2 files are), with
      documents of many lengths: EOS-only documents, documents longer than the sequence length
      (truncated to it), and trailing tokens without an EOS (dropped)
  v3-small-ppl-validation.txt  OLMo-core's own manifest of those sets (olmo_core/data/mixes/)
  model/            the tiny OLMo-core model as a tandem model folder
  expected.json     per eval batch size: the instances OLMo-core's NumpyPaddedFSLDataset built
                    (token ids, label masks), the order its evaluator read them in, and the
                    metrics EvaluatorCallback.perform_eval recorded ("<set>-validation/CE loss",
                    "/PPL"); package versions

The reference is OLMo-core's code path end to end: NumpyPaddedFSLDatasetConfig.from_data_mix ->
LMEvaluator.from_numpy_dataset (NumpyFSLDataLoader, DataCollator) -> EvaluatorCallback.perform_eval
-> TransformerTrainModule.eval_batch (eval_only, CPU) -> LMEvaluator.update_metrics/compute_metrics.
Usage: /path/to/python tools/make_heldout_fixtures.py
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import olmo_core_eval_reference as ref  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "eval", "padded_heldout")
SEQ_LEN = 64
VOCAB = 512           # model embedding rows; token ids stay below EOS
EOS, PAD = 500, 511
# Eval batch sizes in instances (OLMo-core: rank_microbatch_size / sequence_length per rank).
BATCH_INSTANCES = [1, 5]


def make_documents(rng, n_docs):
    tokens = []
    for i in range(n_docs):
        kind = rng.integers(0, 10)
        if kind == 0:
            length = 0                                   # a document that is only its EOS
        elif kind == 1:
            length = int(rng.integers(SEQ_LEN, 3 * SEQ_LEN))  # truncated to SEQ_LEN
        else:
            length = int(rng.integers(1, SEQ_LEN))
        tokens += [int(t) for t in rng.integers(0, EOS, size=length)] + [EOS]
    tokens += [int(t) for t in rng.integers(0, EOS, size=int(rng.integers(1, 9)))]  # no EOS
    return np.array(tokens, dtype=np.uint32)


def main():
    from olmo_core.data import (DataCollator, DataMix, NumpyDatasetDType,
                                NumpyPaddedFSLDatasetConfig, TokenizerConfig, TokenizerName)
    from olmo_core.eval.lm_evaluator import LMEvaluator

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tokenizer = TokenizerConfig(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD,
                                identifier=TokenizerName.dolma2)
    # The mix's own file list, so the folder layout is AI2's; its manifest beside the sets.
    paths, labels = DataMix.v3_small_ppl_validation.build(OUT, TokenizerName.dolma2)
    from olmo_core.data.mixes import _get_data_mix_path
    with _get_data_mix_path(DataMix.v3_small_ppl_validation) as manifest:
        shutil.copy(manifest, os.path.join(OUT, "v3-small-ppl-validation.txt"))
    rng = np.random.default_rng(1234)
    for i, p in enumerate(paths):
        os.makedirs(os.path.dirname(p))
        make_documents(rng, n_docs=3 + i % 4).tofile(p)

    written = None

    expected = {"versions": ref.versions(),
                "reference": "OLMo-core NumpyPaddedFSLDataset + LMEvaluator + "
                             "EvaluatorCallback.perform_eval + TransformerTrainModule.eval_batch",
                "sequence_length": SEQ_LEN, "eos_token_id": EOS, "pad_token_id": PAD,
                "dtype": "uint32", "sets_dir": "eval-data/perplexity/v3_small_dolma2-tokenizer",
                "labels": labels, "runs": []}
    for batch_instances in BATCH_INSTANCES:
        work = tempfile.mkdtemp(prefix="tandem_heldout_")
        dataset = NumpyPaddedFSLDatasetConfig.from_data_mix(
            DataMix.v3_small_ppl_validation, mix_base_dir=OUT, sequence_length=SEQ_LEN,
            tokenizer=tokenizer, work_dir=work, dtype=NumpyDatasetDType.uint32).build()
        # The same weights (same seed) in each train module, written once.
        train_module, model, meta = ref.tiny_olmo3(
            VOCAB, rank_microbatch_size=batch_instances * SEQ_LEN, window=16,
            max_sequence_length=SEQ_LEN)
        if written is None:
            ref.write_tandem_model(model, meta, os.path.join(OUT, "model"))
            written = {k: v.clone() for k, v in model.state_dict().items()}
        assert all(torch.equal(written[k], v) for k, v in model.state_dict().items())
        # As LMEvaluatorCallbackConfig.build sizes it: the train module's eval batch spec
        # (rank_microbatch_size tokens) times the data-parallel world size (1 here).
        evaluator = LMEvaluator.from_numpy_dataset(
            dataset, name="lm", global_batch_size=train_module.eval_batch_spec.rank_batch_size,
            collator=DataCollator(pad_token_id=PAD), device=torch.device("cpu"))
        metrics = ref.run_evaluators(train_module, [evaluator])
        loader = evaluator.batches
        loader.reshuffle(epoch=1, in_memory=True)  # as Evaluator.__iter__ does (deterministic)
        order = [int(i) for i in loader.get_global_indices()[: loader.total_size]]
        loader.reset()
        run = {"batch_instances": batch_instances, "order": order,
               "metrics": {k[len("eval/lm/"):]: v for k, v in metrics.items()
                           if k.startswith("eval/lm/")}}
        if batch_instances == BATCH_INSTANCES[0]:
            instances = []
            for i in range(len(dataset)):
                item = dataset[i]
                instances.append({"input_ids": item["input_ids"].tolist(),
                                  "label_mask": [bool(b) for b in item["label_mask"].tolist()],
                                  "label": item["metadata"]["label"]})
            expected["instances"] = instances
        expected["runs"].append(run)
        shutil.rmtree(work)
        print(f"batch {batch_instances}: {len(order)} of {len(dataset)} instances;",
              {k: round(v, 6) for k, v in run["metrics"].items() if k.endswith("CE loss")})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
