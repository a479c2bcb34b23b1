// absl::Status → grpc::Status: the codes are the same numbers (both follow google.rpc.Code).
// Plain inline functions; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace autouvm::server {

// Error messages name what a client sent (a model, a key), which may be megabytes long; gRPC refuses
// trailers past its metadata limit (8 KiB by default), and the client then hears RESOURCE_EXHAUSTED
// ("received initial metadata size exceeds limit") instead of the error. So messages are cut at 1 KiB,
// on a UTF-8 character boundary, saying how long they were.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

inline std::string BoundedMessage(std::string m) {
  if (m.size() <= kMaxStatusMessageBytes) return m;
  size_t cut = kMaxStatusMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xc0) == 0x80) --cut;  // not inside a character
  const size_t all = m.size();
  m.resize(cut);
  return m + "... (" + std::to_string(all) + " bytes in all)";
}

inline grpc::Status Bounded(const grpc::Status& s) {
  return s.ok() ? s : grpc::Status(s.error_code(), BoundedMessage(s.error_message()), s.error_details());
}

inline grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), BoundedMessage(std::string(s.message())));
}

}  // namespace autouvm::server
