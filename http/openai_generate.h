// One POST /v1/completions or /v1/chat/completions: the body parsed (openai_request.h), a chat
// rendered with the model's template, one engine call per choice (choice_exchange.h), and the reply
// written whole or streamed as server-sent events (openai_response.h).
//
// Thread-safety: called on the HTTP server's threads, one call per request; the stream it sets up is
// driven by the same server afterwards.
#pragma once

#include <httplib.h>

#include "engine/generation_frontend.h"
#include "http/choice_exchange.h"
#include "http/openai_request.h"

namespace autouvm::http {

void ServeGeneration(Endpoint endpoint, const httplib::Request& request, httplib::Response& response,
                     const engine::GenerationFrontend* frontend, CallObserver* observer, const OpenAiLimits& limits);

}  // namespace autouvm::http
