// The GPU backend's data-parallel gradient reduction (dist/device_gradient_reduction.h) apart from
// any GPU: how the flat gradient buffer is cut into buckets, when each bucket's sum starts (only in
// the step's last backward, in order, once its units are complete), and the model's reports that
// drive it (each unit reported once per backward, in the backward's order, with its gradients
// final at that moment). The sums themselves run on NCCL: tests/cuda/data_parallel_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../support/test_support.h"
#include "tandem/core/error.h"
#include "tandem/core/ignore_index.h"
#include "tandem/dist/communicator.h"
#include "tandem/dist/device_gradient_reduction.h"
#include "tandem/model/olmo3_model.h"

namespace tandem {
namespace {

using dist::GradientBucket;
using model::ParameterUnit;

// Four units with alignment gaps between them, as parameter_units() lays them out.
const std::vector<ParameterUnit> kUnits = {{0, 100}, {128, 328}, {384, 584}, {640, 700}};

TEST(GradientBuckets, FollowTheBackwardAndCloseOnceFull) {
  const std::vector<GradientBucket> b = dist::plan_gradient_buckets(kUnits, 250);
  ASSERT_EQ(b.size(), 2u);
  // The head (unit 3, 60 elements) alone is below 250: unit 2 joins it.
  EXPECT_EQ(b[0].first_unit, 2);
  EXPECT_EQ(b[0].last_unit, 3);
  EXPECT_EQ(b[0].begin, 384);
  EXPECT_EQ(b[0].end, 700);
  EXPECT_EQ(b[1].first_unit, 0);
  EXPECT_EQ(b[1].last_unit, 1);
  EXPECT_EQ(b[1].begin, 0);
  EXPECT_EQ(b[1].end, 328);
}

TEST(GradientBuckets, EveryUnitInExactlyOneBucketAtAnySize) {
  for (std::int64_t size : {1, 59, 60, 61, 200, 260, 700, 100000}) {
    const std::vector<GradientBucket> b = dist::plan_gradient_buckets(kUnits, size);
    std::vector<int> seen(kUnits.size(), 0);
    int expected_next = static_cast<int>(kUnits.size()) - 1;
    for (const GradientBucket& g : b) {
      EXPECT_EQ(g.last_unit, expected_next) << "size " << size;  // consecutive, backward order
      EXPECT_LE(g.first_unit, g.last_unit);
      EXPECT_EQ(g.begin, kUnits[static_cast<std::size_t>(g.first_unit)].begin);
      EXPECT_EQ(g.end, kUnits[static_cast<std::size_t>(g.last_unit)].end);
      std::int64_t held = 0;
      for (int u = g.first_unit; u <= g.last_unit; ++u) {
        ++seen[static_cast<std::size_t>(u)];
        held += kUnits[static_cast<std::size_t>(u)].size();
      }
      // Closed as soon as it is full: without its first unit it was not.
      if (g.first_unit > 0) {
        EXPECT_LT(held - kUnits[static_cast<std::size_t>(g.first_unit)].size(), size);
      }
      expected_next = g.first_unit - 1;
    }
    EXPECT_EQ(expected_next, -1) << "size " << size;
    for (int n : seen) EXPECT_EQ(n, 1) << "size " << size;
  }
  EXPECT_EQ(dist::plan_gradient_buckets(kUnits, 1).size(), kUnits.size());
  EXPECT_EQ(dist::plan_gradient_buckets(kUnits, 1 << 20).size(), 1u);
  EXPECT_THROW(dist::plan_gradient_buckets(kUnits, 0), core::Error);
}

// Records the device sums it is asked for, as offsets into `base`.
class RecordingCommunicator final : public dist::Communicator {
 public:
  explicit RecordingCommunicator(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string name() const override { return "recording"; }
  void all_reduce_sum(float*, std::size_t) override { ADD_FAILURE() << "a host sum"; }
  void all_reduce_sum(double*, std::size_t) override { ADD_FAILURE() << "a host sum"; }
  void reduce_scatter_sum(float*, const std::size_t*) override { ADD_FAILURE(); }
  void all_gather(float*, const std::size_t*) override { ADD_FAILURE(); }
  void broadcast(void*, std::size_t, int) override { ADD_FAILURE(); }
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message, int) override {
    throw std::runtime_error(message);
  }
  bool reduces_device_memory() const override { return true; }
  void start_all_reduce_sum_device(float* data, std::size_t n, void* stream) override {
    EXPECT_EQ(stream, kStream);
    events.push_back("start " + std::to_string(data - base_) + "+" + std::to_string(n));
  }
  void start_reduce_scatter_sum_device(float* data, const std::size_t* offsets, std::size_t begin,
                                       std::size_t end, void* stream) override {
    EXPECT_EQ(stream, kStream);
    EXPECT_EQ(data, base_);
    events.push_back("onto owners " + std::to_string(begin) + ".." + std::to_string(end) + " of " +
                     std::to_string(offsets[0]) + "|" + std::to_string(offsets[1]) + "|" +
                     std::to_string(offsets[2]));
  }
  void finish_device_collectives(void* stream) override {
    EXPECT_EQ(stream, kStream);
    events.push_back("finish");
  }
  static inline void* const kStream = reinterpret_cast<void*>(0x5eed);
  std::vector<std::string> events;

 private:
  const float* base_;
};

struct Fixture {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  kernels::Buffer grads = backend->allocate(kernels::DType::f32, kernels::Shape{704});
  RecordingCommunicator comm{grads.tensor().ptr<float>()};
  dist::DeviceGradientReduction reduction{comm, RecordingCommunicator::kStream, grads.tensor(),
                                          kUnits, 250 * sizeof(float)};
};

TEST(DeviceGradientReduction, StartsEachBucketOnceTheLastBackwardCompletesIt) {
  Fixture f;
  // An earlier micro-batch: its reports start nothing (the gradients are not complete).
  for (int u = 3; u >= 0; --u) f.reduction.gradient_ready(u);
  EXPECT_TRUE(f.comm.events.empty());
  f.reduction.arm();
  f.reduction.gradient_ready(3);
  EXPECT_TRUE(f.comm.events.empty()) << "bucket 0 still misses unit 2";
  f.reduction.gradient_ready(2);
  EXPECT_EQ(f.comm.events, std::vector<std::string>({"start 384+316"}));
  f.reduction.gradient_ready(1);
  f.reduction.gradient_ready(0);
  f.reduction.finish();
  EXPECT_EQ(f.comm.events, std::vector<std::string>({"start 384+316", "start 0+328", "finish"}));
  EXPECT_EQ(f.reduction.started_during_backward(), 2);

  // The next step starts over; reports then are of that step.
  f.comm.events.clear();
  f.reduction.arm();
  f.reduction.gradient_ready(3);
  f.reduction.gradient_ready(2);
  f.reduction.finish();  // the backward stopped short: finish starts the rest, in order
  EXPECT_EQ(f.comm.events, std::vector<std::string>({"start 384+316", "start 0+328", "finish"}));
  EXPECT_EQ(f.reduction.started_during_backward(), 1);
}

TEST(DeviceGradientReduction, WithoutAnArmedBackwardFinishStartsEverything) {
  Fixture f;
  f.reduction.finish();
  EXPECT_EQ(f.comm.events, std::vector<std::string>({"start 384+316", "start 0+328", "finish"}));
  EXPECT_EQ(f.reduction.started_during_backward(), 0);
}

TEST(DeviceGradientReduction, RefusesAUnitReportedTwiceAndHostOnlyCommunicators) {
  Fixture f;
  f.reduction.arm();
  f.reduction.gradient_ready(3);
  EXPECT_THROW(f.reduction.gradient_ready(3), core::Error);
  EXPECT_THROW(f.reduction.gradient_ready(4), core::Error);

  dist::SingleProcessCommunicator host_only;
  try {
    dist::DeviceGradientReduction r(host_only, RecordingCommunicator::kStream, f.grads.tensor(),
                                    kUnits, 1024);
    FAIL() << "a host-only communicator was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reduce gradients in device memory"),
              std::string::npos)
        << e.what();
  }
}

TEST(DeviceGradientReduction, ZeroOneSumsEachBucketOntoTheOwnersOfItsElements) {
  Fixture f;
  dist::DeviceGradientReduction zero1{
      f.comm,       RecordingCommunicator::kStream, f.grads.tensor(), kUnits, 250 * sizeof(float),
      {0, 352, 704}};
  zero1.arm();
  for (int u = 3; u >= 0; --u) zero1.gradient_ready(u);
  zero1.finish();
  // The same buckets at the same moments as the all-reduce, each one summed onto its owners.
  EXPECT_EQ(f.comm.events, std::vector<std::string>({"onto owners 384..700 of 0|352|704",
                                                     "onto owners 0..328 of 0|352|704", "finish"}));
  EXPECT_EQ(zero1.started_during_backward(), 2);
  EXPECT_NE(zero1.describe().find("2 bucket(s) of up to"), std::string::npos) << zero1.describe();
  EXPECT_NE(zero1.describe().find("2 started by the backward"), std::string::npos);
  EXPECT_NE(zero1.describe().find("ZeRO-1"), std::string::npos);
  EXPECT_EQ(f.reduction.describe().find("ZeRO-1"), std::string::npos);
  // Ranges that do not fit the ranks or the buffer are refused.
  for (const std::vector<std::size_t>& bad :
       std::vector<std::vector<std::size_t>>{{0, 704}, {0, 400, 300}, {0, 352, 705}}) {
    EXPECT_THROW(dist::DeviceGradientReduction(f.comm, RecordingCommunicator::kStream,
                                               f.grads.tensor(), kUnits, 1024, bad),
                 core::Error);
  }
}

// The model's side: after a backward, each unit is reported once, in the backward's order, and
// its gradients are final when it is reported (nothing of the backward writes them afterwards).
class SnapshotListener final : public model::GradientReadyListener {
 public:
  explicit SnapshotListener(const model::Olmo3Model& m)
      : m_(m), units_(model::parameter_units(m.layout())) {}
  void gradient_ready(int unit) override {
    order.push_back(unit);
    const ParameterUnit& u = units_[static_cast<std::size_t>(unit)];
    const float* g = m_.grads().ptr<float>();
    snapshots.emplace_back(g + u.begin, g + u.end);
  }
  std::vector<int> order;
  std::vector<std::vector<float>> snapshots;

 private:
  const model::Olmo3Model& m_;
  std::vector<ParameterUnit> units_;
};

TEST(GradientReadyListener, EachUnitOnceInBackwardOrderWithItsGradientsFinal) {
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  const model::ModelConfig config = model::parse_model_config(io::ConfigSection(
      YAML::Load("{d_model: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, hidden_size: 64, "
                 "vocab_size: 50, embedding_size: 64, max_sequence_length: 32}"),
      "model"));
  model::Olmo3Model m(config, *backend);
  m.init_weights(3);
  SnapshotListener listener(m);
  m.set_gradient_listener(&listener);
  const std::int64_t B = 2, T = 16;
  std::mt19937_64 rng(5);
  std::vector<std::int64_t> ids(B * T), labels(B * T);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 49) + 1;
  for (std::size_t i = 0; i < ids.size(); ++i)
    labels[i] = (i + 1) % T == 0 ? core::kIgnoreIndex : ids[i + 1];

  m.forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 1.0f, false);
  EXPECT_TRUE(listener.order.empty()) << "a forward without backward reported gradients";
  m.zero_grads();
  m.forward_backward(ids.data(), labels.data(), B, T, 1e-4f, 1.0f, true);
  EXPECT_EQ(listener.order, std::vector<int>({4, 3, 2, 1, 0}));
  const std::vector<ParameterUnit> units = model::parameter_units(m.layout());
  const float* g = m.grads().ptr<float>();
  for (std::size_t i = 0; i < listener.order.size(); ++i) {
    const ParameterUnit& u = units[static_cast<std::size_t>(listener.order[i])];
    ASSERT_EQ(listener.snapshots[i].size(), static_cast<std::size_t>(u.size()));
    EXPECT_EQ(std::memcmp(listener.snapshots[i].data(), g + u.begin,
                          listener.snapshots[i].size() * sizeof(float)),
              0)
        << "unit " << listener.order[i] << " changed after it was reported";
    bool nonzero = false;
    for (float v : listener.snapshots[i]) nonzero = nonzero || v != 0.0f;
    EXPECT_TRUE(nonzero) << "unit " << listener.order[i] << " reported before its backward";
  }
  m.set_gradient_listener(nullptr);
}

}  // namespace
}  // namespace tandem
