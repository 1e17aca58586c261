// File patterns: a plain path or a shell glob, expanded in byte order (Python's sorted()).
#pragma once

#include <string>
#include <vector>

namespace tandem::core {

bool has_wildcard(const std::string& pattern);
// Matches of `pattern`, sorted; a plain path is returned as is if it exists. Never throws: an
// empty result means nothing matched.
std::vector<std::string> expand_glob(const std::string& pattern);

}  // namespace tandem::core
