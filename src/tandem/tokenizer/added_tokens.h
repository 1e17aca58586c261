// Added tokens (special and not): found in the raw text before pre-tokenization, the way HF
// tokenizers' AddedVocabulary does it: leftmost-longest matching, first the tokens with
// normalized=false, then those with normalized=true inside the remaining pieces; single_word,
// lstrip and rstrip adjust or discard a match.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/tokenizer/bpe_model.h"
#include "tandem/tokenizer/normalizer.h"

namespace tandem::tokenizer {

struct AddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
  // What is searched for: `content`, or for normalized=true its normalized form (HF normalizes
  // those tokens' contents with the tokenizer's normalizer before matching them).
  std::string match_text;
};

// A piece of the input: either plain text to pre-tokenize, or an added token's id.
struct TextPiece {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::optional<std::uint32_t> added_id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `added_tokens` is the "added_tokens" array of tokenizer.json; `normalizer` the tokenizer's
  // (null: none). HF does not use the ids written in added_tokens but gives each token (in
  // order) its `model` vocabulary id if its content is a vocabulary key, else the next id after
  // the vocabulary or after the largest id given so far; files HF wrote agree with that.
  AddedVocabulary(const nlohmann::json& added_tokens, const std::string& source,
                  const Normalizer* normalizer, const BpeModel& model);

  // Splits `text` into pieces (offsets into text) at the added tokens with the given
  // `normalized` flag; pieces are never empty. HF matches the tokens with normalized=false in the
  // raw text, then those with normalized=true in each remaining piece once normalized. With
  // `encode_special_tokens` (HF tokenizers' flag of that name) a special token written in the
  // text is matched and then left to the model as plain text.
  void split(std::string_view text, bool normalized, std::vector<TextPiece>& out,
             bool encode_special_tokens = false) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_content(std::string_view content) const;

 private:
  struct MatchSet {
    std::vector<std::uint32_t> by_first_byte[256];  // token indices, longest first
    bool any = false;
  };
  void build(MatchSet& set, bool normalized);
  // Appends the pieces of text[begin, end) found with `set` (HF's find_matches).
  void find_matches(std::string_view text, std::size_t begin, std::size_t end, const MatchSet& set,
                    bool encode_special_tokens, std::vector<TextPiece>& out) const;

  std::vector<AddedToken> tokens_;
  MatchSet plain_;       // normalized = false
  MatchSet normalized_;  // normalized = true
};

}  // namespace tandem::tokenizer
