// HF sharded checkpoints: model.safetensors.index.json (weight_map: tensor -> shard file) over
// two real shards; shard names must stay inside the directory.
#include <filesystem>

#include "fuzz_util.h"
#include "tandem/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using namespace tandem::io;
  namespace fs = std::filesystem;
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/sharded";
    fs::create_directories(d);
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    write_safetensors(d + "/model-00001-of-00002.safetensors",
                      {{"model.embed_tokens.weight", DType::kF32, {2, 2}, a}});
    write_safetensors(
        d + "/model-00002-of-00002.safetensors",
        {{"lm_head.weight", DType::kF32, {2}, b}, {"model.norm.weight", DType::kF32, {1}, b}});
    return d;
  }();
  fuzz::scratch_file("sharded/model.safetensors.index.json", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    SafetensorsCheckpoint checkpoint(dir);
    for (const std::string& name : checkpoint.names()) (void)checkpoint.read_f32(name);
  });
  return 0;
}
