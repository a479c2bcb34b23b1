// Log-probabilities of the model's distribution at one position, as an OpenAI-style `logprobs` answer
// reports them: the sampled token's and the most likely alternatives' (Note [Raw logprobs]).
//
//   GeneratedToken out{.token = sampled};
//   FillLogprobs(raw_logits, /*top=*/5, &out);  // out.logprob, out.top (5 entries, most likely first)
//
// A pure function; safe from any thread.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/generation_types.h"

namespace autouvm::engine {

// Sets `out->logprob` to log-softmax(logits)[out->token] and `out->top` to the `top` (at most the
// vocabulary) most likely tokens with theirs, most likely first, the lower id first on ties.
// O(vocabulary * top): `top` is at most 20.
void FillLogprobs(absl::Span<const float> logits, int32_t top, GeneratedToken* out);

}  // namespace autouvm::engine
