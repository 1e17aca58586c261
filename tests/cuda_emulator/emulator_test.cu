// The CUDA emulator's own tests: kernels written as for nvcc (this file is translated like the
// backend's .cu files) run as CUDA defines them, and what the emulator claims to catch, it catches.
// Its streams have their own file (streams_test.cu).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "emulator_test_util.h"
#include "tandem/kernels/cuda/mma.cuh"

namespace {

// ---- kernels ----

// Each block sums its 256 inputs: shared memory, __syncthreads and a butterfly of shuffles.
__global__ void block_sum_kernel(const float* x, float* out) {
  __shared__ float partial[8];
  const unsigned t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float v = x[blockIdx.x * blockDim.x + t];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < 8 ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    if (lane == 0) out[blockIdx.x] = w;
  }
}

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

// Rotates values through shared memory by one thread; `sync` orders the writes before the reads.
__global__ void rotate_kernel(const float* x, float* y, bool sync) {
  extern __shared__ float s[];
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = x[t];
  if (sync) __syncthreads();
  y[t] = s[(t + 1) % n];
}

// Each thread reads its lower neighbour's slot: without a barrier, a race.
__global__ void shift_kernel(const float* x, float* y) {
  extern __shared__ float s[];
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  s[t] = x[base + t];
  y[base + t] = s[(t + n - 1) % n];
}

// Block 0 fills the array; every block reads it. Only block 0 may find the values.
__global__ void first_block_writes_kernel(float* y) {
  __shared__ float v[32];
  if (blockIdx.x == 0) v[threadIdx.x] = 1.0f;
  __syncthreads();
  y[blockIdx.x * 32 + threadIdx.x] = v[threadIdx.x];
}

// Each block reads what the block before it wrote in the same launch: a race between blocks.
__global__ void chain_kernel(float* y) {
  if (threadIdx.x == 0) y[blockIdx.x] = blockIdx.x == 0 ? 1.0f : y[blockIdx.x - 1] + 1.0f;
}

// Broadcast from a lane chosen per call, and the 2-D and 3-D coordinates.
__global__ void coordinates_kernel(int* out) {
  const unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int from_lane_5 = __shfl_sync(0xffffffffu, static_cast<int>(t), 5);
  out[b * blockDim.x * blockDim.y * blockDim.z + t] =
      static_cast<int>(b * 10000 + t) * 100 + from_lane_5 % 32;
}

__global__ void shuffle_after_exit_kernel(float* y) {
  if (threadIdx.x >= 16) return;
  y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Lanes 0-15 shuffle among themselves (legal: the mask names exactly them) while 16-31 wait.
__global__ void half_warp_kernel(float* y) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
  __syncthreads();
  y[threadIdx.x] = v;
}

__global__ void split_warp_kernel(float* y) {
  float v = 1.0f;
  if (threadIdx.x < 16)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;
}

__global__ void __launch_bounds__(64) bounded_kernel(float* y) { y[threadIdx.x] = 1.0f; }

// Thread t writes y[offset + t].
__global__ void write_at_kernel(float* y, int offset) { y[offset + threadIdx.x] = 2.0f; }

__global__ void big_shared_kernel(float* y) {
  extern __shared__ float s[];
  s[threadIdx.x] = 2.0f;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x];
}

__global__ void record_error_kernel(int* word) {
  if (threadIdx.x == 7 || threadIdx.x == 9) atomicCAS(word, 0, static_cast<int>(threadIdx.x));
}

// ---- helpers ----

using cuda_emulator_test::device;
using cuda_emulator_test::host;

std::vector<float> normal(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Runs a test in one order of blocks and threads, and puts the previous order back.
struct ScopedOrder {
  cuda_emulator::Order previous = cuda_emulator::order();
  explicit ScopedOrder(cuda_emulator::Order o) { cuda_emulator::set_order(o); }
  ~ScopedOrder() { cuda_emulator::set_order(previous); }
};

// Runs launches on n CPU threads (the emulator spreads blocks over OpenMP's threads), and puts
// the previous count back.
struct ScopedCpuThreads {
  int previous = omp_get_max_threads();
  explicit ScopedCpuThreads(int n) { omp_set_num_threads(n); }
  ~ScopedCpuThreads() { omp_set_num_threads(previous); }
};

// n words 1000, 1001, ... on the device: what the cp.async tests copy.
unsigned* numbered_words(unsigned n) {
  std::vector<unsigned> words(n);
  for (unsigned i = 0; i < n; ++i) words[i] = 1000 + i;
  return device(words);
}

int count_nan(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  int n = 0;
  for (std::size_t i = begin; i < end; ++i) n += std::isnan(v[i]);
  return n;
}

// ---- the programming model ----

TEST(CudaEmulator, BlockReductionWithSharedMemoryAndShuffles) {
  const std::vector<float> x = normal(4 * 256, 1);
  float* dx = device(x);
  float* dout = device(std::vector<float>(4, 0.0f));
  block_sum_kernel<<<4, 256>>>(dx, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> out = host(dout, 4);
  for (int b = 0; b < 4; ++b) {
    double ref = 0.0;
    for (int t = 0; t < 256; ++t) ref += x[b * 256 + t];
    EXPECT_NEAR(out[b], ref, 1e-4) << "block " << b;
  }
  cudaFree(dx);
  cudaFree(dout);
}

// The race a missing __syncthreads makes is visible: the read comes before the neighbour's write,
// and finds shared memory's garbage (NaN) instead of the value.
TEST(CudaEmulator, AMissingBarrierReadsGarbage) {
  const ScopedOrder forward(cuda_emulator::Order::forward);
  const std::vector<float> x = normal(64, 2);
  float* dx = device(x);
  float* dy = device(std::vector<float>(64, 0.0f));
  rotate_kernel<<<1, 64, 64 * sizeof(float)>>>(dx, dy, true);
  std::vector<float> y = host(dy, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(y[t], x[(t + 1) % 64]);
  rotate_kernel<<<1, 64, 64 * sizeof(float)>>>(dx, dy, false);
  y = host(dy, 64);
  int garbage = 0;
  for (int t = 0; t < 63; ++t) garbage += std::isnan(y[t]);
  EXPECT_EQ(garbage, 63);  // only the last thread reads a slot written before it
  cudaFree(dx);
  cudaFree(dy);
}

// A race that reads the right value with the threads in index order (each reads a lower thread's
// write) reads garbage with them reversed; the default order reverses every other block.
TEST(CudaEmulator, TheThreadOrderVariesSoThatARaceInEitherDirectionShows) {
  const std::vector<float> x = normal(2 * 64, 3);
  float* dx = device(x);
  float* dy = device(std::vector<float>(2 * 64, 0.0f));
  {
    const ScopedOrder forward(cuda_emulator::Order::forward);
    shift_kernel<<<1, 64, 64 * sizeof(float)>>>(dx, dy);
    const std::vector<float> y = host(dy, 64);
    EXPECT_EQ(count_nan(y, 0, 64), 1);  // only thread 0, which reads thread 63's slot
    for (int t = 1; t < 64; ++t) EXPECT_EQ(y[t], x[t - 1]);
  }
  {
    const ScopedOrder reverse(cuda_emulator::Order::reverse);
    shift_kernel<<<1, 64, 64 * sizeof(float)>>>(dx, dy);
    EXPECT_EQ(count_nan(host(dy, 64), 0, 64), 63);
  }
  {
    const ScopedOrder mixed(cuda_emulator::Order::mixed);
    shift_kernel<<<2, 64, 64 * sizeof(float)>>>(dx, dy);
    const std::vector<float> y = host(dy, 2 * 64);
    const int a = count_nan(y, 0, 64), b = count_nan(y, 64, 128);
    EXPECT_EQ(std::min(a, b), 1);
    EXPECT_EQ(std::max(a, b), 63);
  }
  cudaFree(dx);
  cudaFree(dy);
}

// A static __shared__ array holds garbage in every block, not the values the previous block of the
// same kernel left in it.
TEST(CudaEmulator, StaticSharedMemoryStartsAsGarbageInEveryBlock) {
  const ScopedOrder forward(cuda_emulator::Order::forward);
  float* dy = device(std::vector<float>(3 * 32, 0.0f));
  first_block_writes_kernel<<<3, 32>>>(dy);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> y = host(dy, 3 * 32);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(y[t], 1.0f);
  EXPECT_EQ(count_nan(y, 32, 96), 64);
  cudaFree(dy);
}

// Blocks are not ordered: one that reads another block's output of the same launch finds it in
// index order, and not in reverse. (On one CPU thread: blocks on several run at the same time.)
TEST(CudaEmulator, TheBlockOrderVariesSoThatARaceBetweenBlocksShows) {
  const ScopedCpuThreads one(1);
  float* dy = device(std::vector<float>(4, 0.0f));
  {
    const ScopedOrder forward(cuda_emulator::Order::forward);
    chain_kernel<<<4, 32>>>(dy);
    EXPECT_EQ(host(dy, 4), (std::vector<float>{1, 2, 3, 4}));
  }
  cudaMemset(dy, 0, 4 * sizeof(float));
  {
    const ScopedOrder reverse(cuda_emulator::Order::reverse);
    chain_kernel<<<4, 32>>>(dy);
    EXPECT_EQ(host(dy, 4), (std::vector<float>{1, 1, 1, 1}));
  }
  cudaFree(dy);
}

// Blocks run on every OpenMP thread, each with its own shared memory; the result is the same.
TEST(CudaEmulator, BlocksOnSeveralCpuThreadsGiveTheSameResult) {
  const std::vector<float> x = normal(64 * 256, 4);
  float* dx = device(x);
  float* dout = device(std::vector<float>(64, 0.0f));
  std::vector<std::vector<float>> results;
  for (int n : {1, 2, 3}) {
    const ScopedCpuThreads threads(n);
    block_sum_kernel<<<64, 256>>>(dx, dout);
    results.push_back(host(dout, 64));
  }
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
  EXPECT_EQ(count_nan(results[0], 0, 64), 0);
  cudaFree(dx);
  cudaFree(dout);
}

TEST(CudaEmulator, CoordinatesOfThreeDimensionalGridsAndBlocks) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const int blocks = 12, threads = 64;
  int* d = device(std::vector<int>(blocks * threads, -1));
  coordinates_kernel<<<grid, block>>>(d);
  const std::vector<int> out = host(d, blocks * threads);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t)
      EXPECT_EQ(out[b * threads + t], (b * 10000 + t) * 100 + (t / 32 * 32 + 5) % 32);
  cudaFree(d);
}

TEST(CudaEmulator, AShuffleAmongTheLanesItNamesWhileOthersWait) {
  float* d = device(std::vector<float>(32, 0.0f));
  half_warp_kernel<<<1, 32>>>(d);
  const std::vector<float> y = host(d, 32);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(y[t], t < 16 ? static_cast<float>(t ^ 1) : t);
  cudaFree(d);
}

// Which of two threads' atomicCAS comes first is not defined; exactly one of them wins, the first
// in the order the threads run.
TEST(CudaEmulator, IntegerAtomicsTheFirstWriterWins) {
  int* d = device(std::vector<int>(1, 0));
  for (const auto& [o, winner] :
       {std::pair{cuda_emulator::Order::forward, 7}, std::pair{cuda_emulator::Order::reverse, 9}}) {
    const ScopedOrder order(o);
    cudaMemset(d, 0, sizeof(int));
    record_error_kernel<<<1, 32>>>(d);
    EXPECT_EQ(host(d, 1)[0], winner);
  }
  cudaFree(d);
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

// ---- what the emulator stops with a message (undefined or a hang on a GPU) ----

// The child of a death test starts afresh (threadsafe style): the parent's OpenMP threads, which
// the emulator's launches started, do not survive a plain fork.
class CudaEmulatorDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CudaEmulatorDeathTest, AShuffleNamingAnExitedLane) {
  float* d = device(std::vector<float>(32, 0.0f));
  EXPECT_DEATH(
      {
        shuffle_after_exit_kernel<<<1, 32>>>(d);
        cudaDeviceSynchronize();  // a queued kernel runs here
      },
      "which has exited");
  cudaFree(d);
}

TEST_F(CudaEmulatorDeathTest, AShuffleNamingALaneTheBlockDoesNotHave) {
  float* x = device(std::vector<float>(48, 1.0f));
  float* out = device(std::vector<float>(1, 0.0f));
  EXPECT_DEATH(
      {
        block_sum_kernel<<<1, 48>>>(x, out);
        cudaDeviceSynchronize();  // a queued kernel runs here
      },
      "which the block does not have");
  cudaFree(x);
  cudaFree(out);
}

TEST_F(CudaEmulatorDeathTest, AWarpSplitBetweenABarrierAndAShuffle) {
  float* d = device(std::vector<float>(32, 0.0f));
  EXPECT_DEATH(
      {
        split_warp_kernel<<<1, 32>>>(d);
        cudaDeviceSynchronize();  // a queued kernel runs here
      },
      "deadlock");
  cudaFree(d);
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

#if defined(__SANITIZE_ADDRESS__)
// What the sanitizer build relies on (docs/cuda.md): a kernel that writes past its allocation's
// 256-byte granule is stopped by AddressSanitizer (a GPU would corrupt memory or fault), though the
// emulator that poisons the bytes past the granule is itself compiled without instrumentation.
TEST_F(CudaEmulatorDeathTest, AKernelWritingPastItsAllocationIsStoppedByAddressSanitizer) {
  float* d = device(std::vector<float>(100, 0.0f));  // 400 bytes: the granule ends at 512
  write_at_kernel<<<1, 28>>>(d, 100);                // bytes 400-511: inside the granule
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_DEATH(
      {
        write_at_kernel<<<1, 32>>>(d, 120);  // bytes 480-607
        cudaDeviceSynchronize();             // a queued kernel runs here
      },
      "AddressSanitizer: use-after-poison");
  cudaFree(d);
}
#endif

// ---- launches a GPU refuses ----

TEST(CudaEmulator, RefusedLaunchesSetTheLastErrorAndRunNothing) {
  float* d = device(std::vector<float>(2048, 0.0f));
  bounded_kernel<<<1, 1025>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared
  bounded_kernel<<<1, 128>>>(d);               // more threads than __launch_bounds__(64)
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  bounded_kernel<<<dim3(1, 65536), 32>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(host(d, 1)[0], 0.0f);
  bounded_kernel<<<1, 64>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(d, 1)[0], 1.0f);
  cudaFree(d);
}

TEST(CudaEmulator, DynamicSharedMemoryAbove48KiBNeedsTheAttribute) {
  float* d = device(std::vector<float>(64, 0.0f));
  const std::size_t bytes = 64 * 1024;
  big_shared_kernel<<<1, 64, bytes>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(host(d, 1)[0], 0.0f);
  ASSERT_EQ(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(bytes)),
            cudaSuccess);
  big_shared_kernel<<<1, 64, bytes>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host(d, 64)[63], 2.0f);
  EXPECT_EQ(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);  // above Hopper's 227 KiB
  cudaGetLastError();
  cudaFree(d);
}

// ---- memory ----

TEST(CudaEmulator, CopiesAreCheckedAgainstTheAllocationsTheyName) {
  std::vector<float> h(16, 1.0f), other(16, 0.0f);
  float* d = device(h);
  EXPECT_EQ(cudaMemcpy(d + 8, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d + 9, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // one float past the end
  EXPECT_EQ(cudaMemcpy(other.data(), h.data(), 4, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // a host pointer as the device side
  EXPECT_EQ(cudaMemcpy(d, d + 4, 4, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);  // a device pointer as the host side
  EXPECT_EQ(cudaMemset(other.data(), 0, 4), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(other.data()), cudaErrorInvalidValue);
  cudaGetLastError();
  float* fresh = nullptr;
  ASSERT_EQ(cudaMalloc(&fresh, 4 * sizeof(float)), cudaSuccess);
  EXPECT_TRUE(std::isnan(host(fresh, 4)[3]));  // fresh device memory is garbage, not zeros
  cudaFree(fresh);
  cudaFree(d);
}

// ---- cuBLASLt ----

struct Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Gemm(cublasOperation_t ta, cublasOperation_t tb, cudaDataType_t ab, cudaDataType_t ct,
       std::uint64_t m, std::uint64_t n, std::uint64_t k, std::int64_t lda, std::int64_t ldb,
       std::int64_t ldc) {
    cublasLtCreate(&handle);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(std::int32_t));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(std::int32_t));
    cublasLtMatrixLayoutCreate(&a, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
    cublasLtMatrixLayoutCreate(&b, ab, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
    cublasLtMatrixLayoutCreate(&c, ct, m, n, ldc);
  }
  cublasStatus_t choose(std::uint32_t alignment = 256) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof alignment);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1, &result, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    algo = result.algo;
    return s == CUBLAS_STATUS_SUCCESS && count == 1 ? s : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  cublasStatus_t run(float alpha, const void* A, const void* B, float beta, void* C) {
    return cublasLtMatmul(handle, desc, &alpha, A, a, B, b, &beta, C, c, C, c, &algo, nullptr, 0,
                          nullptr);
  }
  ~Gemm() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
};

float bf16_value(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return __bfloat162float(b);
}

// Column-major, both operands transposed or not, padded leading dimensions, fp32 and bf16.
TEST(CudaEmulator, CublasLtMatmulIsTheColumnMajorProduct) {
  const std::int64_t m = 5, n = 7, k = 9, pad = 3;
  for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF}) {
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        const std::int64_t a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
        const std::int64_t b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
        const std::int64_t lda = a_rows + pad, ldb = b_rows + pad, ldc = m + pad;
        std::vector<float> A = normal(lda * a_cols, 3), B = normal(ldb * b_cols, 4),
                           C = normal(ldc * n, 5);
        if (type == CUDA_R_16BF)
          for (auto* v : {&A, &B, &C})
            for (float& x : *v) x = bf16_value(x);
        auto to_device = [&](const std::vector<float>& v) -> void* {
          if (type == CUDA_R_32F) return device(v);
          std::vector<__nv_bfloat16> h(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16_rn(v[i]);
          return device(h);
        };
        void *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
        Gemm g(ta, tb, type, type, m, n, k, lda, ldb, ldc);
        ASSERT_EQ(g.choose(), CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(g.run(0.5f, dA, dB, -2.0f, dC), CUBLAS_STATUS_SUCCESS);
        std::vector<float> out(static_cast<std::size_t>(ldc * n));
        if (type == CUDA_R_32F) {
          out = host(static_cast<float*>(dC), out.size());
        } else {
          const auto h = host(static_cast<__nv_bfloat16*>(dC), out.size());
          for (std::size_t i = 0; i < h.size(); ++i) out[i] = __bfloat162float(h[i]);
        }
        for (std::int64_t j = 0; j < n; ++j) {
          for (std::int64_t i = 0; i < m; ++i) {
            double s = 0.0;
            for (std::int64_t p = 0; p < k; ++p) {
              const double x = ta == CUBLAS_OP_N ? A[i + p * lda] : A[p + i * lda];
              const double y = tb == CUBLAS_OP_N ? B[p + j * ldb] : B[j + p * ldb];
              s += x * y;
            }
            const double ref = 0.5 * s - 2.0 * C[i + j * ldc];
            const double tol = type == CUDA_R_32F ? 1e-5 : 1e-2 * (std::fabs(ref) + 1.0);
            EXPECT_NEAR(out[i + j * ldc], ref, tol)
                << "type " << type << " ta " << ta << " tb " << tb << " at " << i << "," << j;
          }
          for (std::int64_t i = m; i < ldc; ++i)  // the padding rows are not written
            EXPECT_EQ(out[i + j * ldc], C[i + j * ldc]);
        }
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dC);
      }
    }
  }
}

TEST(CudaEmulator, CublasLtRefusesWhatCublasLtRefuses) {
  std::vector<float> x(64, 1.0f);
  float* d = device(x);
  {  // beta = 0: C is not read, so a NaN there does not reach D
    std::vector<float> nan_c(4, std::nanf(""));
    float* c = device(nan_c);
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 2, 2, 2, 2);
    ASSERT_EQ(g.choose(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(g.run(1.0f, d, d, 0.0f, c), CUBLAS_STATUS_SUCCESS);
    for (float v : host(c, 4)) EXPECT_EQ(v, 2.0f);
    cudaFree(c);
  }
  {  // a leading dimension below the row count
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 4, 2, 2, 3, 2, 4);
    EXPECT_NE(g.choose(), CUBLAS_STATUS_SUCCESS);
  }
  {  // fp32 operands into a bf16 output: no such kernel
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_16BF, 2, 2, 2, 2, 2, 2);
    EXPECT_NE(g.choose(), CUBLAS_STATUS_SUCCESS);
  }
  {  // pointers less aligned than the algorithm was chosen for
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 2, 2, 2, 2);
    ASSERT_EQ(g.choose(16), CUBLAS_STATUS_SUCCESS);
    EXPECT_NE(g.run(1.0f, d + 1, d, 0.0f, d + 32), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.run(1.0f, d + 4, d, 0.0f, d + 32), CUBLAS_STATUS_SUCCESS);
  }
  {  // an operand reaching past its allocation
    Gemm g(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 4, 4, 4, 4, 4, 4);
    ASSERT_EQ(g.choose(4), CUBLAS_STATUS_SUCCESS);  // alignment is not what is tested here
    EXPECT_EQ(g.run(1.0f, d + 48, d, 0.0f, d + 16), CUBLAS_STATUS_SUCCESS);
    EXPECT_NE(g.run(1.0f, d + 56, d, 0.0f, d + 16), CUBLAS_STATUS_SUCCESS);
    std::vector<float> host_c(16);
    EXPECT_NE(g.run(1.0f, d, d, 0.0f, host_c.data()), CUBLAS_STATUS_SUCCESS);
  }
  cudaFree(d);
}

}  // namespace
