#include "tandem/train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::train {

MetricsLog::MetricsLog(const std::string& path, std::int64_t keep_upto) : path_(path) {
  if (std::filesystem::exists(path)) {
    std::istringstream in(core::read_file(path));
    std::string line, kept;
    std::vector<std::string> lines;
    while (std::getline(in, line))
      if (!line.empty()) lines.push_back(line);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      auto j = nlohmann::json::parse(lines[i], nullptr, false);
      const bool record =
          !j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer();
      // A torn last line (killed mid-write) is dropped like a line from after the checkpoint;
      // anything else that is not a record is not ours to drop.
      if (!record && i + 1 == lines.size()) continue;
      TANDEM_CHECK(record,
                   "{}: line {} is not a metrics record (a JSON object with an integer \"step\"); "
                   "fix or move the file, then resume",
                   path, i + 1);
      if (j["step"].get<std::int64_t>() <= keep_upto) kept += lines[i] + "\n";
    }
    core::write_file_atomic(path, kept);
  }
  file_ = std::fopen(path.c_str(), "a");
  TANDEM_CHECK(file_ != nullptr, "cannot open {}: {}", path, std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  TANDEM_CHECK(
      std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
      "cannot write {}: {}", path_, std::strerror(errno));
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  auto total = static_cast<long long>(s + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02d}m", total / 3600, (total % 3600) / 60);
  if (total >= 60) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

}  // namespace tandem::train
