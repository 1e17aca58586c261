// numpy's random machinery, bit-exact: SeedSequence seeding, the PCG64 bit generator (XSL-RR
// 128/64) and Generator.shuffle of a uint32 array (Fisher-Yates from the end with masked
// rejection). Parity with numpy is checked by tests/data against tools/make_data_fixtures.py
// output.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem::data {

using u128 = unsigned __int128;

// numpy.random.SeedSequence(entropy) without spawn keys; entropy is a non-negative integer of
// up to 128 bits (numpy splits it into 32-bit words, least significant first).
std::array<std::uint64_t, 4> seed_sequence_state4(u128 entropy);

class Pcg64 {
 public:
  explicit Pcg64(u128 seed);  // numpy.random.PCG64(seed): seeded through SeedSequence
  std::uint64_t next_u64();
  std::uint32_t next_u32();  // numpy buffers the upper half of a 64-bit draw for the next call
  // numpy's random_interval: uniform in [0, max] by masked rejection.
  std::uint64_t random_interval(std::uint64_t max);

 private:
  u128 state_ = 0;
  u128 increment_ = 0;
  bool has_u32_ = false;
  std::uint32_t buffered_u32_ = 0;
};

// Generator(PCG64(seed)).shuffle(values), in place.
void numpy_shuffle(std::span<std::uint32_t> values, u128 seed);

// OLMo-core's global order for one epoch: arange(n) shuffled with seed + epoch; with chunk > 1 the
// chunk indices arange(n // chunk) are shuffled and expanded c -> c*chunk + [0, chunk).
// shuffle == false gives arange (OLMo-core's shuffle=False).
std::vector<std::uint32_t> global_instance_order(std::uint64_t num_instances, std::uint64_t seed,
                                                 std::uint64_t epoch, std::uint64_t chunk,
                                                 bool shuffle = true);

}  // namespace tandem::data
