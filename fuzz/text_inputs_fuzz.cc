// Text inputs of `data tokenize`: JSONL records (dolma format) and plain text, uncompressed,
// gzip or zstd (the first input byte picks the kind), through DocumentReader to the end.
#include "fuzz_util.h"
#include "tandem/io/text_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::io;
  if (size == 0) return 0;
  static const char* kNames[] = {"input.jsonl", "input.jsonl.gz", "input.jsonl.zst",
                                 "input.txt",   "input.txt.gz",   "input.json.zstd"};
  const std::string path =
      fuzz::scratch_file(kNames[data[0] % 6], fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clean([&] {
    DocumentReader reader(path);
    Document doc;
    while (reader.next(doc)) {
    }
  });
  return 0;
}
