#include "tandem/train/op_profile_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::train {

nlohmann::json op_profile_json(const kernels::OpProfile& p) {
  nlohmann::json ops = nlohmann::json::array();
  double flops = 0.0;
  for (const kernels::OpTime& t : p.ops) {
    nlohmann::json o{{"op", t.op},
                     {"calls", t.calls},
                     {"ms", 1e3 * t.seconds},
                     {"share", p.span_seconds > 0 ? t.seconds / p.span_seconds : 0.0}};
    if (t.flops > 0) {
      o["tflop"] = t.flops / 1e12;
      o["tflops_per_s"] = t.seconds > 0 ? t.flops / t.seconds / 1e12 : 0.0;
    }
    flops += t.flops;
    ops.push_back(std::move(o));
  }
  return {{"span_ms", 1e3 * p.span_seconds},
          {"ops_ms", 1e3 * p.op_seconds()},
          {"between_ops_ms", 1e3 * (p.span_seconds - p.op_seconds())},
          {"calls", p.calls()},
          {"flops", flops},
          {"ops", std::move(ops)}};
}

std::string op_profile_summary(const kernels::OpProfile& p, std::size_t top) {
  std::string out = fmt::format(
      "{:.2f} ms from the first op to the last, {:.2f} ms in {} ops, {:.2f} ms between them",
      1e3 * p.span_seconds, 1e3 * p.op_seconds(), p.calls(),
      1e3 * (p.span_seconds - p.op_seconds()));
  const std::size_t n = std::min(top, p.ops.size());
  for (std::size_t i = 0; i < n; ++i) {
    const kernels::OpTime& t = p.ops[i];
    out += fmt::format("{}{} {:.2f} ms", i == 0 ? "; longest: " : ", ", t.op, 1e3 * t.seconds);
    if (t.flops > 0 && t.seconds > 0)
      out += fmt::format(" ({:.1f} TFLOP/s)", t.flops / t.seconds / 1e12);
  }
  return out;
}

}  // namespace tandem::train
