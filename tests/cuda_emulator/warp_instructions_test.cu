// The CUDA emulator's warp instructions as the PTX ISA defines them: ldmatrix's layout (through
// tandem's mma.cuh), cp.async with its commit groups and the window in which a copy may land,
// warp votes; and an ldmatrix address a GPU would fault on stops with a message. Translated like
// the backend's .cu files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emulator_test_util.h"
#include "tandem/kernels/cuda/mma.cuh"

namespace {

using cuda_emulator_test::CudaEmulatorDeathTest;
using cuda_emulator_test::device;
using cuda_emulator_test::host;
using cuda_emulator_test::ScopedOrder;

// Each lane's four ldmatrix words (tandem's mma.cuh) over a 16 x 16 bf16 tile holding 16 r + c
// (rows padded to 24): matrix j is the quarter at rows (j & 1) * 8, columns (j >> 1) * 8, lane l
// addresses row l % 8 of matrix l / 8, `offset` elements further.
__global__ void ldmatrix_kernel(unsigned* out, bool trans, int offset) {
  extern __shared__ __nv_bfloat16 tile[];
  for (int e = threadIdx.x; e < 16 * 24; e += blockDim.x)
    tile[e] = __float2bfloat16_rn(static_cast<float>(e / 24 * 16 + e % 24 % 16));
  __syncthreads();
  const int l = threadIdx.x, m = l >> 3;
  const __nv_bfloat16* row = tile + ((m & 1) * 8 + (l & 7)) * 24 + (m >> 1) * 8 + offset;
  unsigned d[4];
  if (trans)
    tandem::kernels::cuda::detail::ldmatrix_x4<true>(d, row);
  else
    tandem::kernels::cuda::detail::ldmatrix_x4<false>(d, row);
  for (int j = 0; j < 4; ++j) out[l * 4 + j] = d[j];
}

// cp.async as the emulator models it (device_util.cuh): each thread copies 16 bytes in each of
// two groups (the second zero-filled on odd threads) and records a word of each before and after
// the waits.
__global__ void cp_async_kernel(const unsigned* src, unsigned* out) {
  namespace d = tandem::kernels::cuda::detail;
  extern __shared__ unsigned words[];  // 8 per thread: the two groups' 16 bytes
  const int t = threadIdx.x;
  for (int w = 0; w < 8; ++w) words[t * 8 + w] = 0xAAAAAAAAu;
  d::cp_async_16(words + t * 8, src + t * 4, true);
  d::cp_async_commit();
  d::cp_async_16(words + t * 8 + 4, t % 2 == 0 ? src + 128 + t * 4 : src, t % 2 == 0);
  d::cp_async_commit();
  out[t * 4] = words[t * 8];  // nothing waited for
  d::cp_async_wait<1>();      // the first group
  out[t * 4 + 1] = words[t * 8];
  out[t * 4 + 2] = words[t * 8 + 4];
  d::cp_async_wait<0>();  // both
  out[t * 4 + 3] = words[t * 8 + 4];
}

// Each thread issues one 16-byte cp.async and records its first word before waiting for it.
__global__ void cp_async_before_wait_kernel(const unsigned* src, unsigned* out) {
  namespace d = tandem::kernels::cuda::detail;
  extern __shared__ unsigned words[];
  const int t = threadIdx.x;
  words[t * 4] = 0xAAAAAAAAu;
  d::cp_async_16(words + t * 4, src + t * 4, true);
  d::cp_async_commit();
  out[blockIdx.x * blockDim.x + t] = words[t * 4];
  d::cp_async_wait<0>();
}

// Warp votes: out[4 w] and out[4 w + 1] are __all_sync and __any_sync of lane < limit in warp w,
// [4 w + 2] and [4 w + 3] of lane == limit.
__global__ void vote_kernel(int* out, int limit) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int all = __all_sync(0xffffffffu, lane < limit),
            any = __any_sync(0xffffffffu, lane < limit);
  const int one_all = __all_sync(0xffffffffu, lane == limit);
  const int one_any = __any_sync(0xffffffffu, lane == limit);
  if (lane == 5) {
    out[4 * w] = all;
    out[4 * w + 1] = any;
    out[4 * w + 2] = one_all;
    out[4 * w + 3] = one_any;
  }
}

// n words 1000, 1001, ... on the device: what the cp.async tests copy.
unsigned* numbered_words(unsigned n) {
  std::vector<unsigned> words(n);
  for (unsigned i = 0; i < n; ++i) words[i] = 1000 + i;
  return device(words);
}

// ldmatrix as the PTX ISA lays it out: register j of lane 4 r + w holds matrix j's elements
// [r][2w] (low half) and [r][2w + 1]; transposed, [2w][r] and [2w + 1][r].
TEST(CudaEmulator, LdmatrixGivesEachLaneTheWordsThePtxIsaLaysOut) {
  unsigned* out = device(std::vector<unsigned>(32 * 4, 0u));
  auto bits = [](int row, int col) {  // 16 row + col as bf16 (exact: at most 255)
    const float v = static_cast<float>(16 * row + col);
    unsigned u;
    std::memcpy(&u, &v, sizeof u);
    return u >> 16;
  };
  for (bool trans : {false, true}) {
    ldmatrix_kernel<<<1, 32, 16 * 24 * sizeof(__nv_bfloat16)>>>(out, trans, 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<unsigned> got = host(out, 32 * 4);
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 4; ++j) {
        const int r = lane / 4, w = lane % 4, row0 = (j & 1) * 8, col0 = (j >> 1) * 8;
        const unsigned lo = trans ? bits(row0 + 2 * w, col0 + r) : bits(row0 + r, col0 + 2 * w);
        const unsigned hi =
            trans ? bits(row0 + 2 * w + 1, col0 + r) : bits(row0 + r, col0 + 2 * w + 1);
        EXPECT_EQ(got[lane * 4 + j], lo | hi << 16)
            << (trans ? "trans " : "") << "lane " << lane << " register " << j;
      }
  }
  cudaFree(out);
}

// A thread's cp.async copies land at its wait for their group and not before (so a kernel that
// reads a tile without waiting reads the old contents); wait_group 1 leaves the newest group
// out; a zero source size fills zeros.
TEST(CudaEmulator, AsyncCopiesLandAtTheirWait) {
  const ScopedOrder forward(cuda_emulator::Order::forward);
  unsigned* s = numbered_words(256);
  unsigned* out = device(std::vector<unsigned>(32 * 4, 0u));
  cp_async_kernel<<<1, 32, 32 * 8 * sizeof(unsigned)>>>(s, out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<unsigned> got = host(out, 32 * 4);
  for (unsigned t = 0; t < 32; ++t) {
    EXPECT_EQ(got[t * 4], 0xAAAAAAAAu) << t;
    EXPECT_EQ(got[t * 4 + 1], 1000 + t * 4) << t;
    EXPECT_EQ(got[t * 4 + 2], 0xAAAAAAAAu) << t;
    EXPECT_EQ(got[t * 4 + 3], t % 2 == 0 ? 1000 + 128 + t * 4 : 0u) << t;
  }
  cudaFree(s);
  cudaFree(out);
}

TEST(CudaEmulator, WarpVotesSeeEveryLane) {
  int* out = device(std::vector<int>(8, -1));
  for (int limit : {0, 1, 31, 32}) {
    vote_kernel<<<1, 64>>>(out, limit);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int> got = host(out, 8);
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(got[4 * w], limit == 32 ? 1 : 0) << limit;
      EXPECT_EQ(got[4 * w + 1], limit > 0 ? 1 : 0) << limit;
      EXPECT_EQ(got[4 * w + 2], 0) << limit;
      EXPECT_EQ(got[4 * w + 3], limit < 32 ? 1 : 0) << limit;
    }
  }
  cudaFree(out);
}

// The other end of a copy's window: in the default order, every other four blocks land their
// copies as soon as they are issued (so a prefetch into a buffer still being read shows).
TEST(CudaEmulator, InSomeBlocksAsyncCopiesLandAtIssue) {
  unsigned* s = numbered_words(128);
  unsigned* out = device(std::vector<unsigned>(8 * 32, 0u));
  cp_async_before_wait_kernel<<<8, 32, 32 * 4 * sizeof(unsigned)>>>(s, out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<unsigned> got = host(out, 8 * 32);
  int early_blocks = 0;
  for (int b = 0; b < 8; ++b) {
    const bool early = got[b * 32] != 0xAAAAAAAAu;
    early_blocks += early;
    for (unsigned t = 0; t < 32; ++t)
      EXPECT_EQ(got[b * 32 + t], early ? 1000 + t * 4 : 0xAAAAAAAAu) << "block " << b << " " << t;
  }
  EXPECT_EQ(early_blocks, 4);
  cudaFree(s);
  cudaFree(out);
}

TEST_F(CudaEmulatorDeathTest, AnLdmatrixRowThatIsNot16ByteAligned) {
  unsigned* out = device(std::vector<unsigned>(32 * 4, 0u));
  EXPECT_DEATH(
      {
        ldmatrix_kernel<<<1, 32, 16 * 24 * sizeof(__nv_bfloat16)>>>(out, false, 1);
        cudaDeviceSynchronize();  // a queued kernel runs here
      },
      "ldmatrix: a misaligned shared-memory address");
  cudaFree(out);
}

}  // namespace
