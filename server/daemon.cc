#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "profiler/profile_store.h"
#include "server/admin_service.h"
#include "server/generation_service.h"
#include "server/model_manager.h"
#include "server/model_runner.h"
#include "server/serving_gate.h"

namespace autouvm::server {

Daemon::Daemon(const ServerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const ServerConfig& config) {
  std::unique_ptr<Daemon> d(new Daemon(config));
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("state_dir: cannot create ", config.state_dir, ": ", ec.message()));
  if (config.intra_op_threads > 0) SetIntraOpThreads(static_cast<int>(config.intra_op_threads));

  // A profile store that cannot be opened costs the daemon its memory of past profiles, not its service.
  const std::string store_dir = (std::filesystem::path(config.state_dir) / "profiles").string();
  auto store = profiler::OpenRocksDbProfileStore(store_dir);
  if (store.ok()) {
    d->profiles_ = std::move(*store);
  } else {
    std::cerr << "autouvmd: " << store.status().message() << "; keeping profiles in memory only\n";
    d->profiles_ = profiler::NewInMemoryProfileStore();
  }
  std::cerr << "autouvmd: profile store: " << d->profiles_->Describe() << "\n";

  d->models_ = std::make_unique<ModelManager>(d->config_, &d->clock_);
  d->gate_ = std::make_unique<ServingGate>();
  d->generation_ = std::make_unique<GenerationService>(d->models_.get(), &d->config_, d->gate_.get());
  d->admin_ = std::make_unique<AdminService>(d->models_.get(), &d->config_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &d->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_receive_message_bytes));
  builder.RegisterService(d->generation_.get());
  builder.RegisterService(d->admin_.get());
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || d->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("server.listen: cannot listen on ", config.listen));
  }
  auto* health = d->server_->GetHealthCheckService();
  health->SetServingStatus(false);
  std::cerr << "autouvmd: listening on " << config.listen.substr(0, config.listen.rfind(':')) << ":" << d->port_
            << " (health NOT_SERVING until the models are loaded)\n";

  Daemon* self = d.get();
  d->loader_ = std::thread([self] {
    absl::Status s = self->models_->LoadAll();
    if (!s.ok()) {
      std::cerr << "autouvmd: loading models failed: " << s.message() << "\n";
      return;
    }
    bool any_ready = false;
    for (const auto& view : self->models_->List()) any_ready |= view.state == ModelState::kReady;
    if (!any_ready) {
      std::cerr << "autouvmd: no model could be loaded; health stays NOT_SERVING\n";
      return;
    }
    if (!self->gate_->draining()) {
      self->server_->GetHealthCheckService()->SetServingStatus(true);
      std::cerr << "autouvmd: serving (health SERVING)\n";
    }
  });
  return d;
}

void Daemon::WaitLoaded() {
  if (loader_.joinable()) loader_.join();
}

bool Daemon::Drain() {
  server_->GetHealthCheckService()->SetServingStatus(false);
  gate_->StartDraining();
  std::cerr << "autouvmd: draining (up to " << config_.drain_timeout_ms << " ms for requests in flight)\n";
  const bool clean = gate_->WaitIdle(absl::Milliseconds(config_.drain_timeout_ms));
  if (!clean) std::cerr << "autouvmd: drain timeout passed; cancelling the requests still running\n";
  WaitLoaded();
  models_->Shutdown(absl::ZeroDuration());  // finishes whatever is left with UNAVAILABLE
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  std::cerr << "autouvmd: stopped\n";
  return clean;
}

Daemon::~Daemon() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  WaitLoaded();
}

}  // namespace autouvm::server
