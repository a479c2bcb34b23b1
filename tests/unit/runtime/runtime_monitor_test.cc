// The driver eviction the baselines get under a software budget, and the runtime monitor that notices
// when what the plan pins is no longer on the device, against the simulated backend.
#include "runtime/runtime_monitor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/driver_eviction.h"
#include "runtime/op_timer.h"
#include "tests/testing/executor_fixture.h"

namespace autouvm::runtime {
namespace {

using testing_executor::DecodeLike;
using testing_executor::Fixture;
using testing_executor::kMiB;
using testing_executor::Unstaged;

TEST(DriverEvictionTest, TheChunksGivenGpuMemoryFirstGoBackWhenAnOpNeedsRoom) {
  const AccessTrace t = DecodeLike(6, 4);  // six 4 MiB weights, two 2 MiB chunks each
  Fixture f(t);
  DriverEviction ev(f.sim.get(), t, f.ranges, 3 * 4 * kMiB);
  for (int iteration = 0; iteration < 2; ++iteration) {
    for (size_t i = 0; i < t.ops.size(); ++i) {
      ASSERT_TRUE(ev.BeforeOp(static_cast<int64_t>(i)).ok());
      f.Launch(t.ops[i]);
      ASSERT_TRUE(f.sim->Synchronize().ok());
      EXPECT_LE(f.AllResident(), 3 * 4 * kMiB);
      EXPECT_EQ(f.AllResident(), ev.resident_bytes());
      EXPECT_EQ(f.Resident(f.ids[i]), 4 * kMiB);  // the op's own weight is never a victim
    }
  }
  // First in, first out: a cyclic sweep finds none of its weights left (the driver's pathology).
  EXPECT_EQ(f.Resident("param:w0"), 0);
  EXPECT_EQ(f.Resident("param:w2"), 0);
  EXPECT_EQ(f.Resident("param:w3"), 4 * kMiB);
  EXPECT_EQ(f.Resident("param:w5"), 4 * kMiB);
  // Evicted weights were migrated back (not read-mostly): device→host bytes, the driver's way.
  EXPECT_GT(f.sim->ReadCounters()->d2h_total(), 0);
  EXPECT_EQ(ev.evicted_bytes(), (6 + 3) * 4 * kMiB);  // 3 in the first sweep, all 6 in the second
  EXPECT_EQ(ev.peak_resident_bytes(), 3 * 4 * kMiB);
  // A tensor a policy prefetched itself is counted, room made first.
  ASSERT_TRUE(ev.Prefetched("param:w0").ok());
  EXPECT_EQ(ev.resident_bytes(), 3 * 4 * kMiB);
  EXPECT_EQ(f.Resident("param:w3"), 0);
}

// One iteration with each op timed on the simulated GPU.
std::vector<double> TimedIteration(Fixture& f, const AccessTrace& t) {
  OpTimer timer(f.sim.get(), 1);
  timer.BeginIteration();
  for (size_t i = 0; i < t.ops.size(); ++i) {
    timer.BeforeOp(static_cast<int64_t>(i));
    f.Launch(t.ops[i]);
  }
  auto seconds = timer.EndIteration();
  EXPECT_TRUE(seconds.ok()) << seconds.status();
  return seconds.ok() ? *seconds : std::vector<double>();
}

TEST(RuntimeMonitorTest, APinnedWeightEvictedBehindThePlansBackIsNamedAndBroughtBack) {
  const AccessTrace t = DecodeLike(8, 64);
  const int64_t budget = 9 * 64 * kMiB;  // everything fits, activations too: all pinned
  Fixture f(t);
  const auto key = profiler::DecodeKey("test", 1, "h200-pcie5", budget, "autouvm");
  const profiler::Analysis a = profiler::Analyze(key, t, f.sim->spec(), absl::Now());
  Executor ex(f.sim.get(), a.plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  RuntimeMonitor monitor(t, a.profile, a.plan, f.sim->spec(), {});
  EXPECT_THAT(monitor.Observe(TimedIteration(f, t)), ::testing::IsEmpty());

  // Something else (another model, the driver) takes w3 off the device.
  const TensorRange w3 = f.ranges["param:w3"];
  ASSERT_TRUE(f.sim->Prefetch(w3.addr, w3.bytes, Location::kHost, Stream::kCompute).ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  const std::vector<Reclassified> changed = monitor.Observe(TimedIteration(f, t));
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].op, 3);
  EXPECT_EQ(changed[0].planned, autouvm::v1::BOUND_HBM);
  EXPECT_EQ(changed[0].measured, autouvm::v1::BOUND_LINK);
  EXPECT_GT(changed[0].measured_seconds, 3 * changed[0].expected_seconds);
  EXPECT_THAT(changed[0].missing, ::testing::ElementsAre("param:w3"));

  // The faults brought it back this time; evict it again and let the executor bring it back instead.
  ASSERT_TRUE(f.sim->Prefetch(w3.addr, w3.bytes, Location::kHost, Stream::kCompute).ok());
  ASSERT_TRUE(ex.Repin(changed[0].missing).ok());
  const int64_t faults = f.sim->ReadCounters()->gpu_faults;
  EXPECT_THAT(monitor.Observe(TimedIteration(f, t)), ::testing::IsEmpty());
  EXPECT_EQ(f.sim->ReadCounters()->gpu_faults, faults);
  EXPECT_EQ(ex.repinned_bytes(), 64 * kMiB);
  EXPECT_EQ(monitor.samples(), 3);
  EXPECT_EQ(monitor.reclassified(), 1);
}

TEST(RuntimeMonitorTest, ARemoteWeightFoundOnTheDeviceRunsAtHbmSpeed) {
  const AccessTrace t = DecodeLike(8, 64);
  const int64_t budget = 8 * 64 * kMiB / 2;
  Fixture f(t, Unstaged());
  const auto key = profiler::DecodeKey("test", 1, "h200-pcie5", budget, "autouvm");
  const profiler::Analysis a = profiler::Analyze(key, t, f.sim->spec(), absl::Now());
  ASSERT_GT(std::ssize(a.plan.remote), 0);
  Executor ex(f.sim.get(), a.plan, t, f.ranges);
  ASSERT_TRUE(ex.Prepare().ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  RuntimeMonitor monitor(t, a.profile, a.plan, f.sim->spec(), {});
  EXPECT_THAT(monitor.Observe(TimedIteration(f, t)), ::testing::IsEmpty());  // remote reads as planned

  const std::string remote = a.plan.remote[0];
  const TensorRange r = f.ranges[remote];
  DeviceBackend* gpu = f.sim.get();  // the interface (its default arguments)
  ASSERT_TRUE(gpu->Advise(r.addr, r.bytes, Advice::kPreferredLocation, false).ok());
  ASSERT_TRUE(f.sim->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCompute).ok());
  ASSERT_TRUE(f.sim->Synchronize().ok());
  const std::vector<Reclassified> changed = monitor.Observe(TimedIteration(f, t));
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(t.ops[static_cast<size_t>(changed[0].op)].reads[1].id, remote);
  EXPECT_EQ(changed[0].planned, autouvm::v1::BOUND_LINK);
  EXPECT_EQ(changed[0].measured, autouvm::v1::BOUND_HBM);
  EXPECT_THAT(changed[0].missing, ::testing::IsEmpty());
}

// What the H200 showed the monitor (bench/results/2026-11-29-offload-h200.md): ops the host is late to
// issue take far longer than planned without anything being evicted.
TEST(RuntimeMonitorTest, SlowOpsThatNoMissingPinnedTensorCanExplainAreNotCalledLinkBound) {
  AccessTrace t = DecodeLike(8, 64);
  OpRecord copy{.index = 8, .op = "aten::copy_", .kernel = "aten::copy_#0", .reads = {{"input:1", 64, 0, 64}}};
  t.ops.push_back(copy);
  const int64_t budget = 8 * 64 * kMiB;
  const GpuSpec spec = *FindGpuSpec("h200-pcie5");
  const profiler::Analysis a =
      profiler::Analyze(profiler::DecodeKey("test", 1, "h200-pcie5", budget, "autouvm"), t, spec, absl::Now());
  RuntimeMonitor monitor(t, a.profile, a.plan, spec, {});
  std::vector<double> seconds;  // every op as planned ...
  for (const autouvm::v1::OpClass& c : a.profile.ops()) {
    seconds.push_back(std::max({c.compute_seconds(), c.hbm_seconds(), c.link_seconds()}));
  }
  ASSERT_EQ(a.profile.ops(3).bound(), autouvm::v1::BOUND_HBM);
  // ... but these:
  seconds[8] = 240e-6;  // the host's copy of the next step's input: nothing pinned to miss
  seconds[3] = 200e-6;  // 13x its plan, but 64 MiB over the link would take 1.2 ms
  EXPECT_THAT(monitor.Observe(seconds), ::testing::IsEmpty());
  seconds[3] = 2e-3;  // as long as faulting the weight back in
  const auto changed = monitor.Observe(seconds);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].op, 3);
}

}  // namespace
}  // namespace autouvm::runtime
