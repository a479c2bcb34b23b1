// GenerationRequest: a request for text generation as every transport hands it to the engine — plain
// C++, no wire format — and its one validation against the model and the limits.
//
//   engine::GenerationRequest r{.model = "tiny-llama", .text = "Hello", .max_tokens = 16};
//   ASSIGN_OR_RETURN(GenerationParams p, ValidateRequest(r, target, limits, kGrpcFieldNames, seed));
//
// Every rejection is INVALID_ARGUMENT with the offending field named first, in the transport's own
// spelling (FieldNames): "sampling.top_p: must be in (0, 1], got 1.5" over gRPC, "top_p: ..." over HTTP.
//
// Plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/model_config.h"
#include "engine/scheduler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::engine {

struct GenerationRequest {
  std::string model;
  std::string request_id;  // "" : the front door makes one
  // The prompt: exactly one of text and token_ids.
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> token_ids;
  std::optional<bool> add_bos;  // with text; unset: the model's bos is added
  uint32_t max_tokens = 0;      // 0: the model's default
  bool ignore_eos = false;
  std::optional<float> temperature;  // unset: the sampler's default
  std::optional<float> top_p;
  int32_t top_k = 0;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;  // OpenAI's, in [-2, 2]; unset: 0
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;  // unset: a random one
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;
  // -1: off; 0..20 alternatives (GenerationParams::logprobs). 64 bits, so that any unsigned 32-bit value a
  // transport reads (gRPC's uint32) is refused as it was sent instead of wrapping to -1.
  int64_t logprobs = -1;
  absl::Time deadline = absl::InfiniteFuture();
};

// How a transport spells each field, for the messages that name them.
struct FieldNames {
  std::string model = "model";
  std::string request_id = "request_id";
  std::string text = "text";
  std::string token_ids = "token_ids";
  std::string prompt = "prompt";  // the prompt as a whole (neither set, or too long)
  std::string max_tokens = "max_tokens";
  std::string temperature = "sampling.temperature";
  std::string top_p = "sampling.top_p";
  std::string top_k = "sampling.top_k";
  std::string repetition_penalty = "sampling.repetition_penalty";
  std::string presence_penalty = "sampling.presence_penalty";
  std::string frequency_penalty = "sampling.frequency_penalty";
  std::string stop_token_ids = "stop_token_ids";
  std::string stop = "stop";
  std::string logprobs = "logprobs";
};

// Bounds from the daemon's configuration (server `limits:`).
struct RequestLimits {
  int64_t max_prompt_bytes = 1 << 20;
  int64_t max_stop_strings = 16;
  int64_t max_stop_string_bytes = 256;
  int64_t max_stop_token_ids = 64;
};

// A served model as a request is checked against and submitted to. The pointers outlive the request.
struct GenerationTarget {
  std::string name;
  const ModelConfig* config = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  Scheduler* scheduler = nullptr;
  int64_t default_max_tokens = 128;
  int64_t max_tokens_limit = 4096;
  const tokenizer::ChatTemplate* chat_template = nullptr;  // null: the model has none
  std::string bos_token, eos_token;                        // the texts the chat template sees
  // Holds what the pointers point into alive for as long as the request keeps its target (a model may be
  // unloaded meanwhile); may be null where the owner outlives every request.
  std::shared_ptr<const void> keep_alive;
};

// The `model` field of any request: set, at most 256 bytes, printable ASCII or UTF-8 without control
// characters (names are echoed in errors and logs). INVALID_ARGUMENT naming the field otherwise.
absl::Status CheckModelName(const std::string& model, const std::string& field = "model");

// The request checked and turned into the scheduler's GenerationParams (prompt tokenized, bos and the
// model's eos ids added as the request asks); `random_seed` when the request names no seed. The deadline
// and request id are copied as they are.
absl::StatusOr<GenerationParams> ValidateRequest(const GenerationRequest& request, const GenerationTarget& target,
                                                 const RequestLimits& limits, const FieldNames& names,
                                                 uint64_t random_seed);

}  // namespace autouvm::engine
