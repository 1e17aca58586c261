// Launches and memory in the CUDA emulator as a GPU has them: launches a GPU refuses set the last
// error and run nothing, copies are checked against the allocations they name, fresh memory is
// garbage, and (in the sanitizer build) a kernel writing past its allocation is stopped.
// Translated like the backend's .cu files.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "emulator_test_util.h"

namespace {

using cuda_emulator_test::device;
using cuda_emulator_test::host;

__global__ void __launch_bounds__(64) bounded_kernel(float* y) { y[threadIdx.x] = 1.0f; }

__global__ void big_shared_kernel(float* y) {
  extern __shared__ float s[];
  s[threadIdx.x] = 2.0f;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x];
}

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

// ---- what the sanitizer build stops ----

#if defined(__SANITIZE_ADDRESS__)
using cuda_emulator_test::CudaEmulatorDeathTest;

// Thread t writes y[offset + t].
__global__ void write_at_kernel(float* y, int offset) { y[offset + threadIdx.x] = 2.0f; }

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

}  // namespace
