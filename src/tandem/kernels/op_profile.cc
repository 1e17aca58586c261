#include "tandem/kernels/op_profile.h"

#include <algorithm>
#include <map>

#include "tandem/core/error.h"

namespace tandem::kernels {

double OpProfile::op_seconds() const {
  double s = 0.0;
  for (const OpTime& t : ops) s += t.seconds;
  return s;
}

std::int64_t OpProfile::calls() const {
  std::int64_t n = 0;
  for (const OpTime& t : ops) n += t.calls;
  return n;
}

OpProfile summarize_op_profile(const std::vector<ProfiledCall>& calls,
                               const std::vector<double>& marks) {
  OpProfile out;
  if (calls.empty()) return out;
  std::map<std::string, OpTime> by_op;
  double first = marks.at(calls.front().begin), last = first;
  for (const ProfiledCall& c : calls) {
    TANDEM_CHECK(c.begin < marks.size() && c.end < marks.size() && c.begin < c.end,
                 "op profile: {} has marks {}..{} of {}", c.op, c.begin, c.end, marks.size());
    OpTime& t = by_op[c.op];
    t.op = c.op;
    t.calls += 1;
    // Timers of different clocks can disagree by their resolution; an op is never negative.
    t.seconds += std::max(0.0, marks[c.end] - marks[c.begin]);
    t.flops += c.flops;
    first = std::min(first, marks[c.begin]);
    last = std::max(last, marks[c.end]);
  }
  for (auto& [name, t] : by_op) out.ops.push_back(std::move(t));
  std::stable_sort(out.ops.begin(), out.ops.end(),
                   [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  out.span_seconds = last - first;
  return out;
}

double attention_flops(std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t D,
                       std::int64_t window, bool backward) {
  const std::int64_t span = window > 0 ? std::min(window, T) : T;
  const double forward = 4.0 * static_cast<double>(B) * static_cast<double>(T) *
                         static_cast<double>(Hq) * static_cast<double>(D) *
                         static_cast<double>(span);
  return backward ? 2.0 * forward : forward;
}

}  // namespace tandem::kernels
