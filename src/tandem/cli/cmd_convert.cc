// `tandem convert --from hf|tandem SRC --to hf|tandem DST`: moves weights between HF transformers
// directories and tandem model directories.
#include <fmt/format.h>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/model/model_io.h"

namespace tandem::cli {
namespace {

struct ConvertArgs {
  std::string from_kind, src, to_kind, dst, dtype;
  std::int64_t pad_vocab_multiple = 1;
};

io::DType parse_dtype(const std::string& s, io::DType fallback) {
  if (s.empty()) return fallback;
  if (s == "float32" || s == "F32") return io::DType::kF32;
  if (s == "bfloat16" || s == "BF16") return io::DType::kBF16;
  if (s == "float16" || s == "F16") return io::DType::kF16;
  core::fail("--dtype '{}' is not one of float32, bfloat16, float16", s);
}

void run_convert(const ConvertArgs& a) {
  const bool from_hf = a.from_kind == "hf";
  TANDEM_CHECK(from_hf ? model::is_hf_model_dir(a.src) : model::is_tandem_model_dir(a.src),
               "{} is not a {} model directory", a.src, a.from_kind);
  model::LoadOptions options;
  options.pad_vocab_multiple = from_hf ? a.pad_vocab_multiple : 1;
  // Conversion moves weights between formats on the host; no backend is involved.
  model::ModelWeights w = model::read_model_weights(a.src, options);
  if (a.to_kind == "hf") {
    // Default: the dtype the weights came in, so hf -> tandem -> hf is bit-exact.
    io::DType dtype = parse_dtype(a.dtype, w.source_dtype);
    model::save_hf_model(a.dst, w.config, w.flat, dtype);
  } else {
    model::save_tandem_model(a.dst, w.config, w.flat, w.source_dtype);
  }
  fmt::print("converted {} ({}) -> {} ({}): {} parameters, vocab {} (embedding rows {})\n", a.src,
             a.from_kind, a.dst, a.to_kind, w.config.total_params(), w.config.vocab_size,
             w.config.embedding_size);
}

}  // namespace

void add_convert_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert model weights between HF and tandem");
  cmd->add_option("--from", args->from_kind, "Source kind")
      ->required()
      ->check(CLI::IsMember({"hf", "tandem"}));
  cmd->add_option("src", args->src, "Source directory")->required();
  cmd->add_option("--to", args->to_kind, "Destination kind")
      ->required()
      ->check(CLI::IsMember({"hf", "tandem"}));
  cmd->add_option("dst", args->dst, "Destination directory")->required();
  cmd->add_option("--dtype", args->dtype,
                  "HF output dtype: float32, bfloat16, float16 (default: the source's)");
  cmd->add_option("--pad-vocab-multiple", args->pad_vocab_multiple,
                  "hf -> tandem: pad embedding rows to a multiple of this (e.g. 128)");
  cmd->callback([args, &exit_code] {
    run_convert(*args);
    exit_code = 0;
  });
}

}  // namespace tandem::cli
