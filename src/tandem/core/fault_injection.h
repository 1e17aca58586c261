// Test hook for the fault-matrix tests (tests/faults/): with TANDEM_FAULT=<point>[:<n>] in the
// environment, the n-th pass (default the first) through fault_point("<point>") ends the process
// with SIGKILL there, as a power cut or the OOM killer would, at a moment a test could not hit
// by timing alone (inside a checkpoint write). TANDEM_FAULT_RANK=<r> limits it to the process
// whose MPI rank (OMPI_COMM_WORLD_RANK / PMI_RANK) is r. Without TANDEM_FAULT it costs one
// predictable branch.
#pragma once

namespace tandem::core {

void fault_point(const char* name);

}  // namespace tandem::core
