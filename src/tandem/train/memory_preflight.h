// Before the trainer allocates its buffers on a device: `tandem plan`'s count of the backend
// memory this run needs per rank (the same make_plan, on the run's config, world size and this
// device's free memory) against what the device has room for, so that a run that cannot fit says
// so at start-up, with the strategies and recompute policies that would fit, rather than only at
// the first step's out-of-memory error. On the emulator the count is the first step's peak up to
// the allocator's rounding (tests/cuda/plan_test.cc).
#pragma once

#include <string>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/kernels/backend.h"
#include "tandem/train/plan.h"
#include "tandem/train/train_config.h"

namespace tandem::train {

// The planner's input for a run config at `world_size` ranks on `device`.
PlanInput plan_input_of(const RunConfig& config, int world_size, const DeviceSpec& device);

// The device a backend reports: for a GPU backend, the H200/H100 figures with the memory this
// process can still use (free plus what the backend's allocator already holds; the runtime's
// context is outside both, so no reserve), named after the backend. Only for backends that
// report device memory (MemoryStats::device_total > 0).
DeviceSpec device_spec_of(const kernels::Backend& backend);

// The log lines of the check (none for a backend without device memory): the plan's figure and
// the device's room, and when it does not fit, a warning with the overrides that would. Every rank
// calls it (a collective over `comm`): the room is the least of the ranks' devices, named when it
// is another rank's, since one busy GPU of a node is enough to fail the run.
std::vector<std::string> check_device_memory(const RunConfig& config,
                                             const kernels::Backend& backend,
                                             dist::Communicator& comm);

}  // namespace tandem::train
