#include "tandem/dist/mpi_communicator.h"

// The C API only (OpenMPI would also pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/leak_check_pause.h"
#include "tandem/core/stop_signal.h"

namespace tandem::dist {

namespace {

// Elements per collective call: bounds rank 0's gather buffer (W x chunk) and keeps counts in int.
constexpr std::size_t kChunkElements = std::size_t{1} << 20;
// Point-to-point tag of the gathers (collectives use their own context, so no clash with them).
constexpr int kGatherTag = 7301;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  core::fail("MPI {} failed: {}", what, std::string(text, static_cast<std::size_t>(len)));
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

// MPI_Bcast, telling the watchdog whom this rank waits for: the root, or (on the root) the others.
void watched_bcast(CollectiveWatchdog& watchdog, MPI_Comm comm, int rank, void* data,
                   std::size_t count, MPI_Datatype type, int root) {
  watchdog.await_rank(rank == root ? CollectiveWatchdog::kAwaitingAny : root);
  check_mpi(MPI_Bcast(data, static_cast<int>(count), type, root, comm), "MPI_Bcast");
}

// Every rank's processor name (its host), by rank of `comm`.
std::vector<std::string> gather_host_names(MPI_Comm comm, int size) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  check_mpi(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  check_mpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
            "MPI_Allgather");
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const char* p = all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts.emplace_back(p, strnlen(p, MPI_MAX_PROCESSOR_NAME));
  }
  return hosts;
}

// The MPI_COMM_WORLD rank of each rank of `comm`.
std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<std::size_t>(size)), out(ranks.size());
  for (int r = 0; r < size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

}  // namespace

std::string describe_placement(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  for (const auto& h : hosts)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  std::string out;
  for (const auto& h : order) {
    std::vector<int> ranks;
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r)
      if (hosts[static_cast<std::size_t>(r)] == h) ranks.push_back(r);
    std::string list;
    for (std::size_t i = 0; i < ranks.size();) {
      std::size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      if (!list.empty()) list += ",";
      list += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
      i = j + 1;
    }
    if (!out.empty()) out += "; ";
    out += fmt::format("{}: rank{} {}", h, ranks.size() == 1 ? "" : "s", list);
  }
  return out;
}

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_WORLD;
};

bool launched_under_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

MpiCommunicator::MpiCommunicator() : comm_(std::make_unique<Handle>()) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    core::LeakCheckPause pause;  // OpenMPI keeps what it allocates here until exit
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
  } else {
    MPI_Query_thread(&provided);
  }
  thread_level_ok_ = provided >= MPI_THREAD_SERIALIZED;
  // Errors come back as codes (then tandem::core::Error) instead of MPI's default silent abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  start_watchdog();
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle, bool thread_level_ok)
    : comm_(std::move(handle)), world_(false), thread_level_ok_(thread_level_ok) {
  MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN);
  start_watchdog();
}

void MpiCommunicator::start_watchdog() {
  MPI_Comm_rank(comm_->comm, &rank_);
  MPI_Comm_size(comm_->comm, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  timeout_s_ = dist_timeout_from_env();
  hosts_ = gather_host_names(comm_->comm, size_);
  world_ranks_ = world_ranks_of(comm_->comm, size_);
  if (world_ && rank_ == 0 &&
      std::any_of(hosts_.begin(), hosts_.end(), [&](const auto& h) { return h != hosts_[0]; })) {
    fmt::print(stderr, "tandem: {} ranks on several hosts: {}\n", size_,
               describe_placement(hosts_));
    std::fflush(stderr);
  }
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      [this](const char* collective, double waited) { check_progress(collective, waited); });
}

std::string MpiCommunicator::describe_awaited(int awaited) const {
  if (awaited == CollectiveWatchdog::kAwaitingAny && size_ == 2) awaited = 1 - rank_;
  if (awaited < 0 || awaited >= size_) return "the other ranks";
  const auto a = static_cast<std::size_t>(awaited);
  return fmt::format("rank {} on host {}", world_ranks_[a], hosts_[a]);
}

// On the watchdog thread. After a quarter of the timeout, one notice per collective naming the
// rank it waits for (the rank that is lost, hung or slow: on a network partition this may be the
// only message that gets out before the launcher ends the job); after the timeout, the end.
void MpiCommunicator::check_progress(const char* collective, double waited) {
  const std::string awaited = describe_awaited(watchdog_->awaited_rank());
  const std::string& host = hosts_[static_cast<std::size_t>(rank_)];
  if (waited >= timeout_s_) {
    // Not MPI_Abort (not safe from this thread while the main one is inside MPI): a non-zero
    // exit makes mpirun end every rank.
    fmt::print(stderr,
               "tandem: rank {} of {}: {} made no progress for {:.0f} s "
               "(TANDEM_DIST_TIMEOUT_S), waiting for {}: a peer rank is hung, dead or "
               "unreachable; ending the job\n",
               world_rank_, world_size_, collective, waited, awaited);
    std::fflush(stderr);
    std::_Exit(1);
  }
  const std::int64_t id = watchdog_->collective_id();
  // A stop signal while this collective stays stuck (seen on two checks in a row, so not a
  // healthy stop that finishes its collective): likely the launcher ending the job because a
  // peer is lost; say whom this rank waited for before it is killed.
  if (const int signal = core::stop_signal_received(); signal != 0 && !reported_signal_) {
    if (signalled_collective_ == id) {
      reported_signal_ = true;
      fmt::print(stderr,
                 "tandem: rank {} of {} on host {}: signal {} while {} waited {:.1f} s for {}\n",
                 world_rank_, world_size_, host, signal, collective, waited, awaited);
      std::fflush(stderr);
    }
    signalled_collective_ = id;
  }
  if (waited >= timeout_s_ / 4 && id != noticed_collective_) {
    noticed_collective_ = id;
    fmt::print(stderr,
               "tandem: rank {} of {} on host {}: {} has waited {:.0f} s for {} (the job ends "
               "after TANDEM_DIST_TIMEOUT_S={:g} s without progress)\n",
               world_rank_, world_size_, host, collective, waited, awaited, timeout_s_);
    std::fflush(stderr);
  }
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  auto handle = std::make_unique<Handle>();
  {
    CollectiveWatchdog::Scope guard(*watchdog_, "split");
    check_mpi(MPI_Comm_split(comm_->comm, color, key, &handle->comm), "MPI_Comm_split");
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(handle), thread_level_ok_));
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_->stop();
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  if (!world_) {
    // A split: freed on a clean exit; when unwinding, the world communicator aborts the job.
    if (std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_->comm);
    return;
  }
  // Unwinding from an error on this rank: the others may wait in a collective forever, so end
  // the whole job rather than finalise.
  if (std::uncaught_exceptions() > 0) {
    fmt::print(stderr, "tandem: rank {} of {} failed; aborting the job\n", world_rank_,
               world_size_);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  core::LeakCheckPause pause;
  MPI_Finalize();
}

template <typename T>
void MpiCommunicator::ordered_all_reduce(T* data, std::size_t n) {
  CollectiveWatchdog::Scope guard(*watchdog_, "all_reduce_sum");
  std::vector<T> gathered;
  for (std::size_t begin = 0; begin < n; begin += kChunkElements) {
    const std::size_t count = std::min(kChunkElements, n - begin);
    T* chunk = data + begin;
    gather_to(0, chunk, count, gathered);
    if (rank_ == 0) {
      // Fixed order: ((r0 + r1) + r2) + ...
      for (std::size_t i = 0; i < count; ++i) {
        T sum = gathered[i];
        for (int r = 1; r < size_; ++r) sum += gathered[static_cast<std::size_t>(r) * count + i];
        chunk[i] = sum;
      }
    }
    watched_bcast(*watchdog_, comm_->comm, rank_, chunk, count, mpi_type<T>(), 0);
  }
}

template <typename T>
void MpiCommunicator::gather_to(int root, const T* chunk, std::size_t count,
                                std::vector<T>& gathered) {
  const int n = static_cast<int>(count);
  if (rank_ != root) {
    watchdog_->await_rank(root);
    check_mpi(MPI_Send(chunk, n, mpi_type<T>(), root, kGatherTag, comm_->comm), "MPI_Send");
    return;
  }
  // Receives from every rank at once, then waits for them in rank order, so that the watchdog
  // names the first rank whose contribution has not arrived.
  gathered.resize(count * static_cast<std::size_t>(size_));
  std::copy(chunk, chunk + count, gathered.begin() + static_cast<std::ptrdiff_t>(root * count));
  std::vector<MPI_Request> requests(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r)
    if (r != root)
      check_mpi(MPI_Irecv(gathered.data() + static_cast<std::size_t>(r) * count, n, mpi_type<T>(),
                          r, kGatherTag, comm_->comm, &requests[static_cast<std::size_t>(r)]),
                "MPI_Irecv");
  for (int r = 0; r < size_; ++r) {
    if (r == root) continue;
    watchdog_->await_rank(r);
    check_mpi(MPI_Wait(&requests[static_cast<std::size_t>(r)], MPI_STATUS_IGNORE), "MPI_Wait");
  }
}

void MpiCommunicator::all_reduce_sum(float* data, std::size_t n) { ordered_all_reduce(data, n); }
void MpiCommunicator::all_reduce_sum(double* data, std::size_t n) { ordered_all_reduce(data, n); }

void MpiCommunicator::reduce_scatter_sum(float* data, const std::size_t* offsets) {
  CollectiveWatchdog::Scope guard(*watchdog_, "reduce_scatter_sum");
  // Each range is reduced in the same rank order as all_reduce_sum (so a sharded optimiser sees
  // exactly the gradients a replicated one would); rank r keeps range r.
  std::vector<float> gathered;
  for (int owner = 0; owner < size_; ++owner) {
    for (std::size_t begin = offsets[owner]; begin < offsets[owner + 1]; begin += kChunkElements) {
      const std::size_t count = std::min(kChunkElements, offsets[owner + 1] - begin);
      float* chunk = data + begin;
      gather_to(owner, chunk, count, gathered);
      if (rank_ != owner) continue;
      for (std::size_t i = 0; i < count; ++i) {
        float sum = gathered[i];
        for (int r = 1; r < size_; ++r) sum += gathered[static_cast<std::size_t>(r) * count + i];
        chunk[i] = sum;
      }
    }
  }
}

void MpiCommunicator::all_gather(float* data, const std::size_t* offsets) {
  all_gather_bytes(data, offsets, sizeof(float));
}

void MpiCommunicator::all_gather_bytes(void* data, const std::size_t* offsets,
                                       std::size_t element_bytes) {
  CollectiveWatchdog::Scope guard(*watchdog_, "all_gather");
  // One broadcast per owner's range, chunked so counts fit in an int.
  auto* p = static_cast<char*>(data);
  const std::size_t chunk = kChunkElements * sizeof(float);
  for (int owner = 0; owner < size_; ++owner) {
    const std::size_t end = offsets[owner + 1] * element_bytes;
    for (std::size_t begin = offsets[owner] * element_bytes; begin < end; begin += chunk) {
      const std::size_t count = std::min(chunk, end - begin);
      watched_bcast(*watchdog_, comm_->comm, rank_, p + begin, count, MPI_BYTE, owner);
    }
  }
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  CollectiveWatchdog::Scope guard(*watchdog_, "broadcast");
  auto* p = static_cast<char*>(data);
  for (std::size_t begin = 0; begin < bytes; begin += INT_MAX / 2) {
    const std::size_t count = std::min<std::size_t>(INT_MAX / 2, bytes - begin);
    watched_bcast(*watchdog_, comm_->comm, rank_, p + begin, count, MPI_BYTE, root);
  }
}

void MpiCommunicator::barrier() {
  CollectiveWatchdog::Scope guard(*watchdog_, "barrier");
  check_mpi(MPI_Barrier(comm_->comm), "MPI_Barrier");
}

void MpiCommunicator::abort(const std::string& message, int code) {
  fmt::print(stderr, "tandem: rank {} of {}: {}\n", world_rank_, world_size_, message);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace tandem::dist
