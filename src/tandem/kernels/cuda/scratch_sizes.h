// The CUDA backend's device scratch, by size: what its ops take from the caching allocator beyond
// the model's own buffers. The backend allocates by these; `tandem plan --device h200` counts
// them. No CUDA types, so that the planner compiles without CUDA.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tandem::kernels::cuda {

// The fused cross-entropy's logits chunk: at most this many bytes of logits (fp32 or bf16) at once.
inline constexpr std::int64_t kLogitsChunkBytes = std::int64_t{512} << 20;
// cuBLASLt's workspace (Hopper's kernels want up to 32 MiB), held for the backend's lifetime.
inline constexpr std::int64_t kGemmWorkspaceBytes = std::int64_t{32} << 20;

// Rows of logits per chunk for a vocabulary of V and elements of `element_bytes`.
inline std::int64_t logits_chunk_rows(std::int64_t V, std::int64_t element_bytes) {
  return std::max<std::int64_t>(1, kLogitsChunkBytes / (V * element_bytes));
}

// The fused cross-entropy's scratch over N tokens: one chunk of logits and two doubles per row
// (the per-row loss and z-loss terms).
inline std::int64_t cross_entropy_scratch_bytes(std::int64_t N, std::int64_t V,
                                                std::int64_t element_bytes) {
  return std::min(N, logits_chunk_rows(V, element_bytes)) * V * element_bytes + 16 * N;
}

// The embedding backward's device sort of T token indices by id: keys and token indices twice
// (each radix pass reads one pair and writes the other) and one count per (digit, tile of 256).
inline std::int64_t embedding_backward_scratch_bytes(std::int64_t T) {
  return 4 * (4 * T + (T + 255) / 256 * 256);
}

// cuDNN's fused SDPA backward with its deterministic algorithm, as cuDNN 9's frontend sizes its
// workspace on Hopper (the CUDA emulator reproduces it): dQ accumulated in fp32 and a dP buffer of
// 2 bytes per query-key pair, the sequence rounded up to 64. The run's figure is cuDNN's own
// (get_workspace_size); this is the planner's estimate of it.
inline std::int64_t cudnn_attention_backward_workspace_bytes(std::int64_t B, std::int64_t H,
                                                             std::int64_t T, std::int64_t D) {
  const std::int64_t rounded = (T + 63) / 64 * 64;
  return B * H * T * D * 4 + B * H * rounded * rounded * 2;
}

// tandem's own attention backward (tensor-core or plain kernels): delta, one float per query row.
inline std::int64_t attention_backward_scratch_bytes(std::int64_t B, std::int64_t H,
                                                     std::int64_t T) {
  return B * H * T * 4;
}

}  // namespace tandem::kernels::cuda
