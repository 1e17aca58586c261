// The BPE model of a byte-level tokenizer.json, working directly on raw bytes: vocabulary keys
// are decoded from the byte-level alphabet once at load time, so encoding never builds the
// alphabet strings. Merging follows HF tokenizers: repeatedly apply the lowest-ranked merge,
// leftmost first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::tokenizer {

// Open-addressing map from a pair of token ids to (rank, merged id); the hottest lookup.
class MergeTable {
 public:
  void build(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries);
  // Packed (rank << 32 | new_id), or kNone.
  std::uint64_t find(std::uint32_t left, std::uint32_t right) const {
    std::uint64_t key = (static_cast<std::uint64_t>(left) << 32) | right;
    std::size_t i = slot(key);
    while (true) {
      const Entry& e = entries_[i];
      if (e.key == key) return e.value;
      if (e.key == kEmpty) return kNone;
      i = (i + 1) & mask_;
    }
  }
  static constexpr std::uint64_t kNone = ~0ull;

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  struct Entry {
    std::uint64_t key = kEmpty;
    std::uint64_t value = kNone;
  };
  std::size_t slot(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::vector<Entry> entries_;
  std::size_t mask_ = 0;
  int shift_ = 64;
};

// Largest token id a tokenizer.json may use (HF tokenizers' ids are u32).
inline constexpr std::uint64_t kMaxTokenId = 0xFFFFFFFFull;
// Ids index dense tables: the id space may have holes, but at most this many ids for `tokens`
// tokens (a single stray huge id would otherwise allocate gigabytes).
inline std::uint64_t max_sparse_vocab_size(std::uint64_t tokens) { return 4 * tokens + 1024; }

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; `source` names the file in errors.
  BpeModel(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one pre-tokenized word (raw bytes) to `out`.
  void encode_word(std::string_view word, std::vector<std::uint32_t>& out) const;

  std::optional<std::uint32_t> token_to_id(std::string_view raw_bytes) const;
  // The id of a vocabulary key as written in tokenizer.json (byte-level alphabet or not).
  std::optional<std::uint32_t> key_to_id(std::string_view key) const;
  // Raw bytes of every vocabulary entry, indexed by id (empty for ids the model lacks; an
  // entry outside the byte-level alphabet gives its own UTF-8).
  const std::vector<std::string>& id_to_bytes() const { return id_to_bytes_; }
  // Vocabulary keys in the byte-level alphabet as written in the file (for decoding rules).
  const std::vector<std::string>& id_to_key() const { return id_to_key_; }
  std::size_t vocab_entries() const { return vocab_entries_; }

 private:
  void merge_small(std::vector<std::uint32_t>& symbols) const;
  void merge_large(std::vector<std::uint32_t>& symbols) const;

  std::unordered_map<std::string, std::uint32_t> vocab_;  // raw bytes -> id (reachable ones)
  std::size_t vocab_entries_ = 0;
  std::unordered_map<std::string, std::uint32_t> unreachable_;  // keys outside the alphabet
  std::vector<std::string> id_to_bytes_;
  std::vector<std::string> id_to_key_;
  MergeTable merges_;
  std::int64_t byte_ids_[256];  // id of each single byte, -1 if absent
  std::optional<std::uint32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace tandem::tokenizer
