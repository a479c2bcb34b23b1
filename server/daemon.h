// Daemon: assembles autouvmd — model manager, gRPC server (Generation, Admin, grpc.health.v1, reflection)
// — starts serving at once with health NOT_SERVING, loads the models in the background, then turns
// health SERVING. It opens the profile store (RocksDB under state_dir/profiles; in memory, with a log
// line and a health detail in GetServerStatus saying why, when that cannot be opened) and starts the
// profiling jobs every model's session shares. Drain() is the SIGTERM path: NOT_SERVING, new
// calls get UNAVAILABLE, calls in flight get up to server.drain_timeout to finish, then the server stops.
//
// Thread-safety: Start and Drain are called from one thread at a time; EndDrainNow and port() from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "server/config.h"

namespace grpc {
class Server;
}

namespace autouvm::profiler {
class ProfileStore;
class ProfileRepository;
class ProfileJobs;
}  // namespace autouvm::profiler

namespace autouvm::runtime {
class ComputeDevice;
}

namespace autouvm::engine {
class GenerationFrontend;
class ServingGate;
}  // namespace autouvm::engine

namespace autouvm::http {
class OpenAiServer;
}  // namespace autouvm::http

namespace autouvm::server {

class ModelManager;
class GenerationService;
class AdminService;
class Metrics;
class MetricsServer;
class ProfileAdmin;
class TlsFiles;
class HttpCallMetrics;

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const ServerConfig& config);
  ~Daemon();

  int port() const { return port_; }
  int http_port() const;  // the OpenAI API's port; 0 when server.http_listen is ""
  // Blocks until every model has been tried.
  void WaitLoaded();
  // Returns once the server has stopped; true if every in-flight call finished within the drain timeout.
  bool Drain();
  // From another thread during Drain (a second SIGTERM or SIGINT): the drain stops waiting for the calls
  // in flight; they end at once with UNAVAILABLE, and Drain returns once they have said so.
  void EndDrainNow();

 private:
  explicit Daemon(const ServerConfig& config);

  ServerConfig config_;
  base::RealClock clock_;
  // Declared in the order they are needed: models use the jobs, which use the store.
  std::unique_ptr<profiler::ProfileStore> profiles_;
  std::unique_ptr<profiler::ProfileRepository> repository_;
  std::unique_ptr<profiler::ProfileJobs> jobs_;     // null when profiling is off
  std::unique_ptr<runtime::ComputeDevice> device_;  // runtime.backend; outlives the models
  std::unique_ptr<ModelManager> models_;
  std::unique_ptr<engine::ServingGate> gate_;
  std::unique_ptr<Metrics> metrics_;               // reads the models and the gate at each scrape
  std::unique_ptr<MetricsServer> metrics_server_;  // null when server.metrics_listen is empty
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<ProfileAdmin> profile_admin_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<TlsFiles> tls_;  // null when server.tls is off; outlives the server that reads its copies
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<engine::GenerationFrontend> http_frontend_;
  std::unique_ptr<HttpCallMetrics> http_metrics_;
  std::unique_ptr<http::OpenAiServer> http_;  // null when server.http_listen is ""
  std::thread loader_;
  std::atomic<bool> ended_now_{false};
  int port_ = 0;
};

}  // namespace autouvm::server
