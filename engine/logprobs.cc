#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace autouvm::engine {

void FillLogprobs(absl::Span<const float> logits, int32_t top, GeneratedToken* out) {
  AUTOUVM_CHECK(!logits.empty()) << "logprobs of an empty vocabulary";
  AUTOUVM_CHECK(out->token >= 0 && static_cast<size_t>(out->token) < logits.size())
      << "token " << out->token << " is outside the vocabulary";
  // Note [Logprobs on the scheduler thread]: this runs for every token of every sequence that asks, over
  // the whole vocabulary, on the model's scheduler thread. Each term in float (expf), summed in double:
  // with std::exp in double, logprobs: 0 on 16 streams of a 32k vocabulary cost 5% of a 7B's 200 ms
  // step under a budget (bench/results/2026-12-02-http-vs-grpc-h200.md); the float terms lose nothing
  // that shows in a float logprob.
  float max_logit = logits[0];
  for (float l : logits) max_logit = std::max(max_logit, l);
  double total = 0;
  for (float l : logits) total += static_cast<double>(std::exp(l - max_logit));
  const double log_normalizer = static_cast<double>(max_logit) + std::log(total);
  auto logprob = [&](size_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_normalizer); };
  out->logprob = logprob(static_cast<size_t>(out->token));

  // The best `want` ids so far, best first: ids come in ascending order, so a later one with an equal
  // logit never passes an earlier one (ties: lower id first).
  const size_t want = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
  out->top.clear();
  out->top.reserve(want);
  for (size_t id = 0; id < logits.size() && want > 0; ++id) {
    const float l = logits[id];
    if (out->top.size() == want && !(l > logits[out->top.back().token])) continue;
    size_t at = out->top.size();
    while (at > 0 && l > logits[out->top[at - 1].token]) --at;
    if (out->top.size() == want) out->top.pop_back();
    out->top.insert(out->top.begin() + static_cast<ptrdiff_t>(at), {.token = static_cast<int32_t>(id)});
  }
  for (TokenLogprob& t : out->top) t.logprob = logprob(static_cast<size_t>(t.token));
}

}  // namespace autouvm::engine
