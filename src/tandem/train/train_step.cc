#include "tandem/train/train_step.h"

#include <cmath>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/model/documents.h"
#include "tandem/optim/loss_normalization.h"

namespace tandem::train {

TrainStep::TrainStep(model::Olmo3Model& model, optim::Optimizer& optimizer,
                     const optim::OptimConfig& optim, const optim::Schedule& schedule,
                     dist::Communicator& comm, StepOptions options)
    : model_(model),
      optimizer_(optimizer),
      optim_(optim),
      schedule_(schedule),
      comm_(comm),
      options_(options),
      skip_rule_(optim.skip) {}

StepResult TrainStep::run(const data::Batch& batch, std::int64_t step) {
  const std::int64_t T = batch.sequence_length;
  const auto rows = static_cast<std::int64_t>(batch.num_instances());
  TANDEM_CHECK(static_cast<std::int64_t>(batch.input_ids.size()) == rows * T,
               "training step {}: the batch holds {} tokens for {} instances of {}", step,
               batch.input_ids.size(), rows, T);
  TANDEM_CHECK(batch.label_mask.empty() || batch.label_mask.size() == batch.input_ids.size(),
               "training step {}: a label mask of {} entries for {} tokens", step,
               batch.label_mask.size(), batch.input_ids.size());
  const std::uint8_t* keep = batch.instance_mask.empty() ? nullptr : batch.instance_mask.data();
  const std::vector<std::int64_t> labels =
      optim::make_labels(batch.input_ids.data(), rows, T, keep,
                         batch.label_mask.empty() ? nullptr : batch.label_mask.data());
  const double z_multiplier = optim_.z_loss_multiplier.value_or(0.0);
  const std::int64_t divisor = optim::loss_divisor(labels.data(), rows, T, keep);
  // OLMo-core divides by this rank's count too: 0/0, a NaN loss, and its trainer stops ("nan loss
  // encountered at step N").
  TANDEM_CHECK(divisor > 0,
               "training step {}: the batch of rank {} ({} instances) has no label to learn from "
               "(every label masked or ignored); OLMo-core's loss is 0/0 here and its trainer "
               "stops too",
               step, comm_.rank(), rows);
  optim::BatchLoss loss(divisor, z_multiplier);

  model_.zero_grads();
  model_.begin_step();
  const std::int64_t mb =
      options_.micro_batch_instances > 0 ? options_.micro_batch_instances : rows;
  TANDEM_CHECK(rows % mb == 0, "micro-batch size {} does not divide the rank batch of {} instances",
               mb, rows);
  for (std::int64_t start = 0; start < rows; start += mb) {
    const std::int64_t* ids = batch.input_ids.data() + start * T;
    // OLMo-core's generate_doc_lengths: attention inside each packed document only.
    // (Data packed from metadata boundaries brings its own, which a scan would not find.)
    std::vector<std::int64_t> doc_start;
    if (options_.intra_document && !batch.document_starts.empty())
      doc_start.assign(batch.document_starts.begin() + start * T,
                       batch.document_starts.begin() + (start + mb) * T);
    else if (options_.intra_document)
      doc_start = model::document_starts(ids, mb, T, options_.eos_token_id, options_.bos_token_id);
    if (start + mb == rows) optimizer_.last_backward_follows();
    model::LossSums s = model_.forward_backward(
        ids, labels.data() + start * T, mb, T, static_cast<float>(z_multiplier), loss.grad_scale(),
        true, options_.intra_document ? doc_start.data() : nullptr);
    loss.add_micro_batch(s.ce_sum, s.z_sum);
  }
  model_.end_step();
  optimizer_.reduce_gradients();
  double losses[2] = {loss.ce_loss(), loss.z_loss()};
  if (comm_.world_size() > 1) {
    comm_.all_reduce_sum(losses, 2);
    for (double& l : losses) l /= static_cast<double>(comm_.world_size());
  }

  StepResult r;
  r.tokens = rows * T * comm_.world_size();
  r.ce_loss = losses[0];
  r.z_loss = losses[1];
  r.grad_norm = optimizer_.clip(optim_.max_grad_norm.value_or(0.0));
  r.lrs = optim::scheduled_lrs(optim_, schedule_, step, options_.horizon);
  r.lr = r.lrs.back();
  r.nonfinite =
      !std::isfinite(r.ce_loss) || !std::isfinite(r.z_loss) || !std::isfinite(r.grad_norm);
  if (r.nonfinite) {
    r.skipped = true;
  } else if (optim_.skip_step) {
    r.skipped = skip_rule_.observe(
        r.ce_loss, optim_.max_grad_norm ? std::optional<double>(r.grad_norm) : std::nullopt);
  }
  if (!r.skipped) optimizer_.step(r.lrs);
  return r;
}

}  // namespace tandem::train
