#!/usr/bin/env python3
"""Writes the source-mixture parity fixtures into tests/fixtures/data/mixture/ from OLMo-core.

- tokens/<source>/part-NN.npy: uint32 token files over the dolma2 vocabulary (EOS sprinkled in and
  at the end, some with repeated spans that the repetition filter rejects): web (3 files), code (2 files and a
  20-token one, under one instance of 32), math (one file of 450 tokens), triplets (three
  files of 1000 tokens).
- mixture.json "cases": each an OLMo-core SourceMixtureDatasetConfig (sources with target_ratio,
  paths as globs or files, max_repetition_ratio, max_source_fraction; requested_tokens; its
  global_batch_size is the loader's) turned into a dataset by NumpyFSLDatasetConfig.from_src_mix(
  ...).build() (NumpyFSLDatasetMixture), prepared in a fresh work dir. Recorded: the mixture's
  entries in order (file, source, tokens: SourceMixtureDataset's path_tokens without the zero
  ones, checked to be the dataset's paths and path_offset_index), each source's selected tokens,
  the dataset's len and fingerprint, NumpyFSLDataLoader's global indices and per-rank instance
  ids, token sha256s and instance masks for world sizes 1 and 2, two epochs, and a resume after 2
  steps on 2 ranks continued on 1.
  Cases: downsampled sources with Hamilton rounding and a file too short for an instance (dropped);
  an upsampled source (take ratio 10/3: the file list read 3 times and a third) with
  max_target_sequence_length and the filter; max_source_fraction and a source with target_ratio 0;
  three files with equal remainders and two instances left for Hamilton's method to give
  (OLMo-core's tie rule: the later entries).
- mixture.json "errors": configs OLMo-core refuses (a source without enough tokens, ratios that do
  not sum to 1), with its exception type and message.
All paths in mixture.json are relative to tests/fixtures/data/mixture.

Run from the repository root:  python3 tools/make_mixture_fixtures.py
Needs numpy and ai2-olmo-core (which brings torch). The tests only read the committed output.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_data_fixtures import (OUT, run_olmo_loader, run_olmo_loader_partial,  # noqa: E402
                                versions, write_json)

FOLDER = os.path.join(OUT, "mixture")
VOCAB, EOS, PAD = 100278, 100257, 100277  # dolma2 (TokenizerConfig.dolma2())
FILES = {  # source: token counts of its files
    "web": [2400, 1900, 3100],
    "code": [1500, 700, 20],
    "math": [450],
    "triplets": [1000, 1000, 1000],
}

CASES = [
    dict(name="downsampled", seq=32, batch=8, max_target=None, filter=False, seed=34521,
         requested_tokens=4000,
         sources=[dict(source_name="web", target_ratio=0.6, paths=["tokens/web/*.npy"]),
                  dict(source_name="code", target_ratio=0.3, paths=["tokens/code/*.npy"]),
                  dict(source_name="math", target_ratio=0.1, paths=["tokens/math/part-00.npy"])]),
    dict(name="upsampled", seq=16, batch=12, max_target=64, filter=True, seed=1337,
         requested_tokens=6000,
         sources=[dict(source_name="math", target_ratio=0.25, paths=["tokens/math/part-00.npy"],
                       max_repetition_ratio=4.0),
                  dict(source_name="web", target_ratio=0.55,
                       paths=["tokens/web/part-02.npy", "tokens/web/part-00.npy"]),
                  dict(source_name="code", target_ratio=0.2, paths=["tokens/code/*.npy"])]),
    dict(name="fraction_and_zero_ratio", seq=32, batch=4, max_target=None, filter=True, seed=7,
         requested_tokens=3000,
         sources=[dict(source_name="web", target_ratio=0.7, paths=["tokens/web/*.npy"],
                       max_source_fraction=0.5),
                  dict(source_name="code", target_ratio=0.3, paths=["tokens/code/part-00.npy"]),
                  dict(source_name="math", target_ratio=0.0, paths=["tokens/math/*.npy"])]),
]

# Three files of one size (334 tokens of each wanted: 10 instances, remainder 14/32), two
# instances left to give: to the later entries.
CASES.append(dict(name="tied_remainders", seq=32, batch=4, max_target=None, filter=False, seed=11,
                  requested_tokens=1000,
                  sources=[dict(source_name="triplets", target_ratio=1.0,
                                paths=["tokens/triplets/*.npy"])]))

ERRORS = [
    dict(name="insufficient", seq=32, batch=8, requested_tokens=4000,
         sources=[dict(source_name="web", target_ratio=0.5, paths=["tokens/web/*.npy"]),
                  dict(source_name="math", target_ratio=0.5, paths=["tokens/math/*.npy"])]),
    dict(name="ratios_not_one", seq=32, batch=8, requested_tokens=2000,
         sources=[dict(source_name="web", target_ratio=0.5, paths=["tokens/web/*.npy"]),
                  dict(source_name="code", target_ratio=0.4, paths=["tokens/code/*.npy"])]),
]


def write_tokens():
    rng = np.random.default_rng(20261205)
    for source, sizes in FILES.items():
        folder = os.path.join(FOLDER, "tokens", source)
        os.makedirs(folder, exist_ok=True)
        for i, size in enumerate(sizes):
            toks = rng.integers(0, VOCAB - 30, size)
            toks[rng.random(size) < 0.02] = EOS
            toks[-1] = EOS  # OLMo-core's prepare() needs a document in every file it samples
            if i == 0 and size > 400:  # a token repeated 64 times: instances the filter rejects
                toks[200:264] = rng.integers(0, 1000)
            toks.astype(np.uint32).tofile(os.path.join(folder, f"part-{i:02d}.npy"))


def mixture_config(case):
    from olmo_core.data.source_mixture import (SourceMixtureConfig, SourceMixtureDatasetConfig,
                                               SourceMixtureList)

    sources = [SourceMixtureConfig(
        source_name=s["source_name"], target_ratio=s["target_ratio"],
        paths=[os.path.join(FOLDER, p) for p in s["paths"]],
        max_repetition_ratio=s.get("max_repetition_ratio", 1.0),
        max_source_fraction=s.get("max_source_fraction", 1.0)) for s in case["sources"]]
    return SourceMixtureDatasetConfig(
        source_list=SourceMixtureList(sources=sources), requested_tokens=case["requested_tokens"],
        global_batch_size=case["batch"] * case["seq"], seed=4242, render_tables=False, quiet=True)


def builder(case):
    from olmo_core.data import NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.data.numpy_dataset import InstanceFilterConfig, NumpyFSLDatasetMixture

    def build():
        work = tempfile.mkdtemp()
        ds = NumpyFSLDatasetConfig.from_src_mix(
            mixture_config(case), tokenizer=TokenizerConfig.dolma2(),
            sequence_length=case["seq"], max_target_sequence_length=case["max_target"],
            instance_filter_config=InstanceFilterConfig() if case["filter"] else None,
            work_dir=work).build()
        assert isinstance(ds, NumpyFSLDatasetMixture), type(ds)
        ds.prepare()
        return ds, work

    return build


def relative(path):
    return os.path.relpath(str(path), FOLDER)


def make_case(case):
    outcome = mixture_config(case).build(npdtype=np.uint32, sequence_length=case["seq"])
    entries = [dict(file=relative(p.path), source=o.name, tokens=p.tokens)
               for o in outcome.sources for p in o.path_tokens if p.tokens > 0]
    selected = {o.name: sum(p.tokens for p in o.path_tokens) for o in outcome.sources}
    build = builder(case)
    ds, _ = build()
    if [relative(p) for p in ds.paths] != [e["file"] for e in entries]:
        raise SystemExit(f"{case['name']}: the dataset's paths are not the mixture's entries")
    for idx, (p, e) in enumerate(zip(ds.paths, entries)):
        if ds._path_offset_index[(str(p), idx)] != e["tokens"]:
            raise SystemExit(f"{case['name']}: entry {idx} has another allocation in the dataset")
    spec = dict(seq=case["seq"], batch=case["batch"], vocab=VOCAB)
    runs = []
    for world in (1, 2):
        if case["batch"] % world:
            continue
        for epoch in (1, 2):
            _, gi, per_rank, _ = run_olmo_loader(None, spec, case["seed"], world, epoch,
                                                 build=build)
            runs.append({"seed": case["seed"], "world_size": world, "epoch": epoch,
                         "global_indices": gi, "ranks": per_rank})
    first = run_olmo_loader_partial(None, spec, case["seed"], world=2, epoch=1, batches=2,
                                    build=build)
    _, _, per_rank, _ = run_olmo_loader(None, spec, case["seed"], 1, 1, resume=first, build=build)
    resume = {"seed": case["seed"], "before_world_size": 2, "batches_before": 2, "state": first,
              "after_world_size": 1, "ranks": per_rank}
    print(f"{case['name']}: {len(entries)} entries, {len(ds)} instances, selected {selected}")
    return dict(case, entries=entries, selected=selected, num_instances=len(ds),
                fingerprint=ds.fingerprint, fingerprint_version=ds.fingerprint_version,
                runs=runs, resume=resume)


def make_error(case):
    try:
        mixture_config(case).build(npdtype=np.uint32, sequence_length=case["seq"])
    except Exception as e:  # what OLMo-core says, for the test to compare the refusal
        print(f"{case['name']}: {type(e).__name__}: {e}")
        return dict(case, error_type=type(e).__name__, error=str(e))
    raise SystemExit(f"{case['name']}: OLMo-core accepted it")


if __name__ == "__main__":
    write_tokens()
    write_json("mixture.json", {
        "versions": versions(), "vocab_size": VOCAB, "eos_token_id": EOS, "pad_token_id": PAD,
        "dtype": "uint32", "cases": [make_case(c) for c in CASES],
        "errors": [make_error(c) for c in ERRORS]}, out=FOLDER)
