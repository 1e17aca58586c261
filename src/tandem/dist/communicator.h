// Collective communication between data-parallel ranks. The trainer only talks to this
// interface; implementations: a single process (no-op collectives), MPI (dist/mpi_*.cc: every
// reduction in a fixed rank order, so results do not depend on timing) and, when built with
// CUDA and NCCL, NCCL (dist/nccl_*.cc: NCCL's fixed ring/tree order, see its header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tandem::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;  // "single", "mpi"

  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  virtual void all_reduce_sum(double* data, std::size_t n) = 0;
  // Each rank ends with the sum over ranks of elements [offsets[rank], offsets[rank + 1]) of
  // `data` written into that range of `data` (the rest of `data` is left unspecified).
  virtual void reduce_scatter_sum(float* data, const std::size_t* offsets) = 0;
  // Each rank contributes its range [offsets[rank], offsets[rank + 1]) of `data`; all end with all.
  virtual void all_gather(float* data, const std::size_t* offsets) = 0;
  // The same for elements of `element_bytes` bytes each (FSDP gathers bf16 compute weights).
  // Default: refused, naming the communicator.
  virtual void all_gather_bytes(void* data, const std::size_t* offsets, std::size_t element_bytes);
  // A communicator over the ranks that pass the same `color`, ordered by `key` (MPI_Comm_split;
  // collective over this communicator). FSDP/HSDP use one for the shard group and one for the
  // replicas. Default: refused, naming the communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key);
  // Whether a second thread may run this communicator's collectives while the calling thread
  // makes no calls into it (FSDP's prefetch thread; MPI_THREAD_SERIALIZED for MPI).
  virtual bool allows_communication_thread() const { return false; }
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // Sums over device memory, ordered with a device backend's work (NCCL): gradients are reduced
  // where they are, while the backward goes on. `stream` is the backend's device_stream().
  virtual bool reduces_device_memory() const { return false; }
  // Queues the in-place sum of data[0, n) (device memory) behind the work queued on `stream` so
  // far and returns at once; every rank starts the same sums in the same order. Default: refused.
  virtual void start_all_reduce_sum_device(float* data, std::size_t n, void* stream);
  // ZeRO-1's form of the same: queues the sum over ranks of elements [begin, end) of `data` onto
  // their owners only (the part inside [offsets[r], offsets[r + 1]) onto rank r, in place; the
  // other ranks' copies are left unspecified) and returns at once. Default: refused.
  virtual void start_reduce_scatter_sum_device(float* data, const std::size_t* offsets,
                                               std::size_t begin, std::size_t end, void* stream);
  // FSDP's unit gathers: queues the all-gather of `data`'s ranges (elements of `element_bytes`
  // bytes; rank r contributes [offsets[r], offsets[r + 1])) behind the work queued on `stream` so
  // far and returns at once. Default: refused.
  virtual void start_all_gather_device(void* data, const std::size_t* offsets,
                                       std::size_t element_bytes, void* stream);
  // A point after every device collective started so far (they run in the order started). Work
  // queued on `stream` after order_after_device_collectives(mark, stream) runs after them, while
  // the host goes on; the collectives started after the mark are not waited for. A mark is valid
  // until the next finish_device_collectives. Default: refused.
  using DeviceMark = std::uint64_t;
  virtual DeviceMark mark_device_collectives();
  virtual void order_after_device_collectives(DeviceMark mark, void* stream);
  // Work queued on `stream` from now on runs after every started collective; returns once they
  // are done (a peer that never joins is caught by the communicator's timeout). Default: refused.
  virtual void finish_device_collectives(void* stream);
  // all_gather on device memory (ZeRO-1's updated parameters on a GPU backend): after the work
  // queued on `stream` so far, before the work queued on it afterwards; returns once done.
  // Default: refused.
  virtual void all_gather_device(float* data, const std::size_t* offsets, void* stream);
  // Wall seconds this process has spent inside collectives (for the communication share).
  virtual double seconds_in_collectives() const { return 0.0; }
  // Ends the whole job (all ranks) with a message, e.g. when one rank fails.
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
};

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce_sum(float*, std::size_t) override {}
  void all_reduce_sum(double*, std::size_t) override {}
  void reduce_scatter_sum(float*, const std::size_t*) override {}
  void all_gather(float*, const std::size_t*) override {}
  void all_gather_bytes(void*, const std::size_t*, std::size_t) override {}
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SingleProcessCommunicator>();
  }
  bool allows_communication_thread() const override { return true; }
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message, int code) override;
};

// TANDEM_COMMUNICATOR=nccl|mpi|single forces one (a clear error if it cannot be had); unset:
// MPI when the process was launched by mpirun or srun, else single.
std::unique_ptr<Communicator> make_communicator();

}  // namespace tandem::dist
