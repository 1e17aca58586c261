// Starting a run from step 0 in a directory that already holds something. Nothing is deleted:
// when every checkpoint fails verification the run stops with an error naming them (one may be
// a byte from usable) unless trainer.fresh_start is set, and then the old checkpoints and
// metrics.jsonl move to <run>/previous-N/ rather than being overwritten or cut back.
#pragma once

#include <string>
#include <vector>

namespace tandem::train {

// Called when no checkpoint of `run_dir` verifies (or a fresh start was asked); `damaged` holds
// why each failed. A step-N folder holding no part of a checkpoint is stray, not damaged, and
// does not stop the run. Only the leader (rank 0) moves files. Returns a line for the log ("" when
// the directory was empty of checkpoints and metrics).
std::string prepare_start_from_scratch(const std::string& run_dir, bool fresh_start,
                                       const std::vector<std::string>& damaged, bool leader);

}  // namespace tandem::train
