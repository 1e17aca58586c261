#!/usr/bin/env python3
"""Writes the document-packing parity fixtures into tests/fixtures/data/packed/ from OLMo-core.

- tokens_p16/part-<i>-00000.npy: three uint16 token files (vocab 1000, EOS 999, pad 998, no BOS),
  documents of random lengths with many ties (most 1..40 tokens, about 10% 65..300, longer than
  the sequence length), each ending with EOS; the last file ends with a partial document without
  an EOS, which OLMo-core drops.
- tokens_p32/part-<i>-00000.npy: four uint32 token files (vocab 100352, EOS 100257, pad 100277,
  BOS 100256), every document BOS ... EOS with some EOS tokens inside documents that are not
  followed by BOS (so they are no boundary when a BOS id is given).
- packed.json: for four cases (sequence length, long_doc_strategy, source_group_size, BOS or not)
  OLMo-core's NumpyPackedFSLDataset (OBFD packing) built twice in fresh work dirs:
  "stable": with numpy.argsort patched to kind="stable" around dataset.prepare() (the patch is
  checked to be what the packer called: calls and sorted elements are counted across the packing
  worker processes), recording every instance's input_ids, label_mask, doc_lens and the lengths of
  its packed documents (from OLMo-core's packing cache files), the dataset's len and fingerprint,
  and NumpyFSLDataLoader's global indices for epoch 1;
  "default": numpy's own argsort (whose order among equal lengths is unspecified and may depend on
  the CPU's SIMD dispatch), recording len, the per-instance document lengths and whether any
  input_ids differ from the stable build.
- tokens_p32/labels_mask_part-<i>-00000.npy: one label mask per p32 token file (np.bool_, one byte
  per token, same token count), SFT-like: alternating runs of False (prompt) and True (response) of
  random lengths 1..60, plus a few isolated single-token flips (own rng seed).
- packed.json "cases" continue with two cases built through NumpyPackedFSLDatasetConfig(...).build()
  (paths and label_mask_paths given as globs with expand_glob=True, source_permutation_seed set, so
  OLMo-core resolves and permutes the files itself): the same "stable"/"default" records as above,
  plus "files" / "label_mask_files" in the order OLMo-core resolved them (after the permutation),
  "file_patterns" / "label_mask_patterns" (the globs) and "source_permutation_seed".
- packed.json "fsl_cases": fixed windows (NumpyFSLDatasetConfig, label masks, permuted sources):
  resolved files, len, fingerprint, NumpyFSLDataLoader's global indices for epoch 1 and every
  instance's input_ids and label_mask.
- packed.json "source_permutations": random.Random(seed).shuffle(list(range(n))) (the operation
  behind source_permutation_seed) for several seeds and n; "getrandbits32": the first outputs of
  random.Random(seed).getrandbits(32) for a few seeds.
- tokens_m16/part-<i>-00000.npy + part-<i>-00000.csv.gz: three uint16 token files (vocab 1000, EOS
  999, pad 998, no BOS) whose documents (1..40 tokens with many ties, about 10% 65..200) are given
  by OLMo-core metadata files next to them (gzip text, one "start,end" line per document in order,
  some lines with extra fields "start,end,<id>[,<source>]" that OLMo-core ignores). About 25% of
  documents do not end with EOS and some hold EOS tokens inside, so scanning for EOS finds other
  boundaries than the metadata; part-0's last 7 tokens (with an EOS among them) are in no document.
  tokens_m32/: the same for two uint32 files with BOS (vocab 100352, EOS 100257, pad 100277, BOS
  100256): every document starts with BOS, about 25% lack the final EOS, some hold EOS or EOS+BOS
  inside. The gzip files are written with mtime 0 and no file name (reruns give identical bytes).
- packed.json "metadata_cases": NumpyPackedFSLDataset(..., use_array_if_local=False) over those sets
  (document boundaries from the metadata files), generate_doc_lengths=True, built in a fresh work
  dir with the stable argsort patch: the same records as a "cases" entry's "stable" part (here at
  the case's top level), plus "metadata_files", "use_array_if_local": false, "fingerprint_text"
  (the exact text OLMo-core hashes, with use_array_if_local and _metadata_fingerprint), and
  "eos_scan_differs" / "eos_scan_num_instances" from the same dataset built with
  use_array_if_local=None (boundaries found by scanning for EOS). Case m16_truncate_group2 also
  has "cache_names": per source group, a build over paths relative to this folder gives the path
  strings, their sizes in bytes, the exact extra ids OLMo-core hashes into the packing cache names
  (long_doc_strategy, indices dtype, use_array_if_local=False, metadata=<path>,sha256=<digest of
  the .csv.gz> per file) and the three cache file names.
All paths and globs in packed.json are relative to tests/fixtures/data/packed.

Run from the repository root:  python3 tools/make_packed_fixtures.py
Needs numpy and ai2-olmo-core (which brings torch). The tests only read the committed output.
"""

import contextlib
import glob
import gzip
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
from importlib.metadata import version

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_data_fixtures  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "data", "packed")

LOADER_SEED = 4242
INSTANCES_PER_BATCH = 4


def versions():
    simd = np.show_config(mode="dicts").get("SIMD Extensions", {}).get("found", [])
    return {"numpy": version("numpy"), "ai2-olmo-core": version("ai2-olmo-core"),
            "python": sys.version.split()[0], "numpy_simd_found": list(simd)}


def write_json(name, obj):
    make_data_fixtures.write_json(name, obj, out=OUT)


# ----------------------------------------------------------------------------------------------
TOKEN_SETS = {
    "p16": dict(dtype=np.uint16, vocab=1000, eos=999, pad=998, bos=None, seed=16016,
                files=3, target=1700),
    "p32": dict(dtype=np.uint32, vocab=100352, eos=100257, pad=100277, bos=100256, seed=32032,
                files=4, target=3000),
}

CASES = [
    dict(name="p16_truncate", set="p16", seq=64, strategy="truncate", group=1),
    dict(name="p16_fragment_group2", set="p16", seq=64, strategy="fragment", group=2),
    dict(name="p32_bos_truncate_group3", set="p32", seq=128, strategy="truncate", group=3),
    dict(name="p32_fragment_256", set="p32", seq=256, strategy="fragment", group=1),
]

# Built through the config classes: globs expanded and sources permuted by OLMo-core.
TOKEN_GLOB = "part-*-00000.npy"
MASK_PREFIX = "labels_mask_"
MASK_GLOB = MASK_PREFIX + TOKEN_GLOB
MASK_SEED = 32064
MASK_SETS = ["p32"]

CONFIG_CASES = [
    dict(name="p32_masks_perm123_group2", set="p32", seq=128, strategy="truncate", group=2,
         masks=True, perm=123),
    dict(name="p16_perm7_fragment", set="p16", seq=64, strategy="fragment", group=1,
         masks=False, perm=7),
]

FSL_CASES = [dict(name="p32_fsl_masks_perm123", set="p32", seq=64, masks=True, perm=123)]

PERMUTATION_SEEDS = [0, 1, 7, 123, 4294967295, 4294967296, 12345678901234, 9223372036854775807]
PERMUTATION_SIZES = [1, 2, 3, 5, 8, 17, 100, 1000]
GETRANDBITS_SEEDS = [0, 123, 12345678901234]

# Document boundaries from OLMo-core metadata files (<token file with .npy -> .csv.gz>), not EOS.
METADATA_TOKEN_SETS = {
    "m16": dict(dtype=np.uint16, vocab=1000, eos=999, pad=998, bos=None, seed=16116,
                files=3, target=1700, tail_file=0),
    "m32": dict(dtype=np.uint32, vocab=100352, eos=100257, pad=100277, bos=100256, seed=32132,
                files=2, target=2600, tail_file=None),
}

METADATA_CASES = [
    dict(name="m16_truncate_group2", set="m16", seq=64, strategy="truncate", group=2),
    dict(name="m16_fragment", set="m16", seq=32, strategy="fragment", group=1),
    dict(name="m32_bos_truncate", set="m32", seq=128, strategy="truncate", group=1),
]
METADATA_CACHE_CASE = "m16_truncate_group2"  # also built over relative paths for "cache_names"


def p16_document(rng, spec):
    """1..40 tokens (ties galore) or, one time in ten, 65..300; always ends with EOS."""
    n = int(rng.integers(65, 301)) if rng.random() < 0.1 else int(rng.integers(1, 41))
    return np.append(rng.integers(0, 990, n - 1), spec["eos"])


def p32_document(rng, spec):
    """BOS, body, EOS: 3..89 tokens or, one time in ten, 130..600; some bodies hold EOS tokens
    (never followed by BOS, as body tokens are below 100000)."""
    n = int(rng.integers(130, 601)) if rng.random() < 0.1 else int(rng.integers(3, 90))
    body = rng.integers(0, 100000, n - 2)
    if len(body) >= 4 and rng.random() < 0.3:
        body[rng.choice(len(body), size=int(rng.integers(1, 3)), replace=False)] = spec["eos"]
    return np.concatenate([[spec["bos"]], body, [spec["eos"]]])


def write_token_set(name):
    spec = TOKEN_SETS[name]
    rng = np.random.default_rng(spec["seed"])
    folder = os.path.join(OUT, f"tokens_{name}")
    os.makedirs(folder, exist_ok=True)
    make_doc = p16_document if name == "p16" else p32_document
    paths = []
    for i in range(spec["files"]):
        docs, size = [], 0
        while size < spec["target"]:
            docs.append(make_doc(rng, spec))
            size += len(docs[-1])
        if name == "p16" and i == spec["files"] - 1:
            docs.append(rng.integers(0, 990, 23))  # partial document, no EOS: dropped
        toks = np.concatenate(docs).astype(spec["dtype"])
        path = os.path.join(folder, f"part-{i}-00000.npy")
        toks.tofile(path)
        paths.append(path)
    return paths


def sft_mask(rng, n):
    """Alternating runs of False (prompt) and True (response), 1..60 long, random first value,
    then a few isolated single-token flips."""
    mask = np.empty(n, dtype=np.bool_)
    value, pos = bool(rng.random() < 0.5), 0
    while pos < n:
        run = int(rng.integers(1, 61))
        mask[pos:pos + run] = value
        pos += run
        value = not value
    flips = rng.choice(n, size=int(rng.integers(3, 7)), replace=False)
    mask[flips] = ~mask[flips]
    return mask


def write_label_masks(name, token_paths):
    """One np.bool_ mask per token file (same token count), named labels_mask_<token file>."""
    spec = TOKEN_SETS[name]
    rng = np.random.default_rng(MASK_SEED)
    item = np.dtype(spec["dtype"]).itemsize
    paths = []
    for tok_path in token_paths:
        n = os.path.getsize(tok_path) // item
        mask = sft_mask(rng, n)
        path = os.path.join(os.path.dirname(tok_path), MASK_PREFIX + os.path.basename(tok_path))
        mask.tofile(path)
        assert os.path.getsize(path) == n
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def stable_argsort():
    """numpy.argsort forced to kind="stable". OLMo-core packs in a ProcessPoolExecutor (fork), so
    the calls and the number of sorted elements are counted in shared memory."""
    assert multiprocessing.get_start_method() == "fork", "the patch must reach the pack workers"
    calls = multiprocessing.Value("q", 0)
    elements = multiprocessing.Value("q", 0)
    original = np.argsort

    def patched(a, axis=-1, kind=None, order=None, **kwargs):
        with calls.get_lock():
            calls.value += 1
        with elements.get_lock():
            elements.value += int(np.size(a))
        return original(a, axis=axis, kind="stable", order=order, **kwargs)

    np.argsort = patched
    try:
        yield calls, elements
    finally:
        np.argsort = original


def direct_dataset(paths, case):
    """A factory for NumpyPackedFSLDataset constructed directly over the given paths."""
    from olmo_core.data.numpy_dataset import NumpyPackedFSLDataset
    from olmo_core.data.types import LongDocStrategy

    spec = TOKEN_SETS[case["set"]]

    def make(work):
        ds = NumpyPackedFSLDataset(
            *paths, sequence_length=case["seq"], pad_token_id=spec["pad"],
            eos_token_id=spec["eos"], vocab_size=spec["vocab"], dtype=spec["dtype"],
            generate_doc_lengths=True, bos_token_id=spec["bos"],
            long_doc_strategy=LongDocStrategy(case["strategy"]), source_group_size=case["group"])
        ds.work_dir = work
        return ds
    return make


def tokenizer_config(spec):
    from olmo_core.data.tokenizer import TokenizerConfig

    return TokenizerConfig(vocab_size=spec["vocab"], eos_token_id=spec["eos"],
                           pad_token_id=spec["pad"], bos_token_id=spec["bos"])


def case_patterns(case):
    """Absolute globs for the case's token files and (or None) label mask files."""
    folder = os.path.join(OUT, f"tokens_{case['set']}")
    return (os.path.join(folder, TOKEN_GLOB),
            os.path.join(folder, MASK_GLOB) if case["masks"] else None)


def config_dataset(case):
    """A factory for NumpyPackedFSLDatasetConfig(...).build(): OLMo-core expands the globs and
    applies source_permutation_seed to the files and label masks."""
    from olmo_core.data.numpy_dataset import NumpyPackedFSLDatasetConfig
    from olmo_core.data.types import LongDocStrategy

    spec = TOKEN_SETS[case["set"]]
    tokens, masks = case_patterns(case)

    def make(work):
        return NumpyPackedFSLDatasetConfig(
            tokenizer=tokenizer_config(spec), paths=[tokens], expand_glob=True,
            label_mask_paths=None if masks is None else [masks],
            source_permutation_seed=case["perm"], sequence_length=case["seq"],
            long_doc_strategy=LongDocStrategy(case["strategy"]), source_group_size=case["group"],
            generate_doc_lengths=True, work_dir=work).build()
    return make


def check_resolution(ds, case):
    """The files OLMo-core resolved are the sorted glob matches permuted by
    random.Random(seed).shuffle, label masks permuted together with their token files."""
    tokens, masks = case_patterns(case)
    token_matches = sorted(glob.glob(tokens))
    order = list(range(len(token_matches)))
    random.Random(case["perm"]).shuffle(order)
    assert [str(p) for p in ds.paths] == [token_matches[i] for i in order], ds.paths
    mask_paths = ds._label_mask_paths
    if masks is None:
        assert mask_paths is None
        return None
    mask_matches = sorted(glob.glob(masks))
    assert [str(p) for p in mask_paths] == [mask_matches[i] for i in order], mask_paths
    for tok, mask in zip(ds.paths, mask_paths):
        assert os.path.basename(str(mask)) == MASK_PREFIX + os.path.basename(str(tok))
    return [os.path.relpath(str(p), OUT) for p in mask_paths]


def build_dataset(make, patch):
    work = tempfile.mkdtemp(prefix="packed-fixture-")
    ds = make(work)
    assert str(ds.work_dir) == work
    if patch:
        with stable_argsort() as (calls, elements):
            ds.prepare()
        groups = len(ds._source_path_groups)
        num_docs = sum(len(read_u64(ds._get_document_indices_path(*g))) // 2
                       for g in ds._source_path_groups)
        print(f"  patched argsort: {calls.value} calls over {elements.value} elements "
              f"({groups} groups, {num_docs} documents)")
        assert calls.value == groups and elements.value == num_docs
    else:
        ds.prepare()
    return ds, work


def read_u64(path):
    return np.fromfile(path, dtype=np.uint64)


def packed_document_lengths(ds):
    """Per instance, in order, the lengths of its documents as the packer placed them (from the
    document-indices / instance-offsets / documents-by-instance cache files)."""
    out = []
    for group in ds._source_path_groups:
        doc_idx = read_u64(ds._get_document_indices_path(*group)).astype(np.int64)
        offsets = read_u64(ds._get_instance_offsets_path(*group)).astype(np.int64)
        by_inst = read_u64(ds._get_docs_by_instance_path(*group)).astype(np.int64)
        for k in range(len(offsets) // 2):
            ids = by_inst[offsets[2 * k]:offsets[2 * k + 1]]
            out.append([int(doc_idx[2 * d + 1] - doc_idx[2 * d]) for d in ids])
    assert len(out) == len(ds)
    return out


def fingerprint_text(ds):
    """The bytes OLMo-core hashes for the fingerprint (checked against ds.fingerprint)."""
    text = f"class={ds.__class__.__name__}"
    for field in ds.fingerprint_fields:
        text += f"{field}={getattr(ds, field)},"
    for path, size in zip(ds.paths, ds.file_sizes):
        text += f"path={os.path.basename(path)},size={size},"
    assert hashlib.sha256(text.encode()).hexdigest() == ds.fingerprint
    return text


def global_indices(ds, work, case):
    from olmo_core.data.collator import DataCollator
    from olmo_core.data.data_loader import NumpyFSLDataLoader

    dl = NumpyFSLDataLoader(
        ds, global_batch_size=INSTANCES_PER_BATCH * case["seq"],
        collator=DataCollator(pad_token_id=ds.pad_token_id), work_dir=work, seed=LOADER_SEED,
        shuffle=True, dp_world_size=1, dp_rank=0, fs_local_rank=0)
    dl.reshuffle(epoch=1)
    return np.asarray(dl.get_global_indices()).tolist()


def make_case(case, make, files):
    spec = TOKEN_SETS[case["set"]]
    print(f"case {case['name']}")
    ds, work = build_dataset(make, patch=True)
    assert np.dtype(ds.dtype) == np.dtype(spec["dtype"])
    assert [os.path.relpath(str(p), OUT) for p in ds.paths] == files
    text = fingerprint_text(ds)
    print(f"  fingerprint_fields={ds.fingerprint_fields}\n  hashed text: {text!r}")
    instances = instance_records(ds, case)
    stable_docs = [inst["document_lengths"] for inst in instances]
    stable = {"num_instances": len(ds), "fingerprint": ds.fingerprint,
              "global_indices_epoch1": global_indices(ds, work, case), "instances": instances}
    shutil.rmtree(work)

    dds, dwork = build_dataset(make, patch=False)
    default_docs = packed_document_lengths(dds)
    differ = len(dds) != len(ds) or any(
        dds[i]["input_ids"].tolist() != instances[i]["input_ids"] for i in range(len(dds)))
    default = {"num_instances": len(dds), "document_lengths": default_docs,
               "input_ids_differ_from_stable": differ}
    shutil.rmtree(dwork)
    print(f"  num_instances={len(ds)} default_differs={differ} "
          f"same_doc_lengths={default_docs == stable_docs}")

    return {"name": case["name"], "files": files,
            "dtype": np.dtype(spec["dtype"]).name, "sequence_length": case["seq"],
            "vocab_size": spec["vocab"], "eos_token_id": spec["eos"],
            "pad_token_id": spec["pad"], "bos_token_id": spec["bos"],
            "long_doc_strategy": case["strategy"], "source_group_size": case["group"],
            "seed": LOADER_SEED, "global_batch_size": INSTANCES_PER_BATCH * case["seq"],
            "stable": stable, "default": default}


def olmo_core_cache_case():
    """OLMo-core's own packing cache, as its prepare() leaves it with numpy's default sort, for
    tandem to read: case p16_fragment_group2 built over paths relative to this folder (the cache
    names hash the path strings, which must not be this machine's), its three cache files per group
    copied to olmo_core_cache/, their names, and every instance that dataset hands out."""
    case = next(c for c in CASES if c["name"] == "p16_fragment_group2")
    relative = [os.path.relpath(p, OUT) for p in sorted(
        os.path.join(OUT, "tokens_p16", f) for f in os.listdir(os.path.join(OUT, "tokens_p16")))]
    cwd = os.getcwd()
    os.chdir(OUT)
    try:
        ds, work = build_dataset(direct_dataset(relative, case), patch=False)
        folder = os.path.join(OUT, "olmo_core_cache")
        os.makedirs(folder, exist_ok=True)
        groups = []
        for g, paths in enumerate(ds._source_path_groups):
            names, copies = [], []
            for kind, path in (("document-indices", ds._get_document_indices_path(*paths)),
                               ("instance-offsets", ds._get_instance_offsets_path(*paths)),
                               ("documents-by-instance", ds._get_docs_by_instance_path(*paths))):
                copy = os.path.join(folder, f"group{g}-{kind}.npy")
                shutil.copyfile(path, copy)
                names.append(os.path.basename(str(path)))
                copies.append(os.path.relpath(copy, OUT))
            groups.append({"paths": [str(p) for p in paths],
                           "size_bytes": [os.path.getsize(p) for p in paths],
                           "cache_names": names, "cache_files": copies})
        instances = [ds[i]["input_ids"].tolist() for i in range(len(ds))]
        shutil.rmtree(work)
    finally:
        os.chdir(cwd)
    print(f"olmo_core_cache: {len(groups)} groups, {len(instances)} instances")
    return {"case": case["name"], "sequence_length": case["seq"],
            "long_doc_strategy": case["strategy"], "groups": groups,
            "input_ids": instances}


def make_config_case(case):
    """A packed case built through NumpyPackedFSLDatasetConfig (globs, permuted sources)."""
    probe = config_dataset(case)(tempfile.mkdtemp(prefix="packed-fixture-probe-"))
    shutil.rmtree(str(probe.work_dir))
    files = [os.path.relpath(str(p), OUT) for p in probe.paths]
    mask_files = check_resolution(probe, case)
    print(f"resolved (seed {case['perm']}): {files} masks {mask_files}")
    out = make_case(case, config_dataset(case), files)
    tokens, masks = case_patterns(case)
    out.update({"label_mask_files": mask_files, "source_permutation_seed": case["perm"],
                "file_patterns": [os.path.relpath(tokens, OUT)],
                "label_mask_patterns": None if masks is None else [os.path.relpath(masks, OUT)]})
    return out


def make_fsl_case(case):
    """Fixed windows over the permuted files, label masks read window by window."""
    from olmo_core.data.numpy_dataset import NumpyFSLDataset, NumpyFSLDatasetConfig

    spec = TOKEN_SETS[case["set"]]
    tokens, masks = case_patterns(case)
    print(f"fsl case {case['name']}")
    work = tempfile.mkdtemp(prefix="packed-fixture-")
    ds = NumpyFSLDatasetConfig(
        tokenizer=tokenizer_config(spec), paths=[tokens], expand_glob=True,
        label_mask_paths=None if masks is None else [masks],
        source_permutation_seed=case["perm"], sequence_length=case["seq"], work_dir=work).build()
    assert type(ds) is NumpyFSLDataset and str(ds.work_dir) == work
    assert np.dtype(ds.dtype) == np.dtype(spec["dtype"])
    ds.prepare()
    mask_files = check_resolution(ds, case)
    text = fingerprint_text(ds)
    print(f"  fingerprint_fields={ds.fingerprint_fields}\n  hashed text: {text!r}")
    instances = []
    for i in range(len(ds)):
        item = ds[i]
        assert len(item["input_ids"]) == len(item["label_mask"]) == case["seq"]
        instances.append({"input_ids": item["input_ids"].tolist(),
                          "label_mask": "".join("1" if m else "0" for m in item["label_mask"])})
    out = {"name": case["name"], "files": [os.path.relpath(str(p), OUT) for p in ds.paths],
           "label_mask_files": mask_files, "file_patterns": [os.path.relpath(tokens, OUT)],
           "label_mask_patterns": None if masks is None else [os.path.relpath(masks, OUT)],
           "source_permutation_seed": case["perm"], "dtype": np.dtype(spec["dtype"]).name,
           "sequence_length": case["seq"], "vocab_size": spec["vocab"],
           "eos_token_id": spec["eos"], "pad_token_id": spec["pad"],
           "bos_token_id": spec["bos"], "seed": LOADER_SEED,
           "global_batch_size": INSTANCES_PER_BATCH * case["seq"],
           "num_instances": len(ds), "fingerprint": ds.fingerprint,
           "global_indices_epoch1": global_indices(ds, work, case), "instances": instances}
    shutil.rmtree(work)
    print(f"  files={out['files']} num_instances={len(ds)}")
    return out


def source_permutations():
    perms = []
    for seed in PERMUTATION_SEEDS:
        for n in PERMUTATION_SIZES:
            order = list(range(n))
            random.Random(seed).shuffle(order)
            perms.append({"seed": seed, "n": n, "order": order})
    bits = []
    for seed in GETRANDBITS_SEEDS:
        rng = random.Random(seed)
        bits.append({"seed": seed, "getrandbits32": [rng.getrandbits(32) for _ in range(8)]})
    return perms, bits


# ----------------------------------------------------------------------------------------------
def m16_document(rng, spec):
    """1..40 tokens or, one time in ten, 65..200; three in four end with EOS, the others with an
    ordinary token; one in five of those with 4+ tokens holds 1 or 2 EOS tokens inside."""
    n = int(rng.integers(65, 201)) if rng.random() < 0.1 else int(rng.integers(1, 41))
    doc = rng.integers(0, 990, n)
    if rng.random() < 0.75:
        doc[-1] = spec["eos"]
    if n >= 4 and rng.random() < 0.2:
        doc[rng.choice(np.arange(1, n - 1), size=int(rng.integers(1, 3)), replace=False)] = \
            spec["eos"]
    return doc


def m32_document(rng, spec):
    """BOS then 2..88 tokens or, one time in ten, 129..599; three in four end with EOS; some hold
    EOS tokens inside, some an EOS+BOS pair inside (a boundary for the EOS+BOS scan only)."""
    n = int(rng.integers(130, 601)) if rng.random() < 0.1 else int(rng.integers(3, 90))
    body = rng.integers(0, 100000, n - 1)
    if rng.random() < 0.75:
        body[-1] = spec["eos"]
    r = rng.random()
    if len(body) >= 4 and r < 0.2:
        body[rng.choice(np.arange(0, len(body) - 1), size=int(rng.integers(1, 3)),
                        replace=False)] = spec["eos"]
    elif len(body) >= 6 and r < 0.3:
        k = int(rng.integers(1, len(body) - 3))
        body[k], body[k + 1] = spec["eos"], spec["bos"]
    return np.concatenate([[spec["bos"]], body])


def metadata_path(token_path):
    """OLMo-core's metadata file for a token file (iter_document_indices)."""
    return os.path.join(os.path.dirname(token_path),
                        os.path.basename(token_path).replace(".npy", ".csv.gz"))


def write_metadata_file(path, lines):
    """gzip text, mtime 0 and no file name in the header: identical bytes on every run."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write("".join(line + "\n" for line in lines).encode())


def write_metadata_token_set(name):
    """Token files and their metadata files; returns the token paths and, per file, the
    (start, end) of every document as listed in the metadata."""
    from olmo_core.data.utils import iter_document_indices

    spec = METADATA_TOKEN_SETS[name]
    rng = np.random.default_rng(spec["seed"])
    folder = os.path.join(OUT, f"tokens_{name}")
    os.makedirs(folder, exist_ok=True)
    make_doc = m16_document if spec["bos"] is None else m32_document
    paths, bounds = [], []
    for i in range(spec["files"]):
        docs, size = [], 0
        while size < spec["target"]:
            docs.append(make_doc(rng, spec))
            size += len(docs[-1])
        listed, lines, start = [], [], 0
        for k, doc in enumerate(docs):
            end = start + len(doc)
            listed.append((start, end))
            line = f"{start},{end}"
            r = rng.random()
            if r < 0.2:
                line += f",{name}-{i}-{k}"
            elif r < 0.3:
                line += f",{name}-{i}-{k},src{int(rng.integers(0, 5))}"
            lines.append(line)
            start = end
        if i == spec["tail_file"]:
            tail = rng.integers(0, 990, 7)
            tail[3] = spec["eos"]
            docs.append(tail)  # tokens in no document: not in the metadata
        toks = np.concatenate(docs).astype(spec["dtype"])
        assert toks.max() < spec["vocab"]
        path = os.path.join(folder, f"part-{i}-00000.npy")
        toks.tofile(path)
        write_metadata_file(metadata_path(path), lines)
        assert list(iter_document_indices(path, use_array_if_local=False, eos_token_id=spec["eos"],
                                          bos_token_id=spec["bos"], dtype=spec["dtype"])) == listed
        unterminated = sum(int(toks[e - 1] != spec["eos"]) for _, e in listed)
        print(f"{path}: {len(toks)} tokens, {len(listed)} documents ({unterminated} without a "
              f"final EOS), {len(toks) - listed[-1][1]} tokens after the last document")
        paths.append(path)
        bounds.append(listed)
    return paths, bounds


def metadata_dataset(paths, case, use_array_if_local):
    """A factory for NumpyPackedFSLDataset over a metadata token set."""
    from olmo_core.data.numpy_dataset import NumpyPackedFSLDataset
    from olmo_core.data.types import LongDocStrategy

    spec = METADATA_TOKEN_SETS[case["set"]]

    def make(work):
        ds = NumpyPackedFSLDataset(
            *paths, sequence_length=case["seq"], pad_token_id=spec["pad"],
            eos_token_id=spec["eos"], vocab_size=spec["vocab"], dtype=spec["dtype"],
            generate_doc_lengths=True, bos_token_id=spec["bos"],
            long_doc_strategy=LongDocStrategy(case["strategy"]), source_group_size=case["group"],
            use_array_if_local=use_array_if_local)
        ds.work_dir = work
        return ds
    return make


def expected_document_indices(ds, case, bounds):
    """The metadata documents of each source group, offset by the sizes of the group's earlier
    files, truncated or fragmented to the sequence length."""
    spec = METADATA_TOKEN_SETS[case["set"]]
    item = np.dtype(spec["dtype"]).itemsize
    per_file = dict(zip([str(p) for p in ds.paths], bounds))
    out = []
    for group in ds._source_path_groups:
        docs, offset = [], 0
        for path in group:
            for start, end in per_file[str(path)]:
                start, end = start + offset, end + offset
                if end - start <= case["seq"]:
                    docs.append((start, end))
                elif case["strategy"] == "truncate":
                    docs.append((start, start + case["seq"]))
                else:
                    docs += [(s, min(end, s + case["seq"])) for s in range(start, end, case["seq"])]
            offset += os.path.getsize(str(path)) // item
        out.append(docs)
    return out


def instance_records(ds, case):
    docs = packed_document_lengths(ds)
    instances = []
    for i in range(len(ds)):
        item = ds[i]
        doc_lens = item["doc_lens"].tolist()
        assert sum(doc_lens) == case["seq"] == len(item["input_ids"])
        instances.append({"input_ids": item["input_ids"].tolist(),
                          "label_mask": "".join("1" if m else "0" for m in item["label_mask"]),
                          "doc_lens": doc_lens, "document_lengths": docs[i]})
    return instances


def cache_name_records(ds):
    """Per source group: the path strings, sizes, the exact extra ids hashed into the packing
    cache names and the three names (recomputed here from those parts)."""
    groups = []
    for paths in ds._source_path_groups:
        extra_ids = [e.encode().decode() for e in ds._packing_cache_extra_ids(paths)]
        sizes = [os.path.getsize(str(p)) for p in paths]
        names = []
        for kind, path in (("document-indices", ds._get_document_indices_path(*paths)),
                           ("instance-offsets", ds._get_instance_offsets_path(*paths)),
                           ("documents-by-instance", ds._get_docs_by_instance_path(*paths))):
            digest = hashlib.sha256()
            for p, size in zip(paths, sizes):
                digest.update(str(p).encode())
                digest.update(str(size).encode())
            for e in extra_ids:
                digest.update(e.encode())
            name = f"{kind}-{ds.sequence_length}-{digest.hexdigest()}.npy"
            assert os.path.basename(str(path)) == name and os.path.isfile(str(path)), path
            names.append(name)
        groups.append({"paths": [str(p) for p in paths], "size_bytes": sizes,
                       "extra_ids": extra_ids, "cache_names": names})
    return groups


def make_metadata_case(case, paths, bounds):
    spec = METADATA_TOKEN_SETS[case["set"]]
    files = [os.path.relpath(p, OUT) for p in paths]
    print(f"metadata case {case['name']}")
    ds, work = build_dataset(metadata_dataset(paths, case, False), patch=True)
    assert np.dtype(ds.dtype) == np.dtype(spec["dtype"])
    assert [str(p) for p in ds.paths] == paths
    assert ds._packed_from_metadata_boundaries(ds.paths)
    assert ds.fingerprint_fields[-2:] == ("use_array_if_local", "_metadata_fingerprint")
    text = fingerprint_text(ds)
    print(f"  fingerprint_fields={ds.fingerprint_fields}\n  hashed text: {text!r}")
    expected = expected_document_indices(ds, case, bounds)
    for group, docs in zip(ds._source_path_groups, expected):
        got = read_u64(ds._get_document_indices_path(*group)).astype(np.int64).reshape(-1, 2)
        assert sorted(map(tuple, got.tolist())) == sorted(docs), group
    instances = instance_records(ds, case)
    out = {"name": case["name"], "files": files,
           "metadata_files": [os.path.relpath(metadata_path(p), OUT) for p in paths],
           "dtype": np.dtype(spec["dtype"]).name, "sequence_length": case["seq"],
           "vocab_size": spec["vocab"], "eos_token_id": spec["eos"],
           "pad_token_id": spec["pad"], "bos_token_id": spec["bos"],
           "long_doc_strategy": case["strategy"], "source_group_size": case["group"],
           "use_array_if_local": False, "seed": LOADER_SEED,
           "global_batch_size": INSTANCES_PER_BATCH * case["seq"],
           "num_instances": len(ds), "fingerprint": ds.fingerprint, "fingerprint_text": text,
           "global_indices_epoch1": global_indices(ds, work, case), "instances": instances}
    shutil.rmtree(work)

    sds, swork = build_dataset(metadata_dataset(paths, case, None), patch=True)
    assert not sds._packed_from_metadata_boundaries(sds.paths)
    differ = len(sds) != len(ds) or any(
        sds[i]["input_ids"].tolist() != instances[i]["input_ids"] for i in range(len(sds)))
    out.update({"eos_scan_differs": differ, "eos_scan_num_instances": len(sds)})
    shutil.rmtree(swork)
    print(f"  num_instances={len(ds)} eos_scan_num_instances={len(sds)} eos_scan_differs={differ}")
    assert differ

    if case["name"] == METADATA_CACHE_CASE:
        # The cache names hash the path strings: built over paths relative to this folder.
        relative = [os.path.relpath(p, OUT) for p in paths]
        cwd = os.getcwd()
        os.chdir(OUT)
        try:
            rds, rwork = build_dataset(metadata_dataset(relative, case, False), patch=True)
            assert rds.fingerprint == out["fingerprint"] and fingerprint_text(rds) == text
            assert [r["input_ids"] for r in instance_records(rds, case)] == \
                [r["input_ids"] for r in instances]
            out["cache_names"] = cache_name_records(rds)
            shutil.rmtree(rwork)
        finally:
            os.chdir(cwd)
        print(f"  cache_names: {json.dumps(out['cache_names'], indent=1)}")
    return out


def metadata_cases():
    sets = {name: write_metadata_token_set(name) for name in METADATA_TOKEN_SETS}
    out = [make_metadata_case(case, *sets[case["set"]]) for case in METADATA_CASES]
    text = json.dumps(out)
    for local in (ROOT, OUT, tempfile.gettempdir(), "/tmp", "/work"):
        assert local not in text, local
    return out


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    token_paths = {name: write_token_set(name) for name in TOKEN_SETS}
    mask_paths = {name: write_label_masks(name, token_paths[name]) for name in MASK_SETS}
    cases = [make_case(case, direct_dataset(token_paths[case["set"]], case),
                       [os.path.relpath(p, OUT) for p in token_paths[case["set"]]])
             for case in CASES]
    cases += [make_config_case(case) for case in CONFIG_CASES]
    fsl_cases = [make_fsl_case(case) for case in FSL_CASES]
    permutations, getrandbits32 = source_permutations()
    write_json("packed.json", {
        "versions": versions(),
        "note": ("OLMo-core NumpyPackedFSLDataset (OBFD packing) over the token files here; "
                 "'stable' was built with numpy.argsort forced to kind='stable' (ties keep "
                 "document order), 'default' with numpy's own argsort, whose tie order is "
                 "unspecified."),
        "cases": cases,
        "fsl_cases": fsl_cases,
        "source_permutations": permutations,
        "getrandbits32": getrandbits32,
        "olmo_core_cache": olmo_core_cache_case(),
        "metadata_cases": metadata_cases()})
