// Data-parallel gradient reduction for a GPU backend, bucketed and overlapped with the backward
// (what PyTorch DDP's reducer does): the flat gradient buffer is cut into buckets of whole units
// (model/sharded_parameters.h) in the backward's order, and as soon as the step's last backward
// has completed a bucket's units, its in-place all-reduce starts on the communicator's stream
// (NCCL on device pointers), while the backend's stream goes on with the blocks below. No host
// copy: the gradients never leave the device.
//
// Buckets start in one fixed order on every rank (the backward's), so the collectives match. A
// sum's rounding depends on the rank count and NCCL's algorithm, not on where the buckets end.
//
// ZeRO-1 (dist/zero1.h) gives the ranks' ranges of the buffer (`owners`): each bucket is then
// summed onto the ranks owning its elements only (a reduce-scatter a bucket at a time), which is
// all that ZeRO-1's optimiser step reads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/kernels/tensor.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/model/sharded_parameters.h"

namespace tandem::dist {

// Units [first_unit, last_unit] of the layout, elements [begin, end) of the flat buffer (the
// alignment gaps between its units included: they are zero on every rank).
struct GradientBucket {
  int first_unit = 0, last_unit = 0;
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

// Buckets in the backward's order (the last unit first), each of consecutive units, closed as
// soon as it holds at least `bucket_elements` (a unit larger than that is a bucket of its own).
std::vector<GradientBucket> plan_gradient_buckets(std::span<const model::ParameterUnit> units,
                                                  std::int64_t bucket_elements);

class DeviceGradientReduction final : public model::GradientReadyListener {
 public:
  // `flat_grads`: the model's f32 gradient buffer, laid out as `units` say, on the backend whose
  // device_stream() is `stream` (the sums are ordered with it).
  // `owners` (W + 1 offsets into the buffer, ZeRO-1): sum each bucket onto the owners of its
  // elements; empty: all-reduce each bucket.
  DeviceGradientReduction(Communicator& comm, void* stream, kernels::Tensor flat_grads,
                          std::span<const model::ParameterUnit> units, std::int64_t bucket_bytes,
                          std::vector<std::size_t> owners = {});

  // The next backward is the step's last: its completed units start their buckets' sums.
  void arm() { armed_ = true; }
  void gradient_ready(int unit) override;
  // Starts every bucket the backward did not, makes the backend's stream wait for all the sums,
  // and waits for them; the buffer then holds the sums over the ranks.
  void finish();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Of the last finished step's buckets, how many started while its backward still ran.
  int started_during_backward() const { return overlapped_last_; }
  // For the run's log: "gradient reduction on the device (nccl): N bucket(s) of up to X MiB, K
  // started by the backward as it completed them" (and how ZeRO-1's buckets are summed).
  std::string describe() const;

 private:
  void reset();  // a new step: no unit reported, no bucket started, not armed
  void start_ready_buckets();
  void start(std::size_t bucket);

  Communicator& comm_;
  void* stream_;
  kernels::Tensor flat_grads_;
  std::vector<std::size_t> owners_;  // ZeRO-1's ranges; empty: all-reduce
  std::vector<GradientBucket> buckets_;
  std::vector<int> bucket_of_unit_;
  std::vector<bool> reported_;  // per unit: completed by the armed backward
  std::vector<int> missing_;    // per bucket: its units the backward has not completed yet
  std::size_t next_ = 0;        // buckets start in order: the first not started yet
  bool armed_ = false;
  int overlapped_ = 0, overlapped_last_ = 0;
};

}  // namespace tandem::dist
