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
  EXPECT_EQ(c.adamw.arithmetic, kernels::AdamWArithmetic::olmo_core_foreach);
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
  EXPECT_EQ(c.adamw.arithmetic, kernels::AdamWArithmetic::torch_adamw);
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
  EXPECT_EQ(parse("{foreach: true}").adamw.arithmetic, kernels::AdamWArithmetic::olmo_core_foreach);
  EXPECT_EQ(parse("{foreach: false}").adamw.arithmetic, kernels::AdamWArithmetic::olmo_core_single);
  expect_error("{name: adamw, foreach: true}", "optim.foreach");
  expect_error("{lr: 1e-3, weight_decya: 0.1}", "optim.weight_decya");
  expect_error("{betas: [0.9]}", "optim.betas");
  expect_error("{betas: [0.9, 1.5]}", "beta2");
  expect_error("{lr: -1}", "optim.lr");
  expect_error("{max_grad_norm: 0}", "optim.max_grad_norm");
  expect_error("{rolling_interval_length: 1}", "rolling_interval_length");
  expect_error("{eps: abc}", "optim.eps");
  expect_error("{group_overrides: [{params: [embeddings.weight], opts: {foreach: true}}]}",
               "optim.group_overrides[0].opts.foreach': a group overrides lr, weight_decay, betas "
               "or eps");
  expect_error("{group_overrides: [{params: [x], opts: {lr: -1}}]}", "a group's lr must be >= 0");
  expect_error("{group_overrides: [{params: [x], opts: {betas: [0.9, 1.0]}}]}",
               "a group's beta2 must be in [0, 1)");
  expect_error("{group_overrides: [{params: [x], opts: {betas: [0.9]}}]}",
               "optim.group_overrides[0].opts.betas': expected [beta1, beta2]");
  expect_error("{group_overrides: [{params: [x], opts: {eps: .nan}}]}", "eps must be >= 0");
  expect_error("{group_overrides: [{params: [x]}]}", "optim.group_overrides[0].opts'");
  expect_error("{group_overrides: [{params: [], opts: {weight_decay: 0}}]}",
               "optim.group_overrides[0].params' must name at least one");
  expect_error("{group_overrides: [{params: [x], opts: {weight_decay: -1}}]}", "must be >= 0");
  expect_error("{group_overrides: [{params: [x], opts: {weight_decay: 0}, lr: 1}]}",
               "optim.group_overrides[0].lr");
  expect_error("{group_overrides: {params: [x]}}", "expected a list of mappings");
}

// OLMo-core's group_overrides: absent keeps the OLMo 3 recipe (the parameters' own flags); null
// or [] means none (every parameter decayed); otherwise weight decay per group of patterns.
TEST(OptimConfig, GroupOverrides) {
  EXPECT_FALSE(parse("{}").adamw.groups.has_value());
  EXPECT_TRUE(parse("{group_overrides: null}").adamw.groups->empty());
  EXPECT_TRUE(parse("{group_overrides: []}").adamw.groups->empty());
  OptimConfig c = parse(
      "{group_overrides: [{params: [embeddings.weight, '*norm*'], opts: {weight_decay: 0.0}},"
      " {params: ['blocks.*.feed_forward.*'], opts: {weight_decay: 0.2}}]}");
  ASSERT_EQ(c.adamw.groups->size(), 2u);
  EXPECT_EQ((*c.adamw.groups)[0].params, (std::vector<std::string>{"embeddings.weight", "*norm*"}));
  EXPECT_EQ((*c.adamw.groups)[0].weight_decay, 0.0);
  EXPECT_EQ((*c.adamw.groups)[1].weight_decay, 0.2);
  EXPECT_FALSE((*c.adamw.groups)[1].lr.has_value());
  // The other AdamW options torch takes per group; those not given stay unset (the optimiser's).
  c = parse(
      "{lr: 4e-4, betas: [0.9, 0.95], group_overrides: [{params: [embeddings.weight], opts: {lr: "
      "1e-3, betas: [0.8, 0.99], eps: 1e-6}}, {params: [lm_head.*], opts: {}}]}");
  const ParamGroupOverride& g = (*c.adamw.groups)[0];
  EXPECT_EQ(g.lr, 1e-3);
  EXPECT_EQ(g.beta1, 0.8);
  EXPECT_EQ(g.beta2, 0.99);
  EXPECT_EQ(g.eps, 1e-6);
  EXPECT_FALSE(g.weight_decay.has_value());
  EXPECT_EQ(c.adamw.lr_slots(), 3u);
  ParamBuffer embedding{"embeddings.weight", {}, {}, false};
  ParamHyper h = c.adamw.resolve(embedding);
  EXPECT_EQ(h.lr_slot, 0u);
  EXPECT_EQ(h.weight_decay,
            0.1);  // the optimiser's: the group gives none, its own flag no longer counts
  EXPECT_EQ(h.beta1, 0.8);
  h = c.adamw.resolve({"lm_head.w_out.weight", {}, {}, true});  // a group without its own lr
  EXPECT_EQ(h.lr_slot, 2u);
  EXPECT_EQ(h.beta1, 0.9);
  // The step's lrs: the group's own through the schedule, the others the optimiser's.
  const std::unique_ptr<Schedule> cosine = make_schedule(io::ConfigSection(
      YAML::Load("{name: cos_with_warmup, warmup: 0, alpha_f: 0.1}"), "scheduler", "test"));
  const std::vector<double> lrs = scheduled_lrs(c, *cosine, 5, TrainingHorizon::in_steps(10, 100));
  ASSERT_EQ(lrs.size(), 3u);
  EXPECT_EQ(lrs[0], cosine->lr(1e-3, 5, 10));
  EXPECT_EQ(lrs[1], cosine->lr(4e-4, 5, 10));
  EXPECT_EQ(lrs[2], cosine->lr(4e-4, 5, 10));
}

}  // namespace
}  // namespace tandem::optim
