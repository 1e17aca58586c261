#!/usr/bin/env python3
"""`tandem data batches` against OLMo-core's loader on random data configs it never saw.

Each case draws token files (1 to 6, 1 to 4000 tokens each: some shorter than one instance;
uint16 or uint32 over vocabularies from 1000 to 100278, EOS sprinkled in, and with the repetition
filter on, repeated spans of period 1 to 13 that it rejects or keeps, and a sequence length of 32
to 128; else 4 to 64), no chunking or max_target_sequence_length 2x to 8x it, 1 to 16 instances
per global batch, a seed, and every world size in (1, 2, 3, 4, 8) that divides the batch. Drawn
independently of those (their own random stream, so that --plain gives exactly the cases above):
- in about 40% of cases `dataset: packed` (OLMo-core's NumpyPackedFSLDataset, OBFD packing)
  instead of fixed windows: a power-of-two sequence length (8 to 256; 32 to 256 with the filter),
  long_doc_strategy truncate or fragment, source_group_size 1 to 3, no max_target; each file
  (1 to max(4000, 20x the sequence length) tokens) holds documents of 1 to 2x the sequence length
  tokens ending with EOS, most of them of a few favourite lengths (ties for the sort), some with an
  EOS inside, the last one sometimes cut (no EOS: OLMo-core drops it); in 30% of them a BOS id,
  every document starting with BOS (the boundary is then EOS followed by BOS; some BOS and EOS
  inside documents are no boundary); with the filter on, some documents repeat a period of 1 to 13
  (padding, pad_token_id repeated, may be rejected too: on both sides); in about 40% of the packed
  cases `use_array_if_local: false` (OLMo-core's use_array_if_local=False): the documents come from
  a metadata file next to each token file (`part-NN.csv.gz`, deterministic gzip, one line
  "start,end" per document, in half of the files with more fields after them, Dolma-like ids
  or JSON with commas, now and then no newline after the last line), where about a quarter of the
  documents lose their final EOS (a body token instead, so an EOS scan would merge them), the cut
  last document is one too, and in about 15% of the files the last tokens are in no document
  (the last document shortened or left out); never an empty document;
- in about 30% label-mask files (label_mask_paths: np.bool_ per token, random runs of 0 and 1 of
  1 to 60 tokens, or all 1, or all 0), for fixed windows or packed;
- in about 30% a source_permutation_seed (files and masks shuffled by random.Random(seed));
- with masks or a permutation, half the time the files are given as globs;
- in about 40% of all cases (fixed windows or packed, either boundary source)
  generate_doc_lengths: true on both sides, and the per-instance doc_lens compared too;
- in about 30% (a fourth stream; then fixed windows without masks, permutation or globs, every file
  ending with EOS, in a third of them all of one size so that the rounding meets equal remainders)
  a source mixture (data.source_mixture; OLMo-core's
  NumpyFSLDatasetConfig.from_src_mix(SourceMixtureDatasetConfig(...))): 1 to 3 sources over the
  files, now and then one file in two sources, target ratios from integer weights (sometimes a 0),
  max_repetition_ratio 1 or up to 5, max_source_fraction 1 or down to 0.2, requested_tokens 5% to
  100% of all tokens (the global batch is the loader's); configs OLMo-core refuses (a source
  without enough tokens) must be refused by tandem.
The metadata and doc_lens draws come from a third stream (and the metadata's edits of the tokens
from a numpy stream of their own), so the cases drawn before they existed keep their options and
their token files, but for the EOS the metadata cases take away.
tandem's config lists the files (or globs) in their sorted order; OLMo-core's side of these cases
is built through NumpyFSLDatasetConfig / NumpyPackedFSLDatasetConfig(paths, expand_glob,
label_mask_paths, source_permutation_seed, tokenizer, ...).build(), checked to have resolved the
files and masks as random.Random(seed).shuffle orders them, and, packed, with every source group
packed here through the dataset's own _pack_documents_from_source_into_instances (so the caches
carry its names, with use_array_if_local and the metadata hashes when set) with numpy.argsort
forced to kind="stable" (checked called once per group) before prepare() finds those caches
(checked: it rewrites none of them; numpy's default argsort orders equal lengths per CPU); the
other cases use OLMo-core's NumpyFSLDataset as tools/make_data_fixtures.py builds it.
For both epochs and every rank, OLMo-core's dataset + NumpyDataLoaderBase and tandem must give the
same instance ids per step, the same tokens (XXH64 of the int64 ids, as `--hash`), with the filter
on the same instance_mask, for packed or masked data the same per-token label_mask, and with
generate_doc_lengths the same doc_lens per instance (OLMo-core's from its dataset's __getitem__,
checked to be what its collator batched) (`--tokens`; each absent on both sides otherwise);
tandem's dataset fingerprint (its saved loader state) must be OLMo-core's; and, from OLMo-core's
state_dict after a random number of steps of epoch 1 on one of those world sizes, the rest of the
epoch on another (`--resume-state`). A case
OLMo-core refuses, or one whose data holds less than one global batch (OLMo-core's loader then
yields no step), tandem must refuse.

Run on 120 cases (seeds 21 and 22, 60 each: 46 packed, 16 of them with BOS, 22 with metadata
boundaries (7028 documents, 1797 of them without a final EOS, 11 files with tokens in no
document), 45 with generate_doc_lengths (27 fixed windows, 8 metadata; 78880 doc_lens entries
compared), 38 with label masks, 36 with a source_permutation_seed, 37 with globs, 52 with the
filter, 112 resumed, 4 without a full batch, all refused by tandem, none that OLMo-core refuses):
all agree, in about 1.3 s a case. With OLMo-core's doc_lens replaced by an EOS scan, all 7 of
those metadata cases with doc_lens that hold a full batch differ. (Before the metadata and
doc_lens draws: without the stable sort, numpy's default argsort on this CPU, 7 of seed 11's first
30 cases differed: all packed.) Seeds 41, 42 and 43 (180 cases, 60 source mixtures, 15 of them
refused by both): all agree; with Hamilton's ties given to the earlier entry, 2 of seed 41's 16 differ.

Usage: python3 tools/check_data_order_random.py TANDEM_BINARY [--seed S] [--cases N] [--plain]
Needs numpy, xxhash and ai2-olmo-core. Exits 0 only when every case agrees.
"""
import gzip
import io
import json
import os
import random
import shutil
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
TOKEN_GLOB = "part-*.npy"
MASK_GLOB = "mask-*.npy"


class ToolError(Exception):
    """This tool built OLMo-core's side wrongly (not a refusal by OLMo-core)."""


def draw(seed, index, plain=False):
    """(folder, token file paths, label mask paths or None, spec) of one random case."""
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
    # The packed / label-mask / permutation draws: a stream of their own.
    extra = random.Random(f"data order extras {seed} {index}")
    packed, masks = extra.random() < 0.4, extra.random() < 0.3
    perm = extra.choice([extra.randint(0, 2**32 - 1), extra.randint(0, 2**63 - 1)]) \
        if extra.random() < 0.3 else None
    use_glob = (masks or perm is not None) and extra.random() < 0.5
    # Metadata boundaries and doc_lens: a stream of their own again, so that the cases drawn
    # before these existed keep their options (and, but for the metadata, their tokens).
    later = random.Random(f"data order metadata and doc_lens {seed} {index}")
    metadata, doc_lens = later.random() < 0.4, later.random() < 0.4
    if plain:
        packed, masks, perm, use_glob = False, False, None, False
        metadata = doc_lens = False
    metadata = metadata and packed
    # Source mixtures: a fourth stream; fixed windows without masks or a permutation (OLMo-core
    # mixes only those).
    mixing = random.Random(f"data order source mixture {seed} {index}")
    mixture = not plain and mixing.random() < 0.3
    if mixture:
        packed = masks = use_glob = metadata = False
        perm = None
        if mixing.random() < 0.3:  # files of one size: equal remainders, ties in the rounding
            spec["sizes"] = [spec["sizes"][0]] * len(spec["sizes"])
    if packed:
        spec["seq"] = extra.choice([32, 64, 128, 256] if repetition_filter
                                   else [8, 16, 32, 64, 128, 256])
        spec["max_target"] = None
        spec["packed"] = dict(
            strategy=extra.choice(["truncate", "fragment"]), group=extra.randint(1, 3),
            bos=vocab - 3 if extra.random() < 0.3 else None)
        spec["sizes"] = [extra.randint(1, max(4000, 20 * spec["seq"])) for _ in spec["sizes"]]
        if metadata:  # use_array_if_local: false; what the metadata files hold, counted below
            spec["packed"]["metadata"] = dict(documents=0, without_eos=0, tails_outside=0,
                                              extra_fields=[])
    if doc_lens:
        spec["doc_lens"] = True
    if masks:
        spec["masks"] = True
    if perm is not None:
        spec["perm"] = perm
    if use_glob:
        spec["glob"] = True
    folder = tempfile.mkdtemp(prefix="data_order_")
    gen = np.random.default_rng(seed * 1000 + index)
    meta_gen = np.random.default_rng([seed, index, 29])  # the metadata's own stream
    paths = []
    for k, size in enumerate(spec["sizes"]):
        if packed:
            toks, lengths = packed_tokens(gen, size, vocab, spec["seq"], spec["packed"]["bos"],
                                          repetition_filter)
            spec["sizes"][k] = len(toks)
            if metadata:
                write_metadata(meta_gen, toks, lengths, vocab, spec["packed"],
                               os.path.join(folder, f"part-{k:02d}.csv.gz"))
        else:
            toks = gen.integers(0, vocab - 2, size)
            toks[gen.random(size) < 0.02] = vocab - 2  # EOS
            if spec["filter"]:
                for start in range(0, max(0, size - 80), rng.randint(60, 400)):
                    span = np.tile(gen.integers(0, vocab - 2, rng.choice([1, 2, 3, 5, 13])),
                                   rng.choice([20, 31, 32, 33, 40, 64]))[: size - start]
                    toks[start:start + len(span)] = span
            if mixture:  # OLMo-core's mixture prepare() needs a document in each file it reads
                toks[-1] = vocab - 2
        path = os.path.join(folder, f"part-{k:02d}.npy")
        toks.astype(dtype).tofile(path)
        paths.append(path)
    if mixture:
        spec["mixture"] = draw_mixture(mixing, spec["sizes"])
    mask_paths = None
    if masks:
        mask_gen = np.random.default_rng([seed, index, 17])
        mask_paths = []
        for k, size in enumerate(spec["sizes"]):
            path = os.path.join(folder, f"mask-{k:02d}.npy")
            label_mask(mask_gen, size).tofile(path)
            mask_paths.append(path)
    return folder, paths, mask_paths, spec


def draw_mixture(rng, sizes):
    """A SourceMixtureDatasetConfig over the case's files: 1 to 3 sources (files shuffled among
    them, now and then one file in two sources), integer weights normalized to target ratios
    (sometimes one of 0), max_repetition_ratio 1 or up to 5, max_source_fraction 1 or down to 0.2,
    and requested_tokens from 5% to 100% of all the tokens (too many for some sources: refused)."""
    n = len(sizes)
    k = rng.randint(1, min(3, n))
    order = list(range(n))
    rng.shuffle(order)
    groups = [order[j::k] for j in range(k)]
    if k > 1 and rng.random() < 0.2:
        groups[0].append(groups[1][0])
    weights = [rng.randint(1, 10) for _ in groups]
    if k > 1 and rng.random() < 0.15:
        weights[-1] = 0
    sources = [dict(name=f"src{j}", ratio=w / sum(weights), files=g,
                    rep=1.0 if rng.random() < 0.5 else round(rng.uniform(1, 5), 3),
                    frac=1.0 if rng.random() < 0.6 else round(rng.uniform(0.2, 1), 3))
               for j, (g, w) in enumerate(zip(groups, weights))]
    requested = max(1, int(sum(sizes) * rng.uniform(0.05, 1.0)))
    return dict(requested=requested, sources=sources)


def packed_tokens(gen, size, vocab, seq, bos, repetition):
    """(About `size` tokens of documents (each ending with EOS, starting with BOS when bos is set)
    of 1 to 2 * seq tokens, many of a few favourite lengths; sometimes cut inside the last one,
    the documents' lengths before that cut)."""
    eos = vocab - 2
    top = vocab - 2 if bos is None else vocab - 3  # body tokens: below EOS (and BOS)
    favourites = gen.integers(1, 2 * seq + 1, int(gen.integers(1, 6)))
    docs, total = [], 0
    while total < size:
        n = int(gen.choice(favourites)) if gen.random() < 0.6 else int(gen.integers(1, 2 * seq + 1))
        doc = gen.integers(0, top, n)
        if repetition and gen.random() < 0.25:
            period = int(gen.choice([1, 2, 3, 5, 13]))
            doc = np.tile(gen.integers(0, top, period), n // period + 1)[:n]
        if n > 3 and gen.random() < 0.1:
            doc[int(gen.integers(1, n - 2))] = eos  # a boundary only without BOS
        if bos is not None:
            if n > 3 and gen.random() < 0.05:
                doc[int(gen.integers(1, n - 1))] = bos  # no boundary unless after an EOS
            doc[0] = bos
        doc[-1] = eos
        docs.append(doc)
        total += n
    toks = np.concatenate(docs)
    return (toks[:size] if gen.random() < 0.5 else toks), [len(d) for d in docs]


def write_metadata(gen, toks, lengths, vocab, packed, path):
    """Writes the metadata file of `toks` (OLMo-core's use_array_if_local=False): one line
    "start,end[,more fields]" per document, gzip'd deterministically. The documents are those
    `lengths` made (the last one as cut); about a quarter of them lose their final EOS here (a body
    token instead, so that an EOS scan would merge them with the next one); sometimes the file's
    last tokens are in no document; sometimes every line has more fields. Never an empty document.
    Counts what it wrote in packed["metadata"]."""
    eos, top = vocab - 2, vocab - 2 if packed["bos"] is None else vocab - 3
    docs, start = [], 0
    for n in lengths:
        if start >= len(toks):
            break
        docs.append([start, min(start + n, len(toks))])
        start += n
    for doc in docs:
        if gen.random() < 0.25:
            toks[doc[1] - 1] = int(gen.integers(0, top))
    tail = gen.random() < 0.15
    if tail and docs[-1][1] - docs[-1][0] > 1 and gen.random() < 0.7:
        docs[-1][1] -= int(gen.integers(1, docs[-1][1] - docs[-1][0]))  # keeps >= 1 token
    elif tail and len(docs) > 1:
        docs.pop()
    else:
        tail = False
    style = ["", "", "id", "json"][int(gen.integers(0, 4))]
    lines = []
    for j, (a, b) in enumerate(docs):
        more = "" if not style else f",doc-{j},s3://bucket/src-{j % 3}.json.gz" \
            if style == "id" else f',{{"id": "doc-{j}", "note": "a, b", "n": {b - a}}}'
        lines.append(f"{a},{b}{more}\n")
    if gen.random() < 0.1:
        lines[-1] = lines[-1].rstrip("\n")  # no newline after the last line
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as f:
        f.write("".join(lines).encode())
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    m = packed["metadata"]
    m["documents"] += len(docs)
    m["without_eos"] += sum(int(toks[b - 1]) != eos for _, b in docs)
    m["tails_outside"] += int(tail)
    m["extra_fields"].append(style or "none")


def label_mask(gen, size):
    """np.bool_ per token: runs of 1 to 60 of alternating values, or all True, or all False."""
    r = gen.random()
    if r < 0.05:
        return np.ones(size, dtype=np.bool_)
    if r < 0.1:
        return np.zeros(size, dtype=np.bool_)
    runs = gen.integers(1, 61, size)
    values = (np.arange(size) + int(gen.integers(0, 2))) % 2 == 1
    return np.repeat(values, runs)[:size].astype(np.bool_)


def uses_config_class(spec):
    return any(k in spec for k in ("packed", "masks", "perm", "doc_lens", "mixture"))


def olmo_core_mixture(paths, spec, common):
    """OLMo-core's NumpyFSLDatasetMixture: NumpyFSLDatasetConfig.from_src_mix(...).build()."""
    from olmo_core.data.numpy_dataset import NumpyFSLDatasetConfig, NumpyFSLDatasetMixture
    from olmo_core.data.source_mixture import (SourceMixtureConfig, SourceMixtureDatasetConfig,
                                               SourceMixtureList)

    m = spec["mixture"]
    mix = SourceMixtureDatasetConfig(
        source_list=SourceMixtureList(sources=[SourceMixtureConfig(
            source_name=s["name"], target_ratio=s["ratio"], paths=[paths[i] for i in s["files"]],
            max_repetition_ratio=s["rep"], max_source_fraction=s["frac"])
            for s in m["sources"]]),
        requested_tokens=m["requested"], global_batch_size=spec["batch"] * spec["seq"],
        render_tables=False, quiet=True)
    kwargs = {k: v for k, v in common.items()
              if k not in ("paths", "expand_glob", "label_mask_paths", "source_permutation_seed")}
    ds = NumpyFSLDatasetConfig.from_src_mix(
        mix, **kwargs, max_target_sequence_length=spec["max_target"]).build()
    if not isinstance(ds, NumpyFSLDatasetMixture):
        raise ToolError(f"OLMo-core built a {type(ds).__name__}")
    return ds


def patterns(folder, paths, mask_paths, spec):
    """The token and label-mask paths (or globs) as both configs name them, in sorted order."""
    if spec.get("glob"):
        return ([os.path.join(folder, TOKEN_GLOB)],
                None if mask_paths is None else [os.path.join(folder, MASK_GLOB)])
    return list(paths), None if mask_paths is None else list(mask_paths)


def pack_with_a_stable_sort(ds):
    """Packs every source group of `ds` here, numpy.argsort forced to kind="stable", into its
    work_dir, so that prepare() finds the caches and packs nothing itself (the caches' names hold
    use_array_if_local and the metadata hashes when set: the dataset's own methods name them);
    returns {cache: (inode, mtime)} to check that prepare() left them alone."""
    from olmo_core.data.utils import chunked

    groups = list(chunked(ds.paths, ds.source_group_size))
    original, calls = np.argsort, []

    def stable(a, axis=-1, kind=None, order=None, **kwargs):
        calls.append(int(np.size(a)))
        return original(a, axis=axis, kind="stable", order=order, **kwargs)

    np.argsort = stable
    try:
        for group in groups:
            ds._pack_documents_from_source_into_instances(*group)
    finally:
        np.argsort = original
    if len(calls) != len(groups):
        raise ToolError(f"the stable argsort ran {len(calls)} times for {len(groups)} groups")
    caches = {}
    for group in groups:
        for cache in (ds._get_document_indices_path(*group), ds._get_instance_offsets_path(*group),
                      ds._get_docs_by_instance_path(*group)):
            if not cache.is_file():
                raise ToolError(f"no packing cache {cache} for {group}: prepare() would repack")
            st = os.stat(cache)
            caches[cache] = (st.st_ino, st.st_mtime_ns)
    return caches


def config_class_dataset(folder, paths, mask_paths, spec):
    """OLMo-core's dataset built through its config class (globs, label masks, permutation),
    prepared in a fresh work dir, packed (if so) with a stable sort."""
    from olmo_core.data import TokenizerConfig
    from olmo_core.data.numpy_dataset import (InstanceFilterConfig, NumpyFSLDatasetConfig,
                                              NumpyPackedFSLDatasetConfig)
    from olmo_core.data.types import LongDocStrategy, NumpyDatasetDType

    work = tempfile.mkdtemp(prefix="data_order_work_", dir=folder)  # removed with the case
    token_args, mask_args = patterns(folder, paths, mask_paths, spec)
    packed = spec.get("packed")
    common = dict(
        tokenizer=TokenizerConfig(vocab_size=spec["vocab"], eos_token_id=spec["vocab"] - 2,
                                  pad_token_id=spec["vocab"] - 1,
                                  bos_token_id=packed["bos"] if packed else None),
        paths=token_args, expand_glob=bool(spec.get("glob")), label_mask_paths=mask_args,
        source_permutation_seed=spec.get("perm"), sequence_length=spec["seq"],
        dtype=NumpyDatasetDType(np.dtype(spec["dtype"]).name),
        instance_filter_config=InstanceFilterConfig() if spec["filter"] else None, work_dir=work,
        generate_doc_lengths="doc_lens" in spec)
    if "mixture" in spec:
        ds = olmo_core_mixture(paths, spec, common)
    elif packed:
        ds = NumpyPackedFSLDatasetConfig(
            **common, long_doc_strategy=LongDocStrategy(packed["strategy"]),
            source_group_size=packed["group"],
            use_array_if_local=False if "metadata" in packed else None).build()
        if ds.use_array_if_local != (False if "metadata" in packed else None):
            raise ToolError(f"OLMo-core's use_array_if_local is {ds.use_array_if_local}")
    else:
        ds = NumpyFSLDatasetConfig(**common,
                                   max_target_sequence_length=spec["max_target"]).build()
    # The files and masks as OLMo-core resolved them: sorted, then random.Random(seed).shuffle.
    order = list(range(len(paths)))
    if "perm" in spec:
        random.Random(spec["perm"]).shuffle(order)
    if "mixture" not in spec and [str(p) for p in ds.paths] != [paths[i] for i in order]:
        raise ToolError(f"OLMo-core resolved the files as {ds.paths}")
    got_masks = ds._label_mask_paths
    want_masks = None if mask_paths is None else [mask_paths[i] for i in order]
    if (None if got_masks is None else [str(p) for p in got_masks]) != want_masks:
        raise ToolError(f"OLMo-core resolved the label masks as {got_masks}")
    if str(ds.work_dir) != work:
        raise ToolError(f"OLMo-core's dataset work_dir is {ds.work_dir}, not {work}")
    if ds._generate_doc_lengths != ("doc_lens" in spec):
        raise ToolError(f"OLMo-core's generate_doc_lengths is {ds._generate_doc_lengths}")
    caches = pack_with_a_stable_sort(ds) if packed else {}
    ds.prepare()
    for cache, before in caches.items():
        st = os.stat(cache)
        if (st.st_ino, st.st_mtime_ns) != before:
            raise ToolError(f"prepare() packed {cache} again: it did not find the caches")
    return ds, work


def olmo_core_dataset(folder, paths, mask_paths, spec):
    """(dataset, work dir) of OLMo-core, prepared once per case."""
    if uses_config_class(spec):
        return config_class_dataset(folder, paths, mask_paths, spec)
    return prepared_olmo_dataset(paths, spec)


def olmo_core_loader(prepared, spec, world, rank):
    """OLMo-core's loader over the prepared (dataset, work dir)."""
    ds, work = prepared
    return NumpyDataLoaderBase.wrap_numpy_dataset(
        ds, global_batch_size=spec["batch"] * spec["seq"],
        collator=DataCollator(pad_token_id=spec["vocab"] - 1), work_dir=work, seed=spec["seed"],
        dp_world_size=world, dp_rank=rank, fs_local_rank=0, num_threads=1)


def olmo_core_batches(prepared, spec, world, rank, epoch, resume=None):
    """[{ids, xxh64, mask, label_mask, doc_lens, input_ids}] per step of OLMo-core's loader on one
    rank, from the start of `epoch` or from the state_dict `resume`; doc_lens per instance from
    the dataset's __getitem__ (checked to be what the collator batched, zero-padded)."""
    dl = olmo_core_loader(prepared, spec, world, rank)
    if resume is not None:
        dl.load_state_dict(resume)
    dl.reshuffle(epoch=epoch)
    steps = []
    for batch in dl:
        tokens = batch["input_ids"].numpy().astype("<i8")
        step = {"ids": batch["index"].tolist(), "xxh64": xxhash.xxh64(tokens.tobytes()).hexdigest(),
                "input_ids": tokens.tolist()}
        if "instance_mask" in batch:
            step["mask"] = [bool(x) for x in batch["instance_mask"].tolist()]
        if "label_mask" in batch:
            step["label_mask"] = batch["label_mask"].int().tolist()
        if ("doc_lens" in batch) != ("doc_lens" in spec):
            raise ToolError(f"OLMo-core's batch {'has' if 'doc_lens' in batch else 'lacks'} "
                            "doc_lens")
        if "doc_lens" in batch:
            step["doc_lens"] = [prepared[0][i]["doc_lens"].tolist() for i in step["ids"]]
            width = batch["doc_lens"].shape[1]
            if [d + [0] * (width - len(d)) for d in step["doc_lens"]] != \
                    batch["doc_lens"].tolist():
                raise ToolError("OLMo-core's collated doc_lens are not its instances' doc_lens")
        steps.append(step)
    return steps


def olmo_core_state_after(prepared, spec, world, batches):
    """OLMo-core's loader state_dict after `batches` steps of epoch 1 on `world` ranks."""
    dl = olmo_core_loader(prepared, spec, world, 0)
    dl.reshuffle(epoch=1)
    it = iter(dl)
    for _ in range(batches):
        next(it)
    return dl.state_dict()


def write_config(folder, paths, mask_paths, spec):
    """tandem's data config of the case (files or globs in sorted order); its path."""
    token_args, mask_args = patterns(folder, paths, mask_paths, spec)
    config = os.path.join(folder, "data.yaml")
    if "mixture" in spec:
        m = spec["mixture"]
        lines = ["data:", "  source_mixture:", f"    requested_tokens: {m['requested']}",
                 "    sources:"]
        for s in m["sources"]:
            lines += [f"      - source_name: {s['name']}", f"        target_ratio: {s['ratio']!r}",
                      "        paths: [" + ", ".join(json.dumps(paths[i]) for i in s["files"]) +
                      "]",
                      f"        max_repetition_ratio: {s['rep']!r}",
                      f"        max_source_fraction: {s['frac']!r}"]
    else:
        lines = ["data:", "  sources:", "    - label: random",
                 "      paths: [" + ", ".join(json.dumps(p) for p in token_args) + "]"]
    lines += [f"  sequence_length: {spec['seq']}",
              f"  global_batch_size: {spec['batch'] * spec['seq']}",
              f"  seed: {spec['seed']}", f"  vocab_size: {spec['vocab']}",
              f"  dtype: {np.dtype(spec['dtype']).name}",
              f"  eos_token_id: {spec['vocab'] - 2}", f"  pad_token_id: {spec['vocab'] - 1}"]
    if spec["max_target"]:
        lines.append(f"  max_target_sequence_length: {spec['max_target']}")
    if spec["filter"]:  # OLMo-core's InstanceFilterConfig() defaults
        lines += ["  instance_filter_config:", "    repetition_max_period: 13",
                  "    repetition_min_period: 1", "    repetition_max_count: 32"]
    if "packed" in spec:
        p = spec["packed"]
        lines += ["  dataset: packed", f"  long_doc_strategy: {p['strategy']}",
                  f"  source_group_size: {p['group']}"]
        if p["bos"] is not None:
            lines.append(f"  bos_token_id: {p['bos']}")
        if "metadata" in p:
            lines.append("  use_array_if_local: false")
    if "doc_lens" in spec:
        lines.append("  generate_doc_lengths: true")
    if mask_args is not None:
        lines.append("  label_mask_paths: [" + ", ".join(json.dumps(p) for p in mask_args) + "]")
    if "perm" in spec:
        lines.append(f"  source_permutation_seed: {spec['perm']}")
    with open(config, "w") as f:
        f.write("\n".join(lines) + "\n")
    return config


def tandem_batches(binary, folder, spec, world, from_step, steps, resume=None, save_state=None):
    """(JSON lines of `tandem data batches`, None) or (None, the error's last line); from
    `from_step` for `steps` steps, or from the OLMo-core state_dict `resume` to the epoch's end."""
    config = os.path.join(folder, "data.yaml")
    cmd = [binary, "data", "batches", config, "--world-size", str(world), "--hash"]
    if resume is None:
        cmd += ["--from-step", str(from_step), "--steps", str(steps)]
    else:
        state = os.path.join(folder, "olmo_core_state.json")
        with open(state, "w") as f:
            json.dump(resume, f, default=int)
        cmd += ["--resume-state", state]
    if save_state:
        cmd += ["--save-state", save_state]
    if spec["filter"] or uses_config_class(spec):
        cmd.append("--tokens")  # adds instance_mask, label_mask, doc_lens
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["(no message)"])[-1]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")], None


def token_difference(g, r):
    """Where tandem's input_ids (if printed) first differ from OLMo-core's."""
    if "input_ids" not in g:
        return ""
    for k, (a, b) in enumerate(zip(g["input_ids"], r["input_ids"])):
        if a != b:
            pos = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) if len(a) == len(b) \
                else 0
            return (f"; instance {k} ({g['instances'][k]}) first differs at token {pos}: "
                    f"{a[pos:pos + 8]} vs {b[pos:pos + 8]}")
    return ""


def label_mask_difference(g, r):
    """None when tandem's label_mask rows are OLMo-core's (or both absent), else what differs."""
    if "label_mask" not in r:
        return None if "label_mask" not in g else "tandem prints a label_mask, OLMo-core has none"
    if "label_mask" not in g:
        return "no label_mask from tandem, OLMo-core has one"
    if g["label_mask"] == r["label_mask"]:
        return None
    for k, (a, b) in enumerate(zip(g["label_mask"], r["label_mask"])):
        if a != b:
            diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y] if len(a) == len(b) else []
            return (f"label_mask of instance {k} ({g['instances'][k]}) differs at "
                    f"{len(diff)} tokens from {diff[:1]}: {a} vs {b}")
    return f"label_mask: {len(g['label_mask'])} rows vs {len(r['label_mask'])}"


def doc_lens_difference(g, r):
    """None when tandem's doc_lens rows are OLMo-core's (or both absent), else what differs."""
    if "doc_lens" not in r:
        return None if "doc_lens" not in g else "tandem prints doc_lens, OLMo-core has none"
    if "doc_lens" not in g:
        return "no doc_lens from tandem, OLMo-core has them"
    if g["doc_lens"] == r["doc_lens"]:
        return None
    for k, (a, b) in enumerate(zip(g["doc_lens"], r["doc_lens"])):
        if a != b:
            return f"doc_lens of instance {k} ({g['instances'][k]}): {a} vs {b}"
    return f"doc_lens: {len(g['doc_lens'])} rows vs {len(r['doc_lens'])}"


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
                    f"{r.get('mask')}{token_difference(g, r)}")
        why = label_mask_difference(g, r) or doc_lens_difference(g, r)
        if why:
            return f"{where}, step {step}: {why}"
    return None


def describe(spec):
    return str({k: (np.dtype(v).name if k == "dtype" else v) for k, v in spec.items()})


def check_case(binary, seed, index, plain=False):
    """(agrees, a line describing the case, the first disagreement or None); the case's files
    (and OLMo-core's work folder inside them) are removed afterwards."""
    folder, paths, mask_paths, spec = draw(seed, index, plain)
    try:
        return check_drawn_case(binary, seed, index, folder, paths, mask_paths, spec)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_drawn_case(binary, seed, index, folder, paths, mask_paths, spec):
    write_config(folder, paths, mask_paths, spec)
    described = describe(spec)
    try:
        prepared = olmo_core_dataset(folder, paths, mask_paths, spec)
        n_instances = len(prepared[0])
        olmo_core_batches(prepared, spec, 1, 0, 1)
    except ToolError as e:
        return False, described, f"the tool built OLMo-core's side wrongly: {e}"
    except Exception as e:  # OLMo-core refuses the data: tandem must refuse it too
        lines, error = tandem_batches(binary, folder, spec, 1, 0, 1)
        ok = error is not None
        return ok, f"OLMo-core refuses ({str(e)[:80]}); tandem {'refuses' if ok else 'accepts'}: " \
                   f"{described}", None if ok else "tandem accepted what OLMo-core refused"
    steps_per_epoch = n_instances // spec["batch"]
    if steps_per_epoch == 0:  # OLMo-core's loader yields no step: tandem refuses such data
        _, error = tandem_batches(binary, folder, spec, 1, 0, 1)
        return error is not None, f"{n_instances} instances, no full batch; tandem " \
            f"{'refuses' if error else 'accepts'}: {described}", \
            None if error else "tandem accepted data without one full batch"
    masked = label_zeros = documents = 0
    state_file = os.path.join(folder, "tandem_state.json")
    for world in spec["worlds"]:
        for epoch in (1, 2):
            save = state_file if (world, epoch) == (spec["worlds"][0], 1) else None
            lines, error = tandem_batches(binary, folder, spec, world,
                                          (epoch - 1) * steps_per_epoch, steps_per_epoch,
                                          save_state=save)
            if error:
                return False, described, f"tandem failed: {error}"
            if save:  # tandem's dataset fingerprint is OLMo-core's
                with open(save) as f:
                    saved = json.load(f)
                ds = prepared[0]
                got = (saved.get("dataset_fingerprint_version"), saved.get("dataset_fingerprint"))
                if got != (ds.fingerprint_version, ds.fingerprint):
                    return False, described, f"fingerprint {got} vs OLMo-core's " \
                        f"{(ds.fingerprint_version, ds.fingerprint)}"
            for rank in range(world):
                ref = olmo_core_batches(prepared, spec, world, rank, epoch)
                where = f"world {world}, rank {rank}, epoch {epoch}"
                why = first_difference(lines, ref, rank, where)
                if why:
                    return False, described, why
                masked += sum(not m for r in ref for m in r.get("mask", []))
                label_zeros += sum(row.count(0) for r in ref for row in r.get("label_mask", []))
                documents += sum(len(row) for r in ref for row in r.get("doc_lens", []))
    # Elastic resume: OLMo-core's state after some steps of epoch 1 on one world size, the rest of
    # the epoch on another.
    resumed = ""
    if steps_per_epoch >= 2:
        rng = random.Random(seed * 1000 + index + 500)
        before, after = rng.choice(spec["worlds"]), rng.choice(spec["worlds"])
        done = rng.randint(1, steps_per_epoch - 1)
        state = olmo_core_state_after(prepared, spec, before, done)
        lines, error = tandem_batches(binary, folder, spec, after, 0, 0, resume=state)
        if error:
            return False, described, f"tandem failed to resume: {error}"
        for rank in range(after):
            ref = olmo_core_batches(prepared, spec, after, rank, 1, resume=state)
            why = first_difference(lines, ref, rank, f"resumed after step {done} of world "
                                   f"{before} on world {after}, rank {rank}")
            if why:
                return False, described, why
        resumed = f", resumed from world {before} after {done} steps on world {after}"
    labels = f", {label_zeros} label_mask zeros" if any(
        k in spec for k in ("packed", "masks")) else ""
    labels += f", {documents} doc_lens entries" if "doc_lens" in spec else ""
    return True, f"{n_instances} instances, {steps_per_epoch} steps per epoch, {masked} masked " \
                 f"instance-steps{labels}{resumed}: {described}", None


def main():
    ap = argument_parser(__doc__, cases=20)
    ap.add_argument("--plain", action="store_true",
                    help="draw no packed, label-masked, permuted, metadata or doc_lens case "
                    "(the cases of before)")
    args = ap.parse_args()

    def one(index):
        ok, described, why = check_case(args.tandem, args.seed, index, args.plain)
        return ok, described + (f"\n  {why}" if why else "")

    return run_cases("check_data_order_random", args, one)


if __name__ == "__main__":
    sys.exit(main())
