#include "bench/http_stream_client.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"

namespace autouvm::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// The events of one text/event-stream response, fed as its bytes arrive: "data: <json>\n\n" each,
// "data: [DONE]\n\n" last.
class SseStream {
 public:
  explicit SseStream(Clock::time_point start) : start_(start) {}

  void Feed(const char* data, size_t n, Clock::time_point now) {
    buffer_.append(data, n);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos; buffer_.erase(0, end + 2)) {
      const std::string event = buffer_.substr(0, end);
      if (event.rfind("data: ", 0) == 0) OnData(event.substr(6), now);
    }
  }

  // Die()s unless the stream ended with [DONE] after `tokens` tokens, as its usage chunk counts them too.
  DaemonRun Finish(int tokens) {
    if (!done_) Die("the HTTP stream ended without [DONE]: " + buffer_);
    if (run_.gaps_ms.size() + 1 != static_cast<size_t>(tokens) || usage_tokens_ != tokens) {
      Die(absl::StrCat("the HTTP stream sent ", run_.gaps_ms.size() + (started_ ? 1 : 0), " tokens, its usage says ",
                       usage_tokens_, "; asked for ", tokens));
    }
    run_.decode_tokens_per_s = (tokens - 1) / std::chrono::duration<double>(run_.last_token - run_.first_token).count();
    return std::move(run_);
  }

  const std::string& unparsed() const { return buffer_; }

 private:
  void OnData(const std::string& payload, Clock::time_point now) {
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    const Json chunk = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded()) Die("an HTTP stream event is not JSON: " + payload);
    if (chunk.contains("error")) Die("the HTTP stream failed: " + chunk["error"].dump());
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      usage_tokens_ = chunk["usage"].value("completion_tokens", -1);
    }
    const Json& choices = chunk.value("choices", Json::array());
    // A token's chunk carries its logprobs; the finish chunk (and a tail's) carries null.
    if (choices.empty() || !choices[0].contains("logprobs") || choices[0]["logprobs"].is_null()) return;
    if (!started_) {
      started_ = true;
      run_.first_token = now;
      run_.ttft_ms = 1e3 * std::chrono::duration<double>(now - start_).count();
    } else {
      run_.gaps_ms.push_back(1e3 * std::chrono::duration<double>(now - run_.last_token).count());
    }
    run_.last_token = now;
  }

  const Clock::time_point start_;
  std::string buffer_;
  DaemonRun run_;
  bool started_ = false, done_ = false;
  int64_t usage_tokens_ = -1;
};

}  // namespace

DaemonRun GenerateThroughHttp(int port, const std::string& model, const std::vector<int32_t>& prompt, int tokens) {
  const Json body{
      {"model", model},     {"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0},
      {"ignore_eos", true}, {"logprobs", 0},    {"stream", true},       {"stream_options", {{"include_usage", true}}}};
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::minutes(10));  // a burst's first tokens can take long under a budget
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  const Clock::time_point start = Clock::now();
  SseStream stream(start);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    stream.Feed(data, n, Clock::now());
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) Die("POST /v1/completions: " + httplib::to_string(error));
  if (status != 200) Die(absl::StrCat("POST /v1/completions: HTTP ", status, ": ", stream.unparsed()));
  return stream.Finish(tokens);
}

}  // namespace autouvm::bench
