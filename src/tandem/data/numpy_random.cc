#include "tandem/data/numpy_random.h"

#include <numeric>

#include "tandem/core/error.h"

namespace tandem::data {
namespace {

// Constants of numpy's SeedSequence (bit_generator.pyx), itself after M.E. O'Neill's seed_seq_fe.
constexpr std::uint32_t kInitA = 0x43b0d7e5u;
constexpr std::uint32_t kMultA = 0x931e8875u;
constexpr std::uint32_t kInitB = 0x8b51f9ddu;
constexpr std::uint32_t kMultB = 0x58f38dedu;
constexpr std::uint32_t kMixMultL = 0xca01f9ddu;
constexpr std::uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

std::uint32_t hashmix(std::uint32_t value, std::uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

std::uint32_t mix(std::uint32_t x, std::uint32_t y) {
  std::uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

constexpr u128 kPcgMultiplier =
    (static_cast<u128>(2549297995355413924ull) << 64) | 4865540595714422341ull;

}  // namespace

std::array<std::uint64_t, 4> seed_sequence_state4(u128 entropy_value) {
  std::vector<std::uint32_t> entropy;
  if (entropy_value == 0) entropy.push_back(0);
  while (entropy_value != 0) {
    entropy.push_back(static_cast<std::uint32_t>(entropy_value));
    entropy_value >>= 32;
  }
  std::array<std::uint32_t, kPoolSize> pool{};
  std::uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0u, hash_const);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (std::size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(entropy[src], hash_const));

  // generate_state(4, uint64): eight 32-bit words, paired little-endian into 64-bit words.
  std::array<std::uint32_t, 8> words{};
  std::uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    std::uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> kXShift;
    words[i] = v;
  }
  std::array<std::uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<std::uint64_t>(words[2 * i]) |
             (static_cast<std::uint64_t>(words[2 * i + 1]) << 32);
  return out;
}

Pcg64::Pcg64(u128 seed) {
  auto s = seed_sequence_state4(seed);
  u128 initstate = (static_cast<u128>(s[0]) << 64) | s[1];
  u128 initseq = (static_cast<u128>(s[2]) << 64) | s[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  increment_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMultiplier + increment_;
  state_ += initstate;
  state_ = state_ * kPcgMultiplier + increment_;
}

std::uint64_t Pcg64::next_u64() {
  state_ = state_ * kPcgMultiplier + increment_;
  std::uint64_t folded =
      static_cast<std::uint64_t>(state_ >> 64) ^ static_cast<std::uint64_t>(state_);
  unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (folded >> rot) | (folded << ((64 - rot) & 63));
}

std::uint32_t Pcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return buffered_u32_;
  }
  std::uint64_t v = next_u64();
  has_u32_ = true;
  buffered_u32_ = static_cast<std::uint32_t>(v >> 32);
  return static_cast<std::uint32_t>(v);
}

std::uint64_t Pcg64::random_interval(std::uint64_t max) {
  if (max == 0) return 0;
  std::uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  std::uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_u32() & mask)) > max) {
    }
  } else {
    while ((value = (next_u64() & mask)) > max) {
    }
  }
  return value;
}

void numpy_shuffle(std::span<std::uint32_t> values, u128 seed) {
  Pcg64 rng(seed);
  for (std::size_t i = values.size(); i-- > 1;) {
    std::size_t j = rng.random_interval(i);
    std::swap(values[i], values[j]);
  }
}

std::vector<std::uint32_t> global_instance_order(std::uint64_t num_instances, std::uint64_t seed,
                                                 std::uint64_t epoch, std::uint64_t chunk,
                                                 bool shuffle) {
  TANDEM_CHECK(num_instances < 0xffffffffull,
               "{} instances do not fit the uint32 global index (OLMo-core's limit)",
               num_instances);
  TANDEM_CHECK(chunk >= 1, "chunk size must be at least 1");
  TANDEM_CHECK(epoch >= 1, "epochs are 1-based, got epoch {}", epoch);
  u128 rng_seed = static_cast<u128>(seed) + epoch;
  if (chunk == 1) {
    std::vector<std::uint32_t> order(num_instances);
    std::iota(order.begin(), order.end(), 0u);
    if (shuffle) numpy_shuffle(order, rng_seed);
    return order;
  }
  std::vector<std::uint32_t> chunks(num_instances / chunk);
  std::iota(chunks.begin(), chunks.end(), 0u);
  if (shuffle) numpy_shuffle(chunks, rng_seed);
  std::vector<std::uint32_t> order;
  order.reserve(chunks.size() * chunk);
  for (std::uint32_t c : chunks)
    for (std::uint64_t k = 0; k < chunk; ++k)
      order.push_back(static_cast<std::uint32_t>(c * chunk + k));
  return order;
}

}  // namespace tandem::data
