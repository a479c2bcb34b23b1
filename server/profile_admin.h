// ProfileAdmin: the profile half of autouvm.v1.Admin — Reprofile, ListProfiles, GetProfile,
// DeleteProfile, ExportProfiles, ImportProfiles — and the profile lines of a ModelStatus. AdminService
// authenticates the call and hands it here; this class turns the request into profiler calls
// (ProfileJobs, ProfileRepository, bundles) for the model it names.
//
//   ProfileAdmin profiles(&models, &jobs, &repository, &store, "autouvmd 0.1.0");
//   grpc::Status s = profiles.Reprofile(request, &response);
//
// Thread-safety: every method may be called from any thread (the objects it uses are thread-safe).
#pragma once

#include <grpcpp/support/status.h>

#include <optional>
#include <string>

#include "autouvm/v1/admin.pb.h"
#include "base/clock.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "server/model_manager.h"

namespace autouvm::server {

class ProfileAdmin {
 public:
  // `jobs` null: profiling is off (Reprofile refuses; stored profiles can still be listed and moved).
  ProfileAdmin(ModelManager* models, profiler::ProfileJobs* jobs, profiler::ProfileRepository* repository,
               profiler::ProfileStore* store, const base::Clock* clock, std::string exported_by);

  grpc::Status Reprofile(const autouvm::v1::ReprofileRequest& request, autouvm::v1::ReprofileResponse* response);
  grpc::Status List(const autouvm::v1::ListProfilesRequest& request, autouvm::v1::ListProfilesResponse* response);
  grpc::Status Get(const autouvm::v1::GetProfileRequest& request, autouvm::v1::GetProfileResponse* response);
  grpc::Status Delete(const autouvm::v1::DeleteProfileRequest& request, autouvm::v1::DeleteProfileResponse* response);
  grpc::Status Export(const autouvm::v1::ExportProfilesRequest& request, autouvm::v1::ProfileBundle* response);
  grpc::Status Import(const autouvm::v1::ImportProfilesRequest& request, autouvm::v1::ImportProfilesResponse* response);

  // The states of every shape of `model` this process has seen.
  void FillModelStatus(const ServedModel& model, autouvm::v1::ModelStatus* out) const;

 private:
  // The model, READY; NOT_FOUND or FAILED_PRECONDITION otherwise.
  // A served model, held alive while a call uses it (it may be unloaded meanwhile).
  using ModelRef = std::shared_ptr<const ServedModel>;
  grpc::Status ReadyModel(const std::string& name, ModelRef* out) const;
  // The key a request names (`key` or `shape`) for `model`.
  grpc::Status KeyOf(const ServedModel& model, const std::string& key, const autouvm::v1::ShapeBucket* shape,
                     autouvm::v1::ProfileKey* out) const;
  // The READY model and the key a Get/Delete request names.
  template <typename Request>
  grpc::Status Target(const Request& request, ModelRef* model, autouvm::v1::ProfileKey* key) const;
  // A summary from what the jobs know and what is stored (profile and plan may each be missing).
  autouvm::v1::ProfileSummary Summarize(const std::string& model, const autouvm::v1::ProfileKey& key,
                                        const autouvm::v1::Profile* stored, const autouvm::v1::Plan* plan) const;
  // The stored plan of `key`; DATA_LOSS if it fails its checksum or does not parse.
  absl::StatusOr<std::optional<autouvm::v1::Plan>> ReadPlan(const autouvm::v1::ProfileKey& key) const;

  ModelManager* const models_;
  profiler::ProfileJobs* const jobs_;
  profiler::ProfileRepository* const repository_;
  profiler::ProfileStore* const store_;
  const base::Clock* const clock_;
  const std::string exported_by_;
};

}  // namespace autouvm::server
