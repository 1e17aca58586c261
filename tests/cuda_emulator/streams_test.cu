// The CUDA emulator's streams and events (tests/cuda_emulator/streams.cc): work runs when the host
// synchronises with it, in the order CUDA defines, and copies complete when CUDA says. Each test
// asserts what an emulator that completes every call at once gets wrong. Translated like the
// backend's .cu files.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "emulator_test_util.h"

namespace {

using cuda_emulator_test::device;
using cuda_emulator_test::host;

// y[i] = x[i] + 1 over one block of 64 threads.
__global__ void add_one_kernel(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x] + 1.0f; }

// RAII streams and events.
struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags) { EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};
struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(unsigned flags = cudaEventDisableTiming) {
    EXPECT_EQ(cudaEventCreateWithFlags(&e, flags), cudaSuccess);
  }
  ~Event() { cudaEventDestroy(e); }
};

// Device buffers made by filled() are freed when the test ends; x (ones) and y (zeros) are the
// kernels' usual input and output.
class CudaEmulatorStreams : public ::testing::Test {
 protected:
  float* filled(std::size_t n, float value) {
    buffers_.push_back(device(std::vector<float>(n, value)));
    return buffers_.back();
  }
  void TearDown() override {
    for (float* p : buffers_) cudaFree(p);
  }

  std::vector<float*> buffers_;  // declared before x and y, which filled() adds to it
  float* x = filled(64, 1.0f);
  float* y = filled(64, 0.0f);
};

TEST_F(CudaEmulatorStreams, ANonBlockingStreamIsNotOrderedWithTheLegacyStream) {
  Stream s(cudaStreamNonBlocking);
  add_one_kernel<<<1, 64, 0, s.s>>>(x, y);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // cudaMemcpy runs on the legacy stream, which does not wait for a non-blocking stream: the race
  // that reads a result before it is there reads the old value here, every time.
  EXPECT_EQ(host(y, 64)[5], 0.0f);
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(host(y, 64)[5], 2.0f);
}

TEST_F(CudaEmulatorStreams, ABlockingStreamAndTheLegacyStreamWaitForEachOther) {
  Stream s(cudaStreamDefault);
  ASSERT_EQ(cudaMemset(x, 0, 64 * sizeof(float)), cudaSuccess);  // legacy stream, queued
  add_one_kernel<<<1, 64, 0, s.s>>>(x, y);                       // waits for the memset
  EXPECT_EQ(host(y, 64)[63], 1.0f);  // the legacy stream's copy waits for the kernel
}

// A producer stream writing y = x + 1, a consumer stream reading it into z = y + 1, and the event
// that may order them.
class CudaEmulatorStreamPair : public CudaEmulatorStreams {
 protected:
  float* z = filled(64, 0.0f);
  Stream producer{cudaStreamNonBlocking}, consumer{cudaStreamNonBlocking};
  Event ready;
};

TEST_F(CudaEmulatorStreamPair, AnEventOrdersOneStreamAfterAnother) {
  for (bool wait : {false, true}) {
    ASSERT_EQ(cudaMemsetAsync(y, 0, 64 * sizeof(float), producer.s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(producer.s), cudaSuccess);
    add_one_kernel<<<1, 64, 0, producer.s>>>(x, y);  // y = 2
    if (wait) {
      ASSERT_EQ(cudaEventRecord(ready.e, producer.s), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(consumer.s, ready.e, 0), cudaSuccess);
    }
    add_one_kernel<<<1, 64, 0, consumer.s>>>(y, z);  // z = y + 1
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    // Without the wait the consumer ran on the zeros; with it, on the producer's 2s.
    EXPECT_EQ(host(z, 64)[0], wait ? 3.0f : 1.0f) << "wait " << wait;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

TEST_F(CudaEmulatorStreamPair, AWaitOrdersAfterTheRecordItFoundNotALaterOne) {
  ASSERT_EQ(cudaEventRecord(ready.e, producer.s), cudaSuccess);  // nothing before it
  ASSERT_EQ(cudaStreamWaitEvent(consumer.s, ready.e, 0), cudaSuccess);
  add_one_kernel<<<1, 64, 0, producer.s>>>(x, y);
  ASSERT_EQ(cudaEventRecord(ready.e, producer.s), cudaSuccess);  // too late for the wait
  add_one_kernel<<<1, 64, 0, consumer.s>>>(y, z);
  ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
  EXPECT_EQ(host(z, 64)[0], 1.0f);
  ASSERT_EQ(cudaEventSynchronize(ready.e), cudaSuccess);
  EXPECT_EQ(host(y, 64)[0], 2.0f);
}

TEST_F(CudaEmulatorStreams, CopiesToTheHostCompleteAsCudaDocuments) {
  Stream s(cudaStreamNonBlocking);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 64; ++i) pinned[i] = -1.0f;
  std::vector<float> pageable(64, -1.0f);
  add_one_kernel<<<1, 64, 0, s.s>>>(x, y);
  // Into page-locked memory an asynchronous copy completes with its stream...
  ASSERT_EQ(cudaMemcpyAsync(pinned, y, 64 * sizeof(float), cudaMemcpyDeviceToHost, s.s),
            cudaSuccess);
  EXPECT_EQ(pinned[0], -1.0f);
  // ...into pageable memory only once it is done, which is after the stream's earlier work.
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), y, 64 * sizeof(float), cudaMemcpyDeviceToHost, s.s),
            cudaSuccess);
  EXPECT_EQ(pageable[0], 2.0f);
  EXPECT_EQ(pinned[0], 2.0f);  // the stream's earlier copy ran too
  cudaFreeHost(pinned);
}

TEST_F(CudaEmulatorStreams, CopiesFromTheHostReadPinnedMemoryWhenTheyRun) {
  float* d = filled(2, 0.0f);
  Stream s(cudaStreamNonBlocking);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, sizeof(float)), cudaSuccess);
  float pageable = 5.0f;
  *pinned = 5.0f;
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, sizeof(float), cudaMemcpyHostToDevice, s.s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d + 1, &pageable, sizeof(float), cudaMemcpyHostToDevice, s.s),
            cudaSuccess);
  *pinned = 7.0f;   // before the copy ran: the device gets this (a bug the emulator shows)
  pageable = 7.0f;  // CUDA staged the pageable source during the call: the device gets 5
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  const std::vector<float> h = host(d, 2);
  EXPECT_EQ(h[0], 7.0f);
  EXPECT_EQ(h[1], 5.0f);
  cudaFreeHost(pinned);
}

TEST_F(CudaEmulatorStreams, AQueryReportsQueuedWorkAsNotReadyOnce) {
  Stream s(cudaStreamNonBlocking);
  Event done;
  EXPECT_EQ(cudaStreamQuery(s.s), cudaSuccess);  // nothing queued
  add_one_kernel<<<1, 64, 0, s.s>>>(x, y);
  ASSERT_EQ(cudaEventRecord(done.e, s.s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done.e), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(done.e), cudaSuccess);  // the work ran: a polling loop ends
  EXPECT_EQ(cudaStreamQuery(s.s), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not ready is not an error
  EXPECT_EQ(host(y, 64)[0], 2.0f);
}

TEST_F(CudaEmulatorStreams, FreeingWaitsForTheWorkThatUsesTheMemory) {
  float* freed = device(std::vector<float>(64, 1.0f));
  Stream s(cudaStreamNonBlocking);
  add_one_kernel<<<1, 64, 0, s.s>>>(freed, y);
  cudaFree(freed);  // synchronises the device first, as cudaFree does: the kernel read it
  ASSERT_EQ(cudaStreamSynchronize(s.s), cudaSuccess);
  EXPECT_EQ(host(y, 64)[0], 2.0f);
}

TEST_F(CudaEmulatorStreams, TimingEventsMeasureTheWorkBetweenTheirRecords) {
  Stream s(cudaStreamNonBlocking);
  Event start(cudaEventDefault), middle(cudaEventDefault), end(cudaEventDefault);
  Event untimed(cudaEventDisableTiming), unrecorded(cudaEventDefault);
  ASSERT_EQ(cudaEventRecord(start.e, s.s), cudaSuccess);
  add_one_kernel<<<1, 64, 0, s.s>>>(x, y);
  ASSERT_EQ(cudaEventRecord(middle.e, s.s), cudaSuccess);
  for (int i = 0; i < 50; ++i) add_one_kernel<<<1, 64, 0, s.s>>>(x, y);
  ASSERT_EQ(cudaEventRecord(end.e, s.s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed.e, s.s), cudaSuccess);
  float ms = -1.0f;
  // Nothing has run yet: the records are not complete.
  EXPECT_EQ(cudaEventElapsedTime(&ms, start.e, end.e), cudaErrorNotReady);
  ASSERT_EQ(cudaEventSynchronize(end.e), cudaSuccess);
  float first = -1.0f, all = -1.0f;
  ASSERT_EQ(cudaEventElapsedTime(&first, start.e, middle.e), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&all, start.e, end.e), cudaSuccess);
  EXPECT_GE(first, 0.0f);
  EXPECT_GT(all, first);  // fifty kernels after the first one
  EXPECT_EQ(cudaEventElapsedTime(&ms, start.e, untimed.e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, unrecorded.e, end.e), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST_F(CudaEmulatorStreams, UnknownHandlesAreRefused) {
  Stream s(cudaStreamNonBlocking);
  cudaStream_t gone = nullptr;
  ASSERT_EQ(cudaStreamCreate(&gone), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(gone), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(gone), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(gone), cudaErrorInvalidResourceHandle);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, gone), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s.s, e, 0), cudaErrorInvalidResourceHandle);
  float* d = filled(1, 0.0f);
  add_one_kernel<<<1, 1, 0, gone>>>(d, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

}  // namespace
