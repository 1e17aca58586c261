// Embedding lookup and its scatter-add gradient.
#include <algorithm>
#include <cstring>

#include "tandem/core/error.h"
#include "tandem/kernels/cpu/bf16.h"
#include "tandem/kernels/cpu/ops.h"

namespace tandem::kernels::cpu {

namespace {

void check_ids(const std::int64_t* ids, i64 tokens, i64 vocab) {
  // Validate everything first so a bad id leaves no half-written output behind.
  for (i64 t = 0; t < tokens; ++t) {
    TANDEM_CHECK(ids[t] >= 0 && ids[t] < vocab,
                 "embedding: token id {} at position {} is outside the vocabulary [0, {})", ids[t],
                 t, vocab);
  }
}

template <typename T>
void lookup(const std::int64_t* ids, const T* table, T* out, i64 tokens, i64 d, i64 vocab) {
  check_ids(ids, tokens, vocab);
#pragma omp parallel for schedule(static)
  for (i64 t = 0; t < tokens; ++t) {
    std::memcpy(out + t * d, table + ids[t] * d, static_cast<size_t>(d) * sizeof(T));
  }
}

}  // namespace

void embedding_forward(const std::int64_t* ids, const float* table, float* out, i64 T, i64 d,
                       i64 vocab) {
  lookup(ids, table, out, T, d, vocab);
}

void embedding_forward(const std::int64_t* ids, const std::uint16_t* table, std::uint16_t* out,
                       i64 T, i64 d, i64 vocab) {
  lookup(ids, table, out, T, d, vocab);
}

void embedding_forward(const std::int64_t* ids, const float* table, std::uint16_t* out, i64 T,
                       i64 d, i64 vocab) {
  check_ids(ids, T, vocab);
#pragma omp parallel for schedule(static)
  for (i64 t = 0; t < T; ++t) {
    const float* row = table + ids[t] * d;
    for (i64 j = 0; j < d; ++j) out[t * d + j] = f32_to_bf16(row[j]);
  }
}

void embedding_backward(const std::int64_t* ids, const float* dout, float* dtable, i64 T, i64 d,
                        i64 vocab) {
  check_ids(ids, T, vocab);  // the forward checked them too; here a bad id would write outside
  // Each thread owns a block of columns and walks the tokens in order, so every element's sum has
  // the order t = 0, 1, ... whatever the thread count, and no two threads touch the same float.
  constexpr i64 kColumnBlock = 64;
  const i64 blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (i64 block = 0; block < blocks; ++block) {
    const i64 c0 = block * kColumnBlock;
    const i64 c1 = std::min(d, c0 + kColumnBlock);
    for (i64 t = 0; t < T; ++t) {
      float* dst = dtable + ids[t] * d;
      const float* src = dout + t * d;
#pragma omp simd
      for (i64 c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace tandem::kernels::cpu
