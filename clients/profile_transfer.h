// `autouvm-cli profiles export [MODEL] -o FILE` and `autouvm-cli profiles import FILE [--overwrite]`:
// moving stored profiles between replicas as an autouvm.v1.ProfileBundle file (binary protobuf).
//
// Usage: AddExportCommand / AddImportCommand on the `profiles` command before parsing (profile_commands.h
// does it); RunExport / RunImport if parsed. Export writes FILE atomically (FILE.tmp, then a rename) and
// prints the entry count; import prints `imported`, `skipped` and `errors` counts and each refused entry
// on stderr, and returns 1 if any was refused. Thread-safety: run from main's thread only.
#pragma once

#include <string>

#include "clients/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct ExportFlags {
  std::string model;  // "": every model served
  std::string output;
};

struct ImportFlags {
  std::string input;
  bool overwrite = false;
  bool json = false;
};

CLI::App* AddExportCommand(CLI::App* profiles, ExportFlags* flags);
CLI::App* AddImportCommand(CLI::App* profiles, ImportFlags* flags);

int RunExport(const ExportFlags& flags, const ConnectionFlags& connection);
int RunImport(const ImportFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
