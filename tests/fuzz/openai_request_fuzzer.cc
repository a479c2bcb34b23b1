// Fuzzes the OpenAI request parser (http/openai_request.h) with arbitrary bodies, for both endpoints: it
// must never crash, and what it accepts must hold the invariants the HTTP handler relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "http/openai_request.h"
#include "http/openai_response.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const autouvm::http::OpenAiLimits limits;
  for (auto endpoint : {autouvm::http::Endpoint::kCompletions, autouvm::http::Endpoint::kChatCompletions}) {
    auto r = autouvm::http::ParseOpenAiRequest(endpoint, body, limits);
    if (!r.ok()) {
      Check(r.status().code() == absl::StatusCode::kInvalidArgument);
      // The error object is what a client gets: it must serialise whatever the body held.
      const auto reply = autouvm::http::ErrorReply(r.status());
      Check(reply.status == 400 && !reply.body.empty());
      continue;
    }
    Check(r->n >= 1 && r->n <= limits.max_n);
    Check(r->generation.logprobs >= -1 && r->generation.logprobs <= limits.max_top_logprobs);
    if (endpoint == autouvm::http::Endpoint::kChatCompletions) {
      Check(r->messages.is_array() && !r->messages.empty());
      for (const auto& m : r->messages) Check(m.contains("role") && m["content"].is_string());
    } else {
      Check(!r->prompts.empty());
      Check(static_cast<int64_t>(r->prompts.size()) * r->n <= limits.max_choices);
    }
    if (r->include_usage) Check(r->stream);
  }
  return 0;
}
