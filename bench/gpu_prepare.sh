#!/usr/bin/env bash
# Prepares bench/gpu_check.sh's programs here, where tandem's Debian libraries are installed, for a
# GPU machine that has none of them: builds `tandem`, `test_cuda`, `bench_gpu_train_step` and
# `bench_gpu_attention` with a portable -march (x86-64-v3) for Hopper (sm_90a), and packs them with
# every shared library they load that such a machine may lack (oneDNN, yaml-cpp, fmt, PCRE2, OpenMPI, zstd, xxhash, ...) into
# .gpu-carry/tandem-gpu.tar.xz (ignored by git). CUDA's own libraries (runtime, cuBLAS(Lt), NCCL,
# cuDNN) are not packed: the device has them in PyTorch's wheels, and gpu_check.sh finds them there.
#
# Usage: bench/gpu_prepare.sh [BUILD_DIR]     (default build-gpu-carry)
# Then, on the device machine: the run tool with carry [".gpu-carry"] and `bash bench/gpu_check.sh`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-gpu-carry}"
carry="$root/.gpu-carry"
targets=(tandem test_cuda bench_gpu_train_step bench_gpu_attention)

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "gpu_prepare: no nvcc here; the GPU programs cannot be built" >&2
  exit 2
}
bash "$root/scripts/fetch_cudnn_frontend.sh"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_MARCH=x86-64-v3 \
  -DCMAKE_CUDA_ARCHITECTURES=90a "${launcher[@]}" >"$build.configure.log" 2>&1 || {
  tail -20 "$build.configure.log"
  exit 2
}
grep -E "CUDA backend|NCCL communicator" "$build.configure.log"
grep -q "CUDA backend: on" "$build.configure.log" || {
  echo "gpu_prepare: CMake did not enable the CUDA backend" >&2
  exit 2
}
start=$SECONDS
nice -n 10 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
echo "gpu_prepare: built in $((SECONDS - start)) s"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/tandem-gpu"
mkdir -p "$pkg/bin" "$pkg/lib"
cp "$build/tandem" "$build/tests/test_cuda" "$build/bench/bench_gpu_train_step" \
  "$build/bench/bench_gpu_attention" "$pkg/bin/"
strip --strip-debug "$pkg"/bin/*

# Libraries the programs load, but not the C runtime and compiler runtime (newer on the device,
# and replacing them breaks its own programs) nor CUDA's (taken from the device's wheels).
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libgcc_s|libstdc\+\+)\.'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvJitLink)\.'
declare -A seen=()
for exe in "$pkg"/bin/*; do
  while read -r name path; do
    [[ -z "$path" || "$name" =~ $system || "$name" =~ $cuda || -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    cp -L "$path" "$pkg/lib/$name"
  done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
strip --strip-unneeded "$pkg"/lib/* 2>/dev/null || true
{
  echo "commit $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(nvcc --version | tail -1), $(c++ --version | head -1)"
  echo "march x86-64-v3, CUDA architectures 90a"
  echo "needs $(for f in "$pkg"/bin/* "$pkg"/lib/*; do objdump -T "$f" 2>/dev/null; done |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1) and $(for f in "$pkg"/bin/* "$pkg"/lib/*; do
    objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
  (cd "$pkg" && find bin lib -type f -printf '%s %p\n' | sort -k2)
} >"$pkg/MANIFEST"
mkdir -p "$carry"
tar -C "$stage" -cf - tandem-gpu | xz -T"$(nproc)" -6 >"$carry/tandem-gpu.tar.xz"
size=$(stat -c %s "$carry/tandem-gpu.tar.xz")
cat "$pkg/MANIFEST"
# The run tool carries 64 MiB in all: the working tree (tracked files and untracked ones git does
# not ignore) and the package together, with a little room left.
tree=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
echo "gpu_prepare: $carry/tandem-gpu.tar.xz, $((size / 1024 / 1024)) MiB; with the working tree's $((tree / 1024 / 1024)) MiB, $(((size + tree) / 1024 / 1024)) MiB travel (the run tool carries 64 MiB)"
((size + tree < 62 * 1024 * 1024)) || { echo "gpu_prepare: too large to carry" >&2; exit 3; }
