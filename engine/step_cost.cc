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
// the sweep; with the model resident the floor is the host's dispatch of the pass's ops and HBM. A pass
// of T tokens therefore takes about max(floor, k·T). A fixed prompt budget per pass either leaves free
// tokens out (a floor of a 120 ms sweep holds several thousand of a 7B's prompt tokens on the H200) or,
// where the floor is low, stretches the running requests' next token by the whole prompt chunk's compute
// (a 2048-token chunk of a resident 7B is several decode steps). So while sequences decode, a pass takes
// the prompt tokens predicted to keep it within max(floor, max_step) (models.<name>.max_step_ms; the
// floor alone by default: prompts ride only where they cost the running requests nothing), and at least
// min_prefill_tokens so that every prompt advances; with nothing decoding a pass takes the whole
// max_prefill_tokens, since no one waits on it but the prompts themselves. Both figures are learned
// from the passes the model ran, as medians of the last kWindow: the floor from passes of decode rows
// only, k from passes with prompt tokens, kMinTokens tokens or more, that took kBoundOverFloor times the
// floor or more, as their time per token — which counts their fixed part as compute too, so k errs high
// and passes err short (a pass of few tokens that outgrew the floor was slow for another reason: a
// recorded pass, a plan switch). Until a pass has outgrown the floor nothing limits the prompt tokens
// but max_prefill_tokens.
void StepCost::Observe(int64_t decode_rows, int64_t prompt_tokens, absl::Duration took) {
  const double s = absl::ToDoubleSeconds(took);
  if (!(s > 0) || !std::isfinite(s)) return;
  if (prompt_tokens == 0) {
    Remember(&floor_s_, s);
    return;
  }
  const int64_t tokens = decode_rows + prompt_tokens;
  if (!floor_s_.empty() && tokens >= kMinTokens && s >= kBoundOverFloor * Median(floor_s_)) {
    Remember(&per_token_s_, s / static_cast<double>(tokens));
  }
}

absl::Duration StepCost::floor() const {
  return floor_s_.empty() ? absl::ZeroDuration() : absl::Seconds(Median(floor_s_));
}

std::optional<absl::Duration> StepCost::per_token() const {
  if (per_token_s_.empty()) return std::nullopt;
  return absl::Seconds(Median(per_token_s_));
}

absl::Duration StepCost::Predict(int64_t tokens) const {
  const std::optional<absl::Duration> k = per_token();
  const absl::Duration compute = k ? *k * static_cast<double>(tokens) : absl::ZeroDuration();
  return std::max(floor(), compute);
}

int64_t StepCost::TokensWithin(absl::Duration target, int64_t decode_rows) const {
  const std::optional<absl::Duration> k = per_token();
  if (!k || *k <= absl::ZeroDuration()) return -1;
  const auto tokens = static_cast<int64_t>(std::floor(absl::FDivDuration(target, *k)));
  return std::max<int64_t>(0, tokens - decode_rows);
}

}  // namespace autouvm::engine
