// `tandem plan`: per-rank memory and an estimated step time for a run config on a device, before
// anything is allocated. Memory is counted the way the trainer allocates it (the model's
// parameter layout, its activation buffers under each recompute policy, the optimiser's moments,
// FSDP's gathered units and unit gradients, the kernels' scratch); time from the FLOPs executed
// (ModelConfig::flops_per_token plus what recompute adds) at an assumed fraction of the device's
// peak, and from the bytes each rank moves in its collectives at the device's link bandwidths
// (ring algorithms), with or without overlap. Checked against the trainer's measured memory on
// small configs (tests/train/plan_test.cc); the device figures and assumptions are stated in the
// output and in docs/distributed.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/dist/dist_config.h"
#include "tandem/model/model_config.h"
#include "tandem/model/recompute.h"

namespace tandem::train {

struct DeviceSpec {
  std::string name;                    // "h200", "h100", "cpu"
  double memory_bytes = 0;             // per device
  double peak_flops_bf16 = 0;          // dense matmul peak, FLOP/s
  double peak_flops_fp32 = 0;          //
  double intra_node_bandwidth = 0;     // bytes/s per device and direction inside a node
  double inter_node_bandwidth = 0;     // bytes/s per device and direction between nodes
  double collective_step_latency = 0;  // seconds per ring step
  int devices_per_node = 1;
  double reserve_bytes = 0;  // the runtime's own memory (context, library workspaces)
  std::string backend;       // the tandem backend that runs there: "cuda" or "cpu"
  std::string source;        // where the figures come from
};

// Bytes as `tandem plan` prints them: "1.41 GB", "37.7 MB", "12.3 kB" (decimal units).
std::string bytes_text(double bytes);

// "h200", "h100": NVIDIA's published H200 / H100 SXM figures; "cpu": this machine (its RAM, the CPU
// backend's stated fp32 peak for the cores OpenMP uses). Throws Error naming the device otherwise.
DeviceSpec device_spec(const std::string& name);

struct PlanInput {
  std::string source;  // config path, for the heading
  model::ModelConfig model;
  std::int64_t sequence_length = 0;
  std::int64_t global_batch_instances = 0;
  std::int64_t micro_batch_instances = 0;  // per rank; 0 = the rank's whole share
  int world_size = 1;
  dist::DistConfig dist;
  model::Recompute recompute = model::Recompute::kNone;
  bool bf16 = false;            // compute weights and activations in bf16 (fp32 master and moments)
  bool intra_document = false;  // data.generate_doc_lengths: attention inside each document
  double efficiency = 0.4;      // executed FLOPs / peak assumed for the step time
  DeviceSpec device;
};

// The model, data sizes, dist: section and trainer.recompute of a run config (no data
// file is opened, so recipes whose data is elsewhere plan too); a config with a `model:` section
// only plans with the sequence length = max_sequence_length and one micro-batch per rank.
PlanInput read_plan_input(const std::string& path, const std::vector<std::string>& overrides);

struct MemoryItem {
  std::string name;     // "parameters", ...
  double bytes = 0;     // per rank
  std::string detail;   // how it was counted
  bool backend = true;  // a buffer of the backend (device memory), not host scratch or a reserve
};

struct Plan {
  PlanInput input;
  int shard_group = 1;             // ranks sharing one copy of the parameters
  std::int64_t micro_batches = 1;  // per rank and step
  std::int64_t micro_batch_tokens = 0;
  std::vector<MemoryItem> memory;  // per rank, at the step's peak
  double total_bytes = 0;
  double backend_bytes = 0;  // the items held by the backend: what the trainer measures
  bool fits = false;         // total <= device memory
  // Time per optimiser step.
  double model_flops_per_token = 0;     // ModelConfig::flops_per_token (the MFU numerator)
  double executed_flops_per_token = 0;  // with recompute
  // ModelConfig::olmo_core_flops_per_token: causal pairs only, for MFU in OLMo-core 3.0's terms.
  double olmo_core_flops_per_token = 0;
  double compute_s = 0;
  double comm_bytes = 0;      // sent per rank per step
  double comm_s = 0;          // all collectives back to back
  double exposed_comm_s = 0;  // not hidden behind compute (prefetch/overlap as configured)
  int gradient_buckets = 0;   // on a GPU, the sums the last backward starts: ddp/zero1 buckets,
                              // hsdp unit ranges summed across the replicas
  double step_s = 0;          // compute + exposed communication
  double step_no_overlap_s = 0;
  double tokens_per_s_per_device = 0;
  double mfu = 0;            // model FLOPs / (step time x peak)
  double mfu_olmo_core = 0;  // the same with olmo_core_flops_per_token
  // A checkpoint (train/checkpoint.h): fp32 weights and Adam moments, 12 B per parameter, written
  // in shards by `checkpoint_writers` ranks, the largest share `checkpoint_bytes_per_writer`.
  double checkpoint_bytes = 0;
  int checkpoint_writers = 1;
  double checkpoint_bytes_per_writer = 0;
  // CUDA: no room for cuDNN's attention backward workspace, not even for its smallest piece, so
  // tandem's kernels are planned.
  bool attention_falls_back = false;
  // CUDA: cuDNN's attention backward runs in this many pieces, for want of room for the whole.
  std::int64_t attention_backward_pieces = 1;
  std::vector<std::string> notes;
};

// Throws Error when the global batch does not split over the ranks and micro-batches.
Plan make_plan(const PlanInput& input);

std::string format_plan(const Plan& plan);
nlohmann::json plan_to_json(const Plan& plan);

// Every strategy (hsdp with node-sized groups where that differs from fsdp) and recompute policy
// at the input's world size, for the comparison table; configurations that cannot run are left
// out.
std::vector<Plan> plan_alternatives(const PlanInput& input);
std::string format_alternatives(const std::vector<Plan>& plans);

}  // namespace tandem::train
