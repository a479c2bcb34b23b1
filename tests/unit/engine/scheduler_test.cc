// Scheduler: the loop on its thread, over a fake runner and a fake clock (engine/scheduler.h).
#include "engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_step_runner.h"
#include "tests/testing/recording_sink.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::FakeClock;
using autouvm::testing::FakeStepRunner;
using autouvm::testing::RecordingSink;
using ::testing::ElementsAre;

GenerationParams Params(int32_t first, int32_t max_tokens) {
  GenerationParams p;
  p.prompt = {256, first};
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  return p;
}

class SchedulerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  tokenizer::ByteTokenizer tokenizer_{320, 256, 257};
};

TEST_F(SchedulerTest, RunsARequestToItsLengthAndCountsIt) {
  FakeStepRunner runner(2);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2}, &clock_);
  RecordingSink sink;
  ASSERT_TRUE(sched.Submit(Params(10, 4), &sink).ok());
  sink.done.WaitForNotification();
  EXPECT_TRUE(sink.Result().status.ok());
  EXPECT_EQ(sink.Result().reason, FinishReason::kLength);
  EXPECT_THAT(sink.Tokens(), ElementsAre(11, 12, 13, 14));
  const SchedulerStats s = sched.Stats();
  EXPECT_EQ(s.requests_total, 1u);
  EXPECT_EQ(s.tokens_generated_total, 4u);
  EXPECT_EQ(s.decode_steps_total, 3u);  // the prefill gives the first token
}

// Counts the passes and the times the scheduler puts the model to sleep.
class SleepCounter : public IterationHooks {
 public:
  void BeforeIteration(IterationPhase, int, int64_t) override { ++passes; }
  bool AfterIteration(const absl::Status&) override { return false; }
  void Sleep() override { ++sleeps; }
  std::atomic<int> passes{0}, sleeps{0};
};

// Note [A model asleep] (profiler/model_execution.cc): the hooks' Sleep comes once the model has had
// nothing to run for idle_sleep — once per idle spell, the next only after the model ran again — and
// when RequestSleep asks for it (Admin SleepModel), as soon as nothing runs.
TEST_F(SchedulerTest, AnIdleModelIsPutToSleepOncePerIdleSpellAndWhenAsked) {
  FakeStepRunner runner(2);
  SleepCounter hooks;
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2, .hooks = &hooks, .idle_sleep = absl::Milliseconds(30)},
                  &clock_);
  ASSERT_TRUE(autouvm::testing::Eventually([&] { return hooks.sleeps.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(hooks.sleeps.load(), 1) << "asleep already: no second sleep while nothing ran";
  RecordingSink sink;
  ASSERT_TRUE(sched.Submit(Params(10, 3), &sink).ok());
  sink.done.WaitForNotification();
  EXPECT_THAT(sink.Tokens(), ElementsAre(11, 12, 13));
  EXPECT_EQ(hooks.passes.load(), 3);
  ASSERT_TRUE(autouvm::testing::Eventually([&] { return hooks.sleeps.load() == 2; }));
  // Asked for (Admin SleepModel): at once, though asleep already, and only once.
  sched.RequestSleep();
  ASSERT_TRUE(autouvm::testing::Eventually([&] { return hooks.sleeps.load() == 3; }));
  // Without idle_sleep it never sleeps by itself; asked while a request runs, it sleeps after it ends.
  SleepCounter awake;
  FakeStepRunner held(2);
  Scheduler never(&held, &tokenizer_, {.max_batch = 2, .hooks = &awake}, &clock_);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(awake.sleeps.load(), 0);
  held.Hold();
  RecordingSink running;
  ASSERT_TRUE(never.Submit(Params(20, 3), &running).ok());
  held.AwaitPasses(1);
  never.RequestSleep();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(awake.sleeps.load(), 0) << "asleep while a request ran";
  held.Unhold();
  running.done.WaitForNotification();
  EXPECT_THAT(running.Tokens(), ElementsAre(21, 22, 23));
  ASSERT_TRUE(autouvm::testing::Eventually([&] { return awake.sleeps.load() == 1; }));
}

// Note [Captured steps] (engine/step_graphs.cc): the runner may run a pass as a graph only when the hooks
// say nothing observes it; without hooks nothing does.
class CaptureDecodesOnly : public IterationHooks {
 public:
  void BeforeIteration(IterationPhase phase, int, int64_t) override { decode_ = phase == IterationPhase::kDecode; }
  bool PassMayBeCaptured() const override { return decode_; }
  bool AfterIteration(const absl::Status&) override { return false; }

 private:
  bool decode_ = false;
};

TEST_F(SchedulerTest, APassMayRunAsAGraphOnlyWhenTheHooksSayNothingObservesIt) {
  FakeStepRunner runner(2);
  CaptureDecodesOnly hooks;
  {
    Scheduler sched(&runner, &tokenizer_, {.max_batch = 2, .hooks = &hooks}, &clock_);
    RecordingSink sink;
    ASSERT_TRUE(sched.Submit(Params(10, 3), &sink).ok());
    sink.done.WaitForNotification();
  }
  const auto passes = runner.passes();
  ASSERT_EQ(passes.size(), 3u);
  EXPECT_FALSE(passes[0].graphs_allowed);  // the prefill
  EXPECT_TRUE(passes[1].graphs_allowed);
  EXPECT_TRUE(passes[2].graphs_allowed);
  FakeStepRunner bare(2);
  Scheduler sched(&bare, &tokenizer_, {.max_batch = 2}, &clock_);
  RecordingSink sink;
  ASSERT_TRUE(sched.Submit(Params(10, 2), &sink).ok());
  sink.done.WaitForNotification();
  for (const auto& p : bare.passes()) EXPECT_TRUE(p.graphs_allowed);
}

TEST_F(SchedulerTest, AFullQueueIsRefusedWhileTheModelIsBusy) {
  FakeStepRunner runner(1);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 1, .max_queue = 2}, &clock_);
  runner.Hold();
  RecordingSink running, q1, q2, refused;
  ASSERT_TRUE(sched.Submit(Params(1, 2), &running).ok());
  runner.AwaitPasses(1);  // its prefill holds the only slot
  ASSERT_TRUE(sched.Submit(Params(2, 1), &q1).ok());
  ASSERT_TRUE(sched.Submit(Params(3, 1), &q2).ok());
  const auto full = sched.Submit(Params(4, 1), &refused);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.status().message(), "the model's queue is full (2 requests waiting); retry later");
  EXPECT_EQ(sched.Stats().queued, 2);
  runner.Unhold();
  for (RecordingSink* s : {&running, &q1, &q2}) s->done.WaitForNotification();
  EXPECT_FALSE(refused.done.HasBeenNotified());
}

TEST_F(SchedulerTest, ALaterRequestJoinsTheRunningDecodeStepAndReusesAFreedSlot) {
  FakeStepRunner runner(2);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2}, &clock_);
  runner.Hold();
  RecordingSink a, b, c;
  ASSERT_TRUE(sched.Submit(Params(10, 6), &a).ok());
  runner.AwaitPasses(1);
  ASSERT_TRUE(sched.Submit(Params(20, 3), &b).ok());
  ASSERT_TRUE(sched.Submit(Params(30, 2), &c).ok());  // waits: both slots are taken
  runner.Unhold();
  for (RecordingSink* s : {&a, &b, &c}) s->done.WaitForNotification();
  EXPECT_THAT(a.Tokens(), ElementsAre(11, 12, 13, 14, 15, 16));
  EXPECT_THAT(b.Tokens(), ElementsAre(21, 22, 23));
  EXPECT_THAT(c.Tokens(), ElementsAre(31, 32));
  size_t widest = 0;
  int c_slot = -1;
  for (const FakeStepRunner::Pass& p : runner.passes()) {
    widest = std::max(widest, p.rows.size());
    for (const FakeStepRunner::Row& r : p.rows) {
      if (!r.decode && r.tokens == std::vector<int32_t>{256, 30}) c_slot = r.slot;
    }
  }
  EXPECT_EQ(widest, 2u) << "b never joined a's passes";
  EXPECT_EQ(c_slot, 1) << "c should take the slot b gave back";
  // b's prompt rode along with a's next token, and c's with a's later one.
  EXPECT_EQ(sched.Stats().mixed_passes_total, 2u);
  EXPECT_LT(sched.Stats().decode_steps_total, sched.Stats().batched_rows_total);
}

// Note [Waiting for company]: the first request to reach an idle model waits a little (here 5% of a
// 10 s pass: 0.5 s) for others, so that one arriving 50 ms later shares its pass; a lone one still runs.
TEST_F(SchedulerTest, AnIdleModelsFirstRequestWaitsForCompanyToShareItsPass) {
  FakeStepRunner runner(4);
  runner.TakePerPass(&clock_, absl::Seconds(10));
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 4, .max_queue_delay = absl::Seconds(5)}, &clock_);
  RecordingSink alone;
  ASSERT_TRUE(sched.Submit(Params(10, 1), &alone).ok());  // before any pass: no wait
  alone.done.WaitForNotification();
  RecordingSink first, second;
  ASSERT_TRUE(sched.Submit(Params(20, 1), &first).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(sched.Submit(Params(30, 1), &second).ok());
  first.done.WaitForNotification();
  second.done.WaitForNotification();
  const std::vector<FakeStepRunner::Pass> passes = runner.passes();
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[1].prompt_rows(), 2) << "the second request did not share the first one's pass";
  EXPECT_THAT(first.Tokens(), ElementsAre(21));
  EXPECT_THAT(second.Tokens(), ElementsAre(31));
}

TEST_F(SchedulerTest, CancellationAndDeadlineEndARunningRequest) {
  FakeStepRunner runner(2);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2}, &clock_);
  runner.Hold();
  RecordingSink gone, late;
  auto handle = sched.Submit(Params(1, 40), &gone);
  ASSERT_TRUE(handle.ok());
  GenerationParams p = Params(2, 40);
  p.deadline = clock_.Now() + absl::Seconds(5);
  ASSERT_TRUE(sched.Submit(std::move(p), &late).ok());
  runner.AwaitPasses(1);
  (*handle)->Cancel();
  clock_.Advance(absl::Seconds(10));
  runner.Unhold();
  gone.done.WaitForNotification();
  late.done.WaitForNotification();
  EXPECT_EQ(gone.Result().status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gone.Result().status.message(), "cancelled by the client");
  EXPECT_EQ(late.Result().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(gone.Tokens().size(), 40u);
  EXPECT_LT(late.Tokens().size(), 40u);
}

// Note [A deadline is not a cancellation] (engine/step_policy.cc): the client's timer cancels a call at
// its own deadline, earlier than the daemon's by the time the call took to arrive; a cancellation within
// a quarter of the request's time of its deadline is counted as the deadline, one further from it as
// the client's.
TEST_F(SchedulerTest, ACancellationCloseToTheDeadlineIsTheDeadlines) {
  FakeStepRunner runner(2);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2}, &clock_);
  runner.Hold();
  RecordingSink near, far;
  GenerationParams p = Params(1, 40);
  p.deadline = clock_.Now() + absl::Milliseconds(200);  // a quarter: 50 ms
  auto near_handle = sched.Submit(std::move(p), &near);
  p = Params(2, 40);
  p.deadline = clock_.Now() + absl::Milliseconds(1000);  // a quarter: 250 ms
  auto far_handle = sched.Submit(std::move(p), &far);
  ASSERT_TRUE(near_handle.ok() && far_handle.ok());
  runner.AwaitPasses(1);
  clock_.Advance(absl::Milliseconds(160));
  (*near_handle)->Cancel();
  (*far_handle)->Cancel();
  runner.Unhold();
  near.done.WaitForNotification();
  far.done.WaitForNotification();
  EXPECT_EQ(near.Result().status.code(), absl::StatusCode::kDeadlineExceeded) << near.Result().status;
  EXPECT_EQ(far.Result().status.code(), absl::StatusCode::kCancelled) << far.Result().status;
}

TEST_F(SchedulerTest, ShutdownLetsRequestsFinishWithinTheGraceAndRefusesNewOnes) {
  FakeStepRunner runner(1);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 1}, &clock_);
  RecordingSink a, b;
  ASSERT_TRUE(sched.Submit(Params(1, 5), &a).ok());
  ASSERT_TRUE(sched.Submit(Params(2, 5), &b).ok());
  sched.Shutdown(absl::Hours(1));  // the fake clock never reaches the end of the grace
  EXPECT_TRUE(a.Result().status.ok());
  EXPECT_TRUE(b.Result().status.ok()) << "a queued request ended early: " << b.Result().status;
  EXPECT_EQ(b.Tokens().size(), 5u);
  RecordingSink late;
  EXPECT_EQ(sched.Submit(Params(3, 1), &late).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, ShutdownPastTheGraceEndsEveryRequestUnavailable) {
  FakeStepRunner runner(1);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 1}, &clock_);
  runner.Hold();
  RecordingSink running, queued;
  ASSERT_TRUE(sched.Submit(Params(1, 50), &running).ok());
  runner.AwaitPasses(1);
  ASSERT_TRUE(sched.Submit(Params(2, 50), &queued).ok());
  std::thread stop([&] { sched.Shutdown(absl::ZeroDuration()); });
  // Released once the scheduler is stopping (it then refuses new work), so that the grace is over
  // before the running request could finish.
  while (sched.RunIdleIteration(IterationPhase::kDecode, 1, 0).code() != absl::StatusCode::kUnavailable) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  runner.Unhold();
  stop.join();
  EXPECT_EQ(running.Result().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queued.Result().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queued.Result().status.message(), "the server is shutting down");
  EXPECT_TRUE(queued.Tokens().empty());
}

TEST_F(SchedulerTest, IdleIterationsRunOnFreeSlotsAndRefuseShapesThatCannotRun) {
  FakeStepRunner runner(2);
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 2}, &clock_);
  EXPECT_EQ(sched.RunIdleIteration(IterationPhase::kDecode, 3, 0).message(),
            "batch 3 is not within 1..2 (the model's slots)");
  EXPECT_EQ(sched.RunIdleIteration(IterationPhase::kPrefill, 1, 64).message(), "prompt length 64 is not within 1..63");
  ASSERT_TRUE(sched.RunIdleIteration(IterationPhase::kDecode, 2, 0).ok());
  ASSERT_TRUE(sched.RunIdleIteration(IterationPhase::kPrefill, 1, 9).ok());
  ASSERT_TRUE(sched.RunIdleIteration(IterationPhase::kPrefill, 2, 5).ok());  // two prompts in one pass
  runner.AwaitPasses(3);
  const std::vector<FakeStepRunner::Pass> passes = runner.passes();
  EXPECT_EQ(passes[0].decode_rows(), 2);
  ASSERT_EQ(passes[1].prompt_rows(), 1);
  EXPECT_EQ(passes[1].rows[0].tokens.size(), 9u);
  ASSERT_EQ(passes[2].prompt_rows(), 2);  // two prompts in one pass, each in a slot of its own
  EXPECT_EQ(passes[2].rows[0].tokens.size(), 5u);
  EXPECT_EQ(passes[2].rows[1].tokens.size(), 5u);
  EXPECT_NE(passes[2].rows[0].slot, passes[2].rows[1].slot);
  // Counted once each pass's result is in (the third may still be returning).
  for (int i = 0; i < 5000 && sched.Stats().idle_passes_total < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(sched.Stats().idle_passes_total, 3u);
  EXPECT_EQ(sched.Stats().requests_total, 0u);
}

// Note [Reserving KV blocks]: a pool of 6 blocks of 4 positions holds two requests of 2 + 10 tokens
// (3 blocks each) at once, though there are 4 slots: the others wait in the queue for blocks, none is
// ever refused by a full pool, and each gets its tokens.
TEST_F(SchedulerTest, RequestsWaitForTheirKvBlocksAndEachGetsItsTokensThoughThePoolHoldsTwoAtOnce) {
  FakeStepRunner runner(4, 320, 64, {.blocks = 7, .block_tokens = 4});
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 4}, &clock_);
  runner.Hold();
  std::vector<RecordingSink> sinks(6);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(sched.Submit(Params(10 * (i + 1), 10), &sinks[static_cast<size_t>(i)]).ok());
  runner.AwaitPasses(1);
  // Note [KV blocks taken as sequences grow]: each sequence of the first pass holds the one block its
  // prompt fills, and the policy has reserved its whole length's 3.
  const auto first_rows = static_cast<int64_t>(runner.passes()[0].rows.size());
  EXPECT_EQ(runner.blocks_in_use(), first_rows);
  EXPECT_EQ(sched.Stats().kv_blocks_reserved, 3 * first_rows);
  EXPECT_EQ(sched.Stats().kv_blocks_total, 6);
  runner.Unhold();
  for (int i = 0; i < 6; ++i) {
    RecordingSink& sink = sinks[static_cast<size_t>(i)];
    sink.done.WaitForNotification();
    ASSERT_TRUE(sink.Result().status.ok()) << "request " << i << ": " << sink.Result().status;
    std::vector<int32_t> want;
    for (int t = 1; t <= 10; ++t) want.push_back(10 * (i + 1) + t);
    EXPECT_EQ(sink.Tokens(), want) << "request " << i;
  }
  size_t widest = 0;
  for (const FakeStepRunner::Pass& p : runner.passes()) widest = std::max(widest, p.rows.size());
  EXPECT_EQ(widest, 2u) << "the pool holds two requests' whole lengths, and the slots four";
  EXPECT_EQ(runner.peak_blocks(), 6);
  EXPECT_TRUE(runner.full_status().ok()) << runner.full_status();
  sched.Shutdown(absl::Seconds(5));
  EXPECT_EQ(runner.blocks_in_use(), 0) << "every ended sequence's blocks go back";
  EXPECT_EQ(sched.Stats().kv_blocks_reserved, 0);
}

TEST_F(SchedulerTest, ARequestOrIdleIterationLongerThanTheWholeKvCacheIsRefusedNamingWhy) {
  FakeStepRunner runner(4, 320, 64, {.blocks = 5, .block_tokens = 4});  // 16 positions
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 4}, &clock_);
  RecordingSink refused, fits;
  const auto r = sched.Submit(Params(1, 15), &refused);  // 2 + 15 tokens: 5 blocks
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "max_tokens: the prompt's 2 tokens and max_tokens 15 need 20 KV-cache positions, and this model's KV "
            "cache holds 16 (its kv_cache_tokens); ask for fewer tokens");
  // Reprofile's idle iterations take blocks too: a prefill of 4 x 8 positions cannot fit 16.
  const absl::Status idle = sched.RunIdleIteration(IterationPhase::kPrefill, 4, 8);
  EXPECT_EQ(idle.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(idle.message(),
            "batch 4 x 8 positions needs 32 KV-cache positions, and the model's KV cache holds 16 (its "
            "kv_cache_tokens)");
  // A mixed pass's decode rows take a block each (4 positions), its prompt its own blocks.
  const absl::Status mixed = sched.RunIdleIteration(IterationPhase::kMixed, 4, 8);
  EXPECT_EQ(mixed.message(),
            "a mixed pass of 3 decode rows and a prompt of 8 positions needs 20 KV-cache positions, and the model's "
            "KV cache holds 16 (its kv_cache_tokens)");
  EXPECT_TRUE(sched.RunIdleIteration(IterationPhase::kPrefill, 2, 8).ok());
  ASSERT_TRUE(sched.Submit(Params(1, 14), &fits).ok());
  fits.done.WaitForNotification();
  EXPECT_TRUE(fits.Result().status.ok());
  EXPECT_EQ(fits.Tokens().size(), 14u);
}

// Note [Identical prompts share their prefill]: four identical prompts that arrive while a pass runs
// are admitted together, and the loop hands the plan's shares to the runner: one pass computes the
// prompt once and the three tails, each row attending to the whole prompt.
TEST_F(SchedulerTest, IdenticalPromptsAdmittedTogetherShareOnePrefillPass) {
  FakeStepRunner runner(5, 320, 64, {.blocks = 17, .block_tokens = 16});
  Scheduler sched(&runner, &tokenizer_, {.max_batch = 5}, &clock_);
  runner.Hold();
  RecordingSink first;
  ASSERT_TRUE(sched.Submit(Params(10, 3), &first).ok());
  runner.AwaitPasses(1);
  GenerationParams same;
  same.prompt = {256};
  for (int32_t t = 1; t < 40; ++t) same.prompt.push_back(t);
  same.max_tokens = 3;
  same.sampling.temperature = 0;
  std::vector<RecordingSink> sinks(4);
  for (RecordingSink& sink : sinks) ASSERT_TRUE(sched.Submit(same, &sink).ok());
  runner.Unhold();
  for (RecordingSink& sink : sinks) sink.done.WaitForNotification();
  first.done.WaitForNotification();
  const std::vector<FakeStepRunner::Pass> passes = runner.passes();
  ASSERT_GE(passes.size(), 2u);
  const FakeStepRunner::Pass& shared = passes[1];  // first's decode row, the prompt and three tails
  ASSERT_EQ(shared.shares.size(), 3u);
  ASSERT_EQ(shared.prompt_rows(), 4);
  for (const FakeStepRunner::Row& row : shared.rows) {
    if (!row.decode) EXPECT_THAT(row.context, ::testing::ElementsAreArray(same.prompt));
  }
  for (RecordingSink& sink : sinks) EXPECT_THAT(sink.Tokens(), ElementsAre(40, 41, 42));
  EXPECT_EQ(sched.Stats().prefill_tokens_total, 2u + 40u + 3 * 8u);
  EXPECT_EQ(runner.peak_blocks(), 1 + 3 + 3) << "the shared blocks once";
  EXPECT_TRUE(runner.full_status().ok());
}

}  // namespace
}  // namespace autouvm::engine
