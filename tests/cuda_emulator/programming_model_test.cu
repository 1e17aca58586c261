// The CUDA emulator's programming model: blocks, threads and warps run as CUDA defines them
// (shared memory, barriers, shuffles, atomics, grid coordinates), in orders that vary so that a
// race in either direction shows, and a warp used in a way that is undefined or hangs on a GPU
// stops with a message. Translated like the backend's .cu files; the other files of the emulator's
// own tests: warp_instructions_test.cu, launches_test.cu, cublaslt_test.cu, streams_test.cu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "emulator_test_util.h"

namespace {

using cuda_emulator_test::CudaEmulatorDeathTest;
using cuda_emulator_test::device;
using cuda_emulator_test::host;
using cuda_emulator_test::normal;
using cuda_emulator_test::ScopedOrder;

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

// Lanes 0-15 shuffle among themselves (legal: the mask names exactly them) while 16-31 wait.
__global__ void half_warp_kernel(float* y) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
  __syncthreads();
  y[threadIdx.x] = v;
}

__global__ void record_error_kernel(int* word) {
  if (threadIdx.x == 7 || threadIdx.x == 9) atomicCAS(word, 0, static_cast<int>(threadIdx.x));
}

__global__ void shuffle_after_exit_kernel(float* y) {
  if (threadIdx.x >= 16) return;
  y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void split_warp_kernel(float* y) {
  float v = 1.0f;
  if (threadIdx.x < 16)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;
}

// Runs launches on n CPU threads (the emulator spreads blocks over OpenMP's threads), and puts
// the previous count back.
struct ScopedCpuThreads {
  int previous = omp_get_max_threads();
  explicit ScopedCpuThreads(int n) { omp_set_num_threads(n); }
  ~ScopedCpuThreads() { omp_set_num_threads(previous); }
};

int count_nan(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  int n = 0;
  for (std::size_t i = begin; i < end; ++i) n += std::isnan(v[i]);
  return n;
}

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

// ---- what the emulator stops with a message (undefined or a hang on a GPU) ----

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

}  // namespace
