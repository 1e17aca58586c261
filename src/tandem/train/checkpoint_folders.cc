#include "tandem/train/checkpoint_folders.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <utility>
#include <vector>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/train/checkpoint.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

std::mutex verified_mutex;
std::map<std::string, std::string> verified_manifests;  // directory -> manifest text

}  // namespace

std::int64_t step_of_name(const std::string& name) {
  static const std::regex kStepDir(R"(step-(\d{6,}))");
  std::smatch m;
  if (!std::regex_match(name, m, kStepDir)) return -1;
  std::int64_t step = -1;
  const std::string digits = m[1];
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size() ? step : -1;
}

void remove_stale_temporaries(const std::string& checkpoints_dir) {
  static const std::regex kTemporary(R"(\.step-\d{6,}\.(partial|replaced))");
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (fs::is_directory(it->symlink_status(ec)) && std::regex_match(name, kTemporary))
      stale.push_back(it->path());
  }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

void remember_verified(const std::string& dir, const std::string& manifest_text) {
  std::lock_guard<std::mutex> lock(verified_mutex);
  verified_manifests[fs::absolute(dir).lexically_normal().string()] = manifest_text;
}

bool known_verified(const std::string& dir) {
  std::string text;
  try {
    text = core::read_file((fs::path(dir) / "manifest.json").string());
  } catch (const core::Error&) {
    return false;
  }
  std::lock_guard<std::mutex> lock(verified_mutex);
  auto it = verified_manifests.find(fs::absolute(dir).lexically_normal().string());
  return it != verified_manifests.end() && it->second == text;
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  for (fs::directory_iterator it(checkpoints_dir, ec), end; !ec && it != end; it.increment(ec)) {
    // Real directories only: a symbolic link named step-N is never read from or deleted.
    const fs::file_status status = it->symlink_status(ec);
    if (ec || !fs::is_directory(status)) continue;
    const std::int64_t step = step_of_name(it->path().filename().string());
    if (step >= 0) found.emplace_back(step, it->path().string());
  }
  TANDEM_CHECK(!ec, "cannot list checkpoints in {}: {}", checkpoints_dir, ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

bool marked_ephemeral(const std::string& dir) {
  try {
    const nlohmann::json state = io::read_json_file((fs::path(dir) / "state.json").string());
    return state.is_object() && state.value("ephemeral", false) == true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tandem::train
