// OLMo-core's initialisation (model/parameters.h): the tensors are drawn on all threads, and the
// values are the same on any thread count, equal to each tensor drawn alone (one generator per
// tensor), truncated at +-3 std, with ones for the norms.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "tandem/model/model_config.h"
#include "tandem/model/parameters.h"

namespace tandem {
namespace {

TEST(InitParameters, SameValuesOnAnyThreadCountAsEachTensorAlone) {
  const model::ModelConfig config = model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, hidden_size: 48, "
                 "vocab_size: 70, embedding_size: 128, max_sequence_length: 16}"),
      "model"));
  const model::ParameterLayout layout(config);
  const double std = 0.02;
  auto draw = [&](int threads) {
    std::vector<float> flat(static_cast<std::size_t>(layout.total()), -7.0f);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    model::init_parameters(layout, std, 11, flat.data());
    omp_set_num_threads(saved);
    return flat;
  };
  const std::vector<float> one = draw(1), three = draw(3);
  ASSERT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
  for (std::size_t i = 0; i < layout.entries().size(); ++i) {
    const model::ParameterEntry& e = layout.entries()[i];
    std::vector<float> alone(static_cast<std::size_t>(e.numel));
    model::init_parameter_range(layout, i, std, 11, 0, alone);
    ASSERT_EQ(std::memcmp(alone.data(), three.data() + e.offset, alone.size() * sizeof(float)), 0)
        << e.name;
    for (float v : alone) {
      if (e.is_norm)
        ASSERT_EQ(v, 1.0f) << e.name;
      else
        ASSERT_LE(std::fabs(v), 3.0 * std) << e.name;
    }
  }
}

}  // namespace
}  // namespace tandem
