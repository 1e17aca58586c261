// OLMo-core's data-mix manifests (olmo_core/data/mixes/*.txt, read by DataMix.build): one token
// file per line as `label,path`, where the path holds the placeholder {TOKENIZER} and is relative
// to a base directory; blank lines and lines starting with '#' are skipped. The order of the lines
// is the order of the files (and so of the global instance ids): nothing is sorted, the same
// basename may appear in different folders and the same file may appear twice.
#pragma once

#include <string>
#include <vector>

namespace tandem::data {

struct MixEntry {
  std::string label;
  std::string path;  // base_dir + the line's path, {TOKENIZER} replaced
  int line = 0;      // 1-based line in the manifest
};

// Reads `manifest` as OLMo-core's DataMix.build does: each kept line (stripped of surrounding
// whitespace) must split on ',' into exactly two fields (label, path), the path must contain
// {TOKENIZER}; every occurrence is replaced by `tokenizer_id` and the result is appended to
// `base_dir` (a '/' added when missing). Errors name the manifest and the line.
std::vector<MixEntry> read_data_mix(const std::string& manifest, const std::string& base_dir,
                                    const std::string& tokenizer_id);

}  // namespace tandem::data
