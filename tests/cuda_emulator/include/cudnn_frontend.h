// The CUDA emulator's cuDNN frontend: the part of the graph API that tandem's cuDNN attention
// (src/tandem/kernels/cuda/attention_cudnn.cc) calls, with the same names and call shapes, run on
// the CPU (tests/cuda_emulator/cudnn_frontend.cc). A graph holds one fused SDPA forward or
// backward over bf16 tensors described by logical dims [batch, heads, sequence, head_dim] and
// strides; build() checks what cuDNN 9 checks for it on Hopper (types, dims, head_dim at most 256
// and a multiple of 8, a causal mask whose sliding window keeps keys j > i - window, every output
// described) and refuses the rest; execute() checks the variant pack (every uid, device memory
// covering each tensor's strides, the workspace) and queues the product on the handle's stream.
// The arithmetic is cuDNN's as documented: scores and sums in fp32 or better, P rounded to bf16
// before P V, P and dS to bf16 before the backward's products, Stats the natural-log logsumexp of
// the scaled scores. What this checks is how tandem describes its memory to cuDNN, not cuDNN's
// kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

struct cudnnContext;
using cudnnHandle_t = cudnnContext*;
enum cudnnStatus_t : int { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_BAD_PARAM = 2000 };

namespace cudnn_frontend {

// The frontend's handle on a dynamically loaded libcudnn (defined by the program that loads it;
// nothing is loaded here).
extern void* cudnn_dlhandle;

enum class DataType_t { NOT_SET, FLOAT, HALF, BFLOAT16, INT32, INT64 };
enum class HeurMode_t { A, B, FALLBACK };
enum class error_code_t {
  OK,
  ATTRIBUTE_NOT_SET,
  INVALID_VALUE,
  GRAPH_NOT_SUPPORTED,
  INVALID_VARIANT_PACK,
  GRAPH_EXECUTION_FAILED,
};

struct error_t {
  error_code_t code = error_code_t::OK;
  std::string err_msg;
  bool is_good() const { return code == error_code_t::OK; }
  bool is_bad() const { return !is_good(); }
  const std::string& get_message() const { return err_msg; }
};

namespace detail {
// The emulated libcudnn's version (9.13.0, as cudnnGetVersion encodes it).
std::size_t get_backend_version();
cudnnStatus_t create_handle(cudnnHandle_t* handle);
cudnnStatus_t destroy_handle(cudnnHandle_t handle);
cudnnStatus_t set_stream(cudnnHandle_t handle, cudaStream_t stream);
}  // namespace detail

namespace graph {

class Tensor_attributes {
 public:
  using uid_t = std::int64_t;
  Tensor_attributes& set_name(std::string name) {
    name_ = std::move(name);
    return *this;
  }
  Tensor_attributes& set_uid(uid_t uid) {
    uid_ = uid;
    return *this;
  }
  Tensor_attributes& set_dim(std::vector<std::int64_t> dim) {
    dim_ = std::move(dim);
    return *this;
  }
  Tensor_attributes& set_stride(std::vector<std::int64_t> stride) {
    stride_ = std::move(stride);
    return *this;
  }
  Tensor_attributes& set_data_type(DataType_t type) {
    type_ = type;
    return *this;
  }
  Tensor_attributes& set_output(bool output) {
    output_ = output;
    return *this;
  }
  const std::string& get_name() const { return name_; }
  const std::optional<uid_t>& get_uid() const { return uid_; }
  const std::vector<std::int64_t>& get_dim() const { return dim_; }
  const std::vector<std::int64_t>& get_stride() const { return stride_; }
  DataType_t get_data_type() const { return type_; }
  bool get_is_output() const { return output_; }

 private:
  std::string name_;
  std::optional<uid_t> uid_;
  std::vector<std::int64_t> dim_, stride_;
  DataType_t type_ = DataType_t::NOT_SET;  // NOT_SET: the graph's io type
  bool output_ = false;
};

// The options tandem sets; the sliding window is the frontend's left bound.
struct SDPA_attributes {
  std::string name;
  bool generate_stats = false, causal = false;
  std::optional<float> attn_scale;
  std::optional<int> left_bound;
  SDPA_attributes& set_name(std::string n) {
    name = std::move(n);
    return *this;
  }
  SDPA_attributes& set_generate_stats(bool v) {
    generate_stats = v;
    return *this;
  }
  SDPA_attributes& set_attn_scale(float v) {
    attn_scale = v;
    return *this;
  }
  SDPA_attributes& set_causal_mask(bool v) {
    causal = v;
    return *this;
  }
  SDPA_attributes& set_sliding_window_length(int v) {
    left_bound = v;
    return *this;
  }
};

struct SDPA_backward_attributes {
  std::string name;
  bool causal = false, deterministic = false;
  std::optional<float> attn_scale;
  std::optional<int> left_bound;
  SDPA_backward_attributes& set_name(std::string n) {
    name = std::move(n);
    return *this;
  }
  SDPA_backward_attributes& set_attn_scale(float v) {
    attn_scale = v;
    return *this;
  }
  SDPA_backward_attributes& set_causal_mask(bool v) {
    causal = v;
    return *this;
  }
  SDPA_backward_attributes& set_deterministic_algorithm(bool v) {
    deterministic = v;
    return *this;
  }
  SDPA_backward_attributes& set_sliding_window_length(int v) {
    left_bound = v;
    return *this;
  }
};

class Graph {
 public:
  using Tensor = std::shared_ptr<Tensor_attributes>;

  Graph& set_io_data_type(DataType_t t) {
    io_ = t;
    return *this;
  }
  Graph& set_intermediate_data_type(DataType_t t) {
    intermediate_ = t;
    return *this;
  }
  Graph& set_compute_data_type(DataType_t t) {
    compute_ = t;
    return *this;
  }
  Tensor tensor(const Tensor_attributes& attributes);
  // Returns [O, Stats] (Stats null unless generate_stats).
  std::array<Tensor, 2> sdpa(Tensor q, Tensor k, Tensor v, SDPA_attributes options);
  // Returns [dQ, dK, dV].
  std::array<Tensor, 3> sdpa_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor d_o,
                                      Tensor stats, SDPA_backward_attributes options);
  error_t build(cudnnHandle_t handle, const std::vector<HeurMode_t>& modes);
  error_t get_workspace_size(std::int64_t& bytes) const;
  error_t execute(cudnnHandle_t handle,
                  std::unordered_map<Tensor_attributes::uid_t, void*>& variant_pack,
                  void* workspace) const;

  // The one SDPA node (its operands in order: forward q k v | o stats; backward q k v o dO
  // stats | dQ dK dV).
  struct Node {
    bool backward = false;
    SDPA_attributes forward_options;
    SDPA_backward_attributes backward_options;
    std::vector<Tensor> inputs, outputs;
  };

 private:
  DataType_t io_ = DataType_t::NOT_SET, intermediate_ = DataType_t::NOT_SET,
             compute_ = DataType_t::NOT_SET;
  std::vector<Tensor> tensors_;
  std::vector<Node> nodes_;
  bool built_ = false;
  std::int64_t workspace_ = 0;
};

}  // namespace graph
}  // namespace cudnn_frontend
