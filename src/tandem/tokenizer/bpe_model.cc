#include "tandem/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/tokenizer/byte_level.h"

namespace tandem::tokenizer {

void MergeTable::build(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries) {
  std::size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity *= 2;
  entries_.assign(capacity, Entry{});
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  for (const auto& [key, value] : entries) {
    std::size_t i = slot(key);
    while (entries_[i].key != kEmpty && entries_[i].key != key) i = (i + 1) & mask_;
    entries_[i].key = key;
    entries_[i].value = value;  // a repeated pair keeps its last rank, as HF's map does
  }
}

namespace {

std::string string_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "";
  return j[key].get<std::string>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& source) {
  TANDEM_CHECK(model.is_object() && model.contains("vocab") && model["vocab"].is_object(),
               "{}: model.vocab is missing or not an object", source);
  TANDEM_CHECK(model.contains("merges") && model["merges"].is_array(),
               "{}: model.merges is missing or not an array", source);
  TANDEM_CHECK(!model.value("byte_fallback", false), "{}: BPE byte_fallback is not supported",
               source);
  TANDEM_CHECK(string_field(model, "continuing_subword_prefix").empty() &&
                   string_field(model, "end_of_word_suffix").empty(),
               "{}: BPE continuing_subword_prefix/end_of_word_suffix are not supported", source);
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    TANDEM_CHECK(model["dropout"].get<double>() == 0.0, "{}: BPE dropout is not supported", source);
  }
  ignore_merges_ = model.value("ignore_merges", false);
  fuse_unk_ = model.value("fuse_unk", false);

  // Ids index dense tables, so each must fit 32 bits (HF's u32; nlohmann would wrap 2^32 to 0)
  // and the id space must not be mostly holes (one stray huge id would allocate gigabytes).
  std::uint64_t max_id = 0;
  for (const auto& [key, value] : model["vocab"].items()) {
    TANDEM_CHECK(
        value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0),
        "{}: vocab entry {:?} has no valid id (got {})", source, key, io::json_excerpt(value));
    const std::uint64_t id = value.get<std::uint64_t>();
    TANDEM_CHECK(id <= kMaxTokenId, "{}: vocab entry {:?} has id {}, which does not fit 32 bits",
                 source, key, id);
    max_id = std::max(max_id, id);
  }
  const std::uint64_t count = model["vocab"].size();
  TANDEM_CHECK(count == 0 || max_id < max_sparse_vocab_size(count),
               "{}: vocab ids go up to {} for only {} tokens (mostly unused ids; corrupt?)", source,
               max_id, count);
  id_to_bytes_.assign(model["vocab"].empty() ? 0 : max_id + 1, std::string());
  id_to_key_.assign(id_to_bytes_.size(), std::string());
  vocab_.reserve(model["vocab"].size() * 2);
  std::vector<bool> seen(id_to_bytes_.size(), false);
  // Entries with characters outside the byte-level alphabet (GPT-NeoX's vocabulary holds its
  // added whitespace tokens so, e.g. two real spaces) can never be made from a byte-level word:
  // HF keeps them, encoding never reaches them, and decoding gives their own UTF-8.
  for (const auto& [key, value] : model["vocab"].items()) {
    auto id = value.get<std::uint32_t>();
    auto raw = tokenizer::byte_level::to_bytes(key);
    TANDEM_CHECK(!seen[id], "{}: vocab entries {:?} and {:?} have the same id {}", source,
                 id_to_key_[id], key, id);
    seen[id] = true;
    id_to_key_[id] = key;
    if (!raw) {
      unreachable_[key] = id;
      id_to_bytes_[id] = key;
      continue;
    }
    vocab_[*raw] = id;
    id_to_bytes_[id] = *raw;
  }
  vocab_entries_ = vocab_.size() + unreachable_.size();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  std::string unk = string_field(model, "unk_token");
  if (!unk.empty()) {
    auto raw = tokenizer::byte_level::to_bytes(unk);
    auto it = raw ? vocab_.find(*raw) : vocab_.end();
    TANDEM_CHECK(it != vocab_.end(), "{}: unk_token {:?} is not in the vocabulary", source, unk);
    unk_id_ = it->second;
  }

  std::vector<std::pair<std::uint64_t, std::uint64_t>> entries;
  entries.reserve(model["merges"].size());
  std::uint32_t rank = 0;
  for (const auto& merge : model["merges"]) {
    std::string left, right;
    if (merge.is_string()) {  // "a b" (older files)
      const auto& s = merge.get_ref<const std::string&>();
      auto space = s.find(' ');
      TANDEM_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "{}: merge #{} {:?} is not two tokens separated by one space", source, rank, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {  // ["a", "b"] (newer files)
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      core::fail("{}: merge #{} is neither \"a b\" nor [\"a\", \"b\"]: {}", source, rank,
                 merge.dump());
    }
    auto l = tokenizer::byte_level::to_bytes(left), r = tokenizer::byte_level::to_bytes(right);
    if (!l || !r) {
      // A merge of an unreachable entry never applies; HF still requires its tokens to exist.
      TANDEM_CHECK((l ? vocab_.count(*l) : unreachable_.count(left)) &&
                       (r ? vocab_.count(*r) : unreachable_.count(right)),
                   "{}: merge #{} ({:?} {:?}) uses a token missing from the vocabulary", source,
                   rank, left, right);
      ++rank;
      continue;
    }
    auto li = vocab_.find(*l), ri = vocab_.find(*r), mi = vocab_.find(*l + *r);
    TANDEM_CHECK(li != vocab_.end() && ri != vocab_.end(),
                 "{}: merge #{} ({:?} {:?}) uses a token missing from the vocabulary", source, rank,
                 left, right);
    TANDEM_CHECK(mi != vocab_.end(),
                 "{}: merge #{} ({:?} {:?}) makes a token missing from the vocabulary", source,
                 rank, left, right);
    std::uint64_t key = (static_cast<std::uint64_t>(li->second) << 32) | ri->second;
    entries.emplace_back(key, (static_cast<std::uint64_t>(rank) << 32) | mi->second);
    ++rank;
  }
  merges_.build(entries);
}

std::optional<std::uint32_t> BpeModel::key_to_id(std::string_view key) const {
  if (auto raw = tokenizer::byte_level::to_bytes(key)) return token_to_id(*raw);
  auto it = unreachable_.find(std::string(key));
  if (it == unreachable_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::uint32_t> BpeModel::token_to_id(std::string_view raw_bytes) const {
  auto it = vocab_.find(std::string(raw_bytes));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Few symbols: scan for the best pair each round (no heap); same result as the heap order
// (lowest rank, then leftmost position).
void BpeModel::merge_small(std::vector<std::uint32_t>& s) const {
  while (s.size() > 1) {
    std::uint64_t best = MergeTable::kNone;
    std::size_t best_pos = 0;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      std::uint64_t m = merges_.find(s[i], s[i + 1]);
      if (m < best) {  // rank is in the high bits, so < compares ranks; ties keep the leftmost
        best = m;
        best_pos = i;
      }
    }
    if (best == MergeTable::kNone) return;
    s[best_pos] = static_cast<std::uint32_t>(best);
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

// Many symbols (long runs of punctuation or spaces): HF's priority-queue algorithm over a
// linked list of symbols.
void BpeModel::merge_large(std::vector<std::uint32_t>& s) const {
  const std::size_t n = s.size();
  std::vector<std::int64_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int64_t>(i) + 1 : -1;
  }
  struct Item {
    std::uint32_t rank;
    std::uint32_t pos;
    std::uint32_t new_id;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  auto push = [&](std::size_t pos) {
    if (next[pos] < 0) return;
    std::uint64_t m = merges_.find(s[pos], s[static_cast<std::size_t>(next[pos])]);
    if (m != MergeTable::kNone)
      queue.push({static_cast<std::uint32_t>(m >> 32), static_cast<std::uint32_t>(pos),
                  static_cast<std::uint32_t>(m)});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    Item top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    auto right = static_cast<std::size_t>(next[top.pos]);
    std::uint64_t m = merges_.find(s[top.pos], s[right]);
    if (m == MergeTable::kNone || static_cast<std::uint32_t>(m) != top.new_id) continue;
    s[top.pos] = top.new_id;
    alive[right] = 0;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[static_cast<std::size_t>(next[right])] = top.pos;
    if (prev[top.pos] >= 0) push(static_cast<std::size_t>(prev[top.pos]));
    push(top.pos);
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (alive[i]) s[w++] = s[i];
  s.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<std::uint32_t> symbols;
  symbols.clear();
  // A byte missing from the vocabulary becomes unk (fused when asked) or is dropped, as HF does.
  bool pending_unk = false;
  for (unsigned char b : word) {
    std::int64_t id = byte_ids_[b];
    if (id >= 0) {
      if (pending_unk) symbols.push_back(*unk_id_);
      pending_unk = false;
      symbols.push_back(static_cast<std::uint32_t>(id));
    } else if (unk_id_) {
      if (pending_unk && !fuse_unk_) symbols.push_back(*unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(*unk_id_);
  if (symbols.size() <= 48) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace tandem::tokenizer
