// OpTimer against the simulated backend, whose kernels take a known time: each op's time is the
// compute stream's time from its mark to the next, waits included, or with Span::kOwn to the mark after
// its launch; only sampled iterations count.
#include "runtime/op_timer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

constexpr int64_t kMiB = 1 << 20;

TEST(OpTimerTest, EachOpGetsTheComputeStreamTimeUntilTheNextOpsMark) {
  auto sim = *sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  const uint64_t w = *sim->AllocateManaged(256 * kMiB);
  ASSERT_TRUE(sim->Prefetch(w, 256 * kMiB, Location::kDevice, Stream::kCopy).ok());
  ASSERT_TRUE(sim->Synchronize().ok());
  OpTimer timer(sim.get(), /*every=*/1);
  timer.BeginIteration();
  // Op 0 computes for a known time; op 1 first waits for a prefetch on the copy stream.
  timer.BeforeOp(0);
  const sim::KernelTime k0 = sim->Launch({.name = "gemm", .flops = 1e12});
  timer.BeforeOp(1);
  const uint64_t x = *sim->AllocateManaged(512 * kMiB);
  ASSERT_TRUE(sim->Prefetch(x, 512 * kMiB, Location::kDevice, Stream::kCopy).ok());
  sim->WaitEvent(Stream::kCompute, sim->RecordEvent(Stream::kCopy));
  const sim::KernelTime k1 = sim->Launch({.name = "gemv", .ranges = {{x, 512 * kMiB}}});
  auto seconds = timer.EndIteration();
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  ASSERT_EQ(seconds->size(), 2u);
  EXPECT_GT(k0.compute_s, 1e-3);
  EXPECT_THAT((*seconds)[0], DoubleNear(k0.end_s - k0.start_s, 1e-9));
  // Op 1's time runs from op 0's end: the wait for the copy and its own work.
  EXPECT_THAT((*seconds)[1], DoubleNear(k1.end_s - k0.end_s, 1e-9));
  EXPECT_GT((*seconds)[1], 512.0 * kMiB / 60e9);
  EXPECT_EQ(timer.sampled(), 1);
}

TEST(OpTimerTest, WithTheOwnSpanWhatIsQueuedBetweenTwoOpsCountsToNeither) {
  // What another subscriber queues after an op's launch (an eviction), or the GPU's idle time while the
  // host prepares the next op, is not the op's doing: the monitor's timer leaves it out.
  for (const OpTimer::Span span : {OpTimer::Span::kUntilNextOp, OpTimer::Span::kOwn}) {
    auto sim = *sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
    OpTimer timer(sim.get(), /*every=*/1, span);
    timer.BeginIteration();
    timer.BeforeOp(0);
    const sim::KernelTime k0 = sim->Launch({.name = "gemm", .flops = 1e12});
    timer.OnOp({.index = 0, .op = "aten::mm", .kernel = "aten::mm#0"});
    const sim::KernelTime between = sim->Launch({.name = "other", .flops = 4e12});
    timer.BeforeOp(1);
    const sim::KernelTime k1 = sim->Launch({.name = "gemm", .flops = 1e12});
    timer.OnOp({.index = 1, .op = "aten::mm", .kernel = "aten::mm#1"});
    auto seconds = timer.EndIteration();
    ASSERT_TRUE(seconds.ok()) << seconds.status();
    ASSERT_EQ(seconds->size(), 2u);
    const double queued = between.end_s - between.start_s;
    ASSERT_GT(queued, 3 * (k0.end_s - k0.start_s));
    EXPECT_THAT((*seconds)[0], DoubleNear(k0.end_s - k0.start_s + (span == OpTimer::Span::kOwn ? 0 : queued), 1e-9));
    EXPECT_THAT((*seconds)[1], DoubleNear(k1.end_s - k1.start_s, 1e-9));
  }
}

TEST(OpTimerTest, OnlySampledIterationsAreTimed) {
  auto sim = *sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  OpTimer timer(sim.get(), /*every=*/3);
  std::vector<size_t> sizes;
  for (int it = 0; it < 6; ++it) {
    timer.BeginIteration();
    for (int64_t i = 0; i < 4; ++i) {
      timer.BeforeOp(i);
      sim->Launch({.name = "k", .flops = 1e9});
    }
    auto seconds = timer.EndIteration();
    ASSERT_TRUE(seconds.ok()) << seconds.status();
    sizes.push_back(seconds->size());
  }
  EXPECT_THAT(sizes, ElementsAre(4u, 0u, 0u, 4u, 0u, 0u));
  EXPECT_EQ(timer.iterations(), 6);
  EXPECT_EQ(timer.sampled(), 2);
}

TEST(OpTimerTest, NoIterationIsTimedSoonerThanTheIntervalAfterTheLast) {
  auto sim = *sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  double now = 100;
  OpTimer timer(sim.get(), /*every=*/2, OpTimer::Span::kOwn, /*min_interval_seconds=*/10, [&] { return now; });
  std::vector<bool> timed;
  // One iteration a second: due by count at 0, 2, 4, ...; by the clock only 10 s after the last timed.
  for (int it = 0; it < 25; ++it, now += 1) {
    timer.BeginIteration();
    timed.push_back(timer.timing());
    timer.BeforeOp(0);
    sim->Launch({.name = "k", .flops = 1e9});
    auto seconds = timer.EndIteration();
    ASSERT_TRUE(seconds.ok()) << seconds.status();
    EXPECT_EQ(seconds->size(), timed.back() ? 1u : 0u);
  }
  std::vector<int> at;
  for (int it = 0; it < 25; ++it) {
    if (timed[it]) at.push_back(it);
  }
  EXPECT_THAT(at, ElementsAre(0, 10, 20));
  EXPECT_EQ(timer.sampled(), 3);
  // Iterations further apart than the interval: the count decides again, every second one.
  std::vector<bool> later;
  for (int it = 0; it < 4; ++it) {
    now += 100;
    timer.BeginIteration();
    later.push_back(timer.timing());
    (void)timer.EndIteration();
  }
  EXPECT_THAT(later, ElementsAre(true, false, true, false));
}

TEST(OpTimerTest, UnknownTimedEventsAreNotFound) {
  auto sim = *sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  const EventId a = sim->RecordTimedEvent(Stream::kCompute);
  EXPECT_EQ(sim->ElapsedSeconds(a, a + 7).status().code(), absl::StatusCode::kNotFound);
  auto none = sim->ElapsedSeconds(a, a);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0.0);
}

TEST(OpTimerTest, SplitTimeChargesOpsThatReadRemoteTensors) {
  AccessTrace t;
  t.ops.push_back({.index = 0, .op = "aten::mm", .kernel = "aten::mm#0", .reads = {{.id = "param:a", .bytes = 100}}});
  t.ops.push_back({.index = 1,
                   .op = "aten::mm",
                   .kernel = "aten::mm#1",
                   .reads = {{.id = "act:x", .bytes = 8}, {.id = "param:b", .bytes = 300}}});
  t.ops.push_back({.index = 2, .op = "aten::add", .kernel = "aten::add#0", .reads = {{.id = "act:y", .bytes = 8}}});
  const TimeSplit split = SplitTime(t, {0.5, 2.0, 0.25}, {"param:b"});
  EXPECT_DOUBLE_EQ(split.total_s, 2.75);
  EXPECT_DOUBLE_EQ(split.remote_ops_s, 2.0);
  EXPECT_EQ(split.remote_read_bytes, 300);
  EXPECT_DOUBLE_EQ(split.other_ops_s, 0.75);
  EXPECT_DOUBLE_EQ(split.remote_bytes_per_second(), 150.0);
  EXPECT_EQ(SplitTime(t, {}, {"param:b"}).remote_ops_s, 0.0);  // nothing timed
}

}  // namespace
}  // namespace autouvm::runtime
