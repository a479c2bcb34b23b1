// StepPolicy with identical prompts (Note [Identical prompts share their prefill], engine/step_policy.cc):
// the test plays the loop over a fake runner whose pool holds tokens, so that a row that attends to the
// wrong blocks shows as a wrong context.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "engine/step_policy.h"
#include "tests/testing/policy_fixture.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::FakeStepRunner;
using autouvm::testing::RecordingSink;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr int64_t kBlock = 16;

// bos and `n - 1` tokens from `first` on.
std::vector<int32_t> Prompt(int n, int32_t first = 1) {
  std::vector<int32_t> p = {256};
  for (int i = 1; i < n; ++i) p.push_back(first + i - 1);
  return p;
}

// `prompt` and then `generated`: what a row of that sequence attends to.
std::vector<int32_t> Then(std::vector<int32_t> prompt, const std::vector<int32_t>& generated) {
  prompt.insert(prompt.end(), generated.begin(), generated.end());
  return prompt;
}

class IdenticalPromptsTest : public autouvm::testing::PolicyFixture {
 protected:
  IdenticalPromptsTest() : PolicyFixture(4, 320, 64, {.blocks = 17, .block_tokens = kBlock}) {}

  PolicyOptions Options(int64_t prefill_tokens = 2048) const {
    return {.slots = 4,
            .vocab_size = 320,
            .max_seq = 64,
            .bos_id = 256,
            .prefill_tokens = prefill_tokens,
            .kv_block_tokens = kBlock,
            .kv_blocks = 16};
  }
  // Passes until every sink has finished (a pass may find nothing to do while a lead changes hands).
  std::vector<StepPlan> RunUntilFinished(StepPolicy& policy, const std::vector<RecordingSink*>& sinks) {
    std::vector<StepPlan> plans;
    auto finished = [&sinks] {
      for (RecordingSink* s : sinks) {
        if (s->finishes() == 0) return false;
      }
      return true;
    };
    for (int i = 0; i < 100 && !finished(); ++i) {
      if (auto plan = Pass(policy)) plans.push_back(*plan);
    }
    EXPECT_TRUE(finished());
    return plans;
  }
  // The fake runner's rows of `pass` for `slot`.
  FakeStepRunner::Row RowOf(size_t pass, int32_t slot) const {
    const std::vector<FakeStepRunner::Pass> passes = runner_.passes();
    for (const FakeStepRunner::Row& r : passes.at(pass).rows) {
      if (r.slot == slot) return r;
    }
    ADD_FAILURE() << "pass " << pass << " has no row of slot " << slot;
    return {};
  }
};

TEST_F(IdenticalPromptsTest, FourIdenticalPromptsComputeTheirSharedBlocksOnceAndAllGetAFirstTokenInOnePass) {
  StepPolicy policy(Options(), &tokenizer_);
  const std::vector<int32_t> prompt = Prompt(40);  // 2 whole blocks shared, a tail of 8 each
  RecordingSink a, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  for (RecordingSink* s : {&a, &b, &c, &d}) admitted.push_back(Seq(prompt, 3, s));
  policy.Admit(std::move(admitted), clock_.Now());
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 40 + 3 * 8);
  // 43 positions each: 3 blocks, of which the 2 shared ones are reserved once.
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 2 + 4 * 1);
  EXPECT_EQ(policy.free_kv_blocks(), 10);

  const std::optional<StepPlan> first = Pass(policy);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->phase, IterationPhase::kPrefill);
  ASSERT_EQ(first->rows.size(), 4u);
  EXPECT_EQ(first->rows[0].slot, 0);
  EXPECT_THAT(first->rows[0].tokens, ElementsAreArray(prompt));
  ASSERT_EQ(first->shares.size(), 3u);
  for (int i = 1; i < 4; ++i) {
    const StepPlan::Row& row = first->rows[static_cast<size_t>(i)];
    EXPECT_EQ(row.slot, i);
    EXPECT_EQ(row.start_pos, 32);
    EXPECT_THAT(row.tokens, ElementsAreArray(prompt.begin() + 32, prompt.end()));
    EXPECT_TRUE(row.logits);
    const KvShare& share = first->shares[static_cast<size_t>(i - 1)];
    EXPECT_EQ(share.src_slot, 0);
    EXPECT_EQ(share.dst_slot, i);
    EXPECT_EQ(share.tokens, 32);
  }
  EXPECT_EQ(first->prompt_tokens(), 40 + 3 * 8);
  for (RecordingSink* s : {&a, &b, &c, &d}) EXPECT_THAT(s->Tokens(), ElementsAre(40)) << "its first token";
  // Each row attends to the whole prompt: the siblings' first 32 positions through the leader's blocks,
  // written in the same pass.
  for (int32_t slot = 0; slot < 4; ++slot) EXPECT_THAT(RowOf(0, slot).context, ElementsAreArray(prompt));
  EXPECT_EQ(runner_.blocks_in_use(), 3 + 3 * 1);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);

  const std::vector<StepPlan> rest = RunUntilFinished(policy, {&a, &b, &c, &d});
  ASSERT_EQ(rest.size(), 2u);
  for (int32_t slot = 0; slot < 4; ++slot) {
    EXPECT_THAT(RowOf(2, slot).context, ElementsAreArray(Then(prompt, {40, 41})));
  }
  for (RecordingSink* s : {&a, &b, &c, &d}) {
    EXPECT_THAT(s->Tokens(), ElementsAre(40, 41, 42));
    EXPECT_EQ(s->Result().prompt_tokens, 40);
  }
  EXPECT_EQ(policy.counters().prefill_passes.load(), 1u);
  EXPECT_EQ(policy.counters().prefill_rows.load(), 4u);
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 64u);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.peak_blocks(), 6) << "12 without sharing";
  EXPECT_EQ(runner_.blocks_in_use(), 0);
  EXPECT_TRUE(runner_.full_status().ok());
}

// Each sibling samples with its own sampler from its own logits: with sharing, each seed's tokens are
// what they are without it.
TEST_F(IdenticalPromptsTest, EachSeedSamplesItsOwnTokensAsWithoutSharing) {
  auto run = [this](PolicyOptions options) {
    StepPolicy policy(options, &tokenizer_);
    std::vector<RecordingSink> sinks(4);
    std::vector<std::unique_ptr<Sequence>> admitted;
    for (int i = 0; i < 4; ++i) {
      admitted.push_back(Seq(Prompt(40), 6, &sinks[static_cast<size_t>(i)], [i](GenerationParams& p) {
        p.sampling.temperature = 100.0f;  // nearly uniform
        p.sampling.seed = static_cast<uint64_t>(i + 1);
      }));
    }
    policy.Admit(std::move(admitted), clock_.Now());
    RunUntilFinished(policy, {&sinks[0], &sinks[1], &sinks[2], &sinks[3]});
    std::vector<std::vector<int32_t>> tokens;
    for (RecordingSink& s : sinks) tokens.push_back(s.Tokens());
    return tokens;
  };
  const std::vector<std::vector<int32_t>> shared = run(Options());
  ASSERT_EQ(runner_.passes().at(0).shares.size(), 3u);
  PolicyOptions alone = Options();
  alone.kv_block_tokens = 0;  // no blocks counted: nothing shared
  const size_t passes = runner_.passes().size();
  const std::vector<std::vector<int32_t>> own = run(alone);
  EXPECT_TRUE(runner_.passes().at(passes).shares.empty());
  EXPECT_EQ(shared, own);
  EXPECT_NE(shared[0], shared[1]);
  EXPECT_NE(shared[1], shared[2]);
  for (const auto& t : shared) EXPECT_EQ(t.size(), 6u);
}

// A leader cancelled before its last chunk hands the lead to its first waiting sibling, which computes
// the prompt itself; the others still share, now its blocks.
TEST_F(IdenticalPromptsTest, ALeaderCancelledMidPrefillHandsTheLeadOnAndItsSiblingsComplete) {
  StepPolicy policy(Options(/*prefill_tokens=*/32), &tokenizer_);  // 40: a chunk of 32, then 8 + 3 tails
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink lead, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  for (RecordingSink* s : {&lead, &b, &c, &d}) admitted.push_back(Seq(prompt, 3, s));
  RequestHandle* handle = admitted[0]->handle.get();
  policy.Admit(std::move(admitted), clock_.Now());
  const std::optional<StepPlan> first = Pass(policy);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->rows.size(), 1u) << "the siblings wait for the leader's last chunk";
  EXPECT_EQ(first->rows[0].tokens.size(), 32u);
  handle->Cancel();
  const std::vector<StepPlan> rest = RunUntilFinished(policy, {&lead, &b, &c, &d});
  EXPECT_EQ(lead.Result().status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(lead.Tokens().empty());
  // b leads now: its whole prompt in a chunk of 32, then its last 8 with c's and d's tails, sharing its blocks.
  ASSERT_GE(rest.size(), 2u);
  ASSERT_EQ(rest[0].rows.size(), 1u);
  EXPECT_EQ(rest[0].rows[0].slot, 1);
  EXPECT_EQ(rest[0].rows[0].start_pos, 0);
  EXPECT_EQ(rest[0].rows[0].tokens.size(), 32u);
  ASSERT_EQ(rest[1].rows.size(), 3u);
  EXPECT_EQ(rest[1].prompt_tokens(), 8 + 2 * 8);
  ASSERT_EQ(rest[1].shares.size(), 2u);
  for (const KvShare& share : rest[1].shares) {
    EXPECT_EQ(share.src_slot, 1);
    EXPECT_EQ(share.tokens, 32);
  }
  for (int32_t slot = 1; slot < 4; ++slot) EXPECT_THAT(RowOf(2, slot).context, ElementsAreArray(prompt));
  for (RecordingSink* s : {&b, &c, &d}) {
    EXPECT_TRUE(s->Result().status.ok()) << s->Result().status;
    EXPECT_THAT(s->Tokens(), ElementsAre(40, 41, 42));
  }
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 32u + 32u + 8u + 16u);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
  EXPECT_TRUE(runner_.full_status().ok());
}

TEST_F(IdenticalPromptsTest, ASiblingCancelledBeforeTheShareIsDroppedAndTheOthersShare) {
  StepPolicy policy(Options(/*prefill_tokens=*/32), &tokenizer_);
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink a, gone, c;
  std::vector<std::unique_ptr<Sequence>> admitted;
  for (RecordingSink* s : {&a, &gone, &c}) admitted.push_back(Seq(prompt, 2, s));
  RequestHandle* handle = admitted[1]->handle.get();
  policy.Admit(std::move(admitted), clock_.Now());
  ASSERT_TRUE(Pass(policy).has_value());  // a's first chunk
  handle->Cancel();
  const std::optional<StepPlan> last = Pass(policy);
  ASSERT_TRUE(last.has_value());
  ASSERT_EQ(last->rows.size(), 2u);
  ASSERT_EQ(last->shares.size(), 1u);
  EXPECT_EQ(last->shares[0].dst_slot, 2);
  RunUntilFinished(policy, {&a, &gone, &c});
  EXPECT_EQ(gone.Result().status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(gone.Tokens().empty());
  EXPECT_THAT(a.Tokens(), ElementsAre(40, 41));
  EXPECT_THAT(c.Tokens(), ElementsAre(40, 41));
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
}

// The leader ends with its first token; its siblings decode on over the blocks it computed, which no
// later sequence is given while they hold them.
TEST_F(IdenticalPromptsTest, TheSharedBlocksOutliveALeaderThatEndsFirst) {
  StepPolicy policy(Options(), &tokenizer_);
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink lead, b, c, other;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq(prompt, 1, &lead));
  admitted.push_back(Seq(prompt, 4, &b));
  admitted.push_back(Seq(prompt, 4, &c));
  policy.Admit(std::move(admitted), clock_.Now());
  ASSERT_TRUE(Pass(policy).has_value());
  ASSERT_EQ(lead.finishes(), 1);
  EXPECT_EQ(runner_.blocks_in_use(), 2 + 2 * 1) << "the leader's own block is back, the shared two are not";
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 2 + 2 * 1);
  // Another prompt takes the lowest free blocks: never the shared ones.
  std::vector<std::unique_ptr<Sequence>> later;
  later.push_back(Seq(Prompt(40, 100), 2, &other));
  policy.Admit(std::move(later), clock_.Now());
  RunUntilFinished(policy, {&b, &c, &other});
  const size_t last = runner_.passes().size() - 1;
  EXPECT_THAT(RowOf(last, 1).context, ElementsAreArray(Then(prompt, {40, 41, 42})));
  EXPECT_THAT(RowOf(last, 2).context, ElementsAreArray(Then(prompt, {40, 41, 42})));
  EXPECT_THAT(b.Tokens(), ElementsAre(40, 41, 42, 43));
  EXPECT_THAT(c.Tokens(), ElementsAre(40, 41, 42, 43));
  EXPECT_THAT(other.Tokens(), ElementsAre(139, 140));
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
}

TEST_F(IdenticalPromptsTest, DifferentPromptsAndPromptsWithinABlockShareNothing) {
  StepPolicy policy(Options(), &tokenizer_);
  RecordingSink a, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq(Prompt(40, 1), 1, &a));
  admitted.push_back(Seq(Prompt(40, 2), 1, &b));  // differs from its second token on
  admitted.push_back(Seq(Prompt(16, 1), 1, &c));  // one block: its last token is the block's
  admitted.push_back(Seq(Prompt(16, 1), 1, &d));
  policy.Admit(std::move(admitted), clock_.Now());
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 3 + 3 + 2 + 2);
  const std::optional<StepPlan> plan = Pass(policy);
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->shares.empty());
  EXPECT_EQ(plan->prompt_tokens(), 40 + 40 + 16 + 16);
  for (const StepPlan::Row& row : plan->rows) EXPECT_EQ(row.start_pos, 0);
  EXPECT_THAT(a.Tokens(), ElementsAre(40));
  EXPECT_THAT(b.Tokens(), ElementsAre(41));
  EXPECT_THAT(d.Tokens(), ElementsAre(16));
}

TEST_F(IdenticalPromptsTest, APromptOneTokenPastABlockSharesTheBlockAndComputesItsLastToken) {
  StepPolicy policy(Options(), &tokenizer_);
  RecordingSink a, b;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq(Prompt(17), 2, &a));
  admitted.push_back(Seq(Prompt(17), 2, &b));
  policy.Admit(std::move(admitted), clock_.Now());
  const std::optional<StepPlan> plan = Pass(policy);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->shares.size(), 1u);
  EXPECT_EQ(plan->shares[0].tokens, 16);
  EXPECT_EQ(plan->prompt_tokens(), 17 + 1);
  RunUntilFinished(policy, {&a, &b});
  EXPECT_THAT(a.Tokens(), ElementsAre(17, 18));
  EXPECT_THAT(b.Tokens(), ElementsAre(17, 18));
}

// The tails count toward prefill_tokens: those that do not fit the pass of the leader's last chunk
// share its blocks in the next pass.
TEST_F(IdenticalPromptsTest, TailsPastTheBudgetShareTheLeadersBlocksInTheNextPass) {
  StepPolicy policy(Options(/*prefill_tokens=*/56), &tokenizer_);  // 40 and two tails of 8
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink a, b, c, d;
  std::vector<std::unique_ptr<Sequence>> admitted;
  for (RecordingSink* s : {&a, &b, &c, &d}) admitted.push_back(Seq(prompt, 2, s));
  policy.Admit(std::move(admitted), clock_.Now());
  const std::vector<StepPlan> plans = RunUntilFinished(policy, {&a, &b, &c, &d});
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].prompt_tokens(), 40 + 2 * 8);
  EXPECT_EQ(plans[0].shares.size(), 2u);
  EXPECT_EQ(plans[1].phase, IterationPhase::kMixed);
  EXPECT_EQ(plans[1].decode_rows(), 3);
  EXPECT_EQ(plans[1].prompt_tokens(), 8);
  ASSERT_EQ(plans[1].shares.size(), 1u);
  EXPECT_EQ(plans[1].shares[0].src_slot, 0);
  EXPECT_EQ(plans[1].shares[0].dst_slot, 3);
  EXPECT_THAT(RowOf(1, 3).context, ElementsAreArray(prompt));
  for (RecordingSink* s : {&a, &b, &c, &d}) EXPECT_THAT(s->Tokens(), ElementsAre(40, 41));
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 40u + 3 * 8u);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
}

// The n requests of one HTTP call are submitted one by one: an idle model may admit the first alone.
// Those admitted after its prefill share its blocks in their first pass.
TEST_F(IdenticalPromptsTest, PromptsAdmittedAfterTheFirstsPrefillShareItsBlocks) {
  StepPolicy policy(Options(), &tokenizer_);
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink a, b, c;
  std::vector<std::unique_ptr<Sequence>> first;
  first.push_back(Seq(prompt, 3, &a));
  policy.Admit(std::move(first), clock_.Now());
  ASSERT_TRUE(Pass(policy).has_value());
  std::vector<std::unique_ptr<Sequence>> later;
  later.push_back(Seq(prompt, 3, &b));
  later.push_back(Seq(prompt, 3, &c));
  policy.Admit(std::move(later), clock_.Now());
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 2 * 8);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 2 + 3 * 1);
  const std::optional<StepPlan> next = Pass(policy);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->prompt_tokens(), 2 * 8);
  ASSERT_EQ(next->shares.size(), 2u);
  for (const KvShare& share : next->shares) {
    EXPECT_EQ(share.src_slot, 0);
    EXPECT_EQ(share.tokens, 32);
  }
  EXPECT_THAT(RowOf(1, 0).context, ElementsAreArray(Then(prompt, {40})));
  EXPECT_THAT(RowOf(1, 1).context, ElementsAreArray(prompt));
  EXPECT_THAT(RowOf(1, 2).context, ElementsAreArray(prompt));
  RunUntilFinished(policy, {&a, &b, &c});
  for (RecordingSink* s : {&a, &b, &c}) EXPECT_THAT(s->Tokens(), ElementsAre(40, 41, 42));
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 40u + 2 * 8u);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
}

// The leader ends with its first token before the siblings past the budget took its blocks: with no
// holder left, the first of them computes the prompt, the other shares its blocks.
TEST_F(IdenticalPromptsTest, WhenTheLastHolderEndsFirstAWaitingSiblingComputesThePrompt) {
  StepPolicy policy(Options(/*prefill_tokens=*/40), &tokenizer_);  // no room for a tail beside the leader
  const std::vector<int32_t> prompt = Prompt(40);
  RecordingSink a, b, c;
  std::vector<std::unique_ptr<Sequence>> admitted;
  admitted.push_back(Seq(prompt, 1, &a));
  admitted.push_back(Seq(prompt, 2, &b));
  admitted.push_back(Seq(prompt, 2, &c));
  policy.Admit(std::move(admitted), clock_.Now());
  const std::vector<StepPlan> plans = RunUntilFinished(policy, {&a, &b, &c});
  ASSERT_EQ(plans.size(), 4u);
  EXPECT_TRUE(plans[0].shares.empty());
  ASSERT_EQ(plans[1].rows.size(), 1u);
  EXPECT_EQ(plans[1].rows[0].slot, 1);
  EXPECT_EQ(plans[1].rows[0].start_pos, 0) << "b computes the whole prompt";
  ASSERT_EQ(plans[2].shares.size(), 1u);
  EXPECT_EQ(plans[2].shares[0].src_slot, 1);
  EXPECT_EQ(plans[2].shares[0].dst_slot, 2);
  EXPECT_THAT(RowOf(2, 2).context, ElementsAreArray(prompt));
  EXPECT_THAT(a.Tokens(), ElementsAre(40));
  EXPECT_THAT(b.Tokens(), ElementsAre(40, 41));
  EXPECT_THAT(c.Tokens(), ElementsAre(40, 41));
  EXPECT_EQ(policy.counters().prefill_tokens.load(), 40u + 40u + 8u);
  EXPECT_EQ(policy.counters().prompt_tokens_waiting.load(), 0);
  EXPECT_EQ(policy.counters().kv_blocks_reserved.load(), 0);
  EXPECT_EQ(runner_.blocks_in_use(), 0);
  EXPECT_TRUE(runner_.full_status().ok());
}

}  // namespace
}  // namespace autouvm::engine
