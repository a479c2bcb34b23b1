// ModelExecution on the simulated mirror (the CPU daemon's executor): a plan followed op by op — its
// subscribers driven as the Observer drives them — moves bytes on the mirror and keeps the budget; the
// runtime monitor brings back a pinned tensor evicted behind the executor's back; following another
// key's plan is a switch; an iteration whose ops leave the plan is abandoned and said why.
#include "profiler/model_execution.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "runtime/sim/sim_backend.h"

namespace autouvm::profiler {
namespace {

constexpr int kWeights = 8;
constexpr int kOps = 2 * kWeights;
constexpr int64_t kWeight = 8 << 20;
constexpr int64_t kSleepBudget = 24 << 20;  // of the 64 MiB of weights: some pinned, some staged

// Two passes of matrix-vector products over eight 8 MiB weights (each read twice an iteration, so
// that a plan fetches rather than reads them in place).
runtime::AccessTrace Trace() {
  runtime::AccessTrace t;
  for (int i = 0; i < kWeights; ++i) {
    const std::string w = "param:w" + std::to_string(i);
    t.named.push_back({w, kWeight, 0, kWeight});
  }
  for (int i = 0; i < kOps; ++i) {
    const std::string w = "param:w" + std::to_string(i % kWeights);
    runtime::OpRecord op;
    op.index = i;
    op.op = "aten::mm";
    op.kernel = "aten::mm#" + std::to_string(i);
    op.reads = {{w, kWeight, 0, kWeight}};
    op.writes = {{"act:aten::mm@" + std::to_string(i) + ".0", 8192, 0, 8192}};
    op.flops = 2.0 * kWeight / 2;  // bf16: one multiply-add per weight
    t.ops.push_back(op);
  }
  return t;
}

std::vector<runtime::NamedTensor> Named() {
  std::vector<runtime::NamedTensor> out;
  for (int i = 0; i < kWeights; ++i) out.push_back({"w" + std::to_string(i), 0, kWeight});
  return out;
}

class ModelExecutionTest : public ::testing::Test {
 protected:
  profiler::PlanToFollow Plan(int64_t budget) {
    const auto key = profiler::DecodeKey(std::string(64, 'e'), 1, spec_.name, budget, "autouvm");
    profiler::Analysis a = profiler::Analyze(key, trace_, spec_, absl::Now());
    return {a.plan, trace_, a.profile};
  }
  std::unique_ptr<ModelExecution> Mirror(int64_t monitor_every) {
    auto ex = ModelExecution::Mirror(spec_, Named(), {.monitor_every = monitor_every});
    EXPECT_TRUE(ex.ok()) << ex.status();
    return std::move(ex).value();
  }
  // One iteration as the observer drives it: every subscriber's BeforeOp, then every OnOp, op by op.
  // `kernel_at` replaces one op's kernel (-1: none).
  absl::Status Iterate(ModelExecution& ex, const std::string& key, const profiler::PlanToFollow& plan,
                       int kernel_at = -1) {
    auto subscribers = ex.Begin(key, std::make_shared<const profiler::PlanToFollow>(plan));
    if (!subscribers.ok()) return subscribers.status();
    Drive(*subscribers, kernel_at);
    return ex.End();
  }
  // Over `sim` as if it were the model's own memory (the CUDA daemon's ModelExecution).
  // `budget_bytes`: the model's device budget, which a sleep needs (0: none).
  std::unique_ptr<ModelExecution> OnDevice(runtime::sim::SimBackend& sim, int64_t monitor_every,
                                           double monitor_min_interval_seconds = 0, int64_t budget_bytes = 0) {
    std::vector<runtime::NamedTensor> named = Named();
    for (runtime::NamedTensor& t : named) t.addr = *sim.AllocateManaged(t.bytes);
    return ModelExecution::OnDevice(&sim, named,
                                    {.monitor_every = monitor_every,
                                     .monitor_min_interval_seconds = monitor_min_interval_seconds,
                                     .budget_bytes = budget_bytes});
  }
  void Drive(const std::vector<runtime::OpSubscriber*>& subscribers, int kernel_at = -1) {
    for (int i = 0; i < kOps && !subscribers.empty(); ++i) {
      for (runtime::OpSubscriber* s : subscribers) s->BeforeOp(i);
      const std::string kernel = i == kernel_at ? "aten::add#0" : trace_.ops[i].kernel;
      runtime::OpEvent ev{.index = i, .op = "aten::mm", .kernel = kernel};
      for (runtime::OpSubscriber* s : subscribers) s->OnOp(ev);
    }
  }

  const runtime::GpuSpec spec_ = *runtime::FindGpuSpec("h200-pcie5");
  const runtime::AccessTrace trace_ = Trace();
};

TEST_F(ModelExecutionTest, APlanIsFollowedOnTheMirrorWithinItsBudget) {
  constexpr int64_t kBudget = 40 << 20;  // of 64 MiB of weights
  const auto plan = Plan(kBudget);
  ASSERT_GT(std::ssize(plan.plan.pinned), 0);
  ASSERT_GT(std::ssize(plan.plan.prefetches), 0);
  auto ex = Mirror(/*monitor_every=*/2);
  EXPECT_EQ(ex->stats().backend, "sim");
  for (int it = 0; it < 3; ++it) ASSERT_TRUE(Iterate(*ex, "k", plan).ok());
  const ExecutionStats s = ex->stats();
  EXPECT_EQ(s.following, "k");
  EXPECT_EQ(s.followed_iterations, 3);
  EXPECT_EQ(s.abandoned_iterations, 0);
  EXPECT_EQ(s.plan_switches, 1);
  EXPECT_GT(s.plan_switch_seconds, 0) << "the one switch's host time";
  EXPECT_EQ(s.plan_switch_seconds,
            ex->last_switch().release_s + ex->last_switch().lift_s + ex->last_switch().prepare_s);
  // Streamed weights cross the simulated link every iteration; the pinned ones once.
  EXPECT_GE(s.prefetched_bytes, 3 * plan.plan.streamed_bytes) << s.prefetched_bytes;
  EXPECT_GT(s.evicted_bytes, 0);
  EXPECT_GT(s.resident_bytes, 0);
  EXPECT_LE(s.resident_bytes, kBudget);
  // Timed: the second iteration (the first carries the plan's preparation), then one in two.
  EXPECT_EQ(s.sampled_iterations, 1);
  EXPECT_EQ(s.repinned_bytes, 0);  // nothing evicted the pinned weights
  // The staged weights' host copies, held while staged and kept once put back.
  EXPECT_GT(s.staged_bytes, 0);
  EXPECT_EQ(s.host_copy_bytes, s.staged_bytes);
  // The backend's counters are added at each iteration's end (Note [Counters per model]).
  EXPECT_GE(s.counters.h2d_total(), s.prefetched_bytes);
  ASSERT_TRUE(ex->Drop("k").ok());
  EXPECT_GE(ex->stats().counters.h2d_total(), s.prefetched_bytes);
  EXPECT_EQ(ex->stats().staged_bytes, 0);
  EXPECT_EQ(ex->stats().host_copy_bytes, s.host_copy_bytes);
}

// Note [Unstageable weights are read in place]: a plan made for a GPU that stages, followed over a
// backend that cannot (CUDA before 13), reads its streamed weights in place: never fetched, never
// resident, reported.
TEST_F(ModelExecutionTest, StreamedWeightsTheBackendCannotStageAreReadInPlaceAndReported) {
  constexpr int64_t kBudget = 40 << 20;
  const auto plan = Plan(kBudget);
  ASSERT_TRUE(plan.plan.staged);
  std::set<std::string> streamed;
  for (const runtime::Prefetch& p : plan.plan.prefetches) streamed.insert(p.tensors.begin(), p.tensors.end());
  ASSERT_FALSE(streamed.empty());
  runtime::GpuSpec unstaged = spec_;
  unstaged.uvm.staged_copy_bytes_per_s = 0;
  auto sim = runtime::sim::SimBackend::Create({.spec = unstaged});
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_FALSE((*sim)->can_stage());
  auto ex = OnDevice(**sim, /*monitor_every=*/0);
  for (int it = 0; it < 2; ++it) ASSERT_TRUE(Iterate(*ex, "k", plan).ok());
  const ExecutionStats s = ex->stats();
  EXPECT_EQ(s.followed_iterations, 2);
  EXPECT_EQ(s.in_place_bytes, static_cast<int64_t>(streamed.size()) * kWeight);
  EXPECT_EQ(s.in_place_read_bytes, 2 * s.in_place_bytes) << "they crossed the link in each of the two passes";
  EXPECT_EQ(s.staged_bytes, 0);
  EXPECT_EQ(s.prefetched_bytes, plan.plan.pinned_bytes);  // the pinned weights, once
  EXPECT_EQ(s.resident_bytes, plan.plan.pinned_bytes);
  EXPECT_LE(s.resident_bytes, kBudget);
  ASSERT_TRUE(ex->Drop("k").ok());
  EXPECT_EQ(ex->stats().in_place_bytes, 0);
  EXPECT_EQ(ex->stats().in_place_read_bytes, s.in_place_read_bytes) << "a sum since the daemon started";
}

TEST_F(ModelExecutionTest, TheMonitorBringsBackAPinnedWeightEvictedBehindTheExecutor) {
  const auto plan = Plan(40 << 20);
  const std::string pinned = plan.plan.pinned[0];
  auto ex = Mirror(/*monitor_every=*/1);
  ASSERT_TRUE(Iterate(*ex, "k", plan).ok());
  const runtime::TensorRange* r = ex->range(pinned);
  ASSERT_NE(r, nullptr);
  runtime::DeviceBackend* sim = ex->backend();
  ASSERT_EQ(*sim->ResidentBytes(r->addr, r->bytes), r->bytes);
  // Another model (or the driver) takes the pinned weight's pages.
  ASSERT_TRUE(sim->Prefetch(r->addr, r->bytes, runtime::Location::kHost, runtime::Stream::kCompute).ok());
  ASSERT_TRUE(sim->Synchronize().ok());
  ASSERT_EQ(*sim->ResidentBytes(r->addr, r->bytes), 0);

  // The op that reads it faults it in, takes as long as the link, and the monitor says so.
  ASSERT_TRUE(Iterate(*ex, "k", plan).ok());
  ExecutionStats s = ex->stats();
  EXPECT_GE(s.reclassified_ops, 1);
  EXPECT_EQ(s.repinned_bytes, r->bytes);
  ASSERT_TRUE(sim->Synchronize().ok());
  EXPECT_EQ(*sim->ResidentBytes(r->addr, r->bytes), r->bytes);

  // Back where the plan wants it: the next sample finds every op in its class.
  const int64_t reclassified = s.reclassified_ops;
  ASSERT_TRUE(Iterate(*ex, "k", plan).ok());
  s = ex->stats();
  EXPECT_EQ(s.reclassified_ops, reclassified);
  EXPECT_EQ(s.repinned_bytes, r->bytes);
  EXPECT_EQ(s.sampled_iterations, 2);
}

// Note [Plans with nothing to do per op]: over the model's own memory (here a SimBackend standing for
// CUDA), a plan that pins everything is not observed op by op but for the monitor's samples.
TEST_F(ModelExecutionTest, APlanWithNothingToDoPerOpIsObservedOnlyWhenTheMonitorTimesIt) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/2);
  const auto roomy = Plan(128 << 20), tight = Plan(24 << 20);
  ASSERT_EQ(std::ssize(roomy.plan.prefetches), 0);
  ASSERT_GT(std::ssize(tight.plan.prefetches), 0);
  std::vector<size_t> observed;
  for (int it = 0; it < 4; ++it) {
    auto subscribers = ex->Begin("roomy", std::make_shared<const profiler::PlanToFollow>(roomy));
    ASSERT_TRUE(subscribers.ok()) << subscribers.status();
    observed.push_back(subscribers->size());
    Drive(*subscribers);
    ASSERT_TRUE(ex->End().ok());
  }
  // The first iteration carries the switch; the monitor times the second and the fourth.
  EXPECT_EQ(observed, (std::vector<size_t>{0, 2, 0, 2}));
  ExecutionStats s = ex->stats();
  EXPECT_EQ(s.followed_iterations, 4);
  EXPECT_EQ(s.sampled_iterations, 2);
  EXPECT_EQ(s.resident_bytes, kWeights * kWeight);
  // A plan that streams is observed at every iteration.
  for (int it = 0; it < 2; ++it) {
    auto subscribers = ex->Begin("tight", std::make_shared<const profiler::PlanToFollow>(tight));
    ASSERT_TRUE(subscribers.ok()) << subscribers.status();
    EXPECT_FALSE(subscribers->empty()) << it;
    Drive(*subscribers);
    ASSERT_TRUE(ex->End().ok());
  }
  EXPECT_EQ(ex->stats().abandoned_iterations, 0);
  ex.reset();  // before the backend it drives
}

// Note [Plans hand pinned weights on]: in a model within its budget every key's plan pins every weight;
// switching between them (a burst's prefill, mixed and decode passes) moves nothing again.
TEST_F(ModelExecutionTest, PlansThatPinTheSameWeightsHandThemOnAtASwitchWithoutPrefetchingThemAgain) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0);
  const auto roomy = Plan(128 << 20), tight = Plan(24 << 20);
  ASSERT_EQ(std::ssize(roomy.plan.pinned), kWeights);
  ASSERT_TRUE(Iterate(*ex, "decode", roomy).ok());
  EXPECT_EQ(ex->stats().prefetched_bytes, kWeights * kWeight);  // brought in once
  for (const char* key : {"prefill", "decode", "mixed", "decode"}) ASSERT_TRUE(Iterate(*ex, key, roomy).ok()) << key;
  ExecutionStats s = ex->stats();
  EXPECT_EQ(s.plan_switches, 5);
  EXPECT_EQ(s.prefetched_bytes, kWeights * kWeight);
  EXPECT_EQ(s.resident_bytes, kWeights * kWeight);
  // A plan that streams some of them stages those; the plan after it brings them back, and only them.
  ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  const int64_t before = ex->stats().prefetched_bytes;
  ASSERT_TRUE(Iterate(*ex, "decode", roomy).ok());
  s = ex->stats();
  EXPECT_EQ(s.resident_bytes, kWeights * kWeight);
  int64_t tight_pinned = 0;
  for (const std::string& id : tight.plan.pinned) tight_pinned += id.rfind("param:", 0) == 0 ? kWeight : 0;
  ASSERT_GT(tight_pinned, 0);
  EXPECT_EQ(s.prefetched_bytes - before, kWeights * kWeight - tight_pinned);
  ex.reset();  // before the backend it drives
}

// Note [Plans hand the device buffer on] (runtime/executor.cc): a switch between plans that stream
// through device buffers of one size hands the buffer on; nothing waits on the host for the device
// (on CUDA, for every model's passes), where freeing it waited for both streams. Plans of another window
// get their own, the old one freed as before.
TEST_F(ModelExecutionTest, ASwitchHandsTheDeviceBufferToAPlanOfTheSameWindowWithoutWaitingForTheDevice) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0);
  const auto tight = Plan(24 << 20), tighter = Plan(16 << 20);
  ASSERT_TRUE(tight.plan.device_buffer && tighter.plan.device_buffer);
  ASSERT_GT(tight.plan.window_bytes, 0);
  ASSERT_TRUE(Iterate(*ex, "decode", tight).ok());
  const int64_t syncs = sim->synchronizations();
  std::vector<int64_t> streamed;  // what each pass after the first fetched: its streamed weights
  for (const char* key : {"prefill", "decode", "prefill", "decode"}) {
    const int64_t before = ex->stats().prefetched_bytes;
    ASSERT_TRUE(Iterate(*ex, key, tight).ok()) << key;
    streamed.push_back(ex->stats().prefetched_bytes - before);
  }
  ExecutionStats s = ex->stats();
  EXPECT_EQ(s.plan_switches, 5);
  EXPECT_EQ(s.buffers_handed_on, 4);
  EXPECT_EQ(sim->synchronizations(), syncs) << "a switch that hands the buffer on waits for nothing";
  EXPECT_EQ(s.followed_iterations, 5);
  EXPECT_EQ(s.abandoned_iterations, 0) << s.last_error;
  // Each pass streams through the buffer it was handed what a pass of the same plan with no switch does,
  // and the fetches it starts with (a steady pass found those issued ahead by the pass before it): at
  // most a window more.
  const int64_t before = s.prefetched_bytes;
  ASSERT_TRUE(Iterate(*ex, "decode", tight).ok());
  const int64_t steady = ex->stats().prefetched_bytes - before;
  EXPECT_GE(steady, tight.plan.streamed_bytes);
  for (int64_t bytes : streamed) {
    EXPECT_EQ(bytes, streamed[0]);
    EXPECT_GE(bytes, steady);
    EXPECT_LE(bytes - steady, tight.plan.window_bytes);
  }
  EXPECT_LE(s.peak_resident_bytes, 24 << 20);
  // A plan of another window takes a buffer of its own; the old one is freed once the device is done with it.
  ASSERT_NE(tighter.plan.window_bytes, tight.plan.window_bytes);
  ASSERT_TRUE(Iterate(*ex, "tighter", tighter).ok());
  s = ex->stats();
  EXPECT_EQ(s.buffers_handed_on, 4);
  EXPECT_GT(sim->synchronizations(), syncs);
  EXPECT_EQ(s.abandoned_iterations, 0) << s.last_error;
  ex.reset();  // before the backend it drives
}

// Note [Slow switches]: a switch at or over ExecutionOptions::slow_switch_seconds says at INFO where its
// time went; one under it says nothing.
TEST_F(ModelExecutionTest, ASlowSwitchSaysAtInfoWhereItsTimeWentAndAFastOneSaysNothing) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  std::vector<runtime::NamedTensor> named = Named();
  for (runtime::NamedTensor& t : named) t.addr = *sim->AllocateManaged(t.bytes);
  const auto tight = Plan(24 << 20);
  {
    auto ex = ModelExecution::OnDevice(sim.get(), named, {.monitor_every = 0, .slow_switch_seconds = 0});
    ::testing::internal::CaptureStderr();
    ASSERT_TRUE(Iterate(*ex, "decode", tight).ok());
    ASSERT_TRUE(Iterate(*ex, "prefill", tight).ok());
    const std::string log = ::testing::internal::GetCapturedStderr();
    const size_t first = log.find("plan switch to decode took "), second = log.find("plan switch to prefill took ");
    ASSERT_NE(first, std::string::npos) << log;
    ASSERT_NE(second, std::string::npos) << log;
    const std::string one = log.substr(first, second - first), two = log.substr(second);
    EXPECT_NE(one.find("the device buffer made anew"), std::string::npos) << one;
    EXPECT_EQ(one.find(" 0 bytes of new host copies"), std::string::npos) << "the first plan makes them: " << one;
    EXPECT_NE(two.find("the device buffer handed on"), std::string::npos) << two;
    EXPECT_NE(two.find(" 0 bytes of new host copies"), std::string::npos) << "the second reuses them: " << two;
    EXPECT_EQ(two.find(" 0 pinned bytes handed on"), std::string::npos) << two;
  }
  // Under the threshold (10 s here, so that a loaded machine cannot make a switch slow: 50 ms by default).
  auto quiet = ModelExecution::OnDevice(sim.get(), named, {.monitor_every = 0, .slow_switch_seconds = 10});
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Iterate(*quiet, "decode", tight).ok());
  ASSERT_TRUE(Iterate(*quiet, "prefill", tight).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("plan switch"), std::string::npos);
  quiet.reset();  // before the backend it drives
}

// Note [Counters per model]: a pass or a switch reads what the backend has delivered (on CUDA an exact
// reading is a forced CUPTI flush, 10-20 ms); only a release no plan follows at once waits for every record.
TEST_F(ModelExecutionTest, PassesAndSwitchesAddTheCountersWithoutWaitingForThemAndAReleaseWaitsForAll) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0);
  const auto roomy = Plan(128 << 20), tight = Plan(24 << 20);
  int64_t h2d = 0;
  for (const char* key : {"decode", "prefill", "decode", "tight", "decode", "decode"}) {
    ASSERT_TRUE(Iterate(*ex, key, std::string(key) == "tight" ? tight : roomy).ok()) << key;
    const runtime::UvmCounters moved = *sim->DeliveredCounters();
    EXPECT_EQ(ex->stats().counters.h2d_total(), moved.h2d_total()) << "current at the end of the " << key << " pass";
    EXPECT_GE(moved.h2d_total(), h2d);
    h2d = moved.h2d_total();
  }
  EXPECT_EQ(ex->stats().plan_switches, 5);
  EXPECT_GT(h2d, 0);
  EXPECT_EQ(sim->exact_counter_reads(), 0) << "no pass or switch waits for the counters";
  ASSERT_TRUE(ex->Drop("decode").ok());
  EXPECT_EQ(sim->exact_counter_reads(), 1) << "the release closes the window";
  EXPECT_EQ(ex->stats().counters.h2d_total(), sim->DeliveredCounters()->h2d_total());
  ex.reset();  // before the backend it drives
}

// Note [Monitoring followed iterations]: after a switch the next iteration is due, but the interval
// between two timed ones holds across switches: one timer serves every plan.
TEST_F(ModelExecutionTest, AfterASwitchTheNextIterationIsTimedButNoSoonerThanTheIntervalAfterTheLast) {
  const auto roomy = Plan(128 << 20);
  const std::vector<std::string> keys = {"a", "a", "b", "b", "a", "a", "a"};
  for (double interval : {0.0, 3600.0}) {
    auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
    auto ex = OnDevice(*sim, /*monitor_every=*/64, interval);
    std::vector<size_t> observed;
    for (const std::string& key : keys) {
      auto subscribers = ex->Begin(key, std::make_shared<const profiler::PlanToFollow>(roomy));
      ASSERT_TRUE(subscribers.ok()) << subscribers.status();
      observed.push_back(subscribers->size());
      Drive(*subscribers);
      ASSERT_TRUE(ex->End().ok());
    }
    // Never the iteration that carries a switch; the one after it, unless another was timed within the hour.
    EXPECT_EQ(observed,
              interval == 0 ? (std::vector<size_t>{0, 2, 0, 2, 0, 2, 0}) : (std::vector<size_t>{0, 2, 0, 0, 0, 0, 0}))
        << interval;
    EXPECT_EQ(ex->stats().sampled_iterations, interval == 0 ? 3 : 1) << interval;
    ex.reset();
  }
}

// Note [Coded sizes in the trace]: the weights a plan staged report what their host copies cross the link
// as — what the backend measured where it has, else its ratio — and the pinned ones nothing; a backend
// whose copies cross plain reports none.
TEST_F(ModelExecutionTest, TheWeightsItStagedReportTheirCodedSizesFromTheBackend) {
  const auto tight = Plan(24 << 20);
  ASSERT_FALSE(tight.plan.prefetches.empty());
  std::set<std::string> streamed;
  for (const runtime::Prefetch& f : tight.plan.prefetches) streamed.insert(f.tensors.begin(), f.tensors.end());
  {
    auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
    auto ex = OnDevice(*sim, /*monitor_every=*/0);
    for (int it = 0; it < 2; ++it) ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
    EXPECT_TRUE(ex->CodedBytes().empty()) << "copies cross plain";
  }
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_, .coded_ratio = 0.7});
  auto ex = OnDevice(*sim, /*monitor_every=*/0);
  EXPECT_TRUE(ex->CodedBytes().empty()) << "nothing staged yet";
  const std::string tighter = *streamed.begin(), incompressible = *std::next(streamed.begin());
  sim->SetCodedBytes(ex->range(tighter)->addr, kWeight / 4);
  sim->SetCodedBytes(ex->range(incompressible)->addr, kWeight + 4096);
  for (int it = 0; it < 2; ++it) ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  const std::map<std::string, int64_t> coded = ex->CodedBytes();
  std::set<std::string> reported;
  for (const auto& [id, bytes] : coded) reported.insert(id);
  EXPECT_EQ(reported, streamed);
  EXPECT_EQ(coded.at(tighter), kWeight / 4);
  EXPECT_EQ(coded.at(incompressible), kWeight);
  for (const auto& [id, bytes] : coded) {
    if (id != tighter && id != incompressible) EXPECT_EQ(bytes, static_cast<int64_t>(0.7 * kWeight)) << id;
  }
}

// Note [A model asleep]: a sleep leaves what the plan staged staged, nothing copied back on the host (most
// of a 7B's sleep, holding the backend the other models share), and the plan that wakes the model adopts it.
TEST_F(ModelExecutionTest, AModelAsleepLeavesWhatItStagedStagedAndTheWakingPlanAdoptsIt) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0, /*monitor_min_interval_seconds=*/0, kSleepBudget);
  const auto tight = Plan(kSleepBudget);
  for (int it = 0; it < 2; ++it) ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  const ExecutionStats awake = ex->stats();
  ASSERT_GT(awake.staged_bytes, 0);
  const int64_t put_back = sim->put_back_bytes();
  ASSERT_TRUE(ex->Sleep().ok());
  ASSERT_TRUE(ex->asleep());
  EXPECT_EQ(sim->put_back_bytes(), put_back);
  int64_t staged = 0, resident = 0;
  for (int i = 0; i < kWeights; ++i) {
    const runtime::TensorRange& r = *ex->range("param:w" + std::to_string(i));
    if (sim->StagingOf(r.addr) == runtime::DeviceBackend::Staging::kDiscarded) staged += r.bytes;
    resident += *sim->ResidentBytes(r.addr, r.bytes);
  }
  EXPECT_EQ(staged, kWeights * kWeight);  // those the plan staged, and those it pinned as host copies now
  EXPECT_EQ(resident, 0);                 // no floor: nothing of it on the device
  EXPECT_EQ(ex->stats().resident_bytes, 0);
  ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());  // the waking pass
  const ExecutionStats woken = ex->stats();
  EXPECT_EQ(woken.followed_iterations, awake.followed_iterations + 1);
  EXPECT_EQ(woken.staged_bytes, awake.staged_bytes);
  EXPECT_LE(woken.peak_resident_bytes, kSleepBudget);
  EXPECT_EQ(sim->put_back_bytes(), put_back);
  ex.reset();  // before the backend it drives
}

// Note [Weights asleep as host copies] (runtime/unplanned_placement.cc): what the plan pinned leaves the
// device as host copies, filled once: the second sleep copies nothing and moves nothing to the host. The
// waking plan brings the pinned weights back by staged copies (no migration), and the tokens' passes follow.
TEST_F(ModelExecutionTest, AModelAsleepKeepsItsPinnedWeightsAsHostCopiesAndItsWakingPlanCopiesThemBack) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0, /*monitor_min_interval_seconds=*/0, kSleepBudget);
  const auto tight = Plan(kSleepBudget);
  int64_t pinned = 0;
  for (const std::string& id : tight.plan.pinned) pinned += id.rfind("param:", 0) == 0 ? kWeight : 0;
  ASSERT_GT(pinned, 0);
  ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  const int64_t filled = sim->host_copies_filled_bytes(), awake_resident = ex->stats().resident_bytes;
  for (int sleep = 0; sleep < 2; ++sleep) {
    const runtime::UvmCounters before = *sim->ReadCounters();
    ASSERT_TRUE(ex->Sleep().ok());
    ASSERT_TRUE(ex->asleep());
    const runtime::UvmCounters slept = *sim->ReadCounters() - before;
    EXPECT_EQ(slept.d2h_total(), 0) << "sleep " << sleep << ": dropped, not migrated";
    EXPECT_EQ(sim->host_copies_filled_bytes(), filled + pinned) << "sleep " << sleep << ": filled the first time only";
    EXPECT_EQ(ex->stats().host_copy_bytes, kWeights * kWeight) << "sleep " << sleep << ": every weight's, reported";
    for (int i = 0; i < kWeights; ++i) {
      const runtime::TensorRange& r = *ex->range("param:w" + std::to_string(i));
      EXPECT_EQ(sim->StagingOf(r.addr), runtime::DeviceBackend::Staging::kDiscarded) << i;
      EXPECT_EQ(*sim->ResidentBytes(r.addr, r.bytes), 0) << i;
    }
    const runtime::UvmCounters waking = *sim->ReadCounters();
    ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());  // the waking pass
    const runtime::UvmCounters woke = *sim->ReadCounters() - waking;
    EXPECT_EQ(woke.h2d(runtime::MigrationCause::kFault), 0);
    EXPECT_EQ(woke.h2d(runtime::MigrationCause::kUserPrefetch), 0) << "the pinned weights came back from host copies";
    EXPECT_GE(woke.h2d(runtime::MigrationCause::kStaged), pinned);
    EXPECT_EQ(ex->stats().resident_bytes, awake_resident);
  }
  EXPECT_EQ(ex->stats().abandoned_iterations, 0);
  ex.reset();  // before the backend it drives
}

// Note [A model asleep]: a sleeping model's next pass may follow no plan (a shape with none near it, a run
// again): its weights are put back from their host copies first, then read in place within its budget.
TEST_F(ModelExecutionTest, APassWithNoPlanAfterASleepPutsTheHostCopiesBackAndReadsTheWeightsInPlace) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0, /*monitor_min_interval_seconds=*/0, kSleepBudget);
  ASSERT_TRUE(Iterate(*ex, "tight", Plan(kSleepBudget)).ok());
  ASSERT_TRUE(ex->Sleep().ok());
  const int64_t put_back = sim->put_back_bytes();
  ASSERT_TRUE(ex->Suspend().ok());
  EXPECT_EQ(sim->put_back_bytes(), put_back + kWeights * kWeight);
  const runtime::UvmCounters before = *sim->ReadCounters();
  for (int i = 0; i < kOps; ++i) {  // the pass, its kernels on the mirror as the model's would be
    const runtime::TensorRange& r = *ex->range("param:w" + std::to_string(i % kWeights));
    EXPECT_EQ(sim->StagingOf(r.addr), runtime::DeviceBackend::Staging::kNone) << i;
    sim->Launch({.name = "mm", .ranges = {{.addr = r.addr, .bytes = r.bytes}}, .flops = 2.0 * r.bytes / 2});
  }
  ASSERT_TRUE(sim->Synchronize().ok());
  const runtime::UvmCounters moved = *sim->ReadCounters() - before;
  EXPECT_EQ(moved.gpu_faults, 0);
  EXPECT_EQ(moved.remote_bytes, 2 * kWeights * kWeight);  // every weight read in place, twice
  EXPECT_LE(ex->resident_bytes(), kSleepBudget);
  ex.reset();  // before the backend it drives
}

TEST_F(ModelExecutionTest, UnloadedWithItsModelItDropsWhatIsStagedAndFreesTheHostCopies) {
  auto sim = *runtime::sim::SimBackend::Create({.spec = spec_});
  auto ex = OnDevice(*sim, /*monitor_every=*/0);
  const auto tight = Plan(24 << 20);
  for (int it = 0; it < 2; ++it) ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  const ExecutionStats s = ex->stats();
  ASSERT_GT(s.staged_bytes, 0);
  ASSERT_GT(s.host_copy_bytes, 0);
  std::vector<runtime::TensorRange> ranges;
  for (int i = 0; i < kWeights; ++i) ranges.push_back(*ex->range("param:w" + std::to_string(i)));
  const int64_t put_back = sim->put_back_bytes();
  ex.reset();
  EXPECT_EQ(sim->put_back_bytes(), put_back);  // nothing copied back into memory about to be freed
  for (const runtime::TensorRange& r : ranges) {
    EXPECT_EQ(sim->StagingOf(r.addr), runtime::DeviceBackend::Staging::kNone);
    EXPECT_EQ(sim->HostCopyBytesWithin(r.addr, r.bytes), 0);
  }
}

TEST_F(ModelExecutionTest, AnotherKeysPlanTakesThePlacementAndAStrayOpAbandonsTheIteration) {
  const auto tight = Plan(24 << 20);
  const auto roomy = Plan(128 << 20);  // everything pinned
  auto ex = Mirror(/*monitor_every=*/0);
  ASSERT_TRUE(Iterate(*ex, "tight", tight).ok());
  ASSERT_TRUE(Iterate(*ex, "roomy", roomy).ok());
  ExecutionStats s = ex->stats();
  EXPECT_EQ(s.plan_switches, 2);
  EXPECT_EQ(s.following, "roomy");
  EXPECT_EQ(s.resident_bytes, kWeights * kWeight);
  EXPECT_EQ(s.sampled_iterations, 0);  // the monitor is off

  absl::Status stray = Iterate(*ex, "tight", tight, /*kernel_at=*/3);
  EXPECT_EQ(stray.code(), absl::StatusCode::kFailedPrecondition) << stray;
  EXPECT_NE(stray.message().find("op 3 is aten::add#0"), std::string::npos) << stray;
  // Its weights are whole 2 MiB blocks, staged on this spec: the stray op may have read a discarded
  // range, so the iteration's result must not be used.
  ASSERT_TRUE(tight.plan.staged);
  EXPECT_TRUE(ex->last_iteration_untrusted());
  s = ex->stats();
  EXPECT_EQ(s.abandoned_iterations, 1);
  EXPECT_EQ(s.followed_iterations, 2);
  EXPECT_EQ(s.plan_switches, 3);
  EXPECT_EQ(s.last_error, std::string(stray.message()));
  EXPECT_EQ(s.staged_bytes, 0);  // put back in managed memory when following stopped

  // Dropping the key that holds the placement releases it.
  ASSERT_TRUE(ex->Drop("tight").ok());
  EXPECT_EQ(ex->stats().following, "");
}

}  // namespace
}  // namespace autouvm::profiler
