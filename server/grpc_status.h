// absl::Status → grpc::Status: the codes are the same numbers (both follow google.rpc.Code).
// A plain inline function; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace autouvm::server {

inline grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace autouvm::server
