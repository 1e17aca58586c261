#!/usr/bin/env python3
"""Checks once that OLMo-core's dataset reader reads token files written by `tandem data tokenize`.

Tokenizes a corpus part with the tandem CLI (dolma2, uint32, small --max-tokens-per-file so there
are several files), then opens the files with olmo_core.data.NumpyFSLDataset and checks that
  - OLMo-core's token counts per file equal the sidecars' and tandem's;
  - every instance OLMo-core yields equals the matching window of HF tokenizers' ids for the same
    documents (encode + EOS per document, chunked per file, remainder dropped);
  - generate_doc_lengths (EOS-based document boundaries) sees the same documents.
Usage: python3 tools/check_olmo_core_reads_tokens.py TANDEM_BINARY [CORPUS.jsonl] [SEQ_LEN]
Defaults: the heldout-val part of scripts/fetch_data.sh's cache, sequence length 1024.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from importlib.metadata import version
from olmo_core.data import NumpyFSLDataset
from tokenizers import Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("TANDEM_DATA_DIR") or os.path.join(REPO, ".cache", "data")


def main():
    binary = sys.argv[1]
    corpus = sys.argv[2] if len(sys.argv) > 2 else os.path.join(CACHE, "corpus", "heldout-val.jsonl")
    seq_len = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    tokenizer_path = os.path.join(CACHE, "tokenizers", "allenai_dolma2.json")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, "data", "tokenize", "--tokenizer", tokenizer_path, "--out", out,
                        "--max-tokens-per-file", "100000", "--threads", "2", "--no-progress",
                        corpus], check=True)
        files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".npy"))
        sidecars = [json.load(open(f[:-4] + ".json")) for f in files]

        # The reference stream: HF ids + EOS per document, cut at the same file boundaries.
        tok = Tokenizer.from_file(tokenizer_path)
        stream = []
        for line in open(corpus, encoding="utf-8"):
            text = json.loads(line)["text"]
            if text:
                stream.extend(tok.encode(text, add_special_tokens=False).ids + [100257])
        stream = np.array(stream, dtype=np.uint32)

        ds = NumpyFSLDataset(*files, sequence_length=seq_len, pad_token_id=100277,
                             eos_token_id=100257, vocab_size=100278, dtype=np.uint32,
                             generate_doc_lengths=True)
        ds.prepare()
        sizes = [int(s) for s in ds.file_sizes] if hasattr(ds, "file_sizes") else None
        print(f"olmo-core {version('ai2-olmo-core')}: {len(files)} files, {len(ds)} instances of {seq_len}")
        expected_instances, start, checked = [], 0, 0
        for f, side in zip(files, sidecars):
            n = side["tokens"]
            assert os.path.getsize(f) == n * 4, f
            file_ids = stream[start:start + n]
            for k in range(n // seq_len):
                expected_instances.append(file_ids[k * seq_len:(k + 1) * seq_len])
            start += n
        assert start == len(stream), f"tandem wrote {start} tokens, HF gives {len(stream)}"
        assert len(ds) == len(expected_instances), (len(ds), len(expected_instances))
        for i in range(len(ds)):
            item = ds[i]
            got = item["input_ids"].numpy().astype(np.uint32)
            assert np.array_equal(got, expected_instances[i]), f"instance {i} differs"
            doc_lens = item["doc_lens"].numpy()
            eos_count = int((got == 100257).sum())
            assert doc_lens.sum() == seq_len and len(doc_lens[doc_lens > 0]) in (eos_count, eos_count + 1)
            checked += 1
        print(f"OK: OLMo-core read {checked} instances ({checked * seq_len} tokens) from tandem's "
              f"files, identical to HF tokenizers' ids; sidecar token counts {sum(s['tokens'] for s in sidecars)} "
              f"= HF stream {len(stream)}; file sizes (bytes) seen by OLMo-core: {sizes}")


if __name__ == "__main__":
    main()
