// The HTTP port's certificate: the checked copies the daemon's TlsFiles keeps (server/tls.h), a
// directory `current` holding tls.crt, tls.key and ca.crt that a rotation swaps whole (a symlink
// renamed). Each handshake serves the generation `current` points at, read again after it changed, so
// both ports serve the same certificate and a bad rotation is refused for both.
//
//   ASSIGN_OR_RETURN(auto certs, TlsCertificates::Load({.dir = tls->current_dir()}));
//   httplib::SSLServer server([&](SSL_CTX& ctx) { return certs->Setup(&ctx); });
//
// Thread-safety: Setup once; the certificate callback runs on any handshake's thread (a mutex).
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace autouvm::http {

struct HttpTls {
  std::string dir;                   // tls.crt, tls.key, ca.crt ("": plaintext)
  bool client_ca = false;            // ask clients for a certificate from dir/ca.crt
  bool require_client_cert = false;  // refuse clients without one
};

class TlsCertificates {
 public:
  // FAILED_PRECONDITION naming the file that does not load.
  static absl::StatusOr<std::unique_ptr<TlsCertificates>> Load(HttpTls tls);
  ~TlsCertificates();
  TlsCertificates(const TlsCertificates&) = delete;
  TlsCertificates& operator=(const TlsCertificates&) = delete;

  // Sets up a server context: the certificate callback, protocol floor, client verification.
  bool Setup(SSL_CTX* ctx);

 private:
  explicit TlsCertificates(HttpTls tls) : tls_(std::move(tls)) {}
  static int OnCertificate(SSL* ssl, void* self);
  // Reads the generation `current` points at when it is not the one loaded.
  absl::Status Refresh();
  void Free();

  const HttpTls tls_;
  std::mutex mu_;
  std::string loaded_;  // the generation loaded (the link's target); guarded by mu_
  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  STACK_OF(X509) * chain_ = nullptr;
};

}  // namespace autouvm::http
