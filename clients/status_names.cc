// Canonical gRPC status code names and error reporting; see status_names.h.
#include "clients/status_names.h"

#include <iostream>

namespace autouvm::cli {

std::string StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:  // DO_NOT_USE, or a code from a newer peer
      return "CODE_" + std::to_string(static_cast<int>(code));
  }
}

int ReportRpcError(const grpc::Status& status) {
  std::cerr << "error: " << StatusCodeName(status.error_code()) << ": " << status.error_message() << std::endl;
  return kExitFailure;
}

int ReportInterrupted() {
  std::cerr << "error: CANCELLED: interrupted" << std::endl;
  return kExitInterrupted;
}

std::string EnumShortName(const std::string& full_name, std::string_view prefix, int value) {
  std::string name = full_name;
  if (name.starts_with(prefix)) name.erase(0, prefix.size());
  return name.empty() ? std::to_string(value) : name;
}

}  // namespace autouvm::cli
