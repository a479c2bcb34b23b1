// StepPolicy without a thread: the test plays the loop, with a fake runner and a fake clock, and checks
// each pass the policy plans and what its results do (engine/step_policy.h).
#include "engine/step_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "tests/testing/policy_fixture.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::FakeStepRunner;
using autouvm::testing::RecordingSink;
using ::testing::ElementsAre;

class StepPolicyTest : public autouvm::testing::PolicyFixture {};

TEST_F(StepPolicyTest, PromptsAdmittedTogetherShareAPassThenEveryRunningSequenceDecodes) {
  StepPolicy policy({.slots = 4, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 10}, 3, &a));
  admitted.push_back(Seq({256, 20, 21}, 3, &b));
  policy.Admit(std::move(admitted), clock_.Now());
  EXPECT_EQ(policy.free_slots(), 2);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 5);
  const std::vector<StepPlan> plans = RunAll(policy);
  ASSERT_EQ(plans.size(), 3u);  // the prefill gives each its first token, two decode steps the rest
  // Both prompts in one pass, each in its slot.
  EXPECT_EQ(plans[0].phase, IterationPhase::kPrefill);
  ASSERT_EQ(plans[0].rows.size(), 2u);
  EXPECT_EQ(plans[0].rows[0].slot, 0);
  EXPECT_THAT(plans[0].rows[0].tokens, ElementsAre(256, 10));
  EXPECT_EQ(plans[0].rows[1].slot, 1);
  EXPECT_EQ(plans[0].batch(), 2);
  EXPECT_EQ(plans[0].prompt_len(), 3);
  EXPECT_EQ(plans[0].tokens(), 5);
  EXPECT_EQ(plans[1].phase, IterationPhase::kDecode);
  ASSERT_EQ(plans[1].rows.size(), 2u);
  EXPECT_TRUE(plans[1].rows[0].decode);
  EXPECT_THAT(plans[1].rows[0].tokens, ElementsAre(11));  // a's first token, at the position after its prompt
  EXPECT_EQ(plans[1].rows[0].start_pos, 2);
  EXPECT_THAT(plans[1].rows[1].tokens, ElementsAre(22));
  EXPECT_EQ(plans[1].rows[1].start_pos, 3);
  EXPECT_THAT(a.Tokens(), ElementsAre(11, 12, 13));
  EXPECT_THAT(b.Tokens(), ElementsAre(22, 23, 24));
  EXPECT_EQ(policy.counters().decode_steps.load(), 2u);
  EXPECT_EQ(policy.counters().batched_rows.load(), 4u);
  EXPECT_EQ(policy.counters().prefill_passes.load(), 1u);
  EXPECT_EQ(policy.counters().prefill_rows.load(), 2u);
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 5u);
  EXPECT_EQ(policy.counters().pass_tokens[static_cast<int>(IterationPhase::kPrefill)].load(), 5u);
  EXPECT_EQ(policy.counters().pass_tokens[static_cast<int>(IterationPhase::kDecode)].load(), 4u);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
  EXPECT_EQ(policy.free_slots(), 4);
}

TEST_F(StepPolicyTest, PromptsFillAPassInOrderAndALongerOneIsSplitIntoChunks) {
  // 6 prompt tokens a pass.
  StepPolicy policy({.slots = 4, .vocab_size = 320, .max_seq = 64, .bos_id = 256, .prefill_tokens = 6}, &tokenizer_);
  RecordingSink a, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 1, &a));
  admitted.push_back(Seq({256, 2, 3}, 1, &b));
  admitted.push_back(Seq({256, 4}, 1, &c));                  // 1 token left of the budget: a chunk of 1
  admitted.push_back(Seq({256, 5, 6, 7, 8, 9, 10}, 1, &d));  // above the budget: two chunks
  policy.Admit(std::move(admitted), clock_.Now());
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 14);
  const std::optional<StepPlan> first = Pass(policy);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->rows.size(), 3u);
  EXPECT_THAT(first->rows[2].tokens, ElementsAre(256));
  EXPECT_FALSE(first->rows[2].logits) << "an inner chunk gives no token";
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 8);
  const std::vector<StepPlan> rest = RunAll(policy);  // max_tokens 1: each ends with its prompt's token
  ASSERT_EQ(rest.size(), 2u);
  ASSERT_EQ(rest[0].rows.size(), 2u);
  EXPECT_EQ(rest[0].rows[0].slot, 2);
  EXPECT_THAT(rest[0].rows[0].tokens, ElementsAre(4));
  EXPECT_EQ(rest[0].rows[0].start_pos, 1);
  EXPECT_THAT(rest[0].rows[1].tokens, ElementsAre(256, 5, 6, 7, 8));
  EXPECT_FALSE(rest[0].rows[1].logits);
  ASSERT_EQ(rest[1].rows.size(), 1u);
  EXPECT_THAT(rest[1].rows[0].tokens, ElementsAre(9, 10));
  EXPECT_EQ(rest[1].rows[0].start_pos, 5);
  EXPECT_THAT(a.Tokens(), ElementsAre(2));
  EXPECT_THAT(b.Tokens(), ElementsAre(4));
  EXPECT_THAT(c.Tokens(), ElementsAre(5));
  EXPECT_THAT(d.Tokens(), ElementsAre(11));
  EXPECT_EQ(policy.counters().prefill_passes.load(), 3u);
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 14u);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
  EXPECT_EQ(policy.free_slots(), 4);
}

TEST_F(StepPolicyTest, ANewPromptRidesInTheRunningSequencesPassAndEachGetsItsOwnLogits) {
  StepPolicy policy({.slots = 2, .vocab_size = 320, .max_seq = 64, .bos_id = 256, .prefill_tokens = 4}, &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> first;
  first.push_back(Seq({256, 10}, 5, &a));
  policy.Admit(std::move(first), clock_.Now());
  ASSERT_TRUE(Pass(policy).has_value());  // a's prefill: its first token
  std::vector<std::unique_ptr<Sequence>> second;
  second.push_back(Seq({256, 40, 41, 42, 43, 44}, 2, &b));  // 6 tokens: chunks of 4 and 2
  policy.Admit(std::move(second), clock_.Now());
  std::vector<StepPlan> plans = RunAll(policy);
  ASSERT_GE(plans.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(plans[i].phase, IterationPhase::kMixed);
    ASSERT_EQ(plans[i].rows.size(), 2u);
    EXPECT_TRUE(plans[i].rows[0].decode);   // a's next token first
    EXPECT_FALSE(plans[i].rows[1].decode);  // then b's chunk
  }
  EXPECT_THAT(plans[0].rows[1].tokens, ElementsAre(256, 40, 41, 42));
  EXPECT_THAT(plans[1].rows[1].tokens, ElementsAre(43, 44));
  EXPECT_EQ(plans[1].rows[1].start_pos, 4);
  // The fake model predicts each row's last token + 1: a mixed-up logits row would show here.
  EXPECT_THAT(a.Tokens(), ElementsAre(11, 12, 13, 14, 15));
  EXPECT_THAT(b.Tokens(), ElementsAre(45, 46));
  EXPECT_EQ(policy.counters().mixed_passes.load(), 2u);
  EXPECT_EQ(policy.counters().pass_tokens[static_cast<int>(IterationPhase::kMixed)].load(), 1u + 4u + 1u + 2u);
}

TEST_F(StepPolicyTest, ARequestThatFinishesFreesItsSlotForTheNextAndAStopTokenIsNotEmitted) {
  StepPolicy policy({.slots = 1, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> first;
  first.push_back(Seq({256, 40}, 10, &a));
  first.back()->params.stop_token_ids = {43};
  policy.Admit(std::move(first), clock_.Now());
  while (a.finishes() == 0) ASSERT_TRUE(Pass(policy).has_value());
  EXPECT_THAT(a.Tokens(), ElementsAre(41, 42));  // 43 stops it and is not streamed
  EXPECT_EQ(a.Result().reason, FinishReason::kStop);
  EXPECT_EQ(policy.free_slots(), 1);
  std::vector<std::unique_ptr<Sequence>> second;
  second.push_back(Seq({256, 50}, 1, &b));
  policy.Admit(std::move(second), clock_.Now());
  const std::vector<StepPlan> plans = RunAll(policy);
  ASSERT_FALSE(plans.empty());
  ASSERT_FALSE(plans[0].rows.empty());
  EXPECT_EQ(plans[0].rows[0].slot, 0);  // the slot the first request gave back
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
  ASSERT_TRUE(Pass(policy).has_value());
  EXPECT_EQ(late.finishes() + gone.finishes(), 0);
  clock_.Advance(absl::Seconds(2));
  handle->Cancel();
  const std::vector<StepPlan> plans = RunAll(policy);
  EXPECT_TRUE(plans.empty()) << "a pass was planned for sequences that had stopped";
  EXPECT_EQ(late.Result().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gone.Result().status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gone.Result().reason, FinishReason::kCancelled);
  EXPECT_EQ(policy.free_slots(), 2);
  EXPECT_EQ(policy.running(), 0);
}

// The fake model's logits are one-hot: 1 at the next token, 0 at the 319 others.
const double kLogNormalizer = std::log(std::exp(1.0) + 319);

TEST_F(StepPolicyTest, PresencePenaltyCountsTheGeneratedTokensNotThePrompt) {
  StepPolicy policy({.slots = 1, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink sink;
  std::vector<std::unique_ptr<Sequence>> admitted;
  // Negative: a generated token's 0 + 2 beats the predicted token's 1, a prompt token's stays 0.
  admitted.push_back(Seq({256, 10}, 3, &sink, [](GenerationParams& p) { p.sampling.presence_penalty = -2.0f; }));
  policy.Admit(std::move(admitted), clock_.Now());
  RunAll(policy);
  // 10 if the prompt counted; 11, 12, 13 if the generated tokens did not.
  EXPECT_THAT(sink.Tokens(), ElementsAre(11, 11, 11));
}

TEST_F(StepPolicyTest, LogprobsAreTheModelsBeforePenaltiesAndTemperature) {
  StepPolicy policy({.slots = 4, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink plain, penalized, hot, off;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 10}, 3, &plain, [](GenerationParams& p) { p.logprobs = 2; }));
  admitted.push_back(Seq({256, 10}, 3, &penalized, [](GenerationParams& p) {
    p.logprobs = 1;
    p.sampling.presence_penalty = -2.0f;  // 11, 11, 11 (the test above)
  }));
  admitted.push_back(Seq({256, 10}, 8, &hot, [](GenerationParams& p) {
    p.logprobs = 1;
    p.sampling.temperature = 100.0f;  // nearly uniform: rarely the model's choice
    p.sampling.seed = 3;
  }));
  admitted.push_back(Seq({256, 10}, 1, &off));
  policy.Admit(std::move(admitted), clock_.Now());
  RunAll(policy);
  const double best = 1 - kLogNormalizer, other = -kLogNormalizer;

  const std::vector<GeneratedToken> p = plain.Generated();
  ASSERT_EQ(p.size(), 3u);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].token, 11 + static_cast<int32_t>(i));
    EXPECT_EQ(p[i].text, std::string(1, static_cast<char>(11 + i)));
    EXPECT_NEAR(p[i].logprob, best, 1e-5);
    ASSERT_EQ(p[i].top.size(), 2u);
    EXPECT_EQ(p[i].top[0].token, p[i].token);
    EXPECT_NEAR(p[i].top[0].logprob, best, 1e-5);
    EXPECT_EQ(p[i].top[1].token, 0) << "ties: the lowest id";
    EXPECT_NEAR(p[i].top[1].logprob, other, 1e-5);
  }

  const std::vector<GeneratedToken> q = penalized.Generated();
  ASSERT_EQ(q.size(), 3u);
  EXPECT_NEAR(q[0].logprob, best, 1e-5);
  for (size_t i = 1; i < q.size(); ++i) {
    EXPECT_EQ(q[i].token, 11);
    EXPECT_NEAR(q[i].logprob, other, 1e-5) << "the penalty does not change the reported logprob";
    ASSERT_EQ(q[i].top.size(), 1u);
    EXPECT_EQ(q[i].top[0].token, 12);
    EXPECT_NEAR(q[i].top[0].logprob, best, 1e-5);
  }

  const std::vector<GeneratedToken> h = hot.Generated();
  ASSERT_EQ(h.size(), 8u);
  int32_t last = 10, not_the_models = 0;
  for (const GeneratedToken& g : h) {
    const int32_t predicted = (last + 1) % 320;
    not_the_models += g.token != predicted;
    EXPECT_NEAR(g.logprob, g.token == predicted ? best : other, 1e-5);
    ASSERT_EQ(g.top.size(), 1u);
    EXPECT_EQ(g.top[0].token, predicted);
    EXPECT_NEAR(g.top[0].logprob, best, 1e-5);
    last = g.token;
  }
  EXPECT_GT(not_the_models, 0) << "the temperature never moved the sampler off the model's choice";

  const std::vector<GeneratedToken> o = off.Generated();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].logprob, 0.0f);
  EXPECT_TRUE(o[0].top.empty());
}

TEST_F(StepPolicyTest, IdleIterationsWaitForFreeSlotsAndTouchNoRequest) {
  StepPolicy policy({.slots = 2, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink a;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 3, &a));
  policy.Admit(std::move(admitted), clock_.Now());
  policy.QueueIdle({IterationPhase::kDecode, 2, 0});  // needs both slots: waits for a to finish
  std::vector<std::pair<StepPlan::Kind, IterationPhase>> passes;
  for (const StepPlan& p : RunAll(policy)) passes.emplace_back(p.kind, p.phase);
  using K = StepPlan::Kind;
  using P = IterationPhase;
  EXPECT_THAT(passes, ElementsAre(std::pair(K::kServe, P::kPrefill), std::pair(K::kServe, P::kDecode),
                                  std::pair(K::kServe, P::kDecode), std::pair(K::kIdle, P::kDecode)));
  EXPECT_THAT(a.Tokens(), ElementsAre(2, 3, 4));
}

TEST_F(StepPolicyTest, FinishAllEndsRunningAndQueuedRequestsWithTheStatus) {
  StepPolicy policy({.slots = 1, .vocab_size = 320, .max_seq = 64, .bos_id = 256}, &tokenizer_);
  RecordingSink running, queued;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq({256, 1}, 50, &running));
  policy.Admit(std::move(admitted), clock_.Now());
  ASSERT_TRUE(Pass(policy).has_value());
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
