// The mixed-precision policy (docs/precision.md). fp32: everything in fp32. bf16 (AI2's OLMo 3
// recipe, OLMo-core's FSDP policy param_dtype=bf16, reduce_dtype=fp32): fp32 master weights,
// gradients and Adam moments; the forward and backward read a bf16 copy of the weights cast once
// per step; matmul operands, saved activations and activation gradients in bf16 with fp32
// accumulation; norms' statistics, softmax, log-sum-exp and the losses in fp32.
#pragma once

#include <string>

#include "tandem/kernels/tensor.h"

namespace tandem::model {

enum class Precision { kFp32, kBf16 };

// "fp32" | "bf16" (also "float32", "bfloat16"); anything else fails naming the value.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
// The dtype of compute weights, activations and activation gradients under the policy.
kernels::DType compute_dtype(Precision p);

}  // namespace tandem::model
