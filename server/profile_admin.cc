#include "server/profile_admin.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "profiler/profile_bundle.h"
#include "profiler/profile_key.h"
#include "server/grpc_status.h"

namespace autouvm::server {
namespace {

using autouvm::v1::ProfileKey;
using profiler::ProfileState;

autouvm::v1::ProfileState ToProto(ProfileState s) {
  switch (s) {
    case ProfileState::kUnprofiled:
      return autouvm::v1::PROFILE_STATE_UNPROFILED;
    case ProfileState::kRecording:
      return autouvm::v1::PROFILE_STATE_RECORDING;
    case ProfileState::kAnalyzing:
      return autouvm::v1::PROFILE_STATE_ANALYZING;
    case ProfileState::kReady:
      return autouvm::v1::PROFILE_STATE_READY;
    case ProfileState::kStale:
      return autouvm::v1::PROFILE_STATE_STALE;
    case ProfileState::kFailed:
      return autouvm::v1::PROFILE_STATE_FAILED;
  }
  return autouvm::v1::PROFILE_STATE_UNSPECIFIED;
}

engine::IterationPhase PhaseOf(autouvm::v1::Phase p) {
  return p == autouvm::v1::PHASE_PREFILL ? engine::IterationPhase::kPrefill
         : p == autouvm::v1::PHASE_MIXED ? engine::IterationPhase::kMixed
                                         : engine::IterationPhase::kDecode;
}

grpc::Status Invalid(const std::string& what) { return {grpc::StatusCode::INVALID_ARGUMENT, what}; }

}  // namespace

ProfileAdmin::ProfileAdmin(ModelManager* models, profiler::ProfileJobs* jobs, profiler::ProfileRepository* repository,
                           profiler::ProfileStore* store, const base::Clock* clock, std::string exported_by)
    : models_(models),
      jobs_(jobs),
      repository_(repository),
      store_(store),
      clock_(clock),
      exported_by_(std::move(exported_by)) {}

grpc::Status ProfileAdmin::ReadyModel(const std::string& name, ModelRef* out) const {
  auto served = models_->Ready(name, absl::StatusCode::kFailedPrecondition);
  if (!served.ok()) return ToGrpc(served.status());
  *out = *served;
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::KeyOf(const ServedModel& model, const std::string& key,
                                 const autouvm::v1::ShapeBucket* shape, ProfileKey* out) const {
  if (!key.empty() && shape != nullptr) return Invalid("key, shape: give one, not both");
  if (!key.empty()) {
    auto parsed = profiler::ParseKey(key);
    if (!parsed.ok()) return Invalid(absl::StrCat("key: ", parsed.status().message()));
    if (parsed->model_digest() != model.digest) {
      return {grpc::StatusCode::NOT_FOUND,
              absl::StrCat("key: not a profile of model '", model.name, "' (its digest is ", model.digest, ")")};
    }
    *out = *parsed;
    return grpc::Status::OK;
  }
  if (shape == nullptr) return Invalid("key, shape: one must be set");
  if (shape->phase() != autouvm::v1::PHASE_PREFILL && shape->phase() != autouvm::v1::PHASE_DECODE) {
    return Invalid("shape.phase: must be PHASE_PREFILL or PHASE_DECODE");
  }
  if (shape->batch() < 1 || shape->batch() > model.settings.max_batch) {
    return Invalid(absl::StrCat("shape.batch: ", shape->batch(), " is not within 1..", model.settings.max_batch));
  }
  if (shape->phase() == autouvm::v1::PHASE_PREFILL && shape->prompt_len() < 1) {
    return Invalid("shape.prompt_len: a prefill shape has prompt_len >= 1");
  }
  if (shape->phase() == autouvm::v1::PHASE_PREFILL && shape->prompt_len() >= model.config.max_seq) {
    return Invalid(absl::StrCat("shape.prompt_len: ", shape->prompt_len(), " leaves no room to generate within the ",
                                "model's max_seq of ", model.config.max_seq));
  }
  if (shape->phase() == autouvm::v1::PHASE_DECODE && shape->prompt_len() != 0) {
    return Invalid("shape.prompt_len: decode shapes have none (one decode profile serves every position)");
  }
  const profiler::ProfileIdentity identity =
      model.session ? model.session->identity() : profiler::ProfileIdentity{model.digest};
  *out = shape->phase() == autouvm::v1::PHASE_PREFILL
             ? profiler::PrefillKey(model.digest, 1, shape->prompt_len(), identity.gpu, identity.device_budget_bytes,
                                    identity.policy)
             : profiler::DecodeKey(model.digest, shape->batch(), identity.gpu, identity.device_budget_bytes,
                                   identity.policy);
  return grpc::Status::OK;
}

template <typename Request>
grpc::Status ProfileAdmin::Target(const Request& request, ModelRef* model, ProfileKey* key) const {
  if (grpc::Status s = ReadyModel(request.model(), model); !s.ok()) return s;
  return KeyOf(**model, request.key(), request.has_shape() ? &request.shape() : nullptr, key);
}

autouvm::v1::ProfileSummary ProfileAdmin::Summarize(const std::string& model, const ProfileKey& key,
                                                    const autouvm::v1::Profile* stored,
                                                    const autouvm::v1::Plan* plan) const {
  autouvm::v1::ProfileSummary s;
  s.set_model(model);
  s.set_key(profiler::EncodeKey(key));
  *s.mutable_profile_key() = key;
  if (jobs_ != nullptr) {
    const profiler::ProfileStatus status = jobs_->Status(key);
    s.set_state(ToProto(status.state));
    s.set_reason(status.reason);
    for (const profiler::StateChange& c : status.history) {
      auto* h = s.add_history();
      h->set_state(ToProto(c.state));
      h->set_unix_ms(absl::ToUnixMillis(c.at));
      h->set_reason(c.reason);
    }
    // Not seen by this process yet: what the store holds decides.
    if (status.history.empty() && stored != nullptr) s.set_state(autouvm::v1::PROFILE_STATE_READY);
  } else {
    s.set_state(stored != nullptr ? autouvm::v1::PROFILE_STATE_READY : autouvm::v1::PROFILE_STATE_UNPROFILED);
  }
  if (stored == nullptr) return s;
  s.set_stored(true);
  s.set_ops(stored->ops_size());
  s.set_link_bound_ops(stored->link_bound_ops());
  s.set_hbm_bound_ops(stored->hbm_bound_ops());
  s.set_compute_bound_ops(stored->compute_bound_ops());
  s.set_bytes_per_iteration(stored->bytes_per_iteration());
  s.set_pinned_bytes(stored->resident_bytes());
  s.set_iteration_seconds(stored->iteration_seconds());
  s.set_top20_share(stored->top20_share());
  s.set_created_unix_ms(stored->created_unix_ms());
  s.set_profiling_seconds(stored->profiling_seconds());
  if (plan != nullptr) {
    s.set_streamed_bytes(plan->streamed_bytes());
    s.set_remote_bytes(plan->remote_bytes());
  }
  return s;
}

absl::StatusOr<std::optional<autouvm::v1::Plan>> ProfileAdmin::ReadPlan(const ProfileKey& key) const {
  auto bytes = repository_->GetPlan(key);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::optional<autouvm::v1::Plan>();
  autouvm::v1::Plan plan;
  if (!plan.ParseFromString(**bytes)) {
    return absl::DataLossError(absl::StrCat("plan ", profiler::EncodeKey(key), ": does not parse"));
  }
  return std::optional<autouvm::v1::Plan>(std::move(plan));
}

grpc::Status ProfileAdmin::Reprofile(const autouvm::v1::ReprofileRequest& request,
                                     autouvm::v1::ReprofileResponse* response) {
  ModelRef model;
  if (grpc::Status s = ReadyModel(request.model(), &model); !s.ok()) return s;
  if (jobs_ == nullptr || model->session == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "profiling is off (profiler.enabled: false)"};
  }
  std::vector<ProfileKey> keys;
  if (request.has_shape()) {
    ProfileKey key;
    if (grpc::Status s = KeyOf(*model, "", &request.shape(), &key); !s.ok()) return s;
    keys.push_back(key);
  } else {
    // Every shape of this model under its current identity: those seen since start and those stored.
    std::map<std::string, ProfileKey> all;
    const profiler::ProfileIdentity& id = model->session->identity();
    auto mine = [&](const ProfileKey& k) {
      return k.model_digest() == id.model_digest && k.gpu() == id.gpu &&
             k.device_budget_bytes() == id.device_budget_bytes && k.policy() == id.policy;
    };
    for (const profiler::ProfileStatus& s : jobs_->All()) {
      if (mine(s.key)) all[profiler::EncodeKey(s.key)] = s.key;
    }
    auto stored = repository_->List(model->digest);
    if (!stored.ok()) return ToGrpc(stored.status());
    for (const auto& e : *stored) {
      auto k = profiler::ParseKey(e.key);
      if (k.ok() && mine(*k)) all[e.key] = *k;
    }
    for (auto& [k, key] : all) keys.push_back(key);
  }
  for (const ProfileKey& key : keys) {
    jobs_->MarkStale(key, "re-profile requested over the admin API");
    if (request.now()) {
      // A prompt of the bucket's length, within the model's context.
      const int64_t len = std::min<int64_t>(key.prompt_bucket(), model->config.max_seq - 1);
      // A batch of the bucket (powers of two: (b/2, b]) the model can hold: its top, or max_batch where
      // that lies within it (max_batch 6 runs b8's iteration at 6).
      const int slots = static_cast<int>(model->settings.max_batch);
      const int batch = key.batch() > slots && slots > key.batch() / 2 ? slots : key.batch();
      const absl::Status s = model->scheduler->RunIdleIteration(PhaseOf(key.phase()), batch, len);
      if (!s.ok()) return ToGrpc(s);
    }
    *response->add_profiles() = Summarize(model->name, key, nullptr, nullptr);
  }
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::List(const autouvm::v1::ListProfilesRequest& request,
                                autouvm::v1::ListProfilesResponse* response) {
  std::vector<ModelRef> models;
  if (!request.model().empty()) {
    ModelRef m;
    if (grpc::Status s = ReadyModel(request.model(), &m); !s.ok()) return s;
    models.push_back(m);
  } else {
    for (const ModelView& v : models_->List()) {
      if (v.state == ModelState::kReady) models.push_back(v.model);
    }
  }
  for (const ModelRef& m : models) {
    // Stored entries first (with their figures), then the shapes seen here that have nothing stored.
    std::map<std::string, autouvm::v1::ProfileSummary> out;
    auto stored = repository_->List(m->digest);
    if (!stored.ok()) return ToGrpc(stored.status());
    for (const auto& e : *stored) {
      auto key = profiler::ParseKey(e.key);
      if (!key.ok()) continue;
      if (e.profile.ok()) {
        auto plan = ReadPlan(*key);  // a damaged plan only leaves streamed_bytes out of the listing
        out[e.key] = Summarize(m->name, *key, &*e.profile, plan.ok() && plan->has_value() ? &**plan : nullptr);
      } else {
        autouvm::v1::ProfileSummary s = Summarize(m->name, *key, nullptr, nullptr);
        s.set_state(autouvm::v1::PROFILE_STATE_FAILED);
        s.set_reason(std::string(e.profile.status().message()));
        out[e.key] = std::move(s);
      }
    }
    if (jobs_ != nullptr) {
      for (const profiler::ProfileStatus& st : jobs_->All()) {
        if (st.key.model_digest() != m->digest) continue;
        const std::string k = profiler::EncodeKey(st.key);
        if (out.count(k) == 0) out[k] = Summarize(m->name, st.key, nullptr, nullptr);
      }
    }
    for (auto& [k, s] : out) *response->add_profiles() = std::move(s);
  }
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::Get(const autouvm::v1::GetProfileRequest& request,
                               autouvm::v1::GetProfileResponse* response) {
  ModelRef model;
  ProfileKey key;
  if (grpc::Status s = Target(request, &model, &key); !s.ok()) return s;
  auto stored = repository_->Get(key);
  if (!stored.ok()) return ToGrpc(stored.status());  // DATA_LOSS, named; the key is profiled again when used
  const autouvm::v1::Profile* profile = stored->has_value() ? &**stored : nullptr;
  absl::StatusOr<std::optional<autouvm::v1::Plan>> plan = std::optional<autouvm::v1::Plan>();
  if (profile != nullptr) plan = ReadPlan(key);
  const autouvm::v1::Plan* found = plan.ok() && plan->has_value() ? &**plan : nullptr;
  *response->mutable_summary() = Summarize(model->name, key, profile, found);
  if (request.include_profile() && profile != nullptr) {
    *response->mutable_profile() = *profile;
    if (!plan.ok()) return ToGrpc(plan.status());  // asked for in full: a damaged plan is an error
    if (found != nullptr) *response->mutable_plan() = *found;
  }
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::Delete(const autouvm::v1::DeleteProfileRequest& request,
                                  autouvm::v1::DeleteProfileResponse* response) {
  ModelRef model;
  ProfileKey key;
  if (grpc::Status s = Target(request, &model, &key); !s.ok()) return s;
  auto present = store_->Get(profiler::Family::kProfiles, profiler::EncodeKey(key));
  if (!present.ok()) return ToGrpc(present.status());
  if (absl::Status s = repository_->Delete(key); !s.ok()) return ToGrpc(s);
  if (jobs_ != nullptr) jobs_->Forget(key);  // profiled again at its next iteration
  response->set_deleted(present->has_value());
  response->set_key(profiler::EncodeKey(key));
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::Export(const autouvm::v1::ExportProfilesRequest& request,
                                  autouvm::v1::ProfileBundle* response) {
  std::vector<std::string> digests;
  if (!request.model().empty()) {
    ModelRef m;
    if (grpc::Status s = ReadyModel(request.model(), &m); !s.ok()) return s;
    digests.push_back(m->digest);
  } else {
    for (const ModelView& v : models_->List()) {
      if (v.state == ModelState::kReady) digests.push_back(v.model->digest);
    }
    if (digests.empty()) return {grpc::StatusCode::FAILED_PRECONDITION, "no model is ready"};
  }
  auto bundle = profiler::ExportBundle(*store_, digests, exported_by_, clock_->Now());
  if (!bundle.ok()) return ToGrpc(bundle.status());
  *response = std::move(*bundle);
  return grpc::Status::OK;
}

grpc::Status ProfileAdmin::Import(const autouvm::v1::ImportProfilesRequest& request,
                                  autouvm::v1::ImportProfilesResponse* response) {
  if (!request.has_bundle()) return Invalid("bundle: must be set");
  profiler::ImportResult r = profiler::ImportBundle(store_, request.bundle(), request.overwrite());
  // Keys this process has already looked up read the store again (and check the imported profile).
  if (jobs_ != nullptr) {
    for (const ProfileKey& k : r.keys) jobs_->Forget(k);
  }
  response->set_imported(r.imported);
  response->set_skipped(r.skipped);
  for (std::string& e : r.errors) response->add_errors(std::move(e));
  return grpc::Status::OK;
}

void ProfileAdmin::FillModelStatus(const ServedModel& model, autouvm::v1::ModelStatus* out) const {
  out->set_model_digest(model.digest);
  out->set_policy(model.settings.policy);
  if (model.session == nullptr || jobs_ == nullptr) return;
  out->set_device_budget_bytes(model.session->identity().device_budget_bytes);
  for (const profiler::ProfileStatus& st : jobs_->All()) {
    if (st.key.model_digest() == model.digest) *out->add_profiles() = Summarize(model.name, st.key, nullptr, nullptr);
  }
}

}  // namespace autouvm::server
