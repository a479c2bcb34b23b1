// The OpenAI-compatible HTTP API (docs/openai-api.md): GET /v1/models, POST /v1/completions and POST
// /v1/chat/completions, streamed as server-sent events with `stream: true`, on server.http_listen. A
// thin mapper onto the engine's front door (engine/generation_frontend.h), as the gRPC service is.
//
//   ASSIGN_OR_RETURN(auto http, OpenAiServer::Start(options, &frontend, &observer));
//   ... http->port() ...
//   http->Stop();   // after the front door's requests have ended (the daemon's drain)
//
// Thread-safety: Start and Stop on one thread; the handlers run on the server's own threads.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generation_frontend.h"
#include "http/choice_exchange.h"
#include "http/openai_request.h"
#include "http/tls_certificates.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace autouvm::http {

struct HttpOptions {
  std::string listen = "127.0.0.1:8000";  // host:port; port 0 picks a free one
  // Keys a request must carry as "Authorization: Bearer <key>" (empty: none asked). Compared in constant
  // time (api_keys.h).
  std::vector<std::string> api_keys;
  // TLS: the gRPC port's checked copies of the certificate, rotations included (tls_certificates.h).
  HttpTls tls;
  int threads = 256;                        // connections served at once (each stream holds one)
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies get 413
  OpenAiLimits limits;
};

class OpenAiServer {
 public:
  // UNAVAILABLE when it cannot listen, FAILED_PRECONDITION naming the file for a certificate that does
  // not load. `frontend` and `observer` (may be null) outlive the server.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(HttpOptions options,
                                                             const engine::GenerationFrontend* frontend,
                                                             CallObserver* observer);
  ~OpenAiServer();  // Stop()
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  int port() const { return port_; }
  std::string address() const;  // host:port as bound
  void Stop();

 private:
  OpenAiServer(HttpOptions options, const engine::GenerationFrontend* frontend, CallObserver* observer);
  void Route();

  const HttpOptions options_;
  const engine::GenerationFrontend* const frontend_;
  CallObserver* const observer_;
  std::unique_ptr<TlsCertificates> certificates_;  // null: plaintext; outlives http_
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  int listen_fd_ = -1;  // the listening socket, owned by http_ (Note [Listen backlog], openai_server.cc)
};

}  // namespace autouvm::http
