#include "http/openai_request.h"

#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace autouvm::http {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string TypeName(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

absl::Status WrongType(absl::string_view field, absl::string_view wanted, const Json& v) {
  return Bad(field, absl::StrCat("must be ", wanted, ", got ", TypeName(v)));
}

absl::StatusOr<double> Number(absl::string_view field, const Json& v, double lo, double hi) {
  if (!v.is_number()) return WrongType(field, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", x));
  return x;
}

absl::StatusOr<int64_t> Integer(absl::string_view field, const Json& v, int64_t lo, int64_t hi) {
  // A whole number sent as 2.0 is an integer as Python's OpenAI server takes it; 2.5 is not.
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
      std::fabs(v.get<double>()) < 9.0e15) {
    return Integer(field, Json(static_cast<int64_t>(v.get<double>())), lo, hi);
  }
  if (!v.is_number_integer()) return WrongType(field, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v.get<uint64_t>()));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", x));
  return x;
}

absl::StatusOr<bool> Boolean(absl::string_view field, const Json& v) {
  if (!v.is_boolean()) return WrongType(field, "a boolean", v);
  return v.get<bool>();
}

absl::StatusOr<std::string> String(absl::string_view field, const Json& v) {
  if (!v.is_string()) return WrongType(field, "a string", v);
  return v.get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> TokenIds(absl::string_view field, const Json& v) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t id, Integer(absl::StrCat(field, "[", i, "]"), v[i], 0, INT32_MAX));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// prompt: a string, a list of strings, a list of token ids, or a list of such lists.
absl::Status Prompts(const Json& v, const OpenAiLimits& limits, std::vector<Prompt>* out) {
  if (v.is_string()) {
    out->emplace_back(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("prompt", "a string, an array of strings or an array of token ids", v);
  if (v.empty()) return Bad("prompt", "the prompt is empty");
  if (v[0].is_number()) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds("prompt", v));
    out->emplace_back(std::move(ids));
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(v.size()) > limits.max_prompts) {
    return Bad("prompt",
               absl::StrCat("has ", v.size(), " prompts, at most ", limits.max_prompts, " are served at once"));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = absl::StrCat("prompt[", i, "]");
    if (v[i].is_string()) {
      out->emplace_back(v[i].get<std::string>());
    } else if (v[i].is_array()) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(field, v[i]));
      out->emplace_back(std::move(ids));
    } else {
      return WrongType(field, "a string or an array of token ids", v[i]);
    }
  }
  return absl::OkStatus();
}

// A message's content: a string, or text parts ({"type": "text", "text": ...}) joined.
absl::StatusOr<std::string> Content(const std::string& field, const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return WrongType(field, "a string or an array of content parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = absl::StrCat(field, "[", i, "]");
    if (!v[i].is_object()) return WrongType(part, "an object", v[i]);
    const auto type = v[i].find("type");
    if (type == v[i].end() || !type->is_string()) return Bad(absl::StrCat(part, ".type"), "must be a string");
    if (*type != "text") {
      return Bad(absl::StrCat(part, ".type"),
                 absl::StrCat("content parts of type '", type->get<std::string>(), "' are not supported (only text)"));
    }
    const auto t = v[i].find("text");
    if (t == v[i].end() || !t->is_string()) return Bad(absl::StrCat(part, ".text"), "must be a string");
    text += t->get<std::string>();
  }
  return text;
}

absl::Status Messages(const Json& v, const OpenAiLimits& limits, Json* out) {
  if (!v.is_array()) return WrongType("messages", "an array", v);
  if (v.empty()) return Bad("messages", "must hold at least one message");
  if (static_cast<int64_t>(v.size()) > limits.max_messages) {
    return Bad("messages", absl::StrCat("has ", v.size(), " messages, the limit is ", limits.max_messages));
  }
  *out = Json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!v[i].is_object()) return WrongType(field, "an object", v[i]);
    Json message = Json::object();
    for (const auto& [key, value] : v[i].items()) {
      const std::string f = absl::StrCat(field, ".", key);
      if (key == "role") {
        ASSIGN_OR_RETURN(std::string role, String(f, value));
        if (role != "system" && role != "user" && role != "assistant" && role != "developer") {
          return Bad(f,
                     absl::StrCat("'", role, "' is not a role this server takes (system, developer, user, assistant)"));
        }
        message["role"] = role == "developer" ? "system" : role;
      } else if (key == "content") {
        if (value.is_null()) {
          message["content"] = "";
        } else {
          ASSIGN_OR_RETURN(std::string content, Content(f, value));
          message["content"] = std::move(content);
        }
      } else if (key == "name") {
        ASSIGN_OR_RETURN(std::string name, String(f, value));
        message["name"] = std::move(name);
      } else if ((key == "tool_calls" || key == "refusal" || key == "audio" || key == "function_call") &&
                 (value.is_null() || (value.is_array() && value.empty()))) {
        continue;  // an assistant message echoed back as the API returned it
      } else {
        return Bad(f, "is not supported by this server");
      }
    }
    if (!message.contains("role")) return Bad(absl::StrCat(field, ".role"), "is required");
    if (!message.contains("content")) return Bad(absl::StrCat(field, ".content"), "is required");
    out->push_back(std::move(message));
  }
  return absl::OkStatus();
}

absl::Status Stop(const Json& v, std::vector<std::string>* out) {
  if (v.is_string()) {
    out->push_back(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return WrongType("stop", "a string or an array of strings", v);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSIGN_OR_RETURN(std::string s, String(absl::StrCat("stop[", i, "]"), v[i]));
    out->push_back(std::move(s));
  }
  return absl::OkStatus();
}

// The fields both endpoints take, and those only one does. A handler reads its field's value into
// the request; `null` never reaches it.
using Handler = std::function<absl::Status(const Json& value, OpenAiRequest* r)>;

absl::Status Sampling(const std::string& key, const Json& v, OpenAiRequest* r) {
  engine::GenerationRequest& g = r->generation;
  if (key == "temperature") {
    ASSIGN_OR_RETURN(double t, Number(key, v, 0, 2));
    g.temperature = static_cast<float>(t);
  } else if (key == "top_p") {
    ASSIGN_OR_RETURN(double p, Number(key, v, 0, 1));
    if (p == 0) return Bad(key, "must be in (0, 1], got 0");
    g.top_p = static_cast<float>(p);
  } else if (key == "top_k") {
    ASSIGN_OR_RETURN(int64_t k, Integer(key, v, -1, INT32_MAX));
    g.top_k = k < 0 ? 0 : static_cast<int32_t>(k);  // -1: off, as vLLM spells it
  } else if (key == "presence_penalty") {
    ASSIGN_OR_RETURN(double p, Number(key, v, -2, 2));
    g.presence_penalty = static_cast<float>(p);
  } else if (key == "frequency_penalty") {
    ASSIGN_OR_RETURN(double p, Number(key, v, -2, 2));
    g.frequency_penalty = static_cast<float>(p);
  } else if (key == "repetition_penalty") {
    ASSIGN_OR_RETURN(double p, Number(key, v, 0, 1e6));
    if (p == 0) return Bad(key, "must be > 0, got 0");
    g.repetition_penalty = static_cast<float>(p);
  } else if (key == "seed") {
    if (!v.is_number_integer()) return WrongType(key, "an integer", v);
    g.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    r->seeded = true;
  } else {
    return Bad(key, "is not supported by this server");
  }
  return absl::OkStatus();
}

absl::Status MaxTokens(const std::string& key, const Json& v, OpenAiRequest* r) {
  ASSIGN_OR_RETURN(int64_t n, Integer(key, v, 1, INT32_MAX));
  r->generation.max_tokens = static_cast<uint32_t>(std::min<int64_t>(n, UINT32_MAX));
  r->names.max_tokens = key;
  return absl::OkStatus();
}

// Fields accepted only at their default value: what a client may send without asking for anything.
absl::Status OnlyDefault(const std::string& key, const Json& v, Endpoint endpoint) {
  if (key == "echo" && v.is_boolean() && !v.get<bool>()) return absl::OkStatus();
  if (key == "suffix" && v.is_string() && v.get<std::string>().empty()) return absl::OkStatus();
  if (key == "logit_bias" && v.is_object() && v.empty()) return absl::OkStatus();
  if ((key == "tools" || key == "functions") && v.is_array() && v.empty()) return absl::OkStatus();
  if ((key == "tool_choice" || key == "function_call") && v == "none") return absl::OkStatus();
  if (key == "parallel_tool_calls" && v.is_boolean()) return absl::OkStatus();  // no tools: nothing to do
  if (key == "response_format" && endpoint == Endpoint::kChatCompletions) {
    if (v.is_object() && v.value("type", "") == "text" && v.size() == 1) return absl::OkStatus();
    return Bad(key, "only {\"type\": \"text\"} is supported");
  }
  if (key == "service_tier" && (v == "auto" || v == "default")) return absl::OkStatus();
  if (key == "store" && v.is_boolean() && !v.get<bool>()) return absl::OkStatus();
  if (key == "metadata" && v.is_object()) return absl::OkStatus();  // stored completions only
  return Bad(key, "is not supported by this server");
}

absl::Status Field(Endpoint endpoint, const std::string& key, const Json& v, const OpenAiLimits& limits,
                   OpenAiRequest* r) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  if (key == "model") {
    ASSIGN_OR_RETURN(r->generation.model, String(key, v));
  } else if (key == "prompt" && !chat) {
    return Prompts(v, limits, &r->prompts);
  } else if (key == "messages" && chat) {
    return Messages(v, limits, &r->messages);
  } else if (key == "max_tokens" || (key == "max_completion_tokens" && chat)) {
    return MaxTokens(key, v, r);
  } else if (key == "n") {
    ASSIGN_OR_RETURN(int64_t n, Integer(key, v, 1, limits.max_n));
    r->n = static_cast<int32_t>(n);
  } else if (key == "best_of" && !chat) {
    ASSIGN_OR_RETURN(int64_t b, Integer(key, v, 1, limits.max_n));
    if (b != 1) return Bad(key, "values other than 1 are not supported");
  } else if (key == "stream") {
    ASSIGN_OR_RETURN(r->stream, Boolean(key, v));
  } else if (key == "stream_options") {
    if (!v.is_object()) return WrongType(key, "an object", v);
    for (const auto& [k, x] : v.items()) {
      if (k != "include_usage") return Bad(absl::StrCat(key, ".", k), "is not supported by this server");
      ASSIGN_OR_RETURN(r->include_usage, Boolean("stream_options.include_usage", x));
    }
  } else if (key == "stop") {
    return Stop(v, &r->generation.stop);
  } else if (key == "logprobs" && !chat) {
    ASSIGN_OR_RETURN(int64_t k, Integer(key, v, 0, limits.max_top_logprobs));
    r->generation.logprobs = static_cast<int32_t>(k);
  } else if (key == "logprobs" && chat) {
    ASSIGN_OR_RETURN(bool on, Boolean(key, v));
    if (on && r->generation.logprobs < 0) r->generation.logprobs = 0;
    if (!on) r->generation.logprobs = -2;  // off, and top_logprobs may not ask for any
  } else if (key == "top_logprobs" && chat) {
    return absl::OkStatus();  // read after every field (it depends on logprobs)
  } else if (key == "user") {
    return String(key, v).status();  // identifies the end user to OpenAI's abuse monitoring; nothing here
  } else if (key == "ignore_eos") {
    ASSIGN_OR_RETURN(r->generation.ignore_eos, Boolean(key, v));
  } else if (key == "add_generation_prompt" && chat) {
    ASSIGN_OR_RETURN(r->add_generation_prompt, Boolean(key, v));
  } else if (key == "temperature" || key == "top_p" || key == "top_k" || key == "presence_penalty" ||
             key == "frequency_penalty" || key == "repetition_penalty" || key == "seed") {
    return Sampling(key, v, r);
  } else {
    return OnlyDefault(key, v, endpoint);
  }
  return absl::OkStatus();
}

engine::FieldNames OpenAiNames(Endpoint endpoint) {
  engine::FieldNames n;
  n.text = "prompt";
  n.token_ids = "prompt";
  n.prompt = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  n.temperature = "temperature";
  n.top_p = "top_p";
  n.top_k = "top_k";
  n.repetition_penalty = "repetition_penalty";
  n.presence_penalty = "presence_penalty";
  n.frequency_penalty = "frequency_penalty";
  n.logprobs = endpoint == Endpoint::kChatCompletions ? "top_logprobs" : "logprobs";
  n.stop_token_ids = "stop_token_ids";
  n.stop = "stop";
  return n;
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, absl::string_view body,
                                                 const OpenAiLimits& limits) {
  Json doc;
  try {
    doc = Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is not JSON (byte ", e.byte, "): ", e.what()));
  } catch (const nlohmann::json::exception& e) {  // a number too large for a double (found by fuzzing)
    return absl::InvalidArgumentError(absl::StrCat("the request body is not JSON we can read: ", e.what()));
  }
  if (!doc.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  OpenAiRequest r;
  r.endpoint = endpoint;
  r.names = OpenAiNames(endpoint);
  for (const auto& [key, value] : doc.items()) {
    if (value.is_null()) continue;  // null: not set
    RETURN_IF_ERROR(Field(endpoint, key, value, limits, &r));
  }
  const bool chat = endpoint == Endpoint::kChatCompletions;
  if (r.generation.model.empty() && !doc.contains("model")) return Bad("model", "is required");
  if (chat && r.messages.is_null()) return Bad("messages", "is required");
  if (!chat && r.prompts.empty()) return Bad("prompt", "is required");
  if (chat) {
    const auto top = doc.find("top_logprobs");
    if (top != doc.end() && !top->is_null()) {
      ASSIGN_OR_RETURN(int64_t k, Integer("top_logprobs", *top, 0, limits.max_top_logprobs));
      if (r.generation.logprobs < 0) return Bad("top_logprobs", "needs logprobs: true");
      r.generation.logprobs = static_cast<int32_t>(k);
    }
    if (r.generation.logprobs == -2) r.generation.logprobs = -1;
  }
  if (r.include_usage && !r.stream) return Bad("stream_options", "is only allowed with stream: true");
  const int64_t choices = static_cast<int64_t>(chat ? 1 : r.prompts.size()) * r.n;
  if (choices > limits.max_choices) {
    return Bad("n", absl::StrCat("prompts x n is ", choices, ", at most ", limits.max_choices, " are served at once"));
  }
  return r;
}

std::string FieldOfMessage(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || colon == 0) return "";
  const absl::string_view field = message.substr(0, colon);
  for (char c : field) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' && c != ']') return "";
  }
  return std::string(field);
}

}  // namespace autouvm::http
