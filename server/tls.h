// The gRPC port's credentials from server.tls (docs/configuration.md): plaintext when TLS is off; else
// TLS with the certificate and key files — and, with client_ca_file, client certificates verified
// against that CA, required with require_client_cert — watched for rotation.
//
// Note [Validated certificate rotation]: gRPC's FileWatcherCertificateProvider re-reads its files every
// interval and serves whatever it read: a garbage certificate, or a key that is not the certificate's,
// fails every handshake from then on (tried on 2026-11-30 with a garbage certificate written over the
// served one), and a missing file keeps the last pair. So
// gRPC watches copies that TlsFiles owns (a private directory, a `current` link to one generation of
// them), and TlsFiles itself reads the configured files every reload_interval: a changed set that
// parses, whose key is the certificate's, becomes a new generation (swapped in by renaming the link,
// which the provider notices); one that does not is logged, naming the key and the file, and the last
// good set stays in use.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<TlsFiles> tls, TlsFiles::Start(config.tls));  // null: TLS off
//   builder.AddListeningPort(addr, tls ? tls->credentials() : grpc::InsecureServerCredentials(), &port);
//
// Thread-safe: the watcher thread is its own; credentials() is set before Start returns; state() may be
// called from any thread (the metrics read it at each scrape).
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace autouvm::server {

class TlsFiles {
 public:
  // Null when TLS is off. FAILED_PRECONDITION naming the server.tls key whose file cannot be read, holds
  // no PEM certificate (or key), does not parse, or — the key — is not the private key of the certificate.
  static absl::StatusOr<std::unique_ptr<TlsFiles>> Start(const TlsSettings& tls);
  ~TlsFiles();  // stops watching and removes the copies
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  // The directory of the checked copies in use (tls.crt, tls.key, ca.crt): a link that each accepted
  // rotation points at the new generation (the HTTP port reads it: http/tls_certificates.h).
  std::string current_dir() const { return dir_ + "/current"; }

  // What the port serves and what became of the rotations tried (docs/metrics.md: autouvm_tls_*).
  struct State {
    int64_t not_after_unix = 0;  // when the certificate served now expires (seconds since the epoch)
    int64_t applied = 0;         // new certificate sets taken since start
    int64_t refused = 0;         // changed sets refused (not parsing, a key not the certificate's, ...)
  };
  State state() const;

 private:
  explicit TlsFiles(TlsSettings tls) : tls_(std::move(tls)) {}
  void Watch();
  // Reads the configured files; a set that differs from the one in use and is valid becomes the next
  // generation. OK when nothing changed.
  absl::Status Reload();

  TlsSettings tls_;
  std::string dir_;            // the private directory (mode 0700)
  std::string last_contents_;  // the configured files' contents as last taken or refused
  int generation_ = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  mutable std::mutex mu_;
  State state_;  // guarded by mu_
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread watcher_;
};

// One line for the daemon's log: what the port asks of clients ("plaintext" when TLS is off).
std::string DescribeTls(const TlsSettings& tls);

}  // namespace autouvm::server
