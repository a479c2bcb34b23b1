// StepPolicy without a thread: the test plays the loop, with a fake runner and a fake clock, and checks
// each pass the policy plans and what its results do (engine/step_policy.h).
#include "engine/step_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_step_runner.h"
#include "tests/testing/recording_sink.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::FakeClock;
using autouvm::testing::FakeStepRunner;
using autouvm::testing::RecordingSink;
using ::testing::ElementsAre;

class StepPolicyTest : public ::testing::Test {
 protected:
  std::unique_ptr<Sequence> Seq(std::vector<int32_t> prompt, int32_t max_tokens, RecordingSink* sink) {
    GenerationParams p;
    p.prompt = std::move(prompt);
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    return std::make_unique<Sequence>(std::move(p), sink, &tokenizer_, clock_.Now());
  }
  // Runs one pass of `plan` on the fake runner and hands its result back, as the loop does.
  void RunPass(StepPolicy& policy, const StepPlan& plan) {
    StepResult result{.logits = &logits_};
    if (plan.phase == IterationPhase::kPrefill) {
      auto l = runner_.Prefill(plan.slot, plan.tokens, 0);
      result.status = l.status();
      logits_ = *l;
    } else {
      result.status = runner_.Decode(plan.rows, &logits_);
    }
    policy.Update(plan, result, clock_.Now());
  }
  std::vector<StepPlan> Round(StepPolicy& policy) {
    std::vector<StepPlan> plans;
    while (auto plan = policy.Schedule(clock_.Now())) {
      plans.push_back(*plan);
      RunPass(policy, *plan);
    }
    return plans;
  }

  FakeClock clock_;
  FakeStepRunner runner_{4};
  tokenizer::ByteTokenizer tokenizer_{320, 256, 257};
  std::vector<float> logits_;
};

TEST_F(StepPolicyTest, ARoundPrefillsWhatWasAdmittedThenDecodesEveryRunningSequence) {
  StepPolicy policy({.slots = 4, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 10}, 3, &a));
  admitted.push_back(Seq({256, 20, 21}, 3, &b));
  policy.Admit(std::move(admitted), clock_.Now());
  EXPECT_EQ(policy.free_slots(), 2);
  const std::vector<StepPlan> plans = Round(policy);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].kind, StepPlan::Kind::kPrefill);
  EXPECT_EQ(plans[0].slot, 0);
  EXPECT_EQ(plans[1].kind, StepPlan::Kind::kPrefill);
  EXPECT_EQ(plans[1].slot, 1);
  ASSERT_EQ(plans[2].kind, StepPlan::Kind::kDecode);
  ASSERT_EQ(plans[2].rows.size(), 2u);
  EXPECT_EQ(plans[2].rows[0].token, 11);  // a's first token, written at the position after its prompt
  EXPECT_EQ(plans[2].rows[0].pos, 2);
  EXPECT_EQ(plans[2].rows[1].token, 22);
  EXPECT_THAT(a.Tokens(), ElementsAre(11, 12));
  EXPECT_THAT(b.Tokens(), ElementsAre(22, 23));
  EXPECT_EQ(policy.counters().decode_steps.load(), 1u);
  EXPECT_EQ(policy.counters().batched_rows.load(), 2u);
}

TEST_F(StepPolicyTest, ARequestThatFinishesFreesItsSlotForTheNextAndAStopTokenIsNotEmitted) {
  StepPolicy policy({.slots = 1, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> first;
  first.push_back(Seq({256, 40}, 10, &a));
  first.back()->params.stop_token_ids = {43};
  policy.Admit(std::move(first), clock_.Now());
  while (a.finishes() == 0) Round(policy);
  EXPECT_THAT(a.Tokens(), ElementsAre(41, 42));  // 43 stops it and is not streamed
  EXPECT_EQ(a.Result().reason, FinishReason::kStop);
  EXPECT_EQ(policy.free_slots(), 1);
  std::vector<std::unique_ptr<Sequence>> second;
  second.push_back(Seq({256, 50}, 1, &b));
  policy.Admit(std::move(second), clock_.Now());
  const std::vector<StepPlan> plans = Round(policy);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans[0].slot, 0);  // the slot the first request gave back
  EXPECT_EQ(b.Result().reason, FinishReason::kLength);
  EXPECT_THAT(b.Tokens(), ElementsAre(51));
}

TEST_F(StepPolicyTest, APastDeadlineAndACancellationStopASequenceBeforeItsNextPass) {
  StepPolicy policy({.slots = 2, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink late, gone;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 50, &late));
  admitted.back()->params.deadline = clock_.Now() + absl::Seconds(1);
  admitted.push_back(Seq({256, 2}, 50, &gone));
  RequestHandle* handle = admitted.back()->handle.get();
  policy.Admit(std::move(admitted), clock_.Now());
  Round(policy);
  EXPECT_EQ(late.finishes() + gone.finishes(), 0);
  clock_.Advance(absl::Seconds(2));
  handle->Cancel();
  const std::vector<StepPlan> plans = Round(policy);
  EXPECT_TRUE(plans.empty()) << "a pass was planned for sequences that had stopped";
  EXPECT_EQ(late.Result().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gone.Result().status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gone.Result().reason, FinishReason::kCancelled);
  EXPECT_EQ(policy.free_slots(), 2);
  EXPECT_EQ(policy.running(), 0);
}

TEST_F(StepPolicyTest, IdleIterationsWaitForFreeSlotsAndTouchNoRequest) {
  StepPolicy policy({.slots = 2, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 3, &a));
  policy.Admit(std::move(admitted), clock_.Now());
  policy.QueueIdle({IterationPhase::kDecode, 2, 0});  // needs both slots: waits for a to finish
  std::vector<StepPlan::Kind> kinds;
  while (a.finishes() == 0 || policy.idle_fits()) {
    for (const StepPlan& p : Round(policy)) kinds.push_back(p.kind);
  }
  EXPECT_THAT(kinds, ElementsAre(StepPlan::Kind::kPrefill, StepPlan::Kind::kDecode, StepPlan::Kind::kDecode,
                                 StepPlan::Kind::kIdle));
  EXPECT_THAT(a.Tokens(), ElementsAre(2, 3, 4));
}

TEST_F(StepPolicyTest, FinishAllEndsRunningAndQueuedRequestsWithTheStatus) {
  StepPolicy policy({.slots = 1, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink running, queued;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 50, &running));
  policy.Admit(std::move(admitted), clock_.Now());
  Round(policy);
  std::vector<std::unique_ptr<Sequence>> rest;
  rest.push_back(Seq({256, 2}, 50, &queued));
  policy.FinishAll(absl::UnavailableError("the server is shutting down"), std::move(rest), clock_.Now());
  EXPECT_EQ(running.Result().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queued.Result().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(running.finishes() + queued.finishes(), 2);
  EXPECT_EQ(policy.free_slots(), 1);
}

}  // namespace
}  // namespace autouvm::engine
