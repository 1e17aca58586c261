#include "tandem/tokenizer/tokenizer.h"

#include <filesystem>

#include <xxhash.h>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/utf8.h"
#include "tandem/io/json.h"
#include "tandem/tokenizer/byte_level.h"

namespace tandem::tokenizer {
namespace {

constexpr std::size_t kMaxCachedWordBytes = 256;
constexpr std::size_t kMaxCacheEntries = 1 << 20;

void check_supported(const nlohmann::json& j, const std::string& source) {
  TANDEM_CHECK(j.is_object(), "{}: not a tokenizer.json object", source);
  TANDEM_CHECK(j.contains("model") && j["model"].is_object(), "{}: no \"model\" object", source);
  const auto& model = j["model"];
  std::string type = model.contains("type") ? model["type"].get<std::string>() : "BPE";
  TANDEM_CHECK(type == "BPE",
               "{}: model type {:?} is not supported (only byte-level BPE tokenizers are)", source,
               type);
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    std::string decoder = j["decoder"].value("type", std::string("?"));
    TANDEM_CHECK(decoder == "ByteLevel", "{}: decoder {:?} is not supported (only ByteLevel)",
                 source, decoder);
  }
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    // ByteLevel post-processing only trims offsets; anything that adds tokens is refused.
    std::string post = j["post_processor"].value("type", std::string("?"));
    TANDEM_CHECK(post == "ByteLevel",
                 "{}: post_processor {:?} is not supported (it would add tokens)", source, post);
  }
}

// HF's ByteLevel decoder maps each token's characters back to bytes, or keeps the token's own
// UTF-8 when a character lies outside the byte-level alphabet.
std::string decoded_bytes_of(const std::string& token_text) {
  auto raw = tokenizer::byte_level::to_bytes(token_text);
  return raw ? *raw : token_text;
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  TANDEM_CHECK(std::filesystem::exists(path), "tokenizer file {} does not exist", path);
  std::string text = core::read_file(path);
  Tokenizer t = from_json(text, path);
  return t;
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& source) {
  // Strict: a repeated key (e.g. two "model" objects) is an error rather than "last one wins".
  nlohmann::json j = io::parse_json(json_text, source);
  Tokenizer t;
  t.source_ = source;
  t.sha256_ = core::sha256_hex(json_text);
  try {
    check_supported(j, source);
    t.model_ = std::make_shared<BpeModel>(j["model"], source);
    t.normalizer_ = Normalizer::from_json(
        j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), source);
    t.added_ = std::make_shared<AddedVocabulary>(
        j.contains("added_tokens") ? j["added_tokens"] : nlohmann::json(), source,
        t.normalizer_.get(), *t.model_);
    t.steps_ = parse_pre_tokenizer(
        j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(), source);
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: malformed tokenizer.json: {}", source, e.what());
  }
  std::size_t size = t.model_->id_to_bytes().size();
  for (const auto& a : t.added_->tokens())
    size = std::max<std::size_t>(size, a.id + std::size_t{1});
  const std::uint64_t tokens = t.model_->vocab_entries() + t.added_->tokens().size();
  TANDEM_CHECK(size <= max_sparse_vocab_size(tokens),
               "{}: token ids go up to {} for only {} tokens (mostly unused ids; corrupt?)", source,
               size - 1, tokens);
  t.id_to_bytes_.assign(size, std::string());
  t.is_special_.assign(size, 0);
  const auto& keys = t.model_->id_to_key();
  for (std::size_t id = 0; id < keys.size(); ++id) t.id_to_bytes_[id] = decoded_bytes_of(keys[id]);
  for (const auto& a : t.added_->tokens()) {
    t.id_to_bytes_[a.id] = decoded_bytes_of(a.content);
    t.is_special_[a.id] = a.special;
  }
  return t;
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text) const {
  Encoder encoder(*this);
  return encoder.encode(text);
}

std::string Tokenizer::decode_bytes(const std::vector<std::uint32_t>& ids,
                                    bool skip_special) const {
  std::string out;
  for (std::uint32_t id : ids) {
    TANDEM_CHECK(id < id_to_bytes_.size(), "token id {} is outside the vocabulary (size {}) of {}",
                 id, id_to_bytes_.size(), source_);
    if (skip_special && is_special_[id]) continue;
    out += id_to_bytes_[id];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<std::uint32_t>& ids, bool skip_special) const {
  return core::utf8::decode_lossy(decode_bytes(ids, skip_special));
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_->find_content(token)) return a->id;
  return model_->token_to_id(token);
}

std::optional<std::uint32_t> Tokenizer::eos_id() const {
  const AddedToken* a = added_->find_content("<|endoftext|>");
  if (a) return a->id;
  return std::nullopt;
}

std::size_t Encoder::StringHash::operator()(std::string_view s) const {
  return XXH3_64bits(s.data(), s.size());
}

Encoder::Encoder(const Tokenizer& tokenizer, bool encode_special_tokens)
    : tokenizer_(tokenizer), encode_special_tokens_(encode_special_tokens) {
  levels_.resize(tokenizer.steps_.size());
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    if (tokenizer.steps_[i].regex)
      levels_[i].matcher = std::make_unique<PcreRegex::Matcher>(*tokenizer.steps_[i].regex);
  }
}

Encoder::~Encoder() = default;

void Encoder::encode(std::string_view text, std::vector<std::uint32_t>& out) {
  std::size_t bad = core::utf8::first_invalid(text);
  TANDEM_CHECK(bad == text.size(), "text is not valid UTF-8 (byte offset {})", bad);
  // As HF's AddedVocabulary::extract_and_normalize: the added tokens with normalized=false are
  // found in the raw text; each remaining piece is normalized, and the tokens with
  // normalized=true are found in it.
  const AddedVocabulary& added = *tokenizer_.added_;
  added.split(text, false, pieces_, encode_special_tokens_);
  for (const TextPiece& p : pieces_) {
    if (p.added_id) {
      out.push_back(*p.added_id);
      continue;
    }
    std::string_view piece = text.substr(p.begin, p.end - p.begin);
    if (tokenizer_.normalizer_) piece = tokenizer_.normalizer_->apply(piece, normalized_);
    added.split(piece, true, normalized_pieces_, encode_special_tokens_);
    for (const TextPiece& q : normalized_pieces_) {
      if (q.added_id) {
        out.push_back(*q.added_id);
      } else {
        pre_tokenize(0, piece.substr(q.begin, q.end - q.begin), out);
      }
    }
  }
}

void Encoder::pre_tokenize(std::size_t index, std::string_view piece,
                           std::vector<std::uint32_t>& out) {
  if (piece.empty()) return;
  if (index == levels_.size()) {
    encode_word(piece, out);
    return;
  }
  const PreTokenizerStep& step = tokenizer_.steps_[index];
  Level& level = levels_[index];
  if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
    std::string_view text = piece;
    std::string prefixed;  // local: the level's buffer would be overwritten by recursion
    if (step.add_prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed += ' ';
      prefixed += piece;
      text = prefixed;
    }
    if (!step.regex) {
      pre_tokenize(index + 1, text, out);
      return;
    }
    // Isolated: matches and the gaps between them are all kept.
    std::size_t prev = 0, s, e, pos = 0;
    while (pos < text.size() && level.matcher->find(text, pos, &s, &e)) {
      if (e == s) {
        pos = e + core::utf8::sequence_length(static_cast<unsigned char>(text[e]));
        continue;
      }
      if (s > prev) pre_tokenize(index + 1, text.substr(prev, s - prev), out);
      pre_tokenize(index + 1, text.substr(s, e - s), out);
      prev = pos = e;
    }
    if (prev < text.size()) pre_tokenize(index + 1, text.substr(prev), out);
    return;
  }

  // Split: collect (span, is_match) covering the piece, as HF's find_matches does.
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::vector<char> matched;
  {
    std::size_t prev = 0, s, e, pos = 0;
    while (pos < piece.size() && level.matcher->find(piece, pos, &s, &e)) {
      if (e == s) {
        pos = e + core::utf8::sequence_length(static_cast<unsigned char>(piece[e]));
        continue;
      }
      if (s > prev) {
        spans.emplace_back(prev, s);
        matched.push_back(0);
      }
      spans.emplace_back(s, e);
      matched.push_back(1);
      prev = pos = e;
    }
    if (prev < piece.size()) {
      spans.emplace_back(prev, piece.size());
      matched.push_back(0);
    }
  }
  if (step.invert)
    for (auto& m : matched) m = !m;

  auto emit = [&](std::size_t a, std::size_t b) {
    pre_tokenize(index + 1, piece.substr(a, b - a), out);
  };
  const std::size_t n = spans.size();
  switch (step.behavior) {
    case SplitBehavior::kRemoved:
      for (std::size_t i = 0; i < n; ++i)
        if (!matched[i]) emit(spans[i].first, spans[i].second);
      break;
    case SplitBehavior::kIsolated:
      for (std::size_t i = 0; i < n; ++i) emit(spans[i].first, spans[i].second);
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      // Fold as HF does: a span joins the previous output span when (Contiguous) it has the same
      // match flag as the previous span, or (MergedWithPrevious) it is a match following a
      // non-match.
      std::vector<std::pair<std::size_t, std::size_t>> merged;
      bool previous_match = false;
      for (std::size_t i = 0; i < n; ++i) {
        bool m = matched[i];
        bool join = step.behavior == SplitBehavior::kContiguous ? (m == previous_match)
                                                                : (m && !previous_match);
        if (join && !merged.empty()) {
          merged.back().second = spans[i].second;
        } else {
          merged.push_back(spans[i]);
        }
        previous_match = m;
      }
      for (const auto& [a, b] : merged) emit(a, b);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      std::vector<std::pair<std::size_t, std::size_t>> merged;
      bool previous_match = false;
      for (std::size_t k = n; k-- > 0;) {
        bool m = matched[k];
        if (m && !previous_match && !merged.empty()) {
          merged.back().first = spans[k].first;
        } else {
          merged.push_back(spans[k]);
        }
        previous_match = m;
      }
      for (std::size_t k = merged.size(); k-- > 0;) emit(merged[k].first, merged[k].second);
      break;
    }
  }
}

void Encoder::encode_word(std::string_view word, std::vector<std::uint32_t>& out) {
  if (word.size() <= kMaxCachedWordBytes) {
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      const std::uint32_t* ids = cache_ids_.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.second);
      return;
    }
  }
  std::size_t start = out.size();
  tokenizer_.model_->encode_word(word, out);
  if (word.size() <= kMaxCachedWordBytes && cache_.size() < kMaxCacheEntries) {
    auto offset = static_cast<std::uint32_t>(cache_ids_.size());
    cache_ids_.insert(cache_ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(start),
                      out.end());
    cache_.emplace(std::string(word),
                   std::make_pair(offset, static_cast<std::uint32_t>(out.size() - start)));
  }
}

}  // namespace tandem::tokenizer
