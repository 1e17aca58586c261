// Helpers of the CUDA emulator's own tests (emulator_test.cu, streams_test.cu): device buffers
// filled from and read back to the host.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

}  // namespace cuda_emulator_test
