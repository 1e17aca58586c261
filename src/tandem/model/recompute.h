// Activation recompute (OLMo-core's activation checkpointing): what each block keeps from its
// forward pass for its backward, and what the backward recomputes.
//   none       every block keeps every activation its backward reads (BlockActivations)
//   full       every block keeps its input only; its backward first runs the block's forward again
//              into one shared set of buffers
//   selective  every block keeps its input and its whole attention module (projections, QK-norm
//              statistics, q/k/v after RoPE, the attention output and log-sum-exp, the output
//              projection); its backward recomputes the post-attention norm and residual, the MLP
//              and the post-MLP norm (no attention is recomputed)
// Recomputing runs the same kernels on the same inputs, so the gradients are bit-identical to
// keeping the activations on a deterministic backend.
#pragma once

#include <string>

namespace tandem::model {

enum class Recompute { kNone, kFull, kSelective };

// "none", "full", "selective"; anything else is an error naming `where` and the value.
Recompute parse_recompute(const std::string& value, const std::string& where);
const char* recompute_name(Recompute policy);

}  // namespace tandem::model
