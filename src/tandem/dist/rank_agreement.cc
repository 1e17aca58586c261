#include "tandem/dist/rank_agreement.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::dist {

std::string broadcast_string(const std::string& text, int root, Communicator& comm) {
  std::uint64_t length = text.size();
  comm.broadcast(&length, sizeof length, root);
  std::string out = comm.rank() == root ? text : std::string(length, '\0');
  if (length > 0) comm.broadcast(out.data(), length, root);
  return out;
}

std::optional<RankFailure> first_failure(const std::string& error, Communicator& comm) {
  // One slot per rank: the sum is exact (0 or 1 in each) and independent of the order.
  std::vector<double> failed(static_cast<std::size_t>(comm.world_size()), 0.0);
  if (!error.empty()) failed[static_cast<std::size_t>(comm.rank())] = 1.0;
  comm.all_reduce_sum(failed.data(), failed.size());
  const auto first = std::find_if(failed.begin(), failed.end(), [](double f) { return f > 0; });
  if (first == failed.end()) return std::nullopt;
  const int rank = static_cast<int>(first - failed.begin());
  return RankFailure{rank, broadcast_string(error, rank, comm)};
}

void fail_if_any_rank_failed(const std::string& error, Communicator& comm) {
  if (std::optional<RankFailure> failure = first_failure(error, comm))
    throw core::Error(failure->message);
}

bool same_on_all_ranks(std::uint64_t value, Communicator& comm) {
  std::uint64_t root_value = value;
  comm.broadcast(&root_value, sizeof root_value, 0);
  double differs = root_value == value ? 0.0 : 1.0;
  comm.all_reduce_sum(&differs, 1);
  return differs == 0.0;
}

std::vector<int> share_by_size(const std::vector<std::uint64_t>& sizes, int world,
                               const std::vector<int>& pinned) {
  TANDEM_CHECK(pinned.empty() || pinned.size() == sizes.size(),
               "share_by_size: {} pinned ranks for {} items", pinned.size(), sizes.size());
  std::vector<std::uint64_t> load(static_cast<std::size_t>(std::max(world, 1)), 0);
  std::vector<int> owner(sizes.size(), 0);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const int rank = pinned.empty() ? -1 : pinned[i];
    TANDEM_CHECK(rank < world, "share_by_size: item {} pinned to rank {} of {}", i, rank, world);
    if (rank >= 0) {
      owner[i] = rank;
      load[static_cast<std::size_t>(rank)] += sizes[i];
    } else {
      order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owner[i] = static_cast<int>(least - load.begin());
    *least += sizes[i];
  }
  return owner;
}

}  // namespace tandem::dist
