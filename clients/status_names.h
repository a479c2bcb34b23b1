// Human-readable names for gRPC status codes, and the CLI's one way of reporting a failed RPC.
//
// Every command reports a failed call as `error: <CODE_NAME>: <message>` on stderr, where CODE_NAME is
// the canonical name from grpc/status.h (NOT_FOUND, UNAVAILABLE, ...). Thread-safe: pure functions.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

namespace autouvm::cli {

// Exit statuses shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;        // an RPC failed, or `health` saw anything but SERVING
inline constexpr int kExitUsage = 2;          // bad command line
inline constexpr int kExitInterrupted = 130;  // Ctrl-C (128 + SIGINT), after cancelling the call

// The canonical name of `code` ("NOT_FOUND"); "CODE_<n>" for a value outside the enum.
std::string StatusCodeName(grpc::StatusCode code);

// An enum value's proto name without its common prefix ("MODEL_STATE_READY" -> "READY"); the number when
// the value has no name.
std::string EnumShortName(const std::string& full_name, std::string_view prefix, int value);

// Prints `error: <CODE_NAME>: <message>` to stderr and returns kExitFailure.
int ReportRpcError(const grpc::Status& status);

// Prints `error: CANCELLED: interrupted` to stderr and returns kExitInterrupted.
int ReportInterrupted();

}  // namespace autouvm::cli
