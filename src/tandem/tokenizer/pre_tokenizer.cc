#include "tandem/tokenizer/pre_tokenizer.h"

#include <cctype>

#include "tandem/core/error.h"

namespace tandem::tokenizer {

const char* const kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

SplitBehavior parse_behavior(const std::string& name, const std::string& source) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  core::fail("{}: unknown Split behavior {:?}", source, name);
}

std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80)
      out += '\\';
    out += c;
  }
  return out;
}

void parse_into(const nlohmann::json& p, const std::string& source,
                std::vector<PreTokenizerStep>& steps) {
  TANDEM_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(),
               "{}: pre_tokenizer entry has no type: {}", source, p.dump());
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    TANDEM_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(),
                 "{}: Sequence pre_tokenizer lacks 'pretokenizers'", source);
    for (const auto& child : p["pretokenizers"]) parse_into(child, source, steps);
  } else if (type == "Split") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kSplit;
    TANDEM_CHECK(p.contains("pattern") && p["pattern"].is_object(),
                 "{}: Split pre_tokenizer lacks a pattern", source);
    const auto& pattern = p["pattern"];
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String")) {
      regex = escape_literal(pattern["String"].get<std::string>());
    } else {
      core::fail("{}: Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}: {}", source,
                 pattern.dump());
    }
    try {
      step.regex = std::make_shared<PcreRegex>(regex);
    } catch (const core::Error& e) {
      core::fail("{}: Split pre_tokenizer: {}", source, e.what());
    }
    step.behavior = parse_behavior(p.value("behavior", std::string("Isolated")), source);
    step.invert = p.value("invert", false);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = p.value("add_prefix_space", true);
    if (p.value("use_regex", true)) step.regex = std::make_shared<PcreRegex>(kByteLevelRegex);
    steps.push_back(std::move(step));
  } else {
    core::fail(
        "{}: pre_tokenizer type {:?} is not supported (supported: Sequence, Split, ByteLevel)",
        source, type);
  }
}

}  // namespace

std::vector<PreTokenizerStep> parse_pre_tokenizer(const nlohmann::json& p,
                                                  const std::string& source) {
  TANDEM_CHECK(!p.is_null(),
               "{}: no pre_tokenizer; only byte-level BPE tokenizers (with a ByteLevel "
               "pre-tokenizer) are supported",
               source);
  std::vector<PreTokenizerStep> steps;
  parse_into(p, source, steps);
  bool seen_byte_level = false;
  for (const auto& s : steps) {
    if (s.kind == PreTokenizerStep::Kind::kByteLevel) {
      TANDEM_CHECK(!seen_byte_level, "{}: more than one ByteLevel pre-tokenizer is not supported",
                   source);
      seen_byte_level = true;
    } else {
      TANDEM_CHECK(!seen_byte_level, "{}: a Split after ByteLevel is not supported", source);
    }
  }
  TANDEM_CHECK(seen_byte_level,
               "{}: the pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are "
               "supported",
               source);
  return steps;
}

}  // namespace tandem::tokenizer
