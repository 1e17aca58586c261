#!/usr/bin/env python3
"""Writes the data-pipeline parity fixtures into tests/fixtures/data/ from the real references.

- shuffle.json: numpy's SeedSequence/PCG64 raw draws and Generator.shuffle of arange(N, uint32)
  for many (N, seed) pairs (N from 1 to millions; long permutations as sha256 + head/tail).
- repetition.json: OLMo-core's find_periodic_sequences on random and adversarial arrays.
- loader_<set>.json + tokens_<set>/*.npy: two small token-file sets (generated deterministically
  here and committed), OLMo-core's NumpyFSLDataset/NumpyFSLDataLoader global indices and per-rank
  instance ids for two seeds, world sizes 1/2/4, two epochs and a resume on another world size.
- mix/sample-mix.txt + mix/base/...: a data-mix manifest in OLMo-core's format (label,path lines
  with {TOKENIZER}, comments, unsorted paths, the same basename in several folders) and its token
  files; loader_mix.json: the files OLMo-core's DataMix.build resolves (its own parser, fed this
  manifest), the dataset OLMo-core's NumpyFSLDatasetConfig(mix=...) builds from them, and its
  loader's global indices and per-rank ids for world sizes 1/2/4 and a mid-epoch resume.

Run from the repository root:  python3 tools/make_data_fixtures.py
Needs numpy and ai2-olmo-core (which brings torch). The tests only read the committed output.
"""

import hashlib
import json
import os
import sys
import tempfile
from importlib.metadata import version

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "data")


def versions():
    return {"numpy": version("numpy"), "ai2-olmo-core": version("ai2-olmo-core"),
            "python": sys.version.split()[0]}


def sha256_u32(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<u4").tobytes()).hexdigest()


def write_json(name, obj, out=OUT):
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


# ----------------------------------------------------------------------------------------------
def make_shuffle():
    raw = []
    for seed in [0, 1, 42, 34521, 34522, 1337, 2**32 - 1, 2**32, 2**32 + 5, 2**63 + 11, 2**64 + 3,
                 2**100 + 7, 123456789012345678901234567890]:
        ss = np.random.SeedSequence(seed)
        bg = np.random.PCG64(seed)
        raw.append({"seed": str(seed),
                    "state_u64": [str(int(v)) for v in ss.generate_state(4, np.uint64)],
                    "next_u64": [str(int(v)) for v in bg.random_raw(8)]})
    cases = []
    ns = [1, 2, 3, 4, 5, 7, 8, 10, 16, 17, 31, 32, 33, 100, 255, 256, 257, 1000, 4097, 65535,
          65536, 65537, 100003, 1 << 20, 1_000_003, 3_000_017, 5_000_000]
    seeds = [0, 1, 34522, 1338, 2**32 + 1]
    for i, n in enumerate(ns):
        for j, seed in enumerate(seeds):
            if n >= 1 << 20 and j >= 2:
                continue  # keep the generator quick; two seeds for the millions
            a = np.arange(n, dtype=np.uint32)
            np.random.Generator(np.random.PCG64(seed)).shuffle(a)
            case = {"n": n, "seed": str(seed), "sha256": sha256_u32(a),
                    "head": a[:16].tolist(), "tail": a[-16:].tolist()}
            if n <= 300:
                case["full"] = a.tolist()
            cases.append(case)
    chunked = []
    for n, chunk, seed in [(64, 4, 7), (1000, 8, 34522), (999, 4, 3), (4096, 16, 1338)]:
        c = np.arange(n // chunk, dtype=np.uint32)
        np.random.Generator(np.random.PCG64(seed)).shuffle(c)
        idx = (np.repeat(c * chunk, chunk).reshape(-1, chunk) + np.arange(chunk)).reshape(-1)
        chunked.append({"n": n, "chunk": chunk, "seed": str(seed), "sha256": sha256_u32(idx),
                        "head": idx[:32].tolist()})
    write_json("shuffle.json", {"versions": versions(), "raw": raw, "shuffle": cases,
                                "chunked": chunked})


# ----------------------------------------------------------------------------------------------
def make_repetition():
    from olmo_core.data.utils import find_periodic_sequences

    rng = np.random.default_rng(20261130)
    arrays = []
    # Random arrays over tiny alphabets (so short repeats occur) and a larger one.
    for k in range(60):
        n = int(rng.integers(0, 400))
        alphabet = int(rng.choice([1, 2, 3, 5, 50000]))
        arrays.append(("random", rng.integers(0, alphabet, n).tolist()))
    # Adversarial: periodic blocks of every period 1..15 repeated around the 32 threshold, placed
    # at the start, the middle, the end, with partial leading/trailing copies and with the length a
    # multiple of the period or not.
    for period in range(1, 16):
        for times in (2, 3, 31, 32, 33):
            pattern = (np.arange(period) * 7 + 1000).tolist()
            block = pattern * times
            for place in ("alone", "start", "middle", "end", "partials"):
                if place == "alone":
                    arr = block
                elif place == "start":
                    arr = block + [5, 6, 7, 8, 9][: 1 + period % 5]
                elif place == "middle":
                    arr = [1, 2, 3] + block + [4, 5]
                elif place == "end":
                    arr = [11, 12, 13, 14][: 1 + times % 4] + block
                else:
                    arr = [20] + pattern[period // 2:] + block + pattern[: (period + 1) // 2] + [21]
                arrays.append((f"p{period}x{times}-{place}", arr))
    # Edge lengths and degenerate arrays.
    for n in range(0, 12):
        arrays.append((f"const{n}", [3] * n))
        arrays.append((f"arange{n}", list(range(n))))
    arrays.append(("const4096", [100257] * 4096))
    arrays.append(("two-periods", [1, 2] * 40 + [9] + [4, 5, 6] * 40))
    arrays.append(("nested", ([1, 1, 2] * 5 + [3]) * 12))
    arrays.append(("wrap-tail-equals-head", [7, 8, 9] + list(range(50, 90)) + [7, 8, 9]))
    arrays.append(("period13x32-exact", (np.arange(13) + 1).tolist() * 32))
    arrays.append(("period14x40", (np.arange(14) + 1).tolist() * 40))
    arrays.append(("large-ids", [4294967290, 4294967291] * 40))

    cases = []
    for name, arr in arrays:
        a = np.asarray(arr, dtype=np.int64)
        try:
            found = [[int(m.start), int(m.end), int(m.period), int(m.times)]
                     for m in find_periodic_sequences(a, max_period=13, min_period=1)]
            err = None
        except Exception as e:  # recorded so that ours can be checked to refuse the same inputs
            found, err = None, type(e).__name__
        rejected = None if found is None else any(t[3] >= 32 for t in found)
        cases.append({"name": name, "tokens": [int(x) for x in arr], "found": found,
                      "error": err, "rejected": rejected})
    write_json("repetition.json", {"versions": versions(), "max_period": 13, "min_period": 1,
                                   "max_count": 32, "cases": cases})


# ----------------------------------------------------------------------------------------------
TOKEN_SETS = {
    # name: (vocab_size, dtype, sequence_length, global_batch_instances, max_target, filter, sizes)
    "a": dict(vocab=1000, dtype=np.uint16, seq=16, batch=8, max_target=None, filter=False,
              sizes=[1003, 517, 2000, 33, 770]),
    "b": dict(vocab=100278, dtype=np.uint32, seq=32, batch=12, max_target=128, filter=True,
              sizes=[3100, 1290, 2600]),
}


def write_token_set(name, spec):
    """Deterministic token files; set b has repeated spans so that the filter rejects some."""
    rng = np.random.default_rng(1000 + ord(name))
    folder = os.path.join(OUT, f"tokens_{name}")
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, size in enumerate(spec["sizes"]):
        toks = rng.integers(0, spec["vocab"], size)
        if spec["filter"]:
            for start in range(0, size - 80, 257):
                period = 1 + (start // 257) % 14
                toks[start:start + 33 * period] = np.tile(rng.integers(0, spec["vocab"], period),
                                                          33)[: len(toks[start:start + 33 * period])]
        path = os.path.join(folder, f"part-{i:02d}.npy")
        toks.astype(spec["dtype"]).tofile(path)
        paths.append(path)
    return paths


def prepared_olmo_dataset(paths, spec):
    """OLMo-core's NumpyFSLDataset over `paths` as `spec` describes, prepared in a fresh work dir."""
    from olmo_core.data.numpy_dataset import InstanceFilterConfig, NumpyFSLDataset

    ds = NumpyFSLDataset(*paths, sequence_length=spec["seq"], pad_token_id=spec["vocab"] - 1,
                         eos_token_id=spec["vocab"] - 2, vocab_size=spec["vocab"],
                         dtype=spec["dtype"], max_target_sequence_length=spec["max_target"],
                         instance_filter_config=InstanceFilterConfig() if spec["filter"] else None)
    work = tempfile.mkdtemp()
    ds.work_dir = work
    ds.prepare()
    return ds, work


def run_olmo_loader(paths, spec, seed, world, epoch, resume=None, build=None):
    """OLMo-core's loader over `paths` (or over the dataset `build()` returns, with its work dir)."""
    from olmo_core.data.collator import DataCollator
    from olmo_core.data.data_loader import NumpyDataLoaderBase

    ds, work = build() if build else prepared_olmo_dataset(paths, spec)
    per_rank = []
    global_indices = None
    state = None
    for rank in range(world):
        dl = NumpyDataLoaderBase.wrap_numpy_dataset(
            ds, global_batch_size=spec["batch"] * spec["seq"],
            collator=DataCollator(pad_token_id=spec["vocab"] - 1), work_dir=work, seed=seed,
            dp_world_size=world, dp_rank=rank, fs_local_rank=0, num_threads=2)
        if resume is not None:
            dl.load_state_dict(resume)
        dl.reshuffle(epoch=epoch)
        global_indices = np.asarray(dl.get_global_indices()).tolist()
        batches = []
        for batch in dl:
            ids = batch["index"].tolist()
            toks = batch["input_ids"].numpy().astype("<i8")
            entry = {"ids": ids, "tokens_sha256": hashlib.sha256(toks.tobytes()).hexdigest()}
            if "instance_mask" in batch:
                entry["mask"] = [bool(x) for x in batch["instance_mask"].tolist()]
            batches.append(entry)
        per_rank.append(batches)
        state = dl.state_dict()
    return ds, global_indices, per_rank, state


def make_loader_sets():
    for name, spec in TOKEN_SETS.items():
        paths = write_token_set(name, spec)
        runs = []
        ds = None
        for seed in (34521, 1337):
            for world in (1, 2, 4):
                if spec["batch"] % world:
                    continue
                for epoch in (1, 2):
                    ds, gi, per_rank, _ = run_olmo_loader(paths, spec, seed, world, epoch)
                    runs.append({"seed": seed, "world_size": world, "epoch": epoch,
                                 "global_indices": gi, "ranks": per_rank})
        # Resume: 3 batches on 2 ranks, state saved, then the rest of the epoch on 4 (or 1) ranks.
        resumes = []
        for seed, after in ((34521, 4), (1337, 1)):
            if spec["batch"] % after:
                continue
            first = run_olmo_loader_partial(paths, spec, seed, world=2, epoch=1, batches=3)
            _, _, per_rank, _ = run_olmo_loader(paths, spec, seed, after, 1, resume=first)
            resumes.append({"seed": seed, "before_world_size": 2, "batches_before": 3,
                            "state": first, "after_world_size": after, "ranks": per_rank})
        write_json(f"loader_{name}.json", {
            "versions": versions(),
            "files": [os.path.basename(p) for p in paths],
            "vocab_size": spec["vocab"], "dtype": np.dtype(spec["dtype"]).name,
            "sequence_length": spec["seq"], "global_batch_size": spec["batch"] * spec["seq"],
            "max_target_sequence_length": spec["max_target"],
            "pad_token_id": spec["vocab"] - 1, "eos_token_id": spec["vocab"] - 2,
            "instance_filter": spec["filter"], "num_instances": len(ds),
            "fingerprint": ds.fingerprint, "fingerprint_version": ds.fingerprint_version,
            "runs": runs, "resumes": resumes})


def run_olmo_loader_partial(paths, spec, seed, world, epoch, batches, build=None):
    from olmo_core.data.collator import DataCollator
    from olmo_core.data.data_loader import NumpyDataLoaderBase

    ds, work = build() if build else prepared_olmo_dataset(paths, spec)
    dl = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds, global_batch_size=spec["batch"] * spec["seq"],
        collator=DataCollator(pad_token_id=spec["vocab"] - 1), work_dir=work, seed=seed,
        dp_world_size=world, dp_rank=0, fs_local_rank=0, num_threads=2)
    dl.reshuffle(epoch=epoch)
    it = iter(dl)
    for _ in range(batches):
        next(it)
    state = dl.state_dict()
    return state


# ----------------------------------------------------------------------------------------------
# A data-mix manifest as AI2 writes them (olmo_core/data/mixes/*.txt): `label,path` lines, paths
# relative to a base directory with {TOKENIZER} in them. Lines are deliberately not in sorted
# order, labels come back after others, and part-00.npy / part-01.npy exist in several folders.
MIX_SPEC = dict(vocab=100278, dtype=np.uint32, seq=32, batch=8, max_target=64, filter=True)
MIX_LINES = [
    ("web", "preprocessed/sample-mix/v0.1/{TOKENIZER}/web/part-02.npy", 1500),
    ("web", "preprocessed/sample-mix/v0.1/{TOKENIZER}/web/part-00.npy", 1100),
    ("code", "preprocessed/sample-mix/v0.1/{TOKENIZER}/code/part-00.npy", 900),
    ("math", "preprocessed/sample-mix/v0.1/{TOKENIZER}/math/part-01.npy", 700),
    ("web", "preprocessed/sample-mix/v0.1/{TOKENIZER}/web/part-01.npy", 1300),
    ("code", "preprocessed/sample-mix/v0.1/{TOKENIZER}/code/part-01.npy", 650),
]
MIX_TOKENIZER_DIR = "allenai/dolma3-tokenizer"  # what DataMix.build puts for dolma2 in OLMo 3 mixes


def write_mix_set():
    """The manifest and its token files (repeated spans in some, so that the filter rejects)."""
    rng = np.random.default_rng(1000 + ord("m"))
    folder = os.path.join(OUT, "mix")
    base = os.path.join(folder, "base")
    lines = ["# A sample OLMo-core data-mix manifest (tools/make_data_fixtures.py).",
             "# Order as written: not sorted; part-00/part-01 repeat across folders.", ""]
    for i, (label, rel, size) in enumerate(MIX_LINES):
        toks = rng.integers(0, MIX_SPEC["vocab"] - 2, size)
        if i % 2 == 0:  # a token repeated 100 times: whole 32-token instances the filter rejects
            toks[100 + 37 * i:200 + 37 * i] = rng.integers(0, 1000)
        path = os.path.join(base, rel.replace("{TOKENIZER}", MIX_TOKENIZER_DIR))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        toks.astype(MIX_SPEC["dtype"]).tofile(path)
        lines.append(f"{label},{rel}")
        if i == 2:
            lines.append("# a comment between entries")
    manifest = os.path.join(folder, "sample-mix.txt")
    with open(manifest, "w") as f:
        f.write("\n".join(lines) + "\n")
    return manifest, base


def olmo_mix_dataset_builder(manifest, base):
    """OLMo-core's own DataMix.build and NumpyFSLDatasetConfig(mix=...), fed our manifest: the
    packaged mix file is swapped for it, so OLMo-core's parser reads it."""
    import contextlib
    from pathlib import Path

    import olmo_core.data.mixes as mixes
    from olmo_core.data import NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.data.numpy_dataset import InstanceFilterConfig

    @contextlib.contextmanager
    def our_manifest(name):
        yield Path(manifest)

    mixes._get_data_mix_path = our_manifest
    tokenizer = TokenizerConfig.dolma2()  # vocab 100278, eos 100257, pad 100277
    mix = mixes.DataMix.OLMo_mix_0625_official

    def build():
        work = tempfile.mkdtemp()
        ds = NumpyFSLDatasetConfig.from_data_mix(
            mix, tokenizer=tokenizer, mix_base_dir=base, sequence_length=MIX_SPEC["seq"],
            max_target_sequence_length=MIX_SPEC["max_target"],
            instance_filter_config=InstanceFilterConfig(), work_dir=work).build()
        ds.prepare()
        return ds, work

    paths, labels = mix.build(base, tokenizer.identifier)
    return build, paths, labels


def make_mix_set():
    manifest, base = write_mix_set()
    build, paths, labels = olmo_mix_dataset_builder(manifest, base)
    spec = dict(MIX_SPEC)
    runs = []
    ds = None
    for world in (1, 2, 4):
        for epoch in (1, 2):
            ds, gi, per_rank, _ = run_olmo_loader(None, spec, 34521, world, epoch, build=build)
            runs.append({"seed": 34521, "world_size": world, "epoch": epoch,
                         "global_indices": gi, "ranks": per_rank})
    resumes = []
    for after in (4, 1):
        first = run_olmo_loader_partial(None, spec, 34521, world=2, epoch=1, batches=3,
                                        build=build)
        _, _, per_rank, _ = run_olmo_loader(None, spec, 34521, after, 1, resume=first,
                                            build=build)
        resumes.append({"seed": 34521, "before_world_size": 2, "batches_before": 3,
                        "state": first, "after_world_size": after, "ranks": per_rank})
    tok = TOKENIZER_DOLMA2
    write_json("loader_mix.json", {
        "versions": versions(),
        "manifest": "mix/sample-mix.txt", "mix_base_dir": "mix/base",
        "mix_tokenizer_id": MIX_TOKENIZER_DIR,
        "files": [os.path.relpath(p, base) for p in paths], "labels": labels,
        "vocab_size": tok["vocab"], "dtype": "uint32",
        "sequence_length": spec["seq"], "global_batch_size": spec["batch"] * spec["seq"],
        "max_target_sequence_length": spec["max_target"],
        "pad_token_id": tok["pad"], "eos_token_id": tok["eos"], "instance_filter": True,
        "num_instances": len(ds), "fingerprint": ds.fingerprint,
        "fingerprint_version": ds.fingerprint_version, "runs": runs, "resumes": resumes})


TOKENIZER_DOLMA2 = dict(vocab=100278, eos=100257, pad=100277)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    what = sys.argv[1:] or ["shuffle", "repetition", "loader", "mix"]
    if "shuffle" in what:
        make_shuffle()
    if "repetition" in what:
        make_repetition()
    if "loader" in what:
        make_loader_sets()
    if "mix" in what:
        make_mix_set()
