// Evaluation spread over the data-parallel ranks (OLMo-core shards its evaluators the same way),
// with results that do not depend on how many ranks there are: the batches of an evaluation are
// dealt out round-robin (batch k runs on rank k % W), each batch is the same computation wherever
// it runs (same rows, same shapes, same weights), and the results are gathered exactly (every value
// is summed with zeros from the other ranks), so every rank ends with, bit for bit, what one
// process computing every batch gets.
//
// A sharded model (FSDP) gathers its units collectively in every forward pass, so the ranks make
// the same number of passes per round: a rank whose batch needs fewer passes than the round's
// largest, or that has no batch left, makes up the difference with one-token padding passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/dist/communicator.h"
#include "tandem/model/olmo3_model.h"

namespace tandem::eval {

// One batch of an evaluation, as every rank can describe it without running it.
struct EvalBatch {
  std::int64_t rows = 0;  // B and T of its forward-only call (the passes it makes)
  std::int64_t tokens = 0;
  std::size_t results = 0;  // values it returns
};

class EvalRanks {
 public:
  EvalRanks() = default;  // this process alone: it evaluates every batch
  explicit EvalRanks(dist::Communicator& comm) : comm_(&comm) {}

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->world_size() : 1; }

  // Every batch's results, on every rank: results[k] = run(k), where run(k) is called on rank
  // k % W only and returns batches[k].results values. Collective: every rank calls it with the
  // same batches.
  std::vector<std::vector<double>> run(
      model::Olmo3Model& model, const std::vector<EvalBatch>& batches,
      const std::function<std::vector<double>(std::size_t)>& run_batch) const;

  // Batches run so far by all ranks together and by this one (what the logs say of the share).
  struct Count {
    std::int64_t all = 0, here = 0;
  };
  Count count() const { return count_; }

 private:
  dist::Communicator* comm_ = nullptr;
  mutable Count count_;  // statistics only: nothing reads it to decide anything
};

}  // namespace tandem::eval
