// The executor's part that follows the KV pools' rows in use (runtime/executor_kv_rows.cc), against the
// simulated backend: rows placed before the step, pinned weights displaced to stay within the budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/executor.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/executor_fixture.h"

namespace autouvm::runtime {
namespace {

using testing_executor::Fixture;
using testing_executor::kMiB;
using testing_executor::PlanFor;

// Note [KV pools follow the rows in use]: four weights of 16 MiB (a decode step's products, read by one
// op each) and a pool of 64 rows of 1 MiB whose profiled step reached 5 rows, planned within exactly
// what they need. Told that 21 rows are in use, the executor brings the 16 new rows in before the step
// and reads the last pinned weight in place to make room for them: the device never holds more than the
// budget, and the step raises no fault.
TEST(ExecutorTest, KvRowsInUseComeInBeforeTheStepAndDisplaceTheLastPinnedWeightToStayWithinTheBudget) {
  AccessTrace t;
  const std::string kv = "param:kv_cache.layer0.k";
  for (int i = 0; i < 4; ++i) {
    const std::string w = absl::StrCat("param:w", i);
    t.named.push_back({w, 16 * kMiB});
    OpRecord op{.index = i, .op = "aten::mm", .kernel = absl::StrCat("aten::mm#", i)};
    op.reads = {{w, 16 * kMiB, 0, 16 * kMiB}};
    op.flops = 16.0 * kMiB;  // 1 FLOP per byte: a matrix-vector product
    if (i == 1) {
      op.reads.push_back({kv, 4 * kMiB, 0, 4 * kMiB});
      op.writes = {{kv, kMiB, 4 * kMiB, kMiB}};
    }
    t.ops.push_back(op);
  }
  t.named.push_back({kv, 64 * kMiB});
  const int64_t budget = 69 * kMiB;
  const Plan plan = PlanFor(t, budget);
  ASSERT_EQ(plan.pinned_bytes, budget) << "everything the step reaches is pinned";
  Fixture f(t);
  // The step's kernels over the rows in use, not the pool's storage.
  auto step = [&](Executor& ex, int64_t rows) {
    for (size_t i = 0; i < t.ops.size(); ++i) {
      ASSERT_TRUE(ex.BeforeOp(static_cast<int64_t>(i)).ok());
      sim::SimKernel k{t.ops[i].kernel, {}, t.ops[i].flops};
      k.ranges.push_back({f.ranges[absl::StrCat("param:w", i)].addr, 16 * kMiB});
      if (i == 1) k.ranges.push_back({f.ranges[kv].addr, rows * kMiB});
      f.sim->Launch(k);
      ASSERT_TRUE(ex.AfterOp(static_cast<int64_t>(i)).ok());
    }
    ASSERT_TRUE(f.sim->Synchronize().ok());
  };
  {
    Executor ex(f.sim.get(), plan, t, f.ranges);
    ASSERT_TRUE(ex.Prepare().ok());
    EXPECT_EQ(ex.resident_bytes(), budget);
    step(ex, 5);
    ASSERT_TRUE(ex.SetKvRows(21, 64).ok());
    ASSERT_TRUE(f.sim->Synchronize().ok());
    EXPECT_EQ(f.Resident(kv), 21 * kMiB) << "the rows in use came in before the step";
    EXPECT_EQ(f.Resident("param:w3"), 0) << "the last weight pinned is read in place";
    EXPECT_EQ(f.Resident("param:w0"), 16 * kMiB);
    EXPECT_EQ(ex.displaced_bytes(), 16 * kMiB);
    EXPECT_EQ(ex.in_place_bytes(), 16 * kMiB);
    EXPECT_EQ(ex.resident_bytes(), budget);
    const UvmCounters before = *f.sim->ReadCounters();
    step(ex, 21);
    const UvmCounters moved = *f.sim->ReadCounters() - before;
    EXPECT_EQ(moved.gpu_faults, 0);
    EXPECT_EQ(moved.remote_bytes, 16 * kMiB) << "w3, read over the link in place";
    EXPECT_LE(f.AllResident(), budget);
    // Rows that fall out of use stay: the next sequences take those blocks first.
    ASSERT_TRUE(ex.SetKvRows(8, 64).ok());
    EXPECT_EQ(f.Resident(kv), 21 * kMiB);
    EXPECT_EQ(ex.displaced_bytes(), 16 * kMiB);
    ASSERT_TRUE(ex.Release().ok());
  }
  // A plan prepared while 21 rows are in use places them and never brings the displaced weight in.
  Fixture g(t);
  Executor fresh(g.sim.get(), plan, t, g.ranges);
  ASSERT_TRUE(fresh.SetKvRows(21, 64).ok());
  ASSERT_TRUE(fresh.Prepare().ok());
  ASSERT_TRUE(g.sim->Synchronize().ok());
  EXPECT_EQ(g.Resident(kv), 21 * kMiB);
  EXPECT_EQ(g.Resident("param:w3"), 0);
  EXPECT_EQ(fresh.resident_bytes(), budget);
  EXPECT_EQ(g.sim->ReadCounters()->h2d_total(), budget) << "w3 never crossed";
  // With room in its budget the same growth displaces nothing.
  Fixture h(t);
  Executor roomy(h.sim.get(), PlanFor(t, 100 * kMiB), t, h.ranges);
  ASSERT_TRUE(roomy.Prepare().ok());
  ASSERT_TRUE(roomy.SetKvRows(21, 64).ok());
  EXPECT_EQ(roomy.displaced_bytes(), 0);
  EXPECT_EQ(roomy.resident_bytes(), 85 * kMiB);
}

// Note [Displace the fewest bytes]: weights of 16 and 64 MiB in turn, all pinned, and a pool whose rows
// in use grow 8 MiB past the budget at a time. Each growth reads in place the smallest weight that
// covers it (a 16 MiB one, while one is left), never a 64 MiB one for 8 MiB.
TEST(ExecutorTest, KvRowsDisplaceTheSmallestWeightThatMakesRoomForThem) {
  AccessTrace t;
  const std::string kv = "param:kv_cache.layer0.k";
  const int64_t sizes[] = {16 * kMiB, 64 * kMiB, 16 * kMiB, 64 * kMiB};
  for (int i = 0; i < 4; ++i) {
    const std::string w = absl::StrCat("param:w", i);
    t.named.push_back({w, sizes[i]});
    OpRecord op{.index = i, .op = "aten::mm", .kernel = absl::StrCat("aten::mm#", i)};
    op.reads = {{w, sizes[i], 0, sizes[i]}};
    op.flops = static_cast<double>(sizes[i]);  // a matrix-vector product
    if (i == 1) {
      op.reads.push_back({kv, 4 * kMiB, 0, 4 * kMiB});
      op.writes = {{kv, kMiB, 4 * kMiB, kMiB}};
    }
    t.ops.push_back(op);
  }
  t.named.push_back({kv, 64 * kMiB});
  const int64_t budget = 165 * kMiB;  // the weights and the 5 rows the profiled step reached
  const Plan plan = PlanFor(t, budget);
  ASSERT_EQ(plan.pinned_bytes, budget);
  Fixture f(t);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  auto resident_weights = [&] {
    std::vector<int64_t> r;
    for (int i = 0; i < 4; ++i) r.push_back(f.Resident(absl::StrCat("param:w", i)));
    return r;
  };
  ASSERT_TRUE(ex.SetKvRows(13, 64).ok());  // 8 MiB over
  ASSERT_TRUE(f.sim->Synchronize().ok());
  EXPECT_EQ(ex.displaced_bytes(), 16 * kMiB);
  EXPECT_THAT(resident_weights(), ::testing::UnorderedElementsAre(0, 16 * kMiB, 64 * kMiB, 64 * kMiB));
  ASSERT_TRUE(ex.SetKvRows(29, 64).ok());  // 8 MiB over again: the other 16 MiB weight
  ASSERT_TRUE(f.sim->Synchronize().ok());
  EXPECT_EQ(ex.displaced_bytes(), 32 * kMiB);
  EXPECT_THAT(resident_weights(), ::testing::ElementsAre(0, 64 * kMiB, 0, 64 * kMiB));
  ASSERT_TRUE(ex.SetKvRows(45, 64).ok());  // no 16 MiB weight left: one of 64 MiB
  ASSERT_TRUE(f.sim->Synchronize().ok());
  EXPECT_EQ(ex.displaced_bytes(), 96 * kMiB);
  EXPECT_THAT(resident_weights(), ::testing::UnorderedElementsAre(0, 0, 0, 64 * kMiB));
  EXPECT_EQ(f.Resident(kv), 45 * kMiB);
  EXPECT_LE(f.AllResident(), budget);
  ASSERT_TRUE(ex.Release().ok());
}

}  // namespace
}  // namespace autouvm::runtime
