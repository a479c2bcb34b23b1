// FillLogprobs: log-softmax against hand-computed values, the top alternatives' order, ties and count.
#include "engine/logprobs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace autouvm::engine {
namespace {

std::vector<int32_t> Ids(const std::vector<TokenLogprob>& top) {
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : top) ids.push_back(t.token);
  return ids;
}

TEST(LogprobsTest, SampledTokenGetsItsLogSoftmax) {
  // log-softmax of {0, ln 2, ln 3, ln 4}: probabilities 1/10, 2/10, 3/10, 4/10.
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  for (int32_t token = 0; token < 4; ++token) {
    GeneratedToken out{.token = token};
    FillLogprobs(logits, 0, &out);
    EXPECT_NEAR(out.logprob, std::log((token + 1) / 10.0), 1e-6) << "token " << token;
    EXPECT_TRUE(out.top.empty()) << "logprobs 0 asks for no alternatives";
  }
}

TEST(LogprobsTest, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 1000.0f};
  GeneratedToken out{.token = 1};
  FillLogprobs(logits, 1, &out);
  EXPECT_NEAR(out.logprob, std::log(0.5), 1e-6);
}

TEST(LogprobsTest, TopAlternativesAreMostLikelyFirstWithTheirLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 2.0f, 0.5f};
  GeneratedToken out{.token = 2};
  FillLogprobs(logits, 3, &out);
  EXPECT_THAT(Ids(out.top), ::testing::ElementsAre(1, 3, 0));
  double total = 0;
  for (float l : logits) total += std::exp(static_cast<double>(l));
  for (const TokenLogprob& t : out.top) EXPECT_NEAR(t.logprob, logits[t.token] - std::log(total), 1e-6);
  EXPECT_NEAR(out.logprob, -2.0 - std::log(total), 1e-6) << "the sampled token need not be among the top";
}

TEST(LogprobsTest, TiesGoToTheLowerIdAndTheCountIsHonoured) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f};
  GeneratedToken out{.token = 0};
  FillLogprobs(logits, 4, &out);
  EXPECT_THAT(Ids(out.top), ::testing::ElementsAre(1, 3, 5, 2));
  FillLogprobs(logits, 2, &out);  // refilled, not appended to
  EXPECT_THAT(Ids(out.top), ::testing::ElementsAre(1, 3));
  FillLogprobs(logits, 20, &out);  // more than the vocabulary: all of it
  EXPECT_THAT(Ids(out.top), ::testing::ElementsAre(1, 3, 5, 2, 4, 0));
}

}  // namespace
}  // namespace autouvm::engine
