#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) into build-fuzz/ and runs each for a
# fixed time, as many at once as there are cores. A finding (crash, sanitizer report, uncaught
# non-tandem exception, timeout, out-of-memory) fails the script; the input that caused it is
# left in build-fuzz/findings/<target>/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#   scripts/fuzz.sh 600                                   the long campaign (docs/reliability.md)
# Working corpora grow in build-fuzz/corpus/<target>/ (seeded from fuzz/corpus/<target>/) and
# carry over between runs; a summary table (executions, corpus size, findings) ends the output.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
BUILD_DIR=${TANDEM_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${TANDEM_FUZZ_JOBS:-$(nproc)}

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTANDEM_FUZZ=ON -DTANDEM_WITH_NCCL=OFF -DTANDEM_WITH_CUDA=OFF -DTANDEM_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target fuzz_all -j "$(nproc)"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for exe in "$BUILD_DIR"/fuzz/fuzz_*; do targets+=("$(basename "$exe" | sed 's/^fuzz_//')"); done
fi

# Leak detection is off: parsers that throw mid-way are fine as long as nothing crashes. The
# campaigns and the re-runs of their hangs (below) run under the same options.
sanitized=(env ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)

run_target() {
  local name=$1 corpus="$BUILD_DIR/corpus/$1" findings="$BUILD_DIR/findings/$1"
  mkdir -p "$corpus" "$findings"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  # -timeout: one input taking 10 s is a finding (a hang); -rss_limit_mb: so is 2 GB of memory.
  "${sanitized[@]}" "$BUILD_DIR/fuzz/fuzz_$name" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1 \
    >"$BUILD_DIR/findings/$name.log" 2>&1
}

mkdir -p "$BUILD_DIR/findings"
echo "fuzz: ${#targets[@]} targets x ${SECONDS_PER_TARGET}s, $JOBS at a time"
status=0
running=0
pids=()
names=()
for name in "${targets[@]}"; do
  run_target "$name" &
  pids+=($!)
  names+=("$name")
  running=$((running + 1))
  if ((running >= JOBS)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

# A hang (libFuzzer's timeout-* or slow-unit-*: an input that ran 10 s or more) may be the whole
# process stalling, not the input: a 13-s SIGSTOP of a fuzzer gives a timeout finding, and one
# campaign here wrote a 13-s slow unit that ran 200 times in 90 ms alone. Each is run again alone:
# one that finishes within the timeout is set aside in findings/<target>.stalls/ and reported, not
# counted; one that hangs again stays a finding (counted by its file, not by the log's timeout).
for name in "${names[@]}"; do
  for unit in "$BUILD_DIR/findings/$name"/{timeout,slow-unit}-*; do
    [[ -e "$unit" ]] || continue
    start_ns=$(date +%s%N)
    if timeout 60 "${sanitized[@]}" "$BUILD_DIR/fuzz/fuzz_$name" -timeout=10 -runs=3 "$unit" \
      >/dev/null 2>&1; then
      mkdir -p "$BUILD_DIR/findings/$name.stalls"
      mv "$unit" "$BUILD_DIR/findings/$name.stalls/"
      echo "fuzz: $name: $(basename "$unit") ran 3 times alone in" \
        "$((($(date +%s%N) - start_ns) / 1000000)) ms: the process stalled, not the input" \
        "(set aside in $BUILD_DIR/findings/$name.stalls/)"
    fi
  done
done

printf '%-22s %12s %10s %8s  %s\n' target executions corpus findings result
for name in "${names[@]}"; do
  log="$BUILD_DIR/findings/$name.log"
  # No final stats (the fuzzer never ran, or died before printing them) is a failure of its own.
  runs=$(grep -so 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' |
    tail -1 || true)
  corpus=$(find "$BUILD_DIR/corpus/$name" -type f | wc -l)
  found=$(find "$BUILD_DIR/findings/$name" -type f | wc -l)
  # Every error but a timeout, which its file above counts (grep -c reads to the end: no SIGPIPE).
  errors=$(grep -v 'ERROR: libFuzzer: timeout' "$log" |
    grep -c 'ERROR: \(libFuzzer\|AddressSanitizer\|UndefinedBehaviorSanitizer\)\|runtime error:' ||
    true)
  if ((found > 0 || ${errors:-0} > 0)); then
    result="FINDING (see $log)"
    status=1
  elif [[ -z "$runs" ]]; then
    result="NO STATS (see $log)"
    status=1
  else
    result=ok
  fi
  printf '%-22s %12s %10s %8s  %s\n' "$name" "${runs:-?}" "$corpus" "$found" "$result"
done
exit $status
