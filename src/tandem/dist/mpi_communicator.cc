#include "tandem/dist/mpi_communicator.h"

// The C API only (OpenMPI would also pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <exception>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/leak_check_pause.h"

namespace tandem::dist {

namespace {

// Elements per collective call: bounds rank 0's gather buffer (W x chunk) and keeps counts in int.
constexpr std::size_t kChunkElements = std::size_t{1} << 20;

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

}  // namespace

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
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  timeout_s_ = dist_timeout_from_env();
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      [this, world_rank, world_size](const char* collective, double waited) {
        if (waited < timeout_s_) return;
        // Not MPI_Abort (not safe from this thread while the main one is inside MPI): a non-zero
        // exit makes mpirun end every rank.
        fmt::print(stderr,
                   "tandem: rank {} of {}: {} made no progress for {:.0f} s "
                   "(TANDEM_DIST_TIMEOUT_S): a peer rank is hung or dead; ending the job\n",
                   world_rank, world_size, collective, waited);
        std::fflush(stderr);
        std::_Exit(1);
      });
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
    fmt::print(stderr, "tandem: rank {} of {} failed; aborting the job\n", rank_, size_);
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
    if (rank_ == 0) gathered.resize(count * static_cast<std::size_t>(size_));
    check_mpi(MPI_Gather(chunk, static_cast<int>(count), mpi_type<T>(), gathered.data(),
                         static_cast<int>(count), mpi_type<T>(), 0, comm_->comm),
              "MPI_Gather");
    if (rank_ == 0) {
      // Fixed order: ((r0 + r1) + r2) + ...
      for (std::size_t i = 0; i < count; ++i) {
        T sum = gathered[i];
        for (int r = 1; r < size_; ++r) sum += gathered[static_cast<std::size_t>(r) * count + i];
        chunk[i] = sum;
      }
    }
    check_mpi(MPI_Bcast(chunk, static_cast<int>(count), mpi_type<T>(), 0, comm_->comm),
              "MPI_Bcast");
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
      if (rank_ == owner) gathered.resize(count * static_cast<std::size_t>(size_));
      check_mpi(MPI_Gather(chunk, static_cast<int>(count), MPI_FLOAT, gathered.data(),
                           static_cast<int>(count), MPI_FLOAT, owner, comm_->comm),
                "MPI_Gather");
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
  CollectiveWatchdog::Scope guard(*watchdog_, "all_gather");
  // One broadcast per owner's range, chunked so counts fit in an int.
  for (int owner = 0; owner < size_; ++owner)
    for (std::size_t begin = offsets[owner]; begin < offsets[owner + 1]; begin += kChunkElements) {
      const std::size_t count = std::min(kChunkElements, offsets[owner + 1] - begin);
      check_mpi(MPI_Bcast(data + begin, static_cast<int>(count), MPI_FLOAT, owner, comm_->comm),
                "MPI_Bcast");
    }
}

void MpiCommunicator::all_gather_bytes(void* data, const std::size_t* offsets,
                                       std::size_t element_bytes) {
  CollectiveWatchdog::Scope guard(*watchdog_, "all_gather");
  auto* p = static_cast<char*>(data);
  const std::size_t chunk = kChunkElements * 4;  // bytes per call, as all_gather's
  for (int owner = 0; owner < size_; ++owner) {
    const std::size_t end = offsets[owner + 1] * element_bytes;
    for (std::size_t begin = offsets[owner] * element_bytes; begin < end; begin += chunk) {
      const std::size_t count = std::min(chunk, end - begin);
      check_mpi(MPI_Bcast(p + begin, static_cast<int>(count), MPI_BYTE, owner, comm_->comm),
                "MPI_Bcast");
    }
  }
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  CollectiveWatchdog::Scope guard(*watchdog_, "broadcast");
  auto* p = static_cast<char*>(data);
  for (std::size_t begin = 0; begin < bytes; begin += INT_MAX / 2) {
    const std::size_t count = std::min<std::size_t>(INT_MAX / 2, bytes - begin);
    check_mpi(MPI_Bcast(p + begin, static_cast<int>(count), MPI_BYTE, root, comm_->comm),
              "MPI_Bcast");
  }
}

void MpiCommunicator::barrier() {
  CollectiveWatchdog::Scope guard(*watchdog_, "barrier");
  check_mpi(MPI_Barrier(comm_->comm), "MPI_Barrier");
}

void MpiCommunicator::abort(const std::string& message, int code) {
  fmt::print(stderr, "tandem: rank {} of {}: {}\n", rank_, size_, message);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace tandem::dist
