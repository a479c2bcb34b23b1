#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>

namespace autouvm::engine {
namespace {

void Remember(std::vector<double>* window, double value) {
  if (window->size() == StepCost::kWindow) window->erase(window->begin());
  window->push_back(value);
}

double Median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

}  // namespace

// Note [Steps sized by their cost]: under a budget a pass costs about the same whether it carries one
// token or a thousand — the weight sweep (ARCHITECTURE.md, "The one rule") — until its compute outgrows
// the sweep; with the model resident the floor is the host's dispatch of the pass's ops and HBM, and every
// prompt token adds to it. A fixed prompt budget per pass either leaves free tokens out (a 120 ms sweep
// hides thousands of a 7B's prompt tokens on the H200) or, where the floor is low, stretches the running
// requests' next token by the whole chunk's compute: 16 requests with 2048-token prompts joining one
// another on the H200's resident 7B (floor 25 ms) saw gaps of 186 / 254 ms at p90 / p99 (bench/results/
// 2026-12-03-step-sizing-h200.md). So while sequences decode, a pass takes the prompt tokens predicted to
// keep it within max(step_growth x floor, max_step) (models.<name>.step_growth, max_step), at least
// min_prefill_tokens so that every prompt advances, at most max_prefill_tokens; with nothing decoding it
// takes max_prefill_tokens, since no one waits on it but the prompts themselves. A pass of P prompt
// tokens is predicted to take floor + k·P: the floor is the median of the last kWindow passes of decode
// rows only; k the median of (t − floor) / P over the last kWindow passes of kMinTokens prompt tokens or
// more that took kBoundOverFloor times the floor or more. Under a budget that chord from the floor errs
// long below the passes it was learned from (their compute was partly hidden) and short above them;
// with the model resident a mixed pass also has a fixed cost of its own above the floor, which the chord
// counts per token, so chunks settle where the pass is the target. The target must exceed that fixed
// cost: with the floor itself as the target (no growth), the chunks shrank to min_prefill_tokens and the
// prompts took 480 passes instead of 15 (TTFT 11.5 s against 0.23). Until a pass has outgrown the floor
// nothing limits the prompt tokens but max_prefill_tokens. On that resident 7B even twice the floor cost
// the joining requests' TTFT 7-12x (1.6-2.7 s at p50) for gaps of 97-204 ms at p99 instead of 262-265:
// there a mixed pass's fixed cost is close to the floor, so the trade is the operator's to make, and
// size_steps is off by default.
void StepCost::Observe(int64_t decode_rows, int64_t prompt_tokens, absl::Duration took) {
  const double s = absl::ToDoubleSeconds(took);
  if (!(s > 0) || !std::isfinite(s)) return;
  if (prompt_tokens == 0) {
    Remember(&floor_s_, s);
    return;
  }
  if (floor_s_.empty() || prompt_tokens < kMinTokens) return;
  const double floor_s = Median(floor_s_);
  if (s >= kBoundOverFloor * floor_s) Remember(&per_token_s_, (s - floor_s) / static_cast<double>(prompt_tokens));
}

absl::Duration StepCost::floor() const {
  return floor_s_.empty() ? absl::ZeroDuration() : absl::Seconds(Median(floor_s_));
}

std::optional<absl::Duration> StepCost::per_token() const {
  if (per_token_s_.empty()) return std::nullopt;
  return absl::Seconds(Median(per_token_s_));
}

absl::Duration StepCost::Predict(int64_t prompt_tokens) const {
  const std::optional<absl::Duration> k = per_token();
  return floor() + (k ? *k * static_cast<double>(prompt_tokens) : absl::ZeroDuration());
}

int64_t StepCost::TokensWithin(absl::Duration target) const {
  const std::optional<absl::Duration> k = per_token();
  if (!k || *k <= absl::ZeroDuration()) return -1;
  if (target <= floor()) return 0;
  return static_cast<int64_t>(std::floor(absl::FDivDuration(target - floor(), *k)));
}

}  // namespace autouvm::engine
