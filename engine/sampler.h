// Turns one position's logits into the next token: repetition penalty, presence and frequency penalties,
// temperature, top-k, top-p.
//
// A Sampler owns its random generator (seeded per request), so the same seed and the same logits give
// the same tokens. Not thread-safe: one Sampler per request, used by the scheduler thread.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace autouvm::engine {

struct SamplingConfig {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // (0, 1]
  float repetition_penalty = 1.0f;  // CTRL-style, over the prompt and the generated tokens; 1: off
  // OpenAI-style, over the generated tokens only (Note [Presence and frequency penalties]); 0: off.
  float presence_penalty = 0;
  float frequency_penalty = 0;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& config);

  // `logits` is modified in place (penalties). `context` is the prompt (its first `prompt_len` tokens)
  // plus the tokens generated so far; between calls it only grows by appended tokens, which the
  // presence and frequency penalties count as they come.
  int32_t Sample(absl::Span<float> logits, absl::Span<const int32_t> context, size_t prompt_len);

 private:
  double Uniform();  // [0, 1), identical on every platform for a given seed
  void ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> context, size_t prompt_len);

  SamplingConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch, reused across calls
  std::vector<char> seen_;
  absl::flat_hash_map<int32_t, int32_t> generated_counts_;  // token -> times generated so far
  size_t counted_ = 0;                                      // generated tokens in generated_counts_
};

// Index of the largest value; the lowest index wins ties.
int32_t ArgMax(absl::Span<const float> values);

}  // namespace autouvm::engine
