// The executor against the simulated backend: what it keeps resident, the follower's identity check,
// staging through a device buffer, and plan switches (driver eviction and the runtime monitor:
// runtime_monitor_test.cc).
#include "runtime/executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "runtime/driver_eviction.h"
#include "runtime/op_timer.h"
#include "runtime/runtime_monitor.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/decode_like_trace.h"
#include "tests/testing/executor_fixture.h"

namespace autouvm::runtime {
namespace {

using ::testing::HasSubstr;
using testing_executor::DecodeLike;
using testing_executor::Fixture;
using testing_executor::kMiB;
using testing_executor::MovedWhileFollowing;
using testing_executor::PlanFor;
using testing_executor::Unstaged;

TEST(ExecutorTest, FollowingAPlanKeepsTheDeviceUnderItsBudget) {
  const AccessTrace t = DecodeLike(16, 64, /*rows=*/512);
  const int64_t budget = 16 * 64 * kMiB * 2 / 3;  // 1.5x oversubscribed
  Fixture f(t);
  Executor ex(f.sim.get(), PlanFor(t, budget), t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  f.RunWithin(t, ex, 3, budget, /*account=*/true);
  EXPECT_LE(ex.peak_resident_bytes(), budget);
  EXPECT_GT(ex.evicted_bytes(), 0);
  EXPECT_EQ(f.sim->ReadCounters()->gpu_faults, 0);  // each weight arrived before its op
}

// The pass's debug line (ModelSession): with set_time_copies, TakeFetchCounts says how long the copy
// stream spent on the pass's fetches, over what span, how long the compute stream waited for them and
// how long the pass's ops took, all from the backend's timed events; a second take, with no pass
// between, has nothing to time.
TEST(ExecutorTest, TimedFetchesSayHowLongTheirCopiesTookAndHowLongTheComputeWaited) {
  const AccessTrace t = DecodeLike(16, 64, /*rows=*/512);
  const int64_t budget = 16 * 64 * kMiB * 2 / 3;
  Fixture f(t);
  Executor ex(f.sim.get(), PlanFor(t, budget), t, f.ranges);
  ex.set_time_copies(true);
  ASSERT_TRUE(ex.Prepare().ok());
  f.RunWithin(t, ex, 1, budget);
  const Executor::FetchCounts c = ex.TakeFetchCounts();
  EXPECT_GT(c.ahead + c.at_op, 0);
  EXPECT_GT(c.copying_s, 0);
  EXPECT_GE(c.copy_span_s, c.copying_s * 0.999);
  EXPECT_GE(c.waited_s, 0);
  EXPECT_GT(c.pass_s, 0);
  const Executor::FetchCounts none = ex.TakeFetchCounts();
  EXPECT_EQ(none.ahead + none.at_op, 0);
  EXPECT_EQ(none.copying_s, -1);
  EXPECT_EQ(none.pass_s, -1);
}

// Note [KV pools by their live rows]: a pool of 160 MiB of which the profiled iteration reached 5 MiB
// (its live rows, at its start) is planned and placed as those 5 MiB: pinning it whole would take what
// the budget has for the weights.
TEST(ExecutorTest, AKvPoolIsPlacedByTheRowsItsTraceReachedNotItsWholeStorage) {
  AccessTrace t;
  t.named = {{"param:w0", 10 * kMiB}, {"param:kv_cache.layer0.k", 160 * kMiB}};
  OpRecord op{.index = 0, .op = "aten::index_select", .kernel = "aten::index_select#0"};
  op.reads = {{"param:w0", 10 * kMiB, 0, 10 * kMiB}, {"param:kv_cache.layer0.k", 4 * kMiB, 0, 4 * kMiB}};
  op.writes = {{"param:kv_cache.layer0.k", kMiB, 4 * kMiB, kMiB}};
  t.ops.push_back(op);
  const int64_t budget = 64 * kMiB;  // the pool's storage alone is 2.5 times this
  const Plan plan = PlanFor(t, budget);
  EXPECT_THAT(plan.pinned, ::testing::UnorderedElementsAre("param:w0", "param:kv_cache.layer0.k"));
  EXPECT_EQ(plan.pinned_bytes, 15 * kMiB);
  Fixture f(t);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  EXPECT_EQ(ex.resident_bytes(), 15 * kMiB);
  EXPECT_EQ(f.Resident("param:kv_cache.layer0.k"), 5 * kMiB) << "only the rows the trace reached came in";
}

TEST(ExecutorTest, TheFollowerStopsAtTheFirstOpThePlanDoesNotKnow) {
  const AccessTrace t = DecodeLike(8, 16, /*rows=*/512);
  Fixture f(t);
  Executor ex(f.sim.get(), PlanFor(t, 4 * 16 * kMiB), t, f.ranges);
  ASSERT_TRUE(ex.follows_ops());
  ASSERT_TRUE(ex.Prepare().ok());
  PlanFollower follower(&ex, t);
  auto run = [&](const std::vector<std::string>& kernels) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      follower.BeforeOp(static_cast<int64_t>(i));
      follower.OnOp({.index = static_cast<int64_t>(i), .op = "aten::mm", .kernel = kernels[i]});
    }
    return follower.EndIteration();
  };
  std::vector<std::string> same;
  for (const OpRecord& op : t.ops) same.push_back(op.kernel);
  EXPECT_TRUE(run(same).ok());
  EXPECT_GT(ex.staged_bytes(), 0);
  const int64_t fetched = ex.prefetched_bytes();
  EXPECT_GT(fetched, 0);
  EXPECT_EQ(follower.mismatches(), 0);

  std::vector<std::string> other = same;
  other[3] = "aten::addmm#0";
  absl::Status why = run(other);
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(why.message(), HasSubstr("op 3 is aten::addmm#0, the plan expected aten::mm#3"));
  EXPECT_EQ(follower.mismatches(), 1);
  // The plan staged its streamed weights; stopping put them back in managed memory, where the ops left
  // to the driver can fault them in (Note [Stopping with staged weights]).
  ASSERT_TRUE(ex.stages());
  EXPECT_EQ(ex.staged_bytes(), 0);
  for (const std::string& id : f.ids) {
    EXPECT_EQ(f.sim->Unstage(f.ranges[id].addr, f.ranges[id].bytes, Location::kHost).code(),
              absl::StatusCode::kFailedPrecondition)
        << id;
  }
  const int64_t after_mismatch = ex.prefetched_bytes();
  EXPECT_LT(after_mismatch - fetched, fetched);  // ops 4.. were left to the driver

  // A shorter iteration is a mismatch too; a matching one afterwards is followed again.
  EXPECT_THAT(run({same.begin(), same.begin() + 5}).message(), HasSubstr("ran 5 ops, the plan has 8"));
  EXPECT_EQ(follower.mismatches(), 2);
  EXPECT_TRUE(run(same).ok());
}

TEST(ExecutorTest, WithoutStagingADecodeStepReadsWhatIsNotPinnedInPlace) {
  const AccessTrace t = DecodeLike(16, 64);
  const int64_t budget = 16 * 64 * kMiB / 2;
  Fixture f(t, Unstaged());
  const runtime::Plan plan = PlanFor(t, budget, Unstaged());
  EXPECT_FALSE(plan.staged);
  EXPECT_GT(std::ssize(plan.remote), 0);
  EXPECT_EQ(std::ssize(plan.prefetches), 0);
  EXPECT_EQ(plan.window_bytes, 0);
  int64_t pinned_named = 0;  // the plan also pins the step's input, which has no range here
  for (const std::string& id : plan.pinned) pinned_named += f.ranges.count(id) ? f.ranges[id].bytes : 0;
  EXPECT_EQ(plan.remote_bytes + pinned_named, 16 * 64 * kMiB);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  EXPECT_FALSE(ex.follows_ops());
  for (int iteration = 0; iteration < 2; ++iteration) {
    for (const OpRecord& op : t.ops) f.Launch(op);
  }
  ASSERT_TRUE(f.sim->Synchronize().ok());
  // Pinned weights came in once; the others were read over the link where they are, never migrated.
  EXPECT_LE(f.AllResident(), budget);
  EXPECT_EQ(f.AllResident(), pinned_named);
  const UvmCounters moved = *f.sim->ReadCounters();
  EXPECT_EQ(moved.gpu_faults, 0);
  EXPECT_GE(moved.remote_bytes, 2 * plan.remote_bytes);
  EXPECT_EQ(ex.TakeFetchCounts().in_place_bytes, plan.remote_bytes) << "the plan's own in-place reads, counted";
}

TEST(ExecutorTest, StagedWeightsStreamThroughTheBudgetWithNothingMigratedAndComeBackOnRelease) {
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  const int64_t budget = 16 * 64 * kMiB / 2;
  Fixture f(t);
  const runtime::Plan plan = PlanFor(t, budget);
  EXPECT_TRUE(plan.staged);
  EXPECT_EQ(std::ssize(plan.remote), 0);  // a staged copy overlaps compute; a remote read does not
  ASSERT_GT(std::ssize(plan.prefetches), 0);
  {
    Executor ex(f.sim.get(), plan, t, f.ranges);
    ASSERT_TRUE(ex.Prepare().ok());
    EXPECT_TRUE(ex.stages());
    const int64_t pinned_in = ex.prefetched_bytes();
    const UvmCounters moved = MovedWhileFollowing(f, t, ex, 3, budget);
    // Every streamed byte came in as a staged copy, each iteration (and those of the next one issued
    // in the last); nothing faulted, migrated or went back.
    EXPECT_EQ(moved.h2d(MigrationCause::kStaged), ex.prefetched_bytes() - pinned_in);
    EXPECT_GE(moved.h2d(MigrationCause::kStaged), 3 * plan.streamed_bytes);
    EXPECT_EQ(moved.h2d_total(), moved.h2d(MigrationCause::kStaged));
    EXPECT_EQ(moved.gpu_faults, 0);
    EXPECT_EQ(moved.d2h_total(), 0);
    EXPECT_EQ(moved.dropped_bytes, ex.evicted_bytes());
    EXPECT_GT(ex.evicted_bytes(), 0);
    // A staged range cannot be staged twice, nor brought in under another size.
    const std::string streamed = plan.prefetches[0].tensors[0];
    const TensorRange r = f.ranges[streamed];
    EXPECT_EQ(f.sim->StageOut(r.addr, r.bytes).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(f.sim->StageIn(r.addr, r.bytes / 2, Stream::kCopy).code(), absl::StatusCode::kFailedPrecondition);
  }
  // The executor gone, its staged weights are managed memory again (on the host): nothing is left staged.
  for (const runtime::Prefetch& p : plan.prefetches) {
    for (const std::string& id : p.tensors) {
      const TensorRange r = f.ranges[id];
      EXPECT_EQ(f.sim->Unstage(r.addr, r.bytes, Location::kHost).code(), absl::StatusCode::kFailedPrecondition) << id;
      EXPECT_EQ(f.Resident(id), 0) << id;
    }
  }
}

// Records what the executor binds: tensor range → device address, with a check that no two tensors
// bound at once overlap in the device buffer.
class RecordingBinding final : public TensorBinding {
 public:
  std::map<uint64_t, std::pair<uint64_t, int64_t>> bound;  // range addr → device addr, bytes
  std::unordered_map<uint64_t, int64_t> bytes_of;          // range addr → bytes
  uint64_t lowest = UINT64_MAX, highest = 0;               // the device addresses ever bound
  int64_t binds = 0;
  std::string error;

  absl::Status Bind(uint64_t range_addr, uint64_t device_addr) override {
    const int64_t bytes = bytes_of.at(range_addr);
    for (const auto& [other, where] : bound) {
      if (other != range_addr && where.first < device_addr + bytes && device_addr < where.first + where.second) {
        error = absl::StrCat("tensor at ", range_addr, " bound over the one at ", other);
      }
    }
    bound[range_addr] = {device_addr, bytes};
    lowest = std::min(lowest, device_addr);
    highest = std::max(highest, device_addr + static_cast<uint64_t>(bytes));
    ++binds;
    return absl::OkStatus();
  }
  absl::Status Unbind(uint64_t range_addr) override {
    bound.erase(range_addr);
    return absl::OkStatus();
  }
  uint64_t BoundFrom(uint64_t device_addr) const override {
    for (const auto& [range, where] : bound) {
      if (where.first == device_addr) return range;
    }
    return 0;
  }
};

TEST(ExecutorTest, StagedWeightsGoThroughOneDeviceBufferBoundForTheirOpsFasterThanIntoTheirOwnRanges) {
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  const int64_t budget = 16 * 64 * kMiB / 2;
  const runtime::Plan plan = PlanFor(t, budget);
  ASSERT_TRUE(plan.staged);
  ASSERT_TRUE(plan.device_buffer);
  std::set<std::string> streamed;
  for (const runtime::Prefetch& p : plan.prefetches) streamed.insert(p.tensors.begin(), p.tensors.end());
  ASSERT_FALSE(streamed.empty());

  auto run = [&](const runtime::Plan& followed, RecordingBinding* binding) {
    Fixture f(t);
    if (binding != nullptr) {
      for (const auto& [id, r] : f.ranges) binding->bytes_of[r.addr] = r.bytes;
    }
    Executor ex(f.sim.get(), followed, t, f.ranges);
    ex.set_binding(binding);
    EXPECT_TRUE(ex.Prepare().ok());
    EXPECT_EQ(ex.uses_device_buffer(), followed.device_buffer);
    const UvmCounters before = *f.sim->ReadCounters();
    const double start = f.sim->Elapsed();
    for (int iteration = 0; iteration < 3; ++iteration) {
      for (size_t i = 0; i < t.ops.size(); ++i) {
        EXPECT_TRUE(ex.BeforeOp(static_cast<int64_t>(i)).ok());
        if (binding != nullptr) {  // every streamed weight the op reads points into the buffer now
          for (const TensorUse& u : t.ops[i].reads) {
            if (streamed.count(u.id)) EXPECT_TRUE(binding->bound.count(f.ranges[u.id].addr)) << u.id << " op " << i;
          }
        }
        f.Launch(t.ops[i]);
        EXPECT_TRUE(ex.AfterOp(static_cast<int64_t>(i)).ok());
        EXPECT_TRUE(f.sim->Synchronize().ok());
        EXPECT_LE(f.AllResident(), budget) << "iteration " << iteration << " op " << i;
      }
    }
    EXPECT_TRUE(f.sim->Synchronize().ok());
    const UvmCounters moved = *f.sim->ReadCounters() - before;
    EXPECT_GE(moved.h2d(MigrationCause::kStaged), 3 * plan.streamed_bytes);
    EXPECT_EQ(moved.h2d_total(), moved.h2d(MigrationCause::kStaged));
    EXPECT_EQ(moved.gpu_faults, 0);
    EXPECT_EQ(moved.d2h_total(), 0);
    EXPECT_LE(ex.peak_resident_bytes(), budget);
    return f.sim->Elapsed() - start;
  };
  RecordingBinding binding;
  const double buffered = run(plan, &binding);
  EXPECT_EQ(binding.error, "");
  EXPECT_GE(binding.binds, 3 * static_cast<int64_t>(streamed.size()));
  EXPECT_LE(static_cast<int64_t>(binding.highest - binding.lowest), plan.window_bytes);  // one buffer
  EXPECT_TRUE(binding.bound.empty());  // the executor gone, every tensor reads its own range again
  runtime::Plan into_ranges = plan;
  into_ranges.device_buffer = false;
  const double staged = run(into_ranges, nullptr);
  // The same copies without a populate before and a discard after each: faster.
  EXPECT_LT(buffered, 0.9 * staged) << buffered << " s against " << staged;
}

TEST(ExecutorTest, ADeviceBufferWithoutRoomForAnOpsWeightStopsTheFollowerSayingSo) {
  const AccessTrace t = testing::DecodeLikeTrace(8, 64, 1, /*elementwise=*/200);
  runtime::Plan plan = PlanFor(t, 8 * 64 * kMiB / 2);
  ASSERT_TRUE(plan.device_buffer);
  plan.window_bytes = 32 * kMiB;  // less than one 64 MiB weight
  Fixture f(t);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  ASSERT_TRUE(ex.uses_device_buffer());
  PlanFollower follower(&ex, t);
  for (size_t i = 0; i < t.ops.size(); ++i) {
    follower.BeforeOp(static_cast<int64_t>(i));
    follower.OnOp({.index = static_cast<int64_t>(i), .op = "aten::mm", .kernel = t.ops[i].kernel});
  }
  const absl::Status why = follower.EndIteration();
  EXPECT_EQ(why.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(why.message(), HasSubstr("the device buffer of 33554432 bytes has no room for param:"));
  EXPECT_EQ(ex.staged_bytes(), 0);  // put back in managed memory for the ops left to the driver
  EXPECT_FALSE(ex.uses_device_buffer());
}

TEST(ExecutorTest, APlanThatStagesFallsBackToReadMostlyStreamingOnABackendThatCannot) {
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  const int64_t budget = 16 * 64 * kMiB / 2;
  Fixture f(t, Unstaged());
  const runtime::Plan plan = PlanFor(t, budget);  // made for a platform that stages
  ASSERT_TRUE(plan.staged);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  EXPECT_FALSE(ex.stages());
  const int64_t pinned_in = ex.prefetched_bytes();
  const UvmCounters moved = MovedWhileFollowing(f, t, ex, 2, budget);
  EXPECT_EQ(moved.h2d(MigrationCause::kStaged), 0);
  EXPECT_EQ(moved.h2d(MigrationCause::kUserPrefetch), ex.prefetched_bytes() - pinned_in);
  EXPECT_EQ(moved.gpu_faults, 0);
}

TEST(ExecutorTest, WeightsThatDoNotFillWholeBlocksAreStagedOnlyThroughTheDeviceBuffer) {
  // 3 MiB weights end in the middle of a 2 MiB block, where a real allocator packs the next tensor and a
  // discard would reach it (Note [Stage whole blocks]): staged into their own ranges, they are read in
  // place instead (Note [Unstageable weights are read in place]); through the device buffer their
  // managed ranges are never discarded (a host copy is kept beside them) and they are staged like the
  // others.
  const AccessTrace t = testing::DecodeLikeTrace(16, 3, 1, /*elementwise=*/200);
  const int64_t budget = 16 * 3 * kMiB / 2;
  // Planned for a GPU that reads host memory slowly, so that the plan streams rather than reads in
  // place what it does not pin (the simulator finds these small weights faster read in place).
  GpuSpec slow_remote = *FindGpuSpec("h200-pcie5");
  slow_remote.uvm.remote_bytes_per_s = slow_remote.uvm.remote_matrix_bytes_per_s = 1e9;
  runtime::Plan plan = PlanFor(t, budget, slow_remote);
  ASSERT_TRUE(plan.staged);
  ASSERT_TRUE(plan.device_buffer);
  {
    Fixture f(t);
    Executor ex(f.sim.get(), plan, t, f.ranges);
    ASSERT_TRUE(ex.Prepare().ok());
    EXPECT_TRUE(ex.uses_device_buffer());
    const UvmCounters moved = MovedWhileFollowing(f, t, ex, 2, budget);
    EXPECT_GE(moved.h2d(MigrationCause::kStaged), 2 * plan.streamed_bytes);
    EXPECT_EQ(moved.h2d(MigrationCause::kUserPrefetch), 0);
    EXPECT_EQ(moved.gpu_faults, 0);
    ASSERT_TRUE(ex.Release().ok());
    EXPECT_EQ(ex.staged_bytes(), 0);
    // The kept copies are gone with the release; the ranges were never staged out.
    const std::string streamed = plan.prefetches[0].tensors[0];
    EXPECT_EQ(f.sim->Unstage(f.ranges[streamed].addr, f.ranges[streamed].bytes, Location::kHost).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  plan.device_buffer = false;
  Fixture f(t);
  // One of them left read-mostly on the device by someone before: its duplicate goes too.
  const std::string duplicated = plan.prefetches[0].tensors[0];
  const TensorRange w = f.ranges[duplicated];
  ASSERT_TRUE(f.sim->Advise(w.addr, w.bytes, Advice::kReadMostly, true, Location::kDevice).ok());
  ASSERT_TRUE(f.sim->Prefetch(w.addr, w.bytes, Location::kDevice, Stream::kCopy).ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  ASSERT_EQ(f.Resident(duplicated), w.bytes);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  EXPECT_EQ(f.Resident(duplicated), 0);
  EXPECT_FALSE(ex.uses_device_buffer());
  EXPECT_EQ(ex.in_place_bytes(), plan.streamed_bytes);
  // Within the budget after every op by the simulated driver's own count (RunWithin): a read-mostly
  // copy would have stayed on the device after its "eviction", as it does on the H200.
  const UvmCounters moved = MovedWhileFollowing(f, t, ex, 2, budget);
  EXPECT_EQ(moved.h2d(MigrationCause::kStaged), 0);
  EXPECT_EQ(moved.h2d(MigrationCause::kUserPrefetch), 0);
  EXPECT_GE(moved.remote_bytes, 2 * plan.streamed_bytes);
  EXPECT_EQ(moved.gpu_faults, 0);
  EXPECT_EQ(f.Resident(duplicated), 0);
}

// Note [Plans hand staged weights on] and Note [Host copies outlive staging]: the daemon switches
// between plans of one model that pin different weights — with the model's weights as candidates, plans
// of more room pin a superset of what plans of less room pin (Note [Nested spread],
// profiler/pinned_partition.cc).
TEST(ExecutorTest, ASwitchPutsWeightsTheNextPlanPinsOntoTheDeviceFromTheirHostCopiesAndMakesNoNewCopies) {
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  const int64_t named = 16 * 64 * kMiB;
  const runtime::Plan a = PlanFor(t, named / 2), b = PlanFor(t, named * 3 / 4);
  ASSERT_TRUE(a.staged);
  ASSERT_TRUE(b.staged);
  const std::set<std::string> pinned_a(a.pinned.begin(), a.pinned.end()), pinned_b(b.pinned.begin(), b.pinned.end());
  std::set<std::string> staged_a, staged_b;
  for (const runtime::Prefetch& p : a.prefetches) staged_a.insert(p.tensors.begin(), p.tensors.end());
  for (const runtime::Prefetch& p : b.prefetches) staged_b.insert(p.tensors.begin(), p.tensors.end());
  std::vector<std::string> a_stages_b_pins, b_stages_a_pins;
  for (const std::string& id : staged_a) {
    if (pinned_b.count(id)) a_stages_b_pins.push_back(id);
  }
  for (const std::string& id : staged_b) {
    if (pinned_a.count(id)) b_stages_a_pins.push_back(id);
  }
  ASSERT_FALSE(a_stages_b_pins.empty());
  EXPECT_TRUE(b_stages_a_pins.empty()) << "the plan with more room streams " << b_stages_a_pins.size()
                                       << " weights the plan with less room pins";
  const std::string one_of_b = *staged_b.begin();
  Fixture f(t);
  auto follow = [&](const runtime::Plan& plan) {
    auto ex = std::make_unique<Executor>(f.sim.get(), plan, t, f.ranges);
    EXPECT_TRUE(ex->Prepare().ok());
    // Every op finds its weights: nothing faults in the steady iteration, within the plan's budget.
    const UvmCounters moved = MovedWhileFollowing(f, t, *ex, 2, plan.budget_bytes);
    EXPECT_EQ(moved.gpu_faults, 0);
    return ex;
  };
  auto ex = follow(a);
  const int64_t filled_by_a = f.sim->host_copies_filled_bytes();
  EXPECT_GT(filled_by_a, 0);
  ASSERT_TRUE(ex->Release(Executor::Staged::kKeepStaged).ok());
  ex.reset();
  // B pins weights A staged: they reach the device as copies from their host copies, not migrations.
  ASSERT_TRUE(f.sim->Synchronize().ok());
  UvmCounters before = *f.sim->ReadCounters();
  ex = std::make_unique<Executor>(f.sim.get(), b, t, f.ranges);
  ASSERT_TRUE(ex->Prepare().ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  const UvmCounters prepared = *f.sim->ReadCounters() - before;
  int64_t handed_bytes = 0;
  for (const std::string& id : a_stages_b_pins) {
    handed_bytes += f.ranges[id].bytes;
    EXPECT_EQ(f.Resident(id), f.ranges[id].bytes) << id;
    EXPECT_EQ(f.sim->StagingOf(f.ranges[id].addr), DeviceBackend::Staging::kNone) << id;
  }
  EXPECT_GE(prepared.h2d(MigrationCause::kStaged), handed_bytes);
  EXPECT_EQ(f.sim->put_back_bytes(), 0);  // nothing went through managed memory on the host
  EXPECT_EQ(prepared.d2h_total(), 0);
  EXPECT_EQ(MovedWhileFollowing(f, t, *ex, 2, b.budget_bytes).gpu_faults, 0);
  const int64_t filled_by_b = f.sim->host_copies_filled_bytes();
  EXPECT_EQ(filled_by_b, filled_by_a);  // B stages only weights A staged: each has its host copy
  ASSERT_TRUE(ex->Release(Executor::Staged::kKeepStaged).ok());
  ex.reset();
  // Back to A and to B again: every weight either plan stages has a host copy already.
  for (const runtime::Plan* plan : {&a, &b}) {
    ex = follow(*plan);
    ASSERT_TRUE(ex->Release(Executor::Staged::kKeepStaged).ok());
    ex.reset();
  }
  EXPECT_EQ(f.sim->host_copies_filled_bytes(), filled_by_b);
  // A copy still standing for a staged range is not forgotten; once put back, all are.
  const TensorRange staged = f.ranges[one_of_b];
  ASSERT_EQ(f.sim->StagingOf(staged.addr), DeviceBackend::Staging::kDiscarded);
  EXPECT_EQ(f.sim->ForgetHostCopies(staged.addr, staged.bytes, DeviceBackend::WhenStaged::kRefuse).code(),
            absl::StatusCode::kFailedPrecondition);
  for (const std::string& id : staged_b) {
    ASSERT_TRUE(f.sim->Unstage(f.ranges[id].addr, f.ranges[id].bytes, Location::kHost).ok()) << id;
  }
  auto host_copies = [&] {
    int64_t sum = 0;
    for (const auto& [id, r] : f.ranges) sum += f.sim->HostCopyBytesWithin(r.addr, r.bytes);
    return sum;
  };
  int64_t staged_by_either = 0;
  for (const std::string& id : staged_a) staged_by_either += f.ranges[id].bytes;
  for (const std::string& id : staged_b) staged_by_either += staged_a.count(id) ? 0 : f.ranges[id].bytes;
  EXPECT_EQ(host_copies(), staged_by_either);  // one copy per weight either plan stages, kept for reuse
  for (const auto& [id, r] : f.ranges)
    ASSERT_TRUE(f.sim->ForgetHostCopies(r.addr, r.bytes, DeviceBackend::WhenStaged::kRefuse).ok()) << id;
  EXPECT_EQ(host_copies(), 0);
}

TEST(ExecutorTest, APaperPlanUnderAnEmulatedDriverStaysWithinTheBudgetAndEvictsNothingItself) {
  const AccessTrace t = DecodeLike(8, 16);
  const int64_t budget = 4 * 16 * kMiB;
  Fixture f(t);
  const auto key = profiler::DecodeKey("test", 1, "h200-pcie5", budget, "paper");
  const runtime::Plan plan = profiler::Analyze(key, t, *FindGpuSpec("h200-pcie5"), absl::Now()).plan;
  ASSERT_TRUE(plan.driver_evicts);
  ASSERT_GT(std::ssize(plan.prefetches), 0);
  DriverEviction ev(f.sim.get(), t, f.ranges, budget);
  Executor ex(f.sim.get(), plan, t, f.ranges);
  ex.set_driver_eviction(&ev);
  ASSERT_TRUE(ex.Prepare().ok());
  f.RunWithin(t, ex, 2, budget);
  EXPECT_EQ(ex.evicted_bytes(), 0);  // the (emulated) driver evicted, not the executor
  EXPECT_GT(ev.evicted_bytes(), 0);
  EXPECT_GT(ex.prefetched_bytes(), 0);
}

}  // namespace
}  // namespace autouvm::runtime
