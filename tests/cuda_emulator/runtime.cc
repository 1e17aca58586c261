// The CUDA emulator's host API. One emulated device of Hopper's compute capability and launch
// limits. Device memory is host memory from malloc, filled with all-ones bytes (NaN as floats)
// when allocated, as cudaMalloc's memory is garbage; every copy and memset is checked against the
// allocations it names, and a mismatch (a host pointer where a device range belongs, a range past
// its allocation) fails the call with cudaErrorInvalidValue and says why on stderr. Copies and
// memsets are queued on their stream (streams.cc) and run when CUDA says they complete: with the
// stream, or before the call returns where CUDA documents the call as synchronous with the host.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emulator_device.h"
#include "emulator_state.h"

// Device memory past an allocation is poisoned under ASan (see scheduler.cc for the macro).
#if defined(__SANITIZE_ADDRESS__) && !defined(TANDEM_EMULATOR_ASAN)
#define TANDEM_EMULATOR_ASAN 1
#endif
#ifdef TANDEM_EMULATOR_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace cuda_emulator {
namespace {

// Hopper's limits (H100/H200): what a launch may ask for.
constexpr std::size_t kDefaultSharedBytes = 48 * 1024;
constexpr std::size_t kMaxSharedBytes = 227 * 1024;
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kDeviceBytes = std::size_t{8} << 30;  // not the H200's 141 GB: a CPU's share
// Device memory that other processes hold: TANDEM_CUDA_EMULATOR_HELD_BYTES (default 0), read at
// every allocation, so that a test can leave the process only so much room without the host
// memory that filling the device with its own allocations would take.
std::size_t held_by_others() {
  const char* v = std::getenv("TANDEM_CUDA_EMULATOR_HELD_BYTES");
  if (v == nullptr || *v == 0) return 0;
  const unsigned long long held = std::strtoull(v, nullptr, 10);
  return held < kDeviceBytes ? static_cast<std::size_t>(held) : kDeviceBytes;
}
// An H200's multiprocessors and boost clock, for the peak FLOP/s the backend derives from them.
constexpr int kSms = 132;
constexpr int kClockKhz = 1980000;

struct State {
  std::mutex mutex;
  std::map<const char*, std::size_t> allocations;  // device memory: start -> bytes
  std::size_t in_use = 0;
  std::map<const char*, std::size_t> pinned;  // cudaMallocHost: start -> bytes
  // Device memory is readable by the host only while queued device work runs (open), so that a
  // host access of device memory faults as it does with a GPU, instead of reading host memory.
  bool device_open = false;
  bool exiting = false;
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

// True when [p, p + bytes) lies inside one allocation of the map (the caller holds the mutex).
bool inside(const std::map<const char*, std::size_t>& allocations, const void* p,
            std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

bool on_device(State& s, const void* p, std::size_t bytes) {
  return inside(s.allocations, p, bytes);
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

constexpr std::size_t kPage = 4096;
std::size_t pages(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

void protect(void* p, std::size_t bytes, bool open) {
  if (mprotect(p, pages(bytes), open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("CUDA emulator: mprotect of device memory");
    std::abort();
  }
}

// Marks [p, p + bytes) as out of bounds for ASan.
void poison(void* p, std::size_t bytes) {
#ifdef TANDEM_EMULATOR_ASAN
  __asan_poison_memory_region(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

void set_device_open(State& s, bool open) {
  if (s.device_open == open || (s.exiting && !open)) return;
  for (const auto& [p, bytes] : s.allocations) protect(const_cast<char*>(p), bytes, open);
  s.device_open = open;
}

// A fault on protected device memory: says what it is, then lets the previous handler (ASan's, or
// the default) report it as the segmentation fault it is.
struct sigaction g_previous_segv;

void on_segv(int, siginfo_t* info, void*) {
  const char* a = static_cast<const char*>(info->si_addr);
  State& s = state();
  bool device = false;
  for (const auto& [p, bytes] : s.allocations) device |= a >= p && a < p + pages(bytes);
  if (device) {
    static const char msg[] =
        "CUDA emulator: the host read or wrote device memory (a pointer from cudaMalloc) outside "
        "any device work; on a GPU this is a crash. Copy it to the host (cudaMemcpy*) instead.\n";
    (void)!write(2, msg, sizeof msg - 1);
  }
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
}

// Once: the fault handler, and at exit every device page opened again (LeakSanitizer reads live
// allocations; nothing queued runs after the program's end).
void watch_host_access() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous_segv);
    std::atexit([] {
      State& s = state();
      std::lock_guard lock(s.mutex);
      set_device_open(s, true);
      s.exiting = true;
    });
    return true;
  }();
  (void)installed;
}

cudaError_t check_stream(cudaStream_t stream) {
  if (detail::stream_exists(stream)) return cudaSuccess;
  return invalid("a call names a stream that does not exist (destroyed, or never created)");
}

// Which sides of a copy are device memory: cudaMemcpyDefault's, as the pointers say.
struct Sides {
  bool dst_device = false, src_device = false;
};

cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream, Sides* sides) {
  if (check_stream(stream) != cudaSuccess) return cudaErrorInvalidValue;
  State& s = state();
  std::lock_guard lock(s.mutex);
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
      *sides = Sides{dst_device, src_device};
      return cudaSuccess;
    default:
      return invalid("a copy of an unknown kind");
  }
  *sides = Sides{want_dst, want_src};
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

void open_device_memory(bool open) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  set_device_open(s, open);
}

bool pinned_range(const void* p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return inside(s.pinned, p, bytes);
}

cudaError_t check_launch(const LaunchConfig& c, unsigned max_threads, const void* address) {
  const dim3 g = c.grid, b = c.block;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      std::size_t{b.x} * b.y * b.z > kMaxThreads || g.x == 0 || g.y == 0 || g.z == 0 ||
      g.x > 0x7FFFFFFFu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (max_threads > 0 && std::size_t{b.x} * b.y * b.z > max_threads)
    return cudaErrorLaunchOutOfResources;
  if (!stream_exists(c.stream)) return cudaErrorInvalidResourceHandle;
  State& s = state();
  std::lock_guard lock(s.mutex);
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
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(cuda_emulator::kMaxSharedBytes);
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
  cuda_emulator::watch_host_access();
  std::lock_guard lock(s.mutex);
  if (s.in_use + bytes + cuda_emulator::held_by_others() > cuda_emulator::kDeviceBytes)
    return error(cudaErrorMemoryAllocation);
  const std::size_t span = cuda_emulator::pages(bytes);
  void* p = std::aligned_alloc(cuda_emulator::kPage, span);
  if (!p) return error(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, bytes);
  // As before the pages: past cudaMalloc's 256-byte granule, a kernel's access is ASan's to report.
  const std::size_t granted = (bytes + 255) / 256 * 256;
  cuda_emulator::poison(static_cast<char*>(p) + granted, span - granted);
  s.allocations.emplace(static_cast<const char*>(p), bytes);
  s.in_use += bytes;
  if (!s.device_open) cuda_emulator::protect(p, bytes, false);
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  // cudaFree synchronises the device: queued work that uses the block runs first.
  cuda_emulator::detail::run_all_work();
  auto& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(static_cast<const char*>(ptr));
  if (it == s.allocations.end())
    return cuda_emulator::invalid("cudaFree of a pointer cudaMalloc did not return");
  cuda_emulator::protect(ptr, it->second, true);
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
  s.pinned.emplace(static_cast<const char*>(*ptr), bytes);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  cuda_emulator::detail::run_all_work();  // as cudaFree: queued copies may still use the buffer
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pinned.erase(static_cast<const char*>(ptr)))
    return cuda_emulator::invalid("cudaFreeHost of a pointer cudaMallocHost did not return");
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *total_bytes = cuda_emulator::kDeviceBytes;
  const std::size_t taken = s.in_use + cuda_emulator::held_by_others();
  *free_bytes = taken < cuda_emulator::kDeviceBytes ? cuda_emulator::kDeviceBytes - taken : 0;
  return cudaSuccess;
}

namespace {

using cuda_emulator::detail::Completion;

// Queues a copy as CUDA's documented synchronisation behaviour for it says ("API synchronization
// behavior" in the runtime API's documentation). From pageable host memory the source is read when
// the call is made (CUDA stages it); from page-locked memory, when the copy runs, so a host that
// changes the buffer before then changes what the device gets. Into pageable host memory the call
// returns only once the copy is done; into page-locked memory an asynchronous copy completes with
// its stream. `synchronous`: cudaMemcpy, which also completes before it returns when it reads
// page-locked memory or writes to the host, but not for a device-to-device copy, nor (only the
// staging is done) from pageable memory to the device.
cudaError_t queue_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream, bool synchronous) {
  cuda_emulator::Sides sides;
  if (cudaError_t e = cuda_emulator::check_copy(dst, src, bytes, kind, stream, &sides);
      e != cudaSuccess)
    return e;
  if (bytes == 0) return cudaSuccess;
  const bool src_pinned = !sides.src_device && cuda_emulator::detail::pinned_range(src, bytes);
  const bool dst_pinned = !sides.dst_device && cuda_emulator::detail::pinned_range(dst, bytes);
  Completion completion = Completion::when_synchronised;
  if (!sides.dst_device && (synchronous || !dst_pinned)) completion = Completion::before_return;
  if (synchronous && !sides.src_device && src_pinned) completion = Completion::before_return;
  cudaError_t e;
  if (!sides.src_device && !src_pinned) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    e = cuda_emulator::detail::enqueue(
        stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, completion);
  } else {
    e = cuda_emulator::detail::enqueue(
        stream, [dst, src, bytes] { std::memmove(dst, src, bytes); }, completion);
  }
  return error(e);
}

cudaError_t queue_memset(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  if (cuda_emulator::check_stream(stream) != cudaSuccess) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (!cuda_emulator::on_device(s, dst, bytes))
      return cuda_emulator::invalid("a memset names " + cuda_emulator::where(dst, bytes) +
                                    ", which is not inside one device allocation");
  }
  return error(cuda_emulator::detail::enqueue(
      stream, [dst, value, bytes] { std::memset(dst, value, bytes); }));
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return queue_copy(dst, src, bytes, kind, stream, false);
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return queue_copy(dst, src, bytes, kind, nullptr, true);
}
// A memset of device memory is asynchronous with the host even without Async (CUDA's rule).
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  return queue_memset(dst, value, bytes, stream);
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  return queue_memset(dst, value, bytes, nullptr);
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
