// AdminService: the autouvm.v1.Admin gRPC service — which models are served and in what state.
// Thread-safe; the ModelManager must outlive it.
#pragma once

#include "autouvm/v1/admin.grpc.pb.h"
#include "server/config.h"
#include "server/model_manager.h"

namespace autouvm::server {

class AdminService final : public autouvm::v1::Admin::CallbackService {
 public:
  AdminService(ModelManager* models, const ServerConfig* config) : models_(models), config_(config) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const autouvm::v1::ListModelsRequest* request,
                                       autouvm::v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModelStatus(grpc::CallbackServerContext* context,
                                           const autouvm::v1::GetModelStatusRequest* request,
                                           autouvm::v1::ModelStatus* response) override;

 private:
  void Fill(const ModelView& view, autouvm::v1::ModelStatus* out) const;

  ModelManager* models_;
  const ServerConfig* config_;
};

}  // namespace autouvm::server
