#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "engine/generation_frontend.h"
#include "engine/model_runner.h"
#include "engine/serving_gate.h"
#include "http/api_keys.h"
#include "http/openai_server.h"
#include "profiler/model_session.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "runtime/compute_device.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"
#include "runtime/weight_codec.h"
#include "server/admin_service.h"
#include "server/generation_service.h"
#include "server/metrics.h"
#include "server/model_manager.h"
#include "server/profile_admin.h"
#include "server/request_validation.h"
#include "server/tls.h"

#ifndef AUTOUVM_VERSION
#define AUTOUVM_VERSION "unknown"
#endif

namespace autouvm::server {

namespace {

// The admin token: the file admin.token_file names, else AUTOUVM_ADMIN_TOKEN, else none.
absl::StatusOr<std::string> AdminToken(const ServerConfig& config) {
  std::string token;
  if (!config.admin_token_file.empty()) {
    auto text = base::ReadTextFile(config.admin_token_file, "the admin token file");
    if (!text.ok()) return absl::FailedPreconditionError(absl::StrCat("admin.token_file: ", text.status().message()));
    token = std::string(absl::StripAsciiWhitespace(*text));
    if (token.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("admin.token_file: ", config.admin_token_file, " is empty"));
    }
  } else if (const char* env = std::getenv("AUTOUVM_ADMIN_TOKEN"); env != nullptr) {
    token = std::string(absl::StripAsciiWhitespace(env));
  }
  return token;
}

}  // namespace

// The HTTP API's calls in the same metrics as the gRPC service's.
class HttpCallMetrics final : public http::CallObserver {
 public:
  explicit HttpCallMetrics(Metrics* metrics) : metrics_(metrics) {}
  void CallEnded(const std::string& model, absl::StatusCode code, const engine::GenerationResult* result) override {
    metrics_->RecordRequest(model, code, result);
  }
  void TokenGap(const std::string& model, double seconds) override { metrics_->RecordTokenGap(model, seconds); }

 private:
  Metrics* const metrics_;
};

// The OpenAI-compatible API on server.http_listen, with the gRPC port's certificate (server.tls).
static absl::StatusOr<std::unique_ptr<http::OpenAiServer>> StartHttp(const ServerConfig& config, const TlsFiles* tls,
                                                                     const engine::GenerationFrontend* frontend,
                                                                     http::CallObserver* observer) {
  http::HttpOptions options;
  options.listen = config.http_listen;
  if (!config.api_key_file.empty()) {
    ASSIGN_OR_RETURN(options.api_keys, http::ReadApiKeyFile(config.api_key_file));
  }
  if (tls != nullptr) {
    options.tls = {.dir = tls->current_dir(),
                   .client_ca = !config.tls.client_ca_file.empty(),
                   .require_client_cert = config.tls.require_client_cert};
  }
  options.threads = static_cast<int>(config.http_threads);
  options.max_body_bytes = static_cast<size_t>(config.limits.max_receive_message_bytes);
  return http::OpenAiServer::Start(std::move(options), frontend, observer);
}

int Daemon::http_port() const { return http_ ? http_->port() : 0; }

Daemon::Daemon(const ServerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const ServerConfig& config) {
  std::unique_ptr<Daemon> d(new Daemon(config));
  // The gRPC port's certificate first: a bad one stops the daemon before anything is loaded.
  ASSIGN_OR_RETURN(d->tls_, TlsFiles::Start(config.tls));
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("state_dir: cannot create ", config.state_dir, ": ", ec.message()));
  if (config.intra_op_threads > 0) engine::SetIntraOpThreads(static_cast<int>(config.intra_op_threads));

  AdminFacts facts;
  facts.version = AUTOUVM_VERSION;
  ASSIGN_OR_RETURN(facts.admin_token, AdminToken(config));

  // A profile store that cannot be opened costs the daemon its memory of past profiles, not its service.
  const std::string store_dir = (std::filesystem::path(config.state_dir) / "profiles").string();
  auto store = profiler::OpenRocksDbProfileStore(store_dir);
  if (store.ok()) {
    d->profiles_ = std::move(*store);
  } else {
    AUTOUVM_LOG(ERROR) << store.status().message() << "; keeping profiles in memory only";
    facts.health_details.push_back(
        absl::StrCat("profile store: ", store.status().message(), "; profiles are kept in memory and lost at exit"));
    d->profiles_ = profiler::NewInMemoryProfileStore();
  }
  AUTOUVM_LOG(INFO) << "profile store: " << d->profiles_->Describe();
  d->repository_ = std::make_unique<profiler::ProfileRepository>(d->profiles_.get());

  ProfilingServices profiling;
  if (config.profiling) {
    ASSIGN_OR_RETURN(profiling.gpu, runtime::FindGpuSpec(config.gpu));
    // Every iteration of a shape must run the same ops for its profile to describe the next ones. Each
    // model's session observes its own iterations (profiler/model_session.h).
    runtime::Observer::MakeExecutionRepeatable();
    // Note [Coded host copies]: plans for weights that cross coded, at the ratio Gaussian weights code to
    // (docs/weight-compression.md), where the backend codes them.
    const double coded_ratio =
        config.compress_streamed && config.backend == "cuda" ? runtime::weight_codec::kPlannedCodedRatio : 0;
    d->jobs_ = std::make_unique<profiler::ProfileJobs>(d->repository_.get(), profiling.gpu, &d->clock_, coded_ratio);
    profiling.jobs = d->jobs_.get();
    profiling.executor = config.executor;
    profiling.execution.monitor_every = config.monitor_every;
    profiling.execution.monitor_min_interval_seconds = config.monitor_min_interval_s;
  }
  facts.profile_store = d->profiles_->Describe();
  facts.repository = d->repository_.get();
  facts.jobs = d->jobs_.get();

  // Where the models compute: a CUDA device that cannot be opened is the daemon's error, not a model's.
  ASSIGN_OR_RETURN(const runtime::GpuSpec gpu, runtime::FindGpuSpec(config.gpu));
  ASSIGN_OR_RETURN(d->device_,
                   runtime::OpenComputeDevice(
                       {.backend = config.backend, .spec = gpu, .compress_streamed = config.compress_streamed}));
  AUTOUVM_LOG(INFO) << "compute backend: " << d->device_->kind();
  d->models_ = std::make_unique<ModelManager>(d->config_, &d->clock_, profiling, d->device_.get());
  d->gate_ = std::make_unique<engine::ServingGate>();
  d->metrics_ = std::make_unique<Metrics>(MetricsSources{.models = d->models_.get(),
                                                         .jobs = d->jobs_.get(),
                                                         .repository = d->repository_.get(),
                                                         .tls = d->tls_.get(),
                                                         .version = AUTOUVM_VERSION,
                                                         .backend = config.backend,
                                                         .gpu = config.gpu});
  if (!config.metrics_listen.empty()) {
    const Daemon* self = d.get();
    // Ready: some model is served and the daemon is not draining (what the gRPC health service says).
    auto ready = [self] {
      if (self->gate_->draining() || !self->models_->loaded()) return false;
      for (const ModelView& v : self->models_->List()) {
        if (v.state == ModelState::kReady) return true;
      }
      return false;
    };
    ASSIGN_OR_RETURN(d->metrics_server_, MetricsServer::Start(config.metrics_listen, d->metrics_.get(), ready));
    facts.metrics_address = d->metrics_server_->address();
    AUTOUVM_LOG(INFO) << "metrics on http://" << facts.metrics_address << "/metrics";
  }
  d->generation_ =
      std::make_unique<GenerationService>(d->models_.get(), &d->config_, d->gate_.get(), d->metrics_.get());
  d->profile_admin_ =
      std::make_unique<ProfileAdmin>(d->models_.get(), d->jobs_.get(), d->repository_.get(), d->profiles_.get(),
                                     &d->clock_, absl::StrCat("autouvmd ", AUTOUVM_VERSION));
  d->admin_ = std::make_unique<AdminService>(d->models_.get(), &d->config_, d->profile_admin_.get(), std::move(facts));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, d->tls_ ? d->tls_->credentials() : grpc::InsecureServerCredentials(),
                           &d->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_receive_message_bytes));
  builder.RegisterService(d->generation_.get());
  builder.RegisterService(d->admin_.get());
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || d->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("server.listen: cannot listen on ", config.listen));
  }
  if (!config.http_listen.empty()) {
    d->http_frontend_ =
        std::make_unique<engine::GenerationFrontend>(d->models_.get(), RequestLimitsOf(config.limits), d->gate_.get());
    d->http_metrics_ = std::make_unique<HttpCallMetrics>(d->metrics_.get());
    ASSIGN_OR_RETURN(d->http_, StartHttp(config, d->tls_.get(), d->http_frontend_.get(), d->http_metrics_.get()));
    AUTOUVM_LOG(INFO) << "OpenAI API on " << (d->tls_ ? "https://" : "http://") << d->http_->address() << "/v1"
                      << (config.api_key_file.empty() ? "" : " (API keys from server.api_key_file)");
  }
  auto* health = d->server_->GetHealthCheckService();
  health->SetServingStatus(false);
  AUTOUVM_LOG(INFO) << "listening on " << config.listen.substr(0, config.listen.rfind(':')) << ":" << d->port_ << ", "
                    << DescribeTls(config.tls) << " (health NOT_SERVING until the models are loaded)";

  Daemon* self = d.get();
  d->loader_ = std::thread([self] {
    absl::Status s = self->models_->LoadAll();
    if (!s.ok()) {
      AUTOUVM_LOG(ERROR) << "loading models failed: " << s.message();
      return;
    }
    bool any_ready = false;
    for (const auto& view : self->models_->List()) any_ready |= view.state == ModelState::kReady;
    if (!any_ready) {
      std::error_code ec;
      const std::string repo = std::filesystem::absolute(self->config_.model_repository, ec).string();
      AUTOUVM_LOG(WARNING) << (self->models_->List().empty()
                                   ? absl::StrCat("no model in the repository ", repo,
                                                  " (one directory per model: NAME/model.yaml and "
                                                  "model.pt; docs/model-contract.md)")
                                   : absl::StrCat("no model in ", repo, " could be loaded"))
                           << "; health stays NOT_SERVING";
      return;
    }
    if (!self->gate_->draining()) {
      self->server_->GetHealthCheckService()->SetServingStatus(true);
      AUTOUVM_LOG(INFO) << "serving (health SERVING)";
    }
  });
  return d;
}

void Daemon::WaitLoaded() {
  if (loader_.joinable()) loader_.join();
}

bool Daemon::Drain() {
  // The gate first: a client that sees NOT_SERVING must be refused (LifecycleE2E's late call was served
  // once, the drain thread preempted between the two on CI's loaded cores).
  gate_->StartDraining();
  server_->GetHealthCheckService()->SetServingStatus(false);
  AUTOUVM_LOG(INFO) << "draining (up to " << config_.drain_timeout_ms << " ms for requests in flight)";
  const bool clean = gate_->WaitIdle(absl::Milliseconds(config_.drain_timeout_ms));
  if (!clean && !ended_now_.load()) {
    AUTOUVM_LOG(WARNING) << "drain timeout passed; cancelling the requests still running";
  }
  WaitLoaded();
  AUTOUVM_LOG(INFO) << "ending the requests still running or queued";
  models_->Shutdown(absl::ZeroDuration());  // finishes whatever is left with UNAVAILABLE
  // The handlers of those requests must still send that status: gRPC's own shutdown would cancel them
  // (the client would see CANCELLED, which it did not ask for; load_e2e_test under SIGTERM saw 28).
  if (!gate_->WaitIdle(absl::Seconds(10), engine::ServingGate::Wait::kToTheEnd)) {
    AUTOUVM_LOG(WARNING) << "some calls did not end within 10 s";
  }
  if (http_) http_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  AUTOUVM_LOG(INFO) << "stopped";
  return clean;
}

void Daemon::EndDrainNow() {
  if (ended_now_.exchange(true)) return;
  AUTOUVM_LOG(WARNING) << "ending the drain now; the requests still running end with UNAVAILABLE";
  gate_->EndDrainNow();
}

Daemon::~Daemon() {
  if (http_) http_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  WaitLoaded();
}

}  // namespace autouvm::server
