// Python's `random` module, bit-exact where OLMo-core uses it: random.Random(seed) for an integer
// seed (MT19937 seeded by init_by_array over the seed's 32-bit words, least significant first),
// getrandbits(k <= 32) and shuffle (Fisher-Yates from the end, _randbelow by rejection).
// OLMo-core's source_permutation_seed shuffles the dataset's files with it. Parity with CPython is
// checked by tests/data against tools/make_packed_fixtures.py output.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace tandem::data {

class PythonRandom {
 public:
  explicit PythonRandom(std::uint64_t seed);  // random.Random(seed), seed = abs(the int)
  std::uint32_t getrandbits(int k);           // 1 <= k <= 32
  std::uint64_t randbelow(std::uint64_t n);   // 1 <= n < 2^32
  // random.shuffle(list(range(n))): the permutation it leaves.
  std::vector<std::size_t> shuffled_range(std::size_t n);

 private:
  std::uint32_t next();
  std::array<std::uint32_t, 624> mt_{};
  std::size_t index_ = 624;
};

}  // namespace tandem::data
