#include "tandem/dist/nccl_communicator.h"

// The C API only (OpenMPI would also pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::dist {

namespace {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  core::fail("CUDA {} failed: {} ({})", call, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

// NCCL's last error message names the cause (a duplicate GPU, a closed socket) where the
// result code alone does not.
std::string last_nccl_error(ncclComm_t comm) {
  const char* detail = ncclGetLastError(comm);
  return detail != nullptr && *detail != '\0' ? std::string(detail) : "no detail";
}

void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm) {
  if (rc == ncclSuccess) return;
  core::fail("NCCL {} failed: {}: {}", call, ncclGetErrorString(rc), last_nccl_error(comm));
}

// This rank's index among the ranks on its node, from MPI's shared-memory split rather than a
// launcher variable: SLURM_LOCALID, for one, is stale (0 on every rank) when mpirun runs inside
// an sbatch allocation.
int node_local_rank() {
  MPI_Comm node = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  TANDEM_CHECK(rc == MPI_SUCCESS, "MPI MPI_Comm_split_type failed (error {})", rc);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

// Ranges [offsets[r], offsets[r + 1]) all of one length: NCCL's equal-block collectives fit.
bool equal_ranges(const std::size_t* offsets, int world) {
  const std::size_t chunk = offsets[1] - offsets[0];
  for (int r = 1; r < world; ++r)
    if (offsets[r + 1] - offsets[r] != chunk) return false;
  return true;
}

constexpr const char* kDeviceCollectives = "device collectives (gradient sums, unit gathers)";

// ncclCommAbort should return promptly; if it does not, end the process anyway so that the
// launcher can end the job.
void abort_nccl_or_exit(ncclComm_t comm, int code) {
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(code);
  }).detach();
  ncclCommAbort(comm);
}

}  // namespace

struct NcclCommunicator::Cuda {
  std::atomic<ncclComm_t> comm{nullptr};  // read by the watchdog thread
  cudaStream_t stream = nullptr;
  // Recorded on the backend's stream before each started sum, and on this stream by finish.
  // One of each suffices: a wait orders after the event's latest record at the time it is queued.
  cudaEvent_t backend_ready = nullptr, sums_done = nullptr;
  std::size_t started = 0;  // collectives started since the last finish
  // Marks: events recorded on `stream`, handed out in order and reused after each finish.
  std::vector<cudaEvent_t> marks;
  std::size_t marks_used = 0;
  void* staging = nullptr;
  std::size_t staging_bytes = 0;
  float* barrier_word = nullptr;
};

int cuda_device_count(std::string* why_none) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear it: the caller decides what this means
    if (why_none != nullptr)
      *why_none =
          fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc));
    return 0;
  }
  if (n == 0 && why_none != nullptr) *why_none = "cudaGetDeviceCount reports 0 devices";
  return n;
}

NcclCommunicator::NcclCommunicator() : cuda_(std::make_unique<Cuda>()) {
  std::string why;
  const int devices = cuda_device_count(&why);
  TANDEM_CHECK(devices > 0, "NCCL communicator: no usable CUDA device ({})", why);
  mpi_ = std::make_unique<MpiCommunicator>();
  timeout_s_ = dist_timeout_from_env();
  // Modulo: a launcher may give each rank its own CUDA_VISIBLE_DEVICES (one device each).
  device_ = node_local_rank() % devices;
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      [this](const char* collective, double waited) { check_progress(collective, waited); });
  try {
    init_nccl();
  } catch (...) {
    // The destructor does not run for a half-built object: release what would block exit.
    watchdog_->stop();
    if (ncclComm_t comm = cuda_->comm.exchange(nullptr)) abort_nccl_or_exit(comm, 1);
    throw;  // mpi_'s destructor then ends the job (it sees the exception in flight)
  }
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, int device,
                                   double timeout_s, void* comm, std::string origin)
    : mpi_(std::move(mpi)),
      cuda_(std::make_unique<Cuda>()),
      device_(device),
      timeout_s_(timeout_s),
      origin_(std::move(origin)) {
  cuda_->comm.store(static_cast<ncclComm_t>(comm));
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      [this](const char* collective, double waited) { check_progress(collective, waited); });
  try {
    use_device();
    create_stream();
  } catch (...) {
    // As the world constructor: the destructor does not run for a half-built object.
    watchdog_->stop();
    if (ncclComm_t c = cuda_->comm.exchange(nullptr)) abort_nccl_or_exit(c, 1);
    throw;
  }
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  // MPI first: its split is collective too, and the group's launch facts come from it.
  std::unique_ptr<Communicator> split_mpi = mpi_->split(color, key);
  std::unique_ptr<MpiCommunicator> group(static_cast<MpiCommunicator*>(split_mpi.release()));
  ncclComm_t child = nullptr;
  {
    CollectiveWatchdog::Scope guard(*watchdog_, "ncclCommSplit");
    use_device();
    const ncclComm_t parent = cuda_->comm.load();
    check_nccl(ncclCommSplit(parent, color, key, &child, nullptr), "ncclCommSplit", parent);
  }
  TANDEM_CHECK(child != nullptr, "NCCL ncclCommSplit gave rank {} no communicator (color {})",
               rank(), color);
  std::unique_ptr<NcclCommunicator> split(new NcclCommunicator(
      std::move(group), device_, timeout_s_, child,
      fmt::format(", split from rank {} of {}{}", rank(), world_size(), origin_)));
  // Ranges are indexed by the MPI group's ranks; NCCL must number the ranks the same way.
  int nccl_rank = -1;
  check_nccl(ncclCommUserRank(child, &nccl_rank), "ncclCommUserRank", child);
  TANDEM_CHECK(nccl_rank == split->rank(),
               "NCCL ncclCommSplit: rank {} of the MPI group is NCCL's rank {} (color {}, key {})",
               split->rank(), nccl_rank, color, key);
  // NCCL connects and allocates its buffers at a communicator's first collective: now, under the
  // watchdog and before the run's own device buffers take the memory, not at the first unit gather.
  split->barrier();
  return split;
}

void NcclCommunicator::init_nccl() {
  CollectiveWatchdog::Scope guard(*watchdog_, "NCCL initialisation");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id{};
  if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  mpi_->broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, world_size(), id, rank());
  if (rc != ncclSuccess) {
    core::fail(
        "NCCL ncclCommInitRank failed on rank {} of {} (CUDA device {}): {}: {} (each rank needs a "
        "GPU of its own: start at most as many ranks per node as it has GPUs)",
        rank(), world_size(), device_, ncclGetErrorString(rc), last_nccl_error(nullptr));
  }
  cuda_->comm.store(comm);
  create_stream();

  int version = 0;
  check_nccl(ncclGetVersion(&version), "ncclGetVersion", comm);
  cudaDeviceProp props{};
  check_cuda(cudaGetDeviceProperties(&props, device_), "cudaGetDeviceProperties");
  fmt::print(stderr, "tandem: rank {} of {}: NCCL {}.{}.{} on CUDA device {} ({})\n", rank(),
             world_size(), version / 10000, version / 100 % 100, version % 100, device_,
             props.name);
}

void NcclCommunicator::create_stream() {
  // A blocking stream (not cudaStreamNonBlocking): it waits for work on the legacy default
  // stream, so device buffers written there are ready for the *_device calls.
  check_cuda(cudaStreamCreate(&cuda_->stream), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&cuda_->backend_ready, cudaEventDisableTiming),
             "cudaEventCreate");
  check_cuda(cudaEventCreateWithFlags(&cuda_->sums_done, cudaEventDisableTiming),
             "cudaEventCreate");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&cuda_->barrier_word), sizeof(float)),
             "cudaMalloc");
  check_cuda(cudaMemset(cuda_->barrier_word, 0, sizeof(float)), "cudaMemset");
}

NcclCommunicator::~NcclCommunicator() {
  if (ncclComm_t comm = cuda_->comm.exchange(nullptr)) {
    if (std::uncaught_exceptions() > 0) {
      // Failing on this rank: peers may never complete an operation with it, so do not wait.
      watchdog_->stop();
      abort_nccl_or_exit(comm, 1);
    } else {
      ncclResult_t rc = ncclSuccess;
      {
        // Finalize waits for the peers: the watchdog still guards it.
        CollectiveWatchdog::Scope guard(*watchdog_, "ncclCommFinalize");
        rc = ncclCommFinalize(comm);
      }
      watchdog_->stop();
      if (rc == ncclSuccess)
        ncclCommDestroy(comm);
      else
        abort_nccl_or_exit(comm, 1);
    }
  }
  watchdog_->stop();
  // Nothing can be done about a failure to free at exit; the process is ending.
  if (cuda_->staging != nullptr) cudaFree(cuda_->staging);
  if (cuda_->barrier_word != nullptr) cudaFree(cuda_->barrier_word);
  if (cuda_->backend_ready != nullptr) cudaEventDestroy(cuda_->backend_ready);
  if (cuda_->sums_done != nullptr) cudaEventDestroy(cuda_->sums_done);
  for (cudaEvent_t mark : cuda_->marks) cudaEventDestroy(mark);
  if (cuda_->stream != nullptr) cudaStreamDestroy(cuda_->stream);
}

void NcclCommunicator::check_progress(const char* collective, double waited) {
  const ncclComm_t comm = cuda_->comm.load();
  ncclResult_t async = ncclSuccess;
  if (comm != nullptr) ncclCommGetAsyncError(comm, &async);
  std::string reason;
  // An asynchronous error is normally turned into tandem::core::Error by wait_for_stream; it is
  // acted on here only when the main thread has not done so within the grace period (blocked inside
  // an NCCL host call, say).
  constexpr double kAsyncErrorGraceS = 5.0;
  if (async != ncclSuccess && async != ncclInProgress && waited >= kAsyncErrorGraceS)
    reason = fmt::format("NCCL reported an error: {}: {}", ncclGetErrorString(async),
                         last_nccl_error(comm));
  else if (waited >= timeout_s_)
    reason = fmt::format(
        "made no progress for {:.0f} s (TANDEM_DIST_TIMEOUT_S): a peer rank is hung or dead",
        waited);
  else
    return;
  // Not MPI_Abort (not safe from this thread while the main one may be inside MPI): a non-zero
  // exit makes mpirun end every rank.
  fmt::print(stderr, "tandem: rank {} of {}{}: {} (CUDA device {}): {}; ending the job\n",
             mpi_->rank(), mpi_->world_size(), origin_, collective, device_, reason);
  std::fflush(stderr);
  if (comm != nullptr) abort_nccl_or_exit(comm, 1);
  std::_Exit(1);
}

void NcclCommunicator::use_device() { check_cuda(cudaSetDevice(device_), "cudaSetDevice"); }

void* NcclCommunicator::staging(std::size_t bytes) {
  if (bytes > cuda_->staging_bytes) {
    // The stream is idle here (every operation waits for it before returning).
    if (cuda_->staging != nullptr) check_cuda(cudaFree(cuda_->staging), "cudaFree");
    cuda_->staging = nullptr;
    cuda_->staging_bytes = 0;
    check_cuda(cudaMalloc(&cuda_->staging, bytes), "cudaMalloc");
    cuda_->staging_bytes = bytes;
  }
  return cuda_->staging;
}

void NcclCommunicator::copy_to_device(void* device, const void* host, std::size_t bytes) {
  check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, cuda_->stream),
             "cudaMemcpyAsync (host to device)");
}

void NcclCommunicator::copy_to_host(void* host, const void* device, std::size_t bytes) {
  check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, cuda_->stream),
             "cudaMemcpyAsync (device to host)");
}

void NcclCommunicator::wait_for_stream(const char* what) {
  // Polls rather than cudaStreamSynchronize so that an asynchronous NCCL error (a peer's
  // network failure, say) becomes tandem::core::Error instead of a wait that never ends.
  const ncclComm_t comm = cuda_->comm.load();
  for (;;) {
    const cudaError_t done = cudaStreamQuery(cuda_->stream);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) check_cuda(done, "cudaStreamQuery");
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError", comm);
    if (async != ncclSuccess && async != ncclInProgress)
      core::fail("NCCL {} failed on rank {} of {}: {}: {}", what, rank(), world_size(),
                 ncclGetErrorString(async), last_nccl_error(comm));
    std::this_thread::yield();
  }
}

void NcclCommunicator::enqueue_all_reduce(void* data, std::size_t n, int nccl_type) {
  const ncclComm_t comm = cuda_->comm.load();
  check_nccl(ncclAllReduce(data, data, n, static_cast<ncclDataType_t>(nccl_type), ncclSum, comm,
                           cuda_->stream),
             "ncclAllReduce", comm);
}

void NcclCommunicator::enqueue_reduce_scatter(float* data, const std::size_t* offsets) {
  const ncclComm_t comm = cuda_->comm.load();
  const int world = world_size();
  if (equal_ranges(offsets, world)) {
    const std::size_t chunk = offsets[1] - offsets[0];
    if (chunk == 0) return;
    // In place: NCCL's output block for rank r is input + r * chunk, which is data + offsets[r].
    check_nccl(ncclReduceScatter(data + offsets[0], data + offsets[rank()], chunk, ncclFloat32,
                                 ncclSum, comm, cuda_->stream),
               "ncclReduceScatter", comm);
    return;
  }
  // Uneven ranges (offsets are n * r / W): ncclReduceScatter needs equal blocks. Rather than
  // padding into a second buffer (W x the longest range, two extra device copies), each range is
  // reduced onto its owner.
  enqueue_reduce_onto_owners(data, offsets, offsets[0], offsets[world]);
}

void NcclCommunicator::enqueue_reduce_onto_owners(float* data, const std::size_t* offsets,
                                                  std::size_t begin, std::size_t end) {
  // Each owner's part of [begin, end) reduced onto it with ncclReduce, in place; the parts are
  // disjoint, so one group launches them together. Non-owners' copies are left as they were,
  // which the interface allows.
  const ncclComm_t comm = cuda_->comm.load();
  check_nccl(ncclGroupStart(), "ncclGroupStart", comm);
  for (int owner = 0; owner < world_size(); ++owner) {
    const std::size_t lo = std::max(begin, offsets[owner]), hi = std::min(end, offsets[owner + 1]);
    if (lo >= hi) continue;
    check_nccl(
        ncclReduce(data + lo, data + lo, hi - lo, ncclFloat32, ncclSum, owner, comm, cuda_->stream),
        "ncclReduce", comm);
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm);
}

void NcclCommunicator::enqueue_all_gather(void* data, const std::size_t* offsets,
                                          std::size_t element_bytes) {
  const ncclComm_t comm = cuda_->comm.load();
  const int world = world_size();
  // Nothing is summed: other widths (bf16 weights) move as bytes.
  const bool fp32 = element_bytes == sizeof(float);
  const ncclDataType_t type = fp32 ? ncclFloat32 : ncclUint8;
  const std::size_t scale = fp32 ? 1 : element_bytes;
  char* base = static_cast<char*>(data);
  auto at = [&](std::size_t element) { return base + element * element_bytes; };
  if (equal_ranges(offsets, world)) {
    const std::size_t chunk = offsets[1] - offsets[0];
    if (chunk == 0) return;
    // In place: this rank's input sits at output + rank * chunk, which is data + offsets[rank].
    check_nccl(ncclAllGather(at(offsets[rank()]), at(offsets[0]), chunk * scale, type, comm,
                             cuda_->stream),
               "ncclAllGather", comm);
    return;
  }
  // Uneven ranges: ncclAllGather needs equal blocks, so each owner broadcasts its range (in
  // place); the ranges are disjoint, so one group launches them together.
  check_nccl(ncclGroupStart(), "ncclGroupStart", comm);
  for (int owner = 0; owner < world; ++owner) {
    const std::size_t count = offsets[owner + 1] - offsets[owner];
    if (count == 0) continue;
    char* range = at(offsets[owner]);
    check_nccl(ncclBroadcast(range, range, count * scale, type, owner, comm, cuda_->stream),
               "ncclBroadcast", comm);
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm);
}

// --- host pointers: staged through the device buffer ---

void NcclCommunicator::staged_all_reduce(void* data, std::size_t n, std::size_t element_bytes,
                                         int nccl_type) {
  if (n == 0) return;
  CollectiveWatchdog::Scope guard(*watchdog_, "all_reduce_sum");
  use_device();
  void* d = staging(n * element_bytes);
  copy_to_device(d, data, n * element_bytes);
  enqueue_all_reduce(d, n, nccl_type);
  copy_to_host(data, d, n * element_bytes);
  wait_for_stream("all_reduce_sum");
}

void NcclCommunicator::all_reduce_sum(float* data, std::size_t n) {
  staged_all_reduce(data, n, sizeof(float), ncclFloat32);
}

void NcclCommunicator::all_reduce_sum(double* data, std::size_t n) {
  staged_all_reduce(data, n, sizeof(double), ncclFloat64);
}

void NcclCommunicator::reduce_scatter_sum(float* data, const std::size_t* offsets) {
  const int world = world_size(), me = rank();
  const std::size_t total = offsets[world] - offsets[0];
  if (total == 0) return;
  CollectiveWatchdog::Scope guard(*watchdog_, "reduce_scatter_sum");
  use_device();
  // The staged copy starts at offsets[0]: shift the offsets to it.
  std::vector<std::size_t> local(static_cast<std::size_t>(world) + 1);
  for (int r = 0; r <= world; ++r) local[r] = offsets[r] - offsets[0];
  auto* d = static_cast<float*>(staging(total * sizeof(float)));
  copy_to_device(d, data + offsets[0], total * sizeof(float));
  enqueue_reduce_scatter(d, local.data());
  const std::size_t mine = local[me + 1] - local[me];
  if (mine > 0) copy_to_host(data + offsets[me], d + local[me], mine * sizeof(float));
  wait_for_stream("reduce_scatter_sum");
}

void NcclCommunicator::all_gather(float* data, const std::size_t* offsets) {
  const int world = world_size(), me = rank();
  const std::size_t total = offsets[world] - offsets[0];
  if (total == 0) return;
  CollectiveWatchdog::Scope guard(*watchdog_, "all_gather");
  use_device();
  std::vector<std::size_t> local(static_cast<std::size_t>(world) + 1);
  for (int r = 0; r <= world; ++r) local[r] = offsets[r] - offsets[0];
  auto* d = static_cast<float*>(staging(total * sizeof(float)));
  const std::size_t mine = local[me + 1] - local[me];
  if (mine > 0) copy_to_device(d + local[me], data + offsets[me], mine * sizeof(float));
  enqueue_all_gather(d, local.data(), sizeof(float));
  copy_to_host(data + offsets[0], d, total * sizeof(float));
  wait_for_stream("all_gather");
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  if (bytes == 0) return;
  CollectiveWatchdog::Scope guard(*watchdog_, "broadcast");
  use_device();
  void* d = staging(bytes);
  if (rank() == root) copy_to_device(d, data, bytes);
  const ncclComm_t comm = cuda_->comm.load();
  check_nccl(ncclBroadcast(d, d, bytes, ncclUint8, root, comm, cuda_->stream), "ncclBroadcast",
             comm);
  if (rank() != root) copy_to_host(data, d, bytes);
  wait_for_stream("broadcast");
}

void NcclCommunicator::barrier() {
  // A one-element all-reduce completes on a rank only once every rank has joined it.
  CollectiveWatchdog::Scope guard(*watchdog_, "barrier");
  use_device();
  enqueue_all_reduce(cuda_->barrier_word, 1, ncclFloat32);
  wait_for_stream("barrier");
}

// --- a device backend's buffers, overlapped with its work ---

void NcclCommunicator::follow(void* stream) {
  check_cuda(cudaEventRecord(cuda_->backend_ready, static_cast<cudaStream_t>(stream)),
             "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(cuda_->stream, cuda_->backend_ready, 0), "cudaStreamWaitEvent");
}

void NcclCommunicator::lead(void* stream) {
  check_cuda(cudaEventRecord(cuda_->sums_done, cuda_->stream), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), cuda_->sums_done, 0),
             "cudaStreamWaitEvent");
}

void NcclCommunicator::start_all_reduce_sum_device(float* data, std::size_t n, void* stream) {
  if (n == 0) return;
  use_device();
  watch_outstanding();
  follow(stream);
  enqueue_all_reduce(data, n, ncclFloat32);
  ++cuda_->started;
}

void NcclCommunicator::start_reduce_scatter_sum_device(float* data, const std::size_t* offsets,
                                                       std::size_t begin, std::size_t end,
                                                       void* stream) {
  if (begin >= end) return;
  use_device();
  watch_outstanding();
  follow(stream);
  if (begin <= offsets[0] && end >= offsets[world_size()])
    enqueue_reduce_scatter(data, offsets);  // every range at once (FSDP's units): one collective
  else
    enqueue_reduce_onto_owners(data, offsets, begin, end);  // a bucket of a reduce-scatter
  ++cuda_->started;
}

void NcclCommunicator::start_all_gather_device(void* data, const std::size_t* offsets,
                                               std::size_t element_bytes, void* stream) {
  if (offsets[world_size()] == offsets[0]) return;
  use_device();
  watch_outstanding();
  follow(stream);
  enqueue_all_gather(data, offsets, element_bytes);
  ++cuda_->started;
}

Communicator::DeviceMark NcclCommunicator::mark_device_collectives() {
  use_device();
  if (cuda_->marks_used == cuda_->marks.size()) {
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    cuda_->marks.push_back(event);
  }
  check_cuda(cudaEventRecord(cuda_->marks[cuda_->marks_used], cuda_->stream), "cudaEventRecord");
  return ++cuda_->marks_used;  // 1-based: a default DeviceMark{} names none
}

void NcclCommunicator::order_after_device_collectives(DeviceMark mark, void* stream) {
  TANDEM_CHECK(mark >= 1 && mark <= cuda_->marks_used,
               "NCCL: device mark {} is not one of the {} made since the last finish", mark,
               cuda_->marks_used);
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), cuda_->marks[mark - 1], 0),
             "cudaStreamWaitEvent");
}

void NcclCommunicator::watch_outstanding() {
  // From the first one queued (the first on a new communicator may wait for its peers to
  // connect inside the call) until finish: the backend's stream may be ordered after them, so the
  // host may wait for them in any synchronisation of that stream.
  if (cuda_->started == 0) watchdog_->begin_outstanding(kDeviceCollectives);
}

void NcclCommunicator::finish_device_collectives(void* stream) {
  // Marks are handed out again from here: every wait on them is queued already.
  cuda_->marks_used = 0;
  if (cuda_->started == 0) return;
  {
    CollectiveWatchdog::Scope guard(*watchdog_, kDeviceCollectives);
    use_device();
    lead(stream);
    cuda_->started = 0;
    wait_for_stream(kDeviceCollectives);
  }
  watchdog_->end_outstanding();
}

// --- device pointers ---

template <typename Enqueue>
void NcclCommunicator::on_device(const char* what, void* stream, Enqueue enqueue) {
  CollectiveWatchdog::Scope guard(*watchdog_, what);
  use_device();
  follow(stream);
  enqueue();
  lead(stream);
  wait_for_stream(what);
}

void NcclCommunicator::all_reduce_sum_device(float* data, std::size_t n, void* stream) {
  if (n == 0) return;
  on_device("all_reduce_sum", stream, [&] { enqueue_all_reduce(data, n, ncclFloat32); });
}

void NcclCommunicator::all_reduce_sum_device(double* data, std::size_t n, void* stream) {
  if (n == 0) return;
  on_device("all_reduce_sum", stream, [&] { enqueue_all_reduce(data, n, ncclFloat64); });
}

void NcclCommunicator::reduce_scatter_sum_device(float* data, const std::size_t* offsets,
                                                 void* stream) {
  on_device("reduce_scatter_sum", stream, [&] { enqueue_reduce_scatter(data, offsets); });
}

void NcclCommunicator::all_gather_device(float* data, const std::size_t* offsets, void* stream) {
  on_device("all_gather", stream, [&] { enqueue_all_gather(data, offsets, sizeof(float)); });
}

void NcclCommunicator::broadcast_device(void* data, std::size_t bytes, int root, void* stream) {
  if (bytes == 0) return;
  on_device("broadcast", stream, [&] {
    const ncclComm_t comm = cuda_->comm.load();
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm, cuda_->stream),
               "ncclBroadcast", comm);
  });
}

void NcclCommunicator::abort(const std::string& message, int code) {
  watchdog_->stop();
  if (ncclComm_t comm = cuda_->comm.exchange(nullptr)) abort_nccl_or_exit(comm, code);
  mpi_->abort(message, code);
}

}  // namespace tandem::dist
