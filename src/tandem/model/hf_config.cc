#include "tandem/model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/kernels/rope_table.h"

namespace tandem::model {
namespace {

using json = nlohmann::json;

const char* kFull = "full_attention";
const char* kSliding = "sliding_attention";

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// An integer field with transformers' default when absent; null is refused (transformers' strict
// config rejects it or fails building the model).
std::int64_t int_or(const json& hf, const char* key, std::int64_t fallback,
                    const std::string& src) {
  if (!hf.contains(key)) return fallback;
  TANDEM_CHECK(hf[key].is_number_integer(), "{}: '{}' must be an integer, got {}", src, key,
               hf[key].dump());
  return hf[key].get<std::int64_t>();
}

double number_or(const json& hf, const char* key, double fallback, const std::string& src) {
  if (!hf.contains(key)) return fallback;
  TANDEM_CHECK(hf[key].is_number(), "{}: '{}' must be a number, got {}", src, key, hf[key].dump());
  return hf[key].get<double>();
}

// j[key] when present (it must then be a string or a boolean), else `fallback`; the error names
// the key and the value found.
std::string string_or(const json& j, const char* key, const std::string& fallback,
                      const std::string& where) {
  if (!j.contains(key)) return fallback;
  TANDEM_CHECK(j[key].is_string(), "{}: '{}' must be a string, got {}", where, key, j[key].dump());
  return j[key].get<std::string>();
}

bool bool_or(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  TANDEM_CHECK(j[key].is_boolean(), "{}: '{}' must be true or false, got {}", where, key,
               j[key].dump());
  return j[key].get<bool>();
}

// e[key], which must be a number (the error names the key and the value found).
double number_at(const json& e, const char* key, const std::string& where) {
  TANDEM_CHECK(e.contains(key) && e[key].is_number(), "{}: '{}' must be a number, got {}", where,
               key, e.contains(key) ? e[key].dump() : std::string("nothing"));
  return e[key].get<double>();
}

// transformers' get_mscale (YaRN paper, section 3.4).
double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// Python truthiness of an optional number: absent, null and 0 all count as "not given".
std::optional<double> truthy_number(const json& e, const char* key, const std::string& where) {
  if (!present(e, key)) return std::nullopt;
  const double v = number_at(e, key, where);
  return v != 0.0 ? std::optional<double>(v) : std::nullopt;
}

// One standardized rope_parameters entry -> RopeConfig, as the rotary embedding's init functions
// read it. `truncate` is where transformers reads it: the top level of config.rope_parameters.
RopeConfig rope_from_entry(const json& e, bool truncate, std::int64_t max_position_embeddings,
                           const std::string& where) {
  RopeConfig r;
  r.type = string_or(e, "rope_type", "default", where);
  TANDEM_CHECK(r.type == "default" || r.type == "linear" || r.type == "yarn",
               "{}: rope_type '{}' is not supported (default, linear, yarn)", where, r.type);
  TANDEM_CHECK(present(e, "rope_theta") && e["rope_theta"].is_number(),
               "{}: rope_theta must be a number", where);
  r.theta = e["rope_theta"].get<double>();
  if (r.type == "default") return r;
  // The scaled types use int(head_dim * partial_rotary_factor) dimensions.
  TANDEM_CHECK(!present(e, "partial_rotary_factor") || e["partial_rotary_factor"] == 1.0,
               "{}: partial_rotary_factor {} is not supported", where,
               e.value("partial_rotary_factor", json()).dump());
  TANDEM_CHECK(e.contains("factor"), "{}: rope_type '{}' needs 'factor'", where, r.type);
  if (r.type == "linear") {
    r.factor = number_at(e, "factor", where);
    return r;
  }
  TANDEM_CHECK(present(e, "original_max_position_embeddings") &&
                   e["original_max_position_embeddings"].is_number_integer(),
               "{}: original_max_position_embeddings must be an integer", where);
  r.original_max_position_embeddings = e["original_max_position_embeddings"].get<std::int64_t>();
  TANDEM_CHECK(r.original_max_position_embeddings > 0,
               "{}: original_max_position_embeddings must be positive, got {}", where,
               r.original_max_position_embeddings);
  // factor null: the ratio of the extended to the original context.
  r.factor = e["factor"].is_null() ? static_cast<double>(max_position_embeddings) /
                                         static_cast<double>(r.original_max_position_embeddings)
                                   : number_at(e, "factor", where);
  if (present(e, "attention_factor")) {
    r.attention_factor = number_at(e, "attention_factor", where);
  } else {
    auto mscale = truthy_number(e, "mscale", where);
    auto mscale_all_dim = truthy_number(e, "mscale_all_dim", where);
    r.attention_factor = mscale && mscale_all_dim ? yarn_mscale(r.factor, *mscale) /
                                                        yarn_mscale(r.factor, *mscale_all_dim)
                                                  : yarn_mscale(r.factor, 1.0);
  }
  r.beta_fast = truthy_number(e, "beta_fast", where).value_or(32.0);
  r.beta_slow = truthy_number(e, "beta_slow", where).value_or(1.0);
  r.truncate = truncate;
  return r;
}

// The standardization step of transformers' RotaryEmbeddingConfigMixin for one entry.
void standardize_entry(json& e, std::int64_t max_position_embeddings, const std::string& where) {
  if (!e.contains("rope_type")) e["rope_type"] = string_or(e, "type", "default", where);
  const std::string type = e["rope_type"].is_string() ? e["rope_type"].get<std::string>() : "";
  if ((type == "yarn" || type == "llama3" || type == "longrope") &&
      !e.contains("original_max_position_embeddings"))
    e["original_max_position_embeddings"] = max_position_embeddings;
}

// Olmo3Config.convert_rope_params_to_dict: the legacy flat rope_theta goes to full_attention only
// (it is consumed there, so sliding_attention falls back to 500000), rope_scaling updates
// full_attention, flat keys of rope_parameters are ignored.
void olmo3_rope(const json& hf, ModelConfig& c, std::int64_t max_pos, const std::string& src) {
  json params = present(hf, "rope_parameters") ? hf["rope_parameters"]
                                               : json{{kSliding, {{"rope_type", "default"}}},
                                                      {kFull, {{"rope_type", "default"}}}};
  TANDEM_CHECK(params.is_object(), "{}: rope_parameters must be an object", src);
  if (present(hf, "rope_scaling")) {
    TANDEM_CHECK(hf["rope_scaling"].is_object(), "{}: rope_scaling must be an object", src);
    TANDEM_CHECK(present(params, kFull) && params[kFull].is_object(),
                 "{}: rope_scaling needs rope_parameters.full_attention (transformers: KeyError)",
                 src);
    params[kFull].update(hf["rope_scaling"]);
  }
  TANDEM_CHECK(!(hf.contains("rope_theta") && hf["rope_theta"].is_null()), "{}: rope_theta is null",
               src);
  const double legacy_theta = number_or(hf, "rope_theta", 500000.0, src);
  for (const char* type : {kFull, kSliding}) {
    if (!present(params, type)) params[type] = json{{"rope_type", "default"}};
    TANDEM_CHECK(params[type].is_object(), "{}: rope_parameters.{} must be an object", src, type);
    if (!params[type].contains("rope_theta"))
      params[type]["rope_theta"] = type == kFull ? legacy_theta : 500000.0;
    standardize_entry(params[type], max_pos, src + ": rope_parameters." + type);
  }
  const bool truncate = bool_or(params, "truncate", true, src + ": rope_parameters");
  // Only the types some layer uses are built (an unused entry is never read).
  bool uses_full = false, uses_sliding = false;
  for (auto w : c.layer_windows) (w == 0 ? uses_full : uses_sliding) = true;
  if (uses_full)
    c.full_attention_rope =
        rope_from_entry(params[kFull], truncate, max_pos, src + ": rope_parameters.full_attention");
  if (uses_sliding)
    c.sliding_attention_rope = rope_from_entry(params[kSliding], truncate, max_pos,
                                               src + ": rope_parameters.sliding_attention");
}

// The generic RotaryEmbeddingConfigMixin for Olmo2Config: one flat entry, rope_scaling replacing
// rope_parameters when given, rope_theta defaulting to 10000.
void olmo2_rope(const json& hf, ModelConfig& c, std::int64_t max_pos, const std::string& src) {
  json params = json::object();
  if (present(hf, "rope_scaling") && !hf["rope_scaling"].empty())
    params = hf["rope_scaling"];
  else if (present(hf, "rope_parameters"))
    params = hf["rope_parameters"];
  TANDEM_CHECK(params.is_object(), "{}: rope_parameters must be an object", src);
  TANDEM_CHECK(!params.contains(kFull) && !params.contains(kSliding),
               "{}: olmo2 has one RoPE for every layer; rope_parameters per layer type is not "
               "supported",
               src);
  TANDEM_CHECK(!(hf.contains("rope_theta") && hf["rope_theta"].is_null()), "{}: rope_theta is null",
               src);
  if (!params.contains("rope_theta"))
    params["rope_theta"] = number_or(hf, "rope_theta", 10000.0, src);
  if (present(hf, "original_max_position_embeddings") &&
      string_or(params, "rope_type", string_or(params, "type", "default", src), src) != "default")
    params["original_max_position_embeddings"] = hf["original_max_position_embeddings"];
  standardize_entry(params, max_pos, src + ": rope_parameters");
  c.full_attention_rope =
      rope_from_entry(params, bool_or(params, "truncate", true, src + ": rope_parameters"), max_pos,
                      src + ": rope_parameters");
  c.sliding_attention_rope = c.full_attention_rope;
}

json rope_entry_to_hf(const RopeConfig& r) {
  json e{{"rope_theta", r.theta}, {"rope_type", r.type}};
  if (r.type == "linear" || r.type == "yarn") e["factor"] = r.factor;
  if (r.type == "yarn") {
    e["original_max_position_embeddings"] = r.original_max_position_embeddings;
    e["beta_fast"] = r.beta_fast;
    e["beta_slow"] = r.beta_slow;
    e["attention_factor"] = r.attention_factor;
  }
  return e;
}

// transformers' YaRN is the only one an HF config can describe: refuse a config whose OLMo-core
// YaRN frequencies transformers would compute differently (the ramp clamped elsewhere).
void check_exportable(const RopeConfig& r, std::int64_t head_dim) {
  if (r.type != "yarn" || !r.olmo_core_formula) return;
  namespace k = kernels;
  k::YarnParameters p;
  p.factor = r.factor;
  p.original_max_positions = r.original_max_position_embeddings;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.attention_factor = r.attention_factor;
  p.formula = k::YarnFormula::kOlmoCore;
  const auto ours = k::rope_yarn_frequencies(head_dim, r.theta, p);
  p.formula = k::YarnFormula::kTransformers;
  const auto theirs = k::rope_yarn_frequencies(head_dim, r.theta, p);
  for (std::size_t i = 0; i < ours.inv_freq.size(); ++i)
    TANDEM_CHECK(std::abs(ours.inv_freq[i] - theirs.inv_freq[i]) <= 1e-6f * ours.inv_freq[i],
                 "HF config: OLMo-core's YaRN (factor {}, old_context_len {}, theta {}) ramps "
                 "differently from transformers' at head_dim {} (frequency {}: {} vs {}); the "
                 "exported model would not be the same function",
                 r.factor, r.original_max_position_embeddings, r.theta, head_dim, i,
                 ours.inv_freq[i], theirs.inv_freq[i]);
}

ModelConfig read_hf_config(const json& hf, const std::string& src) {
  TANDEM_CHECK(hf.is_object(), "{}: not a JSON object", src);
  const std::string type = string_or(hf, "model_type", "", src);
  TANDEM_CHECK(type == "olmo3" || type == "olmo2",
               "{}: model_type '{}' is not supported (olmo2 or olmo3)", src, type);
  TANDEM_CHECK(!bool_or(hf, "tie_word_embeddings", false, src),
               "{}: tied embeddings are not part of the OLMo family", src);
  TANDEM_CHECK(!bool_or(hf, "attention_bias", false, src), "{}: attention biases are not supported",
               src);
  const std::string act = string_or(hf, "hidden_act", "silu", src);
  TANDEM_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (silu)", src, act);

  // Olmo2Config / Olmo3Config defaults.
  ModelConfig c;
  c.d_model = int_or(hf, "hidden_size", 4096, src);
  c.n_layers = int_or(hf, "num_hidden_layers", 32, src);
  check_model_size(c.n_layers, src + ": 'num_hidden_layers'");
  c.n_heads = int_or(hf, "num_attention_heads", 32, src);
  TANDEM_CHECK(c.n_heads > 0, "{}: num_attention_heads must be positive", src);
  c.n_kv_heads =
      present(hf, "num_key_value_heads") ? int_or(hf, "num_key_value_heads", 0, src) : c.n_heads;
  TANDEM_CHECK(!(hf.contains("head_dim") && hf["head_dim"].is_null()),
               "{}: head_dim is null (transformers cannot build this model)", src);
  c.head_dim = int_or(hf, "head_dim", c.d_model / c.n_heads, src);
  c.hidden_size = int_or(hf, "intermediate_size", 11008, src);
  c.vocab_size = int_or(hf, "vocab_size", 50304, src);
  c.embedding_size = c.vocab_size;
  c.layer_norm_eps = number_or(hf, "rms_norm_eps", 1e-5, src);
  c.init_std = number_or(hf, "initializer_range", 0.02, src);
  const std::int64_t max_pos = int_or(hf, "max_position_embeddings", 2048, src);
  // transformers never enforces it; -1 (OLMo-core's export) means no limit.
  c.max_sequence_length = max_pos > 0 ? max_pos : -1;

  c.layer_windows.assign(static_cast<std::size_t>(c.n_layers), 0);
  if (type == "olmo3") {
    std::vector<std::string> types;
    if (present(hf, "layer_types")) {
      const json& lt = hf["layer_types"];
      TANDEM_CHECK(lt.is_array() && static_cast<std::int64_t>(lt.size()) == c.n_layers,
                   "{}: layer_types must list one type per layer ({}), got {}", src, c.n_layers,
                   lt.dump());
      for (const auto& t : lt) {
        TANDEM_CHECK(t == kFull || t == kSliding,
                     "{}: layer type {} is not supported (full_attention, sliding_attention)", src,
                     t.dump());
        types.push_back(t.get<std::string>());
      }
    } else {
      // Olmo3Config's default: full attention iff (i + 1) % 4 == 0, nothing forced.
      for (std::int64_t i = 0; i < c.n_layers; ++i)
        types.push_back((i + 1) % 4 == 0 ? kFull : kSliding);
    }
    const bool any_sliding = std::find(types.begin(), types.end(), kSliding) != types.end();
    std::int64_t window = 4096;
    if (hf.contains("sliding_window")) {
      TANDEM_CHECK(!any_sliding || hf["sliding_window"].is_number_integer(),
                   "{}: sliding_window must be an integer for sliding_attention layers, got {}",
                   src, hf["sliding_window"].dump());
      if (hf["sliding_window"].is_number_integer())
        window = hf["sliding_window"].get<std::int64_t>();
    }
    TANDEM_CHECK(!any_sliding || window > 0, "{}: sliding_window must be positive, got {}", src,
                 window);
    for (std::size_t i = 0; i < types.size(); ++i)
      c.layer_windows[i] = types[i] == kSliding ? window : 0;
    olmo3_rope(hf, c, max_pos, src);
  } else {
    olmo2_rope(hf, c, max_pos, src);
  }
  c.validate();
  return c;
}

}  // namespace

ModelConfig model_config_from_hf(const json& hf, const std::string& src) {
  try {
    return read_hf_config(hf, src);
  } catch (const json::exception& e) {  // a value of the wrong JSON type
    core::fail("{}: {}", src, e.what());
  }
}

json model_config_to_hf(const ModelConfig& c, const std::string& dtype) {
  const bool olmo3 = c.has_sliding_window();
  json hf;
  hf["architectures"] = {olmo3 ? "Olmo3ForCausalLM" : "Olmo2ForCausalLM"};
  hf["attention_bias"] = false;
  hf["attention_dropout"] = 0.0;
  // Token ids belong to the tokenizer, not the model config; null keeps HF from assuming its own.
  hf["bos_token_id"] = nullptr;
  hf["dtype"] = dtype;
  hf["eos_token_id"] = nullptr;
  hf["head_dim"] = c.head_dim;
  hf["hidden_act"] = "silu";
  hf["hidden_size"] = c.d_model;
  hf["initializer_range"] = c.init_std;
  hf["intermediate_size"] = c.hidden_size;
  hf["max_position_embeddings"] = c.max_sequence_length;
  hf["model_type"] = olmo3 ? "olmo3" : "olmo2";
  hf["num_attention_heads"] = c.n_heads;
  hf["num_hidden_layers"] = c.n_layers;
  hf["num_key_value_heads"] = c.n_kv_heads;
  hf["pad_token_id"] = nullptr;
  hf["rms_norm_eps"] = c.layer_norm_eps;
  hf["tie_word_embeddings"] = false;
  hf["use_cache"] = true;
  hf["vocab_size"] = c.vocab_size;
  check_exportable(c.full_attention_rope, c.head_dim);
  if (!olmo3) {
    hf["rope_parameters"] = rope_entry_to_hf(c.full_attention_rope);
    if (c.full_attention_rope.type == "yarn" && !c.full_attention_rope.truncate)
      hf["rope_parameters"]["truncate"] = false;
    return hf;
  }
  check_exportable(c.sliding_attention_rope, c.head_dim);
  std::int64_t window = 0;
  json types = json::array();
  for (auto w : c.layer_windows) {
    TANDEM_CHECK(w == 0 || window == 0 || w == window,
                 "HF Olmo3 supports one sliding window size; layers use {} and {}", window, w);
    if (w > 0) window = w;
    types.push_back(w > 0 ? kSliding : kFull);
  }
  hf["layer_types"] = types;
  hf["sliding_window"] = window;
  hf["rope_parameters"] = {{kFull, rope_entry_to_hf(c.full_attention_rope)},
                           {kSliding, rope_entry_to_hf(c.sliding_attention_rope)}};
  // Olmo3 reads YaRN's truncate from the top level of rope_parameters, for both types at once.
  const bool full_truncate = c.full_attention_rope.type != "yarn" || c.full_attention_rope.truncate;
  const bool sliding_truncate =
      c.sliding_attention_rope.type != "yarn" || c.sliding_attention_rope.truncate;
  if (!full_truncate || !sliding_truncate) {
    TANDEM_CHECK(c.full_attention_rope.type != "yarn" || c.sliding_attention_rope.type != "yarn" ||
                     full_truncate == sliding_truncate,
                 "HF Olmo3 has one YaRN truncate setting for both attention types");
    hf["rope_parameters"]["truncate"] = false;
  }
  return hf;
}

}  // namespace tandem::model
