#!/usr/bin/env python3
"""`tandem data batches` against OLMo-core's loader on random data configs it never saw.

Each case draws token files (1 to 6, 1 to 4000 tokens each: some shorter than one instance;
uint16 or uint32 over vocabularies from 1000 to 100278, EOS sprinkled in, and with the repetition
filter on, repeated spans of period 1 to 13 that it rejects or keeps, and a sequence length of 32
to 128; else 4 to 64), no chunking or max_target_sequence_length 2x to 8x it, 1 to 16 instances
per global batch, a seed, and every world size in (1, 2, 3, 4, 8) that divides the batch. For both
epochs and every rank, OLMo-core's NumpyFSLDataset + NumpyDataLoaderBase (as
tools/make_data_fixtures.py builds them) and tandem must give the same instance ids per step, the
same tokens (XXH64 of the int64 ids, as `--hash`) and, with the filter on, the same instance_mask;
and, from OLMo-core's state_dict after a random number of steps of epoch 1 on one of those world
sizes, the rest of the epoch on another (`--resume-state`). A case OLMo-core refuses, or one whose
data holds less than one global batch (OLMo-core's loader then yields no step), tandem must refuse.

Usage: python3 tools/check_data_order_random.py TANDEM_BINARY [--seed S] [--cases N]
Needs numpy, xxhash and ai2-olmo-core. Exits 0 only when every case agrees.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import xxhash
from olmo_core.data.collator import DataCollator
from olmo_core.data.data_loader import NumpyDataLoaderBase

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from random_checks import argument_parser, run_cases  # noqa: E402
from make_data_fixtures import prepared_olmo_dataset  # noqa: E402

WORLD_SIZES = (1, 2, 3, 4, 8)


def draw(seed, index):
    """(folder, token file paths, spec) of one random case."""
    rng = random.Random(seed * 1000 + index)
    vocab, dtype = rng.choice([(1000, np.uint16), (50280, np.uint16), (70000, np.uint32),
                               (100278, np.uint32)])
    repetition_filter = rng.random() < 0.4
    # The filter rejects an instance holding a period (1 to 13) repeated 32 times: >= 32 tokens.
    seq = rng.choice([32, 64, 128] if repetition_filter else [4, 8, 12, 16, 32, 64])
    spec = dict(vocab=vocab, dtype=dtype, seq=seq,
                max_target=rng.choice([None, None, seq * 2, seq * 4, seq * 8]),
                filter=repetition_filter,
                sizes=[rng.randint(1, 4000) for _ in range(rng.randint(1, 6))],
                batch=rng.randint(1, 16), seed=rng.randint(0, 2**31))
    spec["worlds"] = [w for w in WORLD_SIZES if spec["batch"] % w == 0]
    folder = tempfile.mkdtemp(prefix="data_order_")
    gen = np.random.default_rng(seed * 1000 + index)
    paths = []
    for k, size in enumerate(spec["sizes"]):
        toks = gen.integers(0, vocab - 2, size)
        toks[gen.random(size) < 0.02] = vocab - 2  # EOS
        if spec["filter"]:
            for start in range(0, max(0, size - 80), rng.randint(60, 400)):
                span = np.tile(gen.integers(0, vocab - 2, rng.choice([1, 2, 3, 5, 13])),
                               rng.choice([20, 31, 32, 33, 40, 64]))[: size - start]
                toks[start:start + len(span)] = span
        path = os.path.join(folder, f"part-{k:02d}.npy")
        toks.astype(dtype).tofile(path)
        paths.append(path)
    return folder, paths, spec


def olmo_core_loader(paths, spec, world, rank):
    """(dataset, loader) as OLMo-core builds them, prepared in a fresh work dir."""
    ds, work = prepared_olmo_dataset(paths, spec)
    dl = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds, global_batch_size=spec["batch"] * spec["seq"],
        collator=DataCollator(pad_token_id=spec["vocab"] - 1), work_dir=work, seed=spec["seed"],
        dp_world_size=world, dp_rank=rank, fs_local_rank=0, num_threads=1)
    return ds, dl


def olmo_core_batches(paths, spec, world, rank, epoch, resume=None):
    """(number of instances, [{ids, xxh64, mask}] per step) of OLMo-core's loader on one rank,
    from the start of `epoch` or from the state_dict `resume`."""
    ds, dl = olmo_core_loader(paths, spec, world, rank)
    if resume is not None:
        dl.load_state_dict(resume)
    dl.reshuffle(epoch=epoch)
    steps = []
    for batch in dl:
        tokens = batch["input_ids"].numpy().astype("<i8")
        step = {"ids": batch["index"].tolist(), "xxh64": xxhash.xxh64(tokens.tobytes()).hexdigest()}
        if "instance_mask" in batch:
            step["mask"] = [bool(x) for x in batch["instance_mask"].tolist()]
        steps.append(step)
    return len(ds), steps


def olmo_core_state_after(paths, spec, world, batches):
    """OLMo-core's loader state_dict after `batches` steps of epoch 1 on `world` ranks."""
    _, dl = olmo_core_loader(paths, spec, world, 0)
    dl.reshuffle(epoch=1)
    it = iter(dl)
    for _ in range(batches):
        next(it)
    return dl.state_dict()


def tandem_batches(binary, folder, paths, spec, world, from_step, steps, resume=None):
    """(JSON lines of `tandem data batches`, None) or (None, the error's last line); from
    `from_step` for `steps` steps, or from the OLMo-core state_dict `resume` to the epoch's end."""
    config = os.path.join(folder, "data.yaml")
    lines = ["data:", "  sources:", "    - label: random",
             "      paths: [" + ", ".join(json.dumps(p) for p in paths) + "]",
             f"  sequence_length: {spec['seq']}",
             f"  global_batch_size: {spec['batch'] * spec['seq']}",
             f"  seed: {spec['seed']}", f"  vocab_size: {spec['vocab']}",
             f"  dtype: {np.dtype(spec['dtype']).name}",
             f"  eos_token_id: {spec['vocab'] - 2}", f"  pad_token_id: {spec['vocab'] - 1}"]
    if spec["max_target"]:
        lines.append(f"  max_target_sequence_length: {spec['max_target']}")
    if spec["filter"]:  # OLMo-core's InstanceFilterConfig() defaults
        lines += ["  instance_filter_config:", "    repetition_max_period: 13",
                  "    repetition_min_period: 1", "    repetition_max_count: 32"]
    with open(config, "w") as f:
        f.write("\n".join(lines) + "\n")
    cmd = [binary, "data", "batches", config, "--world-size", str(world), "--hash"]
    if resume is None:
        cmd += ["--from-step", str(from_step), "--steps", str(steps)]
    else:
        state = os.path.join(folder, "olmo_core_state.json")
        with open(state, "w") as f:
            json.dump(resume, f, default=int)
        cmd += ["--resume-state", state]
    if spec["filter"]:
        cmd.append("--tokens")  # adds instance_mask
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["(no message)"])[-1]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")], None


def first_difference(lines, ref, rank, where):
    """None when tandem's JSON lines of `rank` are OLMo-core's steps `ref`, else what differs."""
    got = [line for line in lines if line["rank"] == rank]
    if len(got) != len(ref):
        return f"{where}: {len(got)} steps, OLMo-core {len(ref)}"
    for step, (g, r) in enumerate(zip(got, ref)):
        if (g["instances"], g["tokens_xxh64"]) != (r["ids"], r["xxh64"]) or \
                ("mask" in r and g.get("instance_mask") != r["mask"]):
            return (f"{where}, step {step}: ids {g['instances']} vs {r['ids']}, xxh64 "
                    f"{g['tokens_xxh64']} vs {r['xxh64']}, mask {g.get('instance_mask')} vs "
                    f"{r.get('mask')}")
    return None


def check_case(binary, seed, index):
    """(agrees, a line describing the case, the first disagreement or None)."""
    folder, paths, spec = draw(seed, index)
    described = {k: (np.dtype(v).name if k == "dtype" else v) for k, v in spec.items()}
    try:
        n_instances, _ = olmo_core_batches(paths, spec, 1, 0, 1)
    except Exception as e:  # OLMo-core refuses the data: tandem must refuse it too
        lines, error = tandem_batches(binary, folder, paths, spec, 1, 0, 1)
        ok = error is not None
        return ok, f"OLMo-core refuses ({str(e)[:80]}); tandem {'refuses' if ok else 'accepts'}: " \
                   f"{described}", None if ok else "tandem accepted what OLMo-core refused"
    steps_per_epoch = n_instances // spec["batch"]
    if steps_per_epoch == 0:  # OLMo-core's loader yields no step: tandem refuses such data
        _, error = tandem_batches(binary, folder, paths, spec, 1, 0, 1)
        return error is not None, f"{n_instances} instances, no full batch; tandem " \
            f"{'refuses' if error else 'accepts'}: {described}", \
            None if error else "tandem accepted data without one full batch"
    masked = 0
    for world in spec["worlds"]:
        for epoch in (1, 2):
            lines, error = tandem_batches(binary, folder, paths, spec, world,
                                          (epoch - 1) * steps_per_epoch, steps_per_epoch)
            if error:
                return False, str(described), f"tandem failed: {error}"
            for rank in range(world):
                _, ref = olmo_core_batches(paths, spec, world, rank, epoch)
                where = f"world {world}, rank {rank}, epoch {epoch}"
                why = first_difference(lines, ref, rank, where)
                if why:
                    return False, str(described), why
                masked += sum(not m for r in ref for m in r.get("mask", []))
    # Elastic resume: OLMo-core's state after some steps of epoch 1 on one world size, the rest of
    # the epoch on another.
    resumed = ""
    if steps_per_epoch >= 2:
        rng = random.Random(seed * 1000 + index + 500)
        before, after = rng.choice(spec["worlds"]), rng.choice(spec["worlds"])
        done = rng.randint(1, steps_per_epoch - 1)
        state = olmo_core_state_after(paths, spec, before, done)
        lines, error = tandem_batches(binary, folder, paths, spec, after, 0, 0, resume=state)
        if error:
            return False, str(described), f"tandem failed to resume: {error}"
        for rank in range(after):
            _, ref = olmo_core_batches(paths, spec, after, rank, 1, resume=state)
            why = first_difference(lines, ref, rank, f"resumed after step {done} of world "
                                   f"{before} on world {after}, rank {rank}")
            if why:
                return False, str(described), why
        resumed = f", resumed from world {before} after {done} steps on world {after}"
    return True, f"{n_instances} instances, {steps_per_epoch} steps per epoch, {masked} masked " \
                 f"instance-steps{resumed}: {described}", None


def main():
    ap = argument_parser(__doc__, cases=20)
    args = ap.parse_args()

    def one(index):
        ok, described, why = check_case(args.tandem, args.seed, index)
        return ok, described + (f"\n  {why}" if why else "")

    return run_cases("check_data_order_random", args, one)


if __name__ == "__main__":
    sys.exit(main())
