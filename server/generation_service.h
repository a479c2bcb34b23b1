// GenerationService: the autouvm.v1.Generation gRPC service (callback API). A thin mapper onto the
// engine's front door (engine/generation_frontend.h): it maps the message (request_validation.h), admits
// it through an engine::GenerationCall, and relays tokens back as they come — one stream message per
// token, then a final message — or all at once for the unary call.
//
// Thread-safety: gRPC calls its methods from its own threads; the reactors it creates serialize their
// writes and live until gRPC's OnDone.
#pragma once

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "autouvm/v1/generation.grpc.pb.h"
#include "engine/generation_frontend.h"
#include "engine/serving_gate.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/model_manager.h"
#include "server/request_validation.h"

namespace autouvm::server {

// One thread that starts the streams' writes the models' scheduler threads queue (Note [Tokens written
// off the scheduler's thread], generation_service.cc). Thread-safe; stops once every kick queued before
// its destruction is delivered.
class StreamWriter {
 public:
  class Stream {
   public:
    virtual void Kicked() = 0;  // on the writer's thread

   protected:
    ~Stream() = default;
  };
  StreamWriter();
  ~StreamWriter();
  void Kick(Stream* stream);  // `stream` lives until its Kicked() has returned

 private:
  void Run();
  absl::Mutex mu_;
  std::vector<Stream*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class GenerationService final : public autouvm::v1::Generation::CallbackService {
 public:
  // All must outlive the service; `metrics` may be null. Destroy it after the gRPC server has shut down.
  GenerationService(ModelManager* models, const ServerConfig* config, engine::ServingGate* gate,
                    Metrics* metrics = nullptr);
  ~GenerationService() override;

  grpc::ServerWriteReactor<autouvm::v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context, const autouvm::v1::GenerateRequest* request,
                                     autouvm::v1::GenerateResponse* response) override;

 private:
  engine::GenerationFrontend frontend_;
  Metrics* metrics_;
  StreamWriter writer_;
};

}  // namespace autouvm::server
