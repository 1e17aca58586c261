#!/usr/bin/env python3
"""tandem's tokenizer against HF `tokenizers` on random byte-level BPE tokenizers and texts.

Each case trains a tokenizer with `tokenizers` (BpeTrainer, vocabulary 300 to 3000, the
byte-level alphabet) on random text plus the first documents of .cache/data/corpus/*.jsonl when
present, drawing: a normalizer (none most often; NFC, NFD, NFKC, NFKD or a Sequence of two); a
pre-tokenizer (ByteLevel with add_prefix_space and use_regex on or off, or a Sequence of one or
two Splits, by a Regex (GPT-2's, cl100k/dolma2's, digits, whitespace, punctuation, ...) or a
String, with any behaviour and invert, then ByteLevel); merges as ["a", "b"] lists or "a b"
strings; ignore_merges; 0 to 8 added tokens (special or not, random lstrip/rstrip/single_word/
normalized; ASCII words, "<|x|>" runs, strings with spaces, composed and decomposed accents, CJK,
emoji). It then encodes 100 to 300 random documents (every kind of Unicode whitespace, CRLF,
digits, contractions, emoji and ZWJ sequences, CJK, precomposed and conjoining-jamo Hangul,
combining marks in non-canonical order, compatibility characters, marks and letters added to
Unicode after 9.0, the added tokens' text, pieces of the training text) with
`tandem data tokenize` in one run (JSONL with or without \\u escapes, 1 or 2 threads), split at
a dedicated EOS token never written in a document, and with `Tokenizer.encode(text,
add_special_tokens=False)`; the ids must be equal.

On a disagreement the case's seed, the tokenizer.json (written to
/tmp/tokrandom_fail_<case seed>[_u14][_nonorm].json) and the first differing document, shrunk to
a minimal one that still differs, are printed. A case is rerun alone with --first K --cases 1.
Documents HF itself panics on ("AddedVocabulary bad split") are counted, not judged. Two
normalized added tokens whose normalized texts coincide are not drawn: HF matches either of
them, differently from one process to the next.

--tokenizer FILE judges that tokenizer.json as it is (dolma2's, OLMo's GPT-NeoX one, any other)
instead of trained ones: each case draws its documents the same way, with up to 8 of the file's
added tokens' texts among them, and one `tandem data tokenize` run ends every document with the
tokenizer's own EOS (<|endoftext|>; id 0 where it has none); the stream is judged whole against
each document's HF ids and the EOS, so a document may hold the EOS's text.

--unicode-14 leaves out the characters assigned after Unicode 14.0 (tandem's regexes run in PCRE2
10.42, whose tables are Unicode 14, with the code points of Unicode 15.0-16.0 added to its classes
to match HF's Oniguruma and Rust regex, tokenizer/pcre_regex.h), to tell such differences from
others; --no-normalizers drops the drawn normalizers. Both keep the rest of every case as drawn.

Found with it, and fixed (each has a test now): letters and digits of Unicode 15-16 outside
tandem's classes; Oniguruma's \w (marks, not other numbers); an lstrip token swallowed by the
previous token's rstrip. Seeds 1-15, 40 cases each: all agree.

Usage: python3 tools/check_tokenizer_random.py TANDEM_BINARY [--seed S] [--cases N] [--first K]
       [--no-normalizers] [--unicode-14] [--tokenizer FILE]
Needs tokenizers. Exits 0 only when every case agrees.
"""
import collections
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from random_checks import argument_parser, run_cases  # noqa: E402

# HF panics on some texts (hf_ids); its message is enough, without a backtrace.
os.environ["RUST_BACKTRACE"] = "0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EOS = "<|tokrandom_eos|>"  # id 0; never written in a document, so it delimits them

REGEXES = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "cl100k": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "digits": r"\p{N}+",
    "digit": r"\p{N}",
    "whitespace": r"\s+",
    "space": r"\s",
    "punctuation": r"[^\s\p{L}\p{N}]+",
    "punct_class": r"\p{P}+",
    "word": r"\w+",
}
STRING_PATTERNS = [" ", "\n", "\r\n", "'", ", ", "the", "é", "\u3000", "  "]
BEHAVIORS = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]
UNICODE_FORMS = ["NFC", "NFD", "NFKC", "NFKD"]

WORDS = ("the of and to in is that it for was on are with as be this by at from or an have not "
         "they which you one had word but all were can there use your each how said if will up "
         "other about out many then them these so some her would make like him into time has "
         "look two more write go see number no way could people my than first water been call "
         "who oil its now find long down day did get come made may part Hello World THE Don "
         "naïve café résumé Zürich façade jalapeño Straße élan Ölfeld").split()
WHITESPACE = [" ", "  ", "   ", "\n", "\n\n", "\r\n", "\r", "\t", "\t\t", " \n", "\n ", "\x0b",
              "\x0c", "\x85", "\u00a0", "\u1680", "\u2000", "\u2003", "\u2009", "\u200a",
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff",
              " \u00a0 ", "\r\n\r\n", " \t \n"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL",
                "'D", "'ſ", "’s", "''", "'"]
EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪", "🇯🇵", "🧑🏿‍🚀", "☕", "✔️",
         "🫠", "🫨", "🪿", "#️⃣", "\u200d", "\ufe0f"]
COMPAT = ["\ufb01", "\ufb02", "\ufb00", "\u00b2", "\u00b3", "\u00b9", "\u2074", "\u207f",
          "\u2082", "\u212b", "\u2126", "\u212a", "\u2460", "\u2167", "\u3392", "\u00bd",
          "\u1e9b\u0323", "\u0385", "\u00c5", "A\u030a", "\u01c4", "\u0132", "\u2024\u2024",
          "\u33a1", "\u2122", "\u00b5", "\u03bc", "\u1d2c", "\u017f", "\u0f73", "\u2adc",
          "\U0001d15e", "\U0001d400", "\u0344", "\u0958", "\uf900", "\u2fd5", "\u3131"]
# Characters with combining classes or decompositions that appeared after Unicode 9.0, and
# letters from recent versions (the \p{L} of Oniguruma and PCRE2 may be of different versions).
NEW_MARKS = ([chr(c) for c in range(0x1AB0, 0x1ABF)] + [chr(c) for c in range(0x1DF6, 0x1DFA)]
             + [chr(c) for c in range(0x1E944, 0x1E94B)] + [chr(c) for c in range(0x0898, 0x08A0)]
             + [chr(c) for c in range(0x11D31, 0x11D46)] + [chr(c) for c in range(0x1AC1, 0x1ACF)]
             + ["\u1dfa", "\u0cf3", "\U00010efd", "\U00010eff", "\U00011f41",
                "\U0001e4ec", "\U0001e08f", "\U0001e4ef", "\U00016ff0"])
NEW_LETTERS = ([chr(c) for c in range(0x0860, 0x086B)]
               + ["\U0001df00", "\U0001df0a", "\U0001e030", "\U0001e04f", "\U0001e4d0",
                  "\U0001e4e8", "\U00031350", "\U0002ebf0", "\U0001e290", "\U00011f04",
                  "\U000105c0", "\U00016100", "\u0870", "\u08c8", "\U0001e7e0"])
NEW_COMPOSITIONS = ["\U00011935\U00011930", "\U00011938", "\U000105d2\u0307", "\U000105c9",
                    "\U00016121\U0001611e", "\U00011382\U000113c9", "\U00011383"]
# The characters above assigned after Unicode 14.0: PCRE2 10.42 (tandem's Split and ByteLevel
# regexes, single_word's \w) has Unicode 14 tables, HF's Oniguruma and Rust regex Unicode 16.
AFTER_UNICODE_14 = set(
    "\u0cf3\U000105c0\U000105c9\U000105d2\U00010efd\U00010eff\U00011382\U00011383\U000113c9"
    "\U00011f04\U00011f41\U00016100\U0001611e\U00016121\U0001e030\U0001e04f\U0001e08f"
    "\U0001e4d0\U0001e4e8\U0001e4ec\U0001e4ef\U0001fabf\U0001fae8\U0002ebf0\U00031350")


def without_after_14(text):
    return "".join(c for c in text if c not in AFTER_UNICODE_14) or "x"


CJK = ["中文", "日本語", "漢字", "の", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "、", "。", "「", "」", "！",
       "，", "𠀀", "𪜀"]


def random_cjk(rng):
    return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(1, 6)))


def random_hangul(rng):
    if rng.random() < 0.5:
        return "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 4)))
    out = ""
    for _ in range(rng.randint(1, 3)):  # conjoining jamo: L V (T), composed by NFC/NFKC
        out += chr(rng.randint(0x1100, 0x1112)) + chr(rng.randint(0x1161, 0x1175))
        if rng.random() < 0.6:
            out += chr(rng.randint(0x11A8, 0x11C2))
    return out


def random_marks(rng):
    """A letter with 1 to 4 combining marks in random, often non-canonical, order."""
    base = rng.choice("aeiouAEOnczsgkAÅé")
    marks = [chr(rng.randint(0x0300, 0x036F)) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.5:
        marks += rng.sample(["\u0323", "\u0301", "\u0316", "\u0328", "\u0345", "\u031b"], 2)
    rng.shuffle(marks)
    return base + "".join(marks)


def random_new(rng):
    r = rng.random()
    if r < 0.5:
        return rng.choice("aeAnkx" + "\u05d0\u0627") + "".join(
            rng.choice(NEW_MARKS + ["\u0301", "\u0323"]) for _ in range(rng.randint(1, 3)))
    if r < 0.8:
        return "".join(rng.choice(NEW_LETTERS) for _ in range(rng.randint(1, 4)))
    return rng.choice(NEW_COMPOSITIONS)


def random_digits(rng):
    if rng.random() < 0.8:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
    return rng.choice(["٣٤٥", "१२", "①②", "²³", "Ⅻ", "½", "１２３", "𝟘𝟙", "3.14", "1,000", "-42"])


def random_word(rng):
    word = rng.choice(WORDS) if rng.random() < 0.8 else "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
    r = rng.random()
    return word.upper() if r < 0.1 else word.capitalize() if r < 0.3 else word


def random_piece(rng, extra=()):
    """One piece of text from a pool mixing the hard kinds; `extra` adds more choices."""
    kinds = [random_word] * 8 + [lambda r: r.choice(WHITESPACE)] * 5 + [random_digits] * 2 + [
        lambda r: r.choice(CONTRACTIONS), lambda r: r.choice(EMOJI), lambda r: r.choice(CJK),
        random_cjk, random_hangul, random_marks, random_marks, lambda r: r.choice(COMPAT),
        random_new, random_new,
        lambda r: r.choice(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`…—–«»¿¡") * r.randint(1, 3)]
    kinds += list(extra)
    return rng.choice(kinds)(rng)


def random_text(rng, pieces, extra=()):
    out = []
    for _ in range(pieces):
        out.append(random_piece(rng, extra))
        if rng.random() < 0.5:
            out.append(" ")
    return "".join(out)


_corpus = None


def corpus_documents():
    """The first ~200 documents (truncated) of the project's corpus, if it was fetched."""
    global _corpus
    if _corpus is None:
        _corpus = []
        for path in sorted(glob.glob(os.path.join(ROOT, ".cache/data/corpus/*.jsonl"))):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if len(_corpus) >= 200:
                        break
                    text = json.loads(line).get("text")
                    if text:
                        _corpus.append(text[:1500])
    return _corpus


def draw_added_tokens(rng):
    pool = ["hello", "the", "ing", "New", "x", "abc123", "<|x|>", "<|endoftext|>", "[MASK]",
            "<|im_start|>", "<<", "##", "...", "new york", " the", "a b ", " ", "\n", "  x",
            "é", "e\u0301", "café", "cafe\u0301", "Å", "\u212b", "ﬁ", "中文", "日本", "😀",
            "👨‍👩‍👧", "한국", "\u1100\u1161", "'s", "１２"]
    out = []
    for content in rng.sample(pool, rng.randint(0, 8)):
        special = rng.random() < 0.4
        out.append(dict(content=content, special=special, single_word=rng.random() < 0.3,
                        lstrip=rng.random() < 0.3, rstrip=rng.random() < 0.3,
                        normalized=rng.random() < (0.2 if special else 0.7)))
    return out


def draw_normalizer(rng):
    r = rng.random()
    if r < 0.5:
        return None
    if r < 0.85:
        return [rng.choice(UNICODE_FORMS)]
    return [rng.choice(UNICODE_FORMS), rng.choice(UNICODE_FORMS)]


def draw_pre_tokenizer(rng):
    """[("split", pattern label, pattern, is regex, behavior, invert)..., ("bytelevel", ...)]"""
    steps = []
    if rng.random() < 0.55:
        for _ in range(1 if rng.random() < 0.7 else 2):
            if rng.random() < 0.8:
                label = rng.choice(["gpt2", "cl100k", "cl100k"] + list(REGEXES))
                steps.append(("split", label, REGEXES[label], True, rng.choice(BEHAVIORS),
                              rng.random() < 0.25))
            else:
                pattern = rng.choice(STRING_PATTERNS)
                steps.append(("split", "string", pattern, False, rng.choice(BEHAVIORS),
                              rng.random() < 0.25))
        steps.append(("bytelevel", rng.random() < 0.3, rng.random() < 0.3))
    else:
        steps.append(("bytelevel", rng.random() < 0.4, rng.random() < 0.8))
    return steps


def build(rng, unicode_14=False):
    """(tokenizer.json text, spec, features, training texts) of one case."""
    spec = dict(vocab=rng.randint(300, 3000), normalizer=draw_normalizer(rng),
                pre=draw_pre_tokenizer(rng), merges=rng.choice(["lists", "strings"]),
                ignore_merges=rng.random() < 0.3, added=draw_added_tokens(rng),
                post=rng.choice([None, "bytelevel"]), ascii_json=rng.random() < 0.5,
                threads=rng.choice([1, 2]))
    tok = Tokenizer(models.BPE())
    if spec["normalizer"]:
        forms = [getattr(normalizers, name)() for name in spec["normalizer"]]
        tok.normalizer = forms[0] if len(forms) == 1 else normalizers.Sequence(forms)
    steps = []
    for step in spec["pre"]:
        if step[0] == "split":
            _, _, pattern, is_regex, behavior, invert = step
            steps.append(pre_tokenizers.Split(Regex(pattern) if is_regex else pattern, behavior,
                                              invert=invert))
        else:
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=step[1], use_regex=step[2]))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    if spec["post"]:
        tok.post_processor = processors.ByteLevel(trim_offsets=rng.random() < 0.5)
    training = [random_text(rng, rng.randint(5, 60)) for _ in range(rng.randint(100, 300))]
    if unicode_14:
        training = [without_after_14(text) for text in training]
    training += corpus_documents()
    trainer = trainers.BpeTrainer(vocab_size=spec["vocab"], special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training, trainer)
    # Of two normalized added tokens with the same normalized text (e.g. "é" and "e\u0301" under
    # NFC), HF matches either, differently from one process to the next: keep the first only.
    seen, kept = set(), []
    for a in spec["added"]:
        if a["normalized"]:
            match = tok.normalizer.normalize_str(a["content"]) if tok.normalizer else a["content"]
            if match in seen:
                continue
            seen.add(match)
        kept.append(a)
    spec["added"] = kept
    for a in spec["added"]:
        token = AddedToken(a["content"], single_word=a["single_word"], lstrip=a["lstrip"],
                           rstrip=a["rstrip"], normalized=a["normalized"], special=a["special"])
        (tok.add_special_tokens if a["special"] else tok.add_tokens)([token])
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = spec["ignore_merges"]
    merges = [m if isinstance(m, list) else m.split(" ") for m in data["model"]["merges"]]
    data["model"]["merges"] = merges if spec["merges"] == "lists" else [" ".join(m)
                                                                        for m in merges]
    return json.dumps(data, ensure_ascii=False), spec, features(spec), training


def features(spec):
    """Labels of what a case exercises, for the per-feature tally."""
    out = ["normalizer=" + ("+".join(spec["normalizer"]) if spec["normalizer"] else "none")]
    if spec["normalizer"]:
        out.append("normalizer=any")
    for step in spec["pre"]:
        if step[0] == "split":
            out += [f"split.pattern={step[1]}", f"split.behavior={step[4]}"]
            if step[5]:
                out.append("split.invert")
        else:
            out.append(f"bytelevel.add_prefix_space={step[1]}")
            out.append(f"bytelevel.use_regex={step[2]}")
    out.append("pre=" + ("+".join(s[0] for s in spec["pre"])))
    out += [f"merges={spec['merges']}", f"ignore_merges={spec['ignore_merges']}",
            f"added_tokens={'none' if not spec['added'] else 'some'}"]
    for a in spec["added"]:
        out.append("added." + ("special" if a["special"] else "normal"))
        out += [f"added.{flag}" for flag in ("single_word", "lstrip", "rstrip", "normalized")
                if a[flag]]
    return sorted(set(out))


def draw_documents(rng, spec, training):
    added = [a["content"] for a in spec["added"]]

    def training_piece(r):  # words the BPE has merges for
        text = r.choice(training)
        start = r.randint(0, max(0, len(text) - 1))
        return text[start:start + r.randint(1, 80)]

    extra = [training_piece] * 3 + ([lambda r: r.choice(added)] * 4 if added else [])
    docs = []
    for _ in range(rng.randint(100, 300)):
        r = rng.random()
        if r < 0.05:  # long words take the heap path of the BPE
            doc = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(49, 400)))
        elif r < 0.1:
            doc = random_piece(rng, extra)
        else:
            doc = random_text(rng, rng.randint(1, 30), extra)
        docs.append(doc or "x")  # tandem skips empty documents
    return docs


def run_tandem(cmd):
    """The binary may be relinked while a long run goes on: wait a little for it."""
    for attempt in range(60):
        try:
            return subprocess.run(cmd, capture_output=True, text=True)
        except OSError:
            if attempt == 59:
                raise
            time.sleep(2)


def tandem_stream(binary, tokenizer_path, docs, workdir, ascii_json=True, threads=1, eos_id=0):
    """(the token stream `tandem data tokenize` wrote, every document followed by eos_id, None)
    or (None, tandem's error)."""
    inputs = os.path.join(workdir, "docs.jsonl")
    with open(inputs, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}, ensure_ascii=ascii_json) + "\n")
    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)
    p = run_tandem([binary, "data", "tokenize", "--tokenizer", tokenizer_path, "--out", out,
                    inputs, "--no-progress", "--json", "--eos-id", str(eos_id), "--threads",
                    str(threads)])
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["(no message)"])[-1]
    summary = json.loads(p.stdout[p.stdout.index("{"):])
    if summary["documents"] != len(docs) or summary["empty_documents"]:
        return None, f"tandem read {summary['documents']} documents of {len(docs)}"
    ids = []
    for name in summary["files_written"]:
        with open(os.path.splitext(name)[0] + ".json") as f:
            dtype = json.load(f)["dtype"]
        width = {"uint16": 2, "uint32": 4, "uint64": 8}[dtype]
        with open(name, "rb") as f:
            raw = f.read()
        ids += [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]
    return ids, None


def tandem_encode(binary, tokenizer_path, docs, workdir, ascii_json=True, threads=1):
    """([ids per document], None) or (None, tandem's error), the documents split at EOS id 0."""
    ids, error = tandem_stream(binary, tokenizer_path, docs, workdir, ascii_json, threads)
    if ids is None:
        return None, error
    per_doc, current = [], []
    for i in ids:
        if i == 0:
            per_doc.append(current)
            current = []
        else:
            current.append(i)
    if current or len(per_doc) != len(docs):
        return None, f"{len(per_doc)} EOS-delimited documents of {len(docs)}"
    return per_doc, None


def hf_ids(hf, text):
    """HF's ids, or None where HF panics (it does, e.g. "AddedVocabulary bad split")."""
    try:
        return hf.encode(text, add_special_tokens=False).ids
    except BaseException as e:  # pyo3's PanicException is no Exception
        if type(e).__name__ != "PanicException":
            raise
        return None


def shrink(binary, path, hf, text, workdir):
    """A minimal text on which tandem and HF still differ (removal of code point chunks)."""
    def differing(candidates):
        got, error = tandem_encode(binary, path, candidates, workdir)
        if got is None:
            return None
        return next((c for c, g in zip(candidates, got)
                     if hf_ids(hf, c) not in (None, g)), None)

    chunk = max(1, len(text) // 2)
    while chunk >= 1:
        candidates = [text[:i] + text[i + chunk:] for i in range(0, len(text), chunk)]
        smaller = differing([c for c in candidates if c])
        if smaller is not None:
            text, chunk = smaller, min(chunk, max(1, len(smaller) // 2))
        else:
            chunk //= 2
    return text


def check_case(binary, seed, index, no_normalizers, unicode_14):
    case_seed = seed * 1000 + index
    rng = random.Random(case_seed)
    tokenizer_json, spec, feats, training = build(rng, unicode_14)
    if no_normalizers and spec["normalizer"]:
        # The same draws, less the normalizer, so the other cases keep their tokenizers.
        data = json.loads(tokenizer_json)
        data["normalizer"] = None
        tokenizer_json = json.dumps(data, ensure_ascii=False)
        spec["normalizer"], feats = None, features(dict(spec, normalizer=None))
    docs = draw_documents(rng, spec, training)
    if unicode_14:  # after the draws, so that the rest of the case is unchanged
        docs = [without_after_14(doc) for doc in docs]
    hf = Tokenizer.from_str(tokenizer_json)
    workdir = tempfile.mkdtemp(prefix="tokrandom_")
    try:
        path = os.path.join(workdir, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        failed_path = (f"/tmp/tokrandom_fail_{case_seed}{'_u14' if unicode_14 else ''}"
                       f"{'_nonorm' if no_normalizers else ''}.json")
        described = (f"case seed {case_seed}, vocab {hf.get_vocab_size()}, {len(docs)} documents: "
                     f"{short(spec)}")
        got, error = tandem_encode(binary, path, docs, workdir, spec["ascii_json"],
                                   spec["threads"])
        if got is None:
            shutil.copy(path, failed_path)
            return False, feats, f"{described}\n  tandem failed: {error} ({failed_path})"
        panics = []
        for doc, ids in zip(docs, got):
            expected = hf_ids(hf, doc)
            if expected is None:
                panics.append(doc)
            elif ids != expected:
                shutil.copy(path, failed_path)
                small = shrink(binary, path, hf, doc, workdir)
                return False, feats, (
                    f"{described}\n  tokenizer: {failed_path}\n  document: {doc!r}\n"
                    f"  tandem: {ids}\n  HF:     {expected}\n  minimal: {small!r}: tandem "
                    f"{(tandem_encode(binary, path, [small], workdir)[0] or [None])[0]}, HF "
                    f"{hf_ids(hf, small)}")
        tokens = sum(len(ids) for ids in got)
        if panics:  # not judged: HF has no answer
            described += f"; HF panics on {len(panics)} documents, e.g. {panics[0]!r}"
        return True, feats, f"{described}; {tokens} tokens"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def check_file_case(binary, tokenizer_path, seed, index):
    """One case of --tokenizer: the given tokenizer (as it is) on the case's random documents,
    up to 8 of its added tokens' texts among them, in one `tandem data tokenize` run whose EOS is
    the tokenizer's own (<|endoftext|> where it has one). Judged on the whole stream, each
    document's HF ids then the EOS, so a document may hold the EOS's text."""
    case_seed = seed * 1000 + index
    rng = random.Random(case_seed)
    hf = Tokenizer.from_file(tokenizer_path)
    added = sorted(t.content for t in hf.get_added_tokens_decoder().values())
    eos_id = hf.token_to_id("<|endoftext|>")
    if eos_id is None:
        eos_id = 0
    training = [random_text(rng, rng.randint(5, 60)) for _ in range(rng.randint(20, 60))]
    training += corpus_documents()
    picked = rng.sample(added, min(len(added), 8))
    docs = draw_documents(rng, {"added": [{"content": a} for a in picked]}, training)
    ascii_json, threads = rng.random() < 0.5, rng.choice([1, 2])
    feats = [f"json={'ascii' if ascii_json else 'utf-8'}", f"threads={threads}"]
    expected, panics = [], 0
    for doc in docs:
        ids = hf_ids(hf, doc)
        if ids is None:  # not judged: HF has no answer
            panics += 1
        else:
            expected.append((doc, ids))
    described = (f"case seed {case_seed}, {len(expected)} documents ({panics} HF panics on), "
                 f"EOS {eos_id}, added texts {picked}")
    workdir = tempfile.mkdtemp(prefix="tokrandom_")
    try:
        got, error = tandem_stream(binary, tokenizer_path, [d for d, _ in expected], workdir,
                                   ascii_json, threads, eos_id)
        if got is None:
            return False, feats, f"{described}\n  tandem failed: {error}"
        at = 0
        for doc, ids in expected:
            mine = got[at:at + len(ids) + 1]
            if mine != ids + [eos_id]:
                return False, feats, (f"{described}\n  document: {doc!r}\n  tandem: {mine}\n"
                                      f"  HF:     {ids + [eos_id]}")
            at += len(ids) + 1
        if at != len(got):
            return False, feats, f"{described}\n  tandem wrote {len(got) - at} tokens more"
        return True, feats, f"{described}; {at} tokens"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def short(spec):
    pre = []
    for step in spec["pre"]:
        if step[0] == "split":
            pattern = step[1] if step[1] != "string" else repr(step[2])
            pre.append(f"Split({pattern}, {step[4]}{', invert' if step[5] else ''})")
        else:
            pre.append(f"ByteLevel(prefix={step[1]}, regex={step[2]})")
    flags = dict(special="S", single_word="w", lstrip="l", rstrip="r", normalized="n")
    added = [(a["content"], "".join(v for k, v in flags.items() if a[k])) for a in spec["added"]]
    return (f"normalizer {spec['normalizer']}, {' + '.join(pre)}, merges {spec['merges']}, "
            f"ignore_merges {spec['ignore_merges']}, added {added}")


def main():
    ap = argument_parser(__doc__, cases=40)
    ap.add_argument("--first", type=int, default=0, help="index of the first case")
    ap.add_argument("--no-normalizers", action="store_true",
                    help="drop the drawn normalizers (the rest of each case is unchanged)")
    ap.add_argument("--unicode-14", action="store_true",
                    help="leave out the characters assigned after Unicode 14.0")
    ap.add_argument("--tokenizer", metavar="FILE",
                    help="judge this tokenizer.json (e.g. dolma2's) instead of drawn ones")
    args = ap.parse_args()
    tally = collections.defaultdict(lambda: [0, 0])

    def one(index):
        if args.tokenizer:
            ok, feats, what = check_file_case(args.tandem, args.tokenizer, args.seed,
                                              args.first + index)
        else:
            ok, feats, what = check_case(args.tandem, args.seed, args.first + index,
                                         args.no_normalizers, args.unicode_14)
        for feat in feats:
            tally[feat][0 if ok else 1] += 1
        return ok, f"[case {args.first + index}] {what}"

    status = run_cases("check_tokenizer_random", args, one)
    print("per feature (cases agreeing / differing):")
    for feat in sorted(tally):
        print(f"  {feat}: {tally[feat][0]} / {tally[feat][1]}")
    return status


if __name__ == "__main__":
    sys.exit(main())
