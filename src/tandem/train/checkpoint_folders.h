// The folders of a run's checkpoints, shared by saving (checkpoint.cc) and choosing one
// (checkpoint_choice.cc): step-N names, temporaries of killed saves, and which checkpoints this
// process wrote or verified. Internal to train/checkpoint*.cc.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::train {

// The step of a checkpoint directory name (step-N, at least 6 digits), or -1 for another name
// (or one too large).
std::int64_t step_of_name(const std::string& name);

// Temporaries of saves that were killed (.step-N.partial) or replaced (.step-N.replaced):
// after a save of this process succeeded none of them belongs to a save in flight.
void remove_stale_temporaries(const std::string& checkpoints_dir);

// Checkpoints this process wrote or fully verified, keyed by directory with the manifest text
// they had: pruning counts only verified checkpoints, and hashing every kept checkpoint at each
// save would read gigabytes. A changed manifest means the entry no longer applies.
void remember_verified(const std::string& dir, const std::string& manifest_text);
bool known_verified(const std::string& dir);

// The checkpoint was saved as ephemeral ("ephemeral": true in its state.json); false when
// state.json is missing or unreadable (such a checkpoint is judged by its verification).
bool marked_ephemeral(const std::string& dir);

}  // namespace tandem::train
