// Agreement among a communicator's ranks on host-side facts, so that every rank takes the same
// branch after work that may go differently on some of them: one rank's text seen by all, the
// first failure of any rank with its message, and work items shared out by size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/dist/communicator.h"

namespace tandem::dist {

// `text` as rank `root` has it, on every rank (collective).
std::string broadcast_string(const std::string& text, int root, Communicator& comm);

struct RankFailure {
  int rank = 0;
  std::string message;
};

// `error` is this rank's failure message, empty for none. Returns on every rank the lowest rank
// that failed with its message, or nullopt when none did (collective).
std::optional<RankFailure> first_failure(const std::string& error, Communicator& comm);

// Throws core::Error with the first failing rank's message on every rank when any rank failed
// (collective). On a file system the ranks share, their messages are the same.
void fail_if_any_rank_failed(const std::string& error, Communicator& comm);

// Whether `value` is the same on every rank (collective).
bool same_on_all_ranks(std::uint64_t value, Communicator& comm);

// The rank that takes each of the work items of `sizes` bytes: the items `pinned` gives a rank
// (>= 0; empty or -1: none) go to it, then the others, largest first, each to the rank with the
// fewest bytes so far (the lowest such rank). Depends on its arguments only, so every rank
// computes the same shares.
std::vector<int> share_by_size(const std::vector<std::uint64_t>& sizes, int world,
                               const std::vector<int>& pinned = {});

}  // namespace tandem::dist
