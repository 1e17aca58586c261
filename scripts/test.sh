#!/usr/bin/env bash
# README command 2 and CI (.ci/run): install what is missing, build, run the whole test suite;
# then the input-reading test folders under ASan + UBSan (scripts/test_sanitized.sh) and every fuzz target for
# a short fixed time (scripts/fuzz.sh). docs/reliability.md explains the budget.
#   TANDEM_CI_SANITIZE=inputs     the sanitizer stage over the test folders that read untrusted
#                                 input: io data tokenizer faults
#   TANDEM_CI_SANITIZE=all        the whole suite under the sanitizers
#   TANDEM_CI_SANITIZE=0          (default) skip the sanitizer stage
#   TANDEM_CI_FUZZ_SECONDS=N      seconds per fuzz target (default 0: no fuzzing)
# The sanitizer and fuzz stages are off by default until a clean-clone CI run has passed with them
# after the CUDA, recompute and bf16 merges (docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Real data the parity tests read (dolma2 tokenizer, Debian-doc corpus); cached after the first run.
bash scripts/fetch_data.sh
(
  cd "${TANDEM_BUILD_DIR:-build}"
  # Passive OpenMP waits: two test processes share the cores without spinning against each other.
  OMP_WAIT_POLICY=passive ctest --output-on-failure -j "$(nproc)" --timeout 900
)
case "${TANDEM_CI_SANITIZE:-0}" in
  0) ;;
  all) bash scripts/test_sanitized.sh ;;
  *) bash scripts/test_sanitized.sh io data tokenizer faults ;;
esac
fuzz_seconds=${TANDEM_CI_FUZZ_SECONDS:-0}
if [[ "$fuzz_seconds" != 0 ]]; then
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
