// HF tokenizer.json: vocabulary, merges, added tokens, pre-tokenizer regexes; a tokenizer that
// loads must also encode and decode a fixed text.
#include "fuzz_util.h"
#include "tandem/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::tokenizer;
  fuzz::expect_clean([&] {
    Tokenizer tokenizer = Tokenizer::from_json(std::string(fuzz::as_text(data, size)), "fuzz.json");
    const std::vector<std::uint32_t> ids =
        tokenizer.encode("Hello  world <|endoftext|> caf\u00e9 \t\n 1234 aaaaaaaa!");
    (void)tokenizer.decode(ids);
  });
  return 0;
}
