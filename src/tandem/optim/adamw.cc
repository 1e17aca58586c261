#include "tandem/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"

namespace tandem::optim {

bool olmo_weight_decay_applies(std::string_view name) {
  return name != "embeddings.weight" && name != "model.embed_tokens.weight";
}

void AdamWHyper::validate() const {
  TANDEM_CHECK(beta1 >= 0.0 && beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got {}", beta1);
  TANDEM_CHECK(beta2 >= 0.0 && beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got {}", beta2);
  TANDEM_CHECK(eps >= 0.0 && std::isfinite(eps), "AdamW: eps must be >= 0, got {}", eps);
  TANDEM_CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
               "AdamW: weight_decay must be >= 0, got {}", weight_decay);
}

AdamW::AdamW(std::vector<ParamBuffer> params, AdamWHyper hyper)
    : params_(std::move(params)), hyper_(hyper) {
  hyper_.validate();
  std::size_t total = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamBuffer& p = params_[i];
    TANDEM_CHECK(p.size == 0 || (p.param != nullptr && p.grad != nullptr),
                 "AdamW: parameter '{}' has no buffer", p.name);
    for (std::size_t j = 0; j < i; ++j)
      TANDEM_CHECK(params_[j].name != p.name, "AdamW: parameter '{}' registered twice", p.name);
    offsets_.push_back(total);
    total += p.size;
  }
  exp_avg_.assign(total, 0.0f);
  exp_avg_sq_.assign(total, 0.0f);
}

void AdamW::rebind(std::size_t i, float* param, const float* grad) {
  TANDEM_CHECK(i < params_.size(), "AdamW: no parameter {}", i);
  params_[i].param = param;
  params_[i].grad = grad;
}

std::size_t AdamW::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return i;
  fail("AdamW: unknown parameter '{}'", name);
}

std::span<float> AdamW::exp_avg(std::size_t i) {
  return std::span<float>(exp_avg_).subspan(offsets_.at(i), params_.at(i).size);
}
std::span<float> AdamW::exp_avg_sq(std::size_t i) {
  return std::span<float>(exp_avg_sq_).subspan(offsets_.at(i), params_.at(i).size);
}

void AdamW::set_step_count(std::int64_t step) {
  TANDEM_CHECK(step >= 0, "AdamW: step count must be >= 0, got {}", step);
  step_ = step;
}

void AdamW::step(double lr) { step_range(lr, 0, total_size()); }

void AdamW::step_range(double lr, std::size_t begin, std::size_t end) {
  TANDEM_CHECK(std::isfinite(lr) && lr >= 0.0, "AdamW: learning rate must be >= 0, got {}", lr);
  TANDEM_CHECK(begin <= end && end <= total_size(), "AdamW: range [{}, {}) outside [0, {})", begin,
               end, total_size());
  const double t = static_cast<double>(step_ + 1);
  // Scalars are formed in double and rounded to fp32 once, as torch does with Python scalars.
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, t);
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay_factor = static_cast<float>(1.0 - lr * hyper_.weight_decay);
  const float one_minus_beta1 = static_cast<float>(1.0 - hyper_.beta1);
  const float beta2 = static_cast<float>(hyper_.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - hyper_.beta2);
  const float eps = static_cast<float>(hyper_.eps);

  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::size_t lo = std::max(begin, offsets_[i]);
    const std::size_t hi = std::min(end, offsets_[i] + params_[i].size);
    if (lo >= hi) continue;
    float* p = params_[i].param;
    const float* g = params_[i].grad;
    float* m = exp_avg_.data() + offsets_[i];
    float* v = exp_avg_sq_.data() + offsets_[i];
    const bool decay = params_[i].weight_decay && hyper_.weight_decay != 0.0;
    const auto first = static_cast<std::int64_t>(lo - offsets_[i]);
    const auto last = static_cast<std::int64_t>(hi - offsets_[i]);
#pragma omp parallel for schedule(static)
    for (std::int64_t k = first; k < last; ++k) {
      float pk = p[k];
      const float gk = g[k];
      if (decay) pk = pk * decay_factor;
      // torch's lerp kernel: m + w * (g - m) as one fused multiply-add.
      const float mk = std::fma(one_minus_beta1, gk - m[k], m[k]);
      // torch's mul_ then addcmul_: v * beta2 + ((1 - beta2) * g) * g.
      const float vk = v[k] * beta2 + one_minus_beta2 * gk * gk;
      const float denom = std::sqrt(vk) / bias_correction2_sqrt + eps;
      // torch's addcdiv_: p + (value * m) / denom.
      p[k] = pk + neg_step_size * mk / denom;
      m[k] = mk;
      v[k] = vk;
    }
  }
  ++step_;
}

}  // namespace tandem::optim
