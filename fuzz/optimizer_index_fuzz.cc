// A checkpoint's optim/index.json: which shard holds which element range of every tensor.
#include "fuzz_util.h"
#include "tandem/train/optimizer_shards.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::train;
  fuzz::expect_clean(
      [&] { (void)parse_optimizer_index(fuzz::as_text(data, size), "optim/index.json"); });
  return 0;
}
