// The op profile (kernels/op_profile.h): how marks are summed per op, which calls the backend
// records (the outermost public ops between start and finish, nothing else), and the FLOPs each
// op is credited with (the MFU's convention).
#include "tandem/kernels/op_profile.h"

#include <gtest/gtest.h>

#include <map>

#include "tandem/core/error.h"
#include "tandem/kernels/backend.h"

namespace tandem::kernels {
namespace {

TEST(OpProfile, SumsTheCallsOfEachOpLongestFirst) {
  const std::vector<ProfiledCall> calls = {
      {"add", 0.0, 0, 1}, {"gemm", 10.0, 2, 3}, {"add", 0.0, 4, 5}};
  const std::vector<double> marks = {1.0, 1.5, 2.0, 4.0, 5.0, 5.25};
  const OpProfile p = summarize_op_profile(calls, marks);
  ASSERT_EQ(p.ops.size(), 2u);
  EXPECT_EQ(p.ops[0].op, "gemm");
  EXPECT_EQ(p.ops[0].calls, 1);
  EXPECT_DOUBLE_EQ(p.ops[0].seconds, 2.0);
  EXPECT_DOUBLE_EQ(p.ops[0].flops, 10.0);
  EXPECT_EQ(p.ops[1].op, "add");
  EXPECT_EQ(p.ops[1].calls, 2);
  EXPECT_DOUBLE_EQ(p.ops[1].seconds, 0.75);
  EXPECT_DOUBLE_EQ(p.span_seconds, 4.25);
  EXPECT_DOUBLE_EQ(p.op_seconds(), 2.75);
  EXPECT_EQ(p.calls(), 3);
  EXPECT_TRUE(summarize_op_profile({}, {}).ops.empty());
  // A call whose end mark is missing (its record failed) is named, not summed as zero.
  EXPECT_THROW(summarize_op_profile({{"add", 0.0, 1, 1}}, marks), core::Error);
  EXPECT_THROW(summarize_op_profile({{"add", 0.0, 0, 9}}, marks), core::Error);
}

TEST(OpProfile, AttentionFlopsCountTheWindowSpanAsTheMfuDoes) {
  // 4 * B * T * Hq * D * span forward, twice that backward; span = min(window, T), T without one.
  EXPECT_DOUBLE_EQ(attention_flops(2, 16, 4, 8, 0, false), 4.0 * 2 * 16 * 4 * 8 * 16);
  EXPECT_DOUBLE_EQ(attention_flops(2, 16, 4, 8, -1, true), 8.0 * 2 * 16 * 4 * 8 * 16);
  EXPECT_DOUBLE_EQ(attention_flops(2, 16, 4, 8, 5, false), 4.0 * 2 * 16 * 4 * 8 * 5);
  EXPECT_DOUBLE_EQ(attention_flops(2, 16, 4, 8, 100, false), 4.0 * 2 * 16 * 4 * 8 * 16);
}

std::map<std::string, OpTime> by_name(const OpProfile& p) {
  std::map<std::string, OpTime> out;
  for (const OpTime& t : p.ops) out[t.op] = t;
  return out;
}

TEST(OpProfile, RecordsEachPublicOpBetweenStartAndFinishWithItsFlops) {
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  Buffer a = cpu->allocate(DType::f32, Shape{4, 3}), b = cpu->allocate(DType::f32, Shape{3, 5});
  Buffer c = cpu->allocate(DType::f32, Shape{4, 5}), c2 = cpu->allocate(DType::f32, Shape{4, 5});
  Buffer h = cpu->allocate(DType::bf16, Shape{4, 5}), empty = cpu->allocate(DType::f32, Shape{0});
  Buffer w = cpu->allocate(DType::f32, Shape{5, 3}), dw = cpu->allocate(DType::f32, Shape{5, 3});
  Buffer dx = cpu->allocate(DType::f32, Shape{4, 3});
  for (Buffer* t : {&a, &b, &c, &w}) cpu->fill(t->tensor(), 0.5f);

  cpu->gemm(false, false, 1.0f, a.tensor(), b.tensor(), 0.0f, c.tensor());  // before: not counted
  cpu->start_op_profile();
  for (int i = 0; i < 3; ++i)
    cpu->gemm(false, false, 1.0f, a.tensor(), b.tensor(), 0.0f, c.tensor());
  cpu->add(c.tensor(), c.tensor(), c2.tensor());
  cpu->add(c2.tensor(), c.tensor(), c2.tensor());
  cpu->cast(h.tensor(), c.tensor());
  cpu->zero(empty.tensor());  // no work: no call
  cpu->linear_forward(a.tensor(), w.tensor(), c.tensor());
  cpu->linear_backward(a.tensor(), w.tensor(), c.tensor(), dx.tensor(), dw.tensor(), false);
  cpu->linear_backward(a.tensor(), w.tensor(), c.tensor(), {}, dw.tensor(), false);
  const OpProfile p = cpu->finish_op_profile();
  cpu->add(c.tensor(), c.tensor(), c2.tensor());  // after: not counted

  const auto ops = by_name(p);
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops.at("gemm").calls, 3);
  EXPECT_DOUBLE_EQ(ops.at("gemm").flops, 3 * 2.0 * 4 * 5 * 3);
  EXPECT_EQ(ops.at("add").calls, 2);
  EXPECT_EQ(ops.at("add").flops, 0.0);
  EXPECT_EQ(ops.at("cast").calls, 1);
  EXPECT_EQ(ops.at("linear_forward").calls, 1);
  EXPECT_DOUBLE_EQ(ops.at("linear_forward").flops, 2.0 * 4 * 3 * 5);
  // dx and dw: two products; dw alone: one.
  EXPECT_EQ(ops.at("linear_backward").calls, 2);
  EXPECT_DOUBLE_EQ(ops.at("linear_backward").flops, 3 * 2.0 * 4 * 3 * 5);
  EXPECT_EQ(p.calls(), 9);
  double sum = 0.0;
  for (const OpTime& t : p.ops) {
    EXPECT_GE(t.seconds, 0.0) << t.op;
    sum += t.seconds;
  }
  EXPECT_DOUBLE_EQ(p.op_seconds(), sum);
  EXPECT_LE(p.op_seconds(), p.span_seconds);  // calls do not overlap on one thread
  // A second profile starts empty.
  cpu->start_op_profile();
  EXPECT_TRUE(cpu->finish_op_profile().ops.empty());
}

}  // namespace
}  // namespace tandem::kernels
