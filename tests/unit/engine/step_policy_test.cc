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
      result.status = runner_.Prefill(plan.PrefillRows(), &logits_);
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
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 5);
  const std::vector<StepPlan> plans = Round(policy);
  ASSERT_EQ(plans.size(), 2u);
  // Both prompts in one pass, each in its slot, padded to the longer.
  ASSERT_EQ(plans[0].kind, StepPlan::Kind::kPrefill);
  ASSERT_EQ(plans[0].prompts.size(), 2u);
  EXPECT_EQ(plans[0].prompts[0].slot, 0);
  EXPECT_THAT(plans[0].prompts[0].tokens, ElementsAre(256, 10));
  EXPECT_EQ(plans[0].prompts[1].slot, 1);
  EXPECT_EQ(plans[0].batch(), 2);
  EXPECT_EQ(plans[0].prompt_len(), 3);
  EXPECT_EQ(plans[0].tokens(), 6);
  ASSERT_EQ(plans[1].kind, StepPlan::Kind::kDecode);
  ASSERT_EQ(plans[1].rows.size(), 2u);
  EXPECT_EQ(plans[1].rows[0].token, 11);  // a's first token, written at the position after its prompt
  EXPECT_EQ(plans[1].rows[0].pos, 2);
  EXPECT_EQ(plans[1].rows[1].token, 22);
  EXPECT_EQ(plans[1].rows[1].pos, 3);
  EXPECT_THAT(a.Tokens(), ElementsAre(11, 12));
  EXPECT_THAT(b.Tokens(), ElementsAre(22, 23));
  EXPECT_EQ(policy.counters().decode_steps.load(), 1u);
  EXPECT_EQ(policy.counters().batched_rows.load(), 2u);
  EXPECT_EQ(policy.counters().prefill_passes.load(), 1u);
  EXPECT_EQ(policy.counters().prefill_rows.load(), 2u);
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 6u);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
}

TEST_F(StepPolicyTest, APrefillPassTakesPromptsInOrderWhileItsTokenBudgetHoldsThem) {
  // 6 tokens a pass: rows x the longest prompt.
  StepPolicy policy({.slots = 4, .vocab_size = 320, .max_seq = 64, .bos_id = 256, .prefill_tokens = 6}, &tokenizer_);
  RecordingSink a, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 1, &a));                  // 1 x 2
  admitted.push_back(Seq({256, 2, 3}, 1, &b));               // 2 x 3 = 6: fits
  admitted.push_back(Seq({256, 4}, 1, &c));                  // 3 x 3 = 9: the next pass
  admitted.push_back(Seq({256, 5, 6, 7, 8, 9, 10}, 1, &d));  // 2 x 7: a pass of its own, above the budget
  policy.Admit(std::move(admitted), clock_.Now());
  const std::vector<StepPlan> plans = Round(policy);
  ASSERT_EQ(plans.size(), 3u);  // max_tokens 1: each request ends with its prefill's token
  std::vector<std::vector<int32_t>> slots;
  for (const StepPlan& p : plans) {
    ASSERT_EQ(p.kind, StepPlan::Kind::kPrefill);
    slots.emplace_back();
    for (const StepPlan::Prompt& q : p.prompts) slots.back().push_back(q.slot);
  }
  EXPECT_THAT(slots, ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(a.Tokens(), ElementsAre(2));
  EXPECT_THAT(b.Tokens(), ElementsAre(4));
  EXPECT_THAT(c.Tokens(), ElementsAre(5));
  EXPECT_THAT(d.Tokens(), ElementsAre(11));
  EXPECT_EQ(policy.counters().prefill_passes.load(), 3u);
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 6u + 2u + 7u);
  EXPECT_EQ(policy.free_slots(), 4);
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
  ASSERT_FALSE(plans[0].prompts.empty());
  EXPECT_EQ(plans[0].prompts[0].slot, 0);  // the slot the first request gave back
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
