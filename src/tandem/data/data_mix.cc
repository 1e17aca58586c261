#include "tandem/data/data_mix.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem::data {
namespace {

constexpr std::string_view kPlaceholder = "{TOKENIZER}";

std::string_view strip(std::string_view s) {
  const char* space = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

std::string replace_all(std::string s, std::string_view what, const std::string& with) {
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size()))
    s.replace(at, what.size(), with);
  return s;
}

}  // namespace

std::vector<MixEntry> read_data_mix(const std::string& manifest, const std::string& base_dir,
                                    const std::string& tokenizer_id) {
  TANDEM_CHECK(!base_dir.empty(), "{}: a data mix needs mix_base_dir", manifest);
  TANDEM_CHECK(!tokenizer_id.empty(),
               "{}: a data mix needs mix_tokenizer_id (the text that replaces {{TOKENIZER}})",
               manifest);
  const std::string base = base_dir.back() == '/' ? base_dir : base_dir + "/";
  const std::string text = core::read_file(manifest);
  std::vector<MixEntry> out;
  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line = strip(std::string_view(text).substr(start, end - start));
    start = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const auto comma = line.find(',');
    TANDEM_CHECK(comma != std::string_view::npos && line.find(',', comma + 1) == line.npos,
                 "{} line {}: expected 'label,path' (exactly one comma), got '{}'", manifest,
                 line_no, line);
    std::string_view path = line.substr(comma + 1);
    TANDEM_CHECK(path.find(kPlaceholder) != std::string_view::npos,
                 "{} line {}: the path '{}' has no {{TOKENIZER}} placeholder (OLMo-core refuses "
                 "such a line)",
                 manifest, line_no, path);
    // Names from a file stay inside its base directory (docs/reliability.md): OLMo-core's
    // manifests hold relative paths without '..'.
    const std::filesystem::path relative{std::string(path)};
    TANDEM_CHECK(!relative.is_absolute() &&
                     std::none_of(relative.begin(), relative.end(),
                                  [](const std::filesystem::path& p) { return p == ".."; }),
                 "{} line {}: the path '{}' is absolute or climbs out with '..'; paths are "
                 "relative to mix_base_dir",
                 manifest, line_no, path);
    out.push_back({std::string(line.substr(0, comma)),
                   base + replace_all(std::string(path), kPlaceholder, tokenizer_id), line_no});
  }
  TANDEM_CHECK(!out.empty(), "{}: the data mix lists no files", manifest);
  return out;
}

}  // namespace tandem::data
