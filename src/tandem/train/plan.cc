#include "tandem/train/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/dist/device_gradient_reduction.h"
#include "tandem/dist/flat_split.h"
#include "tandem/io/config.h"
#include "tandem/kernels/backend.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/model/parameters.h"
#include "tandem/model/sharded_parameters.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

using model::Recompute;

constexpr double kGB = 1e9;
// The CPU kernels' fused cross-entropy works on chunks of logits of at most 32 MiB
// (kernels/cpu/cross_entropy.cc); the CUDA backend's sizes are in kernels/cuda/scratch_sizes.h.
constexpr double kCrossEntropyChunkBytes = 32.0 * 1024 * 1024;
// MPI communicator: collectives move at most 2^20 floats per call; the rank that sums a range
// gathers every rank's chunk of it (dist/mpi_communicator.cc).
constexpr double kMpiChunkFloats = 1 << 20;

// Parameter elements of the FSDP units in the order the forward uses them: the embedding, each
// block, the head (final norm + lm_head), as laid out in the flat buffer (alignment included).
struct Units {
  double embeddings = 0;
  std::vector<double> blocks;
  double head = 0;
  double total = 0;  // the whole flat buffer
};

Units parameter_units(const model::ModelConfig& c) {
  const model::ParameterLayout layout(c);
  Units u;
  u.blocks.assign(static_cast<std::size_t>(c.n_layers), 0.0);
  auto end_of = [&](const std::string& name) {
    const model::ParameterEntry& e = layout.entry(name);
    return static_cast<double>(e.offset + e.numel);
  };
  auto begin_of = [&](const std::string& name) {
    return static_cast<double>(layout.entry(name).offset);
  };
  u.embeddings = end_of("embeddings.weight") - begin_of("embeddings.weight");
  for (std::int64_t l = 0; l < c.n_layers; ++l)
    u.blocks[static_cast<std::size_t>(l)] =
        end_of(model::block_param(l, "feed_forward_norm.weight")) -
        begin_of(model::block_param(l, "attention.w_q.weight"));
  u.head = end_of("lm_head.w_out.weight") - begin_of("lm_head.norm.weight");
  u.total = static_cast<double>(layout.total());
  return u;
}

// ZeRO-1 (dist/zero1.cc): rank r's Adam moments cover the parameter elements (alignment gaps
// excluded) inside its even share of the flat buffer (dist/flat_split.h); the largest share. Also
// what the largest writer of a ddp or zero1 checkpoint writes of the weights and moments.
double zero1_moment_elements(const model::ParameterLayout& layout, int W) {
  std::vector<std::pair<std::int64_t, std::int64_t>> placed;
  for (const model::ParameterEntry& e : layout.entries()) placed.emplace_back(e.offset, e.numel);
  const std::vector<std::int64_t> offsets =
      dist::split_evenly(static_cast<std::int64_t>(layout.total()), W);
  std::int64_t most = 0;
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
    std::int64_t mine = 0;
    for (const dist::RunInRange& run : dist::runs_in_range(placed, offsets[r], offsets[r + 1]))
      mine += run.length;
    most = std::max(most, mine);
  }
  return static_cast<double>(most);
}

// Seconds of a ring all-gather or reduce-scatter of `bytes` (the whole tensor) over n ranks.
double ring_seconds(double bytes, int n, double bandwidth, double latency) {
  if (n <= 1) return 0.0;
  return bytes * (n - 1) / n / bandwidth + (n - 1) * latency;
}

double peak_flops(const PlanInput& in) {
  return in.bf16 ? in.device.peak_flops_bf16 : in.device.peak_flops_fp32;
}

// Per token: a block's matmul parameters (q, k, v, o and the SwiGLU MLP's three; 2 FLOPs each
// forward), its attention forward over min(window, T) keys (window 0: all T), and what `recompute`
// runs again in its backward (full: the whole block's forward; selective: the MLP's).
double block_matmul_params(const model::ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  return 2 * d * static_cast<double>(c.q_width()) + 2 * d * static_cast<double>(c.kv_width()) +
         3 * d * static_cast<double>(c.hidden_size);
}
double attention_forward_flops(const model::ModelConfig& c, std::int64_t window, std::int64_t T) {
  return 4 * static_cast<double>(c.n_heads * c.head_dim) *
         static_cast<double>(window == 0 ? T : std::min(window, T));
}
double recomputed_flops(const model::ModelConfig& c, std::int64_t window, std::int64_t T,
                        Recompute recompute) {
  if (recompute == Recompute::kFull)
    return 2 * block_matmul_params(c) + attention_forward_flops(c, window, T);
  if (recompute == Recompute::kSelective)
    return 2 * 3 * static_cast<double>(c.d_model) * static_cast<double>(c.hidden_size);
  return 0.0;
}

// Backward FLOPs per token of each parameter unit, in model::parameter_units' order (the
// embedding, each block, the head): what the backward executes, recompute's repeated forward
// included, before that unit's gradients are complete. Over all units they add up to the
// executed FLOPs less the forward's.
std::vector<double> unit_backward_flops(const model::ModelConfig& c, std::int64_t T,
                                        Recompute recompute) {
  std::vector<double> flops{0.0};  // the embedding's gradient is a scatter, no matmul
  for (std::int64_t w : c.layer_windows)
    flops.push_back(2 * 2 * block_matmul_params(c) + 2 * attention_forward_flops(c, w, T) +
                    recomputed_flops(c, w, T, recompute));
  flops.push_back(2 * 2 * static_cast<double>(c.d_model) *
                  static_cast<double>(c.embedding_size));  // lm_head
  return flops;
}

// The gradient sums of ddp (all-reduce) and zero1 (reduce-scatter) on a GPU backend
// (dist/device_gradient_reduction.h): the trainer's buckets, each summed on the communicator's
// stream once the step's last backward has completed its units, one after another. What runs
// past the end of that backward is exposed: at least the sums of the buckets of block 0 and the
// embedding, which the backward completes last. Assumes the sums do not slow the backward down.
struct BucketedSums {
  double seconds = 0;  // every bucket's sum, back to back
  double bytes = 0;    // sent per rank
  double exposed = 0;  // after the backward's end
  int buckets = 0;
};

// Seconds into the step's last backward at which each unit's backward ends (model::
// parameter_units' order; the backward runs from the head down to the embedding, which ends it),
// each unit's share of the backward's FLOPs at the assumed efficiency.
std::vector<double> unit_backward_ends(const PlanInput& in, double micro_batch_tokens) {
  const std::vector<double> flops = unit_backward_flops(in.model, in.sequence_length, in.recompute);
  const double flop_rate = peak_flops(in) * in.efficiency;
  std::vector<double> ends(flops.size());
  double t = 0;
  for (std::size_t u = flops.size(); u-- > 0;) {
    t += flops[u] * micro_batch_tokens / flop_rate;
    ends[u] = t;
  }
  return ends;
}

BucketedSums bucketed_gradient_sums(const PlanInput& in, double micro_batch_tokens,
                                    double bytes_per_element, double bandwidth) {
  const std::vector<model::ParameterUnit> units =
      model::parameter_units(model::ParameterLayout(in.model));
  const std::vector<double> done = unit_backward_ends(in, micro_batch_tokens);
  const double t = done.front();  // the backward's end
  const double bucket_bytes = in.dist.bucket_mb * 1024 * 1024;
  const auto buckets = dist::plan_gradient_buckets(
      units, std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_bytes / 4)));
  const int W = in.world_size;
  BucketedSums out;
  double free_at = 0;  // when the communicator's stream is done with the previous bucket
  for (const dist::GradientBucket& b : buckets) {
    const double bytes = bytes_per_element * static_cast<double>(b.size());
    const double s = ring_seconds(bytes, W, bandwidth, in.device.collective_step_latency);
    free_at = std::max(done[static_cast<std::size_t>(b.first_unit)], free_at) + s;
    out.seconds += s;
    out.bytes += W > 1 ? bytes * (W - 1) / W : 0.0;
  }
  out.exposed = std::max(0.0, free_at - t);
  out.buckets = static_cast<int>(buckets.size());
  return out;
}

// HSDP's replica sums on a GPU backend (dist/fsdp.h): each unit's range of the gradient shard
// (ceil(unit / S) elements) all-reduced across the replicas, on their communicator's stream, once
// the step's last backward has added the unit's reduce-scatter into the shard. That add waits for
// the unit's pool buffer to be taken again: a block's by the block `block_buffers` later in the
// backward, the head's by the embedding; the rest (the first blocks', the embedding's) at the
// backward's end. The sums run one after another in the order of their adds; what runs past the
// backward's end is exposed. The reduce-scatters are taken as done by the time of the add.
BucketedSums replica_sums_in_backward(const PlanInput& in, const Units& units,
                                      double micro_batch_tokens, int S, int replicas,
                                      double bandwidth, int block_buffers) {
  const std::vector<double> ends = unit_backward_ends(in, micro_batch_tokens);
  const std::size_t L = units.blocks.size();
  // A unit's backward begins where the one before it in the backward (u + 1) ends.
  auto begins = [&](std::size_t u) { return u + 1 < ends.size() ? ends[u + 1] : 0.0; };
  const double end = ends.front();
  std::vector<std::pair<double, double>> adds;  // (when, elements of this rank's range)
  for (std::size_t u = 1; u <= L; ++u) {
    const std::size_t taker = u > static_cast<std::size_t>(block_buffers) ? u - block_buffers : 0;
    adds.emplace_back(taker > 0 ? begins(taker) : end, std::ceil(units.blocks[u - 1] / S));
  }
  adds.emplace_back(begins(0), std::ceil(units.head / S));
  adds.emplace_back(end, std::ceil(units.embeddings / S));
  std::stable_sort(adds.begin(), adds.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  BucketedSums out;
  double free_at = 0;
  for (const auto& [when, elements] : adds) {
    const double bytes = 2 * 4 * elements;  // an all-reduce: reduce-scatter and all-gather
    const double s = ring_seconds(bytes, replicas, bandwidth, in.device.collective_step_latency);
    free_at = std::max(when, free_at) + s;
    out.seconds += s;
    out.bytes += bytes * (replicas - 1) / replicas;
  }
  out.exposed = std::max(0.0, free_at - end);
  out.buckets = static_cast<int>(adds.size());
  return out;
}

}  // namespace

std::string bytes_text(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

DeviceSpec device_spec(const std::string& name) {
  DeviceSpec d;
  d.name = name;
  // NVIDIA H200 SXM: 141 GB HBM3e, 989.4 TFLOP/s dense bf16 (66.9 fp32), NVLink 4 at 900 GB/s
  // both directions together (450 per direction), 8 GPUs per HGX node; between nodes one 400 Gb/s
  // NIC per GPU (50 GB/s). Collectives are assumed to reach 80 % of a link. The H100 SXM (where
  // OLMo-core's recipes train) is the same Hopper chip and node with 80 GB of HBM3; tandem's
  // kernels (sm_90a) and the backend's published peaks serve both.
  struct Hopper {
    const char* name;
    const char* label;
    int gigabytes;
  };
  for (const Hopper& h : {Hopper{"h200", "H200", 141}, Hopper{"h100", "H100", 80}}) {
    if (name != h.name) continue;
    d.memory_bytes = h.gigabytes * 1e9;
    d.peak_flops_bf16 = 989.4e12;
    d.peak_flops_fp32 = 66.9e12;
    d.intra_node_bandwidth = 0.8 * 450e9;
    d.inter_node_bandwidth = 0.8 * 50e9;
    d.collective_step_latency = 10e-6;
    d.devices_per_node = 8;
    d.reserve_bytes = 3e9;
    d.backend = "cuda";
    d.source = fmt::format(
        "NVIDIA {} SXM: {} GB, 989.4 TFLOP/s bf16 dense, NVLink 450 GB/s and 400 Gb/s "
        "InfiniBand per GPU per direction, 80 % of link bandwidth, 10 us per ring step, 8 GPUs "
        "per node, 3 GB for CUDA context, library workspaces and NCCL",
        h.label, h.gigabytes);
    return d;
  }
  if (name == "cpu") {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    d.memory_bytes = static_cast<double>(pages) * static_cast<double>(page);
    std::unique_ptr<kernels::Backend> cpu = kernels::make_backend("cpu");
    d.peak_flops_fp32 = cpu->peak_flops(kernels::DType::f32);  // OMP_NUM_THREADS cores
    d.peak_flops_bf16 = cpu->peak_flops(kernels::DType::bf16);
    // Ranks on one machine exchange data through shared memory: an assumed 5 GB/s per rank.
    d.intra_node_bandwidth = 5e9;
    d.inter_node_bandwidth = 1e9;
    d.collective_step_latency = 20e-6;
    d.devices_per_node = 1 << 20;  // every rank on this machine
    d.reserve_bytes = 0;
    d.backend = "cpu";
    d.source = fmt::format(
        "this machine: {} of RAM, {} (the CPU backend's stated peak); 5 GB/s "
        "between ranks (assumed)",
        bytes_text(d.memory_bytes), cpu->describe_peak(kernels::DType::f32));
    return d;
  }
  core::fail("unknown device '{}' (expected h200, h100 or cpu)", name);
}

PlanInput read_plan_input(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = io::load_yaml_config(path, overrides);
  PlanInput in;
  in.source = path;
  TANDEM_CHECK(root["model"], "{}: no model: section", path);
  io::ConfigSection top(root, "", path);
  in.model = model::parse_model_config(top.section("model"));
  const YAML::Node data = root["data"];
  auto data_int = [&](const char* key, std::int64_t fallback) {
    return data && data[key] ? data[key].as<std::int64_t>() : fallback;
  };
  in.sequence_length = data_int("sequence_length", in.model.max_sequence_length);
  TANDEM_CHECK(in.sequence_length > 0,
               "{}: no data.sequence_length and the model has no max_sequence_length", path);
  const std::int64_t batch_tokens = data_int("global_batch_size", 0);
  TANDEM_CHECK(batch_tokens % in.sequence_length == 0,
               "{}: data.global_batch_size {} is not a multiple of the sequence length {}", path,
               batch_tokens, in.sequence_length);
  in.global_batch_instances = batch_tokens / in.sequence_length;  // 0: one micro-batch per rank
  in.micro_batch_instances = data_int("micro_batch_size", 0);
  in.intra_document =
      data && data["generate_doc_lengths"] && data["generate_doc_lengths"].as<bool>();
  if (root["dist"]) in.dist = dist::read_dist_config(top.section("dist"));
  if (root["precision"])
    in.bf16 =
        model::parse_precision(root["precision"].as<std::string>()) == model::Precision::kBf16;
  if (root["trainer"] && root["trainer"]["recompute"])
    in.recompute = model::parse_recompute(root["trainer"]["recompute"].as<std::string>(),
                                          path + ": trainer.recompute");
  return in;
}

Plan make_plan(const PlanInput& in) {
  Plan p;
  p.input = in;
  const model::ModelConfig& c = in.model;
  c.validate();
  const int W = in.world_size;
  TANDEM_CHECK(W >= 1, "world size {} must be positive", W);
  p.shard_group = dist::shard_group_size(in.dist, W);
  const bool sharded =
      in.dist.strategy == dist::Strategy::kFsdp || in.dist.strategy == dist::Strategy::kHsdp;
  const int S = p.shard_group;
  const int replicas = W / S;

  // Batch shape per rank.
  const std::int64_t T = in.sequence_length;
  TANDEM_CHECK(c.accepts_sequence_length(T), "sequence length {} exceeds max_sequence_length {}", T,
               c.max_sequence_length);
  std::int64_t global = in.global_batch_instances;
  std::int64_t mb = in.micro_batch_instances;
  if (global == 0) global = static_cast<std::int64_t>(W) * std::max<std::int64_t>(mb, 1);
  TANDEM_CHECK(global % W == 0,
               "the global batch of {} instances does not split over {} ranks (give a global batch "
               "that is a multiple of the world size: data.global_batch_size={})",
               global, W, ((global + W - 1) / W) * W * T);
  const std::int64_t per_rank = global / W;
  if (mb == 0 || mb > per_rank) mb = per_rank;
  TANDEM_CHECK(per_rank % mb == 0,
               "micro-batch of {} instances does not divide the rank batch of {} instances", mb,
               per_rank);
  p.micro_batches = per_rank / mb;
  const double N = static_cast<double>(mb * T);  // tokens per micro-batch
  p.micro_batch_tokens = mb * T;

  const double H = static_cast<double>(c.n_heads), V = static_cast<double>(c.embedding_size);
  const double a = in.bf16 ? 2.0 : 4.0;  // bytes per activation / compute-weight element
  const std::string adt = in.bf16 ? "bf16" : "fp32";
  const Units units = parameter_units(c);
  double numel = 0;  // parameter elements without alignment gaps
  numel = static_cast<double>(c.total_params());

  // ---- persistent state ----
  auto sharded_elements = [&](int shards) {
    if (shards <= 1) return units.total;
    double s = std::ceil(units.embeddings / shards) + std::ceil(units.head / shards);
    for (double b : units.blocks) s += std::ceil(b / shards);
    return s;
  };
  const double param_elems = sharded ? sharded_elements(S) : units.total;
  const std::string share =
      sharded ? fmt::format("1/{} of {:.3g}B, sharded by unit", S, numel / 1e9) : "replicated";
  p.memory.push_back({"parameters", 4 * param_elems, "fp32 master weights, " + share, true});
  p.memory.push_back({"gradients", 4 * param_elems, "fp32, " + share, true});
  double moment_elems = numel;
  std::string moment_share = "replicated";
  if (in.dist.strategy == dist::Strategy::kZero1 && W > 1) {
    moment_elems = zero1_moment_elements(model::ParameterLayout(c), W);
    moment_share = fmt::format("the largest of {} ZeRO-1 ranges", W);
  } else if (sharded) {
    moment_elems = param_elems;
    moment_share = share;
  }
  p.memory.push_back({"optimiser state", 8 * moment_elems,
                      "Adam exp_avg + exp_avg_sq, fp32, " + moment_share, true});
  // Checkpoints: each writer its range of the weights and moments (a ZeRO-1 range under ddp and
  // zero1, its shard under fsdp/hsdp, whose replicas write none).
  p.checkpoint_bytes = 12 * numel;
  p.checkpoint_writers = sharded ? S : W;
  p.checkpoint_bytes_per_writer =
      12 * (sharded ? param_elems
                    : (W > 1 ? zero1_moment_elements(model::ParameterLayout(c), W) : numel));

  // ---- activations (kept for backward, by recompute policy) and the shared scratch ----
  // Counted by the model itself (model/olmo3_model.h), as it allocates them.
  const auto value_bytes = static_cast<std::int64_t>(a);
  const double activations = static_cast<double>(
      model::Olmo3Model::activation_bytes(c, in.recompute, p.micro_batch_tokens, value_bytes));
  p.memory.push_back(
      {"activations", activations,
       fmt::format("{}, recompute {}: {:.0f} B per token over the {} layers{} ({} tokens per "
                   "micro-batch)",
                   adt, model::recompute_name(in.recompute), activations / N, c.n_layers,
                   in.recompute == Recompute::kNone ? "" : ", plus one set the blocks share",
                   p.micro_batch_tokens),
       true});
  const double workspace =
      static_cast<double>(model::Olmo3Model::workspace_bytes(c, p.micro_batch_tokens, value_bytes) +
                          model::Olmo3Model::rope_table_bytes(c, T));
  p.memory.push_back({"workspace", workspace,
                      adt + " gradient scratch shared by the blocks, batch ids/labels, RoPE tables",
                      true});

  // ---- compute-weight copies, unit gradients, communication and kernel scratch at the peak ----
  double compute_copies = 0, unit_grads = 0, comm_buffers = 0;
  std::string copies_detail, grads_detail = "-", comm_detail;
  if (!sharded) {
    if (in.bf16) {
      // The model's copy starts after the embedding table (first in the layout), whose lookup
      // reads the fp32 masters.
      const model::ParameterLayout layout(c);
      const model::ParameterEntry& emb = layout.entry("embeddings.weight");
      compute_copies = 2 * (units.total - static_cast<double>(emb.offset + emb.numel));
      copies_detail = "bf16 copy of every weight but the embedding table, cast once per step";
    } else {
      copies_detail = "none: the fp32 weights are the compute weights";
    }
    // The sum over ranks of one chunk happens on its owner: W chunks of the gradients gathered.
    const double chunk = std::min(kMpiChunkFloats, in.dist.strategy == dist::Strategy::kZero1
                                                       ? std::ceil(units.total / W)
                                                       : units.total);
    comm_buffers = W > 1 ? W * chunk * 4 : 0;
    comm_detail = W > 1 ? fmt::format("{} ranks' chunks of the gradient sum", W) : "none (W = 1)";
  } else {
    // FSDP pools (dist/fsdp.h): one buffer for the embedding or the head, one for a block (two
    // when prefetching, which needs more than one rank per group), for the gathered weights in
    // the compute dtype and for the unit gradients in fp32; allocated once, so held at every
    // phase of the step.
    const std::size_t nb = units.blocks.size();
    std::vector<double> order{units.embeddings};
    for (double b : units.blocks) order.push_back(b);
    order.push_back(units.head);
    const bool prefetching = in.dist.prefetch && S > 1;
    const double block_buffers = nb ? (prefetching ? 2.0 : 1.0) : 0.0;
    const double largest_block =
        nb ? *std::max_element(units.blocks.begin(), units.blocks.end()) : 0.0;
    const double pool = std::max(units.embeddings, units.head) + block_buffers * largest_block;
    compute_copies = a * pool;
    unit_grads = 4 * pool;
    copies_detail = fmt::format(
        "pool of gathered units in {}: the embedding/head buffer and {} block buffer(s){}", adt,
        block_buffers, prefetching ? " (prefetch)" : "");
    grads_detail = "pool of full fp32 unit gradients awaiting their reduce-scatter";
    const double largest = *std::max_element(order.begin(), order.end());
    const double piece = std::ceil(largest / S);
    comm_buffers = S > 1 ? S * std::min(kMpiChunkFloats, piece) * 4 : 0;
    comm_detail =
        S > 1 ? fmt::format("{} ranks' chunks of one reduce-scatter", S) : "none (one shard)";
    if (replicas > 1) {
      comm_buffers += replicas * std::min(kMpiChunkFloats, param_elems) * 4;
      comm_detail += fmt::format(", {} replicas' chunks of the gradient all-reduce", replicas);
    }
  }
  p.memory.push_back({"compute weights", compute_copies, copies_detail, true});
  if (sharded) p.memory.push_back({"unit gradients", unit_grads, grads_detail, true});
  if (in.device.backend == "cuda")  // NCCL on device pointers, in place (dist/nccl_communicator.h)
    p.memory.push_back({"communication buffers", 0,
                        "none: the collectives run in place in device memory, NCCL's own "
                        "buffers are in the runtime reserve",
                        false});
  else
    p.memory.push_back({"communication buffers", comm_buffers, comm_detail + " (host)", false});
  if (in.device.backend == "cuda") {
    // Device memory from the CUDA backend's allocator: cuBLASLt's workspace throughout, and at the
    // peak the larger of the fused loss's logits chunk and the attention backward's workspace.
    // The backend's choice of attention path, as it makes it: cuDNN's deterministic SDPA for bf16
    // without documents, unless its workspace finds no room (then, as for fp32 and documents,
    // tandem's kernels and their row sums).
    namespace kc = kernels::cuda;
    const std::int64_t tokens = p.micro_batch_tokens, esize = in.bf16 ? 2 : 4;
    const auto ce =
        static_cast<double>(kc::cross_entropy_scratch_bytes(tokens, c.embedding_size, esize));
    const auto gemm = static_cast<double>(kc::kGemmWorkspaceBytes);
    const auto cudnn = static_cast<double>(
        kc::cudnn_attention_backward_workspace_bytes(mb, c.n_heads, T, c.head_dim));
    double held = in.device.reserve_bytes;
    for (const MemoryItem& m : p.memory) held += m.bytes;
    const auto row_sums =
        static_cast<double>(kc::attention_backward_scratch_bytes(mb, c.n_heads, T));
    const bool cudnn_path = in.bf16 && !in.intra_document;
    // A run that fits with tandem's kernels but not with cuDNN's workspace falls back; one that
    // fits neither way is planned on the default path.
    const bool cudnn_room = held + gemm + std::max(ce, cudnn) <= in.device.memory_bytes;
    const bool kernels_room = held + gemm + std::max(ce, row_sums) <= in.device.memory_bytes;
    std::string path = "cuDNN workspace";
    double attention = cudnn;
    if (!cudnn_path || (!cudnn_room && kernels_room)) {
      attention = row_sums;
      path = !in.bf16            ? "row sums"
             : in.intra_document ? "row sums (documents: tandem's kernels)"
                                 : "row sums (tandem's kernels: no room for cuDNN's workspace)";
      p.attention_falls_back = cudnn_path;
      if (cudnn_path)
        p.notes.push_back(fmt::format(
            "cuDNN's deterministic attention backward would need {} of workspace, which does not "
            "fit: the backend falls back to tandem's attention kernels (slower)",
            bytes_text(cudnn)));
    }
    p.memory.push_back({"kernel scratch", gemm + std::max(ce, attention),
                        fmt::format("cuBLASLt's workspace and the larger of the fused loss's "
                                    "logits chunk ({}) and the attention backward's {} ({})",
                                    bytes_text(ce), path, bytes_text(attention)),
                        true});
  } else {
    const double ce_rows = std::max(1.0, std::floor(kCrossEntropyChunkBytes / (V * 4)));
    const double ce_scratch = std::min(N, ce_rows) * (V * 4 + 16);
    const double attention_scratch = N * H * 4;
    p.memory.push_back({"kernel scratch", std::max(ce_scratch, attention_scratch),
                        "the fused loss's logits chunk, or attention backward's row sums (host "
                        "on the CPU backend)",
                        false});
  }
  if (in.device.reserve_bytes > 0)
    p.memory.push_back(
        {"runtime reserve", in.device.reserve_bytes, "assumed, see the device", false});
  for (const MemoryItem& m : p.memory) {
    p.total_bytes += m.bytes;
    if (m.backend) p.backend_bytes += m.bytes;
  }
  p.fits = p.total_bytes <= in.device.memory_bytes;

  // ---- time ----
  p.model_flops_per_token = c.flops_per_token(T);
  double extra = 0;
  for (std::int64_t w : c.layer_windows) extra += recomputed_flops(c, w, T, in.recompute);
  p.executed_flops_per_token = p.model_flops_per_token + extra;
  const double tokens = static_cast<double>(per_rank * T);
  const double peak = peak_flops(in);
  p.compute_s = tokens * p.executed_flops_per_token / (peak * in.efficiency);

  const DeviceSpec& dev = in.device;
  auto bandwidth = [&](int group_size, bool consecutive) {
    const bool one_node = consecutive && group_size <= dev.devices_per_node;
    return one_node ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  };
  double overlappable = 0, exposed = 0;
  auto collective = [&](double bytes, int n, double bw, double times, bool hidden) {
    const double s = ring_seconds(bytes, n, bw, dev.collective_step_latency) * times;
    p.comm_bytes += n > 1 ? bytes * (n - 1) / n * times : 0.0;
    p.comm_s += s;
    (hidden ? overlappable : exposed) += s;
  };
  const double mbs = static_cast<double>(p.micro_batches);
  switch (in.dist.strategy) {
    case dist::Strategy::kDdp:
    case dist::Strategy::kZero1: {
      // The gradients' all-reduce (ddp: reduce-scatter + all-gather) or reduce-scatter (zero1):
      // on a GPU backend bucketed and overlapped with the last backward, on the CPU backend after
      // it. ZeRO-1's all-gather of the updated parameters follows the optimiser step.
      const bool zero1 = in.dist.strategy == dist::Strategy::kZero1;
      const double per_element = zero1 ? 4 : 2 * 4;
      if (in.device.backend == "cuda" && W > 1) {
        const BucketedSums sums = bucketed_gradient_sums(in, N, per_element, bandwidth(W, true));
        p.comm_s += sums.seconds;
        p.comm_bytes += sums.bytes;
        exposed += sums.exposed;
        p.gradient_buckets = sums.buckets;
      } else {
        collective(per_element * units.total, W, bandwidth(W, true), 1, false);
      }
      if (zero1) collective(4 * units.total, W, bandwidth(W, true), 1, false);
      break;
    }
    case dist::Strategy::kFsdp:
    case dist::Strategy::kHsdp: {
      const double bw = bandwidth(S, true);
      const bool hide = in.dist.prefetch;
      // Per micro-batch: forward gathers (the embedding's is never hidden), backward gathers of
      // the blocks not still in the pool from the forward (the last one, two with prefetch; the
      // head stays gathered from its forward to its backward), reduce-scatters (the
      // embedding's, last, is never hidden).
      const std::size_t nb = units.blocks.size();
      const std::size_t kept = std::min<std::size_t>(nb, in.dist.prefetch && S > 1 ? 2 : 1);
      double regathered = 0;
      for (std::size_t l = 0; l + kept < nb; ++l) regathered += units.blocks[l];
      collective(a * units.embeddings, S, bw, mbs, false);
      collective(a * (units.total - units.embeddings), S, bw, mbs, hide);
      collective(a * regathered, S, bw, mbs, hide);
      collective(4 * (units.total - units.embeddings), S, bw, mbs, hide);
      collective(4 * units.embeddings, S, bw, mbs, false);
      // The all-reduce of each shard's gradients across the replicas: on a GPU backend by unit,
      // overlapping the last backward; on the CPU backend whole, after it.
      if (replicas > 1 && in.device.backend == "cuda") {
        const BucketedSums sums =
            replica_sums_in_backward(in, units, N, S, replicas, bandwidth(replicas, false),
                                     in.dist.prefetch && S > 1 ? 2 : 1);
        p.comm_s += sums.seconds;
        p.comm_bytes += sums.bytes;
        exposed += sums.exposed;
        p.gradient_buckets = sums.buckets;
      } else if (replicas > 1) {
        collective(2 * 4 * param_elems, replicas, bandwidth(replicas, false), 1, false);
      }
      break;
    }
  }
  p.exposed_comm_s = exposed + std::max(0.0, overlappable - p.compute_s);
  p.step_s = p.compute_s + p.exposed_comm_s;
  p.step_no_overlap_s = p.compute_s + p.comm_s;
  p.tokens_per_s_per_device = tokens / p.step_s;
  p.mfu = p.tokens_per_s_per_device * p.model_flops_per_token / peak;
  if (in.dist.strategy == dist::Strategy::kHsdp && S > dev.devices_per_node)
    p.notes.push_back("shard groups span nodes: gathers run at the inter-node bandwidth");
  if (!p.fits)
    p.notes.push_back(fmt::format("does not fit: {} needed, {} on the device",
                                  bytes_text(p.total_bytes), bytes_text(dev.memory_bytes)));
  return p;
}

std::string format_plan(const Plan& p) {
  const PlanInput& in = p.input;
  const model::ModelConfig& c = in.model;
  std::string out;
  out += fmt::format("plan for {}: {:.3g}B parameters, {} layers, d_model {}, sequence {}\n",
                     in.source, static_cast<double>(c.total_params()) / 1e9, c.n_layers, c.d_model,
                     in.sequence_length);
  out += fmt::format("device: {} x {} ({})\n", in.world_size, in.device.name, in.device.source);
  out += fmt::format(
      "run: strategy {}{}, precision {}, recompute {}, {} micro-batch(es) of {} tokens per rank "
      "and step ({} tokens per step)\n",
      dist::strategy_name(in.dist.strategy),
      p.shard_group > 1 && p.shard_group < in.world_size
          ? fmt::format(" ({} groups of {})", in.world_size / p.shard_group, p.shard_group)
          : std::string(),
      in.bf16 ? "bf16" : "fp32", model::recompute_name(in.recompute), p.micro_batches,
      p.micro_batch_tokens, p.micro_batch_tokens * p.micro_batches * in.world_size);
  out += "\nmemory per rank (at the step's peak)\n";
  for (const MemoryItem& m : p.memory)
    out += fmt::format("  {:<22} {:>10}   {}\n", m.name, bytes_text(m.bytes), m.detail);
  out +=
      fmt::format("  {:<22} {:>10}   the backend's buffers (the trainer logs the measured peak)\n",
                  "held by the backend", bytes_text(p.backend_bytes));
  out +=
      fmt::format("  {:<22} {:>10}   {} of {} on the device\n", "total", bytes_text(p.total_bytes),
                  p.fits ? "fits" : "DOES NOT FIT", bytes_text(in.device.memory_bytes));
  out += "\ncheckpoint (each save)\n";
  out += fmt::format("  {:<22} {:>10}   fp32 weights and Adam moments, 12 B per parameter\n",
                     "size", bytes_text(p.checkpoint_bytes));
  out += fmt::format(
      "  {:<22} {:>10}   {}\n", "per writing rank", bytes_text(p.checkpoint_bytes_per_writer),
      p.checkpoint_writers == 1 ? std::string("one process writes it all")
      : p.checkpoint_writers < in.world_size
          ? fmt::format("the largest share of the first shard group's {} ranks (the other groups "
                        "hold copies and write none)",
                        p.checkpoint_writers)
          : fmt::format("the largest of {} ranks' shares", p.checkpoint_writers));
  out += "\nstep time (per optimiser step)\n";
  out += fmt::format(
      "  compute        {:>9.3f} s   {:.3g} FLOP/token executed ({:.3g} model), {:.0f} % of peak "
      "assumed\n",
      p.compute_s, p.executed_flops_per_token, p.model_flops_per_token, 100 * in.efficiency);
  out += fmt::format("  communication  {:>9.3f} s   {} sent per rank; {:.3f} s not hidden\n",
                     p.comm_s, bytes_text(p.comm_bytes), p.exposed_comm_s);
  if (p.gradient_buckets > 0 && in.dist.strategy == dist::Strategy::kHsdp)
    out += fmt::format(
        "                               replica sums in {} unit ranges, each started as the last "
        "backward adds it into the shard\n",
        p.gradient_buckets);
  else if (p.gradient_buckets > 0)
    out += fmt::format(
        "                               gradient sums in {} buckets, each started as the last "
        "backward completes it\n",
        p.gradient_buckets);
  out += fmt::format("  step           {:>9.3f} s   ({:.3f} s without overlap)\n", p.step_s,
                     p.step_no_overlap_s);
  out += fmt::format("  throughput     {:>9.0f} tokens/s per device, MFU {:.1f} %\n",
                     p.tokens_per_s_per_device, 100 * p.mfu);
  for (const std::string& n : p.notes) out += "note: " + n + "\n";
  return out;
}

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["config"] = p.input.source;
  j["device"] = p.input.device.name;
  j["world_size"] = p.input.world_size;
  j["strategy"] = dist::strategy_name(p.input.dist.strategy);
  j["shard_group_size"] = p.shard_group;
  j["precision"] = p.input.bf16 ? "bf16" : "fp32";
  j["recompute"] = model::recompute_name(p.input.recompute);
  j["intra_document"] = p.input.intra_document;
  j["micro_batches"] = p.micro_batches;
  j["micro_batch_tokens"] = p.micro_batch_tokens;
  for (const MemoryItem& m : p.memory) j["memory"][m.name] = m.bytes;
  j["memory_total"] = p.total_bytes;
  j["memory_backend"] = p.backend_bytes;
  j["device_memory"] = p.input.device.memory_bytes;
  j["fits"] = p.fits;
  j["compute_s"] = p.compute_s;
  j["comm_s"] = p.comm_s;
  j["comm_bytes"] = p.comm_bytes;
  j["checkpoint"] = {{"bytes", p.checkpoint_bytes},
                     {"writers", p.checkpoint_writers},
                     {"bytes_per_writer", p.checkpoint_bytes_per_writer}};
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["gradient_buckets"] = p.gradient_buckets;
  j["step_s"] = p.step_s;
  j["step_no_overlap_s"] = p.step_no_overlap_s;
  j["tokens_per_s_per_device"] = p.tokens_per_s_per_device;
  j["mfu"] = p.mfu;
  j["efficiency"] = p.input.efficiency;
  j["notes"] = p.notes;
  return j;
}

std::vector<Plan> plan_alternatives(const PlanInput& input) {
  std::vector<dist::DistConfig> strategies;
  for (dist::Strategy s : {dist::Strategy::kDdp, dist::Strategy::kZero1, dist::Strategy::kFsdp}) {
    dist::DistConfig d = input.dist;
    d.strategy = s;
    d.shard_group_size = 0;
    strategies.push_back(d);
  }
  const int node = input.device.devices_per_node;
  if (node > 1 && node < input.world_size && input.world_size % node == 0) {
    dist::DistConfig d = input.dist;
    d.strategy = dist::Strategy::kHsdp;
    d.shard_group_size = node;
    strategies.push_back(d);
  }
  std::vector<Plan> out;
  for (const dist::DistConfig& d : strategies)
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      PlanInput in = input;
      in.dist = d;
      in.recompute = r;
      try {
        out.push_back(make_plan(in));
      } catch (const core::Error&) {
      }
    }
  return out;
}

std::string format_alternatives(const std::vector<Plan>& plans) {
  std::string out =
      "\nalternatives at this world size (memory per rank; the fastest that fits is marked *)\n";
  out += fmt::format("  {:<14} {:<10} {:>10} {:>5} {:>9} {:>14} {:>6}\n", "strategy", "recompute",
                     "memory", "fits", "step s", "tokens/s/dev", "MFU");
  const Plan* best = nullptr;
  for (const Plan& p : plans)
    if (p.fits && (!best || p.step_s < best->step_s)) best = &p;
  for (const Plan& p : plans) {
    const std::string strategy =
        p.input.dist.strategy == dist::Strategy::kHsdp
            ? fmt::format("hsdp {}x{}", p.input.world_size / p.shard_group, p.shard_group)
            : dist::strategy_name(p.input.dist.strategy);
    out += fmt::format("{} {:<14} {:<10} {:>10} {:>5} {:>9.3f} {:>14.0f} {:>5.1f}%\n",
                       &p == best ? "*" : " ", strategy, model::recompute_name(p.input.recompute),
                       bytes_text(p.total_bytes), p.fits ? "yes" : "no", p.step_s,
                       p.tokens_per_s_per_device, 100 * p.mfu);
  }
  return out;
}

}  // namespace tandem::train
