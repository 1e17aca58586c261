// Reference curves for `tandem compare`: CSV or JSONL (the first byte picks).
#include "fuzz_util.h"
#include "tandem/report/curves.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  const bool csv = data[0] % 2;
  const std::string path =
      fuzz::scratch_file(csv ? "curve.csv" : "curve.jsonl", fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clean([&] { (void)report::load_curves(path); });
  return 0;
}
