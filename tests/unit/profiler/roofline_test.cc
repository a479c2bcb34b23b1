// The roofline classifier: which roof bounds each op, and the profile's summary.
#include "profiler/roofline.h"

#include <gtest/gtest.h>

namespace autouvm::profiler {
namespace {

constexpr int64_t kMiB = 1 << 20;

runtime::OpRecord Op(int64_t index, std::string name, std::vector<runtime::TensorUse> reads, double flops) {
  runtime::OpRecord op;
  op.index = index;
  op.op = std::move(name);
  op.kernel = op.op + "#" + std::to_string(index);
  op.reads = std::move(reads);
  op.flops = flops;
  return op;
}

TEST(RooflineTest, EachOpIsBoundByItsLargestRoof) {
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  runtime::AccessTrace t;
  // A 128 MiB weight read by a GEMV: HBM-bound when resident, link-bound when not.
  t.ops.push_back(Op(0, "aten::mm", {{"param:w", 128 * kMiB, 0, 128 * kMiB}}, 2.0 * 8192 * 8192));
  // A large GEMM on a small resident operand: compute-bound.
  t.ops.push_back(Op(1, "aten::mm", {{"act:x", 8 * kMiB, 0, 8 * kMiB}}, 2.0 * 8192 * 8192 * 8192));
  autouvm::v1::Profile resident, streamed;
  Classify(
      t, spec, [](const std::string&) { return true; }, &resident);
  Classify(
      t, spec, [](const std::string& id) { return id != "param:w"; }, &streamed);
  ASSERT_EQ(resident.ops_size(), 2);
  EXPECT_EQ(resident.ops(0).bound(), autouvm::v1::BOUND_HBM);
  EXPECT_EQ(resident.ops(0).link_seconds(), 0);
  EXPECT_EQ(resident.ops(1).bound(), autouvm::v1::BOUND_COMPUTE);
  EXPECT_EQ(streamed.ops(0).bound(), autouvm::v1::BOUND_LINK);
  EXPECT_NEAR(streamed.ops(0).link_seconds(), 128.0 * kMiB / spec.link_bytes_per_s, 1e-12);
  EXPECT_EQ(streamed.link_bound_ops(), 1);
  EXPECT_EQ(streamed.compute_bound_ops(), 1);
  EXPECT_EQ(resident.hbm_bound_ops(), 1);
  EXPECT_EQ(streamed.bytes_per_iteration(), 136 * kMiB);
  EXPECT_EQ(streamed.resident_bytes(), 8 * kMiB);
  EXPECT_GT(streamed.iteration_seconds(), resident.iteration_seconds());
  EXPECT_DOUBLE_EQ(streamed.top20_share(), 1.0);  // two ops: all of the time is in the top 20
}

TEST(RooflineTest, ANonResidentTensorCrossesTheLinkOncePerIterationAndTheTopTwentyShareIsComputed) {
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  runtime::AccessTrace t;
  t.ops.push_back(Op(0, "aten::mul", {{"param:big", 64 * kMiB, 0, 64 * kMiB}}, 0));
  t.ops.push_back(Op(1, "aten::add", {{"param:big", 64 * kMiB, 0, 64 * kMiB}}, 0));
  for (int i = 2; i < 40; ++i) t.ops.push_back(Op(i, "aten::relu", {{"act:s", 4096, 0, 4096}}, 1024));
  autouvm::v1::Profile p;
  Classify(
      t, spec, [](const std::string& id) { return id != "param:big"; }, &p);
  EXPECT_EQ(p.ops(0).bound(), autouvm::v1::BOUND_LINK);
  EXPECT_EQ(p.ops(1).link_seconds(), 0);  // already over
  EXPECT_EQ(p.ops(1).bound(), autouvm::v1::BOUND_HBM);
  EXPECT_GT(p.top20_share(), 0.5);
  EXPECT_LT(p.top20_share(), 1.0);
}

}  // namespace
}  // namespace autouvm::profiler
