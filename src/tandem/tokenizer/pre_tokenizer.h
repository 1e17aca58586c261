// Pre-tokenizers of byte-level tokenizer.json files: Split (regex or literal, with its behaviour
// and invert flag), ByteLevel (optional GPT-2 regex, add_prefix_space) and Sequence (flattened).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/tokenizer/pcre_regex.h"

namespace tandem::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const PcreRegex> regex;  // Split's pattern, or ByteLevel's when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only
};

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is true.
extern const char* const kByteLevelRegex;

// Parses the "pre_tokenizer" object into a flat list of steps. Throws Error naming `source` for
// unsupported types, and when the configuration is not byte-level (no ByteLevel step, or a Split
// after ByteLevel, which would see the byte-level alphabet rather than text).
std::vector<PreTokenizerStep> parse_pre_tokenizer(const nlohmann::json& pre_tokenizer,
                                                  const std::string& source);

}  // namespace tandem::tokenizer
