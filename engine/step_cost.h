// StepCost: what a model's forward pass costs, learned from the passes it ran, and how many prompt tokens
// a pass may carry within a time (Note [Steps sized by their cost], step_cost.cc).
//
//   StepCost cost;
//   cost.Observe(/*decode_rows=*/3, /*prompt_tokens=*/0, absl::Milliseconds(120));   // after each pass
//   int64_t tokens = cost.TokensWithin(2 * cost.floor());                            // before the next
//
// A pure value type, not thread-safe: the scheduler's loop owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace autouvm::engine {

class StepCost {
 public:
  // Passes remembered for each estimate (their median is taken).
  static constexpr size_t kWindow = 16;
  // A pass with prompt tokens tells what a token costs once it takes this many times the floor...
  static constexpr double kBoundOverFloor = 1.25;
  // ... and carries this many prompt tokens at least.
  static constexpr int64_t kMinTokens = 64;

  // A pass of `decode_rows` decode rows and `prompt_tokens` prompt tokens took `took`.
  void Observe(int64_t decode_rows, int64_t prompt_tokens, absl::Duration took);

  // What a pass that carries only decode rows takes (the weight sweep under a budget): the median of the
  // last decode passes; zero before the first.
  absl::Duration floor() const;
  // What each prompt token adds to a pass that outgrows the floor, from the passes that did; none before
  // one did.
  std::optional<absl::Duration> per_token() const;
  // The pass predicted for `prompt_tokens` prompt tokens beside its decode rows: floor + k·P.
  absl::Duration Predict(int64_t prompt_tokens) const;
  // The most prompt tokens a pass may carry and be predicted within `target`: -1 when nothing limits them
  // (no pass has outgrown the floor yet).
  int64_t TokensWithin(absl::Duration target) const;

 private:
  std::vector<double> floor_s_;      // last decode-only passes, oldest first
  std::vector<double> per_token_s_;  // last compute-bound passes' seconds per token
};

}  // namespace autouvm::engine
