#include "tandem/kernels/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/cpu_features.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels {
namespace {

constexpr std::size_t kAlignment = 64;

float* f32(const Tensor& t) { return t ? t.ptr<float>() : nullptr; }
const std::int64_t* i64p(const Tensor& t) { return t ? t.ptr<std::int64_t>() : nullptr; }

// Every position inside the tables (the CPU reads them directly; a bad one would read outside).
void check_positions(const Tensor& positions, std::int64_t table_rows) {
  if (!positions) return;
  const std::int64_t* p = positions.ptr<std::int64_t>();
  for (std::int64_t i = 0; i < positions.numel(); ++i)
    TANDEM_CHECK(p[i] >= 0 && p[i] < table_rows,
                 "rope: position {} of token {} is outside the tables' [0, {})", p[i], i,
                 table_rows);
}

}  // namespace

std::string CpuBackend::describe() const {
  return fmt::format("cpu: {} threads, {}", omp_get_max_threads(), cpu::describe_cpu_features());
}

namespace {
// The cores this process computes on: OpenMP's thread count, bounded by the CPUs it may run on.
int cores_in_use() {
  cpu_set_t set;
  int allowed = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) allowed = CPU_COUNT(&set);
  const int threads = omp_get_max_threads();
  return allowed > 0 ? std::min(threads, allowed) : threads;
}
}  // namespace

double CpuBackend::peak_flops(DType) const {
  return cores_in_use() * cpu::cpu_features().clock_ghz * 1e9 *
         cpu::fp32_flops_per_cycle_per_core();
}

std::string CpuBackend::describe_peak(DType dtype) const {
  return fmt::format("{} core(s) x {:.2f} GHz x {:.0f} fp32 FLOP/cycle ({})", cores_in_use(),
                     cpu::cpu_features().clock_ghz, cpu::fp32_flops_per_cycle_per_core(),
                     cpu::describe_cpu_features());
}

void* CpuBackend::do_allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

void CpuBackend::do_free(void* data) { std::free(data); }

void CpuBackend::do_upload(const Tensor& dst, const void* host) {
  std::memcpy(dst.data(), host, dst.bytes());
}

void CpuBackend::do_download(void* host, const Tensor& src) {
  std::memcpy(host, src.data(), src.bytes());
}

void CpuBackend::do_copy(const Tensor& dst, const Tensor& src) {
  std::memmove(dst.data(), src.data(), dst.bytes());
}

void CpuBackend::do_fill(const Tensor& dst, float value) {
  float* d = dst.ptr<float>();
  const std::int64_t n = dst.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) d[i] = value;
}

void CpuBackend::do_zero(const Tensor& dst) { std::memset(dst.data(), 0, dst.bytes()); }

void CpuBackend::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, const Tensor& c) {
  const std::int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  cpu::gemm(trans_a, trans_b, m, n, k, alpha, f32(a), a.dim(1), f32(b), b.dim(1), beta, f32(c),
            c.dim(1));
}

void CpuBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) {
  cpu::linear_forward(f32(x), f32(w), f32(y), x.dim(0), x.dim(1), w.dim(0));
}

void CpuBackend::do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                    const Tensor& dx, const Tensor& dw, bool accumulate_dx) {
  cpu::linear_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), x.dim(0), x.dim(1), w.dim(0),
                       accumulate_dx);
}

void CpuBackend::do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  cpu::embedding_forward(i64p(ids), f32(table), f32(out), ids.dim(0), table.dim(1), table.dim(0));
}

void CpuBackend::do_embedding_backward(const Tensor& ids, const Tensor& dout,
                                       const Tensor& dtable) {
  cpu::embedding_backward(i64p(ids), f32(dout), f32(dtable), ids.dim(0), dtable.dim(1));
}

void CpuBackend::do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                    const Tensor& rstd, float eps) {
  cpu::rmsnorm_forward(f32(x), f32(w), f32(y), f32(rstd), x.dim(0), x.dim(1), eps);
}

void CpuBackend::do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                     const Tensor& dy, const Tensor& dx, const Tensor& dw) {
  cpu::rmsnorm_backward(f32(x), f32(w), f32(rstd), f32(dy), f32(dx), f32(dw), x.dim(0), x.dim(1));
}

void CpuBackend::do_rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                 const Tensor& positions) {
  check_positions(positions, cos.dim(0));
  cpu::rope_forward(f32(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), f32(cos), f32(sin),
                    i64p(positions));
}

void CpuBackend::do_rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                                  const Tensor& positions) {
  check_positions(positions, cos.dim(0));
  cpu::rope_backward(f32(dx), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), f32(cos), f32(sin),
                     i64p(positions));
}

void CpuBackend::do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& out, const Tensor& lse, std::int64_t window,
                                      float scale, const Tensor& doc_start) {
  cpu::attention_forward(f32(q), f32(k), f32(v), f32(out), f32(lse), q.dim(0), q.dim(1), q.dim(2),
                         k.dim(2), q.dim(3), window, scale, i64p(doc_start));
}

void CpuBackend::do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, const Tensor& dout,
                                       const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                       std::int64_t window, float scale, const Tensor& doc_start) {
  cpu::attention_backward(f32(q), f32(k), f32(v), f32(out), f32(lse), f32(dout), f32(dq), f32(dk),
                          f32(dv), q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), window, scale,
                          i64p(doc_start));
}

void CpuBackend::do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) {
  cpu::swiglu_forward(f32(g), f32(u), f32(h), g.numel());
}

void CpuBackend::do_swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh,
                                    const Tensor& dg, const Tensor& du) {
  cpu::swiglu_backward(f32(g), f32(u), f32(dh), f32(dg), f32(du), g.numel());
}

void CpuBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& y) {
  cpu::add(f32(a), f32(b), f32(y), a.numel());
}

void CpuBackend::do_scale(const Tensor& x, float factor) { cpu::scale(f32(x), factor, x.numel()); }

void CpuBackend::do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  cpu::gather_rows(f32(src), src.dim(0), src.dim(1), i64p(index), index.dim(0), f32(dst));
}

LossSums CpuBackend::do_lm_head_cross_entropy(const Tensor& hidden, const Tensor& w,
                                              const Tensor& labels, float z_weight,
                                              float grad_scale, const Tensor& dhidden,
                                              const Tensor& dw) {
  cpu::CrossEntropyResult r =
      cpu::lm_head_cross_entropy(f32(hidden), f32(w), i64p(labels), hidden.dim(0), hidden.dim(1),
                                 w.dim(0), z_weight, grad_scale, f32(dhidden), f32(dw));
  return {r.ce_sum, r.z_sum, r.count};
}

std::vector<double> CpuBackend::do_token_log_probs(const Tensor& logits, const Tensor& targets) {
  std::vector<double> out(static_cast<std::size_t>(logits.dim(0)));
  cpu::token_log_probs(f32(logits), i64p(targets), logits.dim(0), logits.dim(1), out.data());
  return out;
}

double CpuBackend::do_sum_of_squares(const Tensor& x) {
  return cpu::sum_of_squares(f32(x), x.numel());
}

void CpuBackend::do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                 const AdamWScalars& s) {
  const cpu::AdamWConstants c{
      s.neg_step_size, s.bias_correction2_sqrt, s.decay_factor, s.one_minus_beta1,
      s.beta2,         s.one_minus_beta2,       s.eps,          s.decay};
  cpu::adamw_update(f32(p), f32(g), f32(m), f32(v), p.numel(), c);
}

}  // namespace tandem::kernels
