// Checks a GenerateRequest against the model and the configured limits, and turns it into the engine's
// GenerationParams. Every rejection is INVALID_ARGUMENT with the offending field named first
// ("sampling.top_p: must be in (0, 1], got 1.5").
//
// Pure function; safe from any thread.
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autouvm/v1/generation.pb.h"
#include "server/config.h"
#include "server/model_config.h"
#include "server/scheduler.h"
#include "server/tokenizer.h"

namespace autouvm::server {

// The `model` field of any request: set, at most 256 bytes, printable ASCII or UTF-8 without control
// characters (names are echoed in errors and logs). INVALID_ARGUMENT naming the field otherwise.
absl::Status CheckModelName(const std::string& model);

absl::StatusOr<GenerationParams> BuildGenerationParams(const autouvm::v1::GenerateRequest& request,
                                                       const ModelConfig& model, const Tokenizer& tokenizer,
                                                       const ModelSettings& settings, const Limits& limits,
                                                       uint64_t random_seed);

}  // namespace autouvm::server
