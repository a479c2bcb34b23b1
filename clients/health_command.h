// `autouvm-cli health [--service NAME]`: the standard grpc.health.v1.Health/Check.
//
// Usage: AddHealthCommand before parsing; RunHealth if parsed. Prints the serving status (SERVING,
// NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN) on stdout and returns 0 only for SERVING, 1 otherwise (including
// RPC errors, reported as `error: CODE: message`). Thread-safety: run from main's thread only.
#pragma once

#include <string>

#include "clients/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct HealthFlags {
  std::string service;  // empty: the server as a whole
};

CLI::App* AddHealthCommand(CLI::App* app, HealthFlags* flags);

int RunHealth(const HealthFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
