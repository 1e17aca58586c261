// Which kernels run the CUDA backend's attention, and that choice said in words. bf16 takes
// cuDNN's fused SDPA where libcudnn is loaded and takes the problem (no documents: cuDNN's masks
// here are causal and a band), else tandem's tensor-core kernels (head_dim up to 128), else the
// plain kernels, which also run fp32 (the parity path). TANDEM_CUDA_ATTENTION=flash skips cuDNN;
// =plain runs the plain kernels for everything.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <set>
#include <string>

#include "tandem/kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

class CachingAllocator;
class CudnnAttention;

enum class AttentionChoice { automatic, flash, plain };
// TANDEM_CUDA_ATTENTION (unset: automatic); any other value than plain or flash is refused.
AttentionChoice attention_choice_from_env();
// TANDEM_CUDA_CUDNN_BACKWARD_PIECES (unset: 1): cuDNN's attention backward in at least this many
// pieces even where its whole workspace has room (attention_cudnn.h; the attention benchmark's and
// the tests' knob); anything but a whole number from 1 is refused.
std::int64_t cudnn_backward_pieces_from_env();

// q [B, T, Hq, D], k and v [B, T, Hkv, D]; doc_start (a document start per token) null for none,
// already checked by the caller.
struct AttentionProblem {
  i64 B, T, Hq, Hkv, D, window;
  float scale;
  const i64* doc_start;
};

class AttentionPaths {
 public:
  // Opens cuDNN (automatic choice, built with the frontend) on `stream`, its workspace and the
  // backward's scratch from `memory`; `cudnn_backward_pieces` as cudnn_backward_pieces_from_env.
  AttentionPaths(AttentionChoice choice, std::int64_t cudnn_backward_pieces, cudaStream_t stream,
                 CachingAllocator& memory);
  ~AttentionPaths();
  AttentionPaths(const AttentionPaths&) = delete;
  AttentionPaths& operator=(const AttentionPaths&) = delete;

  // The paths in words, with the first problem cuDNN refused and each problem's pieces its
  // backward ran in for want of room, each once (for describe()).
  const std::string& note() const { return note_; }

  void forward(Elem e, const void* q, const void* k, const void* v, void* out, float* lse,
               const AttentionProblem& p);
  void backward(Elem e, const void* q, const void* k, const void* v, const void* out,
                const float* lse, const void* dout, void* dq, void* dk, void* dv,
                const AttentionProblem& p);

 private:
  bool on_tensor_cores(Elem e, i64 D) const;
  void note_refusal(const char* pass, const AttentionProblem& p);
  void note_pieces(const AttentionProblem& p);

  cudaStream_t stream_;
  CachingAllocator& memory_;
  bool flash_;  // bf16 on the tensor-core kernels where cuDNN's does not run
  std::string note_;
  bool refusal_reported_ = false;
  std::set<std::string> pieces_reported_;  // the pieces lines said
#ifdef TANDEM_HAVE_CUDNN_FRONTEND
  std::unique_ptr<CudnnAttention> cudnn_;  // null: not opened or not loadable
#endif
};

}  // namespace tandem::kernels::cuda
