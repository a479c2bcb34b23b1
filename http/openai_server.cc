#include "http/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "http/api_keys.h"
#include "http/openai_generate.h"
#include "http/openai_response.h"

namespace autouvm::http {
namespace {

void SendError(httplib::Response& response, const absl::Status& status) {
  const Reply reply = ErrorReply(status);
  response.status = reply.status;
  response.set_content(reply.body, "application/json");
}

Json ModelJson(const engine::ModelDirectory::Listing& m) {
  return Json{{"id", m.name},           {"object", "model"}, {"created", m.created_unix},
              {"owned_by", "autouvmd"}, {"ready", m.ready},  {"state", m.state}};
}

}  // namespace

OpenAiServer::OpenAiServer(HttpOptions options, const engine::GenerationFrontend* frontend, CallObserver* observer)
    : options_(std::move(options)), frontend_(frontend), observer_(observer) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(HttpOptions options,
                                                                  const engine::GenerationFrontend* frontend,
                                                                  CallObserver* observer) {
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.http_listen: expected host:port, got '", options.listen, "'"));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), frontend, observer));
  if (!s->options_.tls.dir.empty()) {
    ASSIGN_OR_RETURN(s->certificates_, TlsCertificates::Load(s->options_.tls));
    TlsCertificates* certificates = s->certificates_.get();
    auto tls = std::make_unique<httplib::SSLServer>([certificates](SSL_CTX& ctx) { return certificates->Setup(&ctx); });
    if (!tls->is_valid()) {
      return absl::FailedPreconditionError("server.tls: the HTTP port cannot use the certificate set up for it");
    }
    s->http_ = std::move(tls);
  } else {
    s->http_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(1, s->options_.threads);
  s->http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s->http_->set_payload_max_length(s->options_.max_body_bytes);
  s->http_->set_keep_alive_timeout(30);
  // Note [Listen backlog]: httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into
  // Debian's library). Sixteen clients connecting at once overflowed it: some connections waited for a
  // SYN retransmit (a TTFT of 1.07 s against gRPC's 61 ms on the tiny model) and some failed ("Read").
  // The socket is the one the options callback sees; listen() again on it takes the larger backlog.
  int* listen_fd = &s->listen_fd_;
  s->http_->set_socket_options([listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    *listen_fd = sock;
  });
  s->Route();
  s->port_ = port == 0 ? s->http_->bind_to_any_port(host) : (s->http_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("server.http_listen: cannot listen on ", s->options_.listen));
  }
  if (s->listen_fd_ < 0 || ::listen(s->listen_fd_, SOMAXCONN) != 0) {
    return absl::InternalError(
        absl::StrCat("server.http_listen: cannot set the listen backlog: ", std::strerror(errno)));
  }
  httplib::Server* http = s->http_.get();
  s->thread_ = std::thread([http] { http->listen_after_bind(); });
  // httplib's stop() does nothing until the accept loop runs, and the loop would then never end: a daemon
  // stopped right after it started (its port file could not be written) hung in Stop's join.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!http->is_running() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!http->is_running()) return absl::InternalError("server.http_listen: the HTTP server did not start");
  return s;
}

std::string OpenAiServer::address() const {
  const std::string& l = options_.listen;
  return absl::StrCat(l.substr(0, l.rfind(':')), ":", port_);
}

void OpenAiServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

void OpenAiServer::Route() {
  httplib::Server& h = *http_;
  const std::vector<std::string>* keys = &options_.api_keys;
  // Every /v1/ route asks for a key when keys are configured.
  h.set_pre_routing_handler([keys](const httplib::Request& req, httplib::Response& res) {
    if (keys->empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (ApiKeyAccepted(*keys, req.get_header_value("Authorization")))
      return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, absl::UnauthenticatedError(req.has_header("Authorization")
                                                  ? "Incorrect API key provided"
                                                  : "this server needs an API key: send Authorization: Bearer <key>"));
    return httplib::Server::HandlerResponse::Handled;
  });
  const engine::GenerationFrontend* frontend = frontend_;
  h.Get("/v1/models", [frontend](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    for (const auto& m : frontend->models()->ListModels()) data.push_back(ModelJson(m));
    res.set_content(JsonText(Json{{"object", "list"}, {"data", std::move(data)}}), "application/json");
  });
  h.Get("/v1/models/(.+)", [frontend](const httplib::Request& req, httplib::Response& res) {
    for (const auto& m : frontend->models()->ListModels()) {
      if (m.name == req.matches[1]) return res.set_content(JsonText(ModelJson(m)), "application/json");
    }
    SendError(res, absl::NotFoundError(absl::StrCat("The model '", std::string(req.matches[1]), "' does not exist")));
  });
  CallObserver* observer = observer_;
  const OpenAiLimits* limits = &options_.limits;
  h.Post("/v1/completions", [=](const httplib::Request& req, httplib::Response& res) {
    ServeGeneration(Endpoint::kCompletions, req, res, frontend, observer, *limits);
  });
  h.Post("/v1/chat/completions", [=](const httplib::Request& req, httplib::Response& res) {
    ServeGeneration(Endpoint::kChatCompletions, req, res, frontend, observer, *limits);
  });
  h.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  // Errors the server itself found (no such route, a body over the limit) in OpenAI's error object too.
  const size_t max_body = options_.max_body_bytes;
  h.set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const int status = res.status;
    if (status == 413) {
      SendError(res, absl::InvalidArgumentError(absl::StrCat("the request body is over ", max_body, " bytes")));
    } else if (status == 404) {
      SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path)));
    } else {
      SendError(res, absl::InvalidArgumentError(absl::StrCat("HTTP ", status, " for ", req.method, " ", req.path)));
    }
    res.status = status;
  });
  h.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    AUTOUVM_LOG(ERROR) << "HTTP " << req.method << " " << req.path << ": " << what;
    SendError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
  });
}

}  // namespace autouvm::http
