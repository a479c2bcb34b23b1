// Note [Staged passes captured] (runtime/executor_capture.cc), the executor's part on the simulated backend:
// with a periodic ring its passes come to repeat — each starts in the state the last started and ended
// in — where a ring carried over from pass to pass places each pass elsewhere; a replayed pass counts
// what the captured one fetched; and a pass from a state that does not repeat cannot be replayed.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/executor.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/decode_like_trace.h"
#include "tests/testing/executor_fixture.h"

namespace autouvm::runtime {
namespace {

using testing_executor::Fixture;
using testing_executor::kMiB;
using testing_executor::PlanFor;

// Each pass's first op's key and whether it repeated, and what the pass fetched.
struct Pass {
  uint64_t key = 0;
  bool repeats = false;
  int64_t fetched = 0;
};

// One pass of `t` through `ex` on `f`'s backend.
void RunPass(Fixture& f, Executor& ex, const AccessTrace& t) {
  for (size_t i = 0; i < t.ops.size(); ++i) {
    ASSERT_TRUE(ex.BeforeOp(static_cast<int64_t>(i)).ok());
    f.Launch(t.ops[i]);
    ASSERT_TRUE(ex.AfterOp(static_cast<int64_t>(i)).ok());
  }
}

// `passes` passes of `t` through an executor of `plan` prepared on `f`'s backend, released at the end.
std::vector<Pass> RunPasses(Fixture& f, const AccessTrace& t, const Plan& plan, bool periodic, int passes) {
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ex.set_periodic_ring(periodic);
  EXPECT_TRUE(ex.Prepare().ok());
  EXPECT_TRUE(ex.uses_device_buffer());
  std::vector<Pass> out;
  for (int pass = 0; pass < passes; ++pass) {
    Pass p{.key = ex.PassKey(), .repeats = ex.PassRepeats()};
    const int64_t before = ex.prefetched_bytes();
    RunPass(f, ex, t);
    p.fetched = ex.prefetched_bytes() - before;
    out.push_back(p);
  }
  return out;
}

std::vector<Pass> RunPasses(const AccessTrace& t, const Plan& plan, bool periodic, int passes) {
  Fixture f(t);
  return RunPasses(f, t, plan, periodic, passes);
}

// A plan whose passes stream seven 64 MiB weights through a window of three (the planner's holds one and
// some: every weight goes at 0): carried over, the ring's tail would move by 64 MiB a pass.
Plan DriftingPlan(const AccessTrace& t) {
  Plan plan = PlanFor(t, 8 * 64 * kMiB / 2);
  EXPECT_TRUE(plan.device_buffer);
  plan.window_bytes = 3 * 64 * kMiB;
  return plan;
}

TEST(ExecutorCaptureTest, WithAPeriodicRingPassesRepeatFromTheThirdWithoutItTheyDoNot) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  const Plan plan = DriftingPlan(t);
  int64_t streamed_per_pass = 0;
  for (const Prefetch& p : plan.prefetches) streamed_per_pass += static_cast<int64_t>(p.tensors.size()) * 64 * kMiB;
  ASSERT_NE(streamed_per_pass % plan.window_bytes, 0) << "the ring must drift for this test to mean anything";

  const std::vector<Pass> periodic = RunPasses(t, plan, /*periodic=*/true, 8);
  EXPECT_FALSE(periodic[0].repeats);  // nothing ran yet
  int first = -1;
  for (int k = 0; k < 8; ++k) {
    if (periodic[static_cast<size_t>(k)].repeats && first < 0) first = k;
    if (first >= 0) {
      EXPECT_TRUE(periodic[static_cast<size_t>(k)].repeats) << "pass " << k;
      EXPECT_EQ(periodic[static_cast<size_t>(k)].key, periodic[static_cast<size_t>(first)].key) << "pass " << k;
    }
    EXPECT_NE(periodic[static_cast<size_t>(k)].key, 0u);
    // The first pass also fetches the next one's first weight ahead; from then on each fetches its own.
    if (k > 0) EXPECT_EQ(periodic[static_cast<size_t>(k)].fetched, streamed_per_pass) << "pass " << k;
  }
  EXPECT_GE(first, 1);
  EXPECT_LE(first, 2);

  // Carried over, the ring places each pass elsewhere: no pass can be captured (nor is asked for a key).
  const std::vector<Pass> carried = RunPasses(t, plan, /*periodic=*/false, 8);
  for (const Pass& p : carried) {
    EXPECT_EQ(p.key, 0u);
    EXPECT_FALSE(p.repeats);
  }
}

TEST(ExecutorCaptureTest, AReplayedPassCountsWhatTheCapturedOneFetchedAndOnlyAPassThatRepeatsCanBeReplayed) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  const Plan plan = DriftingPlan(t);
  Fixture f(t);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ex.set_periodic_ring(true);
  ASSERT_TRUE(ex.Prepare().ok());
  EXPECT_EQ(ex.Replayed().code(), absl::StatusCode::kFailedPrecondition);  // no pass ran
  auto run = [&] { RunPass(f, ex, t); };
  for (int pass = 0; pass < 3 && !ex.PassRepeats(); ++pass) run();
  ASSERT_TRUE(ex.PassRepeats());
  const uint64_t key = ex.PassKey();
  int64_t before = ex.prefetched_bytes();
  (void)ex.TakeFetchCounts();
  run();  // the pass a graph would capture
  const int64_t fetched = ex.prefetched_bytes() - before;
  const Executor::FetchCounts captured = ex.TakeFetchCounts();
  ex.AfterCapture();
  EXPECT_GT(fetched, 0);
  for (int replay = 0; replay < 3; ++replay) {
    before = ex.prefetched_bytes();
    ASSERT_TRUE(ex.Replayed().ok());
    EXPECT_EQ(ex.prefetched_bytes() - before, fetched);
    const Executor::FetchCounts counts = ex.TakeFetchCounts();
    EXPECT_EQ(counts.ahead, captured.ahead);
    EXPECT_EQ(counts.at_op, captured.at_op);
    EXPECT_EQ(ex.PassKey(), key);  // a replay leaves the state where it found it
  }
  // An eager pass after the replays runs as the captured one did, from the events the replays left.
  before = ex.prefetched_bytes();
  run();
  EXPECT_EQ(ex.prefetched_bytes() - before, fetched);
  EXPECT_TRUE(ex.PassRepeats());
  // A pass cut short repeats nothing: the next cannot be replayed.
  ex.AbandonIteration();
  EXPECT_FALSE(ex.PassRepeats());
  EXPECT_EQ(ex.Replayed().code(), absl::StatusCode::kFailedPrecondition);
}

// A graph's copies read the host copies and fill the buffer of the preparation it was captured in: the
// same plan prepared again (a plan switched away and back, as between each request's prefill and decode)
// never gives a key of the last preparation's, although it repeats the same passes over the same buffer.
TEST(ExecutorCaptureTest, APlanPreparedAgainRepeatsUnderAKeyOfItsOwn) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  const Plan plan = DriftingPlan(t);
  Fixture f(t);
  // Two preparations, one after the other, on one backend; by its fourth pass each repeats.
  const std::vector<Pass> first = RunPasses(f, t, plan, /*periodic=*/true, 4);
  const std::vector<Pass> second = RunPasses(f, t, plan, /*periodic=*/true, 4);
  EXPECT_TRUE(first.back().repeats);
  EXPECT_TRUE(second.back().repeats);
  EXPECT_NE(first.back().key, 0u);
  EXPECT_NE(second.back().key, 0u);
  EXPECT_NE(first.back().key, second.back().key);
}

// Note [Coded copies captured] (runtime/cuda/cuda_backend_capture.cc), the executor's part: a replay tells
// the backend what its capture's copies moved, coded bytes and decoded ones included, and a host copy
// whose coded size changes (the coder finished it) changes the key, so its graph is captured again.
TEST(ExecutorCaptureTest, AReplayCountsItsCapturesCodedBytesAndANewlyCodedCopyChangesTheKey) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  const Plan plan = DriftingPlan(t);
  GpuSpec spec = *FindGpuSpec("h200-pcie5");
  spec.decode_bytes_per_s = 400e9;
  Fixture f(t, sim::SimOptions{.spec = spec, .coded_ratio = 0.7});
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ex.set_periodic_ring(true);
  ASSERT_TRUE(ex.Prepare().ok());
  auto run = [&] { RunPass(f, ex, t); };
  for (int pass = 0; pass < 3 && !ex.PassRepeats(); ++pass) run();
  ASSERT_TRUE(ex.PassRepeats());
  const uint64_t key = ex.PassKey();
  const DeviceBackend::StagingTally before = f.sim->StagingSoFar();
  run();  // the pass a graph would capture
  const DeviceBackend::StagingTally after = f.sim->StagingSoFar();
  const DeviceBackend::StagingTally captured{after.link - before.link, after.coded - before.coded,
                                             after.decoded - before.decoded};
  ex.AfterCapture();
  ASSERT_GT(captured.coded, 0);
  EXPECT_EQ(captured.link, captured.coded);  // every streamed weight crosses coded (64 MiB each)
  EXPECT_GT(captured.decoded, captured.coded);
  for (int replay = 0; replay < 2; ++replay) {
    const DeviceBackend::StagingTally r0 = f.sim->StagingSoFar();
    ASSERT_TRUE(ex.Replayed().ok());
    const DeviceBackend::StagingTally r1 = f.sim->StagingSoFar();
    EXPECT_EQ(r1.link - r0.link, captured.link);
    EXPECT_EQ(r1.coded - r0.coded, captured.coded);
    EXPECT_EQ(r1.decoded - r0.decoded, captured.decoded);
    EXPECT_EQ(f.sim->ReadCounters()->coded_bytes, r1.coded);  // the metrics see the replays
  }
  EXPECT_EQ(ex.PassKey(), key);
  // A weight's copy found to code otherwise: the captured pass no longer stands for the next one.
  f.sim->SetCodedBytes(f.ranges.at(t.named.front().id).addr, 1 << 20);
  EXPECT_NE(ex.PassKey(), key);
  EXPECT_FALSE(ex.PassRepeats());
  EXPECT_EQ(ex.Replayed().code(), absl::StatusCode::kFailedPrecondition);
  run();
  run();
  EXPECT_TRUE(ex.PassRepeats());  // the same size set again changes nothing
  const uint64_t again = ex.PassKey();
  f.sim->SetCodedBytes(f.ranges.at(t.named.front().id).addr, 1 << 20);
  EXPECT_EQ(ex.PassKey(), again);
}

}  // namespace
}  // namespace autouvm::runtime
