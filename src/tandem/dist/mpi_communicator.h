// Data-parallel collectives over MPI (OpenMPI) between CPU processes launched by mpirun.
// Reductions are deterministic: every rank's contribution is gathered to rank 0, summed in rank
// order (0, 1, ..., W-1) and broadcast, so the result never depends on timing or on the MPI
// library's reduction algorithm. This costs bandwidth, which is fine at CPU model sizes.
// Each rank knows every rank's host (MPI's processor name), and the gathers are point-to-point
// receives taken in rank order, so a collective that waits too long names the rank and host it
// waits for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/dist/collective_watchdog.h"
#include "tandem/dist/communicator.h"

namespace tandem::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (once per process, asking for MPI_THREAD_SERIALIZED so that FSDP's prefetch
  // thread may run collectives) over MPI_COMM_WORLD. Finalised by the destructor on a clean exit.
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce_sum(float* data, std::size_t n) override;
  void all_reduce_sum(double* data, std::size_t n) override;
  void reduce_scatter_sum(float* data, const std::size_t* offsets) override;
  void all_gather(float* data, const std::size_t* offsets) override;
  void all_gather_bytes(void* data, const std::size_t* offsets, std::size_t element_bytes) override;
  // MPI_Comm_split of this communicator; the result frees its MPI communicator when destroyed.
  std::unique_ptr<Communicator> split(int color, int key) override;
  bool allows_communication_thread() const override { return thread_level_ok_; }
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(const std::string& message, int code) override;
  double seconds_in_collectives() const override { return watchdog_->seconds_in_collectives(); }

 private:
  struct Handle;  // the MPI_Comm (mpi.h stays out of this header)
  MpiCommunicator(std::unique_ptr<Handle> handle, bool thread_level_ok);
  template <typename T>
  void ordered_all_reduce(T* data, std::size_t n);
  // Gathers every rank's `count` elements at `chunk` into `gathered` on `root` (rank-major);
  // the other ranks only send.
  template <typename T>
  void gather_to(int root, const T* chunk, std::size_t count, std::vector<T>& gathered);
  void start_watchdog();
  // "rank R on host H" (R in MPI_COMM_WORLD) for the rank of this communicator that the current
  // collective waits for, or "the other ranks".
  std::string describe_awaited(int awaited) const;
  void check_progress(const char* collective, double waited);

  std::unique_ptr<Handle> comm_;
  bool world_ = true;  // owns MPI's initialisation (false: a split of it)
  bool thread_level_ok_ = false;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_ = 600.0;
  int world_rank_ = 0, world_size_ = 1;    // in MPI_COMM_WORLD, for messages
  std::vector<int> world_ranks_;           // by rank of this communicator
  std::vector<std::string> hosts_;         // by rank of this communicator
  std::int64_t noticed_collective_ = 0;    // watchdog thread only
  std::int64_t signalled_collective_ = 0;  // watchdog thread only
  bool reported_signal_ = false;           // watchdog thread only
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

// Where the ranks run, from each rank's host name: "h0: ranks 0-3; h1: ranks 4-7" (hosts in the
// order of their first rank, consecutive ranks as ranges). Rank 0 prints it when there are several.
std::string describe_placement(const std::vector<std::string>& hosts_by_rank);

// True when this process was started by an MPI launcher (OpenMPI's mpirun, or a PMI/PMIx one
// such as Slurm's srun).
bool launched_under_mpi();

}  // namespace tandem::dist
