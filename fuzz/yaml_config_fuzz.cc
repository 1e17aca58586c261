// YAML run configs and model configs with key=value overrides. The input is a config file, then
// after a line "---overrides---" one override per line. Token files named train.npy and
// held.npy exist beside the config, so that configs get past their data paths.
#include <filesystem>
#include <sstream>

#include "fuzz_util.h"
#include "tandem/model/model_config.h"
#include "tandem/train/train_config.h"

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
  fuzz::expect_clean([&] { (void)load_run_config(path, overrides); });
  fuzz::expect_clean([&] { (void)load_model_config(path, overrides); });
  return 0;
}
