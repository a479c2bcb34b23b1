// autouvm-cli: a command-line client for autouvmd, over gRPC only.
//
//   autouvm-cli [--addr HOST:PORT] [--timeout SECONDS] [--token-file PATH]
//       [--tls | --tls-ca PEM] [--tls-cert PEM --tls-key PEM] [--tls-server-name NAME]
//       <generate|models|status|load|unload|sleep|wake|server|profiles|reprofile|health|bench> [options]
//
// Exit status: 0 success, 1 RPC error (or `health` not SERVING, or `profiles import` refused an entry),
// 2 bad command line, 130 Ctrl-C.
// docs/cli.md is the reference.
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "clients/admin_commands.h"
#include "clients/bench_command.h"
#include "clients/connection.h"
#include "clients/generate_command.h"
#include "clients/health_command.h"
#include "clients/interrupt_watcher.h"
#include "clients/profile_commands.h"
#include "clients/server_command.h"
#include "clients/status_names.h"

#ifndef AUTOUVM_VERSION
#define AUTOUVM_VERSION "unknown"
#endif

namespace autouvm::cli {
namespace {

constexpr double kMaxTimeoutSeconds = 1e6;  // keeps now + timeout far from the clock's range

int Main(int argc, char** argv) {
  BlockInterrupts();  // before gRPC starts threads; see Note [Cancelling on SIGINT]

  CLI::App app("Command-line client for autouvmd", "autouvm-cli");
  app.set_version_flag("--version", AUTOUVM_VERSION);
  app.fallthrough();  // global options may also follow the subcommand
  app.require_subcommand(1);

  ConnectionFlags connection;
  app.add_option("--addr", connection.addr, "Server address")->capture_default_str();
  app.add_option("--timeout", connection.timeout_s, "Per-call deadline in seconds; 0: none")->capture_default_str();
  app.add_option("--token-file", connection.token_file,
                 "File holding the admin token for Admin calls (default: $AUTOUVM_ADMIN_TOKEN)");
  app.add_flag("--tls", connection.tls, "Connect over TLS, verifying the server against the system's CAs");
  app.add_option("--tls-ca", connection.tls_ca, "Connect over TLS, verifying the server against this PEM CA bundle");
  app.add_option("--tls-cert", connection.tls_cert, "PEM client certificate for mutual TLS (with --tls-key)");
  app.add_option("--tls-key", connection.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-server-name", connection.tls_server_name,
                 "Connect over TLS; the name the server's certificate must carry, if not --addr's host");

  GenerateFlags generate_flags;
  ModelsFlags models_flags;
  StatusFlags status_flags;
  HealthFlags health_flags;
  ServerFlags server_flags;
  ProfilesFlags profiles_flags;
  ReprofileFlags reprofile_flags;
  BenchFlags bench_flags;
  ModelControlFlags load_flags, unload_flags, sleep_flags, wake_flags;
  const CLI::App* generate = AddGenerateCommand(&app, &generate_flags);
  const CLI::App* models = AddModelsCommand(&app, &models_flags);
  const CLI::App* status = AddStatusCommand(&app, &status_flags);
  const CLI::App* load = AddLoadCommand(&app, &load_flags);
  const CLI::App* unload = AddUnloadCommand(&app, &unload_flags);
  const CLI::App* sleep = AddSleepCommand(&app, &sleep_flags);
  const CLI::App* wake = AddWakeCommand(&app, &wake_flags);
  const CLI::App* health = AddHealthCommand(&app, &health_flags);
  const CLI::App* server = AddServerCommand(&app, &server_flags);
  const CLI::App* profiles = AddProfilesCommand(&app, &profiles_flags);
  const CLI::App* reprofile = AddReprofileCommand(&app, &reprofile_flags);
  const CLI::App* bench = AddBenchCommand(&app, &bench_flags);

  try {
    app.parse(argc, argv);
    if (!(connection.timeout_s >= 0 && connection.timeout_s <= kMaxTimeoutSeconds)) {  // NaN fails too
      throw CLI::ValidationError("--timeout", "must be between 0 and 1000000 seconds");
    }
    if (const absl::Status loaded = LoadAdminToken(&connection, std::getenv(kAdminTokenEnv)); !loaded.ok()) {
      throw CLI::ValidationError(std::string(loaded.message()));
    }
    if (const absl::Status loaded = LoadTls(&connection); !loaded.ok()) {
      throw CLI::ValidationError(std::string(loaded.message()));
    }
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; everything else is a usage error.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if (generate->parsed()) return RunGenerate(generate_flags, connection);
  if (models->parsed()) return RunModels(models_flags, connection);
  if (status->parsed()) return RunStatus(status_flags, connection);
  if (load->parsed()) return RunLoad(load_flags, connection);
  if (unload->parsed()) return RunUnload(unload_flags, connection);
  if (sleep->parsed()) return RunSleep(sleep_flags, connection);
  if (wake->parsed()) return RunWake(wake_flags, connection);
  if (health->parsed()) return RunHealth(health_flags, connection);
  if (server->parsed()) return RunServer(server_flags, connection);
  if (profiles->parsed()) return RunProfiles(*profiles, profiles_flags, connection);
  if (reprofile->parsed()) return RunReprofile(reprofile_flags, connection);
  if (bench->parsed()) return RunBench(bench_flags, connection);
  return kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace
}  // namespace autouvm::cli

int main(int argc, char** argv) { return autouvm::cli::Main(argc, argv); }
