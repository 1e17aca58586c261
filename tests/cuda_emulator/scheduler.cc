// Runs a kernel's grid on the CPU: the blocks spread over OpenMP's threads, the threads of a block
// as fibers on one of them. A fiber runs until it reaches a barrier (__syncthreads or a warp
// shuffle) or returns; the scheduler releases a barrier once every thread it waits for has reached
// it. The order of the blocks, and of the threads between two barriers, varies (Order), so that a
// race that happens to read the right value in one order reads garbage in the other. Fibers switch
// with a few instructions of assembly (x86-64 System V): no system call per switch, which matters
// at millions of switches per test.
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_emulator_device.h"
#include "emulator_state.h"

// Under ASan the fibers' switches are announced to it; the sanitizer build defines
// TANDEM_EMULATOR_ASAN because it compiles this file itself without instrumentation.
#if defined(__SANITIZE_ADDRESS__) && !defined(TANDEM_EMULATOR_ASAN)
#define TANDEM_EMULATOR_ASAN 1
#endif
#ifdef TANDEM_EMULATOR_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers are written for x86-64"
#endif

// cuda_emulator_switch(save, to): saves the callee-saved registers on the current stack, stores the
// stack pointer in *save and resumes the context whose stack pointer is `to`. (MXCSR and the x87
// control word are not switched: no kernel changes them, and reloading them costs more than the
// rest of the switch.) cuda_emulator_start: the first return of a new fiber lands here and calls
// r13(r12).
asm(R"(
.text
.p2align 4
.globl cuda_emulator_switch
.hidden cuda_emulator_switch
.type cuda_emulator_switch,@function
cuda_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuda_emulator_switch,.-cuda_emulator_switch
.p2align 4
.globl cuda_emulator_start
.hidden cuda_emulator_start
.type cuda_emulator_start,@function
cuda_emulator_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size cuda_emulator_start,.-cuda_emulator_start
)");

extern "C" void cuda_emulator_switch(void** save, void* to);
extern "C" void cuda_emulator_start();

namespace cuda_emulator {
namespace {

constexpr unsigned kWarp = 32;
// Kernels are shallow: 64 KiB of stack is ample even with AddressSanitizer's redzones, and small
// stacks keep a block's fibers within few pages of TLB.
constexpr std::size_t kStackBytes = 64 * 1024;
constexpr std::size_t kGuardBytes = 4096;
constexpr std::size_t kFreshTopBytes = 4096;  // fiber_main's frame and the start frame live here
constexpr std::size_t kSlotBytes = kStackBytes + kGuardBytes;

enum class Wait : unsigned char { running, warp, block, done };

struct Fiber {
  void* sp = nullptr;
  Wait wait = Wait::running;
  uint3 index{};               // threadIdx
  unsigned mask = 0;           // the shuffle's mask, while waiting at one
  int src = 0;                 // the lane whose value it reads
  std::uint64_t offered = 0;   // the value it offers
  std::uint64_t received = 0;  // the value it got
};

// The fibers' stacks: one mapping per CPU thread, a guard region below each stack, grown to the
// largest block seen.
struct StackPool {
  char* base = nullptr;
  unsigned count = 0;
  char* stack(unsigned t) { return base + std::size_t{t} * kSlotBytes + kGuardBytes; }
  // ASan keeps the shadow of unmapped memory: clear what the fibers' frames left there, so that a
  // later mapping at these addresses does not inherit it.
  void release() {
    if (!base) return;
#ifdef TANDEM_EMULATOR_ASAN
    for (unsigned t = 0; t < count; ++t) __asan_unpoison_memory_region(stack(t), kStackBytes);
#endif
    munmap(base, std::size_t{count} * kSlotBytes);
    base = nullptr;
  }
  void reserve(unsigned n) {
    if (n <= count) return;
    release();
    const std::size_t bytes = std::size_t{n} * kSlotBytes;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot map the fibers' stacks");
    base = static_cast<char*>(p);
    count = n;
    for (unsigned t = 0; t < n; ++t)
      mprotect(base + std::size_t{t} * kSlotBytes, kGuardBytes, PROT_NONE);
  }
  ~StackPool() { release(); }
};

struct BlockRun {
  const char* kernel = "";
  dim3 grid, block;
  uint3 index{};
  unsigned threads = 0;
  std::vector<Fiber> fibers;
  std::vector<unsigned char> shared;
  Body body = nullptr;
  void* frame = nullptr;
  unsigned current = 0;
  bool reverse = false;         // this block's threads run in reverse order
  bool serial_warps = false;    // its warps run one at a time between barriers
  unsigned pass_end = 0;        // a pass runs the fibers at positions before this one
  unsigned position = 0;        // the current thread's place in that order
  bool from_scheduler = false;  // the last switch came from the scheduler, not from a fiber
  void* scheduler_sp = nullptr;
  const void* scheduler_stack = nullptr;
  std::size_t scheduler_stack_bytes = 0;
};

thread_local BlockRun* t_run = nullptr;
thread_local StackPool t_stacks;

BlockRun& run() {
  if (!t_run) fail("a device function was called outside a kernel launch");
  return *t_run;
}

[[noreturn]] void fail_in_block(const BlockRun& r, const std::string& what) {
  const std::string msg = "CUDA emulator: " + what + " (kernel " + r.kernel + ", block (" +
                          std::to_string(r.index.x) + "," + std::to_string(r.index.y) + "," +
                          std::to_string(r.index.z) + ") of a grid (" + std::to_string(r.grid.x) +
                          "," + std::to_string(r.grid.y) + "," + std::to_string(r.grid.z) + "), " +
                          std::to_string(r.threads) + " threads per block)";
  fail(msg.c_str());
}

// AddressSanitizer must be told which stack is live, or it misreads the fibers' frames.
void begin_switch(void** fake, const void* bottom, std::size_t bytes) {
#ifdef TANDEM_EMULATOR_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, bytes);
#else
  (void)fake, (void)bottom, (void)bytes;
#endif
}
void end_switch(void* fake, const void** old_bottom, std::size_t* old_bytes) {
#ifdef TANDEM_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(fake, old_bottom, old_bytes);
#else
  (void)fake, (void)old_bottom, (void)old_bytes;
#endif
}

unsigned thread_at(const BlockRun& r, unsigned position) {
  return r.reverse ? r.threads - 1 - position : position;
}

// After a fiber switches in: ASan's bookkeeping, and the scheduler's stack when it came from there.
void arrived(BlockRun& r, void* fake) {
  if (r.from_scheduler)
    end_switch(fake, &r.scheduler_stack, &r.scheduler_stack_bytes);
  else
    end_switch(fake, nullptr, nullptr);
}

// Leaves the current fiber (its stack pointer saved in *save; fake is ASan's, null when the fiber
// has ended) for the next one in this pass that can run, or, when there is none, for the
// scheduler. Going from fiber to fiber directly halves the switches a pass takes.
void switch_onward(BlockRun& r, void** save, void** fake) {
  for (unsigned p = r.position + 1; p < r.pass_end; ++p) {
    const unsigned t = thread_at(r, p);
    if (r.fibers[t].wait != Wait::running) continue;
    r.current = t;
    r.position = p;
    r.from_scheduler = false;
    detail::t_current.thread = r.fibers[t].index;
    detail::t_current.lane = t % kWarp;
    begin_switch(fake, t_stacks.stack(t), kStackBytes);
    cuda_emulator_switch(save, r.fibers[t].sp);
    return;
  }
  begin_switch(fake, r.scheduler_stack, r.scheduler_stack_bytes);
  cuda_emulator_switch(save, r.scheduler_sp);
}

[[noreturn]] void fiber_main(void*) {
  BlockRun& r = *t_run;
  arrived(r, nullptr);
  r.body(r.frame);
  r.fibers[r.current].wait = Wait::done;
  void* unused;
  switch_onward(r, &unused, nullptr);
  __builtin_unreachable();
}

// Leaves a fiber at a barrier, until the scheduler releases it.
void wait_at(Wait w) {
  BlockRun& r = run();
  Fiber& f = r.fibers[r.current];
  f.wait = w;
  void* fake = nullptr;
  switch_onward(r, &f.sp, &fake);
  arrived(r, fake);
}

void start_fiber(BlockRun& r, unsigned t) {
  char* top = t_stacks.stack(t) + kStackBytes;
#ifdef TANDEM_EMULATOR_ASAN
  // The previous fiber on this stack ended inside fiber_main, which never returns, so ASan still
  // holds that frame's redzones as poisoned: clear the top of the stack.
  __asan_unpoison_memory_region(top - kFreshTopBytes, kFreshTopBytes);
#endif
  const auto aligned = (reinterpret_cast<std::uintptr_t>(top) - 64) & ~std::uintptr_t{15};
  // What cuda_emulator_switch pops: r15, r14, r13 (the entry), r12 (its argument), rbx, rbp and
  // the return address; after the return the stack pointer is 16-byte aligned, as a call needs.
  auto* sp = reinterpret_cast<std::uint64_t*>(aligned - 56);
  sp[0] = 0;
  sp[1] = 0;
  sp[2] = reinterpret_cast<std::uint64_t>(&fiber_main);
  sp[3] = 0;
  sp[4] = 0;
  sp[5] = 0;
  sp[6] = reinterpret_cast<std::uint64_t>(&cuda_emulator_start);
  r.fibers[t] = Fiber{};
  r.fibers[t].sp = sp;
  r.fibers[t].index = uint3{t % r.block.x, t / r.block.x % r.block.y, t / (r.block.x * r.block.y)};
}

// Starts a pass of the scheduler at the fiber in `position`; returns when the pass is over.
void resume(BlockRun& r, unsigned position) {
  const unsigned t = thread_at(r, position);
  r.current = t;
  r.position = position;
  r.from_scheduler = true;
  detail::t_current.thread = r.fibers[t].index;
  detail::t_current.lane = t % kWarp;
  void* fake = nullptr;
  begin_switch(&fake, t_stacks.stack(t), kStackBytes);
  cuda_emulator_switch(&r.scheduler_sp, r.fibers[t].sp);
  end_switch(fake, nullptr, nullptr);
}

// Releases the shuffles of the warp starting at thread warp0 whose every named lane has arrived;
// false when none could be released.
bool release_warp(BlockRun& r, unsigned warp0) {
  bool released = false;
  const unsigned lanes = r.threads - warp0 < kWarp ? r.threads - warp0 : kWarp;
  unsigned handled = 0;  // lanes already part of a group looked at in this pass
  for (unsigned first = 0; first < lanes; ++first) {
    const Fiber& head = r.fibers[warp0 + first];
    if (head.wait != Wait::warp || (handled >> first & 1u)) continue;
    const unsigned mask = head.mask;
    handled |= mask;
    bool ready = true;
    for (unsigned lane = 0; lane < kWarp && ready; ++lane) {
      if (!(mask >> lane & 1u)) continue;
      if (lane >= lanes)
        fail_in_block(r, "a warp shuffle's mask names lane " + std::to_string(lane) +
                             ", which the block does not have");
      const Fiber& f = r.fibers[warp0 + lane];
      if (f.wait == Wait::done)
        fail_in_block(r, "a warp shuffle's mask names lane " + std::to_string(lane) +
                             " of thread " + std::to_string(warp0 + lane) + ", which has exited");
      if (f.wait != Wait::warp)
        ready = false;
      else if (f.mask != mask)
        fail_in_block(r, "lanes of one warp shuffle with different masks");
    }
    if (!ready) continue;
    for (unsigned lane = 0; lane < kWarp; ++lane) {
      if (!(mask >> lane & 1u)) continue;
      Fiber& f = r.fibers[warp0 + lane];
      if (!(mask >> f.src & 1u))
        fail_in_block(r, "a warp shuffle reads lane " + std::to_string(f.src) +
                             ", which its mask does not name");
      f.received = r.fibers[warp0 + static_cast<unsigned>(f.src)].offered;
    }
    for (unsigned lane = 0; lane < kWarp; ++lane)
      if (mask >> lane & 1u) r.fibers[warp0 + lane].wait = Wait::running;
    released = true;
  }
  return released;
}

// Releases every warp's shuffles whose every named lane has arrived; false when none could be.
bool release_shuffles(BlockRun& r) {
  bool released = false;
  for (unsigned warp0 = 0; warp0 < r.threads; warp0 += kWarp) released |= release_warp(r, warp0);
  return released;
}

// The first position (in the block's thread order) from `begin` whose fiber can run, or `end`.
unsigned first_running(const BlockRun& r, unsigned begin, unsigned end) {
  for (unsigned p = begin; p < end; ++p)
    if (r.fibers[thread_at(r, p)].wait == Wait::running) return p;
  return end;
}

thread_local std::uint64_t t_block_serial = 0;

void run_block(BlockRun& r, bool reverse_threads, bool serial_warps, bool copies_land_at_issue) {
  for (unsigned t = 0; t < r.threads; ++t) start_fiber(r, t);
  r.reverse = reverse_threads;
  r.serial_warps = serial_warps;
  r.pass_end = r.threads;
  // Shared memory starts as garbage on a GPU; all-ones bytes read as NaN in a float.
  std::fill(r.shared.begin(), r.shared.end(), static_cast<unsigned char>(0xFF));
  detail::t_current.block = r.index;
  detail::t_current.block_dim = r.block;
  detail::t_current.grid_dim = r.grid;
  detail::t_current.shared = r.shared.empty() ? nullptr : r.shared.data();
  detail::t_current.shared_bytes = r.shared.size();
  detail::t_current.block_serial = ++t_block_serial;
  detail::t_current.copies_land_at_issue = copies_land_at_issue;
  for (;;) {
    const unsigned p = first_running(r, 0, r.threads);
    if (p < r.threads && r.serial_warps) {
      // The first warp that can run goes on alone, shuffle by shuffle, until it waits at
      // __syncthreads or ends; then the next one.
      const unsigned warp0 = thread_at(r, p) / kWarp * kWarp;
      const unsigned lanes = r.threads - warp0 < kWarp ? r.threads - warp0 : kWarp;
      // The warp's positions: its threads, in the block's order.
      const unsigned begin = r.reverse ? r.threads - warp0 - lanes : warp0;
      const unsigned end = begin + lanes;
      r.pass_end = end;
      for (unsigned q = p; q < end; q = first_running(r, begin, end)) {
        resume(r, q);
        if (!release_warp(r, warp0)) break;
      }
      r.pass_end = r.threads;
      continue;
    }
    if (p < r.threads) resume(r, p);  // runs every fiber of the pass that can run, from p on
    if (release_shuffles(r)) continue;
    unsigned alive = 0, at_barrier = 0;
    for (const Fiber& f : r.fibers) {
      alive += f.wait != Wait::done;
      at_barrier += f.wait == Wait::block;
    }
    if (alive == 0) return;
    if (at_barrier == alive) {
      for (Fiber& f : r.fibers)
        if (f.wait == Wait::block) f.wait = Wait::running;
      continue;
    }
    fail_in_block(r, "deadlock: " + std::to_string(at_barrier) +
                         " threads wait at __syncthreads, " + std::to_string(alive - at_barrier) +
                         " at a warp shuffle whose lanes never all arrive");
  }
}

Order order_from_environment() {
  const char* v = std::getenv("TANDEM_CUDA_EMULATOR_ORDER");
  const std::string name = v ? v : "mixed";
  if (name == "forward") return Order::forward;
  if (name == "reverse") return Order::reverse;
  if (name == "mixed") return Order::mixed;
  fail(("CUDA emulator: TANDEM_CUDA_EMULATOR_ORDER=" + name +
        " is not one of forward, reverse, mixed")
           .c_str());
}

std::atomic<int> g_order{-1};  // an Order, or -1 until first asked
std::atomic<std::uint64_t> g_launches{0};

}  // namespace

void set_order(Order o) { g_order.store(static_cast<int>(o)); }

Order order() {
  int o = g_order.load();
  if (o < 0) {
    int expected = -1;
    g_order.compare_exchange_strong(expected, static_cast<int>(order_from_environment()));
    o = g_order.load();
  }
  return static_cast<Order>(o);
}

void fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::fflush(stderr);
  std::abort();
}

namespace detail {
thread_local Current t_current{};
}  // namespace detail

void syncthreads() { wait_at(Wait::block); }

void warp_exchange(unsigned mask, const void* in, void* out, std::size_t bytes, int src) {
  BlockRun& r = run();
  Fiber& f = r.fibers[r.current];
  if (!(mask >> detail::t_current.lane & 1u))
    fail_in_block(r, "a lane runs a warp shuffle whose mask does not name it");
  f.offered = 0;
  std::memcpy(&f.offered, in, bytes);
  f.mask = mask;
  f.src = src;
  wait_at(Wait::warp);
  std::memcpy(out, &r.fibers[r.current].received, bytes);
}

namespace {

// Runs every block of a launch, now (the launch was queued on its stream; this is its turn).
void run_grid(const LaunchConfig& c, const char* name, Body body, void* frame) {
  const Order o = order();
  const std::uint64_t launch = g_launches.fetch_add(1);
  const bool reverse_blocks = o == Order::reverse || (o == Order::mixed && launch % 2 == 1);
  const std::int64_t blocks = std::int64_t{c.grid.x} * c.grid.y * c.grid.z;
  // Blocks are independent (a kernel whose blocks depend on each other's order is wrong on a GPU
  // too), so they run on the OpenMP threads, each with its own fibers, stacks and shared memory;
  // each thread takes one contiguous range of blocks, in the launch's order.
#pragma omp parallel if (blocks > 1)
  {
    BlockRun r;
    r.kernel = name;
    r.grid = c.grid;
    r.block = c.block;
    r.threads = c.block.x * c.block.y * c.block.z;
    r.fibers.resize(r.threads);
    r.shared.resize(c.shared);
    r.body = body;
    r.frame = frame;
    t_stacks.reserve(r.threads);
    t_run = &r;
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < blocks; ++i) {
      const auto b = static_cast<std::uint64_t>(reverse_blocks ? blocks - 1 - i : i);
      r.index =
          uint3{static_cast<unsigned>(b % c.grid.x), static_cast<unsigned>(b / c.grid.x % c.grid.y),
                static_cast<unsigned>(b / (std::uint64_t{c.grid.x} * c.grid.y))};
      const bool reverse_threads =
          o == Order::reverse || (o == Order::mixed && (b + launch) % 2 == 1);
      const bool serial_warps = o == Order::mixed && (b + launch) / 2 % 2 == 1;
      const bool copies_land_at_issue = o == Order::mixed && (b + launch) / 4 % 2 == 1;
      run_block(r, reverse_threads, serial_warps, copies_land_at_issue);
    }
    t_run = nullptr;
    detail::t_current = detail::Current{};
  }
}

}  // namespace

void run_kernel(const LaunchConfig& c, unsigned max_threads, const void* address, const char* name,
                Body body, std::shared_ptr<void> frame) {
  if (t_run)
    fail("a kernel launched from inside a kernel: the emulator has no dynamic parallelism");
  const cudaError_t refused = detail::check_launch(c, max_threads, address);
  if (refused != cudaSuccess) {
    detail::set_last_error(refused);
    return;
  }
  detail::enqueue(c.stream, [c, name, body, frame = std::move(frame)] {
    run_grid(c, name, body, frame.get());
  });
}

}  // namespace cuda_emulator
