// Olmo3Model's forward-only passes (evaluation and parity: logits, log-probabilities at chosen
// positions) and their pieces under the forward-only token limit (olmo3_model.h).
#include "tandem/core/error.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#include "tandem/model/olmo3_model.h"

namespace tandem::model {

using kernels::Buffer;
using kernels::DType;
using kernels::Shape;

void Olmo3Model::set_forward_only_token_limit(std::int64_t tokens) {
  TANDEM_CHECK(tokens >= 0, "forward-only token limit {} is negative", tokens);
  forward_only_token_limit_ = tokens;
}

std::int64_t Olmo3Model::forward_only_rows(std::int64_t B, std::int64_t T) const {
  if (forward_only_token_limit_ == 0 || B * T <= forward_only_token_limit_) return B;
  return std::max<std::int64_t>(1, forward_only_token_limit_ / T);
}

std::int64_t Olmo3Model::forward_only_passes(std::int64_t B, std::int64_t T) const {
  const std::int64_t piece = forward_only_rows(B, T);
  return (B + piece - 1) / piece;
}

void Olmo3Model::forward_only_padding_pass() {
  const std::int64_t id = 0;
  token_log_probs_piece(&id, 1, 1, {}, {}, nullptr);
}

void Olmo3Model::forward_logits(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                float* logits, const std::int64_t* doc_start) {
  const std::int64_t piece = forward_only_rows(B, T), V = config_.embedding_size;
  for (std::int64_t b = 0; b < B; b += piece)
    forward_logits_piece(ids + b * T, std::min(piece, B - b), T, logits + b * T * V,
                         doc_start ? doc_start + b * T : nullptr);
}

void Olmo3Model::forward_logits_piece(const std::int64_t* ids, std::int64_t B, std::int64_t T,
                                      float* logits, const std::int64_t* doc_start) {
  begin_pass(false);
  forward_hidden(ids, B, T, doc_start);
  const std::int64_t N = B * T;
  Buffer out = backend_.allocate(act_, Shape{N, config_.embedding_size});
  backend_.linear_forward(rows(workspace_.final_normed, N, config_.d_model), compute_.lm_head, out);
  release_unit(static_cast<int>(config_.n_layers) + 1);
  end_pass();
  if (act_ != DType::f32) {
    // The logits in the compute dtype (as HF's bf16 model returns them), widened for the host.
    Buffer wide = backend_.allocate(DType::f32, out.tensor().shape());
    backend_.cast(wide, out);
    out = std::move(wide);
  }
  backend_.download(logits, out);
}

std::vector<double> Olmo3Model::token_log_probs(const std::int64_t* ids, std::int64_t B,
                                                std::int64_t T,
                                                std::span<const std::int64_t> positions,
                                                std::span<const std::int64_t> targets,
                                                const std::int64_t* doc_start) {
  TANDEM_CHECK(positions.size() == targets.size(), "token_log_probs: {} positions, {} targets",
               positions.size(), targets.size());
  const std::int64_t piece = forward_only_rows(B, T);
  if (piece == B) return token_log_probs_piece(ids, B, T, positions, targets, doc_start);
  for (std::int64_t p : positions)
    TANDEM_CHECK(p >= 0 && p < B * T, "token_log_probs: position {} outside the {} x {} batch", p,
                 B, T);
  // Each piece scores the positions in its rows, renumbered from its first row; the results go
  // back in the callers' order. Every piece runs, scored positions or not: a sharded model's
  // passes gather its units collectively, so every rank makes the same passes.
  std::vector<double> out(positions.size());
  for (std::int64_t b = 0; b < B; b += piece) {
    const std::int64_t n = std::min(piece, B - b), first = b * T, end = (b + n) * T;
    std::vector<std::int64_t> local, local_targets;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] < first || positions[i] >= end) continue;
      local.push_back(positions[i] - first);
      local_targets.push_back(targets[i]);
      where.push_back(i);
    }
    const std::vector<double> logp = token_log_probs_piece(ids + first, n, T, local, local_targets,
                                                           doc_start ? doc_start + first : nullptr);
    for (std::size_t k = 0; k < where.size(); ++k) out[where[k]] = logp[k];
  }
  return out;
}

std::vector<double> Olmo3Model::token_log_probs_piece(const std::int64_t* ids, std::int64_t B,
                                                      std::int64_t T,
                                                      std::span<const std::int64_t> positions,
                                                      std::span<const std::int64_t> targets,
                                                      const std::int64_t* doc_start) {
  begin_pass(false);
  forward_hidden(ids, B, T, doc_start);
  const auto n = static_cast<std::int64_t>(positions.size());
  const std::int64_t d = config_.d_model, V = config_.embedding_size;
  // The lm_head and log-softmax over at most one logits chunk of positions at a time (the fused
  // loss's chunk on the CUDA backend, kernels/cuda/scratch_sizes.h): no more logits at once than
  // a training step holds, however many positions a batch scores.
  const std::int64_t chunk =
      kernels::cuda::logits_chunk_rows(V, static_cast<std::int64_t>(kernels::dtype_size(act_)));
  std::vector<double> out;
  out.reserve(positions.size());
  for (std::int64_t first = 0; first < n; first += chunk) {
    const std::int64_t m = std::min(chunk, n - first);
    Buffer index = backend_.allocate(DType::i64, Shape{m});
    Buffer target = backend_.allocate(DType::i64, Shape{m});
    backend_.upload(index, positions.data() + first);
    backend_.upload(target, targets.data() + first);
    Buffer hidden = backend_.allocate(act_, Shape{m, d});
    backend_.gather_rows(rows(workspace_.final_normed, B * T, d), index, hidden);
    Buffer logits = backend_.allocate(act_, Shape{m, V});
    backend_.linear_forward(hidden, compute_.lm_head, logits);
    const std::vector<double> part = backend_.token_log_probs(logits, target);
    out.insert(out.end(), part.begin(), part.end());
  }
  release_unit(static_cast<int>(config_.n_layers) + 1);
  end_pass();
  return out;
}

}  // namespace tandem::model
