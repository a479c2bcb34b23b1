// `autouvm-cli profiles list|show|delete|export|import` and `autouvm-cli reprofile`: the profiles
// autouvm.v1.Admin keeps per model and shape (docs/profile-store.md).
//
// Usage: AddProfilesCommand / AddReprofileCommand before parsing; RunProfiles / RunReprofile if parsed.
// `list` and `reprofile` print a table, `show` prints `key: value` lines, `delete` prints `deleted: true`
// or `false`; with --json each prints its response as one JSON line. `export` and `import` are in
// profile_transfer.h. Returns the process exit status (status_names.h). Thread-safety: run from main's
// thread only.
#pragma once

#include <string>

#include "clients/connection.h"
#include "clients/profile_transfer.h"
#include "clients/shape_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct ProfilesFlags {
  struct List {
    std::string model;  // "": every model
    bool json = false;
  } list;
  struct Show {
    std::string model;
    ShapeFlags shape;
    bool full = false;
    bool json = false;
  } show;
  struct Delete {
    std::string model;
    ShapeFlags shape;
    bool json = false;
  } remove;
  ExportFlags export_bundle;
  ImportFlags import_bundle;
};

struct ReprofileFlags {
  std::string model;
  ShapeFlags shape;  // no shape: every profile of the model
  bool now = false;
  bool json = false;
};

CLI::App* AddProfilesCommand(CLI::App* app, ProfilesFlags* flags);
CLI::App* AddReprofileCommand(CLI::App* app, ReprofileFlags* flags);

// `profiles` is the command AddProfilesCommand returned; which of its subcommands was parsed decides.
int RunProfiles(const CLI::App& profiles, const ProfilesFlags& flags, const ConnectionFlags& connection);
int RunReprofile(const ReprofileFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
