// `autouvm-cli generate`: runs one request on autouvm.v1.Generation and prints the result.
//
// Usage: AddGenerateCommand(&app, &flags) before parsing; RunGenerate(flags, connection) if the
// subcommand was parsed. Output (see docs/cli.md): text on stdout (streamed unless --unary), one summary
// line on stderr; or, with --json, one JSON line per response message on stdout. Returns the process exit
// status (status_names.h). Thread-safety: run from main's thread only (it writes stdout and stderr).
#pragma once

#include "clients/connection.h"
#include "clients/generate_request.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

// Adds the subcommand and its options to `app`; parsed values land in `*flags`, which must outlive parsing.
CLI::App* AddGenerateCommand(CLI::App* app, GenerateFlags* flags);

int RunGenerate(const GenerateFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
