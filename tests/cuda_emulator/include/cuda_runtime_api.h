// The CUDA emulator's runtime API: the part of CUDA's host API that tandem's CUDA backend calls,
// implemented on the CPU (tests/cuda_emulator/runtime.cc). "Device" memory is host memory that the
// emulator tracks, so that copies are checked against the allocations they name. Kernels, copies
// and memsets are queued on their stream and run when the host synchronises with it
// (tests/cuda_emulator/streams.cc), a kernel's grid as tests/cuda_emulator/scheduler.cc does.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
};

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr : int {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

enum cudaDataType_t : int {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};

constexpr unsigned cudaStreamDefault = 0x00;
constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventDisableTiming = 0x02;

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  std::size_t sharedMemPerBlockOptin;
  int maxThreadsPerBlock;
  int major;
  int minor;
  int multiProcessorCount;
  int clockRate;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned int x, y, z;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();

// Events order one stream's later work after another's earlier work (cudaStreamWaitEvent), and the
// host after a stream's (cudaEventSynchronize); queries report queued work as not ready.
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
// Milliseconds between two completed records of timing events (the emulator: host time between
// the moments their markers ran).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);

template <typename T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T** ptr, std::size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}
