// Loss-curve parity with a PyTorch run of the same recipe: tools/reference_trainer.py trained HF
// Olmo3 with torch.optim.AdamW, OLMo-core's scheduler, the same z-loss and clipping, on the batches
// tandem hands out, from the same step-0 weights (tests/fixtures/train/init_hf). tandem must follow
// its per-step losses within 1e-4 relative and end within 1e-4 relative L2 of its final weights.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/test_support.h"
#include "tandem/io/safetensors.h"
#include "tandem/model/model_io.h"

namespace tandem {
namespace {

TEST(CurveParity, HundredStepsMatchThePyTorchReference) {
  const std::string fx = testing::fixture("train");
  const std::string run = testing::temp_dir("curve_parity");
  auto r = testing::run_tandem("train " + fx + "/parity.yaml trainer.init_from=" + fx +
                               "/init_hf trainer.save_folder=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::ifstream in(fx + "/reference_losses.json");
  nlohmann::json ref = nlohmann::json::parse(in);
  auto ours = testing::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), ref["steps"].size());
  double worst = 0.0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const auto& a = ours[i];
    const auto& b = ref["steps"][i];
    ASSERT_EQ(a["step"], b["step"]);
    double ra = a["train/loss"].get<double>(), rb = b["train/loss"].get<double>();
    double rel = std::fabs(ra - rb) / std::fabs(rb);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "step " << a["step"] << ": " << ra << " vs " << rb;
    EXPECT_NEAR(a["lr"].get<double>(), b["lr"].get<double>(),
                1e-12 * b["lr"].get<double>() + 1e-15);
    EXPECT_LE(std::fabs(a["train/grad_norm"].get<double>() - b["train/grad_norm"].get<double>()),
              1e-4 * b["train/grad_norm"].get<double>())
        << "step " << a["step"];
  }
  RecordProperty("worst_loss_rel_diff", std::to_string(worst));

  // Final weights: every tensor within 1e-4 relative L2 of the reference's.
  model::ModelWeights final_weights =
      model::read_model_weights(run + "/checkpoints/step-000100/model");
  io::SafetensorsFile final_ref(fx + "/reference_final.safetensors");
  const model::ParameterLayout layout(final_weights.config);
  for (const model::ParameterEntry& e : layout.entries()) {
    std::vector<float> b = final_ref.read_f32(model::hf_name_of(e.name));
    EXPECT_LE(testing::relative_l2(final_weights.flat.data() + e.offset, b), 1e-4) << e.name;
  }
}

}  // namespace
}  // namespace tandem
