// .npy arrays (token ids and reference logits for `tandem parity`): magic, version, header
// dict, data size, conversions.
#include "fuzz_util.h"
#include "tandem/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::io;
  const std::string path = fuzz::scratch_file("input.npy", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    NpyArray a = read_npy(path);
    if (a.dtype == NpyDtype::kF32 || a.dtype == NpyDtype::kF64)
      (void)a.as_f32();
    else
      (void)a.as_i64();
  });
  return 0;
}
