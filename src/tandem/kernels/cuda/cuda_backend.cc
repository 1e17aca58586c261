#include "tandem/kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/kernels/cuda/attention_paths.h"
#include "tandem/kernels/cuda/caching_allocator.h"
#include "tandem/kernels/cuda/cublaslt_gemm.h"
#include "tandem/kernels/cuda/launch.h"
#include "tandem/kernels/cuda/scratch_sizes.h"

namespace tandem::kernels {

using cuda::Elem;
using cuda::i64;

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  core::fail("cuda: {} failed: {} ({})", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

Elem elem_of(const Tensor& t, const char* op) {
  if (t.dtype() == DType::f32) return Elem::f32;
  if (t.dtype() == DType::bf16) return Elem::bf16;
  core::fail("cuda {}: no kernel for {}", op, t.str());
}

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

void cuda::check_launch(const char* kernel) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess)
    core::fail("cuda: launching {} failed: {} ({})", kernel, cudaGetErrorString(rc),
               cudaGetErrorName(rc));
}

void cuda::check_smem_request(cudaError_t rc, const char* kernel, std::size_t bytes) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // not left for the next launch's check
  int device = 0, limit = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  core::fail("cuda: {} needs {} bytes of shared memory per block; the device allows {}: {} ({})",
             kernel, bytes, limit, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(rc));
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount found no device";
  return count;
}

struct CudaBackend::State {
  int device = 0;
  cudaDeviceProp prop{};
  int clock_khz = 0;
  cudaStream_t stream = nullptr;
  cuda::CachingAllocator memory;
  void* gemm_workspace = nullptr;
  std::unique_ptr<cuda::LtGemm> gemm;
  cuda::DeviceError* error = nullptr;       // device word written by kernels
  cuda::DeviceError* error_host = nullptr;  // pinned copy
  std::unique_ptr<cuda::AttentionPaths> attention;
  std::vector<cudaEvent_t> marks;  // the op profile's timing events, reused between profiles
  std::size_t marks_used = 0;

  void sync(const char* what) { check(cudaStreamSynchronize(stream), what); }

  // Raises the first invalid index a kernel reported since the last check (and clears it).
  void check_device_error(const char* where) {
    check(cudaMemcpyAsync(error_host, error, sizeof(cuda::DeviceError), cudaMemcpyDeviceToHost,
                          stream),
          "reading the kernels' error word");
    sync(where);
    const cuda::DeviceError e = *error_host;
    if (e.code == cuda::kNoError) return;
    check(cudaMemsetAsync(error, 0, sizeof(cuda::DeviceError), stream), "clearing the error word");
    sync(where);
    switch (e.code) {
      case cuda::kBadEmbeddingId:
        core::fail("embedding: token id {} at position {} is outside the vocabulary", e.value,
                   e.where);
      case cuda::kBadRopePosition:
        core::fail("rope: position {} of token {} is outside the tables", e.value, e.where);
      case cuda::kBadDocStart:
        core::fail(
            "attention: document start {} at flat position {} is not in [0, t] or "
            "decreases along its row",
            e.value, e.where);
      case cuda::kBadGatherIndex:
        core::fail("gather_rows: row {} (index {}) is outside the source", e.value, e.where);
      default:
        core::fail("cuda: a kernel reported error code {} (value {}, at {})", e.code, e.value,
                   e.where);
    }
  }

  template <typename T>
  std::vector<T> to_host(const void* device, std::size_t n, const char* what) {
    std::vector<T> out(n);
    if (n == 0) return out;
    check(cudaMemcpyAsync(out.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream), what);
    sync(what);
    return out;
  }
};

CudaBackend::CudaBackend() : s_(std::make_unique<State>()) {
  // An unknown TANDEM_CUDA_ATTENTION or a bad TANDEM_CUDA_CUDNN_BACKWARD_PIECES fails before the
  // device is touched.
  const cuda::AttentionChoice attention = cuda::attention_choice_from_env();
  const std::int64_t cudnn_backward_pieces = cuda::cudnn_backward_pieces_from_env();
  std::string why;
  TANDEM_CHECK(cuda_device_count(&why) > 0, "backend 'cuda': no CUDA GPU is visible ({})", why);
  check(cudaGetDevice(&s_->device), "cudaGetDevice");
  check(cudaGetDeviceProperties(&s_->prop, s_->device), "cudaGetDeviceProperties");
  cudaDeviceGetAttribute(&s_->clock_khz, cudaDevAttrClockRate, s_->device);
  check(cudaStreamCreateWithFlags(&s_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  s_->error = static_cast<cuda::DeviceError*>(s_->memory.allocate(sizeof(cuda::DeviceError)));
  check(cudaMemsetAsync(s_->error, 0, sizeof(cuda::DeviceError), s_->stream), "cudaMemset");
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, sizeof(cuda::DeviceError)), "cudaMallocHost");
  s_->error_host = static_cast<cuda::DeviceError*>(pinned);
  const auto gemm_workspace_bytes = static_cast<std::size_t>(cuda::kGemmWorkspaceBytes);
  s_->gemm_workspace = s_->memory.allocate(gemm_workspace_bytes);
  s_->gemm = std::make_unique<cuda::LtGemm>(s_->stream, s_->gemm_workspace, gemm_workspace_bytes);
  s_->attention = std::make_unique<cuda::AttentionPaths>(attention, cudnn_backward_pieces,
                                                         s_->stream, s_->memory);
  s_->sync("creating the CUDA backend");
}

CudaBackend::~CudaBackend() {
  if (!s_) return;
  cudaStreamSynchronize(s_->stream);
  s_->attention.reset();
  s_->gemm.reset();
  for (cudaEvent_t e : s_->marks) cudaEventDestroy(e);
  if (s_->error_host) cudaFreeHost(s_->error_host);
  // The allocator frees its blocks when State goes away; the stream goes last.
  cudaStream_t stream = s_->stream;
  s_.reset();
  if (stream) cudaStreamDestroy(stream);
}

std::string CudaBackend::describe() const {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return fmt::format(
      "cuda: {} (sm_{}{}, {} SMs, {:.1f} GiB), driver CUDA {}.{}, runtime {}.{}, cuBLASLt {}; "
      "attention: {}",
      s_->prop.name, s_->prop.major, s_->prop.minor, s_->prop.multiProcessorCount,
      gib(static_cast<std::int64_t>(s_->prop.totalGlobalMem)), driver / 1000, driver % 1000 / 10,
      runtime / 1000, runtime % 1000 / 10, s_->gemm->version(), s_->attention->note());
}

std::string CudaBackend::attention_path() const { return s_->attention->note(); }

namespace {

// Published dense peaks (no sparsity) of the data-centre parts tandem targets, in TFLOP/s.
struct PublishedPeak {
  const char* name_part;
  const char* excluded;  // a name containing this is another variant
  double bf16, fp32;
  const char* source;
};
constexpr PublishedPeak kPeaks[] = {
    {"H200", nullptr, 989.4, 66.9, "NVIDIA H200 SXM datasheet"},
    {"GH200", nullptr, 989.4, 66.9, "NVIDIA GH200 datasheet"},
    {"H100", "PCIe", 989.4, 66.9, "NVIDIA H100 SXM datasheet"},
    {"H100 PCIe", nullptr, 756.0, 51.2, "NVIDIA H100 PCIe datasheet"},
    {"H800", nullptr, 989.4, 66.9, "NVIDIA H800 SXM datasheet"},
    {"A100", nullptr, 312.0, 19.5, "NVIDIA A100 datasheet"},
};

const PublishedPeak* published_peak(const std::string& name) {
  for (const PublishedPeak& p : kPeaks) {
    if (name.find(p.name_part) == std::string::npos) continue;
    if (p.excluded && name.find(p.excluded) != std::string::npos) continue;
    return &p;
  }
  return nullptr;
}

// Dense tensor-core bf16 FLOP per clock per SM by architecture, for GPUs not in the table.
double bf16_flops_per_clock_per_sm(int major, int minor) {
  if (major >= 10) return 8192;
  if (major == 9) return 4096;
  if (major == 8 && minor == 0) return 2048;
  if (major == 8) return 1024;
  return 512;
}

}  // namespace

double CudaBackend::peak_flops(DType dtype) const {
  const bool tensor = dtype == DType::bf16;
  if (const PublishedPeak* p = published_peak(s_->prop.name))
    return (tensor ? p->bf16 : p->fp32) * 1e12;
  const double clock = s_->clock_khz * 1e3, sms = s_->prop.multiProcessorCount;
  // fp32: 128 FMA lanes per SM (64 on sm_80), two FLOP each.
  const double fp32 = sms * clock * 2.0 * (s_->prop.major == 8 && s_->prop.minor == 0 ? 64 : 128);
  return tensor ? sms * clock * bf16_flops_per_clock_per_sm(s_->prop.major, s_->prop.minor) : fp32;
}

std::string CudaBackend::describe_peak(DType dtype) const {
  const bool tensor = dtype == DType::bf16;
  if (const PublishedPeak* p = published_peak(s_->prop.name))
    return fmt::format("{} dense {}: {:.1f} TFLOP/s", p->source,
                       tensor ? "bf16 tensor core" : "fp32", tensor ? p->bf16 : p->fp32);
  return fmt::format("{}: {} SMs x {:.2f} GHz x {} (not in the published table: estimated)",
                     s_->prop.name, s_->prop.multiProcessorCount, s_->clock_khz / 1e6,
                     tensor ? "bf16 tensor-core FLOP/clock/SM" : "fp32 FLOP/clock/SM");
}

void CudaBackend::synchronize() {
  s_->sync("synchronize");
  s_->check_device_error("synchronize");
}

void* CudaBackend::device_stream() const { return s_->stream; }

MemoryStats CudaBackend::memory_stats() const {
  const cuda::MemoryCounters& c = s_->memory.counters();
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return {c.in_use,
          c.peak_in_use,
          c.reserved,
          c.peak_reserved,
          static_cast<std::int64_t>(free_bytes),
          static_cast<std::int64_t>(total_bytes),
          c.driver_allocations,
          c.cache_releases};
}

void CudaBackend::reset_peak_memory() { s_->memory.reset_peak(); }

void CudaBackend::release_cached_memory() { s_->memory.release_cached(); }

// ---- op profile marks ----

std::size_t CudaBackend::record_mark() {
  if (s_->marks_used == s_->marks.size()) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate (op profile)");
    s_->marks.push_back(e);
  }
  check(cudaEventRecord(s_->marks[s_->marks_used], s_->stream), "cudaEventRecord (op profile)");
  return s_->marks_used++;
}

std::vector<double> CudaBackend::mark_seconds() {
  std::vector<double> seconds(s_->marks_used, 0.0);
  if (s_->marks_used > 0) {
    check(cudaEventSynchronize(s_->marks[s_->marks_used - 1]), "cudaEventSynchronize (op profile)");
    for (std::size_t i = 1; i < s_->marks_used; ++i) {
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, s_->marks[0], s_->marks[i]),
            "cudaEventElapsedTime (op profile)");
      seconds[i] = 1e-3 * static_cast<double>(ms);
    }
  }
  s_->marks_used = 0;
  return seconds;
}

// ---- memory ----

void* CudaBackend::do_allocate(std::size_t bytes) { return s_->memory.allocate(bytes); }

void CudaBackend::do_free(void* data) { s_->memory.free(data); }

void CudaBackend::do_upload(const Tensor& dst, const void* host) {
  // Pageable host memory: the call returns once the bytes are staged, so `host` may be reused.
  check(cudaMemcpyAsync(dst.data(), host, dst.bytes(), cudaMemcpyHostToDevice, s_->stream),
        "upload");
}

void CudaBackend::do_download(void* host, const Tensor& src) {
  check(cudaMemcpyAsync(host, src.data(), src.bytes(), cudaMemcpyDeviceToHost, s_->stream),
        "download");
  s_->sync("download");
  s_->check_device_error("download");
}

void CudaBackend::do_copy(const Tensor& dst, const Tensor& src) {
  check(cudaMemcpyAsync(dst.data(), src.data(), dst.bytes(), cudaMemcpyDeviceToDevice, s_->stream),
        "copy");
}

void CudaBackend::do_fill(const Tensor& dst, float value) {
  cuda::fill(f32_or_null(dst), value, dst.numel(), s_->stream);
}

void CudaBackend::do_zero(const Tensor& dst) {
  check(cudaMemsetAsync(dst.data(), 0, dst.bytes(), s_->stream), "zero");
}

void CudaBackend::do_cast(const Tensor& dst, const Tensor& src) {
  cuda::cast(elem_of(src, "cast"), elem_of(dst, "cast"), src.data(), dst.data(), src.numel(),
             s_->stream);
}

// ---- dense algebra ----

void CudaBackend::do_gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                          float beta, const Tensor& c) {
  const i64 m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  if (k == 0) {  // C = beta * C, as a BLAS does
    if (beta == 0.0f)
      do_zero(c);
    else if (beta != 1.0f)
      cuda::scale(f32_or_null(c), beta, c.numel(), s_->stream);
    return;
  }
  s_->gemm->run(trans_a, trans_b, m, n, k, alpha, a.data(), a.dim(1), b.data(), b.dim(1),
                elem_of(a, "gemm"), beta, c.data(), c.dim(1), elem_of(c, "gemm"));
}

void CudaBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& y) {
  const i64 T = x.dim(0), in = x.dim(1), out = w.dim(0);
  if (in == 0) return do_zero(y);
  s_->gemm->run(false, true, T, out, in, 1.0f, x.data(), in, w.data(), in, elem_of(x, "linear"),
                0.0f, y.data(), out, elem_of(y, "linear"));
}

void CudaBackend::do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                     const Tensor& dx, const Tensor& dw, bool accumulate_dx) {
  const i64 T = x.dim(0), in = x.dim(1), out = w.dim(0);
  const Elem e = elem_of(x, "linear_backward");
  if (dx) {
    if (out == 0) {
      if (!accumulate_dx) do_zero(dx);
    } else {
      s_->gemm->run(false, false, T, in, out, 1.0f, dy.data(), out, w.data(), in, e,
                    accumulate_dx ? 1.0f : 0.0f, dx.data(), in, elem_of(dx, "linear_backward"));
    }
  }
  if (dw && T > 0)
    s_->gemm->run(true, false, out, in, T, 1.0f, dy.data(), out, x.data(), in, e, 1.0f, dw.data(),
                  in, elem_of(dw, "linear_backward"));
}

// ---- embedding ----

void CudaBackend::do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  cuda::embedding_forward(elem_of(table, "embedding_forward"), elem_of(out, "embedding_forward"),
                          i64_or_null(ids), table.data(), out.data(), ids.dim(0), table.dim(1),
                          table.dim(0), s_->error, s_->stream);
  // A bad id is an input error: report it here, as the CPU backend does.
  s_->check_device_error("embedding_forward");
}

void CudaBackend::do_embedding_backward(const Tensor& ids, const Tensor& dout,
                                        const Tensor& dtable) {
  const i64 T = ids.dim(0), d = dtable.dim(1), V = dtable.dim(0);
  if (T == 0 || d == 0) return;
  // The sort's keys and token indices are ints (a bad id's key is V itself).
  TANDEM_CHECK(T < std::numeric_limits<int>::max() && V < std::numeric_limits<int>::max(),
               "embedding_backward: {} tokens over a vocabulary of {}: the device sort takes "
               "fewer than 2^31 - 1 of each",
               T, V);
  // Sorted on the device with no synchronisation; a bad id (which the forward has already
  // refused) is raised at the next synchronisation point and adds nothing.
  cuda::Scratch scratch(s_->memory,
                        static_cast<std::size_t>(cuda::embedding_backward_scratch_bytes(T)));
  cuda::embedding_backward(elem_of(dout, "embedding_backward"), i64_or_null(ids), dout.data(),
                           f32_or_null(dtable), T, d, V, scratch.get(), s_->error, s_->stream);
}

// ---- normalisation ----

void CudaBackend::do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                     const Tensor& rstd, float eps) {
  cuda::rmsnorm_forward(elem_of(x, "rmsnorm_forward"), x.data(), w.data(), y.data(),
                        f32_or_null(rstd), x.dim(0), x.dim(1), eps, s_->stream);
}

void CudaBackend::do_rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                      const Tensor& dy, const Tensor& dx, const Tensor& dw) {
  const i64 rows = x.dim(0), d = x.dim(1);
  cuda::Scratch partials(s_->memory, dw ? cuda::rmsnorm_dw_partials(rows, d) * sizeof(double) : 0);
  cuda::rmsnorm_backward(elem_of(x, "rmsnorm_backward"), x.data(), w.data(), f32_or_null(rstd),
                         dy.data(), dx.data(), f32_or_null(dw), rows, d, partials.as<double>(),
                         s_->stream);
}

// ---- rotary embedding ----

void CudaBackend::do_rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                  const Tensor& positions) {
  cuda::rope(elem_of(x, "rope_forward"), x.data(), x.dim(0), x.dim(1), x.dim(2), x.dim(3),
             f32_or_null(cos), f32_or_null(sin), cos.dim(0), i64_or_null(positions), 1.0f,
             s_->error, s_->stream);
}

void CudaBackend::do_rope_backward(const Tensor& dx, const Tensor& cos, const Tensor& sin,
                                   const Tensor& positions) {
  cuda::rope(elem_of(dx, "rope_backward"), dx.data(), dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3),
             f32_or_null(cos), f32_or_null(sin), cos.dim(0), i64_or_null(positions), -1.0f,
             s_->error, s_->stream);
}

// ---- attention (the path chosen in attention_paths.cc) ----

void CudaBackend::do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, std::int64_t window,
                                       float scale, const Tensor& doc_start) {
  const i64 B = q.dim(0), T = q.dim(1);
  if (doc_start) cuda::check_doc_start(i64_or_null(doc_start), B, T, s_->error, s_->stream);
  s_->attention->forward(
      elem_of(q, "attention_forward"), q.data(), k.data(), v.data(), out.data(), f32_or_null(lse),
      {B, T, q.dim(2), k.dim(2), q.dim(3), window, scale, i64_or_null(doc_start)});
}

void CudaBackend::do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const Tensor& dout,
                                        const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                        std::int64_t window, float scale, const Tensor& doc_start) {
  const i64 B = q.dim(0), T = q.dim(1);
  if (doc_start) cuda::check_doc_start(i64_or_null(doc_start), B, T, s_->error, s_->stream);
  s_->attention->backward(
      elem_of(q, "attention_backward"), q.data(), k.data(), v.data(), out.data(), f32_or_null(lse),
      dout.data(), dq.data(), dk.data(), dv.data(),
      {B, T, q.dim(2), k.dim(2), q.dim(3), window, scale, i64_or_null(doc_start)});
}

// ---- elementwise ----

void CudaBackend::do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& h) {
  cuda::swiglu_forward(elem_of(g, "swiglu_forward"), g.data(), u.data(), h.data(), g.numel(),
                       s_->stream);
}

void CudaBackend::do_swiglu_backward(const Tensor& g, const Tensor& u, const Tensor& dh,
                                     const Tensor& dg, const Tensor& du) {
  cuda::swiglu_backward(elem_of(g, "swiglu_backward"), g.data(), u.data(), dh.data(), dg.data(),
                        du.data(), g.numel(), s_->stream);
}

void CudaBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& y) {
  cuda::add(elem_of(a, "add"), a.data(), b.data(), y.data(), a.numel(), s_->stream);
}

void CudaBackend::do_scale(const Tensor& x, float factor) {
  cuda::scale(f32_or_null(x), factor, x.numel(), s_->stream);
}

void CudaBackend::do_gather_rows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  cuda::gather_rows(elem_of(src, "gather_rows"), src.data(), src.dim(0), src.dim(1),
                    i64_or_null(index), index.dim(0), dst.data(), s_->error, s_->stream);
}

// ---- losses and scores ----

LossSums CudaBackend::do_lm_head_cross_entropy(const Tensor& hidden, const Tensor& w,
                                               const Tensor& labels, float z_weight,
                                               float grad_scale, const Tensor& dhidden,
                                               const Tensor& dw) {
  const i64 N = hidden.dim(0), d = hidden.dim(1), V = w.dim(0);
  TANDEM_CHECK(d > 0 && V > 0, "cross_entropy: bad sizes N={} d={} V={}", N, d, V);
  const Elem e = elem_of(hidden, "lm_head_cross_entropy");
  // Labels come to the host once: validation, the count, and which chunks have anything to learn.
  const std::vector<std::int64_t> host_labels =
      s_->to_host<std::int64_t>(labels.data(), static_cast<std::size_t>(N), "cross_entropy labels");
  LossSums result;
  for (i64 n = 0; n < N; ++n) {
    const std::int64_t l = host_labels[n];
    TANDEM_CHECK(l == core::kIgnoreIndex || (l >= 0 && l < V),
                 "cross_entropy: label {} at position {} is neither in [0, {}) nor {}", l, n, V,
                 core::kIgnoreIndex);
    if (l != core::kIgnoreIndex) ++result.count;
  }
  if (N == 0) return result;
  const bool want_grads = dhidden || dw;
  const std::size_t esize = e == Elem::f32 ? 4 : 2;
  i64 chunk_rows = cuda::logits_chunk_rows(V, static_cast<i64>(esize));
  // Tests make a few tokens span several chunks.
  if (const char* env = std::getenv("TANDEM_CUDA_LOGITS_CHUNK_ROWS"); env && *env)
    chunk_rows = std::max<i64>(1, std::atoll(env));
  const i64 chunk = std::min(N, chunk_rows);
  // The logits in the activation dtype: bf16 operands give bf16 logits (the bf16 lm_head's output,
  // rounded once by cuBLASLt from its fp32 accumulation), whose gradient, rounded to bf16 in place,
  // feeds the two gradient gemms (cuBLASLt takes one operand type), as the CPU's bf16 variant does
  // (kernels/cpu/cross_entropy.cc).
  cuda::Scratch logits(s_->memory, static_cast<std::size_t>(chunk * V) * esize);
  cuda::Scratch rows(s_->memory, static_cast<std::size_t>(2 * N) * sizeof(double));
  double* row_ce = rows.as<double>();
  double* row_z = row_ce + N;
  check(cudaMemsetAsync(row_ce, 0, static_cast<std::size_t>(2 * N) * sizeof(double), s_->stream),
        "cross_entropy");
  const char* hidden_base = static_cast<const char*>(hidden.data());
  for (i64 n0 = 0; n0 < N; n0 += chunk) {
    const i64 nc = std::min(chunk, N - n0);
    const bool any_label = std::any_of(host_labels.begin() + n0, host_labels.begin() + n0 + nc,
                                       [](std::int64_t l) { return l != core::kIgnoreIndex; });
    if (!any_label) {  // nothing to learn here: zero gradient rows, dw untouched
      if (dhidden)
        check(cudaMemsetAsync(static_cast<char*>(dhidden.data()) + n0 * d * esize, 0,
                              static_cast<std::size_t>(nc * d) * esize, s_->stream),
              "cross_entropy");
      continue;
    }
    const void* hidden_chunk = hidden_base + n0 * d * esize;
    s_->gemm->run(false, true, nc, V, d, 1.0f, hidden_chunk, d, w.data(), d, e, 0.0f, logits.get(),
                  V, e);
    cuda::cross_entropy_rows(e, logits.get(), i64_or_null(labels) + n0, nc, V, core::kIgnoreIndex,
                             z_weight, grad_scale, want_grads, row_ce + n0, row_z + n0, s_->stream);
    if (!want_grads) continue;
    const void* dlogits = logits.get();
    if (dhidden)
      s_->gemm->run(false, false, nc, d, V, 1.0f, dlogits, V, w.data(), d, e, 0.0f,
                    static_cast<char*>(dhidden.data()) + n0 * d * esize, d, e);
    if (dw)
      s_->gemm->run(true, false, V, d, nc, 1.0f, dlogits, V, hidden_chunk, d, e, 1.0f, dw.data(), d,
                    elem_of(dw, "lm_head_cross_entropy"));
  }
  // Row sums added on the host in row order, as the CPU does.
  const std::vector<double> sums =
      s_->to_host<double>(row_ce, static_cast<std::size_t>(2 * N), "cross_entropy sums");
  for (i64 r = 0; r < N; ++r) result.ce_sum += sums[static_cast<std::size_t>(r)];
  for (i64 r = 0; r < N; ++r) result.z_sum += sums[static_cast<std::size_t>(N + r)];
  return result;
}

std::vector<double> CudaBackend::do_token_log_probs(const Tensor& logits, const Tensor& targets) {
  const i64 n = logits.dim(0), V = logits.dim(1);
  const std::vector<std::int64_t> host_targets =
      s_->to_host<std::int64_t>(targets.data(), static_cast<std::size_t>(n), "token_log_probs");
  for (i64 i = 0; i < n; ++i)
    TANDEM_CHECK(host_targets[i] >= 0 && host_targets[i] < V,
                 "token_log_probs: target {} outside [0, {})", host_targets[i], V);
  cuda::Scratch out(s_->memory, static_cast<std::size_t>(n) * sizeof(double));
  cuda::token_log_probs(elem_of(logits, "token_log_probs"), logits.data(), i64_or_null(targets), n,
                        V, out.as<double>(), s_->stream);
  return s_->to_host<double>(out.get(), static_cast<std::size_t>(n), "token_log_probs");
}

// ---- optimiser ----

double CudaBackend::do_sum_of_squares(const Tensor& x) {
  return do_sums_of_squares(std::span<const Tensor>(&x, 1)).front();
}

// Every tensor's chunks in one launch (a table of the tensors goes to the device in one small copy)
// and one copy of the partials back.
std::vector<double> CudaBackend::do_sums_of_squares(std::span<const Tensor> xs) {
  std::vector<cuda::SumOfSquaresTensor> table;
  i64 chunks = 0;
  for (const Tensor& x : xs) {
    table.push_back({f32_or_null(x), x.numel(), chunks});
    chunks += cuda::sum_of_squares_chunks(x.numel());
  }
  TANDEM_CHECK(table.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
               "sum_of_squares: {} tensors in one launch", table.size());
  const std::size_t table_bytes = table.size() * sizeof(cuda::SumOfSquaresTensor);
  cuda::Scratch device_table(s_->memory, table_bytes);
  check(cudaMemcpyAsync(device_table.get(), table.data(), table_bytes, cudaMemcpyHostToDevice,
                        s_->stream),
        "sum_of_squares (tensor table)");
  cuda::Scratch partials(s_->memory, static_cast<std::size_t>(chunks) * sizeof(double));
  cuda::sum_of_squares_tensors(device_table.as<cuda::SumOfSquaresTensor>(),
                               static_cast<int>(table.size()), chunks, partials.as<double>(),
                               s_->stream);
  const std::vector<double> host =
      s_->to_host<double>(partials.get(), static_cast<std::size_t>(chunks), "sum_of_squares");
  std::vector<double> sums;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const i64 end = i + 1 < xs.size() ? table[i + 1].first_chunk : chunks;
    double s = 0.0;
    for (i64 c = table[i].first_chunk; c < end; ++c)
      s += host[static_cast<std::size_t>(c)];  // chunk order, as the CPU adds them
    sums.push_back(s);
  }
  return sums;
}

void CudaBackend::do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m,
                                  const Tensor& v, const AdamWScalars& s) {
  const AdamWRun run{p, g, m, v, s.decay};
  do_adamw_updates(std::span<const AdamWRun>(&run, 1), s);
}

// Every run in one launch: a table of the runs' operands and first blocks goes to the device (one
// small copy), and each block finds its tensor there.
void CudaBackend::do_adamw_updates(std::span<const AdamWRun> runs, const AdamWScalars& s) {
  std::vector<cuda::AdamWTensor> table;
  i64 blocks = 0;
  for (const AdamWRun& r : runs) {
    table.push_back({f32_or_null(r.p), f32_or_null(r.g), f32_or_null(r.m), f32_or_null(r.v),
                     r.p.numel(), blocks, r.decay ? 1 : 0, 0});
    blocks += cuda::adamw_blocks(r.p.numel());
  }
  TANDEM_CHECK(blocks <= std::numeric_limits<int>::max(),
               "adamw_update: {} blocks of {} elements exceed one launch", blocks,
               cuda::kAdamWBlockElems);
  TANDEM_CHECK(table.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
               "adamw_update: {} tensors in one launch", table.size());
  const std::size_t bytes = table.size() * sizeof(cuda::AdamWTensor);
  cuda::Scratch device_table(s_->memory, bytes);
  check(
      cudaMemcpyAsync(device_table.get(), table.data(), bytes, cudaMemcpyHostToDevice, s_->stream),
      "adamw_update (tensor table)");
  const cuda::AdamWArgs a{
      s.neg_step_size, s.bias_correction2_sqrt, s.decay_factor, s.beta1,     s.one_minus_beta1,
      s.beta2,         s.one_minus_beta2,       s.eps,          s.arithmetic};
  cuda::adamw_update_tensors(device_table.as<cuda::AdamWTensor>(), static_cast<int>(table.size()),
                             blocks, a, s_->stream);
}

}  // namespace tandem::kernels
