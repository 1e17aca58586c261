#include "tandem/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::optim {

bool olmo_weight_decay_applies(std::string_view name) {
  return name != "embeddings.weight" && name != "model.embed_tokens.weight";
}

AdamW::AdamW(kernels::Backend& backend, std::vector<ParamBuffer> params, AdamWHyper hyper)
    : backend_(backend), params_(std::move(params)), hyper_(hyper) {
  hyper_.validate();
  std::size_t total = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamBuffer& p = params_[i];
    TANDEM_CHECK(p.param.dtype() == kernels::DType::f32 && p.grad.dtype() == kernels::DType::f32 &&
                     p.grad.numel() == p.param.numel() && (p.size() == 0 || (p.param && p.grad)),
                 "AdamW: parameter '{}' has no f32 buffer of its gradient's size", p.name);
    for (std::size_t j = 0; j < i; ++j)
      TANDEM_CHECK(params_[j].name != p.name, "AdamW: parameter '{}' registered twice", p.name);
    offsets_.push_back(total);
    total += p.size();
    const ParamHyper h = hyper_.resolve(p);
    decays_.push_back(h.weight_decay);
    add_to_update_call(h, i);
  }
  total_ = total;
  const kernels::Shape flat{static_cast<std::int64_t>(total)};
  exp_avg_ = backend_.allocate(kernels::DType::f32, flat);
  exp_avg_sq_ = backend_.allocate(kernels::DType::f32, flat);
  backend_.zero(exp_avg_);
  backend_.zero(exp_avg_sq_);
}

kernels::Tensor AdamW::exp_avg(std::size_t i) const {
  const auto n = static_cast<std::int64_t>(params_.at(i).size());
  return exp_avg_.tensor().view(static_cast<std::int64_t>(offsets_.at(i)), kernels::Shape{n});
}
kernels::Tensor AdamW::exp_avg_sq(std::size_t i) const {
  const auto n = static_cast<std::int64_t>(params_.at(i).size());
  return exp_avg_sq_.tensor().view(static_cast<std::int64_t>(offsets_.at(i)), kernels::Shape{n});
}

std::vector<std::pair<kernels::Tensor, kernels::Tensor>> AdamW::moment_runs() const {
  std::vector<std::pair<kernels::Tensor, kernels::Tensor>> out;
  for (std::size_t i = 0; i < params_.size(); ++i) out.emplace_back(exp_avg(i), exp_avg_sq(i));
  return out;
}

void AdamW::set_step_count(std::int64_t step) {
  TANDEM_CHECK(step >= 0, "AdamW: step count must be >= 0, got {}", step);
  step_ = step;
}

void AdamW::add_to_update_call(const ParamHyper& h, std::size_t param) {
  auto same_options = [&](const UpdateCall& c) {
    return c.hyper.lr_slot == h.lr_slot && c.hyper.beta1 == h.beta1 && c.hyper.beta2 == h.beta2 &&
           c.hyper.eps == h.eps;
  };
  // A parameter without decay joins any call with its options; one with decay a call with its
  // decay, or one that so far holds only parameters without decay (which then takes it).
  for (UpdateCall& c : calls_) {
    if (!same_options(c)) continue;
    if (h.weight_decay == 0.0 || c.hyper.weight_decay == h.weight_decay) {
      c.params.push_back(param);
      return;
    }
  }
  for (UpdateCall& c : calls_) {
    if (same_options(c) && c.hyper.weight_decay == 0.0) {
      c.hyper.weight_decay = h.weight_decay;
      c.params.push_back(param);
      return;
    }
  }
  calls_.push_back({h, {param}});
}

kernels::AdamWScalars adamw_scalars(kernels::AdamWArithmetic arithmetic, const ParamHyper& h,
                                    double lr, std::int64_t t) {
  TANDEM_CHECK(t >= 1, "AdamW: update number {} (counted from 1)", t);
  kernels::AdamWScalars k;
  k.arithmetic = arithmetic;
  k.eps = static_cast<float>(h.eps);
  if (arithmetic != kernels::AdamWArithmetic::torch_adamw) {  // OLMo-core's, both paths
    // fp32 tensors throughout; the step count is fp32 in OLMo-core too (exact below 2^24).
    const auto tf = static_cast<float>(t);
    const auto w1 = static_cast<float>(1.0 - h.beta1), w2 = static_cast<float>(1.0 - h.beta2);
    const float bias_correction1 = 1.0f - std::pow(static_cast<float>(h.beta1), tf);
    const float bias_correction2 = 1.0f - std::pow(static_cast<float>(h.beta2), tf);
    k.neg_step_size = -((1.0f / bias_correction1) * static_cast<float>(lr));
    k.bias_correction2_sqrt = std::sqrt(bias_correction2);
    k.beta1 = 1.0f - w1;
    k.one_minus_beta1 = w1;
    k.beta2 = 1.0f - w2;
    k.one_minus_beta2 = w2;
    k.decay_factor = 1.0f - static_cast<float>(lr * h.weight_decay);
    return k;
  }
  // Scalars are formed in double and rounded to fp32 once, as torch does with Python scalars.
  const auto td = static_cast<double>(t);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, td);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, td);
  k.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  k.beta1 = 1.0f - k.one_minus_beta1;  // the lerp's 1 - w, in fp32 as torch's kernel
  k.beta2 = static_cast<float>(h.beta2);
  k.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  k.decay_factor = static_cast<float>(1.0 - lr * h.weight_decay);
  return k;
}

void AdamW::step(std::span<const double> lrs) { step_range(lrs, 0, total_size()); }

void AdamW::step(double lr) {
  if (hyper_.groups)
    for (const ParamGroupOverride& g : *hyper_.groups)
      TANDEM_CHECK(!g.lr, "AdamW: one learning rate given, but a parameter group has its own lr");
  step(std::vector<double>(hyper_.lr_slots(), lr));
}

void AdamW::step_range(std::span<const double> lrs, std::size_t begin, std::size_t end) {
  TANDEM_CHECK(lrs.size() == hyper_.lr_slots(), "AdamW: {} learning rate(s) given, {} expected",
               lrs.size(), hyper_.lr_slots());
  // Finite, not necessarily >= 0: a schedule's linear decay goes below its floor past t_max, as
  // OLMo-core's does (optim/schedule.cc); configured lrs are checked >= 0 where they are read.
  for (double lr : lrs)
    TANDEM_CHECK(std::isfinite(lr), "AdamW: learning rate must be finite, got {}", lr);
  TANDEM_CHECK(begin <= end && end <= total_size(), "AdamW: range [{}, {}) outside [0, {})", begin,
               end, total_size());
  // Every parameter's part of [begin, end) in one op (one launch on the CUDA backend) per update
  // call: one for the OLMo 3 recipe.
  for (const UpdateCall& call : calls_) {
    const kernels::AdamWScalars k =
        adamw_scalars(hyper_.arithmetic, call.hyper, lrs[call.hyper.lr_slot], step_ + 1);
    std::vector<kernels::AdamWRun> runs;
    for (std::size_t i : call.params) {
      const std::size_t lo = std::max(begin, offsets_[i]);
      const std::size_t hi = std::min(end, offsets_[i] + params_[i].size());
      if (lo >= hi) continue;
      const auto first = static_cast<std::int64_t>(lo - offsets_[i]);
      const kernels::Shape run{static_cast<std::int64_t>(hi - lo)};
      runs.push_back({params_[i].param.view(first, run), params_[i].grad.view(first, run),
                      exp_avg_.tensor().view(static_cast<std::int64_t>(lo), run),
                      exp_avg_sq_.tensor().view(static_cast<std::int64_t>(lo), run),
                      decays_[i] != 0.0});
    }
    if (!runs.empty()) backend_.adamw_updates(runs, k);
  }
  ++step_;
}

}  // namespace tandem::optim
