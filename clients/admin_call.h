// One unary autouvm.v1.Admin call, made the way every admin command makes it: the --timeout deadline,
// the admin bearer token (connection.h), Ctrl-C cancelling the call, and a failure reported on stderr as
// `error: <CODE>: <message>` (status_names.h).
//
//   autouvm::v1::ListProfilesResponse response;
//   const int exit_code = CallAdmin(connection, &autouvm::v1::Admin::Stub::ListProfiles, request, &response);
//   if (exit_code != kExitOk) return exit_code;
//
// Thread-safety: run from main's thread only (one InterruptWatcher at a time).
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>

#include "autouvm/v1/admin.grpc.pb.h"
#include "clients/connection.h"
#include "clients/interrupt_watcher.h"
#include "clients/status_names.h"

namespace autouvm::cli {

// Calls `method` (e.g. &autouvm::v1::Admin::Stub::ListModels) on `channel`, or on a new
// MakeChannel(connection) when null. Returns the exit status: kExitOk, kExitFailure or kExitInterrupted.
template <typename Request, typename Response, typename Method>
int CallAdmin(const ConnectionFlags& connection, Method method, const Request& request, Response* response,
              std::shared_ptr<grpc::Channel> channel = nullptr) {
  auto stub = autouvm::v1::Admin::NewStub(channel != nullptr ? std::move(channel) : MakeChannel(connection));
  grpc::ClientContext context;
  ApplyDeadline(connection, &context);
  ApplyAdminToken(connection, &context);
  InterruptWatcher watcher(&context);
  const grpc::Status status = ((*stub).*method)(&context, request, response);
  if (watcher.Stop()) return ReportInterrupted();
  return status.ok() ? kExitOk : ReportRpcError(status);
}

}  // namespace autouvm::cli
