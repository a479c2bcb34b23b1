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

void ApplyAdminToken(const ConnectionFlags& flags, grpc::ClientContext* context) {
  if (!flags.token.empty()) context->AddMetadata("authorization", "Bearer " + flags.token);
}

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags, int max_receive_message_bytes) {
  grpc::ChannelArguments args;
  if (max_receive_message_bytes > 0) args.SetMaxReceiveMessageSize(max_receive_message_bytes);
  return grpc::CreateCustomChannel(flags.addr, grpc::InsecureChannelCredentials(), args);
}

void ApplyDeadline(const ConnectionFlags& flags, grpc::ClientContext* context) {
  if (flags.timeout_s <= 0) return;
  const auto timeout =
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(flags.timeout_s));
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace autouvm::cli
