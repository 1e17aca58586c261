// Helpers of the CUDA emulator's own tests (the *_test.cu files here): device buffers filled from
// and read back to the host, random inputs, the emulator's order of blocks and threads for one
// test, and the fixture of its death tests.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

namespace cuda_emulator_test {

template <typename T>
T* device(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  // From pageable memory cudaMemcpy returns once the data is staged, before it reaches the device,
  // and a non-blocking stream is not ordered after it: wait, so that every stream sees it.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> host(const T* p, std::size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

inline std::vector<float> normal(std::size_t n, unsigned seed) {
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

// The child of a death test starts afresh (threadsafe style): the parent's OpenMP threads, which
// the emulator's launches started, do not survive a plain fork. One class for every file, as
// GoogleTest requires of a test suite's fixture.
class CudaEmulatorDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace cuda_emulator_test
