// safetensors files: the 8-byte header length, the JSON header and the data section, through
// the validating reader and every tensor read.
#include "fuzz_util.h"
#include "tandem/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::io;
  const std::string path = fuzz::scratch_file("input.safetensors", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      if (!file.unsupported_dtype(name).empty()) continue;
      std::vector<float> values = file.read_f32(name);
      (void)values;
    }
  });
  return 0;
}
