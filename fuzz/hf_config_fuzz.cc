// An HF model's config.json, as `tandem convert`, `parity` and `init_from` read it.
#include "fuzz_util.h"
#include "tandem/io/json.h"
#include "tandem/model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  fuzz::expect_clean([&] {
    const nlohmann::json j = io::parse_json(fuzz::as_text(data, size), "config.json");
    (void)model::model_config_from_hf(j, "config.json");
  });
  return 0;
}
