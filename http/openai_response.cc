#include "http/openai_response.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/text_stream.h"

namespace autouvm::http {

std::string JsonText(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:  // a model that failed to load: not servable now
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Json ErrorObject(const absl::Status& status) {
  const int http = HttpStatusOf(status.code());
  Json error = Json::object();
  error["message"] = std::string(status.message());
  const char* type = http == 400 || http == 404 ? "invalid_request_error"
                     : http == 401              ? "authentication_error"
                     : http == 429              ? "rate_limit_error"
                     : http == 503              ? "service_unavailable"
                                                : "server_error";
  error["type"] = type;
  const std::string param = status.code() == absl::StatusCode::kInvalidArgument ? FieldOfMessage(status.message()) : "";
  error["param"] = param.empty() ? Json(nullptr) : Json(param);
  const char* code = http == 401   ? "invalid_api_key"
                     : http == 404 ? "model_not_found"
                     : http == 429 ? "queue_full"
                                   : nullptr;
  error["code"] = code == nullptr ? Json(nullptr) : Json(code);
  return Json{{"error", std::move(error)}};
}

Reply ErrorReply(const absl::Status& status) {
  return Reply{.status = HttpStatusOf(status.code()), .body = JsonText(ErrorObject(status))};
}

namespace {

// The bytes of a token's text as OpenAI reports them (a list of byte values).
Json Bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Token texts go into JSON strings, which must be UTF-8: a token that is part of a character (a byte
// of a byte-level tokenizer) is shown with U+FFFD, as vLLM shows it; "bytes" keeps the exact bytes.
std::string Printable(const std::string& text) { return tokenizer::SanitizeUtf8(text); }

std::string TokenText(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  return tokenizer.Decode(ids);
}

}  // namespace

Json TokenLogprobJson(Endpoint endpoint, const engine::GeneratedToken& token, const tokenizer::Tokenizer& tokenizer) {
  const std::string text = TokenText(tokenizer, token.token);
  if (endpoint == Endpoint::kChatCompletions) {
    Json top = Json::array();
    for (const engine::TokenLogprob& t : token.top) {
      const std::string s = TokenText(tokenizer, t.token);
      top.push_back(Json{{"token", Printable(s)}, {"logprob", t.logprob}, {"bytes", Bytes(s)}});
    }
    return Json{{"token", Printable(text)}, {"logprob", token.logprob}, {"bytes", Bytes(text)}, {"top_logprobs", top}};
  }
  // Completions (the legacy format): parallel lists, which a caller merges over the tokens.
  Json top = Json::object();
  for (const engine::TokenLogprob& t : token.top) top[Printable(TokenText(tokenizer, t.token))] = t.logprob;
  return Json{{"token", Printable(text)}, {"logprob", token.logprob}, {"top", top}};
}

namespace {

// The completions endpoint's logprobs object for `tokens`: tokens, token_logprobs, top_logprobs and
// text_offset (each token's offset in the choice's text).
Json CompletionLogprobs(const std::vector<engine::GeneratedToken>& tokens, const tokenizer::Tokenizer& tokenizer) {
  Json out{{"tokens", Json::array()},
           {"token_logprobs", Json::array()},
           {"top_logprobs", Json::array()},
           {"text_offset", Json::array()}};
  size_t offset = 0;
  for (const engine::GeneratedToken& t : tokens) {
    Json entry = TokenLogprobJson(Endpoint::kCompletions, t, tokenizer);
    out["tokens"].push_back(entry["token"]);
    out["token_logprobs"].push_back(entry["logprob"]);
    out["top_logprobs"].push_back(entry["top"]);
    out["text_offset"].push_back(offset);
    offset += t.text.size();
  }
  return out;
}

Json ChatLogprobs(const std::vector<engine::GeneratedToken>& tokens, const tokenizer::Tokenizer& tokenizer) {
  Json content = Json::array();
  for (const engine::GeneratedToken& t : tokens)
    content.push_back(TokenLogprobJson(Endpoint::kChatCompletions, t, tokenizer));
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

}  // namespace

const char* FinishReasonName(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kCancelled:
      return "abort";
  }
  return "stop";
}

Json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

Json FullResponse(const ResponseHead& head, const std::vector<ChoiceText>& choices, bool logprobs,
                  int64_t prompt_tokens, const tokenizer::Tokenizer& tokenizer) {
  const bool chat = head.endpoint == Endpoint::kChatCompletions;
  Json out{{"id", head.id},
           {"object", chat ? "chat.completion" : "text_completion"},
           {"created", head.created},
           {"model", head.model},
           {"choices", Json::array()}};
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceText& c = choices[i];
    completion_tokens += c.result.completion_tokens;
    Json choice{{"index", i}};
    if (chat) {
      choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = logprobs ? ChatLogprobs(c.tokens, tokenizer) : Json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = logprobs ? CompletionLogprobs(c.tokens, tokenizer) : Json(nullptr);
    }
    choice["finish_reason"] = FinishReasonName(c.result.reason);
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = Usage(prompt_tokens, completion_tokens);
  return out;
}

Json StreamChunk(const ResponseHead& head, int index, const std::string* text, bool role, const Json* logprobs,
                 const char* finish_reason, bool with_usage) {
  const bool chat = head.endpoint == Endpoint::kChatCompletions;
  Json choice{{"index", index}};
  if (chat) {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (text != nullptr) delta["content"] = *text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text != nullptr ? *text : "";
  }
  choice["logprobs"] = logprobs != nullptr ? *logprobs : Json(nullptr);
  choice["finish_reason"] = finish_reason != nullptr ? Json(finish_reason) : Json(nullptr);
  Json out{{"id", head.id},
           {"object", chat ? "chat.completion.chunk" : "text_completion"},
           {"created", head.created},
           {"model", head.model},
           {"choices", Json::array({std::move(choice)})}};
  if (with_usage) out["usage"] = nullptr;
  return out;
}

Json UsageChunk(const ResponseHead& head, int64_t prompt_tokens, int64_t completion_tokens) {
  const bool chat = head.endpoint == Endpoint::kChatCompletions;
  return Json{{"id", head.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", head.created},
              {"model", head.model},
              {"choices", Json::array()},
              {"usage", Usage(prompt_tokens, completion_tokens)}};
}

std::string SseEvent(const Json& chunk) { return absl::StrCat("data: ", JsonText(chunk), "\n\n"); }

}  // namespace autouvm::http
