// The `server` subcommand over autouvm.v1.Admin; see server_command.h.
#include "clients/server_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>

#include "autouvm/v1/admin.grpc.pb.h"
#include "clients/admin_call.h"
#include "clients/json_output.h"
#include "clients/status_names.h"

namespace autouvm::cli {
namespace {

void PrintServerStatus(const autouvm::v1::ServerStatus& status) {
  auto line = [](std::string_view key, const auto& value) { std::cout << key << ": " << value << "\n"; };
  line("version", status.version());
  line("backend", status.backend());
  line("gpu", status.gpu());
  line("profile_store", status.profile_store());
  line("admin_auth", status.admin_auth() ? "true" : "false");
  line("metrics_address", status.metrics_address().empty() ? "-" : status.metrics_address());
  line("corrupt_profiles_total", status.corrupt_profiles_total());
  line("identity_mismatches_total", status.identity_mismatches_total());
  line("mismatched_ops_total", status.mismatched_ops_total());
  for (const std::string& detail : status.health_details()) line("health_detail", detail);
  std::cout.flush();
}

}  // namespace

CLI::App* AddServerCommand(CLI::App* app, ServerFlags* flags) {
  CLI::App* cmd = app->add_subcommand("server", "Show the daemon's status: version, backend, GPU, profile store");
  cmd->add_flag("--json", flags->json, "Print the ServerStatus as one JSON line");
  return cmd;
}

int RunServer(const ServerFlags& flags, const ConnectionFlags& connection) {
  autouvm::v1::ServerStatus response;
  const int exit_code = CallAdmin(connection, &autouvm::v1::Admin::Stub::GetServerStatus,
                                  autouvm::v1::GetServerStatusRequest(), &response);
  if (exit_code != kExitOk) return exit_code;
  flags.json ? PrintJsonLine(response) : PrintServerStatus(response);
  return kExitOk;
}

}  // namespace autouvm::cli
