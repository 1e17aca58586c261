#include "tandem/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::tokenizer {
namespace {

// HF tokenizers normalizes with the unicode-normalization-alignments crate, whose tables are
// Unicode 9.0: characters assigned later are, to it, unassigned (no decomposition, combining
// class 0), so it neither composes nor reorders them. ICU's FilteredNormalizer2 with the set of
// characters assigned by 9.0 normalizes exactly so: the newer characters are copied unchanged and
// bound the spans it normalizes. (Unicode's stability policy keeps the decompositions, combining
// classes and composition exclusions of the older characters unchanged since then.)
// Measured against tokenizers 0.23.3: tests/tokenizer/normalizer_test.cc.
constexpr const char* kHfUnicodeSet = "[:age=9.0:]";

void check_icu(UErrorCode status, const std::string& what) {
  TANDEM_CHECK(U_SUCCESS(status), "ICU failed: {}: {}", what, u_errorName(status));
}

}  // namespace

struct Normalizer::Forms {
  icu::UnicodeSet hf_characters;
  std::vector<std::unique_ptr<icu::FilteredNormalizer2>> steps;
};

Normalizer::Normalizer() : forms_(std::make_unique<Forms>()) {}
Normalizer::~Normalizer() = default;

std::unique_ptr<const Normalizer> Normalizer::from_json(const nlohmann::json& j,
                                                        const std::string& source) {
  if (j.is_null()) return nullptr;
  TANDEM_CHECK(j.is_object(), "{}: normalizer is not an object: {}", source, io::json_excerpt(j));
  std::vector<std::string> forms;
  const std::string type = j.value("type", std::string("?"));
  auto add_form = [&](const nlohmann::json& n) {
    TANDEM_CHECK(n.is_object(), "{}: normalizer is not an object: {}", source, io::json_excerpt(n));
    std::string t = n.value("type", std::string("?"));
    TANDEM_CHECK(t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD",
                 "{}: normalizer {:?} is not supported (only NFC, NFD, NFKC, NFKD and a Sequence "
                 "of them)",
                 source, t);
    forms.push_back(t);
  };
  if (type == "Sequence") {
    TANDEM_CHECK(j.contains("normalizers") && j["normalizers"].is_array(),
                 "{}: Sequence normalizer without a \"normalizers\" array", source);
    for (const auto& n : j["normalizers"]) add_form(n);
  } else {
    add_form(j);
  }

  std::unique_ptr<Normalizer> out(new Normalizer());
  UErrorCode status = U_ZERO_ERROR;
  out->forms_->hf_characters.applyPattern(icu::UnicodeString(kHfUnicodeSet), status);
  check_icu(status, kHfUnicodeSet);
  out->forms_->hf_characters.freeze();  // shared read-only by every thread's encoder
  for (const std::string& form : forms) {
    const icu::Normalizer2* base = form == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                   : form == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                   : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                                    : icu::Normalizer2::getNFKDInstance(status);
    check_icu(status, form);
    out->forms_->steps.push_back(
        std::make_unique<icu::FilteredNormalizer2>(*base, out->forms_->hf_characters));
  }
  if (type == "Sequence") {
    out->description_ = "Sequence[";
    for (std::size_t i = 0; i < forms.size(); ++i) out->description_ += (i ? ", " : "") + forms[i];
    out->description_ += "]";
  } else {
    out->description_ = forms.front();
  }
  return out;
}

std::string_view Normalizer::apply(std::string_view text, std::string& buffer) const {
  TANDEM_CHECK(text.size() < (std::size_t{1} << 31), "text of {} bytes is too long to normalize",
               text.size());
  std::string_view current = text;
  std::string next;
  for (const auto& step : forms_->steps) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::StringPiece piece(current.data(), static_cast<std::int32_t>(current.size()));
    const bool normalized = step->isNormalizedUTF8(piece, status);
    check_icu(status, "normalization check");
    if (normalized) continue;
    next.clear();
    icu::StringByteSink<std::string> sink(&next, static_cast<std::int32_t>(current.size()));
    step->normalizeUTF8(0, piece, sink, nullptr, status);
    check_icu(status, "normalization");
    buffer.swap(next);  // `current` (perhaps the old buffer) was read before the swap
    current = buffer;
  }
  return current;
}

}  // namespace tandem::tokenizer
