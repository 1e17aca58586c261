// File names read from files (checkpoint manifests, optimizer and HF shard indices, sidecars) are
// only ever resolved inside the directory that holds them: an absolute name, a '..' component or
// a symbolic link that leads out is an error, for reading as for deleting.
#pragma once

#include <string>

namespace tandem::core {

// `dir`/`name` after checking that `name` is relative, has no '..' and, once symbolic links are
// resolved, still lies inside `dir`. Errors are tandem::Error naming `where` (the file that
// holds the name) and the name.
std::string path_inside(const std::string& dir, const std::string& name, const std::string& where);

// True when `path` is a real directory entry of `dir` (not a symbolic link, not outside it).
bool is_plain_entry_of(const std::string& dir, const std::string& path);

}  // namespace tandem::core
