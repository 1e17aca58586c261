// OLMo-core's trainer as the judge of a tandem run: the curve fixtures of
// tools/olmo_core_trainer.py (curve.yaml, init/, curve_reference.json, curve_final.safetensors),
// trained by tandem and compared step by step and in the final weights. Used by
// tests/train/olmo_core_parity_test.cc (one process) and tests/dist/olmo_core_ddp_test.cc
// (OLMo-core's DDP on several ranks).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/io/safetensors.h"
#include "tandem/model/model_io.h"
#include "tandem/train/checkpoint.h"
#include "test_support.h"

namespace tandem::testing::olmo_core {

// Compares tandem's metrics with OLMo-core's, step by step; returns the worst loss difference.
inline double expect_same_steps(const std::vector<nlohmann::json>& ours,
                                const nlohmann::json& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  double worst = 0.0;
  std::int64_t skipped_before = ours.empty() ? 0
                                             : ours[0]["skipped_steps"].get<std::int64_t>() -
                                                   (ref[0]["skipped"].get<bool>() ? 1 : 0);
  for (std::size_t i = 0; i < std::min(ours.size(), ref.size()); ++i) {
    const auto& a = ours[i];
    const auto& b = ref[i];
    const auto step = b["step"].get<std::int64_t>();
    if (a["step"].get<std::int64_t>() != step) {
      ADD_FAILURE() << "tandem's step " << a["step"] << " against OLMo-core's " << step;
      return worst;
    }
    const double la = a["train/loss"].get<double>(), lb = b["train/loss"].get<double>();
    const double rel = std::fabs(la - lb) / std::fabs(lb);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "step " << step << ": loss " << la << " vs OLMo-core's " << lb;
    // The optimiser's lr, and each group override's own lr where it has one.
    for (const auto& [key, want] : b.items()) {
      if (key != "lr" && key.rfind("lr/", 0) != 0) continue;
      if (!a.contains(key)) {
        ADD_FAILURE() << "step " << step << ": tandem logs no " << key;
        continue;
      }
      EXPECT_NEAR(a[key].get<double>(), want.get<double>(), 1e-12 * std::fabs(want.get<double>()))
          << "step " << step << ": " << key;
    }
    // OLMo-core logs the grad norm only when it clips.
    if (!b["train/grad_norm"].is_null()) {
      const double ga = a["train/grad_norm"].get<double>();
      const double gb = b["train/grad_norm"].get<double>();
      EXPECT_LE(std::fabs(ga - gb), 1e-3 * gb)
          << "step " << step << ": grad norm " << ga << " vs " << gb;
    }
    // The skip-step rule took the same decision (tandem counts skipped steps).
    const std::int64_t skipped_here = a["skipped_steps"].get<std::int64_t>() - skipped_before;
    EXPECT_EQ(skipped_here == 1, b["skipped"].get<bool>()) << "step " << step;
    skipped_before = a["skipped_steps"].get<std::int64_t>();
  }
  return worst;
}

// Final weights, every tensor (padded embedding rows included) within 1e-4 relative L2.
inline void expect_final_weights_match(const std::string& model_dir, const std::string& reference) {
  const model::ModelWeights final_weights = model::read_model_weights(model_dir);
  io::SafetensorsFile final_ref(reference);
  const model::ParameterLayout layout(final_weights.config);
  for (const model::ParameterEntry& e : layout.entries()) {
    std::vector<float> b = final_ref.read_f32(e.name);
    ASSERT_EQ(b.size(), static_cast<std::size_t>(e.numel)) << e.name;
    EXPECT_LE(testing::relative_l2(final_weights.flat.data() + e.offset, b), 1e-4) << e.name;
  }
}

// `tandem ARGS` on `world` ranks: the plain binary for one, else under mpirun with one thread a
// rank (this machine has fewer cores than some tests' ranks).
inline testing::CommandResult run_tandem_on(int world, const std::string& args) {
  if (world == 1) return testing::run_tandem(args);
  return testing::run_shell("OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np " +
                            std::to_string(world) + " " + testing::tandem_binary() + " " + args);
}

// A curve fixture of tools/olmo_core_trainer.py: its folder and OLMo-core's curve_reference.json.
struct CurveFixture {
  std::string dir;
  nlohmann::json ref;
};

inline CurveFixture curve_fixture(const std::string& name) {
  const std::string dir = testing::fixture(name);
  return {dir, testing::read_json(dir + "/curve_reference.json")};
}

// tandem trains the fixture's curve.yaml from its init/ on the fixture's world size (its
// "world_size", else 1; several ranks under mpirun, one thread each): every step as OLMo-core's
// (loss within 1e-6 relative), then the final weights at its last step (whole or the ranks'
// shards). Every fixture's skip decisions are clear of the threshold (none on a knife-edge); a run
// without a skip rule (plain AdamW) has none. `overrides` go after the fixture's own; `run_dir`
// gets the run's folder (its metrics.jsonl holds a startup evaluation's record too, where the
// config asks for one).
inline void train_and_compare(const CurveFixture& f, const std::string& name,
                              const std::string& overrides = "", std::string* run_dir = nullptr) {
  const std::string& fx = f.dir;
  const nlohmann::json& ref = f.ref;
  if (ref["reference"].get<std::string>().find("SkipStepAdamW") != std::string::npos) {
    ASSERT_GT(ref["closest_skip_margin_rel"].get<double>(), 1e-3);
  } else {
    ASSERT_TRUE(ref["closest_skip_margin_rel"].is_null());
  }
  const int world = ref.value("world_size", 1);
  const std::string last_step =
      train::checkpoint_dir_name(static_cast<std::int64_t>(ref["steps"].size()));
  const std::string run = testing::temp_dir(name);
  if (run_dir != nullptr) *run_dir = run;
  const std::string args = "train " + fx + "/curve.yaml trainer.init_from=" + fx +
                           "/init trainer.save_folder=" + run + " " + overrides;
  const testing::CommandResult r = run_tandem_on(world, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> steps;
  for (nlohmann::json& m : testing::read_metrics(run + "/metrics.jsonl"))
    if (!m.value("startup", false)) steps.push_back(std::move(m));
  const double worst = expect_same_steps(steps, ref["steps"]);
  ::testing::Test::RecordProperty("worst_loss_rel_diff", std::to_string(worst));
  EXPECT_LE(worst, 1e-6);
  expect_final_weights_match(run + "/checkpoints/" + last_step + "/model",
                             fx + "/curve_final.safetensors");
}

}  // namespace tandem::testing::olmo_core
