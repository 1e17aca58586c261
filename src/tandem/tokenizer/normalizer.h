// The Unicode normalizers of a tokenizer.json ("NFC", "NFD", "NFKC", "NFKD" and a "Sequence" of
// them), applied as HF tokenizers applies them: with the Unicode 9.0 character data of its
// normalization crate, not the newer data of the ICU that runs them here.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::tokenizer {

class Normalizer {
 public:
  // The "normalizer" object of tokenizer.json; null (or absent) gives nullptr. Throws
  // tandem::core::Error naming `source` for any other normalizer type.
  static std::unique_ptr<const Normalizer> from_json(const nlohmann::json& normalizer,
                                                     const std::string& source);
  ~Normalizer();

  // The normalized form of valid UTF-8 `text`: `text` itself when it is already normalized (the
  // common case, no copy), else a view of `buffer`, which it overwrites.
  std::string_view apply(std::string_view text, std::string& buffer) const;

  // E.g. "NFC" or "Sequence[NFD, NFKC]".
  const std::string& description() const { return description_; }

 private:
  struct Forms;
  Normalizer();

  std::unique_ptr<Forms> forms_;
  std::string description_;
};

}  // namespace tandem::tokenizer
