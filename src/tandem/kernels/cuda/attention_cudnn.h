// cuDNN's fused attention (SDPA through the cuDNN frontend's graph API) for bf16 q/k/v: causal,
// sliding window (cuDNN's diagonal band: key j visible to query i iff i - window < j <= i), GQA,
// lse saved as cuDNN's softmax stats (the natural-log log-sum-exp of the scaled scores, the same
// quantity the plain kernels save, so either backward can follow either forward). The backward
// asks for cuDNN's deterministic algorithm, whose workspace grows with batch x heads x T^2: where
// the device has no room for it, the backward runs in pieces of batch entries and kv heads
// (scratch_sizes.h's cudnn_backward_pieces, the largest that have room, sought first without
// giving the allocator's cache back);
// TANDEM_CUDA_CUDNN_BACKWARD_PIECES=N asks for N pieces or more even where the whole has room
// (the attention benchmark's and the tests' knob, read by attention_paths.h).
// Intra-document masking is not expressed here (the backend uses its own kernels for it).
//
// libcudnn is opened at run time (the frontend's dynamic loading), so a binary built with this
// file runs where cuDNN is missing; open() then says why and the backend keeps its own kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/kernels/cuda/scratch_sizes.h"

namespace tandem::kernels::cuda {

class CachingAllocator;

class CudnnAttention {
 public:
  // Null (and `why` filled) when libcudnn cannot be opened or is older than the frontend needs.
  // `backward_pieces`: TANDEM_CUDA_CUDNN_BACKWARD_PIECES's value (attention_paths.h).
  static std::unique_ptr<CudnnAttention> open(cudaStream_t stream, CachingAllocator& memory,
                                              std::int64_t backward_pieces, std::string* why);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  std::string version() const;  // "9.10.2"

  // bf16 q[B,T,Hq,D], k,v[B,T,Hkv,D] -> out (bf16), lse[B,Hq,T] (f32). False when cuDNN has no
  // engine for this problem (nothing was written; the caller falls back), with the reason kept.
  bool forward(const void* q, const void* k, const void* v, void* out, float* lse, std::int64_t B,
               std::int64_t T, std::int64_t Hq, std::int64_t Hkv, std::int64_t D,
               std::int64_t window, float scale);
  // False also where not even the smallest piece's workspace has room.
  bool backward(const void* q, const void* k, const void* v, const void* out, const float* lse,
                const void* dout, void* dq, void* dk, void* dv, std::int64_t B, std::int64_t T,
                std::int64_t Hq, std::int64_t Hkv, std::int64_t D, std::int64_t window,
                float scale);
  // Why the last forward or backward returned false.
  const std::string& last_refusal() const { return refusal_; }
  // The piece the last backward that ran was cut into ({B, Hkv}: the whole problem at once).
  const AttentionPiece& last_pieces() const { return pieces_; }
  // TANDEM_CUDA_CUDNN_BACKWARD_PIECES (1 where unset).
  std::int64_t pieces_asked() const;

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string refusal_;
  AttentionPiece pieces_;
};

}  // namespace tandem::kernels::cuda
