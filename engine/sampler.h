// Turns one position's logits into the next token: repetition penalty, temperature, top-k, top-p.
//
// A Sampler owns its random generator (seeded per request), so the same seed and the same logits give
// the same tokens. Not thread-safe: one Sampler per request, used by the scheduler thread.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"

namespace autouvm::engine {

struct SamplingConfig {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // (0, 1]
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& config);

  // `logits` is modified in place (penalty, temperature). `context` is the prompt plus the tokens
  // generated so far, for the repetition penalty.
  int32_t Sample(absl::Span<float> logits, absl::Span<const int32_t> context);

 private:
  double Uniform();  // [0, 1), identical on every platform for a given seed

  SamplingConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch, reused across calls
  std::vector<char> seen_;
};

// Index of the largest value; the lowest index wins ties.
int32_t ArgMax(absl::Span<const float> values);

}  // namespace autouvm::engine
