// Sampler: greedy, seeded sampling, top-k, top-p, repetition penalty and the shape of the distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace autouvm::engine {
namespace {

// Draws `n` tokens from a fresh copy of `logits` each time (Sample modifies its input).
std::vector<int32_t> Draw(Sampler& sampler, const std::vector<float>& logits, int n,
                          const std::vector<int32_t>& context = {}) {
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    std::vector<float> copy = logits;
    out.push_back(sampler.Sample(absl::MakeSpan(copy), context));
  }
  return out;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max = logits[0];
  for (float l : logits) max = std::max<double>(max, l);
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= total;
  return p;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

TEST(ArgMaxTest, PicksLargestAndLowestIndexOnTies) {
  EXPECT_EQ(ArgMax(std::vector<float>{0.5f, -1.0f, 3.0f, 2.0f}), 2);
  EXPECT_EQ(ArgMax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{7.0f, 7.0f, 7.0f}), 0);
  EXPECT_EQ(ArgMax(std::vector<float>{-5.0f, -2.0f, -3.0f}), 1);
}

TEST(SamplerTest, GreedyIsArgMaxWithLowestIndexOnTies) {
  SamplingConfig config;
  config.temperature = 0.0f;
  Sampler sampler(config);
  EXPECT_EQ(Draw(sampler, {0.1f, 0.9f, 0.2f, 0.9f}, 20), std::vector<int32_t>(20, 1));
  EXPECT_EQ(Draw(sampler, {-3.0f, -1.0f, -2.0f}, 1), std::vector<int32_t>{1});
}

TEST(SamplerTest, SameSeedGivesSameSequence) {
  const std::vector<float> logits(16, 0.0f);  // uniform: every draw depends on the generator
  SamplingConfig config;
  config.temperature = 1.0f;
  config.seed = 42;
  Sampler a(config), b(config);
  const auto seq_a = Draw(a, logits, 300);
  EXPECT_EQ(seq_a, Draw(b, logits, 300));
  // ...and the sequence is not degenerate.
  EXPECT_GT(std::set<int32_t>(seq_a.begin(), seq_a.end()).size(), 8u);
}

TEST(SamplerTest, DifferentSeedsGiveDifferentSequences) {
  const std::vector<float> logits(16, 0.0f);
  SamplingConfig ca, cb;
  ca.seed = 1;
  cb.seed = 2;
  Sampler a(ca), b(cb);
  const auto seq_a = Draw(a, logits, 300);
  const auto seq_b = Draw(b, logits, 300);
  int differing = 0;
  for (size_t i = 0; i < seq_a.size(); ++i) differing += seq_a[i] != seq_b[i];
  // Independent uniform draws over 16 tokens agree ~1/16 of the time.
  EXPECT_GT(differing, 200);
}

TEST(SamplerTest, TopKOneAlwaysReturnsArgMax) {
  const std::vector<float> logits = {0.3f, 0.1f, 0.35f, 0.2f, 0.34f, 0.0f};
  SamplingConfig config;
  config.temperature = 10.0f;  // nearly flat without top-k
  config.top_k = 1;
  config.seed = 7;
  Sampler sampler(config);
  EXPECT_EQ(Draw(sampler, logits, 1000), std::vector<int32_t>(1000, 2));
}

TEST(SamplerTest, TopKOnlyReturnsTheKBest) {
  // Best three: indices 4, 1, 6.
  const std::vector<float> logits = {0.1f, 0.8f, 0.2f, 0.3f, 0.9f, 0.0f, 0.7f, 0.4f};
  SamplingConfig config;
  config.temperature = 10.0f;
  config.top_k = 3;
  config.seed = 11;
  Sampler sampler(config);
  std::map<int32_t, int> counts;
  for (int32_t t : Draw(sampler, logits, 3000)) ++counts[t];
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_GT(counts[4], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[6], 0);
}

TEST(SamplerTest, SmallTopPKeepsOnlyTheTopToken) {
  const std::vector<float> logits = LogitsOf({0.3, 0.25, 0.25, 0.2});
  SamplingConfig config;
  config.top_p = 0.05f;
  config.seed = 3;
  Sampler sampler(config);
  EXPECT_EQ(Draw(sampler, logits, 2000), std::vector<int32_t>(2000, 0));
}

// 0.5 + 0.3 is exactly top_p 0.8 in real arithmetic, but not in float/double: Note [top_p boundary].
TEST(SamplerTest, TopPKeepsTheNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (in a shuffled order): with top_p 0.8 the nucleus is {0.5, 0.3}.
  const std::vector<float> logits = LogitsOf({0.15, 0.5, 0.05, 0.3});
  SamplingConfig config;
  config.top_p = 0.8f;
  config.seed = 5;
  Sampler sampler(config);
  std::map<int32_t, int> counts;
  for (int32_t t : Draw(sampler, logits, 2000)) ++counts[t];
  EXPECT_EQ(counts[0], 0) << "the 0.15 token is outside the 0.8 nucleus";
  EXPECT_EQ(counts[2], 0) << "the 0.05 token is outside the 0.8 nucleus";
  // Renormalized inside the nucleus: 0.5/0.8 = 0.625 and 0.3/0.8 = 0.375.
  EXPECT_NEAR(counts[1] / 2000.0, 0.625, 0.04);
  EXPECT_NEAR(counts[3] / 2000.0, 0.375, 0.04);
}

TEST(SamplerTest, TopPBetweenCumulativeSumsKeepsThreeTokens) {
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  SamplingConfig config;
  config.top_p = 0.9f;  // 0.5 + 0.3 < 0.9 <= 0.5 + 0.3 + 0.15
  config.seed = 9;
  Sampler sampler(config);
  std::map<int32_t, int> counts;
  for (int32_t t : Draw(sampler, logits, 4000)) ++counts[t];
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_NEAR(counts[2] / 4000.0, 0.15 / 0.95, 0.03);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingConfig config;
  config.temperature = 0.0f;
  config.repetition_penalty = 2.0f;
  Sampler sampler(config);
  std::vector<float> logits = {4.0f, 3.0f, -1.0f, -0.5f, 1.0f};
  // Token 0 appears twice (penalized once); ids outside the vocabulary are ignored.
  const std::vector<int32_t> context = {0, 2, 0, -1, 99};
  sampler.Sample(absl::MakeSpan(logits), context);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], 3.0f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f);
  EXPECT_FLOAT_EQ(logits[3], -0.5f);
  EXPECT_FLOAT_EQ(logits[4], 1.0f);
}

TEST(SamplerTest, RepetitionPenaltyMakesGreedySwitchAwayFromRepeatedToken) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f};
  const std::vector<int32_t> context = {1, 1, 1};
  SamplingConfig plain;
  plain.temperature = 0.0f;
  Sampler without(plain);
  EXPECT_EQ(Draw(without, logits, 1, context), std::vector<int32_t>{1});

  SamplingConfig penalized = plain;
  penalized.repetition_penalty = 1.5f;  // 3.0 / 1.5 = 2.0 < 2.5
  Sampler with(penalized);
  EXPECT_EQ(Draw(with, logits, 1, context), std::vector<int32_t>{2});
}

TEST(SamplerTest, RepetitionPenaltyPushesNegativeRepeatedTokenFurtherDown) {
  // All negative: dividing would wrongly raise the repeated token above the others.
  const std::vector<float> logits = {-2.0f, -1.0f, -1.5f};
  SamplingConfig config;
  config.temperature = 0.0f;
  config.repetition_penalty = 1.6f;  // -1.0 * 1.6 = -1.6 < -1.5
  Sampler sampler(config);
  EXPECT_EQ(Draw(sampler, logits, 1, {1}), std::vector<int32_t>{2});
}

void ExpectFrequenciesMatchSoftmax(float temperature, uint64_t seed) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f, 2.0f};
  SamplingConfig config;
  config.temperature = temperature;
  config.seed = seed;
  Sampler sampler(config);
  constexpr int kDraws = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int32_t t : Draw(sampler, logits, kDraws)) ++counts[t];
  const std::vector<double> expected = Softmax(logits, temperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    // Standard deviation is at most sqrt(0.25 / 20000) = 0.0035; allow > 4 sigma.
    EXPECT_NEAR(counts[i] / double(kDraws), expected[i], 0.015) << "token " << i << " at T=" << temperature;
  }
}

TEST(SamplerTest, FrequenciesAtTemperatureOneMatchSoftmax) { ExpectFrequenciesMatchSoftmax(1.0f, 123); }

TEST(SamplerTest, FrequenciesAtOtherTemperaturesMatchScaledSoftmax) {
  ExpectFrequenciesMatchSoftmax(0.5f, 321);
  ExpectFrequenciesMatchSoftmax(2.0f, 654);
}

}  // namespace
}  // namespace autouvm::engine
