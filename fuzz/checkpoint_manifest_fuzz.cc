// A trainer checkpoint's manifest.json: format, step, every file's size and checksum, names
// that must stay inside the checkpoint.
#include "fuzz_util.h"
#include "tandem/train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::train;
  fuzz::expect_clean(
      [&] { (void)parse_checkpoint_manifest(fuzz::as_text(data, size), "manifest.json"); });
  return 0;
}
