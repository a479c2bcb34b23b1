// GenerateFlags to GenerateRequest; see generate_request.h.
#include "clients/generate_request.h"

namespace autouvm::cli {

autouvm::v1::GenerateRequest BuildGenerateRequest(const GenerateFlags& flags) {
  autouvm::v1::GenerateRequest request;
  request.set_model(flags.model);
  if (flags.prompt.has_value()) {
    request.set_text(*flags.prompt);
  } else {
    request.mutable_token_ids()->mutable_ids()->Add(flags.token_ids.begin(), flags.token_ids.end());
  }
  request.set_max_tokens(flags.max_tokens);

  // `sampling` itself is left unset when no sampling flag is given.
  if (flags.temperature.has_value()) request.mutable_sampling()->set_temperature(*flags.temperature);
  if (flags.top_k.has_value()) request.mutable_sampling()->set_top_k(*flags.top_k);
  if (flags.top_p.has_value()) request.mutable_sampling()->set_top_p(*flags.top_p);
  if (flags.repetition_penalty.has_value()) {
    request.mutable_sampling()->set_repetition_penalty(*flags.repetition_penalty);
  }
  if (flags.seed.has_value()) request.mutable_sampling()->set_seed(*flags.seed);

  request.mutable_stop()->Add(flags.stop.begin(), flags.stop.end());
  request.mutable_stop_token_ids()->Add(flags.stop_token_ids.begin(), flags.stop_token_ids.end());
  request.set_ignore_eos(flags.ignore_eos);
  if (flags.no_bos) request.set_add_bos(false);
  request.set_request_id(flags.request_id);
  if (flags.logprobs.has_value()) request.set_logprobs(*flags.logprobs);
  return request;
}

}  // namespace autouvm::cli
