#include "server/request_validation.h"

namespace autouvm::server {

engine::GenerationRequest FromProto(const autouvm::v1::GenerateRequest& request) {
  engine::GenerationRequest r;
  r.model = request.model();
  r.request_id = request.request_id();
  switch (request.prompt_case()) {
    case autouvm::v1::GenerateRequest::kText:
      r.text = request.text();
      break;
    case autouvm::v1::GenerateRequest::kTokenIds:
      r.token_ids.emplace(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    default:
      break;  // neither: ValidateRequest names the prompt
  }
  if (request.has_add_bos()) r.add_bos = request.add_bos();
  r.max_tokens = request.max_tokens();
  r.ignore_eos = request.ignore_eos();
  const autouvm::v1::SamplingParams& s = request.sampling();
  if (s.has_temperature()) r.temperature = s.temperature();
  if (s.has_top_p()) r.top_p = s.top_p();
  r.top_k = s.top_k();
  if (s.has_repetition_penalty()) r.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) r.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) r.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) r.seed = s.seed();
  r.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  r.stop.assign(request.stop().begin(), request.stop().end());
  if (request.has_logprobs()) r.logprobs = request.logprobs();  // uint32 into int64: as sent, never -1
  return r;
}

engine::RequestLimits RequestLimitsOf(const Limits& limits) {
  return {.max_prompt_bytes = limits.max_prompt_bytes,
          .max_stop_strings = limits.max_stop_strings,
          .max_stop_string_bytes = limits.max_stop_string_bytes,
          .max_stop_token_ids = limits.max_stop_token_ids};
}

const engine::FieldNames& GrpcFieldNames() {
  static const engine::FieldNames names;  // the defaults are the proto's spellings
  return names;
}

absl::StatusOr<engine::GenerationParams> BuildGenerationParams(const autouvm::v1::GenerateRequest& request,
                                                               const engine::ModelConfig& model,
                                                               const tokenizer::Tokenizer& tokenizer,
                                                               const ModelSettings& settings, const Limits& limits,
                                                               uint64_t random_seed) {
  const engine::GenerationTarget target{.name = model.name,
                                        .config = &model,
                                        .tokenizer = &tokenizer,
                                        .default_max_tokens = settings.default_max_tokens,
                                        .max_tokens_limit = settings.max_tokens_limit};
  return engine::ValidateRequest(FromProto(request), target, RequestLimitsOf(limits), GrpcFieldNames(), random_seed);
}

}  // namespace autouvm::server
