#include "tandem/kernels/cuda/attention_paths.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "tandem/core/error.h"
#include "tandem/kernels/cuda/caching_allocator.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
#include "tandem/kernels/cuda/attention_cudnn.h"
#endif

namespace tandem::kernels::cuda {

AttentionChoice attention_choice_from_env() {
  const char* value = std::getenv("TANDEM_CUDA_ATTENTION");
  const std::string forced = value ? value : "";
  TANDEM_CHECK(forced.empty() || forced == "plain" || forced == "flash",
               "TANDEM_CUDA_ATTENTION={}: expected plain or flash (or unset)", forced);
  return forced == "plain"   ? AttentionChoice::plain
         : forced == "flash" ? AttentionChoice::flash
                             : AttentionChoice::automatic;
}

std::int64_t cudnn_backward_pieces_from_env() {
  const char* value = std::getenv("TANDEM_CUDA_CUDNN_BACKWARD_PIECES");
  if (value == nullptr || *value == '\0') return 1;
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  TANDEM_CHECK(*end == '\0' && n >= 1,
               "TANDEM_CUDA_CUDNN_BACKWARD_PIECES={}: expected a whole number of pieces, 1 or more",
               value);
  return n;
}

AttentionPaths::AttentionPaths(AttentionChoice choice, std::int64_t cudnn_backward_pieces,
                               cudaStream_t stream, CachingAllocator& memory)
    : stream_(stream), memory_(memory), flash_(choice != AttentionChoice::plain) {
  const std::string fallback = fmt::format(
      "tensor-core kernels for bf16 up to head_dim {}, plain kernels for fp32 and larger heads",
      kFlashMaxHeadDim);
  if (choice == AttentionChoice::plain) {
    note_ = "plain kernels (TANDEM_CUDA_ATTENTION=plain)";
  } else if (choice == AttentionChoice::flash) {
    note_ = fallback + " (TANDEM_CUDA_ATTENTION=flash)";
  } else {
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
    std::string reason;
    cudnn_ = CudnnAttention::open(stream_, memory_, cudnn_backward_pieces, &reason);
    note_ = cudnn_ ? fmt::format(
                         "cuDNN {} fused SDPA for bf16 (deterministic backward); {} where cuDNN "
                         "does not apply (documents, refused shapes)",
                         cudnn_->version(), fallback)
                   : fmt::format("{} (cuDNN unavailable: {})", fallback, reason);
#else
    (void)cudnn_backward_pieces;
    note_ = fallback + " (built without the cuDNN frontend)";
#endif
  }
}

AttentionPaths::~AttentionPaths() = default;

bool AttentionPaths::on_tensor_cores(Elem e, i64 D) const {
  return e == Elem::bf16 && flash_ && flash_attention_supports(D);
}

void AttentionPaths::note_refusal(const char* pass, const AttentionProblem& p) {
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
  // Said once, on stderr and in the note, so that a run knows its attention left cuDNN.
  if (refusal_reported_) return;
  refusal_reported_ = true;
  const std::string line = fmt::format(
      "cuDNN refused attention {} for B={} T={} Hq={} Hkv={} D={} window={} ({}); tandem's {} "
      "kernels run instead",
      pass, p.B, p.T, p.Hq, p.Hkv, p.D, p.window, cudnn_->last_refusal(),
      on_tensor_cores(Elem::bf16, p.D) ? "tensor-core" : "plain");
  fmt::print(stderr, "cuda: {}\n", line);
  note_ += "; " + line;
#else
  (void)pass;
  (void)p;
#endif
}

void AttentionPaths::note_pieces(const AttentionProblem& p) {
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
  // Each problem's pieces said once, on stderr and in the note: a run's layers take turns (windowed
  // and full), and say the same at every micro-batch.
  const AttentionPiece& piece = cudnn_->last_pieces();
  if (piece.batch == p.B && piece.kv_heads == p.Hkv) return;
  const std::string why =
      cudnn_->pieces_asked() > 1
          ? fmt::format("TANDEM_CUDA_CUDNN_BACKWARD_PIECES={}", cudnn_->pieces_asked())
          : std::string("no room for its workspace at once");
  const std::string line = fmt::format(
      "cuDNN's attention backward for B={} T={} Hq={} Hkv={} D={} window={} ran in {} pieces of {} "
      "batch entries x {} kv heads ({})",
      p.B, p.T, p.Hq, p.Hkv, p.D, p.window, piece.count(p.B, p.Hkv), piece.batch, piece.kv_heads,
      why);
  if (!pieces_reported_.insert(line).second) return;
  fmt::print(stderr, "cuda: {}\n", line);
  note_ += "; " + line;
#else
  (void)p;
#endif
}

void AttentionPaths::forward(Elem e, const void* q, const void* k, const void* v, void* out,
                             float* lse, const AttentionProblem& p) {
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
  if (e == Elem::bf16 && !p.doc_start && cudnn_) {
    if (cudnn_->forward(q, k, v, out, lse, p.B, p.T, p.Hq, p.Hkv, p.D, p.window, p.scale)) return;
    note_refusal("forward", p);
  }
#endif
  if (on_tensor_cores(e, p.D)) {
    flash_attention_forward(q, k, v, out, lse, p.B, p.T, p.Hq, p.Hkv, p.D, p.window, p.scale,
                            p.doc_start, stream_);
    return;
  }
  TANDEM_CHECK(p.D <= kMaxHeadDim,
               "cuda attention_forward: head_dim {} is larger than the {} the attention kernels "
               "take",
               p.D, kMaxHeadDim);
  attention_forward(e, q, k, v, out, lse, p.B, p.T, p.Hq, p.Hkv, p.D, p.window, p.scale,
                    p.doc_start, stream_);
}

void AttentionPaths::backward(Elem e, const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              const AttentionProblem& p) {
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
  if (e == Elem::bf16 && !p.doc_start && cudnn_) {
    if (cudnn_->backward(q, k, v, out, lse, dout, dq, dk, dv, p.B, p.T, p.Hq, p.Hkv, p.D, p.window,
                         p.scale)) {
      note_pieces(p);
      return;
    }
    note_refusal("backward", p);
  }
#endif
  // delta (rowsum of out * dout) for either of tandem's backward kernels.
  const Scratch delta(memory_,
                      static_cast<std::size_t>(attention_backward_scratch_bytes(p.B, p.Hq, p.T)));
  if (on_tensor_cores(e, p.D)) {
    flash_attention_backward(q, k, v, out, lse, dout, dq, dk, dv, p.B, p.T, p.Hq, p.Hkv, p.D,
                             p.window, p.scale, p.doc_start, delta.as<float>(), stream_);
    return;
  }
  TANDEM_CHECK(p.D <= kMaxHeadDim,
               "cuda attention_backward: head_dim {} is larger than the {} the attention kernels "
               "take",
               p.D, kMaxHeadDim);
  attention_backward(e, q, k, v, out, lse, dout, dq, dk, dv, p.B, p.T, p.Hq, p.Hkv, p.D, p.window,
                     p.scale, p.doc_start, delta.as<float>(), stream_);
}

}  // namespace tandem::kernels::cuda
