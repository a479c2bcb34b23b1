// Channel, deadline and admin token set-up shared by all commands; see connection.h.
#include "clients/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "clients/file_io.h"

namespace autouvm::cli {
namespace {

// gRPC rejects (or fails the call on) header values outside printable ASCII; say so before calling.
bool IsHeaderSafe(const std::string& token) {
  return std::all_of(token.begin(), token.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

}  // namespace

absl::Status LoadAdminToken(ConnectionFlags* flags, const char* env_token) {
  std::string source;
  if (!flags->token_file.empty()) {
    source = absl::StrCat("--token-file ", flags->token_file);
    absl::StatusOr<std::string> content = ReadWholeFile(flags->token_file);
    if (!content.ok()) return absl::InvalidArgumentError(absl::StrCat("--token-file: ", content.status().message()));
    flags->token = std::string(absl::StripAsciiWhitespace(*content));  // as the daemon reads its own copy
    if (flags->token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": the file holds no token"));
  } else if (env_token != nullptr) {
    source = kAdminTokenEnv;
    flags->token = std::string(absl::StripAsciiWhitespace(env_token));  // empty: no token, as if unset
  }
  if (!IsHeaderSafe(flags->token)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the token may only hold printable ASCII characters (it is sent as a gRPC header)"));
  }
  return absl::OkStatus();
}

absl::Status LoadTls(ConnectionFlags* flags) {
  if (flags->tls_cert.empty() != flags->tls_key.empty()) {
    return absl::InvalidArgumentError(flags->tls_cert.empty() ? "--tls-key: needs --tls-cert (its certificate)"
                                                              : "--tls-cert: needs --tls-key (its private key)");
  }
  auto read = [](const std::string& flag, const std::string& path, const std::string& kind,
                 std::string* out) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> content = ReadWholeFile(path);
    if (!content.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", content.status().message()));
    if (content->find("-----BEGIN ") == std::string::npos || content->find(kind + "-----") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no PEM ", kind, " block"));
    }
    *out = *std::move(content);
    return absl::OkStatus();
  };
  if (absl::Status s = read("--tls-ca", flags->tls_ca, "CERTIFICATE", &flags->tls_ca_pem); !s.ok()) return s;
  if (absl::Status s = read("--tls-cert", flags->tls_cert, "CERTIFICATE", &flags->tls_cert_pem); !s.ok()) return s;
  return read("--tls-key", flags->tls_key, "PRIVATE KEY", &flags->tls_key_pem);
}

void ApplyAdminToken(const ConnectionFlags& flags, grpc::ClientContext* context) {
  if (!flags.token.empty()) context->AddMetadata("authorization", "Bearer " + flags.token);
}

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags, int max_receive_message_bytes) {
  grpc::ChannelArguments args;
  if (max_receive_message_bytes > 0) args.SetMaxReceiveMessageSize(max_receive_message_bytes);
  if (!flags.UsesTls()) return grpc::CreateCustomChannel(flags.addr, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = flags.tls_ca_pem;  // "": the system's CAs
  tls.pem_private_key = flags.tls_key_pem;
  tls.pem_cert_chain = flags.tls_cert_pem;
  if (!flags.tls_server_name.empty()) args.SetSslTargetNameOverride(flags.tls_server_name);
  return grpc::CreateCustomChannel(flags.addr, grpc::SslCredentials(tls), args);
}

void ApplyDeadline(const ConnectionFlags& flags, grpc::ClientContext* context) {
  if (flags.timeout_s <= 0) return;
  const auto timeout =
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(flags.timeout_s));
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace autouvm::cli
