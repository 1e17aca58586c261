// The backend interface's checks (dtypes and shapes of every op, once for every backend) and the
// backend factory.
#include "tandem/kernels/backend.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/cpu_backend.h"
#ifdef TANDEM_HAVE_CUDA
#include "tandem/kernels/cuda/cuda_backend.h"
#endif

namespace tandem::kernels {
namespace {

void expect(const Tensor& t, DType dtype, const Shape& shape, const char* op, const char* arg) {
  TANDEM_CHECK(t.dtype() == dtype && t.shape() == shape, "{}: {} must be {}{}, got {}", op, arg,
               dtype_name(dtype), shape.str(), t.str());
  TANDEM_CHECK(t.data() != nullptr || shape.numel() == 0, "{}: {} has no memory", op, arg);
}

void expect_rank(const Tensor& t, DType dtype, int rank, const char* op, const char* arg) {
  TANDEM_CHECK(t.dtype() == dtype && t.rank() == rank, "{}: {} must be a {}-d {} tensor, got {}",
               op, arg, rank, dtype_name(dtype), t.str());
  TANDEM_CHECK(t.data() != nullptr || t.numel() == 0, "{}: {} has no memory", op, arg);
}

void expect_same(const Tensor& t, const Tensor& like, const char* op, const char* arg) {
  expect(t, like.dtype(), like.shape(), op, arg);
}

Shape shape2(std::int64_t a, std::int64_t b) { return Shape{a, b}; }

// 2 FLOPs per multiply-add of a [rows, in] x [in, out] product.
double matmul_flops(std::int64_t rows, std::int64_t in, std::int64_t out) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
}

// The precision policy's activation dtype of an op: f32, or bf16 under mixed precision. Every
// activation, weight and activation gradient of one op shares it; weight gradients, statistics
// (rstd, lse) and losses stay f32.
DType activation_dtype(const Tensor& t, const char* op, const char* arg) {
  TANDEM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
               "{}: {} must be f32 or bf16, got {}", op, arg, t.str());
  return t.dtype();
}

}  // namespace

// Brackets one public op with two timing marks while profiling; an op that another public op
// calls is part of the outer op's time.
class Backend::OpScope {
 public:
  OpScope(Backend& b, const char* op, double flops = 0.0) {
    if (!b.profiling_) return;
    b_ = &b;
    if (b.op_depth_++ > 0) return;
    index_ = b.profiled_.size();
    b.profiled_.push_back({op, flops, b.record_mark(), 0});
    outer_ = true;
  }
  ~OpScope() {
    if (!b_) return;
    --b_->op_depth_;
    if (!outer_) return;
    ProfiledCall& call = b_->profiled_[index_];
    try {
      call.end = b_->record_mark();
    } catch (...) {
      call.end = call.begin;  // the profile's summary names it; the op's own error goes on
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Backend* b_ = nullptr;
  std::size_t index_ = 0;
  bool outer_ = false;
};

std::size_t Backend::record_mark() {
  host_marks_.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  return host_marks_.size() - 1;
}

std::vector<double> Backend::mark_seconds() { return std::exchange(host_marks_, {}); }

void Backend::start_op_profile() {
  TANDEM_CHECK(op_depth_ == 0, "start_op_profile: called inside an op");
  profiled_.clear();
  mark_seconds();  // forgets marks of an earlier profile
  profiling_ = true;
}

OpProfile Backend::finish_op_profile() {
  profiling_ = false;
  const std::vector<double> marks = mark_seconds();
  OpProfile out = summarize_op_profile(profiled_, marks);
  profiled_.clear();
  return out;
}

void Backend::count_allocation(std::int64_t bytes) {
  const std::int64_t now = bytes_in_use_.fetch_add(bytes) + bytes;
  std::int64_t peak = peak_bytes_.load();
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
}

void Backend::upload(const Tensor& dst, const void* host) {
  if (dst.numel() == 0) return;
  TANDEM_CHECK(dst.data() && host, "upload: no memory for {}", dst.str());
  OpScope scope(*this, "upload");
  do_upload(dst, host);
}

void Backend::download(void* host, const Tensor& src) {
  if (src.numel() == 0) return;
  TANDEM_CHECK(src.data() && host, "download: no memory for {}", src.str());
  OpScope scope(*this, "download");
  do_download(host, src);
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  TANDEM_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
               "copy: {} into {}: dtype or size differ", src.str(), dst.str());
  if (dst.numel() == 0 || dst.data() == src.data()) return;
  OpScope scope(*this, "copy");
  do_copy(dst, src);
}

void Backend::fill(const Tensor& dst, float value) {
  TANDEM_CHECK(dst.dtype() == DType::f32, "fill: {} is not f32", dst.str());
  if (dst.numel() == 0) return;
  OpScope scope(*this, "fill");
  do_fill(dst, value);
}

void Backend::zero(const Tensor& dst) {
  if (dst.numel() == 0) return;
  OpScope scope(*this, "zero");
  do_zero(dst);
}

void Backend::gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                   float beta, const Tensor& c) {
  expect_rank(a, DType::f32, 2, "gemm", "A");
  expect_rank(b, DType::f32, 2, "gemm", "B");
  expect_rank(c, DType::f32, 2, "gemm", "C");
  const std::int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  TANDEM_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n, "gemm: {}{} x {}{} does not give {}",
               a.str(), trans_a ? "^T" : "", b.str(), trans_b ? "^T" : "", c.str());
  OpScope scope(*this, "gemm", matmul_flops(m, k, n));
  do_gemm(trans_a, trans_b, alpha, a, b, beta, c);
}

void Backend::cast(const Tensor& dst, const Tensor& src) {
  activation_dtype(src, "cast", "src");
  activation_dtype(dst, "cast", "dst");
  TANDEM_CHECK(src.numel() == dst.numel(), "cast: {} into {}: sizes differ", src.str(), dst.str());
  if (src.numel() == 0) return;
  OpScope scope(*this, "cast");
  if (src.dtype() == dst.dtype())
    do_copy(dst, src);
  else
    do_cast(dst, src);
}

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) {
  const DType act = activation_dtype(x, "linear_forward", "x");
  expect_rank(x, act, 2, "linear_forward", "x");
  expect_rank(w, act, 2, "linear_forward", "w");
  expect(y, act, shape2(x.dim(0), w.dim(0)), "linear_forward", "y");
  TANDEM_CHECK(x.dim(1) == w.dim(1), "linear_forward: x {} and w {} disagree on the input width",
               x.str(), w.str());
  OpScope scope(*this, "linear_forward", matmul_flops(x.dim(0), x.dim(1), w.dim(0)));
  do_linear_forward(x, w, y);
}

void Backend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& dw, bool accumulate_dx) {
  const DType act = activation_dtype(x, "linear_backward", "x");
  expect_rank(x, act, 2, "linear_backward", "x");
  expect_rank(w, act, 2, "linear_backward", "w");
  expect(dy, act, shape2(x.dim(0), w.dim(0)), "linear_backward", "dy");
  if (dx) expect_same(dx, x, "linear_backward", "dx");
  if (dw) expect(dw, DType::f32, w.shape(), "linear_backward", "dw");
  OpScope scope(*this, "linear_backward",
                matmul_flops(x.dim(0), x.dim(1), w.dim(0)) * ((dx ? 1 : 0) + (dw ? 1 : 0)));
  do_linear_backward(x, w, dy, dx, dw, accumulate_dx);
}

void Backend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  expect_rank(ids, DType::i64, 1, "embedding_forward", "ids");
  // A bf16 output may read an f32 table (rows rounded as they are looked up).
  const DType act = activation_dtype(out, "embedding_forward", "out");
  expect_rank(table, table.dtype() == DType::f32 ? DType::f32 : act, 2, "embedding_forward",
              "table");
  expect(out, act, shape2(ids.dim(0), table.dim(1)), "embedding_forward", "out");
  OpScope scope(*this, "embedding_forward");
  do_embedding_forward(ids, table, out);
}

void Backend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  expect_rank(ids, DType::i64, 1, "embedding_backward", "ids");
  expect_rank(dtable, DType::f32, 2, "embedding_backward", "dtable");
  expect(dout, activation_dtype(dout, "embedding_backward", "dout"),
         shape2(ids.dim(0), dtable.dim(1)), "embedding_backward", "dout");
  OpScope scope(*this, "embedding_backward");
  do_embedding_backward(ids, dout, dtable);
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                              float eps) {
  const DType act = activation_dtype(x, "rmsnorm_forward", "x");
  expect_rank(x, act, 2, "rmsnorm_forward", "x");
  expect(w, act, Shape{x.dim(1)}, "rmsnorm_forward", "w");
  expect_same(y, x, "rmsnorm_forward", "y");
  expect(rstd, DType::f32, Shape{x.dim(0)}, "rmsnorm_forward", "rstd");
  OpScope scope(*this, "rmsnorm_forward");
  do_rmsnorm_forward(x, w, y, rstd, eps);
}

void Backend::rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                               const Tensor& dy, const Tensor& dx, const Tensor& dw) {
  const DType act = activation_dtype(x, "rmsnorm_backward", "x");
  expect_rank(x, act, 2, "rmsnorm_backward", "x");
  expect(w, act, Shape{x.dim(1)}, "rmsnorm_backward", "w");
  expect(rstd, DType::f32, Shape{x.dim(0)}, "rmsnorm_backward", "rstd");
  expect_same(dy, x, "rmsnorm_backward", "dy");
  expect_same(dx, x, "rmsnorm_backward", "dx");
  if (dw) expect(dw, DType::f32, w.shape(), "rmsnorm_backward", "dw");
  OpScope scope(*this, "rmsnorm_backward");
  do_rmsnorm_backward(x, w, rstd, dy, dx, dw);
}

namespace {
void check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                const char* op) {
  expect_rank(x, activation_dtype(x, op, "x"), 4, op, "x");
  expect_rank(cos, DType::f32, 2, op, "cos");
  expect_same(sin, cos, op, "sin");
  TANDEM_CHECK(x.dim(3) % 2 == 0 && cos.dim(1) == x.dim(3) / 2,
               "{}: tables {} do not fit head_dim {}", op, cos.str(), x.dim(3));
  // With explicit positions, each must lie inside the tables (the backend checks the values).
  if (positions)
    expect(positions, DType::i64, Shape{x.dim(0) * x.dim(1)}, op, "positions");
  else
    TANDEM_CHECK(cos.dim(0) >= x.dim(1), "{}: tables cover {} positions, the sequence has {}", op,
                 cos.dim(0), x.dim(1));
}
}  // namespace

void Backend::rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                           const Tensor& positions) {
  check_rope(x, cos, sin, positions, "rope_forward");
  OpScope scope(*this, "rope_forward");
  do_rope_forward(x, cos, sin, positions);
}

void Backend::rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                            const Tensor& positions) {
  check_rope(dx, cos, sin, positions, "rope_backward");
  OpScope scope(*this, "rope_backward");
  do_rope_backward(dx, cos, sin, positions);
}

namespace {
void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, const Tensor& doc_start, const char* op) {
  const DType act = activation_dtype(q, op, "q");
  expect_rank(q, act, 4, op, "q");
  expect_rank(k, act, 4, op, "k");
  expect_same(v, k, op, "v");
  expect_same(out, q, op, "out");
  const std::int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3), Hkv = k.dim(2);
  TANDEM_CHECK(k.dim(0) == B && k.dim(1) == T && k.dim(3) == D && Hkv > 0 && Hq % Hkv == 0,
               "{}: q {} and k {} do not fit (GQA needs Hq divisible by Hkv)", op, q.str(),
               k.str());
  expect(lse, DType::f32, Shape{B, Hq, T}, op, "lse");
  if (doc_start) expect(doc_start, DType::i64, Shape{B * T}, op, "doc_start");
}
}  // namespace

void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, std::int64_t window,
                                float scale, const Tensor& doc_start) {
  check_attention(q, k, v, out, lse, doc_start, "attention_forward");
  OpScope scope(*this, "attention_forward",
                attention_flops(q.dim(0), q.dim(1), q.dim(2), q.dim(3), window, false));
  do_attention_forward(q, k, v, out, lse, window, scale, doc_start);
}

void Backend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const Tensor& dout,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 std::int64_t window, float scale, const Tensor& doc_start) {
  check_attention(q, k, v, out, lse, doc_start, "attention_backward");
  expect_same(dout, q, "attention_backward", "dout");
  expect_same(dq, q, "attention_backward", "dq");
  expect_same(dk, k, "attention_backward", "dk");
  expect_same(dv, v, "attention_backward", "dv");
  OpScope scope(*this, "attention_backward",
                attention_flops(q.dim(0), q.dim(1), q.dim(2), q.dim(3), window, true));
  do_attention_backward(q, k, v, out, lse, dout, dq, dk, dv, window, scale, doc_start);
}

void Backend::swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) {
  activation_dtype(g, "swiglu_forward", "g");
  expect_same(u, g, "swiglu_forward", "u");
  expect_same(h, g, "swiglu_forward", "h");
  OpScope scope(*this, "swiglu_forward");
  do_swiglu_forward(g, u, h);
}

void Backend::swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh, const Tensor& dg,
                              const Tensor& du) {
  activation_dtype(g, "swiglu_backward", "g");
  expect_same(u, g, "swiglu_backward", "u");
  expect_same(dh, g, "swiglu_backward", "dh");
  expect_same(dg, g, "swiglu_backward", "dg");
  expect_same(du, g, "swiglu_backward", "du");
  OpScope scope(*this, "swiglu_backward");
  do_swiglu_backward(g, u, dh, dg, du);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  activation_dtype(a, "add", "a");
  expect_same(b, a, "add", "b");
  expect_same(y, a, "add", "y");
  OpScope scope(*this, "add");
  do_add(a, b, y);
}

void Backend::scale(const Tensor& x, float factor) {
  TANDEM_CHECK(x.dtype() == DType::f32, "scale: x must be f32, got {}", x.str());
  if (x.numel() == 0) return;
  OpScope scope(*this, "scale");
  do_scale(x, factor);
}

void Backend::gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  const DType act = activation_dtype(src, "gather_rows", "src");
  expect_rank(src, act, 2, "gather_rows", "src");
  expect_rank(index, DType::i64, 1, "gather_rows", "index");
  expect(dst, act, shape2(index.dim(0), src.dim(1)), "gather_rows", "dst");
  OpScope scope(*this, "gather_rows");
  do_gather_rows(src, index, dst);
}

LossSums Backend::lm_head_cross_entropy(const Tensor& hidden, const Tensor& w, const Tensor& labels,
                                        float z_weight, float grad_scale, const Tensor& dhidden,
                                        const Tensor& dw) {
  const DType act = activation_dtype(hidden, "lm_head_cross_entropy", "hidden");
  expect_rank(hidden, act, 2, "lm_head_cross_entropy", "hidden");
  expect_rank(w, act, 2, "lm_head_cross_entropy", "w");
  TANDEM_CHECK(w.dim(1) == hidden.dim(1), "lm_head_cross_entropy: hidden {} and w {} disagree",
               hidden.str(), w.str());
  expect(labels, DType::i64, Shape{hidden.dim(0)}, "lm_head_cross_entropy", "labels");
  if (dhidden) expect_same(dhidden, hidden, "lm_head_cross_entropy", "dhidden");
  if (dw) expect(dw, DType::f32, w.shape(), "lm_head_cross_entropy", "dw");
  OpScope scope(*this, "lm_head_cross_entropy",
                matmul_flops(hidden.dim(0), hidden.dim(1), w.dim(0)) *
                    (1 + (dhidden ? 1 : 0) + (dw ? 1 : 0)));
  return do_lm_head_cross_entropy(hidden, w, labels, z_weight, grad_scale, dhidden, dw);
}

std::vector<double> Backend::token_log_probs(const Tensor& logits, const Tensor& targets) {
  expect_rank(logits, activation_dtype(logits, "token_log_probs", "logits"), 2, "token_log_probs",
              "logits");
  expect(targets, DType::i64, Shape{logits.dim(0)}, "token_log_probs", "targets");
  TANDEM_CHECK(logits.dim(1) > 0, "token_log_probs: empty vocabulary");
  OpScope scope(*this, "token_log_probs");
  return do_token_log_probs(logits, targets);
}

double Backend::sum_of_squares(const Tensor& x) {
  TANDEM_CHECK(x.dtype() == DType::f32, "sum_of_squares: x must be f32, got {}", x.str());
  if (x.numel() == 0) return 0.0;
  OpScope scope(*this, "sum_of_squares");
  return do_sum_of_squares(x);
}

std::vector<double> Backend::sums_of_squares(std::span<const Tensor> xs) {
  std::vector<Tensor> work;
  for (const Tensor& x : xs) {
    TANDEM_CHECK(x.dtype() == DType::f32, "sum_of_squares: x must be f32, got {}", x.str());
    if (x.numel() > 0) work.push_back(x);
  }
  std::vector<double> out(xs.size(), 0.0);
  if (work.empty()) return out;
  OpScope scope(*this, "sums_of_squares");
  const std::vector<double> sums = do_sums_of_squares(work);
  std::size_t k = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].numel() > 0) out[i] = sums.at(k++);
  return out;
}

std::vector<double> Backend::do_sums_of_squares(std::span<const Tensor> xs) {
  std::vector<double> out;
  out.reserve(xs.size());
  for (const Tensor& x : xs) out.push_back(do_sum_of_squares(x));
  return out;
}

namespace {
void check_adamw_operands(const char* op, const Tensor& p, const Tensor& g, const Tensor& m,
                          const Tensor& v) {
  TANDEM_CHECK(p.dtype() == DType::f32, "{}: p must be f32, got {}", op, p.str());
  for (const Tensor* t : {&g, &m, &v})
    TANDEM_CHECK(t->dtype() == DType::f32 && t->numel() == p.numel(),
                 "{}: {} does not match the parameter {}", op, t->str(), p.str());
}
}  // namespace

void Backend::adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                           const AdamWScalars& s) {
  check_adamw_operands("adamw_update", p, g, m, v);
  if (p.numel() == 0) return;
  OpScope scope(*this, "adamw_update");
  do_adamw_update(p, g, m, v, s);
}

void Backend::adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s) {
  std::vector<AdamWRun> work;
  for (const AdamWRun& r : runs) {
    check_adamw_operands("adamw_updates", r.p, r.g, r.m, r.v);
    if (r.p.numel() > 0) work.push_back(r);
  }
  if (work.empty()) return;
  OpScope scope(*this, "adamw_updates");
  do_adamw_updates(work, s);
}

void Backend::do_adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s) {
  AdamWScalars each = s;
  for (const AdamWRun& r : runs) {
    each.decay = r.decay;
    do_adamw_update(r.p, r.g, r.m, r.v, each);
  }
}

std::vector<std::string> available_backends() {
#ifdef TANDEM_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
#ifdef TANDEM_HAVE_CUDA
  if (name == "cuda") {
    std::string why;
    if (cuda_device_count(&why) == 0)
      core::fail("backend 'cuda': no CUDA GPU is visible ({})", why);
    return std::make_unique<CudaBackend>();
  }
  core::fail("unknown backend '{}' (available: cpu, cuda)", name);
#else
  if (name == "cuda")
    core::fail(
        "backend 'cuda': this build has no CUDA backend (built without a CUDA compiler; "
        "available: cpu)");
  core::fail("unknown backend '{}' (available: cpu)", name);
#endif
}

std::vector<float> to_host_f32(Backend& backend, const Tensor& t) {
  TANDEM_CHECK(t.dtype() == DType::f32, "to_host_f32: {} is not f32", t.str());
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  backend.download(out.data(), t);
  return out;
}

void from_host_f32(Backend& backend, const Tensor& t, const std::vector<float>& host) {
  TANDEM_CHECK(t.dtype() == DType::f32 && static_cast<std::int64_t>(host.size()) == t.numel(),
               "from_host_f32: {} values for {}", host.size(), t.str());
  backend.upload(t, host.data());
}

}  // namespace tandem::kernels
