// nccl_selftest: runs every NcclCommunicator collective under mpirun, on host and on device
// pointers, with even and uneven ranges, and compares each result with the value computed on the
// host. Contributions are small integers, so every sum is exact in any order and the comparison
// is exact. Prints one line per failed check; exits 1 if any rank saw a mismatch.
// Usage: mpirun -np W nccl_selftest (one GPU per rank).
// `nccl_selftest --peer-never-joins` (W >= 2): rank 0 starts a device all-gather that the other
// ranks never join and waits on the host for a stream ordered after it (as FSDP's compute stream
// is); the communicator's watchdog must end the job after TANDEM_DIST_TIMEOUT_S.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tandem/dist/nccl_communicator.h"

namespace {

using tandem::dist::NcclCommunicator;

// Rank r's contribution to element i of test `salt`: integers below 2^24 (exact in float).
float contribution(int rank, std::size_t i, int salt) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(salt)) % 251 + 1 + 1000 * rank);
}

float expected_sum(int world, std::size_t i, int salt) {
  float sum = 0;
  for (int r = 0; r < world; ++r) sum += contribution(r, i, salt);
  return sum;
}

// Offsets n * r / W (as ZeRO-1 shards a buffer), shifted by `base`.
std::vector<std::size_t> proportional_offsets(std::size_t n, int world, std::size_t base) {
  std::vector<std::size_t> offsets(static_cast<std::size_t>(world) + 1);
  for (int r = 0; r <= world; ++r)
    offsets[r] = base + n * static_cast<std::size_t>(r) / static_cast<std::size_t>(world);
  return offsets;
}

// Rank 0's range empty, the last rank holding the remainder: the most uneven split.
std::vector<std::size_t> lopsided_offsets(std::size_t n, int world) {
  std::vector<std::size_t> offsets(static_cast<std::size_t>(world) + 1, 0);
  for (int r = 1; r <= world; ++r) offsets[r] = r == world ? n : static_cast<std::size_t>(r - 1);
  return offsets;
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(rc)));
}

// A device copy of a host vector, copied back by `to_host`.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : n_(host.size()) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()), "cudaMalloc");
    check_cuda(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    check_cuda(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

 private:
  std::size_t bytes() const { return std::max<std::size_t>(n_, 1) * sizeof(T); }
  T* data_ = nullptr;
  std::size_t n_;
};

class SelfTest {
 public:
  explicit SelfTest(NcclCommunicator& comm)
      : comm_(comm), rank_(comm.rank()), world_(comm.world_size()) {}

  int failures() const { return failures_; }
  int checks() const { return checks_; }

  // Element i of [begin, end) must be expected(i); reports the first mismatch.
  template <typename T, typename Expected>
  void expect_range(const std::string& what, const std::vector<T>& got, std::size_t begin,
                    std::size_t end, Expected expected) {
    ++checks_;
    for (std::size_t i = begin; i < end; ++i) {
      const T want = expected(i);
      if (got[i] != want) {
        ++failures_;
        fmt::print(stderr, "nccl_selftest: rank {} of {}: {}: element {} is {}, expected {}\n",
                   rank_, world_, what, i, got[i], want);
        return;
      }
    }
  }

  void all_reduce(std::size_t n, int salt, bool on_device) {
    const std::string what = fmt::format("all_reduce_sum float n={}{}", n, where(on_device));
    std::vector<float> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = contribution(rank_, i, salt);
    if (on_device) {
      DeviceBuffer<float> d(data);
      comm_.all_reduce_sum_device(d.get(), n);
      data = d.to_host();
    } else {
      comm_.all_reduce_sum(data.data(), n);
    }
    expect_range(what, data, 0, n, [&](std::size_t i) { return expected_sum(world_, i, salt); });
  }

  void all_reduce_double(std::size_t n, int salt, bool on_device) {
    const std::string what = fmt::format("all_reduce_sum double n={}{}", n, where(on_device));
    // Beyond float's 24-bit mantissa, so a float reduction would not be exact.
    const double big = 1u << 30;
    std::vector<double> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = big + contribution(rank_, i, salt);
    if (on_device) {
      DeviceBuffer<double> d(data);
      comm_.all_reduce_sum_device(d.get(), n);
      data = d.to_host();
    } else {
      comm_.all_reduce_sum(data.data(), n);
    }
    expect_range(what, data, 0, n, [&](std::size_t i) {
      return big * world_ + static_cast<double>(expected_sum(world_, i, salt));
    });
  }

  // How a reduce-scatter is asked for: on host or device memory in one call, or (bucket > 0,
  // ZeRO-1's form on the device) in buckets of `bucket` elements over the whole buffer, started
  // last first (the backward's order), each summed onto the owners of its elements, then finished
  // together.
  struct Via {
    bool device = false;
    std::size_t bucket = 0;
  };

  // `offsets` index into a buffer of offsets.back() + tail elements.
  void reduce_scatter(const std::string& name, const std::vector<std::size_t>& offsets, int salt,
                      Via via) {
    const std::string what =
        via.bucket > 0
            ? fmt::format("start_reduce_scatter_sum_device {} in buckets of {}", name, via.bucket)
            : fmt::format("reduce_scatter_sum {}{}", name, where(via.device));
    const std::size_t n = offsets.back() + 3;
    std::vector<float> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = contribution(rank_, i, salt);
    if (via.bucket > 0) {
      DeviceBuffer<float> d(data);
      for (std::size_t end = n; end > 0;) {
        const std::size_t begin = end > via.bucket ? end - via.bucket : 0;
        comm_.start_reduce_scatter_sum_device(d.get(), offsets.data(), begin, end, nullptr);
        end = begin;
      }
      comm_.finish_device_collectives(nullptr);
      data = d.to_host();
    } else if (via.device) {
      DeviceBuffer<float> d(data);
      comm_.reduce_scatter_sum_device(d.get(), offsets.data(), nullptr);
      data = d.to_host();
    } else {
      comm_.reduce_scatter_sum(data.data(), offsets.data());
    }
    expect_range(what, data, offsets[rank_], offsets[rank_ + 1],
                 [&](std::size_t i) { return expected_sum(world_, i, salt); });
    // Outside the ranges nothing may be touched.
    expect_range(what + " (outside the ranges)", data, 0, offsets[0],
                 [&](std::size_t i) { return contribution(rank_, i, salt); });
    expect_range(what + " (outside the ranges)", data, offsets.back(), n,
                 [&](std::size_t i) { return contribution(rank_, i, salt); });
  }

  void all_gather(const std::string& name, const std::vector<std::size_t>& offsets, int salt,
                  bool on_device) {
    const std::string what = fmt::format("all_gather {}{}", name, where(on_device));
    const std::size_t n = offsets.back() + 3;
    // Each rank fills only its own range with its value; the rest holds a marker (-1).
    auto owner_of = [&](std::size_t i) {
      int owner = 0;
      while (i >= offsets[owner + 1]) ++owner;
      return owner;
    };
    std::vector<float> data(n, -1.0f);
    for (std::size_t i = offsets[rank_]; i < offsets[rank_ + 1]; ++i)
      data[i] = contribution(rank_, i, salt);
    if (on_device) {
      DeviceBuffer<float> d(data);
      comm_.all_gather_device(d.get(), offsets.data(), nullptr);
      data = d.to_host();
    } else {
      comm_.all_gather(data.data(), offsets.data());
    }
    expect_range(what, data, offsets[0], offsets.back(),
                 [&](std::size_t i) { return contribution(owner_of(i), i, salt); });
    expect_range(what + " (outside the ranges)", data, 0, offsets[0],
                 [](std::size_t) { return -1.0f; });
    expect_range(what + " (outside the ranges)", data, offsets.back(), n,
                 [](std::size_t) { return -1.0f; });
  }

  // FSDP's form: an all-gather of `element_bytes`-byte elements (2: bf16 weights, moved as bytes)
  // started on the device, and a copy to the host queued on another stream behind a mark only:
  // the copy must see the gathered values although the host never waited for the gather.
  void all_gather_started(const std::string& name, const std::vector<std::size_t>& offsets,
                          int salt, std::size_t element_bytes) {
    const std::string what =
        fmt::format("start_all_gather_device {} of {}-byte elements", name, element_bytes);
    const std::size_t n = offsets.back() + 3;
    auto owner_of = [&](std::size_t i) {
      int owner = 0;
      while (i >= offsets[owner + 1]) ++owner;
      return owner;
    };
    // Both widths hold the contribution (below 2^16) as an integer; the rest holds a marker.
    auto value = [&](int r, std::size_t i) {
      return static_cast<std::uint32_t>(contribution(r, i, salt)) % 60000;
    };
    constexpr std::uint32_t kMarker = 65535;
    std::vector<std::uint32_t> got(n);
    cudaStream_t reader = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), "cudaStreamCreate");
    auto gather = [&](auto zero) {
      using T = decltype(zero);
      std::vector<T> data(n, static_cast<T>(kMarker));
      for (std::size_t i = offsets[rank_]; i < offsets[rank_ + 1]; ++i)
        data[i] = static_cast<T>(value(rank_, i));
      DeviceBuffer<T> d(data);
      T* pinned = nullptr;
      check_cuda(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(T)),
                 "cudaMallocHost");
      comm_.start_all_gather_device(d.get(), offsets.data(), sizeof(T), nullptr);
      comm_.order_after_device_collectives(comm_.mark_device_collectives(), reader);
      check_cuda(cudaMemcpyAsync(pinned, d.get(), n * sizeof(T), cudaMemcpyDeviceToHost, reader),
                 "cudaMemcpyAsync");
      check_cuda(cudaStreamSynchronize(reader), "cudaStreamSynchronize");
      for (std::size_t i = 0; i < n; ++i) got[i] = pinned[i];
      comm_.finish_device_collectives(reader);
      check_cuda(cudaFreeHost(pinned), "cudaFreeHost");
    };
    if (element_bytes == 2)
      gather(std::uint16_t{0});
    else
      gather(std::uint32_t{0});
    check_cuda(cudaStreamDestroy(reader), "cudaStreamDestroy");
    expect_range(what, got, offsets[0], offsets.back(),
                 [&](std::size_t i) { return value(owner_of(i), i); });
    expect_range(what + " (outside the ranges)", got, 0, offsets[0],
                 [](std::size_t) { return kMarker; });
    expect_range(what + " (outside the ranges)", got, offsets.back(), n,
                 [](std::size_t) { return kMarker; });
  }

  void broadcast(std::size_t bytes, int root, bool on_device) {
    const std::string what =
        fmt::format("broadcast {} bytes from rank {}{}", bytes, root, where(on_device));
    auto pattern = [&](int r, std::size_t i) {
      return static_cast<std::uint8_t>((static_cast<std::size_t>(r) * 37 + i * 11) & 0xff);
    };
    std::vector<std::uint8_t> data(bytes);
    for (std::size_t i = 0; i < bytes; ++i) data[i] = pattern(rank_, i);
    if (on_device) {
      DeviceBuffer<std::uint8_t> d(data);
      comm_.broadcast_device(d.get(), bytes, root);
      data = d.to_host();
    } else {
      comm_.broadcast(data.data(), bytes, root);
    }
    expect_range(what, data, 0, bytes, [&](std::size_t i) { return pattern(root, i); });
  }

  // Rank 0 arrives late; every other rank must wait for it in the barrier.
  void barrier() {
    constexpr auto kDelay = std::chrono::milliseconds(500);
    comm_.barrier();  // line the ranks up first
    const auto t0 = std::chrono::steady_clock::now();
    if (rank_ == 0) std::this_thread::sleep_for(kDelay);
    comm_.barrier();
    const auto waited = std::chrono::steady_clock::now() - t0;
    ++checks_;
    if (rank_ != 0 && waited < kDelay / 2) {
      ++failures_;
      fmt::print(stderr,
                 "nccl_selftest: rank {}: barrier returned after {} ms, before rank 0 came\n",
                 rank_, std::chrono::duration_cast<std::chrono::milliseconds>(waited).count());
    }
  }

  void seconds_in_collectives() {
    ++checks_;
    if (!(comm_.seconds_in_collectives() > 0)) {
      ++failures_;
      fmt::print(stderr, "nccl_selftest: rank {}: seconds_in_collectives() is {}\n", rank_,
                 comm_.seconds_in_collectives());
    }
  }

 private:
  static const char* where(bool on_device) { return on_device ? " (device)" : " (host)"; }

  NcclCommunicator& comm_;
  int rank_, world_;
  int failures_ = 0, checks_ = 0;
};

void run_all(SelfTest& t, int world) {
  int salt = 0;
  for (bool on_device : {false, true}) {
    // Small, large (grows the staging buffer), then small again (reuses it).
    for (std::size_t n :
         {std::size_t{1}, std::size_t{1001}, std::size_t{3'000'017}, std::size_t{5}})
      t.all_reduce(n, ++salt, on_device);
    for (std::size_t n : {std::size_t{1}, std::size_t{777}, std::size_t{1'000'003}})
      t.all_reduce_double(n, ++salt, on_device);
    const std::size_t w = static_cast<std::size_t>(world);
    const std::vector<std::pair<std::string, std::vector<std::size_t>>> splits = {
        {"even", proportional_offsets(1000 * w, world, 0)},
        {"uneven n*r/W", proportional_offsets(1000 * w + 1, world, 0)},
        {"uneven n*r/W large", proportional_offsets(2'000'003, world, 0)},
        {"uneven, shifted by 5", proportional_offsets(10 * w + 3, world, 5)},
        {"even, shifted by 2", proportional_offsets(10 * w, world, 2)},
        {"rank 0 empty", lopsided_offsets(20 + w, world)},
    };
    for (const auto& [name, offsets] : splits) {
      t.reduce_scatter(name, offsets, ++salt, {on_device, 0});
      t.all_gather(name, offsets, ++salt, on_device);
      // Buckets inside one range, across several, and one over the whole buffer.
      if (on_device) {
        for (std::size_t bucket : {std::size_t{3}, std::size_t{1001}, offsets.back() + 3})
          t.reduce_scatter(name, offsets, ++salt, {true, bucket});
        for (std::size_t element_bytes : {std::size_t{2}, std::size_t{4}})
          t.all_gather_started(name, offsets, ++salt, element_bytes);
      }
    }
    for (int root = 0; root < world; ++root)
      for (std::size_t bytes : {std::size_t{1}, std::size_t{1001}, std::size_t{1 << 20}})
        t.broadcast(bytes, root, on_device);
  }
  t.barrier();
  t.seconds_in_collectives();
}

// FSDP/HSDP's groups: consecutive pairs (shard groups) and equal positions in the pairs
// (replicas), split from the world communicator; each runs the device collectives FSDP uses over
// its own ranks. Adds its checks and failures to `t`'s counts through the returned pair.
std::pair<int, int> run_splits(NcclCommunicator& world) {
  int checks = 0, failures = 0;
  for (const bool pairs : {true, false}) {
    const int color = pairs ? world.rank() / 2 : world.rank() % 2;
    std::unique_ptr<tandem::dist::Communicator> split = world.split(color, world.rank());
    auto& group = dynamic_cast<NcclCommunicator&>(*split);
    SelfTest t(group);
    const int w = group.world_size();
    int salt = pairs ? 1000 : 2000;
    t.all_reduce(1001, ++salt, true);
    for (const auto& offsets : {proportional_offsets(100 * static_cast<std::size_t>(w) + 1, w, 0),
                                lopsided_offsets(7 + static_cast<std::size_t>(w), w)}) {
      t.reduce_scatter("in a split", offsets, ++salt, {true, 5});
      t.all_gather_started("in a split", offsets, ++salt, 2);
    }
    checks += t.checks();
    failures += t.failures();
  }
  return {checks, failures};
}

}  // namespace

// Rank 0 waits for a gather nobody else joins; the others sleep for a minute, then leave.
int peer_never_joins(NcclCommunicator& comm) {
  if (comm.rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 3;
  }
  const std::size_t w = static_cast<std::size_t>(comm.world_size());
  std::vector<float> data(8 * w, 1.0f);
  DeviceBuffer<float> d(data);
  const std::vector<std::size_t> offsets = proportional_offsets(8 * w, comm.world_size(), 0);
  cudaStream_t reader = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), "cudaStreamCreate");
  comm.start_all_gather_device(d.get(), offsets.data(), sizeof(float), nullptr);
  comm.order_after_device_collectives(comm.mark_device_collectives(), reader);
  fmt::print(stderr, "nccl_selftest: rank 0 waits for a gather the other ranks never join\n");
  check_cuda(cudaStreamSynchronize(reader), "cudaStreamSynchronize");
  fmt::print(stderr, "nccl_selftest: the wait returned (it must not)\n");
  return 4;
}

int main(int argc, char** argv) {
  std::unique_ptr<NcclCommunicator> comm;
  try {
    comm = std::make_unique<NcclCommunicator>();
  } catch (const std::exception& e) {
    fmt::print(stderr, "nccl_selftest: {}\n", e.what());
    return 2;
  }
  if (argc > 1 && std::string(argv[1]) == "--peer-never-joins") return peer_never_joins(*comm);
  try {
    SelfTest t(*comm);
    run_all(t, comm->world_size());
    const auto [split_checks, split_failures] = run_splits(*comm);
    double failed = t.failures() + split_failures;
    comm->all_reduce_sum(&failed, 1);
    if (comm->rank() == 0)
      fmt::print("nccl_selftest: {} ranks, {} checks per rank, {} failed in total\n",
                 comm->world_size(), t.checks() + split_checks, static_cast<int>(failed));
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    comm->abort(fmt::format("nccl_selftest: error: {}", e.what()), 2);
  }
}
