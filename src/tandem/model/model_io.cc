#include "tandem/model/model_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/io/json.h"
#include "tandem/model/hf_config.h"
#include "tandem/model/weight_shards.h"

namespace fs = std::filesystem;

namespace tandem::model {
namespace {

constexpr const char* kModelYaml = "model.yaml";
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kSourceDtypeKey = "tandem.source_dtype";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t pos = s.find(from); pos != std::string::npos;
       pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

bool is_embedding_like(const std::string& name) {
  return name == "embeddings.weight" || name == "lm_head.w_out.weight";
}

io::DType dtype_from_name(const std::string& name, const std::string& where) {
  for (io::DType d : {io::DType::kF32, io::DType::kBF16, io::DType::kF16})
    if (io::dtype_name(d) == name) return d;
  core::fail("{}: unknown dtype '{}' (expected F32, BF16 or F16)", where, name);
}

void check_finite(std::span<const float> values, const std::string& tensor,
                  const std::string& file) {
  for (std::size_t i = 0; i < values.size(); ++i)
    TANDEM_CHECK(std::isfinite(values[i]), "{}: tensor '{}' has a non-finite value ({}) at {}",
                 file, tensor, values[i], i);
}

}  // namespace

std::string hf_name_of(const std::string& name) {
  if (name == "embeddings.weight") return "model.embed_tokens.weight";
  if (name == "lm_head.norm.weight") return "model.norm.weight";
  if (name == "lm_head.w_out.weight") return "lm_head.weight";
  TANDEM_CHECK(starts_with(name, "blocks."), "no HF name for parameter '{}'", name);
  std::string s = "model.layers." + name.substr(7);
  static const std::pair<const char*, const char*> kParts[] = {
      {"attention.w_q.", "self_attn.q_proj."},
      {"attention.w_k.", "self_attn.k_proj."},
      {"attention.w_v.", "self_attn.v_proj."},
      {"attention.w_out.", "self_attn.o_proj."},
      {"attention.q_norm.", "self_attn.q_norm."},
      {"attention.k_norm.", "self_attn.k_norm."},
      {"attention_norm.", "post_attention_layernorm."},
      {"feed_forward_norm.", "post_feedforward_layernorm."},
      {"feed_forward.w1.", "mlp.gate_proj."},
      {"feed_forward.w2.", "mlp.down_proj."},
      {"feed_forward.w3.", "mlp.up_proj."},
  };
  for (const auto& [from, to] : kParts)
    if (s.find(from) != std::string::npos) return replace_all(s, from, to);
  core::fail("no HF name for parameter '{}'", name);
}

bool is_hf_model_dir(const std::string& path) { return fs::exists(fs::path(path) / "config.json"); }
bool is_tandem_model_dir(const std::string& path) {
  return fs::exists(fs::path(path) / kModelYaml);
}

ModelConfig read_model_dir_config(const std::string& path, const LoadOptions& options) {
  TANDEM_CHECK(fs::is_directory(path), "model directory {} does not exist", path);
  const bool hf = is_hf_model_dir(path);
  TANDEM_CHECK(hf || is_tandem_model_dir(path),
               "{}: neither an HF model (config.json) nor a tandem model ({})", path, kModelYaml);
  if (!hf) return load_model_config((fs::path(path) / kModelYaml).string(), {});
  const std::string cfg_path = (fs::path(path) / "config.json").string();
  ModelConfig config = model_config_from_hf(io::read_json_file(cfg_path), cfg_path);
  if (options.embedding_size > 0) {
    TANDEM_CHECK(options.embedding_size >= config.vocab_size,
                 "{}: its {} vocabulary rows do not fit in {} embedding rows", cfg_path,
                 config.vocab_size, options.embedding_size);
    config.embedding_size = options.embedding_size;
  } else {
    TANDEM_CHECK(options.pad_vocab_multiple > 0, "pad_vocab_multiple must be positive");
    config.embedding_size = (config.vocab_size + options.pad_vocab_multiple - 1) /
                            options.pad_vocab_multiple * options.pad_vocab_multiple;
  }
  return config;
}

io::DType read_model_weight_slices(const std::string& path, const ModelConfig& config,
                                   std::vector<WeightSlice>& slices, const LoadOptions& options) {
  const bool hf = is_hf_model_dir(path);
  if (!hf && is_sharded_model_dir(path)) {
    // Written by several ranks (FSDP/HSDP): each slice from the shards that hold it.
    read_weight_ranges(path, slices);
    if (options.check_finite)
      for (const WeightSlice& s : slices) check_finite(s.values, s.name, path);
    return io::DType::kF32;
  }
  io::SafetensorsCheckpoint weights(path);
  const ParameterLayout layout(config);
  for (WeightSlice& s : slices) {
    const ParameterEntry& e = layout.entry(s.name);
    const std::string name = hf ? hf_name_of(e.name) : e.name;
    TANDEM_CHECK(weights.has(name), "{}: missing tensor '{}'", path, name);
    const io::TensorInfo& info = weights.info(name);
    std::vector<std::int64_t> expected = e.shape;
    if (hf && is_embedding_like(e.name)) expected[0] = config.vocab_size;
    TANDEM_CHECK(info.shape == expected, "{}: tensor '{}' has shape [{}], expected [{}]",
                 weights.file_of(name).path(), name, fmt::join(info.shape, ", "),
                 fmt::join(expected, ", "));
    // Of the slice's run, what the file holds; the rest is padded embedding rows (HF -> tandem
    // with padding), which stay zero.
    const std::int64_t end = s.start + static_cast<std::int64_t>(s.values.size());
    const std::int64_t stored = std::clamp<std::int64_t>(info.numel() - s.start, 0, end - s.start);
    weights.read_f32_range_into(name, s.start, s.values.first(static_cast<std::size_t>(stored)));
    std::fill(s.values.begin() + stored, s.values.end(), 0.0f);
    if (options.check_finite) check_finite(s.values, name, weights.file_of(name).path());
  }
  // The dtype the weights were stored in: an HF model's own, or what a tandem model recorded.
  const std::string embeddings = hf ? hf_name_of("embeddings.weight") : "embeddings.weight";
  TANDEM_CHECK(weights.has(embeddings), "{}: missing tensor '{}'", path, embeddings);
  if (hf) return weights.info(embeddings).dtype;
  const auto& meta = weights.file_of(embeddings).metadata();
  auto it = meta.find(kSourceDtypeKey);
  if (it == meta.end()) return io::DType::kF32;
  return dtype_from_name(
      it->second, weights.file_of(embeddings).path() + ": metadata '" + kSourceDtypeKey + "'");
}

ModelWeights read_model_weights(const std::string& path, const LoadOptions& options) {
  return read_model_weights(path, read_model_dir_config(path, options), options);
}

ModelWeights read_model_weights(const std::string& path, const ModelConfig& config,
                                const LoadOptions& options) {
  ModelWeights out;
  out.config = config;
  const ParameterLayout layout(out.config);
  out.flat.assign(static_cast<std::size_t>(layout.total()), 0.0f);
  std::vector<WeightSlice> whole;
  for (const ParameterEntry& e : layout.entries())
    whole.push_back(
        {e.name, e.shape, 0,
         std::span<float>(out.flat.data() + e.offset, static_cast<std::size_t>(e.numel))});
  out.source_dtype = read_model_weight_slices(path, out.config, whole, options);
  return out;
}

std::unique_ptr<Olmo3Model> load_model(const std::string& path, kernels::Backend& backend,
                                       const LoadOptions& options, io::DType* source_dtype) {
  ModelWeights w = read_model_weights(path, options);
  auto model = std::make_unique<Olmo3Model>(w.config, backend);
  model->params_from_host(w.flat);
  if (source_dtype) *source_dtype = w.source_dtype;
  return model;
}

void check_same_architecture(const ModelConfig& found, const ModelConfig& expected,
                             const std::string& source) {
  std::string differences;
  auto compare = [&](const char* key, std::int64_t a, std::int64_t b) {
    if (a != b)
      differences +=
          fmt::format("{}{} {} (config: {})", differences.empty() ? "" : ", ", key, a, b);
  };
  compare("d_model", found.d_model, expected.d_model);
  compare("n_layers", found.n_layers, expected.n_layers);
  compare("n_heads", found.n_heads, expected.n_heads);
  compare("n_kv_heads", found.n_kv_heads, expected.n_kv_heads);
  compare("head_dim", found.head_dim, expected.head_dim);
  compare("hidden_size", found.hidden_size, expected.hidden_size);
  compare("vocab_size", found.vocab_size, expected.vocab_size);
  compare("embedding_size", found.embedding_size, expected.embedding_size);
  TANDEM_CHECK(differences.empty(),
               "{} holds a model of another architecture than the config's model: {}", source,
               differences);
}

void check_initial_weights(const std::string& path, const ModelConfig& found,
                           const ModelConfig& expected) {
  ModelConfig as_used = found;
  // An HF model's vocab_size counts the embedding rows it stores: OLMo 3's releases keep the
  // tokenizer's (100278), OLMo 2's all the 100352 they trained, and a tandem model converted from
  // one keeps that count. Any of them fits a config whose vocabulary the rows cover and whose
  // embedding holds them: the vocabulary decides no tensor's shape (the embedding does), and
  // labels outside the config's vocabulary are refused by the data path either way.
  if (found.vocab_size >= expected.vocab_size && found.vocab_size <= expected.embedding_size)
    as_used.vocab_size = expected.vocab_size;
  check_same_architecture(as_used, expected, "init_from " + path);
}

void save_tandem_model(const std::string& dir, const Olmo3Model& model, io::DType source_dtype) {
  save_tandem_model(dir, model.config(), model.params_to_host(), source_dtype);
}

void save_tandem_model(const std::string& dir, const ModelConfig& config,
                       std::span<const float> flat, io::DType source_dtype) {
  const ParameterLayout layout(config);
  TANDEM_CHECK(static_cast<std::int64_t>(flat.size()) == layout.total(),
               "save_tandem_model: {} values for a layout of {}", flat.size(), layout.total());
  fs::create_directories(dir);
  std::vector<io::TensorToWrite> tensors;
  for (const ParameterEntry& e : layout.entries())
    tensors.push_back({e.name, io::DType::kF32, e.shape, flat.data() + e.offset});
  io::write_safetensors((fs::path(dir) / kWeights).string(), tensors,
                        {{kSourceDtypeKey, io::dtype_name(source_dtype)}, {"format", "pt"}});
  save_tandem_model_config(dir, config);
}

void save_tandem_model_config(const std::string& dir, const ModelConfig& config) {
  fs::create_directories(dir);
  YAML::Node root;
  root["model"] = model_config_to_yaml(config);
  YAML::Emitter out;
  out << root;
  core::write_file_atomic((fs::path(dir) / kModelYaml).string(), std::string(out.c_str()) + "\n");
}

void save_hf_model(const std::string& dir, const ModelConfig& c, std::span<const float> flat,
                   io::DType dtype) {
  const ParameterLayout layout(c);
  TANDEM_CHECK(static_cast<std::int64_t>(flat.size()) == layout.total(),
               "save_hf_model: {} values for a layout of {}", flat.size(), layout.total());
  fs::create_directories(dir);
  std::vector<std::vector<std::uint16_t>> narrowed;  // keeps converted buffers alive
  narrowed.reserve(layout.entries().size());
  std::vector<io::TensorToWrite> tensors;
  for (const ParameterEntry& e : layout.entries()) {
    std::vector<std::int64_t> shape = e.shape;
    if (is_embedding_like(e.name)) shape[0] = c.vocab_size;  // drop padded rows
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    const float* src = flat.data() + e.offset;
    if (dtype == io::DType::kF32) {
      tensors.push_back({hf_name_of(e.name), dtype, shape, src});
      continue;
    }
    std::vector<std::uint16_t> buf(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      buf[i] = dtype == io::DType::kBF16 ? io::f32_to_bf16(src[i]) : io::f32_to_f16(src[i]);
    narrowed.push_back(std::move(buf));
    tensors.push_back({hf_name_of(e.name), dtype, shape, narrowed.back().data()});
  }
  io::write_safetensors((fs::path(dir) / kWeights).string(), tensors, {{"format", "pt"}});
  nlohmann::json hf = model_config_to_hf(c, dtype == io::DType::kF32    ? "float32"
                                            : dtype == io::DType::kBF16 ? "bfloat16"
                                                                        : "float16");
  core::write_file_atomic((fs::path(dir) / "config.json").string(), hf.dump(2) + "\n");
}

}  // namespace tandem::model
