#!/usr/bin/env python3
"""Writes the optimisation parity fixtures of tests/fixtures/optim/ with the real reference
packages: OLMo-core's scheduler classes and SkipStepAdamW (ai2-olmo-core), torch.optim.AdamW and
torch.nn.utils.clip_grad_norm_ (torch). Each fixture records the package versions that made it.

Usage: python3 tools/make_optim_fixtures.py [--out tests/fixtures/optim]
"""

import argparse
import json
import math
import os
import platform
import warnings
from importlib.metadata import version

import numpy as np
import torch
from olmo_core.optim import SkipStepAdamW
from olmo_core.optim.scheduler import (
    WSD,
    WSDS,
    ComposableScheduler,
    ComposableSchedulerStage,
    ConstantScheduler,
    ConstantWithWarmup,
    CosWithWarmup,
    CosWithWarmupAndLinearDecay,
    ExponentialScheduler,
    HalfCosWithWarmup,
    InvSqrtWithWarmup,
    LinearWithWarmup,
    OverrideDecay,
    PowerLR,
    SequentialScheduler,
)

warnings.filterwarnings("ignore", category=DeprecationWarning)


def versions():
    return {
        "ai2-olmo-core": version("ai2-olmo-core"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def write(out_dir, name, payload):
    payload = {"generated_by": "tools/make_optim_fixtures.py", "versions": versions(), **payload}
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        json.dump(payload, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


# ---------------------------------------------------------------------------------------------
# Schedules: values of OLMo-core's classes at many steps, boundaries included.


def probe_steps(t_max, marks, rng, n_random=40):
    steps = {0, 1, 2, t_max - 1, t_max, t_max + 1, t_max + 1000}
    for m in marks:
        steps.update({max(m - 1, 0), m, m + 1})
    steps.update(int(x) for x in rng.integers(0, t_max + 1, n_random))
    return sorted(steps)


# Past t_max OLMo-core's sequential scheduler asserts; tandem holds the value at t_max there, so
# only its steps up to t_max are compared. (The linear decay tails of wsd, power_lr and
# cos_with_warmup_and_linear_decay go on below their floor past t_max, and tandem's with them.)
ASSERTS_PAST_T_MAX = {"sequential"}


def schedule_fixture(out_dir):
    rng = np.random.default_rng(20251130)
    # OLMo 3 7B stage 1 as AI2 ran it (OLMo-core src/scripts/official/OLMo3/
    # OLMo-3-1025-7B-pretrain-{1,2}.py): global batch 8192 * 512 tokens; the trainer turns a token
    # duration into steps with ceil; part 2's half-cosine warmup is written in terms of part 1.
    gbs = 8192 * 512
    t_max_5t = math.ceil(int(5e12) / gbs)
    t_max_7t = math.ceil(int(7e12) / gbs)
    switch = int(5e12) // gbs // 2 + 2000 // 2
    assert (t_max_5t, t_max_7t, switch) == (1192093, 1668931, 597046)
    maxtext_steps = 1414078

    cases = []

    def add(name, config, scheduler, initial_lr, t_max, marks=()):
        steps = probe_steps(t_max, marks, rng)
        if config["name"] in ASSERTS_PAST_T_MAX:
            steps = [s for s in steps if s <= t_max]
        lrs = [float(scheduler(initial_lr, s, t_max)) for s in steps]
        cases.append({"name": name, "config": config, "initial_lr": initial_lr, "t_max": t_max,
                      "steps": steps, "lr": lrs})

    cos = CosWithWarmup(warmup=2000, alpha_f=0.1)
    add("olmo3_7b_stage1_part1", {"name": "cos_with_warmup", "warmup": 2000, "alpha_f": 0.1},
        cos.get_lr, 3e-4, t_max_5t, [2000, switch])
    half = HalfCosWithWarmup(warmup=switch)
    add("olmo3_7b_stage1_part2", {"name": "half_cos_with_warmup", "warmup": switch},
        half.get_lr, 3e-4, t_max_7t, [switch])
    part1 = CosWithWarmup(warmup=2000, alpha_f=0.1, t_max=t_max_5t)

    def stitched(lr, s, t_max):
        return part1.get_lr(lr, s, t_max) if s <= switch else half.get_lr(lr, s, t_max)

    add("olmo3_7b_stage1_stitched",
        {"name": "stitched", "switch_step": switch,
         "first": {"name": "cos_with_warmup", "warmup": 2000, "alpha_f": 0.1, "t_max": t_max_5t},
         "second": {"name": "half_cos_with_warmup", "warmup": switch, "alpha_f": 0.1}},
        stitched, 3e-4, t_max_7t, [2000, switch, t_max_5t])
    add("maxtext_single_cosine", {"name": "cos_with_warmup", "warmup_steps": 2000, "alpha_f": 0.1},
        CosWithWarmup(warmup=2000, alpha_f=0.1).get_lr, 3e-4, maxtext_steps, [2000])
    add("cos_fraction_min_lr_fixed_t_max",
        {"name": "cos_with_warmup", "warmup_fraction": 0.0125, "alpha_f": 0.05,
         "warmup_min_lr": 1e-5, "t_max": 5000},
        CosWithWarmup(warmup_fraction=0.0125, alpha_f=0.05, warmup_min_lr=1e-5,
                      t_max=5000).get_lr, 1e-3, 7000, [62, 63, 5000])
    add("half_cos_small", {"name": "half_cos_with_warmup", "warmup": 100, "alpha_f": 0.0},
        HalfCosWithWarmup(warmup=100, alpha_f=0.0).get_lr, 6e-4, 1000, [100])
    stage2_t_max = math.ceil(int(100e9) / 2097152)
    add("olmo3_7b_stage2_linear", {"name": "linear_with_warmup", "warmup": 0, "alpha_f": 0.0},
        LinearWithWarmup(warmup=0, alpha_f=0.0).get_lr, 2.0712e-4, stage2_t_max)
    add("linear_alias_stage2", {"name": "linear"},
        LinearWithWarmup(warmup=0, alpha_f=0.0).get_lr, 2.0712e-4, stage2_t_max)
    add("linear_with_warmup", {"name": "linear_with_warmup", "warmup": 400, "alpha_f": 0.1},
        LinearWithWarmup(warmup=400, alpha_f=0.1).get_lr, 4e-4, 3000, [400])
    add("wsd_fraction", {"name": "wsd", "warmup": 100, "decay_fraction": 0.2,
                         "decay_min_lr": 1e-5},
        WSD(warmup=100, decay_fraction=0.2, decay_min_lr=1e-5).get_lr, 3e-4, 2501, [100, 2001])
    add("wsd_steps", {"name": "wsd", "warmup_fraction": 0.05, "decay": 300},
        WSD(warmup_fraction=0.05, decay=300, decay_fraction=None).get_lr, 1e-3, 3000, [150, 2700])
    add("constant", {"name": "constant"}, ConstantScheduler().get_lr, 3e-4, 1000)
    add("constant_with_warmup", {"name": "constant_with_warmup", "warmup": 50,
                                 "warmup_min_lr": 1e-6},
        ConstantWithWarmup(warmup=50, warmup_min_lr=1e-6).get_lr, 3e-4, 1000, [50])
    # The rest of OLMo-core 3.0's schedulers (appended: the cases above keep their probe steps).
    add("inv_sqrt_with_warmup", {"name": "inv_sqrt_with_warmup", "warmup": 500, "alpha_f": 0.05,
                                 "warmup_min_lr": 1e-6},
        InvSqrtWithWarmup(warmup=500, alpha_f=0.05, warmup_min_lr=1e-6).get_lr, 6e-4, 20000,
        [500])
    add("inv_sqrt_fraction", {"name": "inv_sqrt_with_warmup", "warmup_fraction": 0.03},
        InvSqrtWithWarmup(warmup_fraction=0.03).get_lr, 1e-3, 4001, [120])
    add("power_lr", {"name": "power_lr", "warmup": 200, "b": -0.51, "decay_fraction": 0.2,
                     "decay_min_lr": 1e-6},
        PowerLR(warmup=200, b=-0.51, decay_fraction=0.2, decay_min_lr=1e-6).get_lr, 3e-3,
        10000, [200, 8000])
    add("power_lr_steps", {"name": "power_lr", "warmup_fraction": 0.1, "b": -0.3, "decay": 150},
        PowerLR(warmup_fraction=0.1, b=-0.3, decay=150, decay_fraction=None).get_lr, 1e-3, 999,
        [100, 849])
    add("cos_with_warmup_and_linear_decay",
        {"name": "cos_with_warmup_and_linear_decay", "warmup": 100, "alpha_f": 0.1,
         "decay_fraction": 0.15, "decay_min_lr": 1e-6},
        CosWithWarmupAndLinearDecay(warmup=100, alpha_f=0.1, decay_fraction=0.15,
                                    decay_min_lr=1e-6).get_lr, 4e-4, 3000, [100, 2550])
    add("cos_with_warmup_and_linear_decay_t_max",
        {"name": "cos_with_warmup_and_linear_decay", "warmup_fraction": 0.02, "t_max": 5000,
         "decay": 400},
        CosWithWarmupAndLinearDecay(warmup_fraction=0.02, t_max=5000, decay=400,
                                    decay_fraction=None).get_lr, 4e-4, 3000, [100, 2600])
    add("exponential", {"name": "exponential", "lr_min": 1e-7},
        ExponentialScheduler(lr_min=1e-7).get_lr, 1e-2, 1000)
    add("wsds", {"name": "wsds", "period_lengths": [1000, 600, 400], "warmup": 100,
                 "decay_fraction": 0.1, "decay_min_lr": 1e-6},
        WSDS(period_lengths=[1000, 600, 400], warmup=100, decay_fraction=0.1,
             decay_min_lr=1e-6).get_lr, 3e-4, 2000, [100, 900, 1000, 1540, 1600, 1960, 2000])
    add("wsds_multipliers", {"name": "wsds", "period_lengths": [500, 500],
                             "period_lr_multipliers": [1.0, 0.5], "warmup_fraction": 0.1,
                             "decay": 50, "warmup_min_lr": 1e-6},
        WSDS(period_lengths=[500, 500], period_lr_multipliers=[1.0, 0.5], warmup_fraction=0.1,
             decay=50, warmup_min_lr=1e-6).get_lr, 3e-4, 1000, [50, 450, 500, 950, 1000])
    add("sequential", {"name": "sequential", "schedulers_max": [300, 1000], "schedulers": [
        {"name": "constant_with_warmup", "warmup": 100},
        {"name": "cos_with_warmup", "warmup": 0, "alpha_f": 0.5},
        {"name": "linear_with_warmup", "warmup": 0, "alpha_f": 0.0}]},
        SequentialScheduler(schedulers=[ConstantWithWarmup(warmup=100),
                                        CosWithWarmup(warmup=0, alpha_f=0.5),
                                        LinearWithWarmup(warmup=0, alpha_f=0.0)],
                            schedulers_max=[300, 1000]).get_lr, 1e-3, 2000,
        [100, 300, 1300])
    add("sequential_override", {
        "name": "sequential", "schedulers_max": [200, 5000],
        "schedulers": [{"name": "constant_with_warmup", "warmup": 50},
                       {"name": "cos_with_warmup", "warmup": 0}],
        "override_decay": {"start": 1500, "duration": 300, "shape": "cosine",
                           "end_lr_fraction": 0.01}},
        SequentialScheduler(schedulers=[ConstantWithWarmup(warmup=50), CosWithWarmup(warmup=0)],
                            schedulers_max=[200, 5000],
                            override_decay=OverrideDecay(start=1500, duration=300,
                                                         shape="cosine",
                                                         end_lr_fraction=0.01)).get_lr,
        1e-3, 2000, [50, 200, 1500, 1800])
    add("composable", {"name": "composable", "stages": [
        {"duration": 100, "start_lr": 0.0, "end_lr_fraction": 1.0},
        {"duration": 800, "shape": "cosine", "end_lr_fraction": 0.2},
        {"duration": 200, "start_lr_fraction": 0.3, "end_lr": 1e-5}]},
        ComposableScheduler(stages=[
            ComposableSchedulerStage(duration=100, start_lr=0.0, end_lr_fraction=1.0),
            ComposableSchedulerStage(duration=800, shape="cosine", end_lr_fraction=0.2),
            ComposableSchedulerStage(duration=200, start_lr_fraction=0.3, end_lr=1e-5)]).get_lr,
        2e-3, 1500, [100, 900, 1100])
    add("composable_override", {"name": "composable", "stages": [
        {"duration": 50, "start_lr": 0.0, "end_lr_fraction": 1.0},
        {"duration": 2000, "end_lr_fraction": 1.0}],
        "override_decay": {"start": 700, "duration": 250, "end_lr": 0.0}},
        ComposableScheduler(stages=[
            ComposableSchedulerStage(duration=50, start_lr=0.0, end_lr_fraction=1.0),
            ComposableSchedulerStage(duration=2000, end_lr_fraction=1.0)],
            override_decay=OverrideDecay(start=700, duration=250, end_lr=0.0)).get_lr,
        2e-3, 1000, [50, 700, 950])
    write(out_dir, "schedules.json", {
        "reference": "olmo_core.optim.scheduler get_lr(initial_lr, current, t_max); the stitched "
                     "case assembles CosWithWarmup and HalfCosWithWarmup as AI2's OLMo 3 7B "
                     "pretrain-1/-2 scripts did",
        "cases": cases})


# ---------------------------------------------------------------------------------------------
# AdamW: torch.optim.AdamW in fp32 (single-tensor path), with and without weight decay, the
# embedding in a no-decay group as OLMo-core's recipe.

PARAM_SHAPES = [("embeddings.weight", 40), ("blocks.0.attention.w_q.weight", 64),
                ("blocks.0.attention_norm.weight", 19)]


def optimiser_case(name, make, betas, eps, weight_decay, lrs, seed, period, info=None):
    """One optimiser's steps from seed: PARAM_SHAPES' parameters (the embedding in a no-decay group,
    as OLMo-core's recipe), one step per lr with random gradients scaled by 0.1 ** (i % period)
    and an all-zero gradient at step 3; every parameter and moment after every step. `make` builds
    the optimiser from the param groups."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(n, generator=gen, dtype=torch.float32) for _, n in PARAM_SHAPES]
    initial = [p.clone() for p in params]
    opt = make([{"params": [params[0]], "weight_decay": 0.0},
                {"params": params[1:], "weight_decay": weight_decay}])
    steps = []
    for i, lr in enumerate(lrs):
        grads = [torch.randn(n, generator=gen, dtype=torch.float32) * (0.1 ** (i % period))
                 for _, n in PARAM_SHAPES]
        if i == 2:
            grads[2].zero_()  # an all-zero gradient mid-run
        for p, g in zip(params, grads):
            p.grad = g.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        if isinstance(opt, SkipStepAdamW):
            opt.latest_loss = torch.tensor(1.0)  # fewer losses than the rule needs: never skips
        opt.step()
        assert not isinstance(opt, SkipStepAdamW) or opt.step_skipped.item() == 0.0
        steps.append({
            "lr": lr,
            "grads": [g.tolist() for g in grads],
            "params": [p.detach().tolist() for p in params],
            "exp_avg": [opt.state[p]["exp_avg"].tolist() for p in params],
            "exp_avg_sq": [opt.state[p]["exp_avg_sq"].tolist() for p in params],
        })
    return {"name": name, **(info or {}), "betas": list(betas), "eps": eps,
            "weight_decay": weight_decay, "param_names": [n for n, _ in PARAM_SHAPES],
            "weight_decay_applies": [False, True, True],
            "initial_params": [p.tolist() for p in initial], "steps": steps}


def adamw_case(name, weight_decay, lrs, seed):
    return optimiser_case(
        name, lambda groups: torch.optim.AdamW(groups, lr=lrs[0], betas=(0.9, 0.95), eps=1e-8,
                                               foreach=False, fused=False),
        (0.9, 0.95), 1e-8, weight_decay, lrs, seed, period=3)


def adamw_fixture(out_dir):
    lrs = [1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3, 0.0, 5e-4]  # includes an lr-0 step
    write(out_dir, "adamw.json", {
        "reference": "torch.optim.AdamW(foreach=False, fused=False), fp32",
        "cases": [adamw_case("decay_0.1_embedding_excluded", 0.1, lrs, 1),
                  adamw_case("no_decay", 0.0, lrs, 2)]})


# ---------------------------------------------------------------------------------------------
# OLMo-core's SkipStepAdamW on its default foreach path (the OLMo 3 recipe's optimiser) and on its
# single-tensor path, whose fp32 arithmetic differs from torch.optim.AdamW's: fp32 bias
# corrections; on the foreach path m and v by separate multiplies and adds, the update as
# (m / denom) * -step_size. Every step is taken (fewer losses than the skip rule needs).


def skip_step_adamw_case(name, betas, eps, weight_decay, lrs, seed, foreach=True):
    return optimiser_case(
        name, lambda groups: SkipStepAdamW(groups, lr=lrs[0], betas=betas, eps=eps,
                                           weight_decay=weight_decay, rolling_interval_length=128,
                                           foreach=foreach),
        betas, eps, weight_decay, lrs, seed, period=4, info={"foreach": foreach})


def skip_step_adamw_fixture(out_dir):
    lrs = [1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3, 0.0, 5e-4] + [4e-4 * 0.9 ** k for k in range(13)]
    write(out_dir, "skip_step_adamw.json", {
        "reference": "olmo_core.optim.SkipStepAdamW(foreach=True or False), fp32",
        "cases": [skip_step_adamw_case("olmo3_betas", (0.9, 0.95), 1e-8, 0.1, lrs, 21),
                  skip_step_adamw_case("betas_0.8_0.99", (0.8, 0.99), 1e-6, 0.3, lrs, 22),
                  skip_step_adamw_case("betas_0.9_0.999", (0.9, 0.999), 1e-6, 0.0, lrs, 23),
                  skip_step_adamw_case("single_olmo3_betas", (0.9, 0.95), 1e-8, 0.1, lrs, 24,
                                       foreach=False),
                  # beta1 0.3: torch's lerp takes its other formula (weight 0.7 >= 0.5)
                  skip_step_adamw_case("single_betas_0.3_0.99", (0.3, 0.99), 1e-6, 0.3, lrs, 25,
                                       foreach=False)]})


# ---------------------------------------------------------------------------------------------
# Clipping: torch.nn.utils.clip_grad_norm_.


def clip_fixture(out_dir):
    gen = torch.Generator().manual_seed(7)
    cases = []
    for name, scale, max_norm in [("clipped", 1.0, 1.0), ("not_clipped", 0.01, 1.0),
                                  ("clipped_max_0.5", 0.3, 0.5)]:
        grads = [torch.randn(n, generator=gen, dtype=torch.float32) * scale
                 for n in (120, 17, 300)]
        before = [g.clone() for g in grads]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
        cases.append({"name": name, "max_norm": max_norm,
                      "grads": [g.tolist() for g in before],
                      "total_norm": float(total),
                      "clipped": [p.grad.tolist() for p in params]})
    write(out_dir, "clip.json", {"reference": "torch.nn.utils.clip_grad_norm_(foreach=False)",
                                 "cases": cases})


# ---------------------------------------------------------------------------------------------
# Skip-step: OLMo-core's SkipStepAdamW on a synthetic loss / grad-norm sequence with spikes.


def synthetic_sequence(n, rng):
    t = np.arange(n)
    loss = 1.5 * np.exp(-t / 150.0) + 3.0 + rng.normal(0, 0.02, n)
    grad = 0.6 + 0.3 * np.exp(-t / 80.0) + np.abs(rng.normal(0, 0.03, n))
    for s in (10, 40, 62):  # spikes before the rule is active (fewer than 64 values): applied
        loss[s] += 3.0
    for s in (63, 100, 101, 180, 250):  # loss spikes once active (63 is the first active step)
        loss[s] += 4.0
    for s in (120, 181, 300):  # grad-norm spikes
        grad[s] += 5.0
    loss[200] += 0.03  # small bumps that must NOT be skipped
    grad[220] += 0.05
    return loss.astype(np.float32), grad.astype(np.float32)


def skip_step_fixture(out_dir):
    rng = np.random.default_rng(11)
    n = 330
    loss, grad = synthetic_sequence(n, rng)
    param = torch.nn.Parameter(torch.ones(4))
    opt = SkipStepAdamW([param], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    skipped = []
    margins = []
    for i in range(n):
        param.grad = torch.full((4,), 0.1)
        opt.latest_loss = torch.tensor(loss[i])
        opt.latest_grad_norm = torch.tensor(grad[i])
        opt.step()
        skipped.append(bool(opt.step_skipped.item() == 1.0))
        # Distance of each value from its threshold (float64), to show no decision is borderline.
        if i + 1 >= 64:
            for series in (loss, grad):
                hist = series[max(0, i - 128):i].astype(np.float64)
                thr = hist.mean() + 6 * hist.std(ddof=1)
                margins.append(abs(float(series[i]) - thr) / thr)
    assert min(margins) > 1e-4, min(margins)
    write(out_dir, "skip_step.json", {
        "reference": "olmo_core.optim.SkipStepAdamW(rolling_interval_length=128, sigma_factor=6)",
        "rolling_interval_length": 128, "sigma_factor": 6,
        "losses": [float(x) for x in loss], "grad_norms": [float(x) for x in grad],
        "skipped": skipped, "adam_step_count": float(opt.state[param]["step"]),
        "min_relative_margin": min(margins)})


# ---------------------------------------------------------------------------------------------
# Loss normalisation: OLMo-core's labels and loss divisor for a local batch (train_batch).


def loss_normalization_fixture(out_dir):
    from olmo_core.data.utils import get_labels

    gen = torch.Generator().manual_seed(3)
    rows, seq_len = 5, 8
    input_ids = torch.randint(0, 1000, (rows, seq_len), generator=gen)
    instance_mask = torch.tensor([True, False, True, True, False])
    batch = {"input_ids": input_ids, "instance_mask": instance_mask}
    labels = get_labels(batch)
    # As TransformerTrainModule.train_batch counts the divisor.
    divisor = (labels != -100).sum() + (~instance_mask).sum() * labels.shape[1]
    plain = get_labels({"input_ids": input_ids})
    write(out_dir, "loss_normalization.json", {
        "reference": "olmo_core.data.utils.get_labels and TransformerTrainModule.train_batch's "
                     "batch_num_tokens_for_loss",
        "seq_len": seq_len, "input_ids": input_ids.tolist(),
        "instance_keep": instance_mask.tolist(),
        "labels_with_mask": labels.tolist(), "divisor_with_mask": int(divisor),
        "labels": plain.tolist(), "divisor": int((plain != -100).sum())})


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "optim"))
    parser.add_argument("--only", choices=["schedules", "adamw", "skip_step_adamw", "clip",
                                           "skip_step", "loss_normalization"],
                        help="write this fixture alone")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    fixtures = {"schedules": schedule_fixture, "adamw": adamw_fixture,
                "skip_step_adamw": skip_step_adamw_fixture, "clip": clip_fixture,
                "skip_step": skip_step_fixture, "loss_normalization": loss_normalization_fixture}
    for name, make in fixtures.items():
        if args.only in (None, name):
            make(args.out)


if __name__ == "__main__":
    main()
