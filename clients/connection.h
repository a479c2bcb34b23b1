// Where and how long the CLI talks to autouvmd: the global --addr and --timeout options.
//
// Usage: parse into a ConnectionFlags, then MakeChannel(flags) once and ApplyDeadline(flags, &context)
// for every call. Thread-safe: plain functions over immutable flags.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

namespace autouvm::cli {

struct ConnectionFlags {
  std::string addr = "127.0.0.1:50051";
  double timeout_s = 60;  // per-call deadline; 0: none
};

// An insecure channel to flags.addr (autouvmd serves plaintext gRPC).
std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags);

// Sets the call deadline to now + flags.timeout_s, unless it is 0.
void ApplyDeadline(const ConnectionFlags& flags, grpc::ClientContext* context);

}  // namespace autouvm::cli
