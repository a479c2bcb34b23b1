// `autouvm-cli models` and `autouvm-cli status MODEL`: what autouvm.v1.Admin reports; `autouvm-cli load
// MODEL`, `unload MODEL`, `sleep MODEL` and `wake MODEL`: Admin LoadModel, UnloadModel, SleepModel and
// WakeModel.
//
// Usage: AddModelsCommand / AddStatusCommand before parsing; RunModels / RunStatus if parsed. `models`
// prints a table; `status` prints `key: value` lines, whose keys are the ModelStatus / ModelInfo field
// names, then one `profile:` line per shape seen. With --json either prints the response as one JSON
// line. Returns the process exit status (status_names.h). Thread-safety: run from main's thread only.
#pragma once

#include <string>

#include "clients/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct ModelsFlags {
  bool json = false;
};

struct StatusFlags {
  std::string model;
  bool json = false;
};

// `load` / `unload`: one line saying what was done and how long it took, or the response as JSON.
struct ModelControlFlags {
  std::string model;
  bool json = false;
};

CLI::App* AddModelsCommand(CLI::App* app, ModelsFlags* flags);
CLI::App* AddLoadCommand(CLI::App* app, ModelControlFlags* flags);
CLI::App* AddUnloadCommand(CLI::App* app, ModelControlFlags* flags);
int RunLoad(const ModelControlFlags& flags, const ConnectionFlags& connection);
int RunUnload(const ModelControlFlags& flags, const ConnectionFlags& connection);
// `sleep MODEL` and `wake MODEL`: Admin SleepModel and WakeModel.
CLI::App* AddSleepCommand(CLI::App* app, ModelControlFlags* flags);
CLI::App* AddWakeCommand(CLI::App* app, ModelControlFlags* flags);
int RunSleep(const ModelControlFlags& flags, const ConnectionFlags& connection);
int RunWake(const ModelControlFlags& flags, const ConnectionFlags& connection);
CLI::App* AddStatusCommand(CLI::App* app, StatusFlags* flags);

int RunModels(const ModelsFlags& flags, const ConnectionFlags& connection);
int RunStatus(const StatusFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
