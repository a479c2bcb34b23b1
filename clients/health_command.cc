// The `health` subcommand: grpc.health.v1.Health/Check, with the stub autouvm_proto generates.
#include "clients/health_command.h"

#include <grpcpp/client_context.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "clients/interrupt_watcher.h"
#include "clients/status_names.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace autouvm::cli {

using grpc::health::v1::HealthCheckResponse;

CLI::App* AddHealthCommand(CLI::App* app, HealthFlags* flags) {
  CLI::App* cmd = app->add_subcommand("health", "Check the server's health (exit 0 only if SERVING)");
  cmd->add_option("--service", flags->service, "Service name to check (default: the whole server)");
  return cmd;
}

int RunHealth(const HealthFlags& flags, const ConnectionFlags& connection) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(connection));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(flags.service);
  HealthCheckResponse response;

  grpc::ClientContext context;
  ApplyDeadline(connection, &context);
  InterruptWatcher watcher(&context);
  const grpc::Status status = stub->Check(&context, request, &response);
  if (watcher.Stop()) return ReportInterrupted();
  if (!status.ok()) return ReportRpcError(status);

  // A value this build does not know (a newer server) has no name: print its number.
  const std::string& name = HealthCheckResponse::ServingStatus_Name(response.status());
  std::cout << (name.empty() ? std::to_string(static_cast<int>(response.status())) : name) << std::endl;
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitFailure;
}

}  // namespace autouvm::cli
