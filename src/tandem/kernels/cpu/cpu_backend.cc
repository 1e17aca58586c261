#include "tandem/kernels/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/bf16.h"
#include "tandem/kernels/cpu/cpu_features.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels {
namespace {

constexpr std::size_t kAlignment = 64;

cpu::bf16* b16(const Tensor& t) { return t ? t.ptr<std::uint16_t>() : nullptr; }
bool is_bf16(const Tensor& t) { return t.dtype() == DType::bf16; }

// Every position inside the tables (the CPU reads them directly; a bad one would read outside).
void check_positions(const Tensor& positions, std::int64_t table_rows) {
  if (!positions) return;
  const std::int64_t* p = positions.ptr<std::int64_t>();
  for (std::int64_t i = 0; i < positions.numel(); ++i)
    TANDEM_CHECK(p[i] >= 0 && p[i] < table_rows,
                 "rope: position {} of token {} is outside the tables' [0, {})", p[i], i,
                 table_rows);
}

// bf16 ops widen their operands into fp32 scratch. Ops whose rows (tokens, or batch rows for
// attention and RoPE) are independent run block by block, so the scratch is bounded by a block
// instead of growing with the micro-batch and eating the memory bf16 saves; the results are the
// same bits as one call over everything.
constexpr std::int64_t kBlockElements = std::int64_t{1} << 18;
constexpr std::int64_t kLinearBlockRows = 1024;

bool needs_blocks(const Tensor& t, std::int64_t limit) { return is_bf16(t) && t.numel() > limit; }

// [begin, end) elements of a flat view of t.
Tensor elements(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return t ? t.reshape(Shape{t.numel()}).view(begin, Shape{end - begin}) : Tensor();
}

// Batch row b of a [B, ...] tensor, as a [1, ...] tensor.
Tensor batch_row(const Tensor& t, std::int64_t b) { return t ? t.rows(b, b + 1) : Tensor(); }

// Row b's slice of a [B*T] index tensor (positions, doc_start).
Tensor index_row(const Tensor& t, std::int64_t b, std::int64_t T) {
  return t ? t.view(b * T, Shape{T}) : Tensor();
}

}  // namespace

std::string CpuBackend::describe() const {
  return fmt::format("cpu: {} threads, {}; bf16 GEMMs: {}", omp_get_max_threads(),
                     cpu::describe_cpu_features(), cpu::bf16_gemm_path_name());
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

namespace {
// Dense matmul FLOPs per cycle of one core in `dtype`: fp32 FMA units; bf16 on AMX tiles (1024
// bf16 multiply-adds per cycle), with avx512_bf16 dot products (twice fp32), else computed in fp32.
double flops_per_cycle(DType dtype) {
  const double fp32 = cpu::fp32_flops_per_cycle_per_core();
  if (dtype != DType::bf16 || cpu::bf16_gemm_path() == cpu::Bf16GemmPath::kFp32) return fp32;
  if (cpu::cpu_features().amx_bf16) return 2048.0;
  return 2.0 * fp32;
}
}  // namespace

double CpuBackend::peak_flops(DType dtype) const {
  return cores_in_use() * cpu::cpu_features().clock_ghz * 1e9 * flops_per_cycle(dtype);
}

std::string CpuBackend::describe_peak(DType dtype) const {
  return fmt::format("{} core(s) x {:.2f} GHz x {:.0f} {} FLOP/cycle ({})", cores_in_use(),
                     cpu::cpu_features().clock_ghz, flops_per_cycle(dtype), dtype_name(dtype),
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

void CpuBackend::do_cast(const Tensor& dst, const Tensor& src) {
  if (is_bf16(dst))
    cpu::to_bf16(f32_or_null(src), b16(dst), src.numel());
  else
    cpu::to_f32(b16(src), f32_or_null(dst), src.numel());
}

// fp32 working copies of bf16 tensors: an f32 tensor is used in place; a bf16 one is converted
// into a scratch slot (reused across ops: the backend is driven by one thread), and an output
// slot is rounded into its tensor by `store`.
const float* CpuBackend::in(const Tensor& t, int slot) {
  if (!t) return nullptr;
  if (!is_bf16(t)) return f32_or_null(t);
  float* buf = scratch(slot, t.numel());
  cpu::to_f32(b16(t), buf, t.numel());
  return buf;
}

float* CpuBackend::out(const Tensor& t, int slot, bool keep_contents) {
  if (!t) return nullptr;
  if (!is_bf16(t)) return f32_or_null(t);
  float* buf = scratch(slot, t.numel());
  if (keep_contents) cpu::to_f32(b16(t), buf, t.numel());
  return buf;
}

void CpuBackend::store(const Tensor& t, const float* values) {
  if (t && is_bf16(t)) cpu::to_bf16(values, b16(t), t.numel());
}

float* CpuBackend::scratch(int slot, std::int64_t n) {
  if (scratch_.size() <= static_cast<std::size_t>(slot)) scratch_.resize(slot + 1);
  auto& v = scratch_[static_cast<std::size_t>(slot)];
  if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

void CpuBackend::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                         float beta, const Tensor& c) {
  const std::int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  cpu::gemm(trans_a, trans_b, m, n, k, alpha, f32_or_null(a), a.dim(1), f32_or_null(b), b.dim(1),
            beta, f32_or_null(c), c.dim(1));
}

void CpuBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) {
  const std::int64_t T = x.dim(0), in_w = x.dim(1), out_w = w.dim(0);
  if (!is_bf16(x))
    return cpu::linear_forward(f32_or_null(x), f32_or_null(w), f32_or_null(y), T, in_w, out_w);
  if (T > kLinearBlockRows) {
    for (std::int64_t r = 0; r < T; r += kLinearBlockRows) {
      const std::int64_t e = std::min(T, r + kLinearBlockRows);
      do_linear_forward(x.rows(r, e), w, y.rows(r, e));
    }
    return;
  }
  float* acc = scratch(0, T * out_w);
  cpu::gemm_bf16(false, true, T, out_w, in_w, b16(x), in_w, b16(w), in_w, 0.0f, acc, out_w);
  store(y, acc);
}

void CpuBackend::do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                    const Tensor& dx, const Tensor& dw, bool accumulate_dx) {
  const std::int64_t T = x.dim(0), in_w = x.dim(1), out_w = w.dim(0);
  if (!is_bf16(x))
    return cpu::linear_backward(f32_or_null(x), f32_or_null(w), f32_or_null(dy), f32_or_null(dx),
                                f32_or_null(dw), T, in_w, out_w, accumulate_dx);
  for (std::int64_t r = 0; r < T; r += kLinearBlockRows) {
    const std::int64_t e = std::min(T, r + kLinearBlockRows), n = e - r;
    const Tensor dy_b = dy.rows(r, e);
    if (dx) {
      const Tensor dx_b = dx.rows(r, e);
      float* acc = out(dx_b, 0, accumulate_dx);
      cpu::gemm_bf16(false, false, n, in_w, out_w, b16(dy_b), out_w, b16(w), in_w,
                     accumulate_dx ? 1.0f : 0.0f, acc, in_w);
      store(dx_b, acc);
    }
    // dW accumulates block by block into the fp32 gradient.
    if (dw)
      cpu::gemm_bf16(true, false, out_w, in_w, n, b16(dy_b), out_w, b16(x.rows(r, e)), in_w, 1.0f,
                     f32_or_null(dw), in_w);
  }
}

void CpuBackend::do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out_t) {
  if (is_bf16(table))
    return cpu::embedding_forward(i64_or_null(ids), b16(table), b16(out_t), ids.dim(0),
                                  table.dim(1), table.dim(0));
  if (is_bf16(out_t))
    return cpu::embedding_forward(i64_or_null(ids), f32_or_null(table), b16(out_t), ids.dim(0),
                                  table.dim(1), table.dim(0));
  cpu::embedding_forward(i64_or_null(ids), f32_or_null(table), f32_or_null(out_t), ids.dim(0),
                         table.dim(1), table.dim(0));
}

void CpuBackend::do_embedding_backward(const Tensor& ids, const Tensor& dout,
                                       const Tensor& dtable) {
  cpu::embedding_backward(i64_or_null(ids), in(dout, 0), f32_or_null(dtable), ids.dim(0),
                          dtable.dim(1), dtable.dim(0));
}

void CpuBackend::do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                    const Tensor& rstd, float eps) {
  if (needs_blocks(x, kBlockElements) && x.dim(0) > 1) {
    const std::int64_t rows = std::max<std::int64_t>(1, kBlockElements / x.dim(1));
    for (std::int64_t r = 0; r < x.dim(0); r += rows) {
      const std::int64_t e = std::min(x.dim(0), r + rows);
      do_rmsnorm_forward(x.rows(r, e), w, y.rows(r, e), rstd.view(r, Shape{e - r}), eps);
    }
    return;
  }
  float* y32 = out(y, 2, false);
  cpu::rmsnorm_forward(in(x, 0), in(w, 1), y32, f32_or_null(rstd), x.dim(0), x.dim(1), eps);
  store(y, y32);
}

void CpuBackend::do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                     const Tensor& dy, const Tensor& dx, const Tensor& dw) {
  float* dx32 = out(dx, 3, false);
  cpu::rmsnorm_backward(in(x, 0), in(w, 1), f32_or_null(rstd), in(dy, 2), dx32, f32_or_null(dw),
                        x.dim(0), x.dim(1));
  store(dx, dx32);
}

void CpuBackend::do_rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                 const Tensor& positions) {
  check_positions(positions, cos.dim(0));
  if (needs_blocks(x, kBlockElements) && x.dim(0) > 1) {
    for (std::int64_t b = 0; b < x.dim(0); ++b)
      do_rope_forward(batch_row(x, b), cos, sin, index_row(positions, b, x.dim(1)));
    return;
  }
  float* x32 = out(x, 0, true);
  cpu::rope_forward(x32, x.dim(0), x.dim(1), x.dim(2), x.dim(3), f32_or_null(cos), f32_or_null(sin),
                    i64_or_null(positions));
  store(x, x32);
}

void CpuBackend::do_rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                                  const Tensor& positions) {
  check_positions(positions, cos.dim(0));
  if (needs_blocks(dx, kBlockElements) && dx.dim(0) > 1) {
    for (std::int64_t b = 0; b < dx.dim(0); ++b)
      do_rope_backward(batch_row(dx, b), cos, sin, index_row(positions, b, dx.dim(1)));
    return;
  }
  float* dx32 = out(dx, 0, true);
  cpu::rope_backward(dx32, dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), f32_or_null(cos),
                     f32_or_null(sin), i64_or_null(positions));
  store(dx, dx32);
}

void CpuBackend::do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& o, const Tensor& lse, std::int64_t window,
                                      float scale, const Tensor& doc_start) {
  if (needs_blocks(q, kBlockElements) && q.dim(0) > 1) {
    for (std::int64_t b = 0; b < q.dim(0); ++b)
      do_attention_forward(batch_row(q, b), batch_row(k, b), batch_row(v, b), batch_row(o, b),
                           batch_row(lse, b), window, scale, index_row(doc_start, b, q.dim(1)));
    return;
  }
  float* o32 = out(o, 3, false);
  cpu::attention_forward(in(q, 0), in(k, 1), in(v, 2), o32, f32_or_null(lse), q.dim(0), q.dim(1),
                         q.dim(2), k.dim(2), q.dim(3), window, scale, i64_or_null(doc_start));
  store(o, o32);
}

void CpuBackend::do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& o, const Tensor& lse, const Tensor& dout,
                                       const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                       std::int64_t window, float scale, const Tensor& doc_start) {
  if (needs_blocks(q, kBlockElements) && q.dim(0) > 1) {
    for (std::int64_t b = 0; b < q.dim(0); ++b)
      do_attention_backward(batch_row(q, b), batch_row(k, b), batch_row(v, b), batch_row(o, b),
                            batch_row(lse, b), batch_row(dout, b), batch_row(dq, b),
                            batch_row(dk, b), batch_row(dv, b), window, scale,
                            index_row(doc_start, b, q.dim(1)));
    return;
  }
  float* dq32 = out(dq, 5, false);
  float* dk32 = out(dk, 6, false);
  float* dv32 = out(dv, 7, false);
  cpu::attention_backward(in(q, 0), in(k, 1), in(v, 2), in(o, 3), f32_or_null(lse), in(dout, 4),
                          dq32, dk32, dv32, q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3),
                          window, scale, i64_or_null(doc_start));
  store(dq, dq32);
  store(dk, dk32);
  store(dv, dv32);
}

void CpuBackend::do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) {
  if (needs_blocks(g, kBlockElements)) {
    for (std::int64_t i = 0; i < g.numel(); i += kBlockElements) {
      const std::int64_t e = std::min(g.numel(), i + kBlockElements);
      do_swiglu_forward(elements(g, i, e), elements(u, i, e), elements(h, i, e));
    }
    return;
  }
  float* h32 = out(h, 2, false);
  cpu::swiglu_forward(in(g, 0), in(u, 1), h32, g.numel());
  store(h, h32);
}

void CpuBackend::do_swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh,
                                    const Tensor& dg, const Tensor& du) {
  if (needs_blocks(g, kBlockElements)) {
    for (std::int64_t i = 0; i < g.numel(); i += kBlockElements) {
      const std::int64_t e = std::min(g.numel(), i + kBlockElements);
      do_swiglu_backward(elements(g, i, e), elements(u, i, e), elements(dh, i, e),
                         elements(dg, i, e), elements(du, i, e));
    }
    return;
  }
  float* dg32 = out(dg, 3, false);
  float* du32 = out(du, 4, false);
  cpu::swiglu_backward(in(g, 0), in(u, 1), in(dh, 2), dg32, du32, g.numel());
  store(dg, dg32);
  store(du, du32);
}

void CpuBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& y) {
  if (needs_blocks(a, kBlockElements)) {
    for (std::int64_t i = 0; i < a.numel(); i += kBlockElements) {
      const std::int64_t e = std::min(a.numel(), i + kBlockElements);
      do_add(elements(a, i, e), elements(b, i, e), elements(y, i, e));
    }
    return;
  }
  const float* a32 = in(a, 0);
  const float* b32 = in(b, 1);
  float* y32 = out(y, 2, false);
  cpu::add(a32, b32, y32, a.numel());
  store(y, y32);
}

void CpuBackend::do_scale(const Tensor& x, float factor) {
  cpu::scale(f32_or_null(x), factor, x.numel());
}

void CpuBackend::do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  if (is_bf16(src))
    return cpu::gather_rows(b16(src), src.dim(0), src.dim(1), i64_or_null(index), index.dim(0),
                            b16(dst));
  cpu::gather_rows(f32_or_null(src), src.dim(0), src.dim(1), i64_or_null(index), index.dim(0),
                   f32_or_null(dst));
}

LossSums CpuBackend::do_lm_head_cross_entropy(const Tensor& hidden, const Tensor& w,
                                              const Tensor& labels, float z_weight,
                                              float grad_scale, const Tensor& dhidden,
                                              const Tensor& dw) {
  const cpu::CrossEntropyResult r =
      is_bf16(hidden)
          ? cpu::lm_head_cross_entropy(b16(hidden), b16(w), i64_or_null(labels), hidden.dim(0),
                                       hidden.dim(1), w.dim(0), z_weight, grad_scale, b16(dhidden),
                                       f32_or_null(dw))
          : cpu::lm_head_cross_entropy(f32_or_null(hidden), f32_or_null(w), i64_or_null(labels),
                                       hidden.dim(0), hidden.dim(1), w.dim(0), z_weight, grad_scale,
                                       f32_or_null(dhidden), f32_or_null(dw));
  return {r.ce_sum, r.z_sum, r.count};
}

std::vector<double> CpuBackend::do_token_log_probs(const Tensor& logits, const Tensor& targets) {
  std::vector<double> result(static_cast<std::size_t>(logits.dim(0)));
  cpu::token_log_probs(in(logits, 0), i64_or_null(targets), logits.dim(0), logits.dim(1),
                       result.data());
  return result;
}

double CpuBackend::do_sum_of_squares(const Tensor& x) {
  return cpu::sum_of_squares(f32_or_null(x), x.numel());
}

void CpuBackend::do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                 const AdamWScalars& s) {
  const cpu::AdamWConstants c{
      s.neg_step_size, s.bias_correction2_sqrt, s.decay_factor, s.beta1, s.one_minus_beta1,
      s.beta2,         s.one_minus_beta2,       s.eps,          s.decay, s.arithmetic};
  cpu::adamw_update(f32_or_null(p), f32_or_null(g), f32_or_null(m), f32_or_null(v), p.numel(), c);
}

}  // namespace tandem::kernels
