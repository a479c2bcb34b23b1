// AdminService: the autouvm.v1.Admin gRPC service — which models are served and in what state, the
// daemon's own status, and the profile RPCs (handed to ProfileAdmin). When an admin token is set, every
// call must carry "authorization: Bearer <token>": UNAUTHENTICATED without it, PERMISSION_DENIED with
// another token (compared in constant time).
//
// Thread-safety: thread-safe; the ModelManager, ProfileAdmin and what AdminFacts points to must outlive it.
#pragma once

#include <string>
#include <vector>

#include "autouvm/v1/admin.grpc.pb.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_repository.h"
#include "server/config.h"
#include "server/model_manager.h"
#include "server/profile_admin.h"

namespace autouvm::server {

// What GetServerStatus reports, fixed at start-up, and where its counters come from.
struct AdminFacts {
  std::string version;
  std::string profile_store;                // ProfileStore::Describe()
  std::vector<std::string> health_details;  // degraded modes, one sentence each
  std::string admin_token;                  // "" : no authentication
  const profiler::ProfileRepository* repository = nullptr;
  const profiler::ProfileJobs* jobs = nullptr;  // null when profiling is off
  std::string metrics_address;                  // where /metrics is served ("" : not served)
};

class AdminService final : public autouvm::v1::Admin::CallbackService {
 public:
  AdminService(ModelManager* models, const ServerConfig* config, ProfileAdmin* profiles, AdminFacts facts)
      : models_(models), config_(config), profiles_(profiles), facts_(std::move(facts)) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const autouvm::v1::ListModelsRequest* request,
                                       autouvm::v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModelStatus(grpc::CallbackServerContext* context,
                                           const autouvm::v1::GetModelStatusRequest* request,
                                           autouvm::v1::ModelStatus* response) override;
  grpc::ServerUnaryReactor* GetServerStatus(grpc::CallbackServerContext* context,
                                            const autouvm::v1::GetServerStatusRequest* request,
                                            autouvm::v1::ServerStatus* response) override;
  grpc::ServerUnaryReactor* Reprofile(grpc::CallbackServerContext* context,
                                      const autouvm::v1::ReprofileRequest* request,
                                      autouvm::v1::ReprofileResponse* response) override;
  grpc::ServerUnaryReactor* ListProfiles(grpc::CallbackServerContext* context,
                                         const autouvm::v1::ListProfilesRequest* request,
                                         autouvm::v1::ListProfilesResponse* response) override;
  grpc::ServerUnaryReactor* GetProfile(grpc::CallbackServerContext* context,
                                       const autouvm::v1::GetProfileRequest* request,
                                       autouvm::v1::GetProfileResponse* response) override;
  grpc::ServerUnaryReactor* DeleteProfile(grpc::CallbackServerContext* context,
                                          const autouvm::v1::DeleteProfileRequest* request,
                                          autouvm::v1::DeleteProfileResponse* response) override;
  grpc::ServerUnaryReactor* ExportProfiles(grpc::CallbackServerContext* context,
                                           const autouvm::v1::ExportProfilesRequest* request,
                                           autouvm::v1::ProfileBundle* response) override;
  grpc::ServerUnaryReactor* ImportProfiles(grpc::CallbackServerContext* context,
                                           const autouvm::v1::ImportProfilesRequest* request,
                                           autouvm::v1::ImportProfilesResponse* response) override;
  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* context,
                                      const autouvm::v1::LoadModelRequest* request,
                                      autouvm::v1::LoadModelResponse* response) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* context,
                                        const autouvm::v1::UnloadModelRequest* request,
                                        autouvm::v1::UnloadModelResponse* response) override;
  grpc::ServerUnaryReactor* SleepModel(grpc::CallbackServerContext* context,
                                       const autouvm::v1::SleepModelRequest* request,
                                       autouvm::v1::SleepModelResponse* response) override;
  grpc::ServerUnaryReactor* WakeModel(grpc::CallbackServerContext* context,
                                      const autouvm::v1::WakeModelRequest* request,
                                      autouvm::v1::WakeModelResponse* response) override;

 private:
  void Fill(const ModelView& view, autouvm::v1::ModelStatus* out) const;
  // OK, or why the call may not proceed.
  grpc::Status Authorize(grpc::CallbackServerContext* context) const;
  // Authorize, then a request that did not parse (proto/lenient_parse.h) is refused.
  grpc::Status Admit(grpc::CallbackServerContext* context, const google::protobuf::Message& request) const;
  // Admits the call, then finishes it with `handler`'s status.
  template <typename Handler>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, const google::protobuf::Message& request,
                                  Handler handler);
  // Serve, with `handler` on a thread of its own (a load or a drain takes seconds).
  template <typename Handler>
  grpc::ServerUnaryReactor* ServeAsync(grpc::CallbackServerContext* context, const google::protobuf::Message& request,
                                       Handler handler);
  // LoadModel, SleepModel and WakeModel: ServeAsync of `call` on the model the request names; on success the
  // response gets how long it took (`set_seconds`) and the model's status after it.
  template <typename Request, typename Response, typename Call>
  grpc::ServerUnaryReactor* ServeModelControl(grpc::CallbackServerContext* context, const Request* request,
                                              Response* response, void (Response::*set_seconds)(double), Call call);

  ModelManager* models_;
  const ServerConfig* config_;
  ProfileAdmin* profiles_;
  const AdminFacts facts_;
};

}  // namespace autouvm::server
