#include "tandem/core/glob.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

namespace tandem::core {

bool has_wildcard(const std::string& pattern) {
  return pattern.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  if (!has_wildcard(pattern)) {
    std::error_code ec;
    if (std::filesystem::exists(pattern, ec)) return {pattern};
    return {};
  }
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tandem::core
