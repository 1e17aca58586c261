// Run-config values of the wrong type are named by key (yaml-cpp's "bad conversion" named
// neither the key nor the file).
#include <gtest/gtest.h>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/train/train_config.h"

namespace tandem {
namespace {

using namespace core;
using namespace io;
using namespace train;

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    load_run_config(testing::fixture("train/parity.yaml"), overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(RunConfigErrors, BetasOfTheWrongTypeNameTheKey) {
  const std::string e = config_error({"optim.betas=[a, b]"});
  EXPECT_NE(e.find("key 'optim.betas[0]'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a number, got 'a'"), std::string::npos) << e;
}

TEST(RunConfigErrors, NestedValueWhereAnIntegerBelongsNamesTheKey) {
  const std::string e = config_error({"trainer.max_steps={a: 1}"});
  EXPECT_NE(e.find("trainer.max_steps"), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;
}

TEST(RunConfigErrors, FreshStartIsAKnownKey) {
  EXPECT_EQ(config_error({"trainer.fresh_start=true"}), "no error");
}

}  // namespace
}  // namespace tandem
