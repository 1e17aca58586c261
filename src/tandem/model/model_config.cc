#include "tandem/model/model_config.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/io/json.h"

namespace tandem::model {
namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// OLMo-core's YaRNRoPEScalingConfig.get_attention_rescale_factor.
double olmo_core_yarn_attention_factor(double factor) { return 0.1 * std::log(factor) + 1.0; }

void validate_rope(const RopeConfig& r, const char* which) {
  TANDEM_CHECK(r.type == "default" || r.type == "linear" || r.type == "yarn",
               "model config: {} rope type '{}' is not supported (default, linear, yarn)", which,
               r.type);
  TANDEM_CHECK(r.theta > 0, "model config: {} rope_theta must be positive, got {}", which, r.theta);
  if (r.type == "default") return;
  TANDEM_CHECK(r.factor > 0, "model config: {} rope scaling factor must be positive, got {}", which,
               r.factor);
  if (r.type != "yarn") return;
  TANDEM_CHECK(r.original_max_position_embeddings > 0,
               "model config: {} YaRN original_max_position_embeddings must be positive, got {}",
               which, r.original_max_position_embeddings);
  TANDEM_CHECK(r.beta_fast > 0 && r.beta_slow > 0,
               "model config: {} YaRN beta_fast and beta_slow must be positive", which);
  TANDEM_CHECK(r.attention_factor > 0,
               "model config: {} YaRN attention_factor must be positive, got {}", which,
               r.attention_factor);
}

// rope_parameters: {full_attention: {...}, sliding_attention: {...}} with transformers' keys,
// every value explicit (the form tandem writes for configs read from HF).
RopeConfig parse_rope_entry(io::ConfigSection s) {
  RopeConfig r;
  r.type = s.get_string("rope_type", "default");
  r.theta = s.get_double("rope_theta");
  if (r.type == "linear" || r.type == "yarn") r.factor = s.get_double("factor");
  if (r.type == "yarn") {
    r.original_max_position_embeddings = s.get_int("original_max_position_embeddings");
    r.beta_fast = s.get_double("beta_fast", 32.0);
    r.beta_slow = s.get_double("beta_slow", 1.0);
    r.attention_factor = s.get_double("attention_factor");
    r.truncate = s.get_bool("truncate", true);
  }
  s.finish();
  return r;
}

// rope_theta (both attention types), optionally rope_scaling (OLMo-core's YaRNRoPEScalingConfig as
// TransformerConfig.with_rope_scaling applies it), or rope_parameters (explicit, per type).
void parse_rope(io::ConfigSection& s, ModelConfig& c) {
  if (s.has("rope_parameters")) {
    TANDEM_CHECK(!s.has("rope_theta") && !s.has("rope_scaling"),
                 "{}: give rope_parameters or rope_theta/rope_scaling, not both",
                 s.where("rope_parameters"));
    io::ConfigSection rp = s.section("rope_parameters");
    c.full_attention_rope = parse_rope_entry(rp.section("full_attention"));
    c.sliding_attention_rope = parse_rope_entry(rp.section("sliding_attention"));
    rp.finish();
    s.mark_used("rope_theta");
    s.mark_used("rope_scaling");
    return;
  }
  RopeConfig plain;
  plain.theta = s.get_double("rope_theta", 500000.0);
  c.full_attention_rope = c.sliding_attention_rope = plain;
  if (!s.has("rope_scaling")) {
    s.mark_used("rope_scaling");
    return;
  }
  io::ConfigSection rs = s.section("rope_scaling");
  const std::string name = rs.get_string("name");
  TANDEM_CHECK(name == "yarn", "{}: '{}' is not supported (yarn)", rs.where("name"), name);
  RopeConfig yarn = plain;
  yarn.type = "yarn";
  yarn.olmo_core_formula = true;
  // OLMo-core's YaRNRoPEScalingConfig field names and defaults.
  yarn.factor = rs.get_double("factor", 8.0);
  yarn.beta_fast = rs.get_double("beta_fast", 32.0);
  yarn.beta_slow = rs.get_double("beta_slow", 1.0);
  yarn.original_max_position_embeddings = rs.get_int("old_context_len", 8192);
  TANDEM_CHECK(yarn.factor > 0, "{} must be positive", rs.where("factor"));
  yarn.attention_factor = olmo_core_yarn_attention_factor(yarn.factor);
  // TransformerConfig.with_rope_scaling(full_attn_layers_only=True): sliding layers keep plain
  // RoPE.
  const bool full_only = rs.get_bool("full_attn_layers_only", true);
  rs.finish();
  c.full_attention_rope = yarn;
  if (!full_only) c.sliding_attention_rope = yarn;
}

void write_rope(const ModelConfig& c, YAML::Node& m) {
  const RopeConfig& full = c.full_attention_rope;
  const RopeConfig& sliding = c.sliding_attention_rope;
  RopeConfig plain;
  plain.theta = full.theta;
  auto olmo_core_yarn = [&](const RopeConfig& r) {
    RopeConfig y = plain;
    y.type = "yarn";
    y.olmo_core_formula = true;
    y.factor = r.factor;
    y.beta_fast = r.beta_fast;
    y.beta_slow = r.beta_slow;
    y.original_max_position_embeddings = r.original_max_position_embeddings;
    y.attention_factor = olmo_core_yarn_attention_factor(r.factor);
    return y;
  };
  if (full == plain && sliding == plain) {
    m["rope_theta"] = full.theta;
    return;
  }
  if (full.type == "yarn" && full == olmo_core_yarn(full) &&
      (sliding == plain || sliding == full)) {
    m["rope_theta"] = full.theta;
    YAML::Node rs;
    rs["name"] = "yarn";
    rs["factor"] = full.factor;
    rs["beta_fast"] = full.beta_fast;
    rs["beta_slow"] = full.beta_slow;
    rs["old_context_len"] = full.original_max_position_embeddings;
    rs["full_attn_layers_only"] = sliding == plain;
    m["rope_scaling"] = rs;
    return;
  }
  // Anything else (e.g. read from an HF config.json): every value explicit, transformers' names.
  auto entry = [](const RopeConfig& r) {
    TANDEM_CHECK(!r.olmo_core_formula,
                 "model config: OLMo-core's YaRN on sliding-window layers only cannot be written");
    YAML::Node e;
    e["rope_type"] = r.type;
    e["rope_theta"] = r.theta;
    if (r.type == "linear" || r.type == "yarn") e["factor"] = r.factor;
    if (r.type == "yarn") {
      e["original_max_position_embeddings"] = r.original_max_position_embeddings;
      e["beta_fast"] = r.beta_fast;
      e["beta_slow"] = r.beta_slow;
      e["attention_factor"] = r.attention_factor;
      e["truncate"] = r.truncate;
    }
    return e;
  };
  m["rope_parameters"]["full_attention"] = entry(full);
  m["rope_parameters"]["sliding_attention"] = entry(sliding);
}

}  // namespace

std::vector<std::int64_t> sliding_window_layout(const std::vector<std::int64_t>& pattern,
                                                std::int64_t n_layers, bool force_first,
                                                bool force_last) {
  TANDEM_CHECK(!pattern.empty(), "sliding window pattern must not be empty");
  check_model_size(n_layers, "the number of layers");
  std::vector<std::int64_t> windows(static_cast<std::size_t>(n_layers));
  const auto len = static_cast<std::int64_t>(pattern.size());
  for (std::int64_t i = 0; i < n_layers; ++i) {
    std::int64_t w;
    if ((force_first && i == 0) || (force_last && i == n_layers - 1)) {
      w = -1;
    } else {
      // OLMo-core: with the first layer forced full, the pattern is applied from layer 1.
      const std::int64_t k = force_first ? i - 1 : i;
      w = pattern[static_cast<std::size_t>(k % len)];
    }
    TANDEM_CHECK(w == -1 || w > 0, "sliding window size must be positive or -1 (got {})", w);
    windows[static_cast<std::size_t>(i)] = w < 0 ? 0 : w;
  }
  return windows;
}

void check_model_size(std::int64_t value, const std::string& where) {
  TANDEM_CHECK(value > 0 && value <= kMaxModelSize, "{} is {}: it must be between 1 and {}", where,
               value, kMaxModelSize);
}

bool ModelConfig::has_sliding_window() const {
  return std::any_of(layer_windows.begin(), layer_windows.end(),
                     [](std::int64_t w) { return w > 0; });
}

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
  validate_rope(full_attention_rope, "full-attention");
  validate_rope(sliding_attention_rope, "sliding-window");
  TANDEM_CHECK(layer_norm_eps > 0, "model config key 'layer_norm_eps' must be positive");
  TANDEM_CHECK(init_std > 0, "model config key 'init_std' must be positive");
  TANDEM_CHECK(max_sequence_length > 0 || max_sequence_length == -1,
               "model config key 'max_sequence_length' must be positive or -1 (no limit), got {}",
               max_sequence_length);
  // Sizes multiply into buffer lengths: bound each one and the total so that no product
  // overflows 64 bits (a typo such as d_model: 40960000 is an error, not a crash).
  for (auto [v, key] : {std::pair{d_model, "d_model"},
                        {n_layers, "n_layers"},
                        {n_heads, "n_heads"},
                        {head_dim, "head_dim"},
                        {hidden_size, "hidden_size"},
                        {embedding_size, "embedding_size"},
                        {max_sequence_length, "max_sequence_length"}})
    TANDEM_CHECK(v <= kMaxModelSize, "model config key '{}' is {}, above the limit of {}", key, v,
                 kMaxModelSize);
  const double params = static_cast<double>(embedding_size) * static_cast<double>(d_model) * 2 +
                        static_cast<double>(n_layers) *
                            (static_cast<double>(d_model) * static_cast<double>(head_dim) *
                                 static_cast<double>(2 * n_heads + 2 * n_kv_heads) +
                             3.0 * static_cast<double>(d_model) * static_cast<double>(hidden_size));
  TANDEM_CHECK(params < 0x1p40, "model config: about {:.3g} parameters, above the limit of 2^40",
               params);
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

std::int64_t causal_attention_pairs(std::int64_t seq_len, std::int64_t window) {
  TANDEM_CHECK(seq_len > 0 && window >= 0, "causal_attention_pairs: bad seq_len {} or window {}",
               seq_len, window);
  if (window == 0 || window >= seq_len) return seq_len * (seq_len + 1) / 2;
  return window * (window + 1) / 2 + (seq_len - window) * window;
}

std::int64_t ModelConfig::olmo_core_flops_per_token(std::int64_t seq_len) const {
  // OLMo-core counts the QK-norm weights with the attention's parameters and the final norm with
  // the lm_head's; the blocks' two norms and the embedding it leaves out.
  const std::int64_t counted_params =
      matmul_params() + n_layers * (q_width() + kv_width()) + d_model;
  std::int64_t flops = 6 * counted_params;
  for (std::int64_t w : layer_windows) {
    // 128 bits: the product before the division outgrows 64 bits at very long sequences.
    const auto pairs = static_cast<unsigned __int128>(causal_attention_pairs(seq_len, w));
    flops += static_cast<std::int64_t>(12 * static_cast<unsigned __int128>(q_width()) * pairs /
                                       static_cast<unsigned __int128>(seq_len));
  }
  return flops;
}

ModelConfig parse_model_config(io::ConfigSection s) {
  ModelConfig c;
  c.d_model = s.get_int("d_model");
  c.n_layers = s.get_int("n_layers");
  check_model_size(c.n_layers, s.where("n_layers"));
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
    check_model_size(multiple, s.where("pad_vocab_to_multiple_of"));
    check_model_size(c.vocab_size, s.where("vocab_size"));
    c.embedding_size = round_up(c.vocab_size, multiple);
  }
  c.layer_norm_eps = s.get_double("layer_norm_eps", 1e-5);
  c.init_std = s.get_double("init_std", 0.02);
  c.max_sequence_length = s.get_int("max_sequence_length", 8192);
  if (s.has("sliding_window")) {
    io::ConfigSection sw = s.section("sliding_window");
    std::vector<std::int64_t> pattern = sw.get_int_list("pattern");
    TANDEM_CHECK(!pattern.empty(), "{} must not be empty", sw.where("pattern"));
    for (auto w : pattern)
      TANDEM_CHECK(w == -1 || w > 0, "{}: window {} must be positive or -1 (full)",
                   sw.where("pattern"), w);
    // OLMo-core's defaults (SlidingWindowAttentionConfig): both forced to full attention.
    bool first = sw.get_bool("force_full_attention_on_first_layer", true);
    bool last = sw.get_bool("force_full_attention_on_last_layer", true);
    sw.finish();
    c.layer_windows = sliding_window_layout(pattern, c.n_layers, first, last);
  } else {
    s.mark_used("sliding_window");
    c.layer_windows.assign(static_cast<std::size_t>(c.n_layers), 0);
  }
  parse_rope(s, c);
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
  write_rope(c, m);
  m["layer_norm_eps"] = c.layer_norm_eps;
  m["init_std"] = c.init_std;
  m["max_sequence_length"] = c.max_sequence_length;
  if (c.has_sliding_window()) {
    // Written as an explicit per-layer pattern so any layout round-trips exactly.
    YAML::Node pattern(YAML::NodeType::Sequence);
    for (auto w : c.layer_windows) pattern.push_back(w == 0 ? -1 : w);
    m["sliding_window"]["pattern"] = pattern;
    m["sliding_window"]["force_full_attention_on_first_layer"] = false;
    m["sliding_window"]["force_full_attention_on_last_layer"] = false;
  }
  return m;
}

}  // namespace tandem::model
