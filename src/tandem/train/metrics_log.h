// metrics.jsonl (one JSON object per logged step, flushed as written) and the console progress
// line. On resume the log is cut back to the checkpoint's step, so a resumed run's log equals an
// uninterrupted one's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace tandem::train {

class MetricsLog {
 public:
  // Opens `path` for appending after dropping every line whose "step" is greater than keep_upto.
  MetricsLog(const std::string& path, std::int64_t keep_upto);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "42s"

}  // namespace tandem::train
