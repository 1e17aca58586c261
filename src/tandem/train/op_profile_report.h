// The op profile of a training step (kernels/op_profile.h) as a report: JSON for
// `trainer.profile_step` (written to the run directory) and bench_gpu_train_step --profile, and a
// short summary for the log.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "tandem/kernels/op_profile.h"

namespace tandem::train {

// {"span_ms", "ops_ms", "between_ops_ms", "calls", "flops", "ops": [{"op", "calls", "ms", "share"
// (of the span), and for ops with matmuls "tflop", "tflops_per_s"}]}, the longest op first.
nlohmann::json op_profile_json(const kernels::OpProfile& p);

// "12.40 ms from the first op to the last, 12.10 ms in 812 ops, 0.30 ms between them; longest:
// linear_backward 4.10 ms (612 TFLOP/s), ..." with the `top` longest ops.
std::string op_profile_summary(const kernels::OpProfile& p, std::size_t top);

}  // namespace tandem::train
