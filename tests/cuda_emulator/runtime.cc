// The CUDA emulator's host API. One emulated device of Hopper's compute capability and launch
// limits. Device memory is host memory from malloc, filled with all-ones bytes (NaN as floats)
// when allocated, as cudaMalloc's memory is garbage; every copy and memset is checked against the
// allocations it names, and a mismatch (a host pointer where a device range belongs, a range past
// its allocation) fails the call with cudaErrorInvalidValue and says why on stderr. Streams exist
// as names only: every call completes before it returns, so stream order always holds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "cuda_emulator_device.h"
#include "emulator_state.h"

namespace cuda_emulator {
namespace {

// Hopper's limits (H100/H200): what a launch may ask for.
constexpr std::size_t kDefaultSharedBytes = 48 * 1024;
constexpr std::size_t kMaxSharedBytes = 227 * 1024;
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kDeviceBytes = std::size_t{8} << 30;  // not the H200's 141 GB: a CPU's share
// An H200's multiprocessors and boost clock, for the peak FLOP/s the backend derives from them.
constexpr int kSms = 132;
constexpr int kClockKhz = 1980000;

struct State {
  std::mutex mutex;
  std::map<const char*, std::size_t> allocations;  // device memory: start -> bytes
  std::size_t in_use = 0;
  std::set<const void*> pinned;
  std::set<const void*> streams;
  std::set<const void*> events;
  std::map<const void*, int> shared_limit;  // kernel -> max dynamic shared memory
};

State& state() {
  static State s;
  return s;
}

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

cudaError_t invalid(const std::string& why) {
  std::fprintf(stderr, "CUDA emulator: %s\n", why.c_str());
  return error(cudaErrorInvalidValue);
}

// True when [p, p + bytes) lies inside one device allocation (the caller holds the mutex).
bool on_device(State& s, const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = s.allocations.upper_bound(c);
  if (it == s.allocations.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

bool overlaps_device(State& s, const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = s.allocations.upper_bound(c + (bytes ? bytes - 1 : 0));
  if (it == s.allocations.begin()) return false;
  --it;
  return it->first + it->second > c;
}

std::string where(const void* p, std::size_t bytes) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "[%p, +%zu bytes)", p, bytes);
  return buf;
}

cudaError_t check_stream(State& s, cudaStream_t stream) {
  if (stream == nullptr || s.streams.count(stream)) return cudaSuccess;
  return invalid("a call names a stream that does not exist (destroyed, or never created)");
}

cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (check_stream(s, stream) != cudaSuccess) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return invalid("a copy with a null pointer");
  const bool dst_device = on_device(s, dst, bytes), src_device = on_device(s, src, bytes);
  bool want_dst = false, want_src = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      want_dst = true;
      break;
    case cudaMemcpyDeviceToHost:
      want_src = true;
      break;
    case cudaMemcpyDeviceToDevice:
      want_dst = want_src = true;
      break;
    case cudaMemcpyDefault:
      return cudaSuccess;
    default:
      return invalid("a copy of an unknown kind");
  }
  if (want_dst && !dst_device)
    return invalid("a copy to the device names " + where(dst, bytes) +
                   ", which is not inside one device allocation");
  if (want_src && !src_device)
    return invalid("a copy from the device names " + where(src, bytes) +
                   ", which is not inside one device allocation");
  if (!want_dst && overlaps_device(s, dst, bytes))
    return invalid("a copy to the host names device memory " + where(dst, bytes));
  if (!want_src && overlaps_device(s, src, bytes))
    return invalid("a copy from the host names device memory " + where(src, bytes));
  return cudaSuccess;
}

}  // namespace

namespace detail {

void set_last_error(cudaError_t e) { error(e); }

bool device_range(const void* p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return on_device(s, p, bytes);
}

cudaError_t check_launch(const LaunchConfig& c, unsigned max_threads, const void* address) {
  const dim3 g = c.grid, b = c.block;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      std::size_t{b.x} * b.y * b.z > kMaxThreads || g.x == 0 || g.y == 0 || g.z == 0 ||
      g.x > 0x7FFFFFFFu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (max_threads > 0 && std::size_t{b.x} * b.y * b.z > max_threads)
    return cudaErrorLaunchOutOfResources;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (c.stream != nullptr && !s.streams.count(c.stream)) return cudaErrorInvalidResourceHandle;
  std::size_t limit = kDefaultSharedBytes;
  if (auto it = s.shared_limit.find(address); address && it != s.shared_limit.end())
    limit = std::max<std::size_t>(limit, static_cast<std::size_t>(it->second));
  if (c.shared > limit) {
    std::fprintf(stderr,
                 "CUDA emulator: a launch asks for %zu bytes of dynamic shared memory; the kernel "
                 "may use %zu (cudaFuncSetAttribute raises the limit up to %zu)\n",
                 c.shared, limit, kMaxSharedBytes);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace detail
}  // namespace cuda_emulator

using cuda_emulator::error;
using cuda_emulator::state;
using cuda_emulator::State;

namespace {

// The emulated node's GPUs: TANDEM_CUDA_EMULATOR_DEVICES (default 8, a node of eight H200s), so
// that data-parallel runs of one rank per GPU run under mpirun. Each process has its own memory;
// the device number only says which GPU a rank would drive (NCCL refuses two ranks on one).
int device_count() {
  static const int n = [] {
    const char* v = std::getenv("TANDEM_CUDA_EMULATOR_DEVICES");
    const int parsed = v != nullptr ? std::atoi(v) : 8;
    return parsed >= 0 ? parsed : 0;
  }();
  return n;
}

thread_local int t_device = 0;

bool valid_device(int device) { return device >= 0 && device < device_count(); }

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : error(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int* device) {
  if (device_count() == 0) return error(cudaErrorNoDevice);
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return error(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU)");
  prop->totalGlobalMem = cuda_emulator::kDeviceBytes;
  prop->sharedMemPerBlock = cuda_emulator::kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = cuda_emulator::kMaxSharedBytes;
  prop->maxThreadsPerBlock = 1024;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = cuda_emulator::kSms;
  prop->clockRate = cuda_emulator::kClockKhz;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return error(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrClockRate:
      *value = cuda_emulator::kClockKhz;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = cuda_emulator::kSms;
      return cudaSuccess;
  }
  return error(cudaErrorInvalidValue);
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  auto& s = state();
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  std::lock_guard lock(s.mutex);
  if (s.in_use + bytes > cuda_emulator::kDeviceBytes) return error(cudaErrorMemoryAllocation);
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) return error(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, bytes);
  s.allocations.emplace(static_cast<const char*>(p), bytes);
  s.in_use += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(static_cast<const char*>(ptr));
  if (it == s.allocations.end())
    return cuda_emulator::invalid("cudaFree of a pointer cudaMalloc did not return");
  s.in_use -= it->second;
  s.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  *ptr = std::malloc(bytes ? bytes : 1);
  if (!*ptr) return error(cudaErrorMemoryAllocation);
  std::memset(*ptr, 0xFF, bytes);
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.pinned.insert(*ptr);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pinned.erase(ptr))
    return cuda_emulator::invalid("cudaFreeHost of a pointer cudaMallocHost did not return");
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *total_bytes = cuda_emulator::kDeviceBytes;
  *free_bytes = cuda_emulator::kDeviceBytes - s.in_use;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (cudaError_t e = cuda_emulator::check_copy(dst, src, bytes, kind, stream); e != cudaSuccess)
    return e;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (cuda_emulator::check_stream(s, stream) != cudaSuccess) return cudaErrorInvalidValue;
    if (bytes && !cuda_emulator::on_device(s, dst, bytes))
      return cuda_emulator::invalid("a memset names " + cuda_emulator::where(dst, bytes) +
                                    ", which is not inside one device allocation");
  }
  if (bytes) std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

namespace {

// Streams and events are handles that only name themselves: created, checked, destroyed.
template <typename Handle>
cudaError_t create_handle(std::set<const void*> State::*handles, Handle* out) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *out = reinterpret_cast<Handle>(new char);
  (s.*handles).insert(*out);
  return cudaSuccess;
}

template <typename Handle>
cudaError_t destroy_handle(std::set<const void*> State::*handles, Handle handle) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!(s.*handles).erase(handle)) return error(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(handle);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  return create_handle(&State::streams, stream);
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return destroy_handle(&State::streams, stream);
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  return stream == nullptr || s.streams.count(stream) ? cudaSuccess
                                                      : error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  return create_handle(&State::events, event);
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) { return destroy_handle(&State::events, event); }
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.events.count(event)) return error(cudaErrorInvalidResourceHandle);
  return check_stream(s, stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  return s.events.count(event) ? cudaSuccess : error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.events.count(event)) return error(cudaErrorInvalidResourceHandle);
  return check_stream(s, stream);
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emulator::t_last_error;
  cuda_emulator::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return cuda_emulator::t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorNotReady:
      return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return error(cudaErrorInvalidDeviceFunction);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return error(cudaErrorInvalidValue);
  if (value < 0 || static_cast<std::size_t>(value) > cuda_emulator::kMaxSharedBytes)
    return error(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.shared_limit[func] = value;
  return cudaSuccess;
}
