// The gRPC Generation API's requests, mapped onto the engine's front door: a GenerateRequest becomes an
// engine::GenerationRequest (engine/generation_request.h), whose validation names fields as the proto
// spells them ("sampling.top_p: must be in (0, 1], got 1.5").
//
// Pure functions; safe from any thread.
#pragma once

#include "absl/status/statusor.h"
#include "autouvm/v1/generation.pb.h"
#include "engine/generation_request.h"
#include "engine/model_config.h"
#include "engine/scheduler.h"
#include "server/config.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::server {

using engine::CheckModelName;

// The message as the engine's plain request (its deadline is the call's: set by the caller).
engine::GenerationRequest FromProto(const autouvm::v1::GenerateRequest& request);
// The configuration's limits on a request.
engine::RequestLimits RequestLimitsOf(const Limits& limits);
// The fields as autouvm.v1.GenerateRequest names them.
const engine::FieldNames& GrpcFieldNames();

// FromProto then engine::ValidateRequest against `model` with these settings: what the service does to a
// request, in one call (tests and the request fuzzer).
absl::StatusOr<engine::GenerationParams> BuildGenerationParams(const autouvm::v1::GenerateRequest& request,
                                                               const engine::ModelConfig& model,
                                                               const tokenizer::Tokenizer& tokenizer,
                                                               const ModelSettings& settings, const Limits& limits,
                                                               uint64_t random_seed);

}  // namespace autouvm::server
