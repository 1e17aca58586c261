#include "tandem/train/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/dist/flat_split.h"
#include "tandem/dist/fsdp_shards.h"
#include "tandem/io/config.h"
#include "tandem/kernels/backend.h"
#include "tandem/kernels/cuda/scratch_sizes.h"
#include "tandem/model/olmo3_model.h"
#include "tandem/model/parameters.h"
#include "tandem/train/plan_step_time.h"

namespace tandem::train {
namespace {

using model::Recompute;
using plan_detail::Units;

// The CPU kernels' fused cross-entropy works on chunks of logits of at most 32 MiB
// (kernels/cpu/cross_entropy.cc); the CUDA backend's sizes are in kernels/cuda/scratch_sizes.h.
constexpr double kCrossEntropyChunkBytes = 32.0 * 1024 * 1024;
// MPI communicator: collectives move at most 2^20 floats per call; the rank that sums a range
// gathers every rank's chunk of it (dist/mpi_communicator.cc).
constexpr double kMpiChunkFloats = 1 << 20;

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

}  // namespace

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
  const Units units = plan_detail::parameter_units(c);
  const double numel = static_cast<double>(c.total_params());  // without alignment gaps

  // ---- persistent state ----
  const double param_elems = sharded ? units.sharded(S) : units.total;
  const std::string share =
      sharded ? fmt::format("1/{} of {:.3g}B, sharded by unit", S, numel / 1e9) : "replicated";
  p.memory.push_back({"parameters", 4 * param_elems, "fp32 master weights, " + share, true});
  p.memory.push_back({"gradients", 4 * param_elems, "fp32, " + share, true});
  // The largest ZeRO-1 range: zero1's moments, and a ddp or zero1 checkpoint's largest share.
  const double zero1_range =
      !sharded && W > 1 ? zero1_moment_elements(model::ParameterLayout(c), W) : numel;
  double moment_elems = numel;
  std::string moment_share = "replicated";
  if (in.dist.strategy == dist::Strategy::kZero1 && W > 1) {
    moment_elems = zero1_range;
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
  p.checkpoint_bytes_per_writer = 12 * (sharded ? param_elems : zero1_range);

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
      compute_copies = 2 * (units.total - static_cast<double>(units.ranges.front().end));
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
    const bool prefetching = plan_detail::fsdp_prefetches(in, S);
    const double block_buffers = nb ? dist::fsdp_block_buffers(prefetching) : 0;
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
    // peak the largest of the fused loss's logits chunk, the attention backward's workspace and the
    // embedding backward's sort.
    // The backend's choice of attention path, as it makes it: cuDNN's deterministic SDPA for bf16
    // without documents, as a whole or else in the largest pieces (batch entries x kv heads) whose
    // workspace has room, unless not even the smallest has (then, as for fp32 and documents,
    // tandem's kernels and their row sums).
    namespace kc = kernels::cuda;
    const std::int64_t tokens = p.micro_batch_tokens, esize = in.bf16 ? 2 : 4;
    const auto ce =
        static_cast<double>(kc::cross_entropy_scratch_bytes(tokens, c.embedding_size, esize));
    const auto gemm = static_cast<double>(kc::kGemmWorkspaceBytes);
    const auto whole = static_cast<double>(
        kc::cudnn_attention_backward_workspace_bytes(mb, c.n_heads, T, c.head_dim));
    double held = in.device.reserve_bytes;
    for (const MemoryItem& m : p.memory) held += m.bytes;
    const auto fits = [&](double scratch) {
      return held + gemm + std::max(ce, scratch) <= in.device.memory_bytes;
    };
    const auto row_sums =
        static_cast<double>(kc::attention_backward_scratch_bytes(mb, c.n_heads, T));
    const bool cudnn_path = in.bf16 && !in.intra_document;
    double cudnn = whole;
    bool cudnn_room = false;
    kc::AttentionPiece piece{mb, c.n_kv_heads};
    double smallest = whole;  // the last piece tried: the smallest where none fits
    for (const kc::AttentionPiece& candidate :
         kc::cudnn_backward_pieces(mb, T, c.n_heads, c.n_kv_heads)) {
      const auto bytes = static_cast<double>(kc::cudnn_attention_backward_workspace_bytes(
          candidate.batch, candidate.kv_heads * (c.n_heads / c.n_kv_heads), T, c.head_dim));
      smallest = bytes;
      if (fits(bytes)) {
        cudnn = bytes;
        piece = candidate;
        cudnn_room = true;
        break;
      }
    }
    // A run that fits with tandem's kernels but not with any piece of cuDNN's workspace falls
    // back; one that fits neither way is planned on the default path (the whole at once).
    const bool kernels_room = fits(row_sums);
    std::string path = "cuDNN workspace";
    double attention = cudnn;
    if (cudnn_path && cudnn_room && (piece.batch != mb || piece.kv_heads != c.n_kv_heads)) {
      p.attention_backward_pieces = piece.count(mb, c.n_kv_heads);
      path = fmt::format("cuDNN workspace, in {} pieces of {} batch entries x {} kv heads",
                         p.attention_backward_pieces, piece.batch, piece.kv_heads);
      p.notes.push_back(fmt::format(
          "cuDNN's deterministic attention backward would need {} of workspace at once, which "
          "does not fit: the backend runs it in {} pieces of {} batch entries x {} kv heads ({} "
          "each)",
          bytes_text(whole), p.attention_backward_pieces, piece.batch, piece.kv_heads,
          bytes_text(cudnn)));
    }
    if (!cudnn_path || (!cudnn_room && kernels_room)) {
      attention = row_sums;
      path = !in.bf16            ? "row sums"
             : in.intra_document ? "row sums (documents: tandem's kernels)"
                                 : "row sums (tandem's kernels: no room for cuDNN's workspace)";
      p.attention_falls_back = cudnn_path;
      if (cudnn_path)
        p.notes.push_back(fmt::format(
            "cuDNN's deterministic attention backward would need {} of workspace, which does not "
            "fit, nor does its smallest piece's ({}): the backend falls back to tandem's "
            "attention kernels (slower)",
            bytes_text(whole), bytes_text(smallest)));
    }
    // The embedding backward's sort (after the loss and every attention backward) is far smaller
    // than either, but counted.
    const auto sort = static_cast<double>(kc::embedding_backward_scratch_bytes(tokens));
    p.memory.push_back({"kernel scratch", gemm + std::max({ce, attention, sort}),
                        fmt::format("cuBLASLt's workspace and the largest of the fused loss's "
                                    "logits chunk ({}), the attention backward's {} ({}) and the "
                                    "embedding backward's sort ({})",
                                    bytes_text(ce), path, bytes_text(attention), bytes_text(sort)),
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

  plan_detail::estimate_step_time(in, units, p);
  if (!p.fits)
    p.notes.push_back(fmt::format("does not fit: {} needed, {} on the device",
                                  bytes_text(p.total_bytes), bytes_text(in.device.memory_bytes)));
  return p;
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

}  // namespace tandem::train
