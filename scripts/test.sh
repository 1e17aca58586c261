#!/usr/bin/env bash
# README command 2 and CI (.ci/run): install what is missing, build, run the whole test suite;
# then the whole suite again under ASan + UBSan (scripts/test_sanitized.sh) and every fuzz target
# for a short fixed time (scripts/fuzz.sh). docs/reliability.md explains the budget.
#   TANDEM_CI_SANITIZE=all        (default) the whole suite again under the sanitizers
#   TANDEM_CI_SANITIZE=inputs     only the test folders that read untrusted input or fault the
#                                 process (io data tokenizer faults): about half the stage's time
#   TANDEM_CI_SANITIZE=0          skip the sanitizer stage
#   TANDEM_CI_FUZZ_SECONDS=N      seconds per fuzz target (default 60; 0: no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, for CI's budget (docs/reliability.md).
stage_start=$SECONDS
stage_done() {
  echo "== test.sh: $1 took $((SECONDS - stage_start)) s (total ${SECONDS} s)"
  stage_start=$SECONDS
}
bash scripts/setup.sh
stage_done setup
bash scripts/build.sh
stage_done build
# Real data the parity tests read (dolma2 tokenizer, Debian-doc corpus); cached after the first run.
bash scripts/fetch_data.sh
stage_done "data fetch"
bash scripts/ctest_longest_first.sh "${TANDEM_BUILD_DIR:-build}"
stage_done "test suite"
case "${TANDEM_CI_SANITIZE:-all}" in
  0) ;;
  inputs) bash scripts/test_sanitized.sh io data tokenizer faults ;;
  *) bash scripts/test_sanitized.sh ;;
esac
stage_done "sanitizer stage"
fuzz_seconds=${TANDEM_CI_FUZZ_SECONDS:-60}
if [[ "$fuzz_seconds" != 0 ]]; then
  bash scripts/fuzz.sh "$fuzz_seconds"
  stage_done "fuzz stage"
fi
