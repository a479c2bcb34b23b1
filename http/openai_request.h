// The body of an OpenAI completions or chat completions request, parsed and checked into the engine's
// plain request (engine::GenerationRequest) plus what only this API has: several prompts, n samples
// each, streaming, chat messages, logprobs as OpenAI counts them.
//
//   ASSIGN_OR_RETURN(OpenAiRequest r, ParseOpenAiRequest(Endpoint::kChatCompletions, body, limits));
//
// Every refusal is INVALID_ARGUMENT whose message starts with the field, as a client spelled it
// ("temperature: must be in [0, 2], got 3", "messages[1].content: ..."), so the error object's `param`
// can name it (openai_response.h). A field this server does not implement is refused, never ignored
// (docs/openai-api.md lists them); null stands for "not set", as OpenAI's API takes it.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/generation_request.h"

namespace autouvm::http {

enum class Endpoint { kCompletions, kChatCompletions };

// One prompt of a completions request: text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // Model, sampling, stop, max_tokens, logprobs; the prompt is left unset (prompts / messages hold it).
  engine::GenerationRequest generation;
  std::vector<Prompt> prompts;  // completions: one or more (choices are prompts x n)
  // Chat: the messages as the template sees them (content parts joined into one string per message).
  nlohmann::ordered_json messages;
  bool add_generation_prompt = true;  // chat (an extension, as vLLM has it)
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // the request named a seed: choice i samples with seed + i
  engine::FieldNames names;    // how this request spelled its fields, for the engine's messages
};

struct OpenAiLimits {
  int32_t max_n = 128;        // samples per prompt
  int32_t max_prompts = 64;   // prompts in one completions request
  int32_t max_choices = 256;  // prompts x n
  int32_t max_messages = 4096;
  int32_t max_top_logprobs = 20;
};

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, absl::string_view body,
                                                 const OpenAiLimits& limits = {});

// The field an INVALID_ARGUMENT message of ParseOpenAiRequest or the engine's validation names: the
// text before its first ": " when that is a field path ("messages[0].role"), else "".
std::string FieldOfMessage(absl::string_view message);

}  // namespace autouvm::http
