// Note [Steps sized by their cost] (engine/step_cost.cc): what a pass costs, learned from the passes run,
// and the prompt tokens a pass then takes while sequences decode (engine/step_policy.h).
#include "engine/step_cost.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/step_policy.h"
#include "tests/testing/policy_fixture.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::RecordingSink;
using ::testing::ElementsAre;

TEST(StepCostTest, TheFloorIsTheDecodePassesMedianAndATokenCostsWhatPassesOverItTook) {
  StepCost cost;
  EXPECT_EQ(cost.floor(), absl::ZeroDuration());
  EXPECT_EQ(cost.TokensWithin(absl::Milliseconds(100)), -1);                           // nothing known: nothing limits
  for (int ms : {100, 104, 96, 300, 100}) cost.Observe(4, 0, absl::Milliseconds(ms));  // 300: one slow pass
  EXPECT_EQ(cost.floor(), absl::Milliseconds(100));
  EXPECT_FALSE(cost.per_token().has_value());
  cost.Observe(4, 200, absl::Milliseconds(110));  // within the floor: says nothing of a token's cost
  cost.Observe(4, 16, absl::Milliseconds(400));   // too few tokens to say (a recorded pass, say)
  EXPECT_FALSE(cost.per_token().has_value());
  cost.Observe(4, 1000, absl::Milliseconds(600));  // outgrew it: 0.5 ms a token above the floor
  ASSERT_TRUE(cost.per_token().has_value());
  EXPECT_EQ(*cost.per_token(), absl::Microseconds(500));
  EXPECT_EQ(cost.Predict(0), absl::Milliseconds(100));
  EXPECT_EQ(cost.Predict(400), absl::Milliseconds(300));
  EXPECT_EQ(cost.TokensWithin(absl::Milliseconds(200)), 200);
  EXPECT_EQ(cost.TokensWithin(absl::Milliseconds(50)), 0);
}

TEST(StepCostTest, OnlyTheLastWindowOfPassesCounts) {
  StepCost cost;
  for (size_t i = 0; i < StepCost::kWindow; ++i) cost.Observe(1, 0, absl::Milliseconds(10));
  for (size_t i = 0; i < StepCost::kWindow; ++i) cost.Observe(1, 0, absl::Milliseconds(120));
  EXPECT_EQ(cost.floor(), absl::Milliseconds(120));  // the model went from resident to a budget, say
  cost.Observe(1, 0, absl::ZeroDuration());          // not measured: ignored
  EXPECT_EQ(cost.floor(), absl::Milliseconds(120));
}

class StepSizingTest : public autouvm::testing::PolicyFixture {
 protected:
  // A pool for 4 sequences of 1024 positions.
  StepSizingTest() : PolicyFixture(4, 320, 1024, {.blocks = 4 * 64 + 1, .block_tokens = 16}) {
    // A floor of 100 ms, and 0.5 ms more for each prompt token.
    pass_time_ = [](const StepPlan& plan) {
      return absl::Milliseconds(100) + absl::Microseconds(500) * static_cast<double>(plan.prompt_tokens());
    };
  }
  // A prompt of `tokens` tokens, each `fill` after BOS (prompts of different fills share no blocks).
  std::vector<int32_t> Prompt(int tokens, int32_t fill) {
    std::vector<int32_t> p(static_cast<size_t>(tokens), fill);
    p[0] = 256;
    return p;
  }
  // The prompt chunks of a new sequence of `prompt` tokens in the passes to come, until its prompt is in.
  std::vector<size_t> ChunksOf(StepPolicy& policy, RecordingSink* sink, int prompt, int32_t fill) {
    std::vector<std::unique_ptr<Sequence>> admitted;
    admitted.push_back(Seq(Prompt(prompt, fill), 4, sink));
    policy.Admit(std::move(admitted), clock_.Now());
    std::vector<size_t> chunks;
    for (int left = prompt; left > 0;) {
      std::optional<StepPlan> plan = Pass(policy);
      if (!plan) break;
      EXPECT_EQ(plan->phase, IterationPhase::kMixed);
      const size_t chunk = plan->rows.back().tokens.size();
      chunks.push_back(chunk);
      left -= static_cast<int>(chunk);
    }
    return chunks;
  }
  // 4 slots of 1024 positions, 512 prompt tokens a pass at most; sized by the passes' cost if `size`.
  static PolicyOptions Options(bool size, absl::Duration max_step = absl::ZeroDuration()) {
    return {.slots = 4,
            .vocab_size = 320,
            .max_seq = 1024,
            .bos_id = 256,
            .prefill_tokens = 512,
            .kv_block_tokens = 16,
            .kv_blocks = 4 * 64,
            .size_steps = size,
            .max_step = max_step,
            .min_prefill_tokens = 16};
  }
  // Two sequences decoding, and a pass of 512 prompt tokens that showed what a token costs.
  void Warm(StepPolicy& policy, RecordingSink* a, RecordingSink* b, RecordingSink* c) {
    std::vector<std::unique_ptr<Sequence>> admitted;
    admitted.push_back(Seq({256, 1}, 200, a));
    admitted.push_back(Seq({256, 2}, 200, b));
    policy.Admit(std::move(admitted), clock_.Now());
    for (int i = 0; i < 4; ++i) Pass(policy);  // the prefill, then decode passes: the floor
    EXPECT_EQ(policy.cost().floor(), absl::Milliseconds(100));
    EXPECT_FALSE(policy.cost().per_token().has_value());
    // Nothing known of a token's cost yet: the whole budget (512), a pass of 356 ms.
    EXPECT_THAT(ChunksOf(policy, c, 600, 7), ElementsAre(512, 88));
    ASSERT_TRUE(policy.cost().per_token().has_value());
    EXPECT_EQ(*policy.cost().per_token(), absl::Microseconds(500));
  }
};

TEST_F(StepSizingTest, WhileSequencesDecodeAPassTakesThePromptTokensThatKeepItWithinTwiceItsFloor) {
  StepPolicy policy(Options(/*size=*/true), &tokenizer_);
  RecordingSink a, b, c, d;
  Warm(policy, &a, &b, &c);
  // Three sequences decode: 200 prompt tokens keep a pass within 200 ms, twice the floor.
  EXPECT_THAT(ChunksOf(policy, &d, 600, 8), ElementsAre(200, 200, 200));
  EXPECT_EQ(policy.counters().pass_floor_s.load(), 0.1);
}

TEST_F(StepSizingTest, AMaxStepTradesTheRunningRequestsNextTokenForEarlierFirstOnes) {
  StepPolicy policy(Options(/*size=*/true, absl::Milliseconds(300)), &tokenizer_);
  RecordingSink a, b, c, d;
  Warm(policy, &a, &b, &c);
  EXPECT_THAT(ChunksOf(policy, &d, 600, 8), ElementsAre(400, 200));
}

TEST_F(StepSizingTest, OffEveryPassTakesTheWholeBudget) {
  StepPolicy policy(Options(/*size=*/false), &tokenizer_);
  RecordingSink a, b, c, d;
  Warm(policy, &a, &b, &c);
  EXPECT_THAT(ChunksOf(policy, &d, 600, 8), ElementsAre(512, 88));
}

}  // namespace
}  // namespace autouvm::engine
