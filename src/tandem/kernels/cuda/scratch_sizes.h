// The CUDA backend's device scratch, by size: what its ops take from the caching allocator beyond
// the model's own buffers. The backend allocates by these; `tandem plan --device h200` counts
// them. No CUDA types, so that the planner compiles without CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

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

// Where cuDNN's backward workspace has no room for the whole problem, the backend runs it in
// pieces: `batch` batch entries by `kv_heads` kv heads (with the query heads that share them), all
// pieces one shape, so that the workspace (which grows with batch x heads) shrinks with the piece.
// Every piece shape of a [B, T, Hq, Hkv] problem, largest first (more kv heads first among
// equals), the whole problem first; the backend takes the first whose workspace it can allocate,
// the planner the first whose estimate fits. A shape is left out where a piece's lse (fp32
// [B, Hq, T]) would start off the 16 bytes that the cuDNN frontend declares for every tensor (an
// odd T, say); q, k and v rows are 16-byte multiples wherever cuDNN takes head_dim (a multiple
// of 8).
struct AttentionPiece {
  std::int64_t batch = 1, kv_heads = 1;
  // How many such pieces a [B, ..., Hkv] problem is cut into.
  std::int64_t count(std::int64_t B, std::int64_t Hkv) const {
    return (B / batch) * (Hkv / kv_heads);
  }
};
inline std::vector<AttentionPiece> cudnn_backward_pieces(std::int64_t B, std::int64_t T,
                                                         std::int64_t Hq, std::int64_t Hkv) {
  const std::int64_t group = Hq / Hkv;
  std::vector<AttentionPiece> pieces;
  for (std::int64_t b = 1; b <= B; ++b)
    for (std::int64_t h = 1; h <= Hkv; ++h) {
      if (B % b != 0 || Hkv % h != 0) continue;
      const bool aligned = (h == Hkv || h * group * T % 4 == 0) && (b == B || b * Hq * T % 4 == 0);
      if (aligned) pieces.push_back({b, h});
    }
  std::sort(pieces.begin(), pieces.end(), [](const AttentionPiece& x, const AttentionPiece& y) {
    const std::int64_t a = x.batch * x.kv_heads, c = y.batch * y.kv_heads;
    return a != c ? a > c : x.kv_heads > y.kv_heads;
  });
  return pieces;
}

// tandem's own attention backward (tensor-core or plain kernels): delta, one float per query row.
inline std::int64_t attention_backward_scratch_bytes(std::int64_t B, std::int64_t H,
                                                     std::int64_t T) {
  return B * H * T * 4;
}

}  // namespace tandem::kernels::cuda
