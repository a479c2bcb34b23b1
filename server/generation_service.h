// GenerationService: the autouvm.v1.Generation gRPC service (callback API). A thin mapper onto the
// engine's front door (engine/generation_frontend.h): it maps the message (request_validation.h), admits
// it through an engine::GenerationCall, and relays tokens back as they come — one stream message per
// token, then a final message — or all at once for the unary call.
//
// Thread-safety: gRPC calls its methods from its own threads; the reactors it creates serialize their
// writes and live until gRPC's OnDone.
#pragma once

#include "autouvm/v1/generation.grpc.pb.h"
#include "engine/generation_frontend.h"
#include "engine/serving_gate.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/model_manager.h"
#include "server/request_validation.h"

namespace autouvm::server {

class GenerationService final : public autouvm::v1::Generation::CallbackService {
 public:
  // All must outlive the service; `metrics` may be null.
  GenerationService(ModelManager* models, const ServerConfig* config, engine::ServingGate* gate,
                    Metrics* metrics = nullptr)
      : frontend_(models, RequestLimitsOf(config->limits), gate), metrics_(metrics) {}

  grpc::ServerWriteReactor<autouvm::v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request,
                                     autouvm::v1::GenerateResponse* response) override;

 private:
  engine::GenerationFrontend frontend_;
  Metrics* metrics_;
};

}  // namespace autouvm::server
