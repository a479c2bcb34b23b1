// Replaying access traces on the simulated backend: layout, capacity, what moves under oversubscription.
#include "runtime/sim/trace_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "tests/testing/decode_like_trace.h"

namespace autouvm::runtime::sim {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

AccessTrace DecodeLike(int layers, int64_t weight_mib) { return testing::DecodeLikeTrace(layers, weight_mib); }

GpuSpec H200() { return *FindGpuSpec("h200-pcie5"); }

TEST(TraceReplayTest, WhenEverythingFitsOnlyTheFirstIterationFaults) {
  auto r = ReplayTrace(DecodeLike(16, 32), H200(), {.oversubscription = 1.0, .iterations = 3});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->footprint_bytes, 16 * 32 * kMiB);
  EXPECT_LT(r->footprint_bytes, 16 * 32 * kMiB + 4 * kMiB);  // activations packed in one small segment
  ASSERT_EQ(r->iterations.size(), 3u);
  EXPECT_GE(r->iterations[0].moved.h2d_total(), 16 * 32 * kMiB);
  EXPECT_EQ(r->iterations[2].moved.gpu_faults, 0);
  EXPECT_NEAR(r->iterations[2].seconds, r->resident_seconds, 1e-9);
  EXPECT_EQ(r->link_floor_seconds, r->resident_seconds);
}

TEST(TraceReplayTest, UnderOversubscriptionEveryIterationStreamsAndEvicts) {
  auto r = ReplayTrace(DecodeLike(16, 32), H200(), {.oversubscription = 2.0, .iterations = 3});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(static_cast<double>(r->device_bytes), r->footprint_bytes / 2.0, 1.0);
  const IterationReport& steady = r->iterations.back();
  // Oldest-first eviction of a cyclic sweep larger than the device: nothing is left when it is needed.
  EXPECT_GE(steady.moved.h2d_total(), 16 * 32 * kMiB);
  EXPECT_GT(steady.moved.evictions, 0);
  EXPECT_GT(steady.moved.d2h(MigrationCause::kEviction), 0);
  EXPECT_GT(steady.moved.thrashing, 0);
  EXPECT_GT(steady.seconds, r->link_floor_seconds);
  EXPECT_GT(r->link_floor_seconds, r->resident_seconds);  // half the bytes must cross the link
}

// One linear layer's product x @ W.t() reading a bf16 weight [rows, k] row by row, the weight on the host.
AccessTrace OneLinear(int64_t rows, int64_t k) {
  AccessTrace t;
  const int64_t bytes = rows * k * 2;
  t.named.push_back({.id = "param:w", .bytes = bytes});
  OpRecord op;
  op.op = "aten::mm";
  op.kernel = "aten::mm#0";
  op.reads = {{.id = "param:w", .bytes = bytes, .extent = bytes, .run = k * 2}};
  op.flops = static_cast<double>(bytes);
  t.ops.push_back(op);
  return t;
}

// Note [Fault entries per kernel]: the H200 faults the Llama-2 7B and 13B linears in at one rate
// (5.1-6.6 GB/s) whatever their rows' length, so the replay does too.
TEST(TraceReplayTest, LinearsFaultTheirWeightsInAtOneRateWhateverTheirRowsLength) {
  std::vector<double> rates;
  for (const auto [rows, k] : std::vector<std::pair<int64_t, int64_t>>{
           {11008, 4096}, {4096, 11008}, {13824, 5120}, {5120, 5120}, {5120, 13824}}) {
    auto r = ReplayTrace(OneLinear(rows, k), H200(), {.oversubscription = 0.5, .iterations = 1});
    ASSERT_TRUE(r.ok()) << r.status();
    const IterationReport& cold = r->iterations.front();
    // Entries per page migrated on a fault (the density prefetcher brings the rest of a block with none).
    const double faulted_pages = static_cast<double>(cold.moved.h2d(MigrationCause::kFault)) / (64 * 1024);
    EXPECT_NEAR(static_cast<double>(cold.moved.gpu_faults) / faulted_pages, 17.6, 0.1) << rows << " x " << k;
    rates.push_back(static_cast<double>(rows * k * 2) / cold.seconds / 1e9);
  }
  for (const double rate : rates) {
    EXPECT_GT(rate, 5.1);  // the GPU's range over the five shapes, two runs
    EXPECT_LT(rate, 6.6);
  }
}

TEST(TraceReplayTest, ActivationBlocksAreReusedAfterTheirLastUse) {
  AccessTrace t;
  for (int i = 0; i < 10; ++i) {  // each op reads the previous 4 MiB activation and writes a new one
    OpRecord op{.index = i, .op = "aten::relu", .kernel = "aten::relu#" + std::to_string(i)};
    if (i > 0) op.reads = {{"act:aten::relu@" + std::to_string(i - 1) + ".0", 4 * kMiB, 0, 4 * kMiB}};
    op.writes = {{"act:aten::relu@" + std::to_string(i) + ".0", 4 * kMiB, 0, 4 * kMiB}};
    t.ops.push_back(op);
  }
  auto r = ReplayTrace(t, H200(), {.iterations = 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(r->footprint_bytes, 3 * 4 * kMiB);  // two live at a time, one freed block reused
}

// The profiler's plan for the trace and a capacity, as autouvm-sim makes it.
std::function<runtime::Plan(int64_t)> ProfilerPlan(const AccessTrace& t, const GpuSpec& spec) {
  return [t, spec](int64_t device_bytes) {
    const auto key = profiler::DecodeKey("test", 1, spec.name, device_bytes, "autouvm");
    return profiler::Analyze(key, t, spec, absl::Now()).plan;
  };
}
std::function<runtime::Plan(int64_t)> ProfilerPlan(const AccessTrace& t) { return ProfilerPlan(t, H200()); }

GpuSpec Unstaged() {  // a platform that cannot stage weights (CUDA before 13)
  GpuSpec s = H200();
  s.uvm.staged_copy_bytes_per_s = 0;
  return s;
}

TEST(TraceReplayTest, FollowingThePlanStagesWhatIsNotPinnedWithoutFaultsAndBeatsStockAndReadingInPlace) {
  // 1 GiB of weights, and 200 small ops after each product whose launches the copies can hide behind.
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  auto stock = ReplayTrace(t, H200(), {.oversubscription = 1.5, .iterations = 3});
  auto planned = ReplayTrace(
      t, H200(), {.policy = "autouvm", .make_plan = ProfilerPlan(t), .oversubscription = 1.5, .iterations = 3});
  auto in_place = ReplayTrace(
      t, Unstaged(),
      {.policy = "autouvm", .make_plan = ProfilerPlan(t, Unstaged()), .oversubscription = 1.5, .iterations = 3});
  ASSERT_TRUE(stock.ok() && planned.ok() && in_place.ok()) << stock.status() << planned.status() << in_place.status();
  const IterationReport& s = stock->iterations.back();
  const IterationReport& p = planned->iterations.back();
  // The weights not pinned come in as staged copies beside the compute: no fault, nothing migrated.
  EXPECT_EQ(p.moved.gpu_faults, 0);
  EXPECT_EQ(p.fault_seconds, 0);
  EXPECT_EQ(p.moved.d2h_total(), 0);
  EXPECT_GT(p.moved.h2d(MigrationCause::kStaged), 0);
  EXPECT_EQ(p.moved.h2d_total(), p.moved.h2d(MigrationCause::kStaged));
  EXPECT_EQ(p.moved.remote_bytes, 0);
  EXPECT_LT(p.seconds, s.seconds / 3);
  EXPECT_LT(p.seconds, in_place->iterations.back().seconds);
  EXPECT_GE(p.seconds, planned->link_floor_seconds);
}

// Note [Coded sizes in the trace]: replayed with coded copies, the weights the trace has measured coded
// sizes for cross as those (plain, undecoded, where the code does not shrink them), the others at the ratio.
TEST(TraceReplayTest, StagedWeightsCrossAsTheTracesMeasuredCodedSizes) {
  const AccessTrace t = testing::DecodeLikeTrace(16, 64, 1, /*elementwise=*/200);
  constexpr int64_t kDevice = 700 * kMiB;  // of 1 GiB of weights
  const Plan plan = ProfilerPlan(t)(kDevice);
  ASSERT_TRUE(plan.staged && plan.device_buffer);
  std::map<std::string, int64_t> bytes;
  for (const TensorUse& n : t.named) bytes[n.id] = n.bytes;
  AccessTrace measured = t;
  int64_t coded = 0, decoded = 0, plain = 0, streamed = 0;
  int k = 0;
  for (const Prefetch& f : plan.prefetches) {
    for (const std::string& id : f.tensors) {
      const int64_t b = bytes.at(id);
      streamed += b;
      if (k++ % 2 == 0) {
        measured.coded_bytes[id] = 2 * b / 5;
        coded += 2 * b / 5;
        decoded += b;
      } else {
        measured.coded_bytes[id] = b + 4096;  // it would not shrink
        plain += b;
      }
    }
  }
  ASSERT_GT(coded, 0);
  ASSERT_GT(plain, 0);
  auto replay = [&](const AccessTrace& trace) {
    return ReplayTrace(trace, H200(),
                       {.policy = "autouvm",
                        .make_plan = [&](int64_t) { return plan; },
                        .device_bytes = kDevice,
                        .iterations = 2,
                        .coded_ratio = 0.7});
  };
  auto at_ratio = replay(t);
  auto at_sizes = replay(measured);
  ASSERT_TRUE(at_ratio.ok() && at_sizes.ok()) << at_ratio.status() << at_sizes.status();
  const UvmCounters& r = at_ratio->iterations.back().moved;
  const UvmCounters& m = at_sizes->iterations.back().moved;
  EXPECT_EQ(r.decoded_bytes, streamed);
  EXPECT_NEAR(static_cast<double>(r.coded_bytes), 0.7 * static_cast<double>(streamed), 64.0);
  EXPECT_EQ(m.coded_bytes, coded);
  EXPECT_EQ(m.decoded_bytes, decoded);
  EXPECT_EQ(m.h2d(MigrationCause::kStaged), coded + plain);
}

TEST(TraceReplayTest, WhereNothingHidesTheCopiesThePlanReadsInPlaceRatherThanGiveUpPinnedRoomForAWindow) {
  const AccessTrace t = DecodeLike(16, 64);  // a product per weight and nothing else
  const runtime::Plan plan = ProfilerPlan(t)(16 * 64 * (int64_t{1} << 20) * 2 / 3);
  EXPECT_FALSE(plan.staged);
  EXPECT_GT(std::ssize(plan.remote), 0);
}

TEST(TraceReplayTest, WithoutStagingFollowingThePlanReadsInPlaceWithoutFaultsAndBeatsStock) {
  const AccessTrace t = DecodeLike(16, 64);  // 1 GiB of weights
  auto stock = ReplayTrace(t, Unstaged(), {.oversubscription = 1.5, .iterations = 3});
  auto planned = ReplayTrace(
      t, Unstaged(),
      {.policy = "autouvm", .make_plan = ProfilerPlan(t, Unstaged()), .oversubscription = 1.5, .iterations = 3});
  ASSERT_TRUE(stock.ok() && planned.ok()) << stock.status() << planned.status();
  const IterationReport& s = stock->iterations.back();
  const IterationReport& p = planned->iterations.back();
  // The weights not pinned are read where they are, over the link (a decode step reads each once): no
  // fault, no fault stall, nothing migrated either way.
  EXPECT_EQ(p.moved.gpu_faults, 0);
  EXPECT_EQ(p.fault_seconds, 0);
  EXPECT_EQ(p.moved.d2h_total(), 0);
  EXPECT_EQ(p.moved.h2d_total(), 0);
  EXPECT_GT(p.moved.remote_bytes, 0);
  EXPECT_GT(s.moved.gpu_faults, 0);
  EXPECT_LT(p.seconds, s.seconds / 3);
  EXPECT_GE(p.seconds, planned->link_floor_seconds);
  // At 1.0x everything is pinned: after the cold first iteration, the resident time.
  auto fits = ReplayTrace(t, H200(), {.policy = "autouvm", .make_plan = ProfilerPlan(t), .iterations = 2});
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_NEAR(fits->iterations.back().seconds, fits->resident_seconds, 1e-9);
}

TEST(TraceReplayTest, ThePapersPlanPrefetchesAndLeavesEvictionToTheDriver) {
  const AccessTrace t = DecodeLike(16, 64);
  auto paper = [t](int64_t device_bytes) {
    const auto key = profiler::DecodeKey("test", 1, "h200-pcie5", device_bytes, "paper");
    return profiler::Analyze(key, t, *FindGpuSpec("h200-pcie5"), absl::Now()).plan;
  };
  auto r = ReplayTrace(t, H200(), {.policy = "paper", .make_plan = paper, .oversubscription = 1.5, .iterations = 3});
  ASSERT_TRUE(r.ok()) << r.status();
  const IterationReport& steady = r->iterations.back();
  EXPECT_GT(steady.moved.h2d(MigrationCause::kUserPrefetch), 0);  // its prefetches
  EXPECT_GT(steady.moved.evictions, 0);                           // the driver's evictions
  EXPECT_THAT(ReplayTrace(t, H200(), {.policy = "paper"}).status().message(), HasSubstr("paper needs a plan"));
}

TEST(TraceReplayTest, AnEmulatedDriverEvictsAtOpBoundariesInsteadOfTheSimulatedOne) {
  const AccessTrace t = DecodeLike(16, 64);
  const int64_t budget = 16 * 64 * kMiB * 2 / 3;
  auto r = ReplayTrace(t, H200(), {.iterations = 3, .emulated_eviction_budget = budget});
  ASSERT_TRUE(r.ok()) << r.status();
  const IterationReport& steady = r->iterations.back();
  EXPECT_EQ(steady.moved.evictions, 0);    // the simulated driver had room for everything
  EXPECT_GT(steady.moved.d2h_total(), 0);  // the emulator migrated weights back
  EXPECT_GT(steady.moved.gpu_faults, 0);   // and the ops faulted them in again
  EXPECT_GT(steady.seconds, r->resident_seconds);
}

TEST(TraceReplayTest, BadOptionsAreRefusedByName) {
  EXPECT_THAT(ReplayTrace(DecodeLike(2, 4), H200(), {.policy = "autouvm"}).status().message(),
              HasSubstr("needs a plan"));
  auto policy = ReplayTrace(DecodeLike(2, 4), H200(), {.policy = "magic"});
  ASSERT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), HasSubstr("known: stock"));
  EXPECT_EQ(ReplayTrace(AccessTrace(), H200(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ReplayTrace(DecodeLike(2, 4), H200(), {.oversubscription = 0}).status().message(),
              HasSubstr("oversubscription"));
  EXPECT_THAT(ReplayTrace(DecodeLike(2, 4), H200(), {.iterations = 0}).status().message(), HasSubstr("iterations"));
}

}  // namespace
}  // namespace autouvm::runtime::sim
