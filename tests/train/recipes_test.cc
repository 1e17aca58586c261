// The shipped OLMo 3 7B recipes: their model sections are AI2's 7B, and stage 1's stitched schedule
// is continuous at the switch (the half-cosine's warmup ends at the first cosine's midpoint).
#include <gtest/gtest.h>

#include <cmath>

#include "tandem/eval/downstream.h"
#include "tandem/eval/inloop_tasks.h"
#include "tandem/io/config.h"
#include "tandem/model/model_config.h"
#include "tandem/optim/schedule.h"

namespace tandem {
namespace {

std::string recipe(const std::string& name) {
  return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name;
}

TEST(Recipes, Olmo3SevenBStageOneSchedule) {
  YAML::Node root = io::load_yaml_config(recipe("olmo3-7b-stage1.yaml"));
  model::ModelConfig m = model::parse_model_config(io::ConfigSection(root["model"], "model"));
  EXPECT_EQ(m.embedding_size, 100352);
  auto s = optim::make_schedule(io::ConfigSection(root["scheduler"], "scheduler"));
  const std::int64_t t_max = root["trainer"]["max_steps"].as<std::int64_t>();
  EXPECT_EQ(t_max, 1413814);
  const double lr = root["optim"]["lr"].as<double>();
  EXPECT_NEAR(s->lr(lr, 2000, t_max), lr, 1e-12);  // end of warmup
  // Continuity at the switch: one step changes the lr by about one step of the cosine's slope.
  double before = s->lr(lr, 597046, t_max), after = s->lr(lr, 597047, t_max);
  EXPECT_NEAR(before, 0.55 * lr, 0.01 * lr);  // the cosine's midpoint
  EXPECT_LT(std::fabs(before - after), 1e-3 * lr);
  // The half-cosine keeps falling toward 0.1 lr at its 7T horizon, not reached when data ran out.
  double end = s->lr(lr, t_max, t_max);
  EXPECT_LT(end, before);
  EXPECT_GT(end, 0.1 * lr);
}

TEST(Recipes, Olmo3SevenBStageTwoAnneal) {
  YAML::Node root = io::load_yaml_config(recipe("olmo3-7b-stage2.yaml"));
  auto s = optim::make_schedule(io::ConfigSection(root["scheduler"], "scheduler"));
  const std::int64_t t_max = root["trainer"]["max_steps"].as<std::int64_t>();
  const double lr = root["optim"]["lr"].as<double>();
  EXPECT_DOUBLE_EQ(lr, 2.0712e-4);
  EXPECT_NEAR(s->lr(lr, 1, t_max), lr, 1e-3 * lr);  // no warmup
  EXPECT_NEAR(s->lr(lr, t_max / 2, t_max), lr / 2, 1e-3 * lr);
  EXPECT_NEAR(s->lr(lr, t_max, t_max), 0.0, 1e-12);
  EXPECT_TRUE(root["trainer"]["load_optimizer_state"].as<bool>());
}

TEST(Recipes, Olmo3SevenBListsAi2sInLoopSuite) {
  for (const char* name : {"olmo3-7b-stage1.yaml", "olmo3-7b-stage2.yaml"}) {
    YAML::Node root = io::load_yaml_config(recipe(name));
    auto d = eval::parse_downstream_config(
        io::ConfigSection(root["evaluation"]["downstream"], "evaluation.downstream"));
    std::vector<std::string> labels;
    for (const auto& t : d.tasks) labels.push_back(t.name);
    EXPECT_EQ(labels, eval::olmo3_7b_inloop_suite()) << name;
    EXPECT_EQ(d.options.max_length, 8192) << name;
    EXPECT_EQ(root["evaluation"]["padded"]["sequence_length"].as<std::int64_t>(), 8192) << name;
  }
}

}  // namespace
}  // namespace tandem
