// trainer.init_from must refuse weights of another architecture even when every tensor has the
// config's shape: 8 heads of 4 dimensions and 4 heads of 8 give identical tensors, and loading
// one as the other scrambles the function silently.
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/model/model_config.h"
#include "tandem/model/model_io.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

using namespace core;
using namespace model;

TEST(InitFrom, OtherArchitectureWithTheSameShapesIsRefused) {
  const std::string config = testing::fixture("train/parity.yaml");
  ModelConfig other =
      load_model_config(config, {"model.n_heads=8", "model.n_kv_heads=4", "model.head_dim=4"});
  ModelConfig mine = load_model_config(config, {});
  ASSERT_EQ(other.total_params(), mine.total_params());
  Olmo3Model model(other, testing::cpu_backend());
  model.init_weights(7);
  const std::string dir = testing::temp_dir("init_from_other_arch");
  save_tandem_model(dir + "/model", model);

  auto r = testing::run_tandem("train " + config + " trainer.init_from=" + dir +
                               "/model trainer.save_folder=" + dir +
                               "/run trainer.max_steps=1 trainer.progress=false "
                               "trainer.peak_tflops=0.001 evaluation.interval=0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("another architecture"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_heads 8 (config: 4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("head_dim 4 (config: 8)"), std::string::npos) << r.output;
}

TEST(InitFrom, SameArchitectureIsAccepted) {
  const std::string config = testing::fixture("train/parity.yaml");
  Olmo3Model model(load_model_config(config, {}), testing::cpu_backend());
  model.init_weights(7);
  const std::string dir = testing::temp_dir("init_from_same_arch");
  save_tandem_model(dir + "/model", model);
  auto r = testing::run_tandem("train " + config + " trainer.init_from=" + dir +
                               "/model trainer.save_folder=" + dir +
                               "/run trainer.max_steps=1 trainer.progress=false "
                               "trainer.peak_tflops=0.001 evaluation.interval=0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace tandem
