// The planner: everything pinned when it fits; over budget, a window for streaming, the tensors used
// more than once per iteration pinned first, then the earliest; prefetches issued as early as the window
// allows, wrapping into the previous iteration; a decode step's weights read in place instead of
// streamed; `stock` plans nothing.
#include "profiler/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "profiler/profile_key.h"
#include "profiler/reuse.h"
#include "profiler/roofline.h"
#include "tests/testing/decode_like_trace.h"

namespace autouvm::profiler {
namespace {

constexpr int64_t kMiB = 1 << 20;

// An op reading `ids`, `mib` each, at `flops_per_byte` of what it reads: 1024 is a prefill's product
// (its weights streamed), 1 a decode step's (read in place when not pinned).
runtime::OpRecord Op(int64_t i, std::vector<std::string> ids, int64_t mib, double flops_per_byte = 1024) {
  runtime::OpRecord op;
  op.index = i;
  op.op = "aten::mm";
  op.kernel = "aten::mm#" + std::to_string(i);
  for (auto& id : ids) op.reads.push_back({id, mib * kMiB, 0, mib * kMiB});
  op.flops = flops_per_byte * static_cast<double>(ids.size() * mib * kMiB);
  return op;
}

// Eight 10 MiB weights used once each, and a 10 MiB cache used by every op.
runtime::AccessTrace Loop(double flops_per_byte = 1024) {
  runtime::AccessTrace t;
  for (int i = 0; i < 8; ++i) {
    t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "param:kv"}, 10, flops_per_byte));
  }
  return t;
}

runtime::Plan Plan(const runtime::AccessTrace& t, const std::string& policy, int64_t budget) {
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", budget, policy);
  return MakePlan(key, t, ReuseDistances(t), budget);
}

TEST(PlannerTest, EverythingIsPinnedWhenItFits) {
  const auto p = Plan(Loop(), "autouvm", 90 * kMiB);
  EXPECT_EQ(std::ssize(p.pinned), 9);
  EXPECT_EQ(p.pinned_bytes, 90 * kMiB);
  EXPECT_EQ(p.streamed_bytes, 0);
  EXPECT_EQ(std::ssize(p.prefetches), 0);
  EXPECT_TRUE(PinnedResidency(p)("param:w7"));
}

TEST(PlannerTest, StockPlansNothing) {
  const auto p = Plan(Loop(), "stock", 90 * kMiB);
  EXPECT_EQ(std::ssize(p.pinned), 0);
  EXPECT_EQ(std::ssize(p.prefetches), 0);
  EXPECT_FALSE(PinnedResidency(p)("param:w0"));
}

TEST(PlannerTest, OverBudgetTheReusedTensorAndTheFirstWeightsArePinnedAndTheRestStreamed) {
  // 80 MiB budget. Pinned first: the cache (used by all eight ops; streaming it would fetch it again and
  // again), then weights by first use. w7 would not fit; streaming it needs a window of twice the widest
  // op's streamed bytes (20 MiB), so 60 MiB are pinned: the cache and w0..w4.
  const auto p = Plan(Loop(), "autouvm", 80 * kMiB);
  EXPECT_EQ(p.window_bytes, 20 * kMiB);
  EXPECT_EQ(std::vector<std::string>(p.pinned.begin(), p.pinned.end()),
            (std::vector<std::string>{"param:w0", "param:kv", "param:w1", "param:w2", "param:w3", "param:w4"}));
  EXPECT_EQ(p.pinned_bytes, 60 * kMiB);
  EXPECT_EQ(std::ssize(p.remote), 0);  // a prefill's products read their weights many times
  // w5..w7 stream: 30 MiB per iteration, one fetch each, for ops 5..7.
  EXPECT_EQ(p.streamed_bytes, 30 * kMiB);
  ASSERT_EQ(std::ssize(p.prefetches), 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(p.prefetches[k].for_op, 5 + k);
    EXPECT_EQ(p.prefetches[k].tensors[0], "param:w" + std::to_string(5 + k));
  }
  // The 20 MiB window holds two fetches. w5's walks back over ops 4..0 (nothing fetched there) into the
  // previous iteration, past w7's: issued at op 7 of the iteration before. w7's has w6's ahead: op 6.
  EXPECT_EQ(p.prefetches[0].issue_at_op, 7);
  EXPECT_EQ(p.prefetches[2].issue_at_op, 6);
}

TEST(PlannerTest, AFetchIsIssuedInThePreviousIterationWhenTheWindowAllows) {
  // Four 10 MiB weights (ops 0-3), then four 1 MiB norms (ops 4-7). Budget 42 MiB: the norms s6 and s7
  // would not fit; the window for them is 2 MiB, which leaves 40 to pin: w0..w3. s4..s7 stream.
  runtime::AccessTrace t;
  for (int i = 0; i < 4; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}, 10));
  for (int i = 4; i < 8; ++i) t.ops.push_back(Op(i, {"param:s" + std::to_string(i)}, 1));
  const auto p = Plan(t, "autouvm", 42 * kMiB);
  EXPECT_EQ(p.window_bytes, 2 * kMiB);
  EXPECT_EQ(std::vector<std::string>(p.pinned.begin(), p.pinned.end()),
            (std::vector<std::string>{"param:w0", "param:w1", "param:w2", "param:w3"}));
  EXPECT_EQ(p.streamed_bytes, 4 * kMiB);
  ASSERT_EQ(std::ssize(p.prefetches), 4);
  EXPECT_EQ(p.prefetches[0].for_op, 4);
  // s4 walks back over ops 3..0 and into the previous iteration, over op 7 (s7: 2 MiB queued), and
  // stops at op 6 (s6 would make 3 > 2): issued at op 7 of the previous iteration.
  EXPECT_EQ(p.prefetches[0].issue_at_op, 7);
  EXPECT_EQ(p.prefetches[3].issue_at_op, 6);
}

TEST(PlannerTest, ADecodeStepsWeightsThatAreNotPinnedAreReadInPlace) {
  // The cache is used by every op and cannot be read in place: pinned first; then the weights in the
  // spread order (Note [Nested spread]: bit-reversed places among w0, kv, w1, ..., w7), whose last, w6
  // (place 7 of 9), is read over the link where it is. Nothing streams, so no window is set aside.
  const auto p = Plan(Loop(/*flops_per_byte=*/1), "autouvm", 80 * kMiB);
  EXPECT_EQ(p.window_bytes, 0);
  EXPECT_EQ(p.pinned_bytes, 80 * kMiB);
  EXPECT_EQ(p.pinned[1], "param:kv");
  EXPECT_EQ(std::vector<std::string>(p.remote.begin(), p.remote.end()), std::vector<std::string>{"param:w6"});
  EXPECT_EQ(p.remote_bytes, 10 * kMiB);
  EXPECT_EQ(std::ssize(p.prefetches), 0);
  EXPECT_EQ(p.streamed_bytes, 0);
  // A weight written during the iteration cannot be read in place: it is pinned ahead of those that
  // can, and the last of them in the spread order is read in place.
  runtime::AccessTrace t = Loop(1);
  t.ops[7].writes.push_back({"param:w7", 10 * kMiB, 0, 10 * kMiB});
  const auto q = Plan(t, "autouvm", 80 * kMiB);
  EXPECT_EQ(std::vector<std::string>(q.remote.begin(), q.remote.end()), std::vector<std::string>{"param:w6"});
  EXPECT_EQ(std::ssize(q.prefetches), 0);
}

TEST(PlannerTest, AStagedPlanStreamsThroughADeviceBufferAndSpreadsWhatItPinsOverTheIteration) {
  // 32 weights of 10 MiB at a prefill's intensity (not readable in place), a cache used by every op,
  // room for about half: the cache pinned first, then every other weight — not the first sixteen,
  // whose ops would leave the copy engine idle once the window is full.
  runtime::AccessTrace t;
  for (int i = 0; i < 32; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "param:kv_cache.k"}, 10));
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", 200 * kMiB, "autouvm");
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  const auto p = MakePlan(key, t, ReuseDistances(t), 200 * kMiB, {.spec = &spec});
  ASSERT_TRUE(p.staged);
  EXPECT_TRUE(p.device_buffer);
  EXPECT_NE(std::find(p.pinned.begin(), p.pinned.end(), "param:kv_cache.k"), p.pinned.end());
  std::vector<bool> pinned(32, false);
  for (const std::string& id : p.pinned) {
    if (id != "param:kv_cache.k") pinned[static_cast<size_t>(std::stoi(id.substr(7)))] = true;
  }
  int first_half = 0, second_half = 0, longest_run = 0, run = 0;
  for (int i = 0; i < 32; ++i) {
    (i < 16 ? first_half : second_half) += pinned[static_cast<size_t>(i)];
    run = pinned[static_cast<size_t>(i)] ? run + 1 : 0;
    longest_run = std::max(longest_run, run);
  }
  EXPECT_GT(first_half, 0);
  EXPECT_LE(std::abs(first_half - second_half), 1) << first_half << " pinned in the first half, " << second_half;
  EXPECT_LE(longest_run, 3);  // every other weight, and one more next to one of them (Note [Nested spread])
  EXPECT_LE(p.pinned_bytes + p.window_bytes, 200 * kMiB);
  EXPECT_EQ(p.pinned_bytes + p.streamed_bytes, 33 * 10 * kMiB);  // each unpinned weight once
}

// Note [Coded host copies]: planned for weights that cross coded (runtime.compress_streamed), a staged
// plan is still a valid partition of the budget, and the estimate of its step charges the coded bytes
// (and the last decode) where the spec has a decoder rate; without one, coding is ignored.
TEST(PlannerTest, PlansForCodedStreamingChargeTheCodedBytes) {
  runtime::AccessTrace t;
  for (int i = 0; i < 32; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "param:kv_cache.k"}, 10));
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", 200 * kMiB, "autouvm");
  runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  ASSERT_GT(spec.decode_bytes_per_s, 0) << "the H200's decoder rate is measured";
  const auto plain = MakePlan(key, t, ReuseDistances(t), 200 * kMiB, {.spec = &spec});
  const auto coded = MakePlan(key, t, ReuseDistances(t), 200 * kMiB, {.spec = &spec, .coded_ratio = 0.7});
  ASSERT_TRUE(coded.staged);
  EXPECT_LE(coded.pinned_bytes + coded.window_bytes, 200 * kMiB);
  EXPECT_EQ(coded.pinned_bytes + coded.streamed_bytes, 33 * 10 * kMiB);
  const double plain_s = EstimateStepSeconds(plain, t, spec);
  const double coded_s = EstimateStepSeconds(plain, t, spec, 0.7);
  const double link_s = static_cast<double>(plain.streamed_bytes) / spec.link_bytes_per_s;
  EXPECT_LT(coded_s, plain_s);
  // Link-bound here (prefill intensity, but 10 MiB ops): the copies set the step.
  EXPECT_NEAR(coded_s, 0.7 * link_s + 10.0 * kMiB / spec.decode_bytes_per_s, 0.05 * link_s);
  spec.decode_bytes_per_s = 0;  // no decoder rate: planned plain
  EXPECT_DOUBLE_EQ(EstimateStepSeconds(plain, t, spec, 0.7), plain_s);
}

// Note [Coded sizes in the trace]: a weight whose coded size the trace has is charged that instead of the
// planned ratio: one the code would not shrink crosses plain (no decode), one that codes tighter less.
TEST(PlannerTest, WeightsWithMeasuredCodedSizesAreChargedThoseInsteadOfThePlannedRatio) {
  runtime::AccessTrace t;
  for (int i = 0; i < 32; ++i) {
    t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "param:kv_cache.k"}, 10));
    t.named.push_back({"param:w" + std::to_string(i), 10 * kMiB});
  }
  t.named.push_back({"param:kv_cache.k", 10 * kMiB});
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", 200 * kMiB, "autouvm");
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  const auto plan = MakePlan(key, t, ReuseDistances(t), 200 * kMiB, {.spec = &spec, .coded_ratio = 0.7});
  ASSERT_TRUE(plan.staged && plan.device_buffer);
  ASSERT_FALSE(plan.prefetches.empty());
  const double link_s = static_cast<double>(plan.streamed_bytes) / spec.link_bytes_per_s;
  const double decode_s = 10.0 * kMiB / spec.decode_bytes_per_s;
  const double planned = EstimateStepSeconds(plan, t, spec, 0.7);
  EXPECT_NEAR(planned, 0.7 * link_s + decode_s, 0.05 * link_s);

  runtime::AccessTrace incompressible = t, tight = t;
  for (const runtime::Prefetch& f : plan.prefetches) {
    for (const std::string& id : f.tensors) {
      incompressible.coded_bytes[id] = 10 * kMiB + 4096;  // the code's header on bytes it cannot shrink
      tight.coded_bytes[id] = 5 * kMiB;
    }
  }
  EXPECT_DOUBLE_EQ(EstimateStepSeconds(plan, incompressible, spec, 0.7), EstimateStepSeconds(plan, t, spec, 0))
      << "every streamed weight crosses plain";
  EXPECT_NEAR(EstimateStepSeconds(plan, tight, spec, 0.7), 0.5 * link_s + decode_s, 0.05 * link_s);
  // Half of them measured: those at their size, the rest at the ratio.
  runtime::AccessTrace half = t;
  int64_t measured = 0;
  for (const auto& [id, coded] : tight.coded_bytes) {
    if (measured++ % 2 == 0) half.coded_bytes[id] = coded;
  }
  const double mixed = EstimateStepSeconds(plan, half, spec, 0.7);
  EXPECT_LT(mixed, planned);
  EXPECT_GT(mixed, EstimateStepSeconds(plan, tight, spec, 0.7));
  // Without a coded ratio, measured sizes change nothing: the copies cross plain.
  EXPECT_DOUBLE_EQ(EstimateStepSeconds(plan, tight, spec, 0), EstimateStepSeconds(plan, t, spec, 0));
}

// Note [Coded sizes in the trace]: the measured sizes choose the plan. A decode step over 1 GiB of weights
// planned at the ratio streams them coded under 700 MiB and reads two in place under 900; measured, weights
// that do not shrink are read in place under 700 (as plain ones are), and weights that code to 0.3 are
// staged under 900.
TEST(PlannerTest, TheWeightsMeasuredCodedSizesChooseBetweenStagingAndReadingInPlace) {
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  const runtime::AccessTrace planned = testing::DecodeLikeTrace(16, 64, 1);
  runtime::AccessTrace incompressible = planned, tight = planned;
  for (const runtime::TensorUse& n : planned.named) {
    incompressible.coded_bytes[n.id] = n.bytes + 4096;
    tight.coded_bytes[n.id] = n.bytes * 3 / 10;
  }
  auto plan = [&](const runtime::AccessTrace& t, int64_t budget) {
    const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", budget, "autouvm");
    return MakePlan(key, t, ReuseDistances(t), budget, {.spec = &spec, .coded_ratio = 0.7});
  };
  EXPECT_TRUE(plan(planned, 700 * kMiB).staged);
  EXPECT_FALSE(plan(incompressible, 700 * kMiB).staged);
  EXPECT_FALSE(plan(incompressible, 700 * kMiB).remote.empty());
  EXPECT_FALSE(plan(planned, 900 * kMiB).staged);
  EXPECT_TRUE(plan(tight, 900 * kMiB).staged);
  EXPECT_TRUE(plan(tight, 900 * kMiB).remote.empty());
}

// Note [Nested spread]: plans of one model's weights under more room pin a superset of what plans under
// less room pin, so a switch between shapes moves only the difference; every room's pins stay spread.
TEST(PlannerTest, PlansWithMoreRoomPinASupersetOfWhatPlansWithLessPin) {
  runtime::AccessTrace t;
  for (int i = 0; i < 40; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}, 10));
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  std::set<std::string> smaller;
  for (int64_t room = 60; room <= 360; room += 25) {
    const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", room * kMiB, "autouvm");
    const auto p = MakePlan(key, t, ReuseDistances(t), room * kMiB, {.spec = &spec});
    ASSERT_TRUE(p.staged) << room;
    const std::set<std::string> pinned(p.pinned.begin(), p.pinned.end());
    for (const std::string& id : smaller) EXPECT_TRUE(pinned.count(id)) << id << " unpinned with " << room << " MiB";
    EXPECT_GE(pinned.size(), smaller.size());
    int first_half = 0;
    for (const std::string& id : pinned) first_half += std::stoi(id.substr(7)) < 20;
    EXPECT_LE(std::abs(2 * first_half - static_cast<int>(pinned.size())), 2) << room << " MiB";
    smaller = pinned;
  }
  EXPECT_GT(smaller.size(), 20u);
}

TEST(PlannerTest, AStagedPlanPinsTheOneLargeWeightRatherThanWidenItsWindowForIt) {
  // Note [The window's widest weight]: 31 weights of 8 MiB and one of 64 MiB, all read once at a
  // prefill's intensity, room for about half. Streaming the large one would need a 128 MiB window,
  // which crosses the link every iteration on top of what the budget forces; pinned, the window is
  // two of the small weights.
  runtime::AccessTrace t;
  t.ops.push_back(Op(0, {"param:big"}, 64));
  for (int i = 1; i < 32; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}, 8));
  const int64_t budget = 160 * kMiB;
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", budget, "autouvm");
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  const auto p = MakePlan(key, t, ReuseDistances(t), budget, {.spec = &spec});
  ASSERT_TRUE(p.staged);
  EXPECT_NE(std::find(p.pinned.begin(), p.pinned.end(), "param:big"), p.pinned.end());
  EXPECT_EQ(p.window_bytes, 16 * kMiB);
  EXPECT_LE(p.pinned_bytes + p.window_bytes, budget);
  EXPECT_EQ(p.pinned_bytes + p.streamed_bytes, (64 + 31 * 8) * kMiB);
}

// The window holds the widest op's streamed weights even where that is more than half the room: four 4
// MiB weights at a prefill's intensity under 6 MiB. Half the room (3 MiB) has no room for any of them when
// its op comes, so the executor stopped following at the first every pass.
TEST(PlannerTest, TheWindowHoldsTheWidestStreamedWeightEvenBeyondHalfTheRoom) {
  runtime::AccessTrace t;
  for (int i = 0; i < 4; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}, 4));
  const int64_t budget = 6 * kMiB;
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", budget, "autouvm");
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  const auto p = MakePlan(key, t, ReuseDistances(t), budget, {.spec = &spec});
  ASSERT_TRUE(p.staged);
  EXPECT_GE(p.window_bytes, 4 * kMiB);
  EXPECT_LE(p.pinned_bytes + p.window_bytes, budget);
  EXPECT_EQ(p.pinned_bytes + p.streamed_bytes, 16 * kMiB);
}

// The paper's plan for Loop() at decode intensity: every op reads its weight and the cache.
runtime::Plan PaperPlan(const runtime::AccessTrace& t, PaperOptions options) {
  const auto key = DecodeKey(std::string(64, 'a'), 1, "h200-pcie5", 80 * kMiB, "paper");
  autouvm::v1::Profile stock;
  Classify(t, *runtime::FindGpuSpec("h200-pcie5"), PinnedResidency(runtime::Plan()), &stock);
  return MakePaperPlan(key, t, ReuseDistances(t), stock, options);
}

TEST(PlannerTest, ThePapersPlanPrefetchesLinkBoundOpsAndAdvisesTheReusedCacheToStay) {
  runtime::AccessTrace t = Loop(/*flops_per_byte=*/1);
  // Op 3 becomes compute-bound: the roofline gate leaves it to fault.
  t.ops[3].flops = 1e15;
  const auto full = PaperPlan(t, {});
  EXPECT_TRUE(full.driver_evicts);
  EXPECT_EQ(std::ssize(full.pinned), 0);  // it knows no budget: nothing is placed for good
  EXPECT_EQ(std::vector<std::string>(full.affinity.begin(), full.affinity.end()),
            std::vector<std::string>{"param:kv"});  // used by every op: within any window
  ASSERT_EQ(std::ssize(full.prefetches), 7);
  for (const auto& f : full.prefetches) {
    EXPECT_NE(f.for_op, 3);
    EXPECT_EQ(std::vector<std::string>(f.tensors.begin(), f.tensors.end()),
              std::vector<std::string>{"param:w" + std::to_string(f.for_op)});
    EXPECT_NE(f.issue_at_op, f.for_op);  // ahead of its op
  }
  // The ablation: no gate prefetches for op 3 too; no affinity pinning prefetches the cache as well.
  const auto no_gate = PaperPlan(t, {.roofline_gate = false});
  EXPECT_EQ(std::ssize(no_gate.prefetches), 8);
  const auto prefetch_only = PaperPlan(t, {.affinity_pinning = false, .roofline_gate = false});
  EXPECT_EQ(std::ssize(prefetch_only.affinity), 0);
  EXPECT_EQ(std::ssize(prefetch_only.prefetches[0].tensors), 2);
  EXPECT_TRUE(PinnedResidency(full)("param:kv"));
  EXPECT_FALSE(PinnedResidency(full)("param:w0"));
}

}  // namespace
}  // namespace autouvm::profiler
