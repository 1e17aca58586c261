#!/usr/bin/env python3
"""Random check of padded held-out evaluation against OLMo-core's LMEvaluator (unseen sets).

Each case draws, from the seed: a sequence length (powers of two and others), the token dtype,
vocabulary, EOS and padding ids, one to four labelled sets of one to three token files whose
documents are of every kind NumpyPaddedFSLDataset meets (EOS-only documents, documents longer than
the sequence length, trailing tokens without an EOS, now and then a file without any EOS), the
evaluator loader's seed, the eval batch in tokens (which decides the tail OLMo-core drops), and a
tiny random OLMo 3-shaped OLMo-core model.

The reference is OLMo-core's code path end to end: NumpyPaddedFSLDatasetConfig(paths, metadata
labels) -> LMEvaluator.from_numpy_dataset -> EvaluatorCallback.perform_eval ->
TransformerTrainModule.eval_batch (tools/olmo_core_eval_reference.py). tandem runs `tandem eval
CONFIG --checkpoint MODEL --json` with the same sets under `evaluation.padded.sets` (the same
`seed` and `batch_size`, and a random `batch_instances`, which must not matter). 40% of the cases
run on 2 or 3 data-parallel ranks: OLMo-core under torchrun with its DDP (a global eval batch of
the drawn instances per rank x the ranks, each rank reading its share, the metrics all-reduced),
tandem under mpirun with `batch_size` that global batch. Every set's loss must agree within 1e-6
relative (the fixture test's bound; OLMo-core accumulates in float32), its PPL
= exp(loss) within what that bound allows (1e-6 x |loss| relative, plus float32's rounding of
OLMo-core's exp); a case OLMo-core refuses must be refused by tandem too.

Usage: python tools/check_heldout_random.py BUILD/tandem [--seed S] [--cases N] [--keep DIR]
Needs torch and ai2-olmo-core (and mpirun). Exit status 0 when every case agrees.
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import olmo_core_eval_reference as ref  # noqa: E402
import random_checks  # noqa: E402

TOL = 1e-6
WORKER = "--olmo-core-rank"  # the argument torchrun's ranks are started with


def make_file(rng, seq_len, vocab, eos, pad, dtype):
    """Documents of every kind, then (usually) trailing tokens without an EOS."""
    ids = [t for t in range(vocab) if t not in (eos, pad)]
    tokens = []
    if rng.random() < 0.02:  # a file without any EOS: no document at all
        return np.array(rng.choices(ids, k=rng.randint(1, 3 * seq_len)), dtype=dtype)
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.12:
            length = 0
        elif kind < 0.3:
            length = rng.randint(seq_len, 3 * seq_len)
        else:
            length = rng.randint(1, seq_len)
        tokens += rng.choices(ids, k=length) + [eos]
    if rng.random() < 0.7:
        tokens += rng.choices(ids, k=rng.randint(1, 9))
    return np.array(tokens, dtype=dtype)


def draw_case(rng, work):
    seq_len = rng.choice([8, 16, 24, 32, 50, 64, 128])
    dtype = rng.choice(["uint16", "uint32"])
    vocab = rng.choice([200, 384, 512, 1000])
    eos, pad = rng.sample(range(vocab), 2)
    sets = []
    for s in range(rng.randint(1, 4)):
        label = f"set{s}-{rng.choice(['c4_en', 'wiki', 'books'])}-validation"
        paths = []
        for f in range(rng.randint(1, 3)):
            path = os.path.join(work, "sets", f"{s}", f"part-{f}.npy")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            make_file(rng, seq_len, vocab, eos, pad, dtype).tofile(path)
            paths.append(path)
        sets.append({"label": label, "paths": paths})
    k = rng.randint(1, 6)  # eval batch in instances (OLMo-core: rank_microbatch_size / seq)
    model = {"d_model": rng.choice([16, 32]), "n_layers": rng.randint(1, 3),
             "n_heads": rng.choice([2, 4]), "window": rng.choice([4, 8, 16, 64]),
             "seed": rng.randrange(1 << 30)}
    return {"seq_len": seq_len, "dtype": dtype, "vocab": vocab, "eos": eos, "pad": pad,
            "sets": sets, "batch_instances": k, "tandem_batch_instances": rng.randint(1, k),
            "loader_seed": rng.choice([0, rng.randrange(1 << 31)]), "model": model}


def build_model(case, work, dp_config=None):
    """The tiny OLMo-core model inside an eval-only train module, written for tandem too (by the
    single process; under torchrun the ranks load the weights it wrote)."""
    seq, m = case["seq_len"], case["model"]
    vocab_rows = 128 * ((case["vocab"] + 127) // 128)
    train_module, model, meta = ref.tiny_olmo3(
        vocab_rows, rank_microbatch_size=case["batch_instances"] * seq, d_model=m["d_model"],
        n_layers=m["n_layers"], n_heads=m["n_heads"], n_kv_heads=m["n_heads"] // 2,
        window=m["window"], max_sequence_length=seq, seed=m["seed"], dp_config=dp_config)
    if dp_config is None:
        ref.write_tandem_model(model, meta, os.path.join(work, "model"))
    else:
        model.load_state_dict(load_file(os.path.join(work, "model", "model.safetensors")))
    return train_module, meta


def olmo_core_metrics(case, work, train_module):
    from olmo_core.data import (DataCollator, NumpyDatasetDType, NumpyPaddedFSLDatasetConfig,
                                TokenizerConfig)
    from olmo_core.eval.lm_evaluator import LMEvaluator

    tokenizer = TokenizerConfig(vocab_size=case["vocab"], eos_token_id=case["eos"],
                                pad_token_id=case["pad"])
    paths = [p for s in case["sets"] for p in s["paths"]]
    metadata = [{"label": s["label"]} for s in case["sets"] for _ in s["paths"]]
    dataset = NumpyPaddedFSLDatasetConfig(
        paths=paths, metadata=metadata, sequence_length=case["seq_len"], tokenizer=tokenizer,
        work_dir=os.path.join(work, "olmo_core_work"),
        dtype=NumpyDatasetDType[case["dtype"]]).build()
    # OLMo-core's EvaluatorCallbackConfig: a global eval batch of rank_batch_size x the
    # data-parallel ranks; the loader gives each rank its share of every batch and the metrics
    # are all-reduced over the default group.
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    evaluator = LMEvaluator.from_numpy_dataset(
        dataset, name="lm", global_batch_size=train_module.eval_batch_spec.rank_batch_size * world,
        collator=DataCollator(pad_token_id=case["pad"]), device=torch.device("cpu"),
        seed=case["loader_seed"])
    metrics = ref.run_evaluators(train_module, [evaluator])
    out = {}
    for s in case["sets"]:
        loss = metrics.get(f"eval/lm/{s['label']}/CE loss")
        ppl = metrics.get(f"eval/lm/{s['label']}/PPL")
        out[s["label"]] = None if loss is None else {"loss": loss, "ppl": ppl}
    return out, len(dataset)


def olmo_core_on_ranks(case, work):
    """OLMo-core's metrics of the case on case["world"] ranks (torchrun, gloo, its DDP):
    (metrics, instances, None) or (None, 0, why it failed)."""
    with open(os.path.join(work, "case.json"), "w") as f:
        json.dump(case, f)
    p = random_checks.torchrun(case["world"], os.path.abspath(__file__), [WORKER, work], 600)
    if p is None:
        return None, 0, f"OLMo-core on {case['world']} ranks did not finish in 600 s"
    result = os.path.join(work, "olmo_core.json")
    if p.returncode != 0 or not os.path.exists(result):
        lines = [l.strip() for l in (p.stdout + p.stderr).splitlines() if "Error" in l]
        return None, 0, (f"OLMo-core on {case['world']} ranks failed (exit {p.returncode}): "
                         f"{' | '.join(dict.fromkeys(lines))[-600:]}")
    with open(result) as f:
        out = json.load(f)
    return out.get("metrics"), out.get("instances", 0), out.get("error")


def olmo_core_worker(work):
    """One rank of olmo_core_on_ranks (started by torchrun): OLMo-core's evaluation of the case
    in `work` with its DDP; rank 0 writes olmo_core.json (the metrics, or OLMo-core's refusal)."""
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train import prepare_training_environment, teardown_training_environment
    from olmo_core.train.train_module import TransformerDataParallelConfig

    torch.set_num_threads(1)
    prepare_training_environment(seed=0, backend="gloo")
    with open(os.path.join(work, "case.json")) as f:
        case = json.load(f)
    assert torch.distributed.get_world_size() == case["world"]
    train_module, _ = build_model(
        case, work, dp_config=TransformerDataParallelConfig(name=DataParallelType.ddp))
    try:
        metrics, instances = olmo_core_metrics(case, work, train_module)
        out = {"metrics": metrics, "instances": instances}
    except Exception as e:  # noqa: BLE001 - OLMo-core's refusal, compared with tandem's
        out = {"error": f"{type(e).__name__}: {e}"}
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(work, "olmo_core.json"), "w") as f:
            json.dump(out, f)
    teardown_training_environment()


def tandem_metrics(binary, case, work, meta):
    seq, world = case["seq_len"], case["world"]
    train = os.path.join(work, "train.npy")
    np.zeros(4 * seq, dtype=case["dtype"]).tofile(train)
    sets = [{"label": s["label"], "paths": s["paths"]} for s in case["sets"]]
    config = {
        "model": {"d_model": meta["d_model"], "n_layers": meta["n_layers"],
                  "n_heads": meta["n_heads"], "n_kv_heads": meta["n_kv_heads"],
                  "hidden_size": meta["hidden_size"], "vocab_size": case["vocab"],
                  "embedding_size": meta["vocab_size"], "rope_theta": 500000.0,
                  "layer_norm_eps": 1e-6, "max_sequence_length": seq,
                  "sliding_window": {"pattern": meta["pattern"],
                                     "force_full_attention_on_first_layer": False}},
        "data": {"paths": [train], "sequence_length": seq, "global_batch_size": seq, "seed": 1,
                 "vocab_size": case["vocab"], "dtype": case["dtype"],
                 "eos_token_id": case["eos"], "pad_token_id": case["pad"]},
        "optim": {"lr": 1e-3}, "scheduler": {"name": "constant"},
        "trainer": {"save_folder": os.path.join(work, "run"), "max_steps": 1},
        "evaluation": {"padded": {"sets": sets, "sequence_length": seq,
                                  "batch_size": case["batch_instances"] * seq * world,
                                  "seed": case["loader_seed"],
                                  "batch_instances": case["tandem_batch_instances"]}}}
    path = os.path.join(work, "run.yaml")
    with open(path, "w") as f:
        json.dump(config, f)  # JSON is YAML
    run = subprocess.run(random_checks.mpirun(world) + [
        binary, "eval", path, "--checkpoint", os.path.join(work, "model"), "--json"],
        capture_output=True, text=True)
    if run.returncode != 0:  # the error line (under mpirun, not its notices after it)
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if "error" in l.lower()] if world > 1 else []
        error = errors[0] if errors else lines[-1] if lines else ""
        return None, f"exit {run.returncode}: {error}"
    held = json.loads(run.stdout[run.stdout.index("{"):]).get("heldout", {})
    return {s["label"]: held.get(s["label"]) for s in case["sets"]}, None


def main():
    ap = random_checks.argument_parser(__doc__, 10)
    ap.add_argument("--keep", default="", help="keep each case's files under this folder")
    args = ap.parse_args()
    binary = os.path.abspath(args.tandem)
    rng = random.Random(args.seed)

    def check_one(index):
        work = (os.path.join(args.keep, f"case{index}") if args.keep
                else tempfile.mkdtemp(prefix="heldout_random_"))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        case = draw_case(rng, work)
        # Data-parallel ranks (a stream of their own, so that the other draws stay those of
        # earlier seeds): 40% of the cases evaluate on 2 or 3 ranks, OLMo-core under torchrun
        # with its DDP and tandem under mpirun, the eval batch being batch_instances per rank.
        ranks = random.Random(f"heldout world {args.seed} {index}")
        case["world"] = ranks.choice([2, 3]) if ranks.random() < 0.4 else 1
        shape = {k: v for k, v in case.items() if k != "sets"}
        shape["files"] = [len(s["paths"]) for s in case["sets"]]
        train_module, meta = build_model(case, work)
        if case["world"] > 1:
            theirs, n_instances, their_error = olmo_core_on_ranks(case, work)
        else:
            try:
                theirs, n_instances = olmo_core_metrics(case, work, train_module)
                their_error = None
            except Exception as e:  # noqa: BLE001 - OLMo-core's refusal, compared with tandem's
                theirs, n_instances, their_error = None, 0, f"{type(e).__name__}: {e}"
        mine, my_error = tandem_metrics(binary, case, work, meta)
        if not args.keep:
            shutil.rmtree(work)
        if their_error:
            verdict = None if my_error else False
            return verdict, (f"OLMo-core refuses ({their_error}); tandem "
                             f"{'refuses (' + my_error + ')' if my_error else 'evaluates'}: {shape}")
        if my_error:
            return False, f"tandem fails ({my_error}), OLMo-core evaluated: {shape}"
        problems, worst = [], 0.0
        for label, t in theirs.items():
            m = mine.get(label)
            # No instance evaluated (the set is all in the dropped tail): OLMo-core's mean of
            # nothing is NaN, tandem reports null.
            if t is not None and math.isnan(t["loss"]) and (m is None or m["loss"] is None):
                continue
            if t is None or m is None or m["loss"] is None:
                if (t is None) != (m is None):
                    problems.append(f"{label}: OLMo-core {t}, tandem {m}")
                continue
            loss_rel = abs(m["loss"] - t["loss"]) / max(abs(t["loss"]), 1e-30)
            ppl_rel = abs(m["ppl"] - t["ppl"]) / max(abs(t["ppl"]), 1e-30)
            worst = max(worst, loss_rel)
            if loss_rel > TOL:
                problems.append(f"{label} loss: tandem {m['loss']!r}, OLMo-core {t['loss']!r}")
            # PPL = exp(loss): a loss within TOL relative moves it by TOL x |loss| relative, and
            # OLMo-core rounds it to float32.
            if ppl_rel > TOL * abs(t["loss"]) + 2.0**-23:
                problems.append(f"{label} ppl: tandem {m['ppl']!r}, OLMo-core {t['ppl']!r}")
        what = (f"{n_instances} instances, {len(theirs)} sets, worst loss rel {worst:.1e}: {shape}"
                + "".join("\n    " + p for p in problems))
        return not problems, what

    return random_checks.run_cases("check_heldout_random", args, check_one)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER:
        sys.exit(olmo_core_worker(sys.argv[2]))
    sys.exit(main())
