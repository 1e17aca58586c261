// Embedding lookup and its deterministic gradient. The backward owns each table row in one block
// (per column chunk): the token indices are stably sorted by id on the device (an LSD radix sort
// over integer keys, so its result has no run-to-run freedom), and a row's gradient is the running
// sum dtable[id] += dout[t] over its tokens in token order, exactly the CPU kernel's order, with no
// floating-point atomics and no round trip through the host.
#include <algorithm>
#include <utility>

#include "tandem/kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

using detail::bf16;

constexpr int kThreads = 256;
// The backward's blocks along the sorted positions (each strides over them): enough to fill the
// GPU several times over without a block per token.
constexpr i64 kMaxRunBlocks = 4096;

template <typename Tin, typename Tout>
__global__ void embedding_forward_kernel(const i64* ids, const Tin* table, Tout* out, i64 T_, i64 d,
                                         i64 V, DeviceError* error) {
  for (i64 e = blockIdx.x * i64{blockDim.x} + threadIdx.x; e < T_ * d;
       e += i64{gridDim.x} * blockDim.x) {
    const i64 t = e / d, c = e % d;
    const i64 id = ids[t];
    if (id < 0 || id >= V) {
      if (c == 0) detail::report(error, kBadEmbeddingId, id, t);
      continue;
    }
    detail::move(out, e, table, id * d + c);
  }
}

// ---- the backward's sort: token indices ordered by id, ties in token order ----

// One radix digit per pass; a pass's block holds one tile of keys, one per thread, and one count
// per digit value.
constexpr int kRadixBits = 8;
constexpr int kBuckets = 1 << kRadixBits;
constexpr int kSortTile = kBuckets;
constexpr int kScanThreads = 256;

// keys[t] = ids[t] and tokens[t] = t. An id outside [0, V) is reported and becomes V, which sorts
// after every real id and adds nothing.
__global__ void sort_keys_kernel(const i64* ids, i64 T_, i64 V, int* keys, int* tokens,
                                 DeviceError* error) {
  for (i64 t = blockIdx.x * i64{blockDim.x} + threadIdx.x; t < T_;
       t += i64{gridDim.x} * blockDim.x) {
    const i64 id = ids[t];
    const bool bad = id < 0 || id >= V;
    if (bad) detail::report(error, kBadEmbeddingId, id, t);
    keys[t] = static_cast<int>(bad ? V : id);
    tokens[t] = static_cast<int>(t);
  }
}

__device__ __forceinline__ int digit_of(int key, int shift) {
  return (key >> shift) & (kBuckets - 1);
}

// counts[digit * tiles + tile] = how many of the tile's keys have that digit (integer counts: the
// same whatever order the shared atomics land in).
__global__ void radix_count_kernel(const int* keys, i64 T_, int shift, int* counts) {
  __shared__ int count[kBuckets];
  count[threadIdx.x] = 0;
  __syncthreads();
  const i64 i = blockIdx.x * i64{kSortTile} + threadIdx.x;
  if (i < T_) atomicAdd(&count[digit_of(keys[i], shift)], 1);
  __syncthreads();
  counts[i64{threadIdx.x} * gridDim.x + blockIdx.x] = count[threadIdx.x];
}

// Exclusive prefix sum of a warp's values (lane order), through shuffles.
__device__ __forceinline__ int warp_exclusive_scan(int v) {
  const int lane = threadIdx.x & 31;
  int inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_sync(0xffffffffu, inclusive, lane >= o ? lane - o : lane);
    if (lane >= o) inclusive += up;
  }
  return inclusive - v;
}

// counts[] replaced by its exclusive prefix sum, in one block: each thread sums a contiguous
// chunk, the chunk sums are scanned, each chunk is rewritten from its offset. In digit-major
// order this gives every (digit, tile) the first position of its keys in the pass's output.
__global__ void exclusive_scan_kernel(int* counts, i64 n) {
  __shared__ int warp_totals[kScanThreads / 32];
  const i64 per = (n + kScanThreads - 1) / kScanThreads;
  const i64 begin = std::min(n, threadIdx.x * per), end = std::min(n, begin + per);
  int sum = 0;
  for (i64 i = begin; i < end; ++i) sum += counts[i];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int in_warp = warp_exclusive_scan(sum);
  if (lane == 31) warp_totals[warp] = in_warp + sum;
  __syncthreads();
  if (warp == 0) {
    const int total = lane < kScanThreads / 32 ? warp_totals[lane] : 0;
    const int before = warp_exclusive_scan(total);
    if (lane < kScanThreads / 32) warp_totals[lane] = before;
  }
  __syncthreads();
  int run = warp_totals[warp] + in_warp;
  for (i64 i = begin; i < end; ++i) {
    const int c = counts[i];
    counts[i] = run;
    run += c;
  }
}

// Each key (and its token) to its digit's offset for the tile plus its rank among the tile's
// earlier keys of that digit: a stable pass.
__global__ void radix_scatter_kernel(const int* keys, const int* tokens, i64 T_, int shift,
                                     const int* offsets, int* keys_out, int* tokens_out) {
  __shared__ int digits[kSortTile];
  const i64 i = blockIdx.x * i64{kSortTile} + threadIdx.x;
  const int mine = i < T_ ? digit_of(keys[i], shift) : -1;
  digits[threadIdx.x] = mine;
  __syncthreads();
  if (i >= T_) return;
  int rank = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) rank += digits[j] == mine;
  const i64 to = offsets[i64{mine} * gridDim.x + blockIdx.x] + rank;
  keys_out[to] = keys[i];
  tokens_out[to] = tokens[i];
}

// Block (k, column chunk), k striding over the sorted positions: where position k starts an id's
// run, its columns get that id's rows added in token order. The run's token indices come through
// shared memory a tile at a time (one coalesced read, and a known count for the adds' loop, so
// that the loads of a long run, such as padding's, are in flight together).
template <typename T>
__global__ void embedding_backward_kernel(const int* keys, const int* tokens, i64 T_, const T* dout,
                                          float* dtable, i64 d, i64 V) {
  __shared__ int run_tokens[kThreads];
  __shared__ int run_length;
  const i64 c = blockIdx.y * i64{kThreads} + threadIdx.x;
  for (i64 k = blockIdx.x; k < T_; k += gridDim.x) {
    const int id = keys[k];
    if (id >= V || (k > 0 && keys[k - 1] == id)) continue;  // the whole block's choice
    float acc = c < d ? dtable[id * d + c] : 0.0f;
    for (i64 m0 = k;; m0 += kThreads) {
      // The run is a prefix of the tile: its last thread, or thread 0 when the tile is past it,
      // writes the count.
      const i64 m = m0 + threadIdx.x;
      const bool in_run = m < T_ && keys[m] == id;
      __syncthreads();  // the previous tile has been read
      if (in_run) run_tokens[threadIdx.x] = tokens[m];
      if (in_run && (threadIdx.x == kThreads - 1 || m + 1 >= T_ || keys[m + 1] != id))
        run_length = static_cast<int>(threadIdx.x) + 1;
      if (threadIdx.x == 0 && !in_run) run_length = 0;
      __syncthreads();
      const int n = run_length;
      if (c < d)
        for (int j = 0; j < n; ++j) acc += detail::load(dout, i64{run_tokens[j]} * d + c);
      if (n < kThreads) break;
    }
    if (c < d) dtable[id * d + c] = acc;
  }
}

}  // namespace

void embedding_forward(Elem table_t, Elem out_t, const i64* ids, const void* table, void* out,
                       i64 T, i64 d, i64 V, DeviceError* error, cudaStream_t stream) {
  const unsigned grid = detail::grid_for(T * d, kThreads);
  if (table_t == Elem::f32 && out_t == Elem::f32)
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const float*>(table), static_cast<float*>(out), T, d, V, error);
  else if (table_t == Elem::f32)
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const float*>(table), static_cast<bf16*>(out), T, d, V, error);
  else
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(
        ids, static_cast<const bf16*>(table), static_cast<bf16*>(out), T, d, V, error);
  check_launch("embedding_forward");
}

void embedding_backward(Elem dout_t, const i64* ids, const void* dout, float* dtable, i64 T, i64 d,
                        i64 V, void* scratch, DeviceError* error, cudaStream_t stream) {
  if (T == 0 || d == 0) return;
  const i64 tiles = (T + kSortTile - 1) / kSortTile;
  int* keys = static_cast<int*>(scratch);
  int* keys_out = keys + T;
  int* tokens = keys + 2 * T;
  int* tokens_out = keys + 3 * T;
  int* counts = keys + 4 * T;
  sort_keys_kernel<<<detail::grid_for(T, kThreads), kThreads, 0, stream>>>(ids, T, V, keys, tokens,
                                                                           error);
  check_launch("embedding_backward (keys)");
  // Passes over the bits of V itself, the largest key (a bad id's).
  for (int shift = 0; (V >> shift) > 0; shift += kRadixBits) {
    radix_count_kernel<<<static_cast<unsigned>(tiles), kSortTile, 0, stream>>>(keys, T, shift,
                                                                               counts);
    exclusive_scan_kernel<<<1, kScanThreads, 0, stream>>>(counts, tiles * kBuckets);
    radix_scatter_kernel<<<static_cast<unsigned>(tiles), kSortTile, 0, stream>>>(
        keys, tokens, T, shift, counts, keys_out, tokens_out);
    check_launch("embedding_backward (sort)");
    std::swap(keys, keys_out);
    std::swap(tokens, tokens_out);
  }
  const dim3 grid(static_cast<unsigned>(std::min<i64>(T, kMaxRunBlocks)),
                  static_cast<unsigned>((d + kThreads - 1) / kThreads));
  if (dout_t == Elem::f32)
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(
        keys, tokens, T, static_cast<const float*>(dout), dtable, d, V);
  else
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(
        keys, tokens, T, static_cast<const bf16*>(dout), dtable, d, V);
  check_launch("embedding_backward");
}

}  // namespace tandem::kernels::cuda
