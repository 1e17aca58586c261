#!/usr/bin/env bash
# Every GPU check and benchmark of the CUDA backend in one call on the device machine, within
# about 8 minutes, results as JSON in $OUT:
#   1. the machine: GPU, driver (and its CUDA version), PyTorch and its cuDNN;
#   2. the programs bench/gpu_prepare.sh built and packed here (.gpu-carry/tandem-gpu.tar.xz),
#      unpacked, with CUDA's libraries taken from PyTorch's wheels on the device and every
#      program's libraries resolved before anything runs;
#   3. test_cuda in two calls (GoogleTest JSON each, so a slow second call cannot lose the first's
#      results): (a) every CUDA op against the CPU op in fp32 and in bf16 (bf16: the rounded fp32
#      result bit for bit, the CPU's bf16 op within one bf16 step or its stated bound; cuDNN's
#      attention), determinism in both precisions, the model against HF fixtures (fp32 and bf16)
#      and against the CPU backend; (b) training on the GPU against the CPU backend and the
#      PyTorch reference in fp32, against the CPU backend's bf16 run in bf16, repeated runs bit
#      for bit, checkpoints moving between backends; then the model on the GPU against HF
#      transformers on the same GPU on fresh random configs (tools/gpu_hf_parity.py: fp32 KL,
#      logits and gradients; bf16 KL against HF's bf16 model);
#   4. throughput in bf16 (the precision policy OLMo 3 trains with): tandem's full training step on
#      the OLMo 3-shaped 1B model (seq 8192), HF transformers' Olmo3ForCausalLM on the same config
#      in the same call, and a 7B-shaped layer stack of as many layers as fit; each of tandem's
#      with one more step profiled op by op (device time, TFLOP/s, time between ops), so that one
#      call shows where it goes;
#      then attention alone on each of its paths (bench/gpu_attention.cc);
#      with time left, compute-sanitizer's memcheck and racecheck on the attention tests and the
#      other kernels that share memory between threads, HF's step under torch.compile (its
#      strongest configuration, for the tokens/s ratio), the 1B step with 4 micro-batches, on
#      tandem's own tensor-core attention instead of cuDNN's, and with every access element by
#      element (what the 16-byte accesses bring, op by op).
# Files in $OUT: gpu_check.json (the summary), gpu_check.log and gpu_check_results.tar.gz, which
# holds the summary again, test_cuda.part0.json and test_cuda_training.part0.json (GoogleTest's;
# part1, ... after a crash, with the crashed tests in *.crashed.json), hf_parity.json,
# bench_1b.json, bench_7b_stack.json, hf_1b.json, bench_attention.json, and when time is left for
# them hf_1b_compiled.json, bench_1b_accumulated.json, bench_1b_flash.json, bench_1b_unpacked.json
# and sanitizer_{memcheck,racecheck,racecheck_ops}.log. Exit status 0 only when the tests and the
# HF comparison passed, the benchmarks ran (the optional last ones aside) and compute-sanitizer
# found nothing.
#
# Usage (device machine, repo root; `run` with kind nvidia-h200 and carry [".gpu-carry"]):
# bash bench/gpu_check.sh.
# GPU_CHECK_BUDGET_S (default 480) bounds the whole; GPU_CHECK_STEPS='bench_1b hf_1b' runs only
# those steps (keys of the summary's status; the end of the log names the steps cut short so).
# Here (no GPU) the same command rehearses everything up to the GPU: unpacking, library
# resolution, --help, and test_cuda starting and skipping every test with its reason.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu_check_out}"
mkdir -p "$out"
# The device tool brings back at most 8 files from $OUT: the log and the summary go there, every
# other result into $res, packed into $out/gpu_check_results.tar.gz at each step's start and at the
# end, so that a call cut short still brings back what its finished steps wrote.
res="${GPU_CHECK_RESULTS:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_results.XXXXXX")}"
mkdir -p "$res"
exec > >(tee "$out/gpu_check.log") 2>&1
budget="${GPU_CHECK_BUDGET_S:-480}"
start=$SECONDS
python="$(command -v python3 || command -v python)"
# Python's output unbuffered, so that a step cut short by its bound still leaves its lines in the log.
export PYTHONUNBUFFERED=1

# Packs $res into $out (a file over the tool's 16 MiB, the sanitizers' logs being the likely ones,
# is packed cut to its first and last 2 MiB instead).
pack() {
  local tmp="$out/.gpu_check_results.tmp" f
  tar -C "$res" -czf "$tmp" . 2>/dev/null || return
  if (($(stat -c %s "$tmp") > 15 * 1024 * 1024)); then
    for f in "$res"/*; do
      if (($(stat -c %s "$f") > 4 * 1024 * 1024)); then
        { head -c 2097152 "$f"; printf '\n[... cut by gpu_check.sh to fit the device tool ...]\n'
          tail -c 2097152 "$f"; } >"$f.cut" && mv -f "$f.cut" "$f"
      fi
    done
    tar -C "$res" -czf "$tmp" . 2>/dev/null || return
  fi
  mv -f "$tmp" "$out/gpu_check_results.tar.gz"
}
trap pack EXIT
step() {
  pack
  printf '\n== %s (t=%ds)\n' "$*" $((SECONDS - start))
}
left() { echo $((budget - (SECONDS - start))); }
# Runs a command with at most $1 seconds (and never past the budget).
bounded() {
  local limit=$1
  shift
  local remaining
  remaining=$(left)
  ((remaining < limit)) && limit=$remaining
  if ((limit <= 5)); then
    echo "skipped: the time budget is spent"
    return 124
  fi
  timeout --kill-after=10 "$limit" "$@"
}
declare -A status=()
# GPU_CHECK_STEPS (default all): the steps to run, by their keys in gpu_check.json's status
# (tests tests_training hf_parity bench_1b hf_1b bench_7b bench_attention sanitizer
# hf_1b_compiled bench_1b_accumulated bench_1b_flash bench_1b_unpacked), so that a second device
# call can run only what the first did not finish. The others say not_selected.
selection=" ${GPU_CHECK_STEPS:-all} "
selection="${selection//,/ }"
wanted() {
  [[ "$selection" == " all " || "$selection" == *" $1 "* ]] && return 0
  echo "not selected (GPU_CHECK_STEPS)"
  status[$1]=not_selected
  return 1
}
# A step that needs the GPU: selected and a GPU visible (else status skipped, with the reason).
gpu_step() {
  wanted "$1" || return 1
  ((gpu_visible)) && return 0
  echo "no GPU visible: skipped"
  status[$1]=skipped
  return 1
}

step "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvidia-smi | grep -o "CUDA Version: [0-9.]*" | head -1 | sed 's/^/driver /'
else
  echo "nvidia-smi: not found (no NVIDIA driver here)"
fi
"$python" - <<'PY' 2>&1 | tee "$res/torch_info.txt"
try:
    import torch
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), cuDNN {torch.backends.cudnn.version()}, "
          f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none visible'}")
except Exception as e:
    print(f"torch: not importable ({e})")
PY

step "unpack the programs"
package="$root/.gpu-carry/tandem-gpu.tar.xz"
dest="${TMPDIR:-/tmp}/tandem-gpu"
if [[ ! -f "$package" ]]; then
  echo "gpu_check: $package is missing: run bench/gpu_prepare.sh here first and carry .gpu-carry"
  exit 2
fi
rm -rf "$dest"
tar -C "$(dirname "$dest")" -xJf "$package" || exit 2
head -3 "$dest/MANIFEST"
bin="$dest/bin"

step "libraries"
# CUDA's libraries from PyTorch's wheels (nvidia-* packages), then the toolkit's, after ours.
wheel_libs="$("$python" - <<'PY' 2>/dev/null
import glob, os
dirs = []
try:
    import nvidia
    for base in list(nvidia.__path__):
        for so in sorted(glob.glob(os.path.join(base, "**", "lib*.so*"), recursive=True)):
            d = os.path.dirname(so)
            if d not in dirs:
                dirs.append(d)
except Exception:
    pass
print(":".join(dirs))
PY
)"
# Only tandem's programs get this path (run through "${ours[@]}"): the carried libraries must not
# replace the ones the device's Python and PyTorch load.
ours_path="$dest/lib${wheel_libs:+:$wheel_libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ours=(env "LD_LIBRARY_PATH=$ours_path")
cuda_only=(env "LD_LIBRARY_PATH=${wheel_libs:+$wheel_libs:}/usr/local/cuda/lib64")  # for Python
echo "LD_LIBRARY_PATH for tandem's programs: $ours_path"
echo "device C library: $(ldd --version 2>&1 | head -1); the programs need up to $(grep -m1 "^needs" "$dest/MANIFEST" | cut -d' ' -f2-)"
missing=0
for exe in "$bin"/*; do
  if "${ours[@]}" ldd "$exe" | grep "not found"; then
    echo "gpu_check: $(basename "$exe") has unresolved libraries (above)"
    missing=1
  fi
done
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
  found="$("${ours[@]}" ldd "$bin/tandem" | awk -v l="$lib" '$1 == l {print $3}')"
  [[ -z "$found" ]] && found="$(for d in ${ours_path//:/ }; do [[ -e "$d/$lib" ]] && echo "$d/$lib" && break; done)"
  echo "$lib -> ${found:-not found}"
done
"${cuda_only[@]}" "$python" - <<'PY' 2>/dev/null || echo "cuDNN: libcudnn.so.9 not loadable (tandem then uses its own attention kernels)"
import ctypes
v = ctypes.CDLL("libcudnn.so.9").cudnnGetVersion()
print(f"cuDNN {v // 10000}.{v // 100 % 100}.{v % 100} (the one tandem opens at run time)")
PY
((missing)) && exit 2
"${ours[@]}" "$bin/bench_gpu_train_step" --help | head -2
"${ours[@]}" "$bin/tandem" --help >/dev/null && echo "tandem --help: ok"

export TANDEM_FIXTURES_DIR="$root/tests/fixtures" TANDEM_BINARY="$bin/tandem"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"
cd "$root"

# The test output's telling lines, the first 150 of them. It reads to the end: a reader that
# stopped early (head) would kill the test run upstream with SIGPIPE at its next line, before it
# wrote its outcomes (seen in a rehearsal here, where 99 skipped tests print about 280 such lines).
filter_test_output() {
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|^gtest_resumable|Failure|Expected|Which is|actual|no CUDA|rel|error|differ|step" |
    awk 'NR <= 150 { print } END { if (NR > 150) print "(" NR - 150 " more such lines not shown)" }'
}
step "test_cuda: ops (fp32 and bf16), determinism, model parity, downstream evaluation"
# CudaDataParallel's multi-rank tests run tandem under mpirun on two GPUs: the device machine has
# one (and no launcher of ours), so they skip there with the reason (they run on the CUDA emulator
# here); its one-rank FSDP test runs.
# Through gtest_resumable.py: a test that kills the process is recorded as crashed and the tests
# after it run in a new process, so one crash cannot lose the rest of this one device call.
if wanted tests; then
  bounded 120 "$python" bench/gtest_resumable.py --prefix "$res/test_cuda" --seconds 110 -- \
    "${ours[@]}" "$bin/test_cuda" --gtest_filter='-CudaTraining.*' 2>&1 |
    filter_test_output
  status[tests]=${PIPESTATUS[0]}
fi

step "test_cuda: training (fp32 and bf16) against the CPU backend and the reference, resumes"
if wanted tests_training; then
  bounded 150 "$python" bench/gtest_resumable.py --prefix "$res/test_cuda_training" \
    --seconds 140 -- "${ours[@]}" "$bin/test_cuda" --gtest_filter='CudaTraining.*' 2>&1 |
    filter_test_output
  status[tests_training]=${PIPESTATUS[0]}
fi

gpu_visible=0
"${cuda_only[@]}" "$python" -c 'import ctypes,sys; n=ctypes.c_int(0); r=ctypes.CDLL("libcudart.so.13").cudaGetDeviceCount(ctypes.byref(n)); sys.exit(0 if r==0 and n.value>0 else 1)' \
  2>/dev/null && gpu_visible=1

step "model on the GPU vs HF transformers on the GPU: fresh random configs, fp32 and bf16"
# Configs drawn from the clock's seed (so each device call sees new ones), trained briefly, then
# `tandem parity --backend cuda` against HF's logits and gradients computed on the same GPU.
if gpu_step hf_parity; then
  bounded 90 "$python" tools/gpu_hf_parity.py --tandem "$bin/tandem" --tandem-ld-path "$ours_path" \
    --configs 4 --json "$res/hf_parity.json" 2>&1 | grep -v Warning | tail -12
  status[hf_parity]=${PIPESTATUS[0]}
fi

step "tandem: OLMo 3-shaped 1B, full training step in bf16, seq 8192"
if gpu_step bench_1b; then
  bounded 80 "${ours[@]}" "$bin/bench_gpu_train_step" --config configs/models/olmo3-1b.yaml --label tandem-1b \
    --precision bf16 --profile \
    --batch 1 --seq 8192 --steps 3 --warmup 1 --json "$res/bench_1b.json" | grep -v '^{'
  status[bench_1b]=${PIPESTATUS[0]}
fi

step "HF transformers Olmo3ForCausalLM: same config, batch and sequence"
if gpu_step hf_1b; then
  bounded 100 "$python" tools/bench_hf_gpu_train_step.py --config configs/models/olmo3-1b.yaml \
    --batch 1 --seq 8192 --steps 3 --attn sdpa,flex_attention --json "$res/hf_1b.json" |
    grep -v '^{"torch"' | cut -c1-300
  status[hf_1b]=${PIPESTATUS[0]}
fi

step "tandem: 7B-shaped layer stack (OLMo 3 7B dims, as many layers as fit) in bf16, seq 8192"
# --layers fit: two probe steps (2 and 3 layers) measure one layer's share of the peak memory, then
# the stack takes the most of the 32 layers that fit (docs/benchmarks.md).
if gpu_step bench_7b; then
  bounded 90 "${ours[@]}" "$bin/bench_gpu_train_step" --config configs/models/olmo3-7b.yaml --layers fit \
    --precision bf16 \
    --label tandem-7b-stack --batch 1 --seq 8192 --steps 2 --warmup 1 --profile \
    --json "$res/bench_7b_stack.json" | grep -v '^{'
  status[bench_7b]=${PIPESTATUS[0]}
fi

step "attention alone, path by path: cuDNN, tensor-core kernels, plain (bf16), plain (fp32)"
# Forward and backward TFLOP/s of each path on the 1B and 7B attention shapes, with and without
# documents (bench/gpu_attention.cc): what the step profiles above cannot show, the paths they did
# not take. Informative: not in the exit status.
if gpu_step bench_attention; then
  bounded 45 "${ours[@]}" "$bin/bench_gpu_attention" --repeats 5 --json "$res/bench_attention.json" |
    grep -v '^{'
  status[bench_attention]=${PIPESTATUS[0]}
fi

step "compute-sanitizer on the attention and shared-memory kernels: memcheck, then racecheck (when time is left)"
# What the emulator cannot see on real hardware: out-of-bounds or misaligned device accesses
# (memcheck) and shared-memory hazards between threads (racecheck), on the bf16 attention tests
# (the tensor-core kernels, cuDNN's path, the plain kernels; the random problems' odd lengths and
# head_dims). --error-exitcode makes a finding fail the step; a step cut short by the budget (124)
# is reported as unfinished, not failed. Where the tool cannot attach to the GPU (seen on the
# gVisor runtime: "Device not supported", then error 999 at the first allocation, so every test
# would skip for want of a backend and exit 0), the step says unavailable: neither a pass that
# checked nothing nor a failure of tandem's.
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)"
# sanitize TOOL SECONDS FILTER [NAME]: runs test_cuda under the tool, its log in $res
# (sanitizer_NAME.log, NAME the tool's by default), and prints the step's status: 1 on a finding
# or a failed test, unavailable where the tool could not run the GPU, 124/137 when cut short,
# else the tool's exit status.
sanitize() {
  local tool=$1 seconds=$2 filter=$3 log="$res/sanitizer_${4:-$1}.log" rc
  bounded "$seconds" "${ours[@]}" "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin/test_cuda" \
    --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|misaligned|out of bounds|hazard|not supported|^\[  (PASSED|FAILED|SKIPPED) " \
    "$log" | head -40 >&2
  if grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|^\[  FAILED  \]" "$log"; then
    echo 1
  elif ((rc == 124 || rc == 137)); then
    echo "$rc"
  elif grep -qE "Device not supported|no CUDA backend" "$log" || ! grep -q "^\[  PASSED  \] [1-9]" "$log"; then
    echo unavailable
  else
    echo "$rc"
  fi
}
if gpu_step sanitizer; then
  if [[ -z "$sanitizer" ]]; then
    echo "compute-sanitizer: not found on this machine: skipped"
    status[sanitizer]=skipped
  else
    # The attention tests, then the other kernels that share memory between threads: the
    # embedding backward's device sort (counts, scan, ranks, runs), the block reductions of
    # RMSNorm, cross-entropy, log-probs and the grad norm.
    ops='CudaOps.Embedding*:CudaOps.RmsNorm*:CudaOps.FusedCrossEntropy*:CudaOps.TokenLogProbs*'
    ops+=':CudaOps.SumOfSquares*:CudaBf16.RmsNorm*:CudaBf16.FusedCrossEntropy*'
    status[sanitizer]=$(sanitize memcheck 60 \
      "*CudaBf16Attention*:CudaBf16.TensorCore*:CudaBf16.AttentionOnRandomProblems:$ops")
    echo "memcheck: ${status[sanitizer]}"
    if [[ "${status[sanitizer]}" == 0 ]]; then
      # Two shapes: head_dim 128 without documents, 32 with documents and a window.
      status[sanitizer]=$(sanitize racecheck 40 \
        '*.TensorCoreKernelsMatchTheCpu/2:*.TensorCoreKernelsMatchTheCpu/3')
      echo "racecheck (attention): ${status[sanitizer]}"
    fi
    if [[ "${status[sanitizer]}" == 0 ]]; then
      status[sanitizer]=$(sanitize racecheck 40 "$ops" racecheck_ops)
      echo "racecheck (other kernels): ${status[sanitizer]}"
    fi
  fi
fi

step "HF transformers Olmo3ForCausalLM under torch.compile: same config and batch (optional, last)"
# HF's strongest configuration, for the tokens/s ratio: the whole model compiled, flex_attention
# (the window's block sparsity) first, sdpa if time is left. A compile still running at its budget
# is abandoned and reported; the JSON keeps whatever finished. Runs only with time left.
if gpu_step hf_1b_compiled; then
  hf_compile_s=$(($(left) - 45))
  ((hf_compile_s > 150)) && hf_compile_s=150
  ((hf_compile_s < 1)) && hf_compile_s=1
  bounded 200 "$python" tools/bench_hf_gpu_train_step.py --config configs/models/olmo3-1b.yaml \
    --batch 1 --seq 8192 --steps 3 --attn flex_attention,sdpa --compiled yes \
    --compile-budget "$hf_compile_s" --json "$res/hf_1b_compiled.json" |
    grep -v '^{"torch"' | cut -c1-300
  status[hf_1b_compiled]=${PIPESTATUS[0]}
fi

step "tandem: OLMo 3-shaped 1B, 4 micro-batches of 8192 tokens per step (optional, last)"
# A real run accumulates several micro-batches per optimiser step (OLMo 3 7B: about 4M tokens per
# step); this is the MFU with the optimiser's share as such a run sees it. Runs only with time left.
if gpu_step bench_1b_accumulated; then
  bounded 45 "${ours[@]}" "$bin/bench_gpu_train_step" --config configs/models/olmo3-1b.yaml \
    --label tandem-1b-4-micro-batches --precision bf16 --batch 4 --micro-batch 1 --seq 8192 \
    --steps 2 --warmup 1 --json "$res/bench_1b_accumulated.json" | grep -v '^{'
  status[bench_1b_accumulated]=${PIPESTATUS[0]}
fi

step "tandem: OLMo 3-shaped 1B on its own tensor-core attention (optional, last)"
# bf16 attention on attention_flash.cu instead of cuDNN (TANDEM_CUDA_ATTENTION=flash): the speed
# a run gets where cuDNN is missing or refuses. Runs only with time left.
if gpu_step bench_1b_flash; then
  bounded 40 "${ours[@]}" TANDEM_CUDA_ATTENTION=flash "$bin/bench_gpu_train_step" \
    --config configs/models/olmo3-1b.yaml --label tandem-1b-flash-attention --precision bf16 \
    --batch 1 --seq 8192 --steps 2 --warmup 1 --profile --json "$res/bench_1b_flash.json" |
    grep -v '^{'
  status[bench_1b_flash]=${PIPESTATUS[0]}
fi

step "tandem: OLMo 3-shaped 1B with every access element by element (optional, last)"
# TANDEM_CUDA_PACKED_ACCESS=0: the bandwidth-bound kernels without their 16-byte accesses
# (packed_access.cuh), profiled, so that the summary shows op by op what the packs bring. Runs only
# with time left.
if gpu_step bench_1b_unpacked; then
  bounded 40 "${ours[@]}" TANDEM_CUDA_PACKED_ACCESS=0 "$bin/bench_gpu_train_step" \
    --config configs/models/olmo3-1b.yaml --label tandem-1b-unpacked --precision bf16 \
    --batch 1 --seq 8192 --steps 2 --warmup 1 --profile --json "$res/bench_1b_unpacked.json" |
    grep -v '^{'
  status[bench_1b_unpacked]=${PIPESTATUS[0]}
fi

step "summary"
for k in "${!status[@]}"; do echo "$k=${status[$k]}"; done >"$res/status.txt"
"$python" - "$res" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:
        return None
status = dict(line.strip().split("=", 1) for line in open(os.path.join(out, "status.txt")) if "=" in line)
# Each test_cuda call's outcomes (gtest_resumable.py, over every process it ran) and the
# properties the tests recorded (GoogleTest's JSON of each process that finished).
runs = [o for o in (load("test_cuda.outcomes.json"), load("test_cuda_training.outcomes.json")) if o]
counts = None
if runs:
    names = {k: [n for o in runs for n in o.get(k, [])]
             for k in ("passed", "failed", "skipped", "crashed", "timed_out")}
    counts = {"tests": sum(len(v) for v in names.values()), "passed": len(names["passed"]),
              "failed": len(names["failed"]) + len(names["crashed"]) + len(names["timed_out"]),
              "skipped": len(names["skipped"]), "crashed": names["crashed"],
              "timed_out": names["timed_out"],
              "failed_names": names["failed"] + names["crashed"] + names["timed_out"]}
    properties = {}
    for path in sorted(glob.glob(os.path.join(out, "test_cuda*.part*.json"))):
        for suite in (load(os.path.basename(path)) or {}).get("testsuites", []):
            for case in suite.get("testsuite", []):
                extra = {k: v for k, v in case.items() if k not in (
                    "name", "file", "line", "status", "result", "timestamp", "time", "classname",
                    "failures", "value_param", "type_param", "skipped")}
                if extra:
                    properties[f"{case.get('classname')}.{case.get('name')}"] = extra
    counts["recorded"] = properties
b1, b7, hf = load("bench_1b.json"), load("bench_7b_stack.json"), load("hf_1b.json")
hfc = load("hf_1b_compiled.json")
b1a = load("bench_1b_accumulated.json")
b1f = load("bench_1b_flash.json")
b1u = load("bench_1b_unpacked.json")
attention = load("bench_attention.json")
parity = load("hf_parity.json")
summary = {"status": status, "tests": counts, "tandem_1b": b1, "tandem_7b_stack": b7, "hf_1b": hf,
           "hf_1b_compiled": hfc,
           "tandem_1b_4_micro_batches": b1a, "tandem_1b_flash_attention": b1f,
           "tandem_1b_unpacked": b1u,
           "hf_parity_on_gpu": parity, "attention_paths": attention}
# The ratio is taken against HF's fastest run, eager modules or compiled.
hf_runs = [h["best"] for h in (hf, hfc) if h and h.get("best")]
hf_best = max(hf_runs, key=lambda r: r["tokens_per_s"]) if hf_runs else None
if b1 and hf_best:
    summary["hf_1b_best"] = hf_best
    summary["tandem_over_hf_tokens_per_s"] = b1["tokens_per_s"] / hf_best["tokens_per_s"]
try:
    summary["machine"] = open(os.path.join(out, "torch_info.txt")).read().strip()
except Exception:
    pass
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(summary, f, indent=2)
print("tests:", counts)
if parity:
    w = parity["worst"]
    print(f"model vs HF on the GPU ({len(parity['configs'])} random configs, seed {parity['seed']}): "
          f"{'pass' if parity['pass'] else 'FAIL'}; fp32 max KL {w['fp32_max_kl']:.2e}, max grad "
          f"rel L2 {w['fp32_max_grad_rel_l2']:.2e}; bf16 mean KL {w['bf16_mean_kl']:.2e} (max "
          f"{w['bf16_max_kl']:.2e}), from fp32 at most "
          f"{w['bf16_mean_kl_from_fp32_over_hf_farther_bf16']:.3f}x the farther of HF's bf16 "
          f"models (eager, sdpa), {w['bf16_mean_kl_from_fp32_over_hf_bf16']:.3f}x eager's")
for name, b in (("tandem 1B", b1), (f"tandem 7B stack of {(b7 or {}).get('n_layers')} layers", b7),
                ("tandem 1B, 4 micro-batches", b1a),
                ("tandem 1B, tensor-core attention", b1f), ("tandem 1B, element-wise accesses", b1u)):
    if b:
        print(f"{name}: {b['tokens_per_s']:.0f} tokens/s, MFU {100 * b['mfu_vs_bf16_peak']:.1f}% of "
              f"{b['peak_bf16_tflops']:.0f} TFLOP/s ({b['precision']}; "
              f"{100 * b.get('mfu_olmo_core_vs_bf16_peak', float('nan')):.1f}% in OLMo-core's "
              f"causal count), peak memory "
              f"{b['peak_memory_in_use_gib']:.1f} GiB in use, {b['peak_memory_reserved_gib']:.1f} "
              f"reserved (tandem plan: {b.get('planned_backend_memory_gib', float('nan')):.1f}); "
              f"{b.get('timed_steps_cuda_mallocs')} cudaMalloc call(s) and "
              f"{b.get('timed_steps_cache_releases')} cache release(s) in the timed steps")
for name, b in (("tandem 1B", b1), ("tandem 7B stack", b7), ("tandem 1B, tensor-core attention", b1f)):
    p = (b or {}).get("profile")
    if p:
        print(f"{name}, one step op by op: {p['span_ms']:.1f} ms span, {p['between_ops_ms']:.1f} ms "
              f"between ops; longest: " + ", ".join(
                  f"{o['op']} {o['ms']:.1f} ms" + (f" ({o['tflops_per_s']:.0f} TFLOP/s)"
                                                  if "tflops_per_s" in o else "")
                  for o in p["ops"][:6]))
# What the 16-byte accesses bring: each op's device time in the 1B step packed and not.
packed_ops = {o["op"]: o["ms"] for o in ((b1 or {}).get("profile") or {}).get("ops", [])}
unpacked_ops = {o["op"]: o["ms"] for o in ((b1u or {}).get("profile") or {}).get("ops", [])}
if packed_ops and unpacked_ops:
    changed = sorted(((unpacked_ops[k] - packed_ops[k], k) for k in packed_ops if k in unpacked_ops),
                     reverse=True)
    summary["packed_access_ms_saved"] = {k: d for d, k in changed}
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("16-byte accesses, ms saved per 1B step (element-wise - packed): " + ", ".join(
        f"{k} {unpacked_ops[k]:.2f} -> {packed_ops[k]:.2f}" for d, k in changed[:8]))
for r in (attention or {}).get("results", []):
    print(f"attention {r['problem']}, {r['path']} {r['dtype']}: forward "
          f"{r['forward_tflops_actual']:.0f} TFLOP/s, backward {r['backward_tflops_actual']:.0f} "
          f"(mask-visible pairs; {r['forward_ms']:.2f} + {r['backward_ms']:.2f} ms)")
for h in (hf, hfc):
    for r in (h or {}).get("results", []):
        print(f"HF 1B, {r['attn_implementation']}, compiled={r['compiled']}: " + (
            f"{r['tokens_per_s']:.0f} tokens/s, peak {r['peak_memory_gib'] or 0:.1f} GiB"
            if "tokens_per_s" in r else r.get("error", "no result")))
    if h and h.get("running"):
        r = h["running"]
        print(f"HF 1B, {r['attn_implementation']}, compiled={r['compiled']}: cut short")
if "tandem_over_hf_tokens_per_s" in summary:
    print(f"tandem / HF tokens/s: {summary['tandem_over_hf_tokens_per_s']:.2f}x (HF's fastest: "
          f"{hf_best['attn_implementation']}, compiled={hf_best['compiled']})")
PY
cp -f "$res/gpu_check.json" "$out/" 2>/dev/null
echo "gpu_check: done in $((SECONDS - start)) s; results in $out (gpu_check.json, gpu_check.log, gpu_check_results.tar.gz)"
ok=0
for k in tests tests_training; do
  [[ "${status[$k]}" == 0 || "${status[$k]}" == not_selected ]] || ok=1
done
for k in hf_parity bench_1b hf_1b bench_7b; do
  [[ "${status[$k]}" =~ ^(0|skipped|not_selected)$ ]] || ok=1
done
# A sanitizer finding fails the check; a run the budget cut short (124, 137) does not, nor a
# runtime where the tool cannot run the GPU (unavailable).
for k in sanitizer; do
  [[ "${status[$k]:-skipped}" =~ ^(0|skipped|not_selected|unavailable|124|137)$ ]] || ok=1
done
# Steps the time budget or their bound cut short (timeout's 124, or 137 after its kill).
unfinished=()
for k in tests tests_training hf_parity bench_1b hf_1b bench_7b bench_attention sanitizer \
  hf_1b_compiled bench_1b_accumulated bench_1b_flash bench_1b_unpacked; do
  [[ "${status[$k]:-}" == 124 || "${status[$k]:-}" == 137 ]] && unfinished+=("$k")
done
((${#unfinished[@]})) &&
  echo "gpu_check: cut short: ${unfinished[*]}; to run only those: GPU_CHECK_STEPS='${unfinished[*]}' bash bench/gpu_check.sh"
exit $ok
