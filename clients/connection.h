// Where and how long the CLI talks to autouvmd, and as whom: the global --addr, --timeout and
// --token-file options (and $AUTOUVM_ADMIN_TOKEN), and TLS: --tls, --tls-ca, --tls-cert, --tls-key,
// --tls-server-name.
//
// Usage: parse into a ConnectionFlags, call LoadAdminToken and LoadTls once, then MakeChannel(flags) for each call's
// channel and ApplyDeadline(flags, &context) for every call — admin_call.h does both, plus
// ApplyAdminToken, for autouvm.v1.Admin calls. Thread-safe: plain functions over immutable flags.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace autouvm::cli {

inline constexpr char kAdminTokenEnv[] = "AUTOUVM_ADMIN_TOKEN";
// The response limit for calls that carry whole profiles (GetProfile with include_profile, ExportProfiles).
inline constexpr int kMaxProfileMessageBytes = 1 << 30;

struct ConnectionFlags {
  std::string addr = "127.0.0.1:50051";
  double timeout_s = 60;        // per-call deadline; 0: none
  std::string token_file;       // --token-file; "": use $AUTOUVM_ADMIN_TOKEN
  std::string token;            // set by LoadAdminToken; "": Admin calls carry no authorization
  bool tls = false;             // --tls: TLS, the server verified against the system's CAs
  std::string tls_ca;           // --tls-ca: PEM CA bundle the server's certificate is verified against
  std::string tls_cert;         // --tls-cert: PEM client certificate chain (mutual TLS)
  std::string tls_key;          // --tls-key: its private key
  std::string tls_server_name;  // --tls-server-name: the name the certificate must carry, if not --addr's host
  // Set by LoadTls: the files' contents.
  std::string tls_ca_pem, tls_cert_pem, tls_key_pem;

  bool UsesTls() const { return tls || !tls_ca.empty() || !tls_cert.empty() || !tls_server_name.empty(); }
};

// Sets flags->token: the content of flags->token_file when a file is given, else `env_token` (the value
// of $AUTOUVM_ADMIN_TOKEN, or null when unset); either without leading and trailing whitespace, which is
// how the daemon reads its token too. INVALID_ARGUMENT naming the
// file (or the variable) when the file cannot be read, holds no token, or the token has characters a
// gRPC header value cannot carry (printable ASCII only).
absl::Status LoadAdminToken(ConnectionFlags* flags, const char* env_token);

// Reads the --tls-* files into flags. INVALID_ARGUMENT naming the flag when a file cannot be read or
// holds no PEM block of its kind, or when --tls-cert and --tls-key are not given together.
absl::Status LoadTls(ConnectionFlags* flags);

// Adds `authorization: Bearer <token>` to the call's metadata when flags.token is set.
void ApplyAdminToken(const ConnectionFlags& flags, grpc::ClientContext* context);

// A channel to flags.addr: TLS when flags.UsesTls() (the daemon's server.tls), else plaintext. A positive
// `max_receive_message_bytes` raises gRPC's 4 MiB limit on responses (profile bundles can be large).
std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags, int max_receive_message_bytes = 0);

// Sets the call deadline to now + flags.timeout_s, unless it is 0.
void ApplyDeadline(const ConnectionFlags& flags, grpc::ClientContext* context);

}  // namespace autouvm::cli
