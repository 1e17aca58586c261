// The CUDA emulator's streams and events. Work queued on a stream (kernels, copies, memsets,
// cuBLASLt products, NCCL collectives) does not run when it is queued: it runs when the host
// synchronises with it (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a
// cudaStreamQuery or cudaEventQuery, a call that CUDA documents as synchronous, cudaFree), and then
// only as far as that synchronisation reaches. So each stream runs as late as CUDA allows, and a
// host read, or another stream's work, that is not ordered after the work it needs finds the
// memory as it was before: a missing synchronisation or event wait, which on a GPU is a race that
// usually goes unnoticed, changes the result here.
//
// Ordering follows CUDA's rules: a stream runs its work in queue order; cudaStreamWaitEvent orders
// a stream's later work after the event's last record; the legacy default stream (nullptr) waits
// for the earlier work of every blocking stream, and a blocking stream (cudaStreamCreate, not
// cudaStreamNonBlocking) for the legacy stream's earlier work.
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "emulator_state.h"

namespace cuda_emulator::detail {
namespace {

struct Stream;

// A point in a stream's queue: done once the stream has run every item up to id.
struct Mark {
  std::shared_ptr<Stream> stream;
  std::uint64_t id = 0;
};

struct Item {
  std::uint64_t id;
  std::vector<Mark> after;  // what must be done before this item runs
  Work work;                // empty for a marker (an event record or a wait)
};

struct Stream {
  bool blocking = true;
  std::deque<Item> queue;
  std::uint64_t last = 0;  // the id of the newest item queued
};

// An event: its last record, and for a timing event the host clock when that record ran (NaN
// until it has).
struct Event {
  Mark record;  // no stream: never recorded
  bool timing = true;
  std::shared_ptr<double> at;
};

struct Queues {
  std::recursive_mutex mutex;  // the whole device: one host thread queues or runs at a time
  std::uint64_t next = 0;      // ids grow over all streams, so `after` only points back
  std::shared_ptr<Stream> legacy = std::make_shared<Stream>();
  std::map<const void*, std::shared_ptr<Stream>> streams;
  std::map<const void*, Event> events;
};

Queues& queues() {
  static Queues q;
  return q;
}

std::shared_ptr<Stream> find(Queues& q, cudaStream_t stream) {
  if (stream == nullptr) return q.legacy;
  auto it = q.streams.find(stream);
  return it == q.streams.end() ? nullptr : it->second;
}

// Runs the stream's items up to `id`, each after what it waits for. An item's `after` names only
// earlier ids, so this ends.
// Device memory is open to the host's threads while work runs (the outermost run opens it).
int g_running = 0;
struct Running {
  Running() {
    if (g_running++ == 0) open_device_memory(true);
  }
  ~Running() {
    if (--g_running == 0) open_device_memory(false);
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

void run_to(Stream& s, std::uint64_t id) {
  if (s.queue.empty() || s.queue.front().id > id) return;
  Running running;
  while (!s.queue.empty() && s.queue.front().id <= id) {
    Item item = std::move(s.queue.front());
    s.queue.pop_front();
    for (const Mark& m : item.after) run_to(*m.stream, m.id);
    if (item.work) item.work();
  }
}

void run_to(const Mark& m) {
  if (m.stream) run_to(*m.stream, m.id);
}

std::uint64_t push(Queues& q, const std::shared_ptr<Stream>& s, std::vector<Mark> after,
                   Work work) {
  if (s == q.legacy) {
    for (const auto& [handle, other] : q.streams)
      if (other->blocking && !other->queue.empty()) after.push_back({other, other->last});
  } else if (s->blocking && !q.legacy->queue.empty()) {
    after.push_back({q.legacy, q.legacy->last});
  }
  const std::uint64_t id = ++q.next;
  s->queue.push_back(Item{id, std::move(after), std::move(work)});
  s->last = id;
  return id;
}

void run_everything(Queues& q) {
  run_to(*q.legacy, q.legacy->last);
  for (const auto& [handle, s] : q.streams) run_to(*s, s->last);
}

bool done(const Mark& m) {
  return !m.stream || m.stream->queue.empty() || m.stream->queue.front().id > m.id;
}

// A query: work still queued is reported as not ready (and run, so that a polling loop ends).
cudaError_t query(const Mark& m) {
  if (done(m)) return cudaSuccess;
  run_to(m);
  return cudaErrorNotReady;
}

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

cudaError_t enqueue(cudaStream_t stream, Work work, Completion completion) {
  Queues& q = queues();
  std::lock_guard lock(q.mutex);
  const std::shared_ptr<Stream> s = find(q, stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  const std::uint64_t id = push(q, s, {}, std::move(work));
  if (completion == Completion::before_return) run_to(*s, id);
  return cudaSuccess;
}

bool stream_exists(cudaStream_t stream) {
  Queues& q = queues();
  std::lock_guard lock(q.mutex);
  return find(q, stream) != nullptr;
}

void run_all_work() {
  Queues& q = queues();
  std::lock_guard lock(q.mutex);
  run_everything(q);
}

}  // namespace cuda_emulator::detail

using cuda_emulator::detail::Event;
using cuda_emulator::detail::find;
using cuda_emulator::detail::Mark;
using cuda_emulator::detail::queues;
using cuda_emulator::detail::set_last_error;

namespace {

cudaError_t bad_handle() {
  set_last_error(cudaErrorInvalidResourceHandle);
  return cudaErrorInvalidResourceHandle;
}

// Under the device's lock: f(stream) for a stream that exists (nullptr: the legacy stream).
template <typename F>
cudaError_t with_stream(cudaStream_t stream, F f) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  const auto s = find(q, stream);
  return s ? f(*s) : bad_handle();
}

// Under the device's lock: f(its last record) for an event that exists.
template <typename F>
cudaError_t with_event(cudaEvent_t event, F f) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto it = q.events.find(event);
  return it != q.events.end() ? f(it->second.record) : bad_handle();
}

}  // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto s = std::make_shared<cuda_emulator::detail::Stream>();
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  *stream = reinterpret_cast<cudaStream_t>(s.get());
  q.streams.emplace(*stream, std::move(s));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto it = stream != nullptr ? q.streams.find(stream) : q.streams.end();
  if (it == q.streams.end()) return bad_handle();
  // CUDA finishes a destroyed stream's queued work; events recorded on it stay valid.
  cuda_emulator::detail::run_to(*it->second, it->second->last);
  q.streams.erase(it);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return with_stream(stream, [](cuda_emulator::detail::Stream& s) {
    cuda_emulator::detail::run_to(s, s.last);
    return cudaSuccess;
  });
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  const auto s = find(q, stream);
  return s ? cuda_emulator::detail::query(Mark{s, s->last}) : bad_handle();
}
cudaError_t cudaDeviceSynchronize() {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  cuda_emulator::detail::run_everything(q);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  *event = reinterpret_cast<cudaEvent_t>(new char);
  q.events.emplace(*event, Event{Mark{}, (flags & cudaEventDisableTiming) == 0, nullptr});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  if (!q.events.erase(event)) return bad_handle();
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto it = q.events.find(event);
  const auto s = find(q, stream);
  if (it == q.events.end() || !s) return bad_handle();
  // A marker item, so that a record on the legacy stream also covers what that stream waits for;
  // a timing event's marker reads the clock when it runs (after the work queued before it).
  Event& e = it->second;
  cuda_emulator::detail::Work stamp;
  if (e.timing) {
    e.at = std::make_shared<double>(std::nan(""));
    stamp = [at = e.at] { *at = cuda_emulator::detail::host_seconds(); };
  }
  e.record = Mark{s, cuda_emulator::detail::push(q, s, {}, std::move(stamp))};
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto a = q.events.find(start), b = q.events.find(end);
  if (ms == nullptr) return cudaErrorInvalidValue;
  // CUDA's answers: an unknown, unrecorded or non-timing event is an invalid handle; a record
  // whose work has not run yet is not ready (nothing runs here).
  if (a == q.events.end() || b == q.events.end()) return bad_handle();
  const Event &x = a->second, &y = b->second;
  if (!x.timing || !y.timing || !x.record.stream || !y.record.stream) return bad_handle();
  if (!cuda_emulator::detail::done(x.record) || !cuda_emulator::detail::done(y.record))
    return cudaErrorNotReady;
  *ms = static_cast<float>(1e3 * (*y.at - *x.at));
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return with_event(event, [](const Mark& m) {
    cuda_emulator::detail::run_to(m);
    return cudaSuccess;
  });
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return with_event(event, [](const Mark& m) { return cuda_emulator::detail::query(m); });
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  auto& q = queues();
  std::lock_guard lock(q.mutex);
  auto it = q.events.find(event);
  const auto s = find(q, stream);
  if (it == q.events.end() || !s) return bad_handle();
  // The wait orders after the event's record as it is now; a later record does not move it.
  if (it->second.record.stream) cuda_emulator::detail::push(q, s, {it->second.record}, {});
  return cudaSuccess;
}
