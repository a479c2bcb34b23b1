#include "http/openai_generate.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "http/client_watch.h"
#include "http/openai_response.h"
#include "tokenizer/chat_template.h"

namespace autouvm::http {
namespace {

// How often a handler waiting for tokens looks at its client (Note [Seeing a client go]) while none come.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(100);

void Send(httplib::Response& response, const Reply& reply) {
  response.status = reply.status;
  response.set_content(reply.body, "application/json");
}

// The chat's prompt: the messages rendered with the model's template, as transformers'
// apply_chat_template renders them (tokenizer/chat_template.h).
absl::StatusOr<std::string> RenderChat(const OpenAiRequest& r, const engine::GenerationTarget& target) {
  if (target.chat_template == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messages: the model ", target.name,
        " has no chat template (set chat_template or chat_template_file in its model.yaml, or convert it "
        "again from a checkpoint whose tokenizer_config.json has one); /v1/completions takes a plain prompt"));
  }
  Json context{{"messages", r.messages},
               {"add_generation_prompt", r.add_generation_prompt},
               {"bos_token", target.bos_token},
               {"eos_token", target.eos_token}};
  auto text = target.chat_template->Render(context);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages: the chat template of ", target.name, " cannot render them: ", text.status().message()));
  }
  return text;
}

// One engine request per choice: prompts x n, choice i of a seeded request sampling with seed + i.
absl::StatusOr<std::vector<engine::GenerationRequest>> ChoiceRequests(const OpenAiRequest& r,
                                                                      const engine::GenerationTarget& target) {
  std::vector<Prompt> prompts = r.prompts;
  bool add_bos = true;
  if (r.endpoint == Endpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(std::string text, RenderChat(r, target));
    prompts = {std::move(text)};
    add_bos = false;  // the template writes bos_token where the model wants it
  }
  std::vector<engine::GenerationRequest> out;
  for (const Prompt& p : prompts) {
    for (int j = 0; j < r.n; ++j) {
      engine::GenerationRequest g = r.generation;
      if (const auto* text = std::get_if<std::string>(&p)) {
        g.text = *text;
        g.add_bos = add_bos;
      } else {
        g.token_ids = std::get<std::vector<int32_t>>(p);
      }
      if (r.seeded) g.seed = *r.generation.seed + out.size();
      out.push_back(std::move(g));
    }
  }
  return out;
}

// What a stream has sent so far, and how it writes each event.
struct Stream {
  explicit Stream(const httplib::Request& request) : watch(request) {}

  ClientWatch watch;
  std::shared_ptr<ChoiceExchange> exchange;
  ResponseHead head;
  engine::GenerationTarget target;
  bool logprobs = false;
  bool include_usage = false;
  int n = 1;
  bool started = false;
  bool ended = false;
  std::vector<size_t> offsets;  // completions: each choice's text so far, for text_offset
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;

  Json Logprobs(int choice, const engine::GeneratedToken& t) {
    Json entry = TokenLogprobJson(head.endpoint, t, *target.tokenizer);
    if (head.endpoint == Endpoint::kChatCompletions) {
      return Json{{"content", Json::array({std::move(entry)})}, {"refusal", nullptr}};
    }
    Json out{{"tokens", Json::array({entry["token"]})},
             {"token_logprobs", Json::array({entry["logprob"]})},
             {"top_logprobs", Json::array({entry["top"]})},
             {"text_offset", Json::array({offsets[choice]})}};
    return out;
  }

  void Write(const ChoiceEvent& e, std::string* out) {
    if (!e.finished) {
      if (e.token.text.empty() && !logprobs) return;  // part of a character: it comes with the next token
      Json lp = logprobs ? Logprobs(e.choice, e.token) : Json();
      offsets[e.choice] += e.token.text.size();
      *out +=
          SseEvent(StreamChunk(head, e.choice, &e.token.text, false, logprobs ? &lp : nullptr, nullptr, include_usage));
      return;
    }
    const engine::GenerationResult& r = e.result;
    if (!r.status.ok()) {
      if (r.status.code() != absl::StatusCode::kCancelled) *out += SseEvent(ErrorObject(r.status));
      return;
    }
    if (e.choice % n == 0) prompt_tokens += r.prompt_tokens;
    completion_tokens += r.completion_tokens;
    if (!e.tail.empty()) *out += SseEvent(StreamChunk(head, e.choice, &e.tail, false, nullptr, nullptr, include_usage));
    const std::string none;
    const bool chat = head.endpoint == Endpoint::kChatCompletions;
    *out += SseEvent(
        StreamChunk(head, e.choice, chat ? nullptr : &none, false, nullptr, FinishReasonName(r.reason), include_usage));
  }

  // Called by the HTTP server until it returns false or the stream is done.
  bool Provide(httplib::DataSink& sink) {
    if (ended) return false;
    // A client that went away (Note [Seeing a client go]): its calls stop at their next token. Asked
    // before and after every wait, so the token in flight when the client closed is the last computed.
    auto gone = [&] {
      if (watch.gone() || !sink.is_writable()) {
        exchange->CancelAll();
        return true;
      }
      return false;
    };
    if (gone()) return false;
    std::string out;
    if (!started) {
      started = true;
      if (head.endpoint == Endpoint::kChatCompletions) {
        const std::string empty;
        for (size_t i = 0; i < offsets.size(); ++i) {
          out += SseEvent(StreamChunk(head, static_cast<int>(i), &empty, true, nullptr, nullptr, include_usage));
        }
      }
    }
    const std::vector<ChoiceEvent> events = exchange->Next(kWatchInterval);
    if (gone()) return false;
    for (const ChoiceEvent& e : events) Write(e, &out);
    if (exchange->drained()) {
      if (include_usage) out += SseEvent(UsageChunk(head, prompt_tokens, completion_tokens));
      out += kSseDone;
      ended = true;
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      exchange->CancelAll();  // the client went away: its calls stop at their next token
      return false;
    }
    if (ended) sink.done();
    return true;
  }
};

void ServeWhole(const std::shared_ptr<ChoiceExchange>& exchange, const ResponseHead& head,
                const engine::GenerationTarget& target, const OpenAiRequest& r, size_t choices,
                const httplib::Request& request, httplib::Response& response) {
  std::vector<ChoiceText> texts(choices);
  const bool logprobs = r.generation.logprobs >= 0;
  const ClientWatch watch(request);
  bool cancelled = false;
  while (!exchange->drained()) {
    // A client that went away (Note [Seeing a client go]): its calls stop at their next token, and end
    // cancelled; what is sent then reaches no one.
    if (!cancelled && watch.gone()) {
      exchange->CancelAll();
      cancelled = true;
    }
    for (ChoiceEvent& e : exchange->Next(kWatchInterval)) {
      ChoiceText& c = texts[e.choice];
      if (e.finished) {
        c.text += e.tail;
        c.result = std::move(e.result);
        c.finished = true;
        continue;
      }
      c.text += e.token.text;
      if (logprobs) c.tokens.push_back(std::move(e.token));
    }
  }
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (!texts[i].result.status.ok()) return Send(response, ErrorReply(texts[i].result.status));
    if (i % r.n == 0) prompt_tokens += texts[i].result.prompt_tokens;
  }
  const Json body = FullResponse(head, texts, logprobs, prompt_tokens, *target.tokenizer);
  response.status = 200;
  response.set_content(JsonText(body), "application/json");
}

}  // namespace

void ServeGeneration(Endpoint endpoint, const httplib::Request& request, httplib::Response& response,
                     const engine::GenerationFrontend* frontend, CallObserver* observer, const OpenAiLimits& limits) {
  auto refuse = [&](const absl::Status& s, const std::string& model) {
    if (observer != nullptr) observer->CallEnded(model, s.code(), nullptr);
    Send(response, ErrorReply(s));
  };
  auto parsed = ParseOpenAiRequest(endpoint, request.body, limits);
  if (!parsed.ok()) return refuse(parsed.status(), "");
  OpenAiRequest& r = *parsed;
  auto target = frontend->models()->ReadyTarget(r.generation.model);
  if (!target.ok()) return refuse(target.status(), "");
  auto requests = ChoiceRequests(r, *target);
  if (!requests.ok()) return refuse(requests.status(), target->name);
  const size_t choices = requests->size();

  auto exchange = ChoiceExchange::Create(frontend, observer);
  if (absl::Status s = exchange->Submit(std::move(*requests), r.names); !s.ok()) {
    return Send(response, ErrorReply(s));  // the exchange reported it
  }
  const bool chat = endpoint == Endpoint::kChatCompletions;
  ResponseHead head{.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", exchange->request_id()),
                    .model = r.generation.model,
                    .created = absl::ToUnixSeconds(absl::Now()),
                    .endpoint = endpoint};
  if (!r.stream) return ServeWhole(exchange, head, *target, r, choices, request, response);

  auto stream = std::make_shared<Stream>(request);
  stream->exchange = exchange;
  stream->head = std::move(head);
  stream->target = *target;
  stream->logprobs = r.generation.logprobs >= 0;
  stream->include_usage = r.include_usage;
  stream->n = r.n;
  stream->offsets.assign(choices, 0);
  response.status = 200;
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Request-Id", exchange->request_id());
  response.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->Provide(sink); },
      [stream](bool) {
        // Whatever ended the stream, its calls must end before the exchange can go (Note [Who keeps the
        // exchange]): cancelled, they end at their next token.
        stream->exchange->CancelAll();
        stream->exchange->WaitFinished();
      });
}

}  // namespace autouvm::http
