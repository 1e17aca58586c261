#include "tandem/optim/optim_config.h"

#include <gtest/gtest.h>

#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

OptimConfig parse(const std::string& yaml) {
  return read_optim_config(io::ConfigSection(YAML::Load(yaml), "optim", "run.yaml"));
}

TEST(OptimConfig, DefaultsAreTheOlmo3Recipe) {
  OptimConfig c = parse("{}");
  EXPECT_EQ(c.lr, 3e-4);
  EXPECT_EQ(c.adamw.beta1, 0.9);
  EXPECT_EQ(c.adamw.beta2, 0.95);
  EXPECT_EQ(c.adamw.eps, 1e-8);
  EXPECT_EQ(c.adamw.weight_decay, 0.1);
  EXPECT_TRUE(c.skip_step);
  EXPECT_EQ(c.skip.rolling_interval_length, 128);
  EXPECT_EQ(c.skip.sigma_factor, 6.0);
  EXPECT_EQ(c.max_grad_norm, 1.0);
  EXPECT_EQ(c.z_loss_multiplier, 1e-5);
}

TEST(OptimConfig, ReadsEveryKey) {
  OptimConfig c = parse(
      "{name: adamw, lr: 2.0712e-4, betas: [0.8, 0.99], eps: 1e-6, weight_decay: 0.0,"
      " rolling_interval_length: 64, sigma_factor: 4, max_grad_norm: null,"
      " z_loss_multiplier: null}");
  EXPECT_FALSE(c.skip_step);
  EXPECT_EQ(c.lr, 2.0712e-4);
  EXPECT_EQ(c.adamw.beta1, 0.8);
  EXPECT_EQ(c.adamw.beta2, 0.99);
  EXPECT_EQ(c.adamw.eps, 1e-6);
  EXPECT_EQ(c.adamw.weight_decay, 0.0);
  EXPECT_EQ(c.skip.rolling_interval_length, 64);
  EXPECT_EQ(c.skip.sigma_factor, 4.0);
  EXPECT_FALSE(c.max_grad_norm.has_value());
  EXPECT_FALSE(c.z_loss_multiplier.has_value());
}

TEST(OptimConfig, ErrorsNameTheKey) {
  auto expect_error = [](const std::string& yaml, const std::string& fragment) {
    try {
      parse(yaml);
      ADD_FAILURE() << "accepted " << yaml;
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("run.yaml"), std::string::npos) << e.what();
    }
  };
  expect_error("{name: sgd}", "unknown optimiser 'sgd'");
  expect_error("{lr: 1e-3, weight_decya: 0.1}", "optim.weight_decya");
  expect_error("{betas: [0.9]}", "optim.betas");
  expect_error("{betas: [0.9, 1.5]}", "beta2");
  expect_error("{lr: -1}", "optim.lr");
  expect_error("{max_grad_norm: 0}", "optim.max_grad_norm");
  expect_error("{rolling_interval_length: 1}", "rolling_interval_length");
  expect_error("{eps: abc}", "optim.eps");
}

}  // namespace
}  // namespace tandem::optim
