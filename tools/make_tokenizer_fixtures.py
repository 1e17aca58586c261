#!/usr/bin/env python3
"""Writes the tokenizer parity fixtures (tests/fixtures/tokenizer/) with the real HF `tokenizers`.

Inputs come from scripts/fetch_data.sh's cache (${TANDEM_DATA_DIR:-<repo>/.cache/data}): the
dolma2 tokenizer and the Debian-documentation corpus. Outputs (each records the package versions):
  dolma2_adversarial.json        hand-written hard strings + seeded random strings -> dolma2 ids;
                                 JSON strings with lone surrogates, which HF refuses
  dolma2_corpus_digests.json.gz  per corpus document: text sha256, token count, sha256 of the ids
                                 (little-endian uint32); the ids themselves are too big to commit
  gpt2_style_tokenizer.json      a GPT-2-style byte-level BPE (ByteLevel pre-tokenizer with GPT-2's
                                 regex, merges in ["a","b"] form) trained here with `tokenizers` on
                                 corpus text, plus added tokens using lstrip/rstrip/single_word/
                                 normalized; GPT-2's own tokenizer.json is not shipped by any PyPI
                                 package we can fetch offline
  gpt2_style_prefix_space.json   the same with add_prefix_space=true and merges as "a b" strings
  gpt2_style_cases.json          ids of both for the hard strings and corpus snippets
  gpt_neox_cases.json            OLMo's GPT-NeoX tokenizer (OLMo-core's gpt_neox_olmo_dolma_v1_5;
                                 NFC normalizer, normalized added tokens, vocabulary entries outside
                                 the byte-level alphabet): hard strings, normalization cases and
                                 seeded random strings -> ids and HF's decode of them
  gpt_neox_corpus_digests.json.gz  as dolma2_corpus_digests.json.gz, with that tokenizer
  unicode_normalization.json.gz  HF's NFC/NFD/NFKC/NFKD normalizers: sha256 per block of 4096 code
                                 points of every code point's normalized form, and seeded random
                                 strings of combining marks, decomposable and Hangul characters
                                 (incl. ones newer than HF's Unicode 9.0 tables) with each output
  regex_classes.json             which code points HF's regex engines put in each character class
                                 tokenizer.json regexes use (\\p{L}, \\w, \\d, \\s, ...; Oniguruma via
                                 Split) and in Rust regex's \\w (via a single_word added token): a
                                 sha256 per block of 4096 code points of the membership bits
Usage: python3 tools/make_tokenizer_fixtures.py [dolma2] [gpt2] [neox] [unicode] [regex]
       (run scripts/fetch_data.sh first; no argument makes them all)
"""
import gzip
import hashlib
import json
import os
import random
import struct
import sys
import time

import unicodedata

import tokenizers
from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        trainers)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("TANDEM_DATA_DIR") or os.path.join(REPO, ".cache", "data")
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer")
VERSIONS = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}

HARD_STRINGS = [
    "", "hello world", " ", "  ", "a", "\x00", "\x7f\x01\x1b[0m",
    # emoji, including ZWJ sequences, skin tones, flags, keycaps
    "👋🏽 family: 👨‍👩‍👧‍👦 flags 🇺🇸🇯🇵 keycap 1️⃣ 😀😃😄!!",
    "🤖🤖🤖🤖🤖🤖", "I ❤️ NY ☕",
    # combining marks and zalgo
    "e\u0301 n\u0303 a\u030a\u0323 Z\u0334\u0321\u031b\u031d\u031ea\u0337l\u0338g\u0335o\u0336",
    "\u0301\u0301 leading combining", "Cafe\u0301 vs Café",
    # CJK and other scripts
    "日本語のテキストと中文文本，한국어 텍스트。", "中文標點：「引號」、頓號；分號！",
    "Привет мир! Ελληνικά. עברית. العربية. हिन्दी ไทย ქართული",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 \U0010fffd \ue000 \ufeffBOM",
    # whitespace runs of every kind
    "a    b", "   ", "\t\t\t", "x \n\n\n  y", "trailing   ", "   leading", "a \t \n b",
    "\u00a0\u2003nbsp and em space", "\u3000ideographic\u3000space", "\u180e mongolian vs\u180eo",
    "\u0085 NEL \u0085", "\u2028 line sep \u2029 para sep", "\u200b zero width \u200b",
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f",
    "\v vertical \f feed",
    # CRLF and tabs
    "line1\r\nline2\r\n\r\nline3\r", "\r\n\r\n", "\r\r\n\n\r", "end.\r\n   \r\n",
    "\tindent\n\t\tdouble\n\t \tmixed", "col1\tcol2\t\tcol4",
    # digits
    "1234567890123456789012345678901234567890", "3.14159265358979 -42 +7e-10 0x1F",
    "٣٤٥ arabic-indic, १२३ devanagari, ①②③ ⅷ ½", "2024-01-02T03:04:05Z", "$1,234,567.89",
    # contractions in all cases
    "I'm you're he's she'd we'll they've can't won't",
    "I'M YOU'RE HE'S SHE'D WE'LL THEY'VE CAN'T WON'T",
    "i'M yOu'Re He'S sHe'D wE'lL tHeY'vE", "'s 't 're 've 'm 'll 'd", "''s'''t",
    "it\u2019s curly \u2019s", "long s: '\u017f 'ſ", "Kelvin 'k 'K", "dotted 'İ 'ı",
    # added tokens inside text
    "hello<|endoftext|>world", "<|endoftext|><|endoftext|>", "a <|pad|> b",
    "<|endoftext|", "<|endoftext|>>", "<<|endoftext|>", "<|extra_id_0|>x<|extra_id_10|>",
    "<|fim_prefix|>def f():<|fim_suffix|>return<|fim_middle|>",
    "  <|endoftext|>  ", "\n<|endoftext|>\n", "<|endofprompt|><|endoftext|>",
    # long words
    "a" * 1000, "=" * 300, " " * 500, "ab" * 400, "-_" * 200 + "\n" * 50, "\n" * 300,
    "x" + "\u0301" * 100,
    # code and markup
    "def f(x):\n    return x**2  # comment\n\n\nclass A:\n\tpass\n",
    "<div class=\"a\">&amp;&#x27;</div>", "```python\nprint('hi')\n```",
    "don't stop\n\n\n   believing\t\t!!!???...   ",
]

# JSON text with lone surrogates: Python's json module accepts it, HF cannot encode the result;
# a valid surrogate pair is included as the control.
SURROGATE_JSON = ['"\\ud800"', '"abc\\udfff def"', '"\\udc00\\ud800"', '"ok \\ud83d\\ude00 pair"']

FUZZ_POOL = (list("abcXYZ019'’ \t\r\n.,!?-_<|>=") + ["s", "t", "re", "ll", "'S", "'T"] +
             ["\u00a0", "\u3000", "\u180e", "\u0085", "\u2028", "é", "e\u0301", "ß", "ſ", "İ",
              "日", "本", "한", "😀", "👨‍👩‍👧", "🇯🇵", "٣", "①", "\u200b", "\ufeff",
              "<|endoftext|>", "<|pad|>", "  ", "\r\n", "123", "4567"])


def fuzz_strings(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def ids_digest(ids):
    return hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()[:16]


def write_json(name, obj, indent=None):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, indent=indent)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def read_corpus():
    manifest = json.load(open(os.path.join(CACHE, "corpus", "MANIFEST.json")))
    parts = []
    for part in manifest["parts"]:
        with open(os.path.join(CACHE, "corpus", part["file"]), encoding="utf-8") as f:
            docs = [json.loads(line) for line in f]
        parts.append((part, docs))
    return manifest, parts


def dolma2_fixtures(manifest, parts):
    path = os.path.join(CACHE, "tokenizers", "allenai_dolma2.json")
    tok = Tokenizer.from_file(path)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    texts = HARD_STRINGS + fuzz_strings(400, seed=1234)
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
    rejected = []
    for raw in SURROGATE_JSON:
        text = json.loads(raw)
        try:
            ids = tok.encode(text, add_special_tokens=False).ids
            rejected.append({"json": raw, "hf_ids": ids})
        except Exception as e:  # lone surrogates cannot become a Rust string
            rejected.append({"json": raw, "hf_error": f"{type(e).__name__}: {e}"})
    write_json("dolma2_adversarial.json", {
        "generator": "tools/make_tokenizer_fixtures.py", "versions": VERSIONS,
        "tokenizer_sha256": sha, "cases": cases, "surrogate_json": rejected}, indent=0)

    corpus_digests(tok, sha, manifest, parts, "dolma2_corpus_digests.json.gz")


ADDED_TOKEN_CASES = [
    "x [lstrip] y", "x   [lstrip]y", "[lstrip]", "x  <rs>   y", "<rs>\n\nz", "a word b",
    "awordb", "word", "word.", "(word)", "wordy word", "éword", "word_x", "Hello there HelloHello",
    "<|endoftext|>Hello<|endoftext|>", "  [lstrip]  <rs>  word  Hello  ",
]


def gpt2_style_fixtures(parts):
    sample = []
    for _, docs in parts:
        for d in docs[:150]:
            sample.append(d["text"][:20000])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample, trainer=trainer)
    tok.add_tokens([AddedToken("[lstrip]", lstrip=True, normalized=False),
                    AddedToken("<rs>", rstrip=True, normalized=False),
                    AddedToken("word", single_word=True, normalized=True),
                    AddedToken("Hello", normalized=True)])
    # HF refuses unknown keys in tokenizer.json, so the provenance lives in gpt2_style_cases.json.
    plain = json.loads(tok.to_str())
    prefixed = json.loads(tok.to_str())
    prefixed["pre_tokenizer"]["add_prefix_space"] = True
    prefixed["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in prefixed["model"]["merges"]]
    assert isinstance(plain["model"]["merges"][0], list), "expected [a, b] merges"
    write_json("gpt2_style_tokenizer.json", plain)
    write_json("gpt2_style_prefix_space.json", prefixed)

    rng = random.Random(99)
    snippets = []
    for _, docs in parts:
        for d in rng.sample(docs, 8):
            start = rng.randrange(0, max(1, len(d["text"]) - 600))
            snippets.append(d["text"][start:start + 600])
    texts = HARD_STRINGS + ADDED_TOKEN_CASES + fuzz_strings(200, seed=77) + snippets
    cases = {}
    for name, obj in (("gpt2_style_tokenizer.json", plain),
                      ("gpt2_style_prefix_space.json", prefixed)):
        t = Tokenizer.from_str(json.dumps(obj))
        cases[name] = [t.encode(s, add_special_tokens=False).ids for s in texts]
    write_json("gpt2_style_cases.json", {
        "generator": "tools/make_tokenizer_fixtures.py",
        "tokenizers": ("GPT-2-style byte-level BPE (vocab 1500) trained with tokenizers on "
                       "Debian documentation text; the prefix_space variant sets "
                       "add_prefix_space=true and writes merges as \"a b\""),
        "versions": VERSIONS, "texts": texts, "ids": cases})


def corpus_digests(tok, sha, manifest, parts, name):
    start = time.time()
    out_parts, total_bytes, total_tokens = [], 0, 0
    for part, docs in parts:
        encodings = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
        rows = []
        for d, e in zip(docs, encodings):
            text_bytes = d["text"].encode("utf-8")
            total_bytes += len(text_bytes)
            total_tokens += len(e.ids)
            rows.append([d["id"], hashlib.sha256(text_bytes).hexdigest()[:16], len(e.ids),
                         ids_digest(e.ids)])
        out_parts.append({"name": part["name"], "file": part["file"], "documents": rows})
    print(f"{name}: {total_bytes / 1e6:.1f} MB, {total_tokens} tokens, "
          f"{time.time() - start:.1f} s")
    obj = {"generator": "tools/make_tokenizer_fixtures.py", "versions": VERSIONS,
           "tokenizer_sha256": sha, "packages": manifest["packages"], "text_bytes": total_bytes,
           "tokens": total_tokens, "digest": "sha256 hex[:16]; ids as little-endian uint32",
           "parts": out_parts}
    path = os.path.join(OUT, name)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(obj, ensure_ascii=True).encode())
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


# Characters that normalization moves, splits or joins (Python's own tables are newer than HF's
# Unicode 9.0, so they include the characters HF does not know yet).
def normalization_pool():
    marks, decomposable = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if unicodedata.combining(c):
            marks.append(c)
        elif unicodedata.decomposition(c):
            decomposable.append(c)
    jamo = ([chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)] +
            [chr(c) for c in range(0x11A8, 0x11C3)])
    newer = ["\U00011935\U00011930", "\u1DF6", "\u0898", "\U0001E944", "\u0860\u0301",
             "\U00011D31", "\U00011D42\u0301"]  # Dives Akuru composition, marks of 9.0-14.0
    bases = list("aeiouAEIOUnNcCsSzZ") + ["\u00e9", "\u0391", "\u0430", "\u3042", "\uac00", "1", " "]
    return marks, decomposable, jamo, newer, bases


def normalization_strings(n, seed):
    marks, decomposable, jamo, newer, bases = normalization_pool()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            pool = (bases if r < 0.3 else marks if r < 0.6 else decomposable if r < 0.8 else
                    jamo if r < 0.93 else newer)
            parts.append(rng.choice(pool))
        out.append("".join(parts))
    return out


NEOX_CASES = [
    # composed and decomposed forms; marks out of canonical order; Hangul syllables as jamo
    "Cafe\u0301 Café caf\u00e9", "a\u0323\u0302 a\u0302\u0323 \u1ead", "\u1100\u1161\u11a8 \uac01",
    "\u212b \u2126 \u00c5 \u03a9 K\u212a", "\ufb01 \uff21 x\u00b2 \u2460 \u3300",
    "\u0958 \u0915\u093c \u2adc", "\U00011935\U00011930 \U00011938", "e\u1df6\u0301 e\u0301\u1df6",
    # normalization meets the added tokens: a special token between a letter and its mark, the
    # normalized PII tokens and the runs of spaces (2..24 spaces are added tokens)
    "e<|endoftext|>\u0301", "|||EMAIL_ADDRESS|||\u0301", "\u0301|||PHONE_NUMBER|||",
    "mail |||EMAIL_ADDRESS||| or |||IP_ADDRESS||| or |||PHONE_NUMBER|||",
    "|||EMAIL_ADDRESS|||||IP_ADDRESS|||", "<|padding|><|endoftext|>",
    "a  b   c    d" + " " * 24 + "e" + " " * 25 + "f" + " " * 60 + "g",
    "\t  \n    x\u00a0\u00a0  y", "    def f():\n        return 1\n",
]


def neox_fixtures(manifest, parts):
    path = os.path.join(CACHE, "tokenizers", "allenai_gpt-neox-olmo-dolma-v1_5.json")
    tok = Tokenizer.from_file(path)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    texts = (HARD_STRINGS + NEOX_CASES + fuzz_strings(300, seed=4321) +
             normalization_strings(300, seed=8765))
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        cases.append({"text": t, "ids": ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False)})
    write_json("gpt_neox_cases.json", {
        "generator": "tools/make_tokenizer_fixtures.py", "versions": VERSIONS,
        "tokenizer_sha256": sha, "cases": cases}, indent=0)
    corpus_digests(tok, sha, manifest, parts, "gpt_neox_corpus_digests.json.gz")


def unicode_fixtures():
    forms = {"NFC": normalizers.NFC(), "NFD": normalizers.NFD(), "NFKC": normalizers.NFKC(),
             "NFKD": normalizers.NFKD()}
    blocks = {}
    for name, n in forms.items():
        digests = []
        for block in range(0x110000 // 4096):
            h = hashlib.sha256()
            for cp in range(block * 4096, block * 4096 + 4096):
                if 0xD800 <= cp < 0xE000:
                    continue
                h.update(n.normalize_str(chr(cp)).encode("utf-8") + b"\0")
            digests.append(h.hexdigest()[:16])
        blocks[name] = digests
    strings = normalization_strings(2000, seed=2468)
    cases = [{"text": t, **{name: n.normalize_str(t) for name, n in forms.items()}}
             for t in strings]
    sequence = normalizers.Sequence([normalizers.NFD(), normalizers.NFKC()])
    obj = {"generator": "tools/make_tokenizer_fixtures.py", "versions": VERSIONS,
           "block_digest": ("per form, per block of 4096 code points (surrogates skipped): "
                            "sha256 hex[:16] of the UTF-8 of each code point's normalized form "
                            "followed by a NUL byte"),
           "blocks": blocks, "cases": cases,
           "sequence_nfd_nfkc": [[t, sequence.normalize_str(t)] for t in strings[:300]]}
    path = os.path.join(OUT, "unicode_normalization.json.gz")
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(obj, ensure_ascii=False).encode("utf-8"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


REGEX_ATOMS = [
    r"\s", r"\S", r"\w", r"\W", r"\d", r"\D", r"\p{L}", r"\pL", r"\p{N}", r"\p{M}", r"\p{P}",
    r"\p{S}", r"\p{Z}", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{Nd}",
    r"\p{Nl}", r"\p{No}", r"\p{Mn}", r"\p{Pc}", r"\p{Sm}", r"\P{L}", r"\p{^N}",
    r"[^\s\p{L}\p{N}]", r"[\p{L}\p{M}_]", r"[^\r\n\p{L}\p{N}]",
]


def block_code_points(block):
    return [c for c in range(block * 4096, block * 4096 + 4096) if not 0xD800 <= c < 0xE000]


def membership_digests(member_of_block):
    digests = []
    for block in range(0x110000 // 4096):
        bits = member_of_block(block)
        digests.append(hashlib.sha256(bits.encode()).hexdigest()[:16])
    return digests


def regex_fixtures():
    atoms = {}
    for atom in REGEX_ATOMS:
        split = pre_tokenizers.Split(tokenizers.Regex(atom), behavior="removed")

        def oniguruma_block(block):
            cps = block_code_points(block)
            kept = bytearray(len(cps))  # offsets are in characters
            for _, (a, b) in split.pre_tokenize_str("".join(map(chr, cps))):
                for i in range(a, b):
                    kept[i] = 1
            return "".join("0" if k else "1" for k in kept)

        atoms[atom] = membership_digests(oniguruma_block)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.add_tokens([AddedToken("qq", single_word=True)])  # id 0; matched unless a word char follows

    def rust_word_block(block):
        return "".join("0" if tok.encode("qq" + chr(c)).ids[:1] == [0] else "1"
                       for c in block_code_points(block))

    write_json("regex_classes.json", {
        "generator": "tools/make_tokenizer_fixtures.py", "versions": VERSIONS,
        "digest": ("per block of 4096 code points (surrogates skipped): sha256 hex[:16] of one "
                   "'1' (in the class) or '0' per code point"),
        "oniguruma": atoms, "rust_word": membership_digests(rust_word_block)})


def main():
    # e.g. `... gpt2` remakes only the GPT-2 ones
    which = sys.argv[1:] or ["dolma2", "gpt2", "neox", "unicode", "regex"]
    os.makedirs(OUT, exist_ok=True)
    manifest, parts = read_corpus()
    if "dolma2" in which:
        dolma2_fixtures(manifest, parts)
    if "gpt2" in which:
        gpt2_style_fixtures(parts)
    if "neox" in which:
        neox_fixtures(manifest, parts)
    if "unicode" in which:
        unicode_fixtures()
    if "regex" in which:
        regex_fixtures()


if __name__ == "__main__":
    main()
