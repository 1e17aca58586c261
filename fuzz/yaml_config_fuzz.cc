// YAML run configs and model configs with key=value overrides. The input is a config file, then
// after a line "---overrides---" one override per line. Token files named train.npy and
// held.npy exist beside the config, so that data paths resolve.
#include <filesystem>
#include <sstream>

#include "fuzz_util.h"
#include "tandem/data/data_config.h"
#include "tandem/dist/dist_config.h"
#include "tandem/io/config.h"
#include "tandem/model/model_config.h"
#include "tandem/optim/optim_config.h"
#include "tandem/optim/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  static const bool ready = [] {
    std::string tokens(4096, '\0');
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<char>(i % 251);
    fuzz::scratch_file("train.npy", tokens);
    fuzz::scratch_file("held.npy", tokens);
    return true;
  }();
  (void)ready;
  std::string text(fuzz::as_text(data, size));
  std::vector<std::string> overrides;
  const std::string marker = "\n---overrides---\n";
  if (auto at = text.find(marker); at != std::string::npos) {
    std::istringstream lines(text.substr(at + marker.size()));
    for (std::string line; std::getline(lines, line) && overrides.size() < 16;)
      overrides.push_back(line);
    text.resize(at);
  }
  const std::string path = fuzz::scratch_file("config.yaml", text);
  // The strict YAML layer and overrides, then each section as load_run_config reads it (its
  // trainer and evaluation sections pull in the whole program, so they are left to the tests).
  fuzz::expect_clean([&] {
    YAML::Node root = io::load_yaml_config(path, overrides);
    const std::string base_dir = fuzz::scratch_dir();
    io::ConfigSection top(root, "", path);
    (void)model::parse_model_config(top.section("model"));
    (void)tandem::data::parse_data_config(top.section("data"), base_dir);
    (void)optim::read_optim_config(top.section("optim"));
    (void)optim::make_schedule(top.section("scheduler"));
    (void)dist::read_dist_config(top.section("dist"));
  });
  fuzz::expect_clean([&] { (void)model::load_model_config(path, overrides); });
  return 0;
}
