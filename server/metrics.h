// Metrics: the daemon's Prometheus metrics (docs/metrics.md) and the HTTP endpoint that serves them.
// Request metrics are recorded as requests finish (GenerationService); everything else — requests
// running and waiting, what each model's executor and its backend did (UVM counters from CUPTI on CUDA,
// from the simulated mirror on the CPU), profile states, the process — is read from its owner at each
// scrape, so a scrape is always current and nothing is counted twice.
//
//   Metrics metrics({.models = &models, .jobs = jobs, ...});
//   metrics.RecordRequest("tiny-llama", absl::StatusCode::kOk, &result);
//   ASSIGN_OR_RETURN(auto http, MetricsServer::Start("127.0.0.1:9090", &metrics, ready));  // /metrics /readyz
//
// prometheus-cpp's core builds the registry and the text format; cpp-httplib serves it (its own
// Exposer cannot start threads in a process linked with libtorch CUDA: ../shared/gpu/NOTES.md).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/scheduler.h"
#include "server/model_manager.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Counter;
class Histogram;
}  // namespace prometheus

namespace httplib {
class Server;
}

namespace autouvm::profiler {
class ProfileJobs;
class ProfileRepository;
}  // namespace autouvm::profiler

namespace autouvm::server {

class TlsFiles;

struct MetricsSources {
  const ModelManager* models = nullptr;
  const profiler::ProfileJobs* jobs = nullptr;              // null when profiling is off
  const profiler::ProfileRepository* repository = nullptr;  // null when profiling is off
  const TlsFiles* tls = nullptr;                            // null when server.tls is off
  std::string version;
  std::string backend;  // runtime.backend
  std::string gpu;      // runtime.gpu
};

class Metrics {
 public:
  explicit Metrics(MetricsSources sources);
  ~Metrics();

  // A generation request finished with `code`: refused before it ran (`result` null; `model` empty when
  // the request named no served model), or run (its timings and token counts).
  void RecordRequest(const std::string& model, absl::StatusCode code, const engine::GenerationResult* result);
  // The time between two consecutive tokens of one request.
  void RecordTokenGap(const std::string& model, double seconds);

  // Everything, in Prometheus' text format (version 0.0.4).
  std::string Scrape() const;

 private:
  const MetricsSources sources_;
  const std::chrono::steady_clock::time_point started_;
  std::unique_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_;
  prometheus::Family<prometheus::Counter>* generation_tokens_;
  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* inter_token_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* queue_;
};

// The HTTP endpoint: GET /metrics (Metrics::Scrape), /healthz (200 while the process runs), /readyz (200
// when `ready` says so: a model is served and the daemon is not draining; 503 otherwise).
class MetricsServer {
 public:
  // `listen` is host:port (port 0 picks one). UNAVAILABLE naming server.metrics_listen if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen, const Metrics* metrics,
                                                              std::function<bool()> ready);
  ~MetricsServer();  // stops serving and joins its thread

  std::string address() const { return address_; }  // host:port actually bound

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::string address_;
};

}  // namespace autouvm::server
