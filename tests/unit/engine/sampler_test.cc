// Sampler: greedy, seeded sampling, top-k, top-p, the repetition, presence and frequency penalties and the
// shape of the distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace autouvm::engine {
namespace {

// Draws `n` tokens from a fresh copy of `logits` each time (Sample modifies its input); `context` is all
// prompt.
std::vector<int32_t> Draw(Sampler& sampler, const std::vector<float>& logits, int n,
                          const std::vector<int32_t>& context = {}) {
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    std::vector<float> copy = logits;
    out.push_back(sampler.Sample(absl::MakeSpan(copy), context, context.size()));
  }
  return out;
}

// The logits after one greedy Sample of `logits` with these penalties, `prompt` then `generated`.
std::vector<float> Penalized(SamplingConfig config, std::vector<float> logits, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& generated) {
  config.temperature = 0.0f;
  Sampler sampler(config);
  std::vector<int32_t> context = prompt;
  context.insert(context.end(), generated.begin(), generated.end());
  sampler.Sample(absl::MakeSpan(logits), context, prompt.size());
  return logits;
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

// ArgMax works in blocks (engine/sampler.cc): against a plain loop over lengths around the blocks'
// size, with ties across blocks, NaNs (first or not) and infinities.
TEST(ArgMaxTest, AgreesWithAPlainLoopAcrossBlocksTiesNaNsAndInfinities) {
  auto plain = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) best = v[i] > v[best] ? static_cast<int32_t>(i) : best;
    return best;
  };
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(-4, 4);  // few distinct values: ties within and across blocks
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  int checked = 0;
  for (size_t n : {1, 2, 63, 64, 65, 66, 127, 128, 129, 1000, 32000, 32003}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(coarse(rng)) / 2;
      std::uniform_int_distribution<size_t> at(0, n - 1);
      if (trial % 5 == 1) v[at(rng)] = nan;
      if (trial % 5 == 2) v[0] = nan;
      if (trial % 5 == 3) v[at(rng)] = inf;
      if (trial % 5 == 4) v.assign(n, -inf);
      if (trial % 7 == 6) v[at(rng)] = 100, v[at(rng)] = 100;  // two equal maxima far apart
      ASSERT_EQ(ArgMax(v), plain(v)) << "n " << n << " trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12 * 40);
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
  sampler.Sample(absl::MakeSpan(logits), context, context.size());
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

TEST(SamplerTest, PresencePenaltyMakesGreedySwitchAwayFromAGeneratedToken) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f};
  const std::vector<int32_t> context = {0, 1};  // prompt {0}, then 1 generated
  SamplingConfig config;
  config.temperature = 0.0f;
  Sampler without(config);
  std::vector<float> copy = logits;
  EXPECT_EQ(without.Sample(absl::MakeSpan(copy), context, 1), 1);
  config.presence_penalty = 1.0f;  // 3.0 - 1.0 = 2.0 < 2.5
  Sampler with(config);
  copy = logits;
  EXPECT_EQ(with.Sample(absl::MakeSpan(copy), context, 1), 2);
  EXPECT_FLOAT_EQ(copy[0], 1.0f) << "a prompt token is not penalised";
  EXPECT_FLOAT_EQ(copy[1], 2.0f);
  EXPECT_FLOAT_EQ(copy[2], 2.5f);
}

TEST(SamplerTest, FrequencyPenaltyScalesWithCountsAndPresenceIsOncePerToken) {
  SamplingConfig config;
  config.frequency_penalty = 0.5f;
  config.presence_penalty = 0.25f;
  // Token 3 is only in the prompt (three times), 4 in neither; 0, 1, 2 generated once, twice, three times.
  const std::vector<float> out = Penalized(config, {4.0f, 4.0f, 4.0f, 4.0f, 4.0f}, {3, 3, 3}, {0, 1, 1, 2, 2, 2});
  EXPECT_FLOAT_EQ(out[0], 4.0f - 1 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(out[1], 4.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(out[2], 4.0f - 3 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(out[3], 4.0f);
  EXPECT_FLOAT_EQ(out[4], 4.0f);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesLeaveThePromptAlone) {
  SamplingConfig config;
  config.presence_penalty = 2.0f;
  config.frequency_penalty = 2.0f;
  config.temperature = 0.0f;
  Sampler sampler(config);
  std::vector<float> logits = {3.0f, 2.9f};
  const std::vector<int32_t> prompt = {0, 0, 0};
  EXPECT_EQ(sampler.Sample(absl::MakeSpan(logits), prompt, prompt.size()), 0);
  EXPECT_FLOAT_EQ(logits[0], 3.0f);
}

TEST(SamplerTest, NegativePenaltiesRaiseGeneratedTokens) {
  SamplingConfig config;
  config.presence_penalty = -1.0f;
  config.frequency_penalty = -0.5f;
  const std::vector<float> out = Penalized(config, {1.0f, 1.0f}, {}, {1, 1});
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.0f + 2 * 0.5f + 1.0f);
}

TEST(SamplerTest, PresencePenaltyComesAfterTheRepetitionPenalty) {
  SamplingConfig config;
  config.repetition_penalty = 2.0f;
  config.presence_penalty = 1.0f;
  // 4 / 2 - 1 = 1 (the other order would give (4 - 1) / 2 = 1.5).
  EXPECT_FLOAT_EQ(Penalized(config, {4.0f}, {}, {0})[0], 1.0f);
}

TEST(SamplerTest, CountsFollowAGrowingContextAndRestartForAnotherOne) {
  SamplingConfig config;
  config.frequency_penalty = 1.0f;
  config.temperature = 0.0f;
  Sampler sampler(config);
  std::vector<int32_t> context = {9};  // the prompt
  auto penalized_logit_of_0 = [&]() {
    std::vector<float> logits(10, 0.0f);
    sampler.Sample(absl::MakeSpan(logits), context, 1);
    return logits[0];
  };
  EXPECT_FLOAT_EQ(penalized_logit_of_0(), 0.0f);
  context.push_back(0);
  EXPECT_FLOAT_EQ(penalized_logit_of_0(), -1.0f);
  context.push_back(0);
  context.push_back(5);
  EXPECT_FLOAT_EQ(penalized_logit_of_0(), -2.0f);
  context = {9, 0};  // shorter than what was counted: counted afresh
  EXPECT_FLOAT_EQ(penalized_logit_of_0(), -1.0f);
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
