// The JSON an OpenAI client reads back: error objects with their HTTP status, whole responses, stream
// chunks, and the model list. One ChoiceText per choice accumulates what the engine streamed.
//
//   Reply e = ErrorReply(status);                    // {"error": {...}} and 400/401/404/413/429/503/...
//   std::string chunk = ChatChunk(head, index, delta, nullptr, std::nullopt);
//
// Pure functions of their arguments; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/generation_types.h"
#include "http/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::http {

using Json = nlohmann::ordered_json;

// `value` as JSON text; bytes that are not UTF-8 (a token's part of a character, a client's bytes echoed in
// an error) become U+FFFD, as JSON text must be UTF-8.
std::string JsonText(const Json& value);

struct Reply {
  int status = 200;
  std::string body;
};

// The HTTP status an engine or parse error maps to, and its error object ({"error": {"message", "type",
// "param", "code"}}), as OpenAI's API sends them.
int HttpStatusOf(absl::StatusCode code);
Reply ErrorReply(const absl::Status& status);
Json ErrorObject(const absl::Status& status);

// What every response and chunk of one request repeats.
struct ResponseHead {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  std::string model;
  int64_t created = 0;  // unix seconds
  Endpoint endpoint = Endpoint::kCompletions;
};

// One token's logprob entry in the endpoint's format. `tokenizer` decodes each token's text.
Json TokenLogprobJson(Endpoint endpoint, const engine::GeneratedToken& token, const tokenizer::Tokenizer& tokenizer);

// One choice as the engine produced it.
struct ChoiceText {
  std::string text;
  std::vector<engine::GeneratedToken> tokens;  // kept only when logprobs were asked for
  engine::GenerationResult result;
  bool finished = false;
};

const char* FinishReasonName(engine::FinishReason reason);

// The whole (non-streamed) response: choices in order, usage summed. `prompt_tokens` counts each
// prompt once (n samples of one prompt share it).
Json FullResponse(const ResponseHead& head, const std::vector<ChoiceText>& choices, bool logprobs,
                  int64_t prompt_tokens, const tokenizer::Tokenizer& tokenizer);

// One stream chunk's JSON for choice `index`: `text` (chat: the delta's content; `role` adds the
// assistant role, as the first chunk of each choice does), the token's logprobs (null: none), and the
// finish reason (null while running). `with_usage`: "usage": null, as chunks carry it when the
// request asked for usage.
Json StreamChunk(const ResponseHead& head, int index, const std::string* text, bool role, const Json* logprobs,
                 const char* finish_reason, bool with_usage);
// The last chunk of a stream that asked for usage: no choices, the totals.
Json UsageChunk(const ResponseHead& head, int64_t prompt_tokens, int64_t completion_tokens);
Json Usage(int64_t prompt_tokens, int64_t completion_tokens);

// "data: <json>\n\n", the server-sent event a chunk travels in.
std::string SseEvent(const Json& chunk);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace autouvm::http
