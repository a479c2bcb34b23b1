// The `profiles export` and `profiles import` subcommands; see profile_transfer.h.
#include "clients/profile_transfer.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "autouvm/v1/admin.grpc.pb.h"
#include "clients/admin_call.h"
#include "clients/file_io.h"
#include "clients/json_output.h"
#include "clients/status_names.h"

namespace autouvm::cli {
namespace {

using autouvm::v1::Admin;
using autouvm::v1::ProfileBundle;

// A local failure (a file), reported like an RPC error but without a code.
int ReportLocalError(const absl::Status& status) {
  std::cerr << "error: " << status.message() << std::endl;
  return kExitFailure;
}

// Note [Recognising a bundle]: protobuf parses many byte strings that were never a ProfileBundle (an
// empty file parses as an empty message; text often parses as unknown fields). A bundle the daemon wrote
// always has a schema_version and no fields this build does not know, so those are required here.
absl::Status ParseBundle(const std::string& path, const std::string& bytes, ProfileBundle* bundle) {
  auto not_a_bundle = [&path](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a ProfileBundle: ", why));
  };
  if (!bundle->ParseFromString(bytes)) return not_a_bundle("it does not parse");
  bool unknown = !bundle->GetReflection()->GetUnknownFields(*bundle).empty();
  for (const auto& entry : bundle->entries()) {
    unknown = unknown || !entry.GetReflection()->GetUnknownFields(entry).empty();
  }
  if (unknown) return not_a_bundle("it has fields a bundle does not have");
  if (bundle->schema_version() <= 0) return not_a_bundle("it has no schema_version");
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddExportCommand(CLI::App* profiles, ExportFlags* flags) {
  CLI::App* cmd = profiles->add_subcommand("export", "Write stored profiles and plans to a bundle file");
  cmd->add_option("model", flags->model, "Model name (default: every model served)");
  cmd->add_option("-o,--output", flags->output, "The ProfileBundle file to write (binary protobuf)")->required();
  return cmd;
}

CLI::App* AddImportCommand(CLI::App* profiles, ImportFlags* flags) {
  CLI::App* cmd = profiles->add_subcommand("import", "Store the profiles of a bundle file written by export");
  cmd->add_option("file", flags->input, "The ProfileBundle file")->required()->check(CLI::ExistingFile);
  cmd->add_flag("--overwrite", flags->overwrite, "Replace profiles already stored under the same key");
  cmd->add_flag("--json", flags->json, "Print the ImportProfilesResponse as one JSON line");
  return cmd;
}

int RunExport(const ExportFlags& flags, const ConnectionFlags& connection) {
  autouvm::v1::ExportProfilesRequest request;
  request.set_model(flags.model);
  ProfileBundle bundle;
  const int exit_code = CallAdmin(connection, &Admin::Stub::ExportProfiles, request, &bundle,
                                  MakeChannel(connection, kMaxProfileMessageBytes));
  if (exit_code != kExitOk) return exit_code;
  std::string bytes;
  if (!bundle.SerializeToString(&bytes)) {  // only past 2 GiB, which the channel's limit rules out
    return ReportLocalError(absl::InternalError("cannot serialize the bundle"));
  }
  if (absl::Status written = WriteFileAtomically(flags.output, bytes); !written.ok()) {
    return ReportLocalError(written);
  }
  std::cout << "exported " << bundle.entries_size() << (bundle.entries_size() == 1 ? " entry" : " entries") << " to "
            << flags.output << std::endl;
  return kExitOk;
}

int RunImport(const ImportFlags& flags, const ConnectionFlags& connection) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(flags.input);
  if (!bytes.ok()) return ReportLocalError(bytes.status());
  autouvm::v1::ImportProfilesRequest request;
  if (absl::Status parsed = ParseBundle(flags.input, *bytes, request.mutable_bundle()); !parsed.ok()) {
    return ReportLocalError(parsed);
  }
  request.set_overwrite(flags.overwrite);
  autouvm::v1::ImportProfilesResponse response;
  const int exit_code = CallAdmin(connection, &Admin::Stub::ImportProfiles, request, &response);
  if (exit_code != kExitOk) return exit_code;
  if (flags.json) {
    PrintJsonLine(response);
  } else {
    std::cout << "imported: " << response.imported() << "\n"
              << "skipped: " << response.skipped() << "\n"
              << "errors: " << response.errors_size() << std::endl;
    for (const std::string& error : response.errors()) std::cerr << "error: " << error << "\n";
    std::cerr.flush();
  }
  return response.errors().empty() ? kExitOk : kExitFailure;
}

}  // namespace autouvm::cli
