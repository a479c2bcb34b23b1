// GenerationService: the autouvm.v1.Generation gRPC service (callback API). A thin adapter: it checks
// the request (request_validation.h), hands it to the model's Scheduler, and relays tokens back as they
// come — one stream message per token, then a final message — or all at once for the unary call.
//
// Thread-safety: gRPC calls its methods from its own threads; the reactors it creates serialize their
// writes and live until gRPC's OnDone.
#pragma once

#include "autouvm/v1/generation.grpc.pb.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/model_manager.h"
#include "server/serving_gate.h"

namespace autouvm::server {

class GenerationService final : public autouvm::v1::Generation::CallbackService {
 public:
  // All must outlive the service; `metrics` may be null.
  GenerationService(ModelManager* models, const ServerConfig* config, ServingGate* gate, Metrics* metrics = nullptr)
      : models_(models), config_(config), gate_(gate), metrics_(metrics) {}

  grpc::ServerWriteReactor<autouvm::v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request,
                                     autouvm::v1::GenerateResponse* response) override;

 private:
  ModelManager* models_;
  const ServerConfig* config_;
  ServingGate* gate_;
  Metrics* metrics_;
};

}  // namespace autouvm::server
