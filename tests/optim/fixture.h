// Loads the JSON fixtures written by tools/make_optim_fixtures.py.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "../support/test_support.h"
#include "tandem/kernels/tensor.h"

namespace tandem::optim::testing {

// A host vector seen as a CPU-backend tensor (the CPU backend's memory is host memory).
inline kernels::Tensor host_tensor(std::vector<float>& v) {
  return kernels::Tensor(v.data(), kernels::DType::f32,
                         kernels::Shape{static_cast<std::int64_t>(v.size())});
}
inline std::span<const float> host_span(const kernels::Tensor& t) {
  return {t.ptr<float>(), static_cast<std::size_t>(t.numel())};
}
inline kernels::Backend& cpu() { return tandem::testing::cpu_backend(); }

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
