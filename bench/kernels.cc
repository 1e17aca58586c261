// Google Benchmark of the CPU kernels at the shapes of a ~50M-parameter OLMo 3 config at seq 512
// (d_model 512, 8 heads of 64, vocab 100352). Reports achieved GFLOP/s ("FLOPS" counter).
// Run with OMP_NUM_THREADS set to the cores to use.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tandem/core/ignore_index.h"
#include "tandem/kernels/cpu/cross_entropy_chunked.h"
#include "tandem/kernels/cpu/ops.h"

namespace {

using namespace tandem::kernels::cpu;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

constexpr i64 kHeads = 8, kHeadDim = 64, kModel = 512, kVocab = 100352;

// Visible (query, key) pairs of one head: causal with an optional window.
double visible_pairs(i64 T, i64 window) {
  double pairs = 0;
  for (i64 i = 0; i < T; ++i) pairs += (window > 0 ? std::min<i64>(window, i + 1) : i + 1);
  return pairs;
}

struct AttentionData {
  i64 B, T, window;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  AttentionData(i64 b, i64 t, i64 w) : B(b), T(t), window(w) {
    const std::size_t n = B * T * kHeads * kHeadDim;
    q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
    dout = random_floats(n, 4);
    out.resize(n), dq.resize(n), dk.resize(n), dv.resize(n), lse.resize(B * kHeads * T);
  }
  void forward() {
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, kHeads, kHeads,
                      kHeadDim, window, 0.125f);
  }
  void backward() {
    attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                       dk.data(), dv.data(), B, T, kHeads, kHeads, kHeadDim, window, 0.125f);
  }
  // Matmul FLOPs over visible pairs only: forward QK^T and PV; backward five products.
  double forward_flops() const { return 4.0 * kHeadDim * visible_pairs(T, window) * kHeads * B; }
  double backward_flops() const { return 2.5 * forward_flops(); }
};

void BM_AttentionForward(benchmark::State& state) {
  AttentionData data(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) data.forward();
  state.counters["FLOPS"] =
      benchmark::Counter(data.forward_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackward(benchmark::State& state) {
  AttentionData data(state.range(0), state.range(1), state.range(2));
  data.forward();
  for (auto _ : state) data.backward();
  state.counters["FLOPS"] =
      benchmark::Counter(data.backward_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

// Args: batch, seq, window (4096 > seq: full causal, as the bench config's full layers).
BENCHMARK(BM_AttentionForward)
    ->Args({4, 512, 4096})
    ->Args({4, 512, 128})
    ->Args({1, 4096, 4096})
    ->Args({1, 4096, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionBackward)
    ->Args({4, 512, 4096})
    ->Args({4, 512, 128})
    ->Args({1, 4096, 4096})
    ->Args({1, 4096, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

struct CrossEntropyData {
  i64 N;
  std::vector<float> hidden, w, dhidden, dw;
  std::vector<std::int64_t> labels;
  explicit CrossEntropyData(i64 n) : N(n) {
    hidden = random_floats(N * kModel, 5), w = random_floats(kVocab * kModel, 6, 0.02f);
    dhidden.resize(N * kModel), dw.assign(kVocab * kModel, 0.0f);
    std::mt19937_64 gen(7);
    for (i64 i = 0; i < N; ++i)
      labels.push_back(i % 512 == 511 ? tandem::core::kIgnoreIndex : gen() % kVocab);
  }
};

// lm_head + cross-entropy over `tokens` positions, `chunk_rows` rows of logits at a time;
// forward only, or forward + backward (dhidden and dW).
void run_cross_entropy(benchmark::State& state, i64 tokens, i64 chunk_rows, bool backward) {
  CrossEntropyData data(tokens);
  for (auto _ : state) {
    auto r = lm_head_cross_entropy_chunked(
        data.hidden.data(), data.w.data(), data.labels.data(), data.N, kModel, kVocab, 1e-5f,
        backward ? 1.0f / data.N : 1.0f, backward ? data.dhidden.data() : nullptr,
        backward ? data.dw.data() : nullptr, chunk_rows);
    benchmark::DoNotOptimize(r);
  }
  state.counters["FLOPS"] = benchmark::Counter((backward ? 6.0 : 2.0) * data.N * kVocab * kModel,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CrossEntropyForward(benchmark::State& state) {
  run_cross_entropy(state, state.range(0), lm_head_chunk_rows(kVocab), false);
}

void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  run_cross_entropy(state, state.range(0), lm_head_chunk_rows(kVocab), true);
}

// Tokens: 512 (one sequence) and 2048 (four).
BENCHMARK(BM_CrossEntropyForward)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CrossEntropyForwardBackward)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Forward + backward over 2048 tokens with a given number of rows per chunk (the chunk size
// trades logits memory, chunk x V floats, against rereading and rewriting dW once per chunk).
void BM_CrossEntropyChunkRows(benchmark::State& state) {
  run_cross_entropy(state, 2048, state.range(0), true);
}
BENCHMARK(BM_CrossEntropyChunkRows)
    ->Arg(83)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The fp32 GEMM ceiling at a transformer-like shape, for comparison.
void BM_Gemm(benchmark::State& state) {
  const i64 M = state.range(0), N = state.range(1), K = state.range(2);
  auto a = random_floats(M * K, 1), b = random_floats(N * K, 2);
  std::vector<float> c(M * N);
  for (auto _ : state)
    gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Gemm)
    ->Args({2048, 1408, 512})
    ->Args({64, 64, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
