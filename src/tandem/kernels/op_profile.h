// Where a stretch of backend work spends its time, op by op (Backend::start_op_profile, used by
// bench_gpu_train_step --profile): each outermost op is bracketed by two timing marks (the CUDA
// backend: events on its stream, so the times are the device's; the CPU backend: the host clock,
// its ops running when called), and the marks are read once at the end, so that profiling adds no
// synchronisation to what it times. What the device did between ops (waiting for the host to
// queue work, host round trips) is the span less the ops' sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::kernels {

struct OpTime {
  std::string op;  // the Backend method, "linear_forward"
  std::int64_t calls = 0;
  double seconds = 0.0;
  // Matmul FLOPs of those calls in the MFU's convention (ModelConfig::flops_per_token: 2 per
  // multiply-add, attention over the full window span, not halved for causality); 0 for ops
  // without matmuls.
  double flops = 0.0;
};

struct OpProfile {
  std::vector<OpTime> ops;    // longest total first
  double span_seconds = 0.0;  // the first op's start to the last op's end
  double op_seconds() const;  // the ops' seconds added
  std::int64_t calls() const;
};

// A profiled call: its op, FLOPs and the indices of its start and end marks.
struct ProfiledCall {
  const char* op = nullptr;
  double flops = 0.0;
  std::size_t begin = 0, end = 0;
};

// Sums the calls by op, given every mark's time in seconds (marks[i] for mark i).
OpProfile summarize_op_profile(const std::vector<ProfiledCall>& calls,
                               const std::vector<double>& marks);

// Attention FLOPs in the MFU's convention: per query, 4 * head_dim per visible key position
// forward (QK^T and PV), twice that backward, over min(window, T) keys (T without a window) for
// every query (documents not counted).
double attention_flops(std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t D,
                       std::int64_t window, bool backward);

}  // namespace tandem::kernels
