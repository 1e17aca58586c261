// A Hugging Face tokenizer.json byte-level BPE tokenizer (dolma2, GPT-2, GPT-NeoX and the like)
// that gives exactly the ids HF tokenizers gives. The Tokenizer is immutable and shared between
// threads; each thread encodes through its own Encoder, which holds a cache of word -> ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tandem/tokenizer/added_tokens.h"
#include "tandem/tokenizer/bpe_model.h"
#include "tandem/tokenizer/normalizer.h"
#include "tandem/tokenizer/pre_tokenizer.h"

namespace tandem::tokenizer {

class Tokenizer {
 public:
  // Throws tandem::core::Error naming the file for a missing/unreadable file, invalid JSON, or an
  // unsupported model, normalizer, pre-tokenizer or decoder.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(const std::string& json_text, const std::string& source);

  // Encodes valid UTF-8 text (throws Error otherwise); no special tokens are added, added tokens
  // written in the text are recognised (as HF's encode does). Convenience: builds a fresh
  // Encoder each call; use an Encoder for throughput.
  std::vector<std::uint32_t> encode(std::string_view text) const;

  // HF's ByteLevel decoding; invalid UTF-8 in the result becomes U+FFFD (decode) or is kept
  // (decode_bytes). Throws Error for an id outside the vocabulary.
  std::string decode(const std::vector<std::uint32_t>& ids, bool skip_special = false) const;
  std::string decode_bytes(const std::vector<std::uint32_t>& ids, bool skip_special = false) const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  std::uint64_t vocab_size() const { return id_to_bytes_.size(); }
  // The tokenizer.json normalizer (NFC etc.), or null when it has none.
  const Normalizer* normalizer() const { return normalizer_.get(); }
  // The id of an added token's content, else of a vocabulary entry (raw bytes).
  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  // The end-of-text id: the special added token "<|endoftext|>" when present.
  std::optional<std::uint32_t> eos_id() const;
  const std::string& source() const { return source_; }
  const std::string& sha256() const { return sha256_; }  // of the tokenizer.json bytes
  const AddedVocabulary& added() const { return *added_; }

 private:
  friend class Encoder;
  Tokenizer() = default;

  std::string source_;
  std::string sha256_;
  std::shared_ptr<const AddedVocabulary> added_;
  std::shared_ptr<const Normalizer> normalizer_;  // null: none
  std::vector<PreTokenizerStep> steps_;
  std::shared_ptr<const BpeModel> model_;
  std::vector<std::string> id_to_bytes_;  // decoded bytes of every id
  std::vector<char> is_special_;
};

class Encoder {
 public:
  // encode_special_tokens: special tokens written in the text are encoded as text (HF tokenizers'
  // Tokenizer.encode_special_tokens; dolma's --tokenizer.encode_special_tokens).
  explicit Encoder(const Tokenizer& tokenizer, bool encode_special_tokens = false);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Appends the ids of `text` to `out`; throws Error if text is not valid UTF-8.
  void encode(std::string_view text, std::vector<std::uint32_t>& out);
  std::vector<std::uint32_t> encode(std::string_view text) {
    std::vector<std::uint32_t> out;
    encode(text, out);
    return out;
  }

 private:
  void pre_tokenize(std::size_t step, std::string_view piece, std::vector<std::uint32_t>& out);
  void encode_word(std::string_view word, std::vector<std::uint32_t>& out);

  struct Level {
    std::unique_ptr<PcreRegex::Matcher> matcher;  // for the step's regex, if it has one
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const;
  };

  const Tokenizer& tokenizer_;
  bool encode_special_tokens_ = false;
  std::vector<Level> levels_;
  std::vector<TextPiece> pieces_;
  std::vector<TextPiece> normalized_pieces_;
  std::string normalized_;  // a piece's normalized text, when normalizing changed it
  // Word cache: raw bytes -> (offset, count) into cache_ids_.
  std::unordered_map<std::string, std::pair<std::uint32_t, std::uint32_t>, StringHash,
                     std::equal_to<>>
      cache_;
  std::vector<std::uint32_t> cache_ids_;
};

}  // namespace tandem::tokenizer
