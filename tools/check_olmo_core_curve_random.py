#!/usr/bin/env python3
"""tandem's training curve against OLMo-core's own trainer, on random recipes.

tools/olmo_core_trainer.py's `curve` runs OLMo-core's Trainer, TransformerTrainModule,
SkipStepAdamW, CosWithWarmup and NumpyFSLDataset/NumpyDataLoader on one recipe and writes the
tandem config of that recipe (tests/train/olmo_core_parity_test.cc checks it). This draws other
recipes and runs the same comparison on each: learning rate, warmup, final lr fraction, instances
per batch and per micro-batch, data and init seeds, the sliding window, the skip-step rule's
window and sigma, and the dataset (NumpyFSLDataset or, half the time, NumpyPackedFSLDataset with
fragmented documents and a stable sort) and, half the time, label-mask files; of the fixed-window
recipes without masks, 70% read a source mixture instead (olmo_core_trainer.MIXTURE: a target
ratio for two sources, one of them upsampled when it needs to be, and 12000 to 30000 requested
tokens). For every step, tandem's loss must be within 1e-4 relative (the issue's bound),
its lr within 1e-12 relative, its grad norm within 1e-3 relative (the fixture test's bound) and
its skip decision OLMo-core's.

A bound is judged only where the recipe itself determines the quantity to a tenth of it: each
recipe is also trained by tandem from its initial weights multiplied by (1 + 1e-7 N(0, 1)), and a
quantity that this moves by more than a tenth of its bound (over the whole run) is reported, not
judged; skip decisions are judged only when both the loss and the grad norm are and OLMo-core's
closest decision was at least 1e-3 (relative) from its threshold. Measured (seed 2,
40 recipes, 30 steps, before this rule): every recipe with lr <= 1e-3 agreed within the bounds;
7 of the 15 with lr 3e-3 breached the grad-norm bound (2.4e-3 to 0.29), and there the
perturbation alone moved tandem's own grad norm by 1.9e-3 to 0.72 and its loss by up to 5.1e-4 (a
chaotic recipe); one lr 1e-3 recipe agreed within 6.8e-4 while its own sensitivity was 1.1e-3.

Usage: python3 tools/check_olmo_core_curve_random.py TANDEM_BINARY [--seed S] [--cases N]
       [--steps 30]
Needs ai2-olmo-core (torch) and pyyaml; runs OLMo-core on the CPU with one thread.
"""
import json
import os
import random
import subprocess
import sys
import shutil
import tempfile
import types

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from random_checks import argument_parser, run_cases  # noqa: E402
import olmo_core_trainer as recipe  # noqa: E402


def draw(rng):
    batch = rng.choice([4, 6, 8, 12])
    return dict(LR=rng.choice([1e-4, 5e-4, 1e-3, 3e-3]), WARMUP=rng.randint(0, 12),
                ALPHA_F=rng.choice([0.0, 0.1, 0.5]), INSTANCES_PER_BATCH=batch,
                MICRO_BATCH_INSTANCES=rng.choice([m for m in (1, 2, 3, 4) if batch % m == 0]),
                DATA_SEED=rng.randint(0, 2**31), INIT_SEED=rng.randint(0, 2**31),
                WINDOW=rng.choice([4, 8, 16, 32]), SKIP_WINDOW=rng.choice([8, 16, 32]),
                SKIP_SIGMA=rng.choice([1.5, 2.0, 3.0]), PACKED=rng.random() < 0.5,
                LABEL_MASKS=rng.random() < 0.5)


LOSS_BOUND, GRAD_NORM_BOUND = 1e-4, 1e-3


def worst_gap(a, b, key):
    return max(abs(x[key] - y[key]) / abs(y[key]) for x, y in zip(a, b))


def compare(ours, ref, judge_loss, judge_norm):
    """(worst loss rel diff, worst grad norm rel diff, first problem or None)."""
    if len(ours) != len(ref["steps"]):
        return None, None, f"{len(ours)} steps, OLMo-core {len(ref['steps'])}"
    worst_loss = worst_norm = 0.0
    # A skip decision within 1e-3 of OLMo-core's threshold could flip on the last digit.
    judge_skips = judge_loss and judge_norm and (ref["closest_skip_margin_rel"] or 1.0) >= 1e-3
    skipped_before = 0
    for a, b in zip(ours, ref["steps"]):
        step = b["step"]
        loss = abs(a["train/loss"] - b["train/loss"]) / abs(b["train/loss"])
        norm = abs(a["train/grad_norm"] - b["train/grad_norm"]) / b["train/grad_norm"]
        worst_loss, worst_norm = max(worst_loss, loss), max(worst_norm, norm)
        if a["step"] != step:
            return worst_loss, worst_norm, f"tandem's step {a['step']} against {step}"
        if judge_loss and loss > LOSS_BOUND:
            return worst_loss, worst_norm, (f"step {step}: loss {a['train/loss']} vs "
                                            f"{b['train/loss']}")
        if abs(a["lr"] - b["lr"]) > 1e-12 * b["lr"]:
            return worst_loss, worst_norm, f"step {step}: lr {a['lr']} vs {b['lr']}"
        if judge_norm and norm > GRAD_NORM_BOUND:
            return worst_loss, worst_norm, (f"step {step}: grad norm {a['train/grad_norm']} vs "
                                            f"{b['train/grad_norm']}")
        skipped_here = a["skipped_steps"] - skipped_before
        skipped_before = a["skipped_steps"]
        if (skipped_here == 1) != bool(b["skipped"]) and judge_skips:
            return worst_loss, worst_norm, f"step {step}: skip decision differs"
    return worst_loss, worst_norm, None


def check(binary, seed, index, steps, threads):
    rng = random.Random(seed * 1000 + index)
    case = draw(rng)
    # Source mixtures: a stream of their own (the other draws stay as they were); OLMo-core mixes
    # only fixed windows without label masks.
    mixing = random.Random(f"curve source mixture {seed} {index}")
    case["MIXTURE"] = None
    if not case["PACKED"] and not case["LABEL_MASKS"] and mixing.random() < 0.7:
        case["MIXTURE"] = dict(ratio=mixing.choice([0.3, 0.45, 0.5, 0.7]),
                               requested=mixing.randint(12000, 30000))
    for key, value in case.items():
        setattr(recipe, key, value)
    recipe.STEPS = steps
    out = tempfile.mkdtemp(prefix="olmo_core_curve_")
    recipe.curve(types.SimpleNamespace(out=out, threads=threads))
    with open(os.path.join(out, "curve_reference.json")) as f:
        ref = json.load(f)
    ours = tandem_train(binary, out, os.path.join(out, "init"), "tandem-run")
    if isinstance(ours, str):
        return False, case, ref, ours
    # The recipe's own sensitivity: tandem from the initial weights perturbed by 1e-7 relative.
    perturbed = os.path.join(out, "init-perturbed")
    shutil.copytree(os.path.join(out, "init"), perturbed)
    weights = os.path.join(perturbed, "model.safetensors")
    g = torch.Generator().manual_seed(seed * 1000 + index)
    save_file({k: (v * (1 + 1e-7 * torch.randn(v.shape, generator=g))).contiguous()
               for k, v in load_file(weights).items()}, weights)
    moved = tandem_train(binary, out, perturbed, "tandem-run-perturbed")
    if isinstance(moved, str):
        return False, case, ref, moved
    sens_loss, sens_norm = worst_gap(moved, ours, "train/loss"), worst_gap(moved, ours,
                                                                           "train/grad_norm")
    judge_loss, judge_norm = sens_loss < LOSS_BOUND / 10, sens_norm < GRAD_NORM_BOUND / 10
    worst_loss, worst_norm, problem = compare(ours, ref, judge_loss, judge_norm)
    summary = (f"worst loss rel {worst_loss:.1e} ({'judged' if judge_loss else 'not judged'}: "
               f"own sensitivity {sens_loss:.1e}), grad norm rel {worst_norm:.1e} "
               f"({'judged' if judge_norm else 'not judged'}: own sensitivity {sens_norm:.1e}), "
               f"skipped {ref['skipped_steps']}, filter-rejected steps "
               f"{len(ref['steps_with_rejected_instances'])}")
    return problem is None, case, ref, (problem + "; " + summary) if problem else summary


def tandem_train(binary, out, init, name):
    """tandem's metrics of the recipe in `out` from `init`, or why it failed."""
    run = os.path.join(out, name)
    p = subprocess.run([binary, "train", os.path.join(out, "curve.yaml"),
                        f"trainer.init_from={init}", f"trainer.save_folder={run}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"tandem train failed: {p.stderr.strip()[-300:]}"
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [m for m in map(json.loads, filter(str.strip, f)) if "train/loss" in m]


def main():
    ap = argument_parser(__doc__, cases=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    def one(index):
        ok, case, _, what = check(args.tandem, args.seed, index, args.steps, args.threads)
        return ok, f"{what}: {case}"

    return run_cases("check_olmo_core_curve_random", args, one, f"recipes of {args.steps} steps")


if __name__ == "__main__":
    sys.exit(main())
