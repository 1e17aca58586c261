#include "tandem/model/parameters.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::model {

std::string block_param(std::int64_t layer, const char* suffix) {
  return "blocks." + std::to_string(layer) + "." + suffix;
}

ParameterLayout::ParameterLayout(const ModelConfig& c) {
  add("embeddings.weight", {c.embedding_size, c.d_model}, false);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    add(block_param(l, "attention.w_q.weight"), {c.q_width(), c.d_model}, false);
    add(block_param(l, "attention.w_k.weight"), {c.kv_width(), c.d_model}, false);
    add(block_param(l, "attention.w_v.weight"), {c.kv_width(), c.d_model}, false);
    add(block_param(l, "attention.w_out.weight"), {c.d_model, c.q_width()}, false);
    add(block_param(l, "attention.q_norm.weight"), {c.q_width()}, true);
    add(block_param(l, "attention.k_norm.weight"), {c.kv_width()}, true);
    add(block_param(l, "attention_norm.weight"), {c.d_model}, true);
    add(block_param(l, "feed_forward.w1.weight"), {c.hidden_size, c.d_model}, false);
    add(block_param(l, "feed_forward.w2.weight"), {c.d_model, c.hidden_size}, false);
    add(block_param(l, "feed_forward.w3.weight"), {c.hidden_size, c.d_model}, false);
    add(block_param(l, "feed_forward_norm.weight"), {c.d_model}, true);
  }
  add("lm_head.norm.weight", {c.d_model}, true);
  add("lm_head.w_out.weight", {c.embedding_size, c.d_model}, false);
  entries_[index_.at("embeddings.weight")].weight_decay = false;
}

void ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, bool is_norm) {
  ParameterEntry e;
  e.name = std::move(name);
  e.shape = std::move(shape);
  e.numel = 1;
  for (auto s : e.shape) e.numel *= s;
  // Keep every tensor 64-byte aligned inside the flat buffer (16 floats).
  e.offset = (total_ + 15) / 16 * 16;
  e.is_norm = is_norm;
  total_ = e.offset + e.numel;
  index_[e.name] = entries_.size();
  entries_.push_back(std::move(e));
}

const ParameterEntry& ParameterLayout::entry(const std::string& name) const {
  auto it = index_.find(name);
  TANDEM_CHECK(it != index_.end(), "no parameter named '{}'", name);
  return entries_[it->second];
}

kernels::Tensor parameter_view(const ParameterLayout& layout, const kernels::Tensor& flat,
                               const std::string& name) {
  TANDEM_CHECK(flat.numel() == layout.total(), "parameter buffer {} does not fit the layout ({})",
               flat.str(), layout.total());
  return parameter_view_from(layout, flat, 0, name);
}

ModelTensors model_tensors(const ParameterLayout& layout, const kernels::Tensor& flat) {
  TANDEM_CHECK(flat.numel() == layout.total(), "parameter buffer {} does not fit the layout ({})",
               flat.str(), layout.total());
  return model_tensors_from(layout, flat, 0);
}

ModelTensors model_tensors_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                std::int64_t first) {
  TANDEM_CHECK(flat.numel() == layout.total() - first,
               "parameter buffer {} does not hold the layout ({}) from {} on", flat.str(),
               layout.total(), first);
  // A parameter before `first` (the embedding table of the bf16 compute copy) has no view.
  auto view = [&](const std::string& name) {
    return layout.entry(name).offset < first ? kernels::Tensor()
                                             : parameter_view_from(layout, flat, first, name);
  };
  ModelTensors t;
  t.embeddings = view("embeddings.weight");
  for (std::int64_t l = 0; layout.has(block_param(l, "attention.w_q.weight")); ++l)
    t.blocks.push_back(block_tensors_from(layout, flat, first, l));
  t.final_norm = view("lm_head.norm.weight");
  t.lm_head = view("lm_head.w_out.weight");
  return t;
}

kernels::Tensor parameter_view_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                    std::int64_t first, const std::string& name) {
  const ParameterEntry& e = layout.entry(name);
  TANDEM_CHECK(e.offset >= first && e.offset + e.numel - first <= flat.numel(),
               "parameter '{}' is not inside buffer {} (which starts at layout element {})", name,
               flat.str(), first);
  kernels::Shape shape =
      e.shape.size() == 1 ? kernels::Shape{e.shape[0]} : kernels::Shape{e.shape[0], e.shape[1]};
  return flat.view(e.offset - first, shape);
}

BlockTensors block_tensors_from(const ParameterLayout& layout, const kernels::Tensor& flat,
                                std::int64_t first, std::int64_t l) {
  auto b = [&](const char* suffix) {
    return parameter_view_from(layout, flat, first, block_param(l, suffix));
  };
  return {b("attention.w_q.weight"),   b("attention.w_k.weight"),    b("attention.w_v.weight"),
          b("attention.w_out.weight"), b("attention.q_norm.weight"), b("attention.k_norm.weight"),
          b("attention_norm.weight"),  b("feed_forward.w1.weight"),  b("feed_forward.w2.weight"),
          b("feed_forward.w3.weight"), b("feed_forward_norm.weight")};
}

void init_parameter_range(const ParameterLayout& layout, std::size_t index, double std,
                          std::uint64_t seed, std::int64_t start, std::span<float> out) {
  const ParameterEntry& e = layout.entries().at(index);
  const auto end = start + static_cast<std::int64_t>(out.size());
  TANDEM_CHECK(start >= 0 && end <= e.numel, "init of '{}': range [{}, {}) outside its {} elements",
               e.name, start, end, e.numel);
  if (e.is_norm) {
    for (float& v : out) v = 1.0f;
    return;
  }
  // One generator per tensor, seeded from (seed, tensor index): independent of threading, of the
  // other tensors' sizes and of how the tensor is sharded.
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(index)};
  std::mt19937_64 rng(seq);
  std::normal_distribution<double> normal(0.0, std);
  for (std::int64_t j = 0; j < end; ++j) {
    double v;
    do {
      v = normal(rng);
    } while (std::fabs(v) > 3.0 * std);  // rejection = normal truncated at +-3 std
    if (j >= start) out[static_cast<std::size_t>(j - start)] = static_cast<float>(v);
  }
}

void init_parameters(const ParameterLayout& layout, double std, std::uint64_t seed, float* flat) {
  // Tensors on all threads, largest first (a 7B model's 7.3e9 draws take about two minutes on one
  // core); each tensor has its own generator, so the values do not depend on the threads.
  const auto& entries = layout.entries();
  std::vector<std::size_t> order(entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].numel > entries[b].numel;
  });
  const auto n = static_cast<std::int64_t>(order.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t k = 0; k < n; ++k) {
    const std::size_t i = order[static_cast<std::size_t>(k)];
    const ParameterEntry& e = entries[i];
    init_parameter_range(layout, i, std, seed, 0,
                         std::span<float>(flat + e.offset, static_cast<std::size_t>(e.numel)));
  }
}

}  // namespace tandem::model
