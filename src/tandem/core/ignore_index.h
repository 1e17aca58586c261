// The label that marks a position without a target (torch's ignore_index): the last position of
// every instance, and every position of an instance the instance filter rejects. One name for the
// whole code base.
#pragma once

#include <cstdint>

namespace tandem::core {

inline constexpr std::int64_t kIgnoreIndex = -100;

}  // namespace tandem::core
