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

Run from the repository root:  python3 tools/make_packed_fixtures.py
Needs numpy and ai2-olmo-core (which brings torch). The tests only read the committed output.
"""

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from importlib.metadata import version

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "data", "packed")

LOADER_SEED = 4242
INSTANCES_PER_BATCH = 4


def versions():
    simd = np.show_config(mode="dicts").get("SIMD Extensions", {}).get("found", [])
    return {"numpy": version("numpy"), "ai2-olmo-core": version("ai2-olmo-core"),
            "python": sys.version.split()[0], "numpy_simd_found": list(simd)}


def write_json(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


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


def build_dataset(paths, case, patch):
    from olmo_core.data.numpy_dataset import NumpyPackedFSLDataset
    from olmo_core.data.types import LongDocStrategy

    spec = TOKEN_SETS[case["set"]]
    ds = NumpyPackedFSLDataset(
        *paths, sequence_length=case["seq"], pad_token_id=spec["pad"], eos_token_id=spec["eos"],
        vocab_size=spec["vocab"], dtype=spec["dtype"], generate_doc_lengths=True,
        bos_token_id=spec["bos"], long_doc_strategy=LongDocStrategy(case["strategy"]),
        source_group_size=case["group"])
    work = tempfile.mkdtemp(prefix="packed-fixture-")
    ds.work_dir = work
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


def make_case(case, paths):
    spec = TOKEN_SETS[case["set"]]
    print(f"case {case['name']}")
    ds, work = build_dataset(paths, case, patch=True)
    text = fingerprint_text(ds)
    print(f"  fingerprint_fields={ds.fingerprint_fields}\n  hashed text: {text!r}")
    stable_docs = packed_document_lengths(ds)
    instances = []
    for i in range(len(ds)):
        item = ds[i]
        doc_lens = item["doc_lens"].tolist()
        assert sum(doc_lens) == case["seq"] == len(item["input_ids"])
        instances.append({"input_ids": item["input_ids"].tolist(),
                          "label_mask": "".join("1" if m else "0" for m in item["label_mask"]),
                          "doc_lens": doc_lens, "document_lengths": stable_docs[i]})
    stable = {"num_instances": len(ds), "fingerprint": ds.fingerprint,
              "global_indices_epoch1": global_indices(ds, work, case), "instances": instances}
    shutil.rmtree(work)

    dds, dwork = build_dataset(paths, case, patch=False)
    default_docs = packed_document_lengths(dds)
    differ = len(dds) != len(ds) or any(
        dds[i]["input_ids"].tolist() != instances[i]["input_ids"] for i in range(len(dds)))
    default = {"num_instances": len(dds), "document_lengths": default_docs,
               "input_ids_differ_from_stable": differ}
    shutil.rmtree(dwork)
    print(f"  num_instances={len(ds)} default_differs={differ} "
          f"same_doc_lengths={default_docs == stable_docs}")

    return {"name": case["name"], "files": [os.path.relpath(p, OUT) for p in paths],
            "dtype": np.dtype(spec["dtype"]).name, "sequence_length": case["seq"],
            "vocab_size": spec["vocab"], "eos_token_id": spec["eos"],
            "pad_token_id": spec["pad"], "bos_token_id": spec["bos"],
            "long_doc_strategy": case["strategy"], "source_group_size": case["group"],
            "seed": LOADER_SEED, "global_batch_size": INSTANCES_PER_BATCH * case["seq"],
            "stable": stable, "default": default}


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    token_paths = {name: write_token_set(name) for name in TOKEN_SETS}
    cases = [make_case(case, token_paths[case["set"]]) for case in CASES]
    write_json("packed.json", {
        "versions": versions(),
        "note": ("OLMo-core NumpyPackedFSLDataset (OBFD packing) over the token files here; "
                 "'stable' was built with numpy.argsort forced to kind='stable' (ties keep "
                 "document order), 'default' with numpy's own argsort, whose tie order is "
                 "unspecified."),
        "cases": cases})
