// autouvmd: the inference daemon. `autouvmd` alone runs the embedded default config (config/autouvmd.yaml);
// `--config FILE` reads a file instead, and flags override either. SIGTERM or SIGINT drains and exits 0; a second one
// ends the drain at once (still exit 0).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "base/log.h"
#include "base/yaml_fields.h"
#include "server/config.h"
#include "server/daemon.h"
#include "server/shutdown_signals.h"

namespace {

// Writes the bound port to `path` atomically, so that a reader never sees a partial file.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port;
    if (!out.good()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  // A crash prints a symbolized stack trace to stderr before the process dies.
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  // SIGTERM and SIGINT drain, a second one ends the drain (Note [Shutdown signals]); over abseil's.
  auto signals = autouvm::server::ShutdownSignals::Install();
  if (!signals.ok()) {
    AUTOUVM_LOG(ERROR) << "cannot start: " << signals.status().message();
    return 1;
  }

  CLI::App app{"autouvmd: serves LLMs larger than the GPU from CUDA unified memory"};
  std::string config_path, listen, metrics_listen, http_listen, repository, state_dir, drain_timeout, port_file,
      http_port_file;
  int64_t threads = -1;
  bool print_config = false;
  app.add_option("--config", config_path, "YAML config file (default: the embedded config/autouvmd.yaml)");
  app.add_option("--listen", listen, "gRPC address host:port (port 0: pick a free one); overrides server.listen");
  app.add_option("--metrics-listen", metrics_listen, "overrides server.metrics_listen");
  app.add_option("--http-listen", http_listen, "the OpenAI API's address (\"\": off); overrides server.http_listen");
  app.add_option("--model-repository", repository, "overrides repository.path");
  app.add_option("--state-dir", state_dir, "overrides state_dir");
  app.add_option("--drain-timeout", drain_timeout, "overrides server.drain_timeout (e.g. 30s)");
  app.add_option("--threads", threads, "overrides runtime.intra_op_threads");
  app.add_option("--port-file", port_file, "write the bound gRPC port to this file once listening");
  app.add_option("--http-port-file", http_port_file, "write the bound HTTP (OpenAI API) port to this file");
  app.add_flag("--print-default-config", print_config, "print the embedded default config and exit");
  std::string log_level = "info", log_format = "text";
  app.add_option("--log-level", log_level, "debug, info, warning or error (default info)");
  app.add_option("--log-format", log_format, "text, or json: one JSON object per line, for log collectors");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" with exit code 0; any other is a usage error: exit 2, as a bad config is.
    if (e.get_exit_code() == 0) return app.exit(e);
    AUTOUVM_LOG(ERROR) << "invalid command line: " << e.what() << " (autouvmd --help lists the flags)";
    return 2;
  }
  autouvm::base::LogOptions log;
  for (const auto& [flag, parsed] :
       {std::pair{"--log-level", autouvm::base::ParseLogLevel(log_level, &log.level)},
        std::pair{"--log-format", autouvm::base::ParseLogFormat(log_format, &log.format)}}) {
    if (!parsed.ok()) {
      AUTOUVM_LOG(ERROR) << "invalid command line: " << flag << ": " << parsed.message()
                         << " (autouvmd --help lists the flags)";
      return 2;
    }
  }
  autouvm::base::InitLogging(log);
  if (print_config) {
    std::cout << autouvm::server::EmbeddedDefaultConfig();
    return 0;
  }

  auto config = autouvm::server::LoadServerConfig(config_path);
  if (!config.ok()) {
    AUTOUVM_LOG(ERROR) << "invalid configuration: " << config.status().message();
    return 2;
  }
  if (!listen.empty()) config->listen = listen;
  if (app.count("--metrics-listen")) config->metrics_listen = metrics_listen;
  if (app.count("--http-listen")) config->http_listen = http_listen;
  if (!repository.empty()) config->model_repository = repository;
  if (!state_dir.empty()) config->state_dir = state_dir;
  if (threads >= 0) config->intra_op_threads = threads;
  if (!drain_timeout.empty()) {
    if (!autouvm::base::ParseDurationMs(drain_timeout, &config->drain_timeout_ms).ok()) {
      AUTOUVM_LOG(ERROR) << "invalid configuration: --drain-timeout: expected a duration such as 30s";
      return 2;
    }
  }

  auto daemon = autouvm::server::Daemon::Start(*config);
  if (!daemon.ok()) {
    AUTOUVM_LOG(ERROR) << "cannot start: " << daemon.status().message();
    return 1;
  }
  // The HTTP port first: a test that sees the gRPC port file reads both.
  if (!http_port_file.empty() && !WritePortFile(http_port_file, (*daemon)->http_port())) {
    AUTOUVM_LOG(ERROR) << "cannot write --http-port-file " << http_port_file;
    return 1;
  }
  if (!port_file.empty() && !WritePortFile(port_file, (*daemon)->port())) {
    AUTOUVM_LOG(ERROR) << "cannot write --port-file " << port_file;
    return 1;
  }
  AUTOUVM_LOG(INFO) << "try  autouvm-cli --addr 127.0.0.1:" << (*daemon)->port()
                    << (config->tls.enabled() ? " --tls-ca CA.pem --tls-server-name NAME" : "") << " generate --model "
                    << (config->generate_default_model.empty() ? "NAME" : config->generate_default_model)
                    << " --prompt 'Hello'";

  const int sig = (*signals)->Wait();
  AUTOUVM_LOG(INFO) << "received " << autouvm::server::SignalName(sig) << "; another one ends the drain at once";
  autouvm::server::Daemon* d = daemon->get();
  std::thread drain([d, &signals] {
    d->Drain();
    (*signals)->Wake();
  });
  // The drain runs on its own thread so that this one is free for a second signal.
  while (int again = (*signals)->Wait()) {
    AUTOUVM_LOG(WARNING) << "received " << autouvm::server::SignalName(again) << " during the drain";
    d->EndDrainNow();
  }
  drain.join();
  return 0;
}
