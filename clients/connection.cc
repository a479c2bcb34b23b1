// Channel and deadline set-up shared by all commands; see connection.h.
#include "clients/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>

namespace autouvm::cli {

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags) {
  return grpc::CreateChannel(flags.addr, grpc::InsecureChannelCredentials());
}

void ApplyDeadline(const ConnectionFlags& flags, grpc::ClientContext* context) {
  if (flags.timeout_s <= 0) return;
  const auto timeout =
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(flags.timeout_s));
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace autouvm::cli
