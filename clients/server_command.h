// `autouvm-cli server`: the daemon as a whole (autouvm.v1.Admin/GetServerStatus) — version, backend, GPU
// spec, profile store, admin auth, and the ways it is degraded.
//
// Usage: AddServerCommand before parsing; RunServer if parsed. Prints `key: value` lines (keys are the
// ServerStatus field names; each health detail is its own `health_detail:` line), or with --json the
// ServerStatus as one JSON line. Returns the process exit status (status_names.h). Thread-safety: run
// from main's thread only.
#pragma once

#include "clients/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct ServerFlags {
  bool json = false;
};

CLI::App* AddServerCommand(CLI::App* app, ServerFlags* flags);

int RunServer(const ServerFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
