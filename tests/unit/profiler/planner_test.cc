// The planner: everything pinned when it fits; over budget, a window for streaming, the tensors used
// more than once per iteration pinned first, then the earliest; prefetches issued as early as the window
// allows, wrapping into the previous iteration; `stock` plans nothing.
#include "profiler/planner.h"

#include <gtest/gtest.h>

#include "profiler/profile_key.h"
#include "profiler/reuse.h"

namespace autouvm::profiler {
namespace {

constexpr int64_t kMiB = 1 << 20;

runtime::OpRecord Op(int64_t i, std::vector<std::string> ids, int64_t mib) {
  runtime::OpRecord op;
  op.index = i;
  op.op = "aten::mm";
  op.kernel = "aten::mm#" + std::to_string(i);
  for (auto& id : ids) op.reads.push_back({id, mib * kMiB, 0, mib * kMiB});
  return op;
}

// Eight 10 MiB weights used once each, and a 10 MiB cache used by every op.
runtime::AccessTrace Loop() {
  runtime::AccessTrace t;
  for (int i = 0; i < 8; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "param:kv"}, 10));
  return t;
}

autouvm::v1::Plan Plan(const runtime::AccessTrace& t, const std::string& policy, int64_t budget) {
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", budget, policy);
  return MakePlan(key, t, ReuseDistances(t), budget);
}

TEST(PlannerTest, EverythingIsPinnedWhenItFits) {
  const auto p = Plan(Loop(), "autouvm", 90 * kMiB);
  EXPECT_EQ(p.pinned_size(), 9);
  EXPECT_EQ(p.pinned_bytes(), 90 * kMiB);
  EXPECT_EQ(p.streamed_bytes(), 0);
  EXPECT_EQ(p.prefetches_size(), 0);
  EXPECT_TRUE(PinnedResidency(p)("param:w7"));
}

TEST(PlannerTest, StockPlansNothing) {
  const auto p = Plan(Loop(), "stock", 90 * kMiB);
  EXPECT_EQ(p.pinned_size(), 0);
  EXPECT_EQ(p.prefetches_size(), 0);
  EXPECT_FALSE(PinnedResidency(p)("param:w0"));
}

TEST(PlannerTest, OverBudgetTheReusedTensorAndTheFirstWeightsArePinnedAndTheRestStreamed) {
  // 80 MiB budget: window = 2 x 20 MiB (the widest op), 40 MiB to pin: the cache (used by all eight
  // ops; streaming it would fetch it again and again) and w0..w2 (earliest first).
  const auto p = Plan(Loop(), "autouvm", 80 * kMiB);
  EXPECT_EQ(p.window_bytes(), 40 * kMiB);
  EXPECT_EQ(std::vector<std::string>(p.pinned().begin(), p.pinned().end()),
            (std::vector<std::string>{"param:w0", "param:kv", "param:w1", "param:w2"}));
  EXPECT_EQ(p.pinned_bytes(), 40 * kMiB);
  // w3..w7 stream: 50 MiB per iteration, one fetch each, for ops 3..7.
  EXPECT_EQ(p.streamed_bytes(), 50 * kMiB);
  ASSERT_EQ(p.prefetches_size(), 5);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(p.prefetches(k).for_op(), 3 + k);
    EXPECT_EQ(p.prefetches(k).tensors(0), "param:w" + std::to_string(3 + k));
  }
  // The 40 MiB window holds four 10 MiB fetches. w3's walks back over ops 2..0 (nothing fetched there)
  // into the previous iteration, past w7's, w6's and w5's fetches: issued at op 5 of the iteration
  // before. w7's has w4..w6 queued ahead of it: issued at op 4.
  EXPECT_EQ(p.prefetches(0).issue_at_op(), 5);
  EXPECT_EQ(p.prefetches(4).issue_at_op(), 4);
}

TEST(PlannerTest, AFetchIsIssuedInThePreviousIterationWhenTheWindowAllows) {
  // Four 10 MiB weights (ops 0-3), then four 1 MiB norms (ops 4-7). Budget 42 MiB: window 20 MiB, 22 to
  // pin: w0, w1, s4, s5. w2, w3, s6, s7 stream.
  runtime::AccessTrace t;
  for (int i = 0; i < 4; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}, 10));
  for (int i = 4; i < 8; ++i) t.ops.push_back(Op(i, {"param:s" + std::to_string(i)}, 1));
  const auto p = Plan(t, "autouvm", 42 * kMiB);
  EXPECT_EQ(p.window_bytes(), 20 * kMiB);
  EXPECT_EQ(std::vector<std::string>(p.pinned().begin(), p.pinned().end()),
            (std::vector<std::string>{"param:w0", "param:w1", "param:s4", "param:s5"}));
  EXPECT_EQ(p.streamed_bytes(), 22 * kMiB);
  ASSERT_EQ(p.prefetches_size(), 4);
  EXPECT_EQ(p.prefetches(0).for_op(), 2);
  // w2 walks back over ops 1, 0, 7 (s7: 11 MiB queued), 6 (s6: 12), 5, 4, and stops at op 3 (w3 would
  // make 22 > 20): issued at op 4 of the previous iteration.
  EXPECT_EQ(p.prefetches(0).issue_at_op(), 4);
}

}  // namespace
}  // namespace autouvm::profiler
