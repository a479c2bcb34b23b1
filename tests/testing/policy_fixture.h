// A fixture for tests of engine::StepPolicy without a thread: the test plays the scheduler's loop, with
// sequences made as the scheduler makes them, a fake runner and a fake clock.
//
//   class MyPolicyTest : public PolicyFixture {};
//   StepPolicy policy(options, &tokenizer_);
//   policy.Admit({Seq({256, 10}, 3, &sink)}, clock_.Now());
//   while (auto plan = Pass(policy)) ...;
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/step_policy.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_step_runner.h"
#include "tests/testing/recording_sink.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::testing {

class PolicyFixture : public ::testing::Test {
 protected:
  PolicyFixture() : runner_(4) {}
  // A runner whose KV cache is `pool` (FakeStepRunner's).
  PolicyFixture(int slots, int64_t vocab, int64_t max_seq, engine::KvPoolShape pool)
      : runner_(slots, vocab, max_seq, pool) {}

  // Greedy unless `edit` (run before the sequence, and its sampler, are made) says otherwise.
  std::unique_ptr<engine::Sequence> Seq(std::vector<int32_t> prompt, int32_t max_tokens, RecordingSink* sink,
                                        const std::function<void(engine::GenerationParams&)>& edit = nullptr) {
    engine::GenerationParams p;
    p.prompt = std::move(prompt);
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    if (edit) edit(p);
    return std::make_unique<engine::Sequence>(std::move(p), sink, &tokenizer_, clock_.Now());
  }
  // Runs one pass of `plan` on the fake runner and hands its result back, as the loop does.
  void RunPass(engine::StepPolicy& policy, const engine::StepPlan& plan) {
    engine::StepResult result{.logits = &logits_};
    if (pass_time_) result.took = pass_time_(plan);
    result.status = runner_.Step(plan.shares, plan.RunnerRows(), &logits_);
    EXPECT_TRUE(result.status.ok()) << result.status;
    policy.Update(plan, result, clock_.Now());
  }
  // The next pass, run, and the slots it released given back to the runner; nothing if the policy had
  // no pass.
  std::optional<engine::StepPlan> Pass(engine::StepPolicy& policy) {
    std::optional<engine::StepPlan> plan = policy.Schedule(clock_.Now());
    if (plan) RunPass(policy, *plan);
    for (const int32_t slot : policy.TakeReleased()) runner_.Release(slot);
    return plan;
  }
  // Every pass until none is left.
  std::vector<engine::StepPlan> RunAll(engine::StepPolicy& policy) {
    std::vector<engine::StepPlan> plans;
    while (auto plan = Pass(policy)) plans.push_back(*plan);
    return plans;
  }

  // What each pass is said to take (StepResult::took); unset: nothing.
  std::function<absl::Duration(const engine::StepPlan&)> pass_time_;
  FakeClock clock_;
  FakeStepRunner runner_;
  tokenizer::ByteTokenizer tokenizer_{320, 256, 257};
  std::vector<float> logits_;
};

}  // namespace autouvm::testing
