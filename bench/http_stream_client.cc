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

// The events of one text/event-stream response of `n` choices, fed as its bytes arrive:
// "data: <json>\n\n" each, "data: [DONE]\n\n" last.
class SseStream {
 public:
  SseStream(Clock::time_point start, int n) : start_(start), runs_(static_cast<size_t>(n)), started_(n, false) {}

  void Feed(const char* data, size_t n, Clock::time_point now) {
    buffer_.append(data, n);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos; buffer_.erase(0, end + 2)) {
      const std::string event = buffer_.substr(0, end);
      if (event.rfind("data: ", 0) == 0) OnData(event.substr(6), now);
    }
  }

  // Die()s unless the stream ended with [DONE] after `tokens` tokens of each choice, as its usage chunk
  // counts them too.
  std::vector<DaemonRun> Finish(int tokens) {
    if (!done_) Die("the HTTP stream ended without [DONE]: " + buffer_);
    if (usage_tokens_ != tokens * static_cast<int64_t>(runs_.size())) {
      Die(absl::StrCat("the HTTP stream's usage says ", usage_tokens_, " tokens; asked for ", tokens, " x ",
                       runs_.size()));
    }
    for (size_t i = 0; i < runs_.size(); ++i) {
      DaemonRun& run = runs_[i];
      if (!started_[i] || run.gaps_ms.size() + 1 != static_cast<size_t>(tokens)) {
        Die(absl::StrCat("the HTTP stream sent ", started_[i] ? run.gaps_ms.size() + 1 : 0, " tokens of choice ", i,
                         "; asked for ", tokens));
      }
      run.decode_tokens_per_s = (tokens - 1) / std::chrono::duration<double>(run.last_token - run.first_token).count();
    }
    return std::move(runs_);
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
    // A token's chunk carries its logprobs; the finish chunk (and a tail's) carries null.
    for (const Json& choice : chunk.value("choices", Json::array())) {
      if (!choice.contains("logprobs") || choice["logprobs"].is_null()) continue;
      const int64_t i = choice.value("index", -1);
      if (i < 0 || i >= static_cast<int64_t>(runs_.size())) Die("an HTTP stream event of no asked choice: " + payload);
      DaemonRun& run = runs_[static_cast<size_t>(i)];
      if (!started_[static_cast<size_t>(i)]) {
        started_[static_cast<size_t>(i)] = true;
        run.first_token = now;
        run.ttft_ms = 1e3 * std::chrono::duration<double>(now - start_).count();
      } else {
        run.gaps_ms.push_back(1e3 * std::chrono::duration<double>(now - run.last_token).count());
      }
      run.last_token = now;
    }
  }

  const Clock::time_point start_;
  std::string buffer_;
  std::vector<DaemonRun> runs_;
  std::vector<bool> started_;
  bool done_ = false;
  int64_t usage_tokens_ = -1;
};

}  // namespace

DaemonRun GenerateThroughHttp(int port, const std::string& model, const std::vector<int32_t>& prompt, int tokens) {
  return GenerateChoicesThroughHttp(port, model, prompt, tokens, {.n = 1})[0];
}

std::vector<DaemonRun> GenerateChoicesThroughHttp(int port, const std::string& model,
                                                  const std::vector<int32_t>& prompt, int tokens,
                                                  const HttpSampling& sampling) {
  Json body{{"model", model},
            {"prompt", prompt},
            {"max_tokens", tokens},
            {"n", sampling.n},
            {"temperature", sampling.temperature},
            {"ignore_eos", true},
            {"logprobs", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (sampling.seed >= 0) body["seed"] = sampling.seed;
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
  SseStream stream(start, sampling.n);
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
