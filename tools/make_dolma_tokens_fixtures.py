#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/dolma_tokens.{jsonl,json} with AI2's own tokenization tool.

`dolma tokens` (the dolma package) is how AI2 tokenizes OLMo's data. Its tokenize_file strips
each document's text (Python's str.strip), skips documents that are empty once stripped, encodes
with the HF tokenizer and appends EOS unless the ids already end with it; AI2's dolma2 scripts
also pass --tokenizer.encode_special_tokens (special tokens written in the text are encoded as
text). This writes documents that exercise each rule (whitespace of every kind around and alone,
empty text, the EOS and other special tokens written in the text, at the end and alone, the
tokenizer fixtures' hard strings, seeded random strings over many scripts) as JSONL, and the ids
dolma.tokenizer.tokenize_file gives for each document, with and without encode_special_tokens.
tests/tokenizer/dolma_tokens_test.cc runs `tandem data tokenize --dolma [--encode-special-tokens]`
on the JSONL and requires the same token files.

Usage: python3 tools/make_dolma_tokens_fixtures.py [TOKENIZER_JSON]
  (default: scripts/fetch_data.sh's dolma2 tokenizer). Needs dolma and tokenizers.
"""
import json
import os
import random
import sys
from importlib.metadata import version

from dolma.tokenizer.tokenizer import tokenize_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import FUZZ_POOL, HARD_STRINGS  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("TANDEM_DATA_DIR") or os.path.join(REPO, ".cache", "data")
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer")
EOS, PAD = 100257, 100277  # dolma2's, as AI2's scripts pass them

# Every code point Python's str.isspace() accepts, and some it does not.
PY_SPACES = ["\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " ", "\x85", "\xa0",
             "\u1680", "\u2000", "\u2005", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
             "\u3000"]
NOT_SPACES = ["\u200b", "\u180e", "\ufeff", "\u2060", "\x00"]
SPECIALS = ["<|endoftext|>", "<|pad|>", "<|fim_prefix|>", "<|extra_id_0|>"]
BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x400, 0x4FF), (0x590, 0x6FF),
          (0x900, 0x97F), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
          (0x1F300, 0x1FAFF), (0x1D400, 0x1D7FF)]


def documents():
    rng = random.Random(20261202)
    docs = ["", "plain", "  ", "\n\n\n", "\t \r\n"] + PY_SPACES + NOT_SPACES
    docs += [s + "word" + t for s in PY_SPACES + NOT_SPACES for t in (rng.choice(PY_SPACES), "")]
    docs += ["".join(rng.choice(PY_SPACES) for _ in range(rng.randint(1, 8))) for _ in range(10)]
    for sp in SPECIALS:
        docs += [sp, sp + sp, "text" + sp, "text " + sp + "  \n", sp + " text", " " + sp + " ",
                 "a" + sp + "b" + sp]
    docs += HARD_STRINGS
    for _ in range(150):
        parts = []
        for _ in range(rng.randint(1, 25)):
            r = rng.random()
            if r < 0.35:
                a, b = rng.choice(BLOCKS)
                parts.append("".join(chr(rng.randint(a, b)) for _ in range(rng.randint(1, 10))))
            elif r < 0.75:
                parts.append(rng.choice(FUZZ_POOL))
            elif r < 0.85:
                parts.append(rng.choice(SPECIALS))
            else:
                parts.append(rng.choice(PY_SPACES + NOT_SPACES) * rng.randint(1, 5))
        docs.append("".join(parts))
    return docs


def main():
    tokenizer = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        CACHE, "tokenizers", "allenai_dolma2.json")
    docs = documents()
    jsonl = os.path.join(OUT, "dolma_tokens.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": f"doc{i}", "text": text}) + "\n")
    runs = {}
    for name, encode_special in (("default", False), ("encode_special_tokens", True)):
        out = tokenize_file(tokenizer, jsonl, eos_token_id=EOS, pad_token_id=PAD,
                            encode_special_tokens=encode_special)
        runs[name] = [{"id": o.id, "ids": [int(t) for t in o.tokens]} for o in out]
    meta = {"generated_by": "tools/make_dolma_tokens_fixtures.py",
            "versions": {"dolma": version("dolma"), "tokenizers": version("tokenizers"),
                         "python": sys.version.split()[0]},
            "reference": "dolma.tokenizer.tokenize_file (dolma tokens), eos 100257, pad 100277",
            "input": "dolma_tokens.jsonl", "documents": len(docs), "runs": runs}
    path = os.path.join(OUT, "dolma_tokens.json")
    with open(path, "w") as f:
        json.dump(meta, f, separators=(",", ":"))
        f.write("\n")
    for name, r in runs.items():
        print(f"{name}: {len(r)} of {len(docs)} documents kept, "
              f"{sum(len(d['ids']) for d in r)} tokens")
    print(f"wrote {jsonl} and {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
