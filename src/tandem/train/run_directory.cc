#include "tandem/train/run_directory.h"

#include <filesystem>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

bool non_empty_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0;
}

fs::path first_unused_previous(const fs::path& run) {
  for (int n = 1;; ++n) {
    fs::path p = run / fmt::format("previous-{}", n);
    if (!fs::exists(fs::symlink_status(p))) return p;
  }
}

}  // namespace

std::string prepare_start_from_scratch(const std::string& run_dir, bool fresh_start,
                                       const std::vector<std::string>& damaged, bool leader) {
  const fs::path run(run_dir);
  const fs::path checkpoints = run / "checkpoints";
  const fs::path metrics = run / "metrics.jsonl";
  // Folders with a part of a checkpoint were checkpoints once (saves are atomic, so a save never
  // leaves a half one under its final name): damaged, not stray. A step-N folder with none of
  // them (empty, someone's notes) is stray: warned about, never a reason to stop.
  std::vector<std::string> found;
  for (const std::string& dir : list_checkpoints(checkpoints.string())) {
    for (const char* part : {"manifest.json", "state.json", "model", "optim"})
      if (fs::exists(fs::symlink_status(fs::path(dir) / part))) {
        found.push_back(dir);
        break;
      }
  }
  if (!found.empty() && !fresh_start) {
    std::string why;
    for (const auto& d : damaged) why += "\n  " + d;
    core::fail(
        "{}: none of its {} checkpoint(s) verifies, so the run cannot resume, and nothing was "
        "changed:{}\nRepair or move them, point trainer.save_folder elsewhere, or set "
        "trainer.fresh_start=true to train again from step 0 (the checkpoints and metrics.jsonl "
        "then move to {}/previous-N/).",
        run_dir, found.size(), why, run_dir);
  }
  std::error_code ec;
  const bool move_checkpoints =
      fresh_start && fs::is_directory(checkpoints, ec) && !fs::is_empty(checkpoints, ec);
  // Metrics of steps that no checkpoint holds (a run killed before its first save, or one whose
  // checkpoints all failed): kept, out of the way of the new run's log.
  const bool move_metrics = non_empty_file(metrics);
  if (!move_checkpoints && !move_metrics) return "";
  const fs::path previous = first_unused_previous(run);
  if (leader) {
    fs::create_directories(previous);
    if (move_checkpoints) fs::rename(checkpoints, previous / "checkpoints");
    if (move_metrics) fs::rename(metrics, previous / "metrics.jsonl");
  }
  return fmt::format("starting from step 0; the earlier {} moved to {}",
                     move_checkpoints && move_metrics ? "checkpoints and metrics.jsonl"
                     : move_checkpoints               ? "checkpoints"
                                                      : "metrics.jsonl",
                     previous.string());
}

}  // namespace tandem::train
