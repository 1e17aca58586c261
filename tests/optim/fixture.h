// Loads the JSON fixtures written by tools/make_optim_fixtures.py.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::optim::testing {

inline nlohmann::json load_fixture(const std::string& name) {
  std::string path = std::string(TANDEM_FIXTURES_DIR) + "/optim/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path);
  return nlohmann::json::parse(in);
}

inline std::vector<float> floats(const nlohmann::json& list) {
  std::vector<float> out;
  for (const auto& v : list) out.push_back(static_cast<float>(v.get<double>()));
  return out;
}

}  // namespace tandem::optim::testing
