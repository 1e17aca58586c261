// Data-parallel collectives over NCCL between processes that each drive one GPU, launched by
// mpirun (or srun) like the MPI communicator. MPI bootstraps it: rank 0 makes the NCCL unique id
// and broadcasts it through an MpiCommunicator, which this class keeps for the launch facts and
// for ending the job. Each rank uses CUDA device (local rank on its node) % (visible devices).
//
// The Communicator interface takes host pointers (the trainer computes on the CPU today): those
// calls copy the data into a device staging buffer, run the NCCL collective on this
// communicator's stream, copy the result back and wait. The *_device calls take device pointers
// and skip the copies, for a GPU backend.
//
// Determinism: for a fixed topology, world size and algorithm (NCCL_ALGO and NCCL_PROTO pin it)
// NCCL reduces in the same order every time, so a run repeats itself. That order is NCCL's ring
// or tree order, not the MPI communicator's rank order ((r0 + r1) + r2) + ..., so sums may differ
// from the CPU path in the last bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tandem/dist/collective_watchdog.h"
#include "tandem/dist/communicator.h"
#include "tandem/dist/mpi_communicator.h"

namespace tandem::dist {

class NcclCommunicator final : public Communicator {
 public:
  // Initialises MPI (if needed), picks this rank's device and builds the NCCL communicator.
  // Throws tandem::core::Error when there is no CUDA device or a CUDA/NCCL call fails.
  NcclCommunicator();
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return mpi_->rank(); }
  int world_size() const override { return mpi_->world_size(); }
  std::string name() const override { return "nccl"; }
  int device() const { return device_; }

  // Host pointers (staged through device memory).
  void all_reduce_sum(float* data, std::size_t n) override;
  void all_reduce_sum(double* data, std::size_t n) override;
  void reduce_scatter_sum(float* data, const std::size_t* offsets) override;
  void all_gather(float* data, const std::size_t* offsets) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(const std::string& message, int code) override;
  double seconds_in_collectives() const override { return watchdog_->seconds_in_collectives(); }

  // A GPU backend's gradients, in place on its device: each sum waits (on the device, through an
  // event) for the work queued on the backend's stream before it, and runs on this
  // communicator's stream beside the work queued after it; finish makes the backend's stream
  // wait for all of them and waits on the host under the watchdog.
  bool reduces_device_memory() const override { return true; }
  void start_all_reduce_sum_device(float* data, std::size_t n, void* stream) override;
  void start_reduce_scatter_sum_device(float* data, const std::size_t* offsets, std::size_t begin,
                                       std::size_t end, void* stream) override;
  void start_all_gather_device(void* data, const std::size_t* offsets, std::size_t element_bytes,
                               void* stream) override;
  // A mark is an event recorded on this communicator's stream (a pool reused after each finish).
  DeviceMark mark_device_collectives() override;
  void order_after_device_collectives(DeviceMark mark, void* stream) override;
  void finish_device_collectives(void* stream) override;

  // The shard groups and replicas of FSDP/HSDP: an MPI split of this communicator's MPI one and
  // ncclCommSplit of its NCCL one, on the same device, with a stream and watchdog of its own.
  std::unique_ptr<Communicator> split(int color, int key) override;

  // Device pointers on this rank's device, same semantics as the host calls. They return once
  // the result is in place. Each runs after the work queued on `stream` before the call and
  // before the work queued on it afterwards (events); null is the legacy default stream.
  void all_reduce_sum_device(float* data, std::size_t n, void* stream = nullptr);
  void all_reduce_sum_device(double* data, std::size_t n, void* stream = nullptr);
  void reduce_scatter_sum_device(float* data, const std::size_t* offsets, void* stream);
  void all_gather_device(float* data, const std::size_t* offsets, void* stream) override;
  void broadcast_device(void* data, std::size_t bytes, int root, void* stream = nullptr);

 private:
  struct Cuda;  // stream, NCCL communicator and staging buffer (CUDA types stay in the .cc)

  // A split's: `mpi` is its MPI communicator, `comm` (an ncclComm_t) its NCCL one.
  NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, int device, double timeout_s, void* comm,
                   std::string origin);
  void init_nccl();
  void create_stream();  // the stream, its events and the barrier word
  void use_device();
  void* staging(std::size_t bytes);  // grown on demand, kept between calls
  void copy_to_device(void* device, const void* host, std::size_t bytes);
  void copy_to_host(void* host, const void* device, std::size_t bytes);
  // The enqueue_* calls only queue work on the stream; wait_for_stream waits for it.
  // A host all-reduce through the staging buffer (float and double share it).
  void staged_all_reduce(void* data, std::size_t n, std::size_t element_bytes, int nccl_type);
  void enqueue_all_reduce(void* data, std::size_t n, int nccl_type);
  void enqueue_reduce_scatter(float* data, const std::size_t* offsets);
  // The part of [begin, end) in each rank's range [offsets[r], offsets[r + 1]) summed onto rank r.
  void enqueue_reduce_onto_owners(float* data, const std::size_t* offsets, std::size_t begin,
                                  std::size_t end);
  // Elements of `element_bytes` bytes (4: fp32, else moved as bytes).
  void enqueue_all_gather(void* data, const std::size_t* offsets, std::size_t element_bytes);
  void wait_for_stream(const char* what);
  // The watchdog watches the device collectives from the first one started until finish.
  void watch_outstanding();
  // This communicator's stream waits for the work queued on `stream` so far; then `stream` waits
  // for what this communicator's stream has queued (each through an event, not the host).
  void follow(void* stream);
  void lead(void* stream);
  // One device collective: ordered after and before `stream`'s work, waited for under the
  // watchdog.
  template <typename Enqueue>
  void on_device(const char* what, void* stream, Enqueue enqueue);
  // The watchdog's check: ends the job on a timeout or an NCCL error the main thread missed.
  void check_progress(const char* collective, double waited_s);

  std::unique_ptr<MpiCommunicator> mpi_;  // declared first: outlives the NCCL communicator
  std::unique_ptr<Cuda> cuda_;
  int device_ = -1;
  double timeout_s_ = 600.0;
  std::string origin_;  // a split's ", split from rank r of W" (its messages name that rank too)
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

// Number of CUDA devices this process can use; 0 when there are none or no usable driver, with
// CUDA's reason in *why_none when given.
int cuda_device_count(std::string* why_none = nullptr);

}  // namespace tandem::dist
