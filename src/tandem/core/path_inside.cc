#include "tandem/core/path_inside.h"

#include <filesystem>

#include "tandem/core/error.h"

namespace fs = std::filesystem;

namespace tandem::core {
namespace {

// Whether `inner` equals `outer` or lies below it (both absolute and normalised).
bool is_within(const fs::path& outer, const fs::path& inner) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *o != *i) return false;
  }
  return true;
}

}  // namespace

std::string path_inside(const std::string& dir, const std::string& name, const std::string& where) {
  const fs::path relative(name);
  TANDEM_CHECK(!name.empty(), "{}: an empty file name", where);
  TANDEM_CHECK(name.find('\0') == std::string::npos, "{}: file name {:?} holds a NUL byte", where,
               name);
  TANDEM_CHECK(
      !relative.is_absolute() && !relative.has_root_name() && !relative.has_root_directory(),
      "{}: file name '{}' is an absolute path; only names inside {} are allowed", where, name, dir);
  for (const fs::path& part : relative)
    TANDEM_CHECK(part != "..",
                 "{}: file name '{}' climbs out with '..'; only names inside {} are "
                 "allowed",
                 where, name, dir);
  const fs::path joined = fs::path(dir) / relative;
  // Symbolic links: the resolved target must stay inside the resolved directory.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const fs::path target = fs::weakly_canonical(fs::absolute(joined, ec), ec);
  TANDEM_CHECK(!ec, "{}: cannot resolve file name '{}' in {}: {}", where, name, dir, ec.message());
  TANDEM_CHECK(is_within(base, target),
               "{}: file name '{}' leads out of {} (to {}, through a symbolic link)", where, name,
               dir, target.string());
  return joined.string();
}

bool is_plain_entry_of(const std::string& dir, const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) return false;
  const fs::path base = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const fs::path target = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return !ec && is_within(base, target) && target != base;
}

}  // namespace tandem::core
