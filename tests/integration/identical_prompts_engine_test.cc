// Identical prompts through the real runner (Note [Identical prompts share their prefill],
// engine/step_policy.cc): the test plays the scheduler's loop with a StepPolicy over a ModelRunner of the
// small Llama, so a sibling's first positions are its leader's KV blocks, written in the very pass its
// tail attends to them. Each request must give what it gives alone, token for token and logprob for
// logprob.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "engine/step_policy.h"
#include "tests/testing/recording_sink.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::RecordingSink;

constexpr int64_t kBlock = 4;

class IdenticalPromptsEngineTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    config_ = autouvm::testing::SmallLlamaConfig("shared");
    ASSERT_TRUE(WriteLlamaModel(config_, 7, dir_.path()).ok());
    auto runner = ModelRunner::Create(dir_.Sub("shared"), config_, 4, nullptr, {.tokens = 256, .block_tokens = kBlock});
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    tokenizer_ = std::make_unique<tokenizer::ByteTokenizer>(config_.vocab_size, config_.bos_id, config_.eos_id);
  }

  struct Outcome {
    std::vector<std::vector<GeneratedToken>> generated;  // per request
    uint64_t prefill_passes = 0, prefill_tokens = 0, passes = 0;
    size_t shares = 0;  // over all passes
  };
  // `copies` greedy requests of `prompt`, admitted together, played to their ends as the loop does.
  Outcome Run(const std::vector<int32_t>& prompt, int copies, int64_t prefill_tokens) {
    StepPolicy policy({.slots = 4,
                       .vocab_size = config_.vocab_size,
                       .max_seq = config_.max_seq,
                       .bos_id = config_.bos_id,
                       .prefill_tokens = prefill_tokens,
                       .kv_block_tokens = runner_->kv_block_tokens(),
                       .kv_blocks = runner_->kv_blocks()},
                      tokenizer_.get());
    std::vector<RecordingSink> sinks(static_cast<size_t>(copies));
    std::vector<std::unique_ptr<Sequence>> admitted;
    for (RecordingSink& sink : sinks) {
      GenerationParams p;
      p.prompt = prompt;
      p.max_tokens = 8;
      p.sampling.temperature = 0;
      p.logprobs = 2;
      admitted.push_back(std::make_unique<Sequence>(std::move(p), &sink, tokenizer_.get(), absl::Now()));
    }
    policy.Admit(std::move(admitted), absl::Now());
    Outcome out;
    std::vector<float> logits;
    while (std::optional<StepPlan> plan = policy.Schedule(absl::Now())) {
      StepResult result{.logits = &logits};
      result.status = runner_->Step(plan->shares, plan->RunnerRows(), &logits);
      EXPECT_TRUE(result.status.ok()) << result.status;
      policy.Update(*plan, result, absl::Now());
      for (const int32_t slot : policy.TakeReleased()) runner_->Release(slot);
      ++out.passes;
      out.shares += plan->shares.size();
    }
    for (const int32_t slot : policy.TakeReleased()) runner_->Release(slot);
    EXPECT_EQ(runner_->kv_blocks_in_use(), 0) << "every block, shared ones included, went back";
    for (RecordingSink& sink : sinks) {
      EXPECT_TRUE(sink.Result().status.ok()) << sink.Result().status;
      out.generated.push_back(sink.Generated());
    }
    out.prefill_passes = policy.counters().prefill_passes.load();
    out.prefill_tokens = policy.counters().prefill_tokens.load();
    return out;
  }

  autouvm::testing::TempDir dir_;
  ModelConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

TEST_P(IdenticalPromptsEngineTest, ThreeIdenticalRequestsGiveWhatEachGivesAloneFromOnePrefill) {
  const int64_t prefill_tokens = GetParam();
  const std::vector<int32_t> prompt = {256, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2};  // 23
  const Outcome alone = Run(prompt, 1, prefill_tokens);
  ASSERT_EQ(alone.generated.size(), 1u);
  ASSERT_EQ(alone.generated[0].size(), 8u);
  EXPECT_EQ(alone.shares, 0u);

  const Outcome three = Run(prompt, 3, prefill_tokens);
  // 5 whole blocks (20 positions) shared, each sibling computing its last 3.
  EXPECT_EQ(three.shares, 2u);
  EXPECT_EQ(three.prefill_tokens, 23u + 2 * 3u) << "the shared positions are computed once";
  if (prefill_tokens >= 23 + 2 * 3) {
    EXPECT_EQ(three.prefill_passes, 1u) << "one prefill pass for all three";
    EXPECT_EQ(three.passes, alone.passes) << "the siblings' prefill and decode ride in the leader's passes";
  } else {
    EXPECT_EQ(three.prefill_passes, 2u) << "12, then the leader's last 11";
    EXPECT_EQ(three.passes, alone.passes + 1) << "the tails in the next pass, beside the leader's decode row";
  }
  const std::vector<GeneratedToken>& want = alone.generated[0];
  for (size_t r = 0; r < three.generated.size(); ++r) {
    const std::vector<GeneratedToken>& got = three.generated[r];
    ASSERT_EQ(got.size(), want.size()) << "request " << r;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].token, want[i].token) << "request " << r << ", token " << i;
      EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-4) << "request " << r << ", token " << i;
      ASSERT_EQ(got[i].top.size(), 2u);
      EXPECT_EQ(got[i].top[1].token, want[i].top[1].token) << "request " << r << ", token " << i;
      EXPECT_NEAR(got[i].top[1].logprob, want[i].top[1].logprob, 1e-4) << "request " << r << ", token " << i;
    }
  }
}

// 2048: the whole prompt and the tails in one pass; 12: the leader's prompt in two passes, the tails
// (sharing blocks computed a pass earlier) in a third.
INSTANTIATE_TEST_SUITE_P(PrefillBudgets, IdenticalPromptsEngineTest, ::testing::Values(2048, 12));

}  // namespace
}  // namespace autouvm::engine
