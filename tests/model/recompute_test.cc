// Activation recompute (model/recompute.h): with full and selective recompute the loss and every
// gradient are bit-identical to keeping all activations on the CPU backend (deterministic at a
// fixed thread count), on two small configs (GQA with sliding windows and intra-document masking;
// plain MHA), over two accumulated micro-batches, under the fp32 and the bf16 precision policy;
// and the activation memory the backend really holds falls by exactly what
// Olmo3Model::activation_bytes says.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <fmt/format.h>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/model/documents.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

using model::Recompute;

struct Case {
  std::string name;
  std::string yaml;  // the model: mapping
  std::int64_t B, T;
  bool documents;  // intra-document masking
};

std::vector<Case> cases() {
  return {
      {"gqa_sliding_documents",
       "{d_model: 64, n_layers: 3, n_heads: 4, n_kv_heads: 2, hidden_size: 96, vocab_size: 100, "
       "embedding_size: 128, max_sequence_length: 64, sliding_window: {pattern: [8, -1], "
       "force_full_attention_on_first_layer: false}}",
       2, 24, true},
      {"mha",
       "{d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, hidden_size: 64, vocab_size: 50, "
       "embedding_size: 64, max_sequence_length: 32}",
       3, 16, false},
  };
}

model::ModelConfig config_of(const Case& c) {
  return model::parse_model_config(io::ConfigSection(YAML::Load(c.yaml), "model"));
}

struct Result {
  std::vector<model::LossSums> sums;
  std::vector<float> grads;
  std::int64_t held_bytes = 0;        // backend bytes after the step (model state + activations)
  std::int64_t peak_bytes = 0;        // the backend's peak during the step
  std::int64_t activation_bytes = 0;  // the model's own count
};

// Two micro-batches of random ids (fixed seed), gradients accumulated, on a backend of its own.
Result run(const Case& c, Recompute policy, model::Precision precision = model::Precision::kFp32) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config_of(c), *backend, precision);
  m.init_weights(7);
  m.set_recompute(policy);
  const std::int64_t N = c.B * c.T;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::int64_t> token(1, m.config().vocab_size - 1);
  Result r;
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(N)), labels(ids.size());
    for (auto& id : ids) id = token(rng);
    if (c.documents)  // id 0 is the EOS: several documents per row
      for (std::size_t i = 5; i < ids.size(); i += 9) ids[i] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i)
      labels[i] = (i + 1) % static_cast<std::size_t>(c.T) == 0 ? core::kIgnoreIndex : ids[i + 1];
    const std::vector<std::int64_t> starts = model::document_starts(ids.data(), c.B, c.T, 0);
    r.sums.push_back(m.forward_backward(ids.data(), labels.data(), c.B, c.T, 1e-4f, 0.5f, true,
                                        c.documents ? starts.data() : nullptr));
  }
  r.grads = m.grads_to_host();
  r.held_bytes = backend->bytes_in_use();
  r.peak_bytes = backend->peak_bytes();
  r.activation_bytes = m.activation_bytes(N);
  // Everything the backend holds is counted: parameters, gradients, activations, workspace, RoPE.
  const auto value_bytes =
      static_cast<std::int64_t>(kernels::dtype_size(model::compute_dtype(precision)));
  EXPECT_EQ(r.activation_bytes,
            model::Olmo3Model::activation_bytes(m.config(), policy, N, value_bytes));
  EXPECT_EQ(r.held_bytes, 2 * 4 * m.layout().total() + m.compute_weight_bytes() +
                              r.activation_bytes +
                              model::Olmo3Model::workspace_bytes(m.config(), N, value_bytes) +
                              model::Olmo3Model::rope_table_bytes(m.config(), c.T));
  return r;
}

TEST(Recompute, GradientsAreBitIdenticalToKeepingEveryActivation) {
  for (const Case& c : cases())
    for (model::Precision precision : {model::Precision::kFp32, model::Precision::kBf16}) {
      const Result none = run(c, Recompute::kNone, precision);
      for (Recompute policy : {Recompute::kFull, Recompute::kSelective}) {
        SCOPED_TRACE(fmt::format("{} {} {}", c.name, model::precision_name(precision),
                                 model::recompute_name(policy)));
        const Result r = run(c, policy, precision);
        ASSERT_EQ(r.sums.size(), none.sums.size());
        for (std::size_t i = 0; i < r.sums.size(); ++i) {
          EXPECT_EQ(r.sums[i].ce_sum, none.sums[i].ce_sum);
          EXPECT_EQ(r.sums[i].z_sum, none.sums[i].z_sum);
          EXPECT_EQ(r.sums[i].count, none.sums[i].count);
        }
        ASSERT_EQ(r.grads.size(), none.grads.size());
        EXPECT_EQ(std::memcmp(r.grads.data(), none.grads.data(), r.grads.size() * sizeof(float)),
                  0);
        // The gradients are not trivially equal: something was computed.
        double norm = 0;
        for (float g : r.grads) norm += static_cast<double>(g) * g;
        EXPECT_GT(norm, 0.0);
      }
    }
}

TEST(Recompute, HeldActivationMemoryFallsByTheCountedBytes) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Result none = run(c, Recompute::kNone), sel = run(c, Recompute::kSelective),
                 full = run(c, Recompute::kFull);
    // What the backend really holds differs exactly by the model's count of activation bytes.
    EXPECT_EQ(none.held_bytes - sel.held_bytes, none.activation_bytes - sel.activation_bytes);
    EXPECT_EQ(none.held_bytes - full.held_bytes, none.activation_bytes - full.activation_bytes);
    EXPECT_LT(sel.activation_bytes, none.activation_bytes);
    EXPECT_LT(full.activation_bytes, sel.activation_bytes);
    EXPECT_LT(full.peak_bytes, none.peak_bytes);
    const model::ModelConfig cfg = config_of(c);
    const std::int64_t N = c.B * c.T, L = cfg.n_layers, d = cfg.d_model, hid = cfg.hidden_size;
    const std::int64_t qw = cfg.q_width(), kw = cfg.kv_width(), H = cfg.n_heads;
    // The counts, per token: none keeps everything in every block; full keeps each block's input
    // plus one shared set; selective keeps input, q/k projections, v, attention output, lse and
    // the output projection per block, and shares the norms' outputs, RoPE'd q/k and the MLP.
    // Four norm statistics rows (QK-norms, attention_norm, feed_forward_norm).
    const std::int64_t all = 4 * d + 3 * qw + 3 * kw + 3 * hid + 4 + H;
    const std::int64_t selective_kept = 2 * d + 2 * qw + 2 * kw + H;
    EXPECT_EQ(none.activation_bytes, 4 * N * L * all);
    EXPECT_EQ(full.activation_bytes, 4 * N * (L * d + all - d));
    EXPECT_EQ(sel.activation_bytes, 4 * N * (L * selective_kept + all - selective_kept));
    std::printf(
        "[ measured ] %s: held activations none %lld B, selective %lld B (%.2fx less), full "
        "%lld B (%.2fx less); backend peak none %lld B, selective %lld B, full %lld B\n",
        c.name.c_str(), static_cast<long long>(none.activation_bytes),
        static_cast<long long>(sel.activation_bytes),
        static_cast<double>(none.activation_bytes) / sel.activation_bytes,
        static_cast<long long>(full.activation_bytes),
        static_cast<double>(none.activation_bytes) / full.activation_bytes,
        static_cast<long long>(none.peak_bytes), static_cast<long long>(sel.peak_bytes),
        static_cast<long long>(full.peak_bytes));
  }
}

TEST(Recompute, ChangingThePolicyOfAModelKeepsItsResults) {
  const Case c = cases()[0];
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Olmo3Model m(config_of(c), *backend);
  m.init_weights(3);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(c.B * c.T));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i * 7 % 99 + 1);
  std::vector<std::vector<float>> grads;
  for (Recompute p :
       {Recompute::kNone, Recompute::kFull, Recompute::kSelective, Recompute::kNone}) {
    m.set_recompute(p);
    EXPECT_EQ(m.recompute(), p);
    m.zero_grads();
    m.forward_backward(ids.data(), ids.data(), c.B, c.T, 0.0f, 1.0f, true);
    grads.push_back(m.grads_to_host());
  }
  for (std::size_t i = 1; i < grads.size(); ++i) EXPECT_EQ(grads[i], grads[0]) << i;
}

TEST(Recompute, PolicyNamesAndBadValues) {
  for (Recompute p : {Recompute::kNone, Recompute::kFull, Recompute::kSelective})
    EXPECT_EQ(model::parse_recompute(model::recompute_name(p), "k"), p);
  try {
    model::parse_recompute("partial", "run.yaml: trainer.recompute");
    FAIL() << "no error";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainer.recompute"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("partial"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
