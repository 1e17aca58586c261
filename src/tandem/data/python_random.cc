#include "tandem/data/python_random.h"

#include <bit>

#include "tandem/core/error.h"

namespace tandem::data {
namespace {

constexpr std::size_t kN = 624;
constexpr std::size_t kM = 397;

}  // namespace

PythonRandom::PythonRandom(std::uint64_t seed) {
  // init_genrand(19650218), then init_by_array(key): the reference MT19937 seeding CPython uses.
  mt_[0] = 19650218u;
  for (std::size_t i = 1; i < kN; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  std::vector<std::uint32_t> key{static_cast<std::uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<std::uint32_t>(seed >> 32));
  std::size_t i = 1, j = 0;
  for (std::size_t k = std::max(kN, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] +
             static_cast<std::uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (std::size_t k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) -
             static_cast<std::uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  index_ = kN;
}

std::uint32_t PythonRandom::next() {
  if (index_ >= kN) {
    for (std::size_t k = 0; k < kN; ++k) {
      const std::uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  std::uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

std::uint32_t PythonRandom::getrandbits(int k) {
  TANDEM_CHECK(k >= 1 && k <= 32, "getrandbits: k = {} outside 1..32", k);
  return next() >> (32 - k);
}

std::uint64_t PythonRandom::randbelow(std::uint64_t n) {
  TANDEM_CHECK(n >= 1 && n < (std::uint64_t{1} << 32), "randbelow: n = {} outside 1..2^32-1", n);
  const int k = std::bit_width(n);  // n.bit_length()
  std::uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<std::size_t> PythonRandom::shuffled_range(std::size_t n) {
  std::vector<std::size_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = i;
  for (std::size_t i = n; i-- > 1;) std::swap(out[i], out[randbelow(i + 1)]);
  return out;
}

}  // namespace tandem::data
