// The `profiles list|show|delete` and `reprofile` subcommands over autouvm.v1.Admin.
#include "clients/profile_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "autouvm/v1/admin.grpc.pb.h"
#include "clients/admin_call.h"
#include "clients/json_output.h"
#include "clients/profile_format.h"
#include "clients/status_names.h"

namespace autouvm::cli {
namespace {

using autouvm::v1::Admin;

// Sets `request`'s key or shape from the options (shape_flags.h has made sure at most one is given).
template <typename Request>
void SetTarget(const ShapeFlags& shape, Request* request) {
  request->set_key(shape.key);
  if (HasShape(shape)) *request->mutable_shape() = ToShapeBucket(shape);
}

// The --full text output: what the summary leaves out of the stored Profile and Plan.
void PrintFull(const autouvm::v1::GetProfileResponse& response) {
  const auto& plan = response.plan();
  std::cout << "trace_ops: " << response.profile().trace().ops_size() << "\n"
            << "tensors: " << response.profile().tensors_size() << "\n"
            << "plan_budget_bytes: " << plan.budget_bytes() << "\n"
            << "plan_window_bytes: " << plan.window_bytes() << "\n"
            << "plan_prefetches: " << plan.prefetches_size() << "\n";
  for (const std::string& id : plan.pinned()) std::cout << "pinned: " << id << "\n";
  std::cout.flush();
}

int RunList(const ProfilesFlags::List& flags, const ConnectionFlags& connection) {
  autouvm::v1::ListProfilesRequest request;
  request.set_model(flags.model);
  autouvm::v1::ListProfilesResponse response;
  const int exit_code = CallAdmin(connection, &Admin::Stub::ListProfiles, request, &response);
  if (exit_code != kExitOk) return exit_code;
  flags.json ? PrintJsonLine(response) : PrintProfileTable(response.profiles());
  return kExitOk;
}

int RunShow(const ProfilesFlags::Show& flags, const ConnectionFlags& connection) {
  autouvm::v1::GetProfileRequest request;
  request.set_model(flags.model);
  SetTarget(flags.shape, &request);
  request.set_include_profile(flags.full);
  autouvm::v1::GetProfileResponse response;
  // A whole profile (trace and plan) can pass gRPC's default 4 MiB response limit.
  const int exit_code = CallAdmin(connection, &Admin::Stub::GetProfile, request, &response,
                                  MakeChannel(connection, kMaxProfileMessageBytes));
  if (exit_code != kExitOk) return exit_code;
  if (flags.json) {
    PrintJsonLine(response);
  } else {
    PrintProfileSummary(response.summary());
    if (flags.full) PrintFull(response);
  }
  return kExitOk;
}

int RunDelete(const ProfilesFlags::Delete& flags, const ConnectionFlags& connection) {
  autouvm::v1::DeleteProfileRequest request;
  request.set_model(flags.model);
  SetTarget(flags.shape, &request);
  autouvm::v1::DeleteProfileResponse response;
  const int exit_code = CallAdmin(connection, &Admin::Stub::DeleteProfile, request, &response);
  if (exit_code != kExitOk) return exit_code;
  if (flags.json) {
    PrintJsonLine(response);
  } else {
    std::cout << "deleted: " << (response.deleted() ? "true" : "false") << "\nkey: " << response.key() << std::endl;
  }
  return kExitOk;
}

}  // namespace

CLI::App* AddProfilesCommand(CLI::App* app, ProfilesFlags* flags) {
  CLI::App* cmd = app->add_subcommand("profiles", "List, show, delete, export and import stored profiles");
  cmd->require_subcommand(1);

  CLI::App* list = cmd->add_subcommand("list", "List the profiles of one model, or of every model");
  list->add_option("model", flags->list.model, "Model name (default: every model)");
  list->add_flag("--json", flags->list.json, "Print the ListProfilesResponse as one JSON line");

  CLI::App* show = cmd->add_subcommand("show", "Show one profile");
  show->add_option("model", flags->show.model, "Model name")->required();
  AddShapeOptions(show, &flags->show.shape, ShapeChoice::kKeyOrShape);
  show->add_flag("--full", flags->show.full, "Also fetch the whole stored Profile and Plan");
  show->add_flag("--json", flags->show.json, "Print the GetProfileResponse as one JSON line");

  CLI::App* remove = cmd->add_subcommand("delete", "Delete one stored profile and its plan");
  remove->add_option("model", flags->remove.model, "Model name")->required();
  AddShapeOptions(remove, &flags->remove.shape, ShapeChoice::kKeyOrShape);
  remove->add_flag("--json", flags->remove.json, "Print the DeleteProfileResponse as one JSON line");

  AddExportCommand(cmd, &flags->export_bundle);
  AddImportCommand(cmd, &flags->import_bundle);
  return cmd;
}

CLI::App* AddReprofileCommand(CLI::App* app, ReprofileFlags* flags) {
  CLI::App* cmd = app->add_subcommand("reprofile", "Mark a model's profiles (all, or one shape) stale");
  cmd->add_option("model", flags->model, "Model name")->required();
  AddShapeOptions(cmd, &flags->shape, ShapeChoice::kOptionalShape);
  cmd->add_flag("--now", flags->now, "Profile at once on an idle slot instead of at the next request");
  cmd->add_flag("--json", flags->json, "Print the ReprofileResponse as one JSON line");
  return cmd;
}

int RunProfiles(const CLI::App& profiles, const ProfilesFlags& flags, const ConnectionFlags& connection) {
  if (profiles.got_subcommand("list")) return RunList(flags.list, connection);
  if (profiles.got_subcommand("show")) return RunShow(flags.show, connection);
  if (profiles.got_subcommand("delete")) return RunDelete(flags.remove, connection);
  if (profiles.got_subcommand("export")) return RunExport(flags.export_bundle, connection);
  if (profiles.got_subcommand("import")) return RunImport(flags.import_bundle, connection);
  return kExitUsage;  // unreachable: require_subcommand(1)
}

int RunReprofile(const ReprofileFlags& flags, const ConnectionFlags& connection) {
  autouvm::v1::ReprofileRequest request;
  request.set_model(flags.model);
  if (HasShape(flags.shape)) *request.mutable_shape() = ToShapeBucket(flags.shape);
  request.set_now(flags.now);
  autouvm::v1::ReprofileResponse response;
  const int exit_code = CallAdmin(connection, &Admin::Stub::Reprofile, request, &response);
  if (exit_code != kExitOk) return exit_code;
  flags.json ? PrintJsonLine(response) : PrintProfileTable(response.profiles());
  return kExitOk;
}

}  // namespace autouvm::cli
