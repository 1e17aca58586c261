#!/usr/bin/env bash
# Puts the cuDNN frontend's C++ headers (header-only; they ship in the nvidia-cudnn-frontend wheel)
# under .cache/cudnn-frontend/include, where CMake looks for them to compile the CUDA backend's
# cuDNN attention. Only useful where nvcc is installed; never fatal: without the headers the CUDA
# backend is built with its own attention kernels only. The headers are not committed.
set -uo pipefail
cd "$(dirname "$0")/.."
version="${CUDNN_FRONTEND_VERSION:-1.32.0}"
dest=".cache/cudnn-frontend"
if [[ -f "$dest/include/cudnn_frontend.h" && "$(cat "$dest/VERSION" 2>/dev/null)" == "$version" ]]; then
  echo "cudnn-frontend: $version present"
  exit 0
fi
python=""
for p in python3 python; do command -v "$p" >/dev/null && python="$p" && break; done
if [[ -z "$python" ]] || ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "cudnn-frontend: no pip; the CUDA backend will use its own attention kernels only"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: \
  "nvidia-cudnn-frontend==$version" -d "$tmp" >"$tmp/pip.log" 2>&1; then
  tail -3 "$tmp/pip.log"
  echo "cudnn-frontend: download failed; the CUDA backend will use its own attention kernels only"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
"$python" - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/"):
            z.extract(name, sys.argv[2])
PY
echo "$version" >"$dest/VERSION"
echo "cudnn-frontend: $version headers in $dest/include"
