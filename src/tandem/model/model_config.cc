#include "tandem/model/model_config.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::model {
namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// OLMo-core's pattern semantics: layer i uses pattern[i % len]; -1 means full attention.
std::vector<std::int64_t> windows_from_pattern(const std::vector<std::int64_t>& pattern,
                                               std::int64_t n_layers, bool force_first,
                                               bool force_last) {
  std::vector<std::int64_t> windows(static_cast<std::size_t>(n_layers));
  for (std::int64_t i = 0; i < n_layers; ++i) {
    std::int64_t w = pattern[static_cast<std::size_t>(i) % pattern.size()];
    windows[static_cast<std::size_t>(i)] = w < 0 ? 0 : w;
  }
  if (n_layers > 0 && force_first) windows.front() = 0;
  if (n_layers > 0 && force_last) windows.back() = 0;
  return windows;
}

}  // namespace

void ModelConfig::validate() const {
  auto positive = [](std::int64_t v, const char* key) {
    TANDEM_CHECK(v > 0, "model config key '{}' must be positive, got {}", key, v);
  };
  positive(d_model, "d_model");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(hidden_size, "hidden_size");
  positive(vocab_size, "vocab_size");
  TANDEM_CHECK(n_heads % n_kv_heads == 0,
               "model config: n_heads ({}) must be a multiple of n_kv_heads ({})", n_heads,
               n_kv_heads);
  TANDEM_CHECK(head_dim % 2 == 0, "model config key 'head_dim' must be even for RoPE, got {}",
               head_dim);
  TANDEM_CHECK(embedding_size >= vocab_size,
               "model config: embedding_size ({}) must be at least vocab_size ({})", embedding_size,
               vocab_size);
  TANDEM_CHECK(static_cast<std::int64_t>(layer_windows.size()) == n_layers,
               "model config: {} layer windows for {} layers", layer_windows.size(), n_layers);
  for (auto w : layer_windows)
    TANDEM_CHECK(w >= 0, "model config key 'sliding_window': window {} is negative", w);
  TANDEM_CHECK(rope_theta > 0, "model config key 'rope_theta' must be positive");
  TANDEM_CHECK(layer_norm_eps > 0, "model config key 'layer_norm_eps' must be positive");
  TANDEM_CHECK(init_std > 0, "model config key 'init_std' must be positive");
  positive(max_sequence_length, "max_sequence_length");
}

std::int64_t ModelConfig::matmul_params() const {
  std::int64_t attn = d_model * q_width() * 2 + d_model * kv_width() * 2;
  std::int64_t mlp = 3 * d_model * hidden_size;
  return n_layers * (attn + mlp) + embedding_size * d_model;
}

std::int64_t ModelConfig::total_params() const {
  std::int64_t norms = n_layers * (2 * d_model + q_width() + kv_width()) + d_model;
  return matmul_params() + embedding_size * d_model + norms;
}

double ModelConfig::flops_per_token(std::int64_t seq_len) const {
  double attn = 0;
  for (auto w : layer_windows) {
    std::int64_t span = (w == 0) ? seq_len : std::min(w, seq_len);
    attn += static_cast<double>(n_heads * head_dim * span);
  }
  return 6.0 * static_cast<double>(matmul_params()) + 12.0 * attn;
}

ModelConfig parse_model_config(io::ConfigSection s) {
  ModelConfig c;
  c.d_model = s.get_int("d_model");
  c.n_layers = s.get_int("n_layers");
  c.n_heads = s.get_int("n_heads");
  c.n_kv_heads = s.get_int("n_kv_heads", c.n_heads);
  TANDEM_CHECK(c.n_heads > 0, "{} must be positive", s.where("n_heads"));
  c.head_dim = s.get_int("head_dim", c.d_model / c.n_heads);
  c.hidden_size = s.get_int("hidden_size");
  c.vocab_size = s.get_int("vocab_size");
  TANDEM_CHECK(!(s.has("embedding_size") && s.has("pad_vocab_to_multiple_of")),
               "{}: give embedding_size or pad_vocab_to_multiple_of, not both", s.where(""));
  if (s.has("embedding_size")) {
    c.embedding_size = s.get_int("embedding_size");
  } else {
    std::int64_t multiple = s.get_int("pad_vocab_to_multiple_of", 128);
    TANDEM_CHECK(multiple > 0, "{} must be positive", s.where("pad_vocab_to_multiple_of"));
    c.embedding_size = round_up(c.vocab_size, multiple);
  }
  c.rope_theta = s.get_double("rope_theta", 500000.0);
  c.layer_norm_eps = s.get_double("layer_norm_eps", 1e-6);
  c.init_std = s.get_double("init_std", 0.02);
  c.max_sequence_length = s.get_int("max_sequence_length", 8192);
  if (s.has("sliding_window")) {
    io::ConfigSection sw = s.section("sliding_window");
    std::vector<std::int64_t> pattern = sw.get_int_list("pattern");
    TANDEM_CHECK(!pattern.empty(), "{} must not be empty", sw.where("pattern"));
    for (auto w : pattern)
      TANDEM_CHECK(w == -1 || w > 0, "{}: window {} must be positive or -1 (full)",
                   sw.where("pattern"), w);
    bool first = sw.get_bool("force_full_attention_on_first_layer", false);
    bool last = sw.get_bool("force_full_attention_on_last_layer", true);
    sw.finish();
    c.layer_windows = windows_from_pattern(pattern, c.n_layers, first, last);
  } else {
    s.mark_used("sliding_window");
    c.layer_windows.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.n_layers, 0)), 0);
  }
  s.finish();
  c.validate();
  return c;
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = io::load_yaml_config(path, overrides);
  TANDEM_CHECK(root["model"] && root["model"].IsMap(), "{}: no `model:` mapping", path);
  return parse_model_config(io::ConfigSection(root["model"], "model", path));
}

YAML::Node model_config_to_yaml(const ModelConfig& c) {
  YAML::Node m;
  m["d_model"] = c.d_model;
  m["n_layers"] = c.n_layers;
  m["n_heads"] = c.n_heads;
  m["n_kv_heads"] = c.n_kv_heads;
  m["head_dim"] = c.head_dim;
  m["hidden_size"] = c.hidden_size;
  m["vocab_size"] = c.vocab_size;
  m["embedding_size"] = c.embedding_size;
  m["rope_theta"] = c.rope_theta;
  m["layer_norm_eps"] = c.layer_norm_eps;
  m["init_std"] = c.init_std;
  m["max_sequence_length"] = c.max_sequence_length;
  bool any_window = std::any_of(c.layer_windows.begin(), c.layer_windows.end(),
                                [](std::int64_t w) { return w > 0; });
  if (any_window) {
    // Written as an explicit per-layer pattern so any layout round-trips exactly.
    YAML::Node pattern(YAML::NodeType::Sequence);
    for (auto w : c.layer_windows) pattern.push_back(w == 0 ? -1 : w);
    m["sliding_window"]["pattern"] = pattern;
    m["sliding_window"]["force_full_attention_on_last_layer"] = false;
  }
  return m;
}

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source) {
  auto get_int = [&](const char* key) -> std::int64_t {
    TANDEM_CHECK(hf.contains(key) && hf[key].is_number_integer(), "{}: missing or non-integer '{}'",
                 source, key);
    return hf[key].get<std::int64_t>();
  };
  std::string type = hf.value("model_type", "");
  TANDEM_CHECK(type == "olmo3" || type == "olmo2",
               "{}: model_type '{}' is not supported (olmo2 or olmo3)", source, type);
  TANDEM_CHECK(!hf.value("tie_word_embeddings", false),
               "{}: tied embeddings are not part of the OLMo family", source);
  TANDEM_CHECK(!hf.value("attention_bias", false), "{}: attention biases are not supported",
               source);
  ModelConfig c;
  c.d_model = get_int("hidden_size");
  c.n_layers = get_int("num_hidden_layers");
  c.n_heads = get_int("num_attention_heads");
  c.n_kv_heads = hf.contains("num_key_value_heads") && !hf["num_key_value_heads"].is_null()
                     ? get_int("num_key_value_heads")
                     : c.n_heads;
  c.head_dim = hf.contains("head_dim") && !hf["head_dim"].is_null() ? get_int("head_dim")
                                                                    : c.d_model / c.n_heads;
  c.hidden_size = get_int("intermediate_size");
  c.vocab_size = get_int("vocab_size");
  c.embedding_size = c.vocab_size;
  c.layer_norm_eps = hf.value("rms_norm_eps", 1e-5);
  c.init_std = hf.value("initializer_range", 0.02);
  c.max_sequence_length = hf.value("max_position_embeddings", 8192);
  // transformers 4.x writes rope_theta; 5.x writes rope_parameters (per layer type).
  if (hf.contains("rope_theta") && hf["rope_theta"].is_number()) {
    c.rope_theta = hf["rope_theta"].get<double>();
  } else if (hf.contains("rope_parameters") && hf["rope_parameters"].is_object()) {
    // Either flat {rope_type, rope_theta} or per layer type {sliding_attention: {...}, ...}.
    const auto& rp = hf["rope_parameters"];
    std::vector<nlohmann::json> groups;
    for (const auto& [key, value] : rp.items())
      if (value.is_object()) groups.push_back(value);
    if (groups.empty()) groups.push_back(rp);
    bool first = true;
    for (const auto& g : groups) {
      TANDEM_CHECK(g.value("rope_type", "default") == "default",
                   "{}: rope_type '{}' is not supported", source, g.value("rope_type", ""));
      TANDEM_CHECK(g.contains("rope_theta") && g["rope_theta"].is_number(),
                   "{}: rope_parameters without a numeric rope_theta", source);
      double theta = g["rope_theta"].get<double>();
      TANDEM_CHECK(first || theta == c.rope_theta,
                   "{}: different rope_theta per layer type is not supported", source);
      c.rope_theta = theta;
      first = false;
    }
  }
  if (hf.contains("rope_scaling") && !hf["rope_scaling"].is_null())
    core::fail("{}: rope_scaling (YaRN) is not supported yet", source);
  c.layer_windows.assign(static_cast<std::size_t>(c.n_layers), 0);
  if (type == "olmo3" && hf.contains("layer_types") && hf["layer_types"].is_array()) {
    const auto& types = hf["layer_types"];
    TANDEM_CHECK(static_cast<std::int64_t>(types.size()) == c.n_layers,
                 "{}: layer_types has {} entries for {} layers", source, types.size(), c.n_layers);
    std::int64_t window = get_int("sliding_window");
    for (std::size_t i = 0; i < types.size(); ++i) {
      std::string t = types[i].get<std::string>();
      TANDEM_CHECK(t == "sliding_attention" || t == "full_attention", "{}: unknown layer type '{}'",
                   source, t);
      c.layer_windows[i] = t == "sliding_attention" ? window : 0;
    }
  } else if (type == "olmo3") {
    std::int64_t window = get_int("sliding_window");
    c.layer_windows = windows_from_pattern({window, window, window, -1}, c.n_layers, false, true);
  }
  c.validate();
  return c;
}

nlohmann::json model_config_to_hf(const ModelConfig& c) {
  bool any_window = std::any_of(c.layer_windows.begin(), c.layer_windows.end(),
                                [](std::int64_t w) { return w > 0; });
  nlohmann::json hf;
  hf["architectures"] = {any_window ? "Olmo3ForCausalLM" : "Olmo2ForCausalLM"};
  hf["model_type"] = any_window ? "olmo3" : "olmo2";
  hf["hidden_size"] = c.d_model;
  hf["num_hidden_layers"] = c.n_layers;
  hf["num_attention_heads"] = c.n_heads;
  hf["num_key_value_heads"] = c.n_kv_heads;
  hf["head_dim"] = c.head_dim;
  hf["intermediate_size"] = c.hidden_size;
  hf["vocab_size"] = c.vocab_size;
  hf["rms_norm_eps"] = c.layer_norm_eps;
  hf["rope_theta"] = c.rope_theta;
  hf["initializer_range"] = c.init_std;
  hf["max_position_embeddings"] = c.max_sequence_length;
  hf["hidden_act"] = "silu";
  hf["attention_bias"] = false;
  hf["attention_dropout"] = 0.0;
  hf["tie_word_embeddings"] = false;
  hf["rope_scaling"] = nullptr;
  // Token ids belong to the tokenizer, not the model config; null keeps HF from assuming its own.
  hf["bos_token_id"] = nullptr;
  hf["eos_token_id"] = nullptr;
  hf["pad_token_id"] = nullptr;
  if (any_window) {
    std::int64_t window = 0;
    nlohmann::json types = nlohmann::json::array();
    for (auto w : c.layer_windows) {
      TANDEM_CHECK(w == 0 || window == 0 || w == window,
                   "HF Olmo3 supports one sliding window size; layers use {} and {}", window, w);
      if (w > 0) window = w;
      types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    }
    hf["sliding_window"] = window;
    hf["layer_types"] = types;
  }
  return hf;
}

}  // namespace tandem::model
