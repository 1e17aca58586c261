#!/usr/bin/env bash
# The CTest suite of a build folder on every core, the tests known to be long started first, so
# that the last minutes are not one long test on one core. CTest orders by the costs of earlier
# runs in the folder; a fresh folder has none, so it gets tests/ctest_costs.txt (seconds under the
# sanitizers, the slowest stage; docs/reliability.md says how to refresh it). Order only: every
# test runs. Passive OpenMP waits: two test processes share the cores without spinning against
# each other.
#   scripts/ctest_longest_first.sh BUILD_DIR [more ctest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$1"
shift
costs=Testing/Temporary/CTestCostData.txt
[[ -f "$costs" ]] || { mkdir -p Testing/Temporary && cp "$root/tests/ctest_costs.txt" "$costs"; }
OMP_WAIT_POLICY=passive exec ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"
