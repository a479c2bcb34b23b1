// End-to-end: the OpenAI-compatible API (docs/openai-api.md) of a real daemon, through the official
// `openai` npm client (tests/openai/openai_client_test.js, installed into the build tree by the
// openai_npm_install test) and through curl, which shows the raw server-sent events.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/daemon_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;
using nlohmann::json;

constexpr char kKey[] = "sk-test-0123456789";

// A daemon whose HTTP API asks for kKey, with `models_yaml` as its models: section.
class OpenAiDaemon {
 public:
  explicit OpenAiDaemon(const std::string& models_yaml, bool default_model = true)
      : d_({.config_yaml = Config(models_yaml), .generate_default_model = default_model}) {}

  std::string Config(const std::string& models_yaml) {
    std::ofstream(keys_.Sub("keys")) << "# test keys\nsk-other-key\n" << kKey << "\n";
    return "server: {api_key_file: " + keys_.Sub("keys") + "}\nmodels: " + models_yaml + "\n";
  }
  bool Start() { return d_.Start() && d_.WaitForHealth(HealthCheckResponse::SERVING); }
  std::string Url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(d_.http_port()) + path;
  }
  std::string MetricsUrl() {
    autouvm::v1::ServerStatus status;
    grpc::ClientContext ctx;
    EXPECT_TRUE(d_.admin()->GetServerStatus(&ctx, {}, &status).ok());
    return "http://" + status.metrics_address() + "/metrics";
  }
  DaemonProcess& process() { return d_; }

 private:
  TempDir keys_;
  DaemonProcess d_;
};

// node with the npm client installed into the build tree.
int RunClient(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> argv = {"/usr/bin/env", "NODE_PATH=" AUTOUVM_NPM_DIR "/node_modules", "node",
                                   AUTOUVM_SOURCE_DIR "/tests/openai/openai_client_test.js"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string err;
  const int rc = RunCommand(argv, out, &err, 240);
  *out += err;
  return rc;
}

struct Curl {
  int rc = -1;
  int status = 0;
  std::string body;
};

// curl -sS: the status line's code and the body. `data` "": a GET.
Curl CallCurl(const std::string& url, const std::string& data, const std::string& key = kKey) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "-N", "-w", "\n%{http_code}", url};
  if (!key.empty()) {
    argv.push_back("-H");
    argv.push_back(std::string("Authorization: Bearer ") + key);
  }
  TempDir dir;
  if (!data.empty()) {
    std::ofstream(dir.Sub("body")) << data;
    argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", "@" + dir.Sub("body")});
  }
  Curl c;
  std::string err;
  c.rc = RunCommand(argv, &c.body, &err, 120);
  const size_t nl = c.body.rfind('\n');
  if (nl != std::string::npos) {
    c.status = std::atoi(c.body.c_str() + nl + 1);
    c.body.resize(nl);
  }
  return c;
}

TEST(OpenAiE2E, TheOfficialClientListsCompletesChatsStreamsAndIsRefusedAsOpenAiRefuses) {
  OpenAiDaemon d("{tiny-llama: {max_batch: 32, max_queue: 64}}");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  std::string out;
  const int rc = RunClient({"main", d.Url("/v1"), kKey, "tiny-llama"}, &out);
  EXPECT_EQ(rc, 0) << out << "\n" << d.process().Log();
  EXPECT_NE(out.find("checks passed"), std::string::npos) << out;
}

TEST(OpenAiE2E, AFullQueueGets429AndAnAbortedStreamFreesItsSlotAtOnce) {
  OpenAiDaemon d("{tiny-llama: {max_batch: 1, max_queue: 1}}");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  std::string out;
  const int rc = RunClient({"queue", d.Url("/v1"), kKey, "tiny-llama", d.MetricsUrl()}, &out);
  EXPECT_EQ(rc, 0) << out << "\n" << d.process().Log();
  EXPECT_NE(out.find("all 1 checks passed"), std::string::npos) << out;
}

TEST(OpenAiE2E, CurlSeesServerSentEventsEndingInDone) {
  OpenAiDaemon d("{tiny-llama: {max_batch: 4}}");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  const Curl c = CallCurl(d.Url("/v1/completions"),
                          R"({"model": "tiny-llama", "prompt": "Hi", "max_tokens": 4, "temperature": 0,
                              "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(c.rc, 0);
  ASSERT_EQ(c.status, 200) << c.body;
  // Events are "data: <json>" separated by blank lines; the last is [DONE].
  ASSERT_GE(c.body.size(), 2u);
  ASSERT_EQ(c.body.substr(c.body.size() - 2), "\n\n") << c.body;
  std::vector<std::string> events = absl::StrSplit(c.body.substr(0, c.body.size() - 2), "\n\n");
  ASSERT_GE(events.size(), 3u) << c.body;
  EXPECT_EQ(events.back(), "data: [DONE]");
  std::string text;
  int finished = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_EQ(events[i].rfind("data: ", 0), 0u) << events[i];
    ASSERT_EQ(events[i].find('\n'), std::string::npos) << "one line per event: " << events[i];
    const json chunk = json::parse(events[i].substr(6));
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_EQ(chunk["model"], "tiny-llama");
    if (i + 2 == events.size()) {  // the usage chunk
      EXPECT_TRUE(chunk["choices"].empty());
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 4);
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) {
      ++finished;
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(finished, 1);
  const Curl whole = CallCurl(d.Url("/v1/completions"),
                              R"({"model": "tiny-llama", "prompt": "Hi", "max_tokens": 4, "temperature": 0,
                                  "ignore_eos": true})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(json::parse(whole.body)["choices"][0]["text"], text);
}

TEST(OpenAiE2E, CurlGetsOpenAiErrorObjectsForEachRefusal) {
  OpenAiDaemon d("{tiny-llama: {max_batch: 2}}");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  struct Case {
    std::string path, body, key;
    int status;
    std::string message_part;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"/v1/models", "", "", 401, "API key", ""},
      {"/v1/models", "", "wrong", 401, "Incorrect API key", ""},
      {"/v1/completions", "{not json", kKey, 400, "not JSON", ""},
      {"/v1/completions", R"({"model": "tiny-llama"})", kKey, 400, "prompt: is required", "prompt"},
      {"/v1/completions", R"({"model": "tiny-llama", "prompt": "x", "frobnicate": 1})", kKey, 400,
       "frobnicate: is not supported", "frobnicate"},
      {"/v1/chat/completions", R"({"model": "tiny-llama", "messages": [{"role": "wizard", "content": "x"}]})", kKey,
       400, "messages[0].role", "messages[0].role"},
      {"/v1/chat/completions",
       R"({"model": "tiny-llama", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
       kKey, 400, "response_format", "response_format"},
      {"/v1/completions", R"({"model": "tiny-llama", "prompt": "x", "max_tokens": 100000})", kKey, 400, "max_tokens",
       "max_tokens"},
      {"/v1/completions", R"({"model": "nope", "prompt": "x"})", kKey, 404, "nope", ""},
      {"/v1/models/nope", "", kKey, 404, "nope", ""},
      {"/v1/nothing", "", kKey, 404, "no route", ""},
      {"/v1/completions", std::string(5 << 20, ' '), kKey, 413, "over", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body.substr(0, 120));
    const Curl r = CallCurl(d.Url(c.path), c.body, c.key);
    ASSERT_EQ(r.rc, 0);
    EXPECT_EQ(r.status, c.status) << r.body;
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.message_part), std::string::npos) << r.body;
    if (!c.param.empty()) EXPECT_EQ(e["error"]["param"], c.param) << r.body;
  }
  // /health needs no key; the daemon kept serving through every refusal.
  EXPECT_EQ(CallCurl(d.Url("/health"), "", "").status, 200);
  const Curl ok = CallCurl(d.Url("/v1/models"), "");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Note [Listen backlog] (http/openai_server.cc): clients that connect at the same moment are all served,
// none refused or left waiting for a SYN retransmit.
TEST(OpenAiE2E, SixtyFourClientsConnectingAtOnceAreAllServed) {
  OpenAiDaemon d("{tiny-llama: {max_batch: 32, max_queue: 64}}");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  constexpr int kClients = 64;
  std::vector<int> status(kClients, 0);
  std::vector<std::string> errors(kClients);
  std::barrier start(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", d.process().http_port());
      client.set_read_timeout(std::chrono::seconds(60));
      client.set_bearer_token_auth(kKey);
      start.arrive_and_wait();
      auto r = client.Post("/v1/completions", R"({"model": "tiny-llama", "prompt": "x", "max_tokens": 2})",
                           "application/json");
      if (r) {
        status[i] = r->status;
      } else {
        errors[i] = httplib::to_string(r.error());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(status[i], 200) << "client " << i << ": " << errors[i];
}

TEST(OpenAiE2E, AModelWithoutAChatTemplateGets400SayingSoAndStillCompletes) {
  OpenAiDaemon d("{plain: {max_batch: 2}}", /*default_model=*/false);
  ASSERT_EQ(WriteModelEntry(d.process().repository(), {.name = "plain", .chat_template = false}), "");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  const Curl chat =
      CallCurl(d.Url("/v1/chat/completions"), R"({"model": "plain", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(chat.status, 400) << chat.body;
  EXPECT_NE(chat.body.find("has no chat template"), std::string::npos) << chat.body;
  const Curl completion =
      CallCurl(d.Url("/v1/completions"), R"({"model": "plain", "prompt": "x", "max_tokens": 3, "ignore_eos": true})");
  EXPECT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(json::parse(completion.body)["usage"]["completion_tokens"], 3);
}

// A model slow enough on the CPU (tens of ms a token) that a test's client acts well inside one step.
const ModelEntry kSlowModel{
    .name = "slow", .dim = 512, .layers = 8, .heads = 8, .kv_heads = 4, .ffn_dim = 1536, .max_seq = 1024};

// One HTTP/1.1 request on a socket of its own, for what a client library hides: the moment the client
// closes its connection.
class RawRequest {
 public:
  RawRequest(int port, const std::string& path, const std::string& body) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
                                "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                "\r\n\r\n" + body;
    sent_ = ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
  }
  ~RawRequest() { Close(); }
  bool sent() const { return sent_; }
  // Reads until `done(what came so far)` or the connection ends; false on the latter.
  bool ReadUntil(const std::function<bool(const std::string&)>& done) {
    char buf[4096];
    while (!done(received_)) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      received_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool sent_ = false;
  std::string received_;
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The value of one series in the daemon's own scrape (0 when it has none yet).
double Scraped(const std::string& metrics_url, const std::string& series) {
  const size_t host = metrics_url.find("//") + 2;
  const size_t path = metrics_url.find('/', host);
  httplib::Client client("http://" + metrics_url.substr(host, path - host));
  auto r = client.Get(metrics_url.substr(path));
  if (!r || r->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (absl::StartsWith(line, series + " ")) return std::stod(std::string(line.substr(series.size() + 1)));
  }
  return 0;
}

// 503 in OpenAI's error object while the model loads (its model.yaml a FIFO the loader blocks on until the
// test writes it) and while the daemon drains (SIGTERM with a stream of the slow model in flight, which ends
// whole).
TEST(OpenAiE2E, WhileTheModelLoadsAndWhileTheDaemonDrainsRequestsGet503) {
  OpenAiDaemon d("{slow: {max_batch: 2}}", /*default_model=*/false);
  ASSERT_EQ(WriteModelEntry(d.process().repository(), kSlowModel), "");
  const std::string yaml = d.process().repository() + "/slow/model.yaml";
  std::string text;
  {
    std::ifstream in(yaml);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove(yaml);
  ASSERT_EQ(mkfifo(yaml.c_str(), 0644), 0);
  ASSERT_TRUE(d.process().Start()) << d.process().Log();
  const std::string body = R"({"model": "slow", "prompt": "x", "max_tokens": 2})";
  const Curl loading = CallCurl(d.Url("/v1/completions"), body);
  EXPECT_EQ(loading.status, 503) << loading.body;
  const json e = json::parse(loading.body, nullptr, false);
  ASSERT_TRUE(e.is_object() && e.contains("error")) << loading.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("loading"), std::string::npos) << loading.body;
  EXPECT_EQ(e["error"]["type"], "service_unavailable") << loading.body;

  std::ofstream(yaml) << text;  // the loader reads it now
  ASSERT_TRUE(d.process().WaitForHealth(HealthCheckResponse::SERVING)) << d.process().Log();
  RawRequest stream(d.process().http_port(), "/v1/completions",
                    R"({"model": "slow", "prompt": "x", "max_tokens": 400, "ignore_eos": true, "stream": true})");
  ASSERT_TRUE(stream.sent());
  ASSERT_TRUE(stream.ReadUntil([](const std::string& got) { return got.find("\ndata: {") != std::string::npos; }));
  d.process().Signal(SIGTERM);
  ASSERT_TRUE(d.process().WaitForHealth(HealthCheckResponse::NOT_SERVING)) << d.process().Log();
  const Curl draining = CallCurl(d.Url("/v1/completions"), body);
  EXPECT_EQ(draining.status, 503) << draining.body;
  EXPECT_NE(draining.body.find("draining"), std::string::npos) << draining.body;
  // The stream in flight ends whole.
  std::string all;
  EXPECT_TRUE(stream.ReadUntil([&](const std::string& got) {
    all = got;
    return got.find("data: [DONE]") != std::string::npos;
  })) << all;
}

// Note [Seeing a client go] (http/client_watch.h): a client that closes its connection stops its
// generation within one token, streamed or answered whole: the token being computed when it closed is
// the last one. A model slow enough on the CPU (tens of ms a token) that the client's own reading is
// well inside one step; before, a stream stopped at the third token after the close (two writes) and a
// whole response ran to its max_tokens.
TEST(OpenAiE2E, AClientThatDisconnectsStopsItsGenerationWithinOneToken) {
  OpenAiDaemon d("{slow: {max_batch: 2}}", /*default_model=*/false);
  ASSERT_EQ(WriteModelEntry(d.process().repository(), kSlowModel), "");
  ASSERT_TRUE(d.Start()) << d.process().Log();
  const std::string metrics = d.MetricsUrl();
  const std::string generated = "autouvm_generation_tokens_total{model=\"slow\"}";
  const std::string decodes = "autouvm_forward_passes_total{model=\"slow\",kind=\"decode\"}";
  const std::string cancelled = "autouvm_requests_total{code=\"CANCELLED\",model=\"slow\"}";
  const std::string body = R"({"model": "slow", "prompt": "x", "max_tokens": 500, "ignore_eos": true,
                               "temperature": 0, "logprobs": 0)";
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    const double generated_before = Scraped(metrics, generated);
    const double cancelled_before = Scraped(metrics, cancelled);
    const double decodes_before = Scraped(metrics, decodes);
    ASSERT_GE(generated_before, 0);
    RawRequest r(d.process().http_port(), "/v1/completions", body + (stream ? R"(, "stream": true})" : "}"));
    ASSERT_TRUE(r.sent());
    double seen = 0;  // tokens the client knows were computed when it closed
    if (stream) {
      // Every token is an event (logprobs: a token that is part of a character is sent too).
      std::string events;
      ASSERT_TRUE(r.ReadUntil([&](const std::string& got) {
        events = got;
        return Count(got, "\ndata: {") >= 4;  // after the headers and a chunk's size line
      })) << events;
      seen = static_cast<double>(Count(events, "\ndata: {"));
    } else {
      // The first token comes with the prefill; then four decode passes.
      ASSERT_TRUE(Eventually([&] { return Scraped(metrics, decodes) >= decodes_before + 4; }))
          << decodes_before << " -> " << Scraped(metrics, decodes) << "\n"
          << d.process().Log();
      seen = 1 + Scraped(metrics, decodes) - decodes_before;
    }
    r.Close();
    ASSERT_TRUE(Eventually([&] { return Scraped(metrics, cancelled) >= cancelled_before + 1; })) << d.process().Log();
    const double after_close = Scraped(metrics, generated) - generated_before - seen;
    // The one being computed as it closed, and at most one more that was finished while the client read.
    EXPECT_LE(after_close, 2) << seen << " seen when it closed";
    EXPECT_GE(after_close, 0) << seen << " seen when it closed";
  }
  // The daemon serves the next request as before.
  const Curl next =
      CallCurl(d.Url("/v1/completions"), R"({"model": "slow", "prompt": "y", "max_tokens": 2, "ignore_eos": true})");
  EXPECT_EQ(next.status, 200) << next.body;
}

}  // namespace
}  // namespace autouvm::testing
