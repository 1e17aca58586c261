// Internal: the fused lm_head + cross-entropy with an explicit chunk size, so tests can make a few
// tokens span several chunks. lm_head_cross_entropy() uses lm_head_chunk_rows(V).
#pragma once

#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

// Rows per chunk such that the chunk's logits take at most about 32 MB.
i64 lm_head_chunk_rows(i64 V);

CrossEntropyResult lm_head_cross_entropy_chunked(const float* hidden, const float* w,
                                                 const std::int64_t* labels, i64 N, i64 d, i64 V,
                                                 float z_weight, float grad_scale, float* dhidden,
                                                 float* dw, i64 chunk_rows);

}  // namespace tandem::kernels::cpu
