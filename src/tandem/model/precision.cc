#include "tandem/model/precision.h"

#include "tandem/core/error.h"

namespace tandem::model {

Precision parse_precision(const std::string& name) {
  if (name == "fp32" || name == "float32") return Precision::kFp32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBf16;
  core::fail("precision must be fp32 or bf16, got '{}'", name);
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

kernels::DType compute_dtype(Precision p) {
  return p == Precision::kBf16 ? kernels::DType::bf16 : kernels::DType::f32;
}

}  // namespace tandem::model
