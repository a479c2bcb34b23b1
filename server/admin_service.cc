#include "server/admin_service.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lenient_parse.h"
#include "server/grpc_status.h"

namespace autouvm::server {
namespace {

// Equal strings, in time that depends only on the longer one's length.
bool SameToken(std::string_view a, std::string_view b) {
  size_t diff = a.size() ^ b.size();
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    diff |= static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  }
  return diff == 0;
}

}  // namespace

grpc::Status AdminService::Authorize(grpc::CallbackServerContext* context) const {
  if (facts_.admin_token.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED, "admin calls need 'authorization: Bearer <token>' (admin.token_file)"};
  }
  const std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer) {
    return {grpc::StatusCode::UNAUTHENTICATED, "authorization: expected 'Bearer <token>'"};
  }
  if (!SameToken(value.substr(kBearer.size()), facts_.admin_token)) {
    return {grpc::StatusCode::PERMISSION_DENIED, "authorization: the token is not this daemon's admin token"};
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Admit(grpc::CallbackServerContext* context, const google::protobuf::Message& request) const {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  // Note [Requests that do not parse] (proto/lenient_parse.h): said once the caller may hear it.
  if (std::string defect = autouvm::proto::RequestDefect(request); !defect.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, defect);
  }
  return grpc::Status::OK;
}

template <typename Handler>
grpc::ServerUnaryReactor* AdminService::ServeAsync(grpc::CallbackServerContext* context,
                                                   const google::protobuf::Message& request, Handler handler) {
  auto* reactor = context->DefaultReactor();
  if (grpc::Status s = Admit(context, request); !s.ok()) {
    reactor->Finish(Bounded(s));
    return reactor;
  }
  // The call may take seconds (a load, a drain): off gRPC's callback threads. Nothing runs after Finish,
  // which the server's shutdown waits for.
  std::thread([reactor, handler]() mutable { reactor->Finish(Bounded(handler())); }).detach();
  return reactor;
}

template <typename Request, typename Response, typename Call>
grpc::ServerUnaryReactor* AdminService::ServeModelControl(grpc::CallbackServerContext* context, const Request* request,
                                                          Response* response, void (Response::*set_seconds)(double),
                                                          Call call) {
  return ServeAsync(context, *request, [this, request, response, set_seconds, call] {
    const absl::Time start = absl::Now();
    if (absl::Status s = call(request->model()); !s.ok()) return ToGrpc(s);
    (response->*set_seconds)(absl::ToDoubleSeconds(absl::Now() - start));
    if (const auto view = models_->Lookup(request->model()); view.ok()) Fill(*view, response->mutable_model());
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* AdminService::LoadModel(grpc::CallbackServerContext* context,
                                                  const autouvm::v1::LoadModelRequest* request,
                                                  autouvm::v1::LoadModelResponse* response) {
  return ServeModelControl(context, request, response, &autouvm::v1::LoadModelResponse::set_load_seconds,
                           [this](const std::string& model) { return models_->LoadModel(model); });
}

grpc::ServerUnaryReactor* AdminService::UnloadModel(grpc::CallbackServerContext* context,
                                                    const autouvm::v1::UnloadModelRequest* request,
                                                    autouvm::v1::UnloadModelResponse* response) {
  return ServeAsync(context, *request, [this, request, response] {
    if (absl::Status s = engine::CheckModelName(request->model()); !s.ok()) return ToGrpc(s);
    const absl::Time start = absl::Now();
    absl::Status s = models_->UnloadModel(request->model(), absl::Milliseconds(config_->drain_timeout_ms));
    if (!s.ok()) return ToGrpc(s);
    response->set_unload_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    return grpc::Status::OK;
  });
}

// Note [A model asleep] (profiler/model_execution.cc), on demand.
grpc::ServerUnaryReactor* AdminService::SleepModel(grpc::CallbackServerContext* context,
                                                   const autouvm::v1::SleepModelRequest* request,
                                                   autouvm::v1::SleepModelResponse* response) {
  return ServeModelControl(context, request, response, &autouvm::v1::SleepModelResponse::set_sleep_seconds,
                           [this](const std::string& model) {
                             return models_->SleepModel(model, absl::Milliseconds(config_->drain_timeout_ms));
                           });
}

grpc::ServerUnaryReactor* AdminService::WakeModel(grpc::CallbackServerContext* context,
                                                  const autouvm::v1::WakeModelRequest* request,
                                                  autouvm::v1::WakeModelResponse* response) {
  return ServeModelControl(context, request, response, &autouvm::v1::WakeModelResponse::set_wake_seconds,
                           [this](const std::string& model) {
                             return models_->WakeModel(model, absl::Milliseconds(config_->drain_timeout_ms));
                           });
}

template <typename Handler>
grpc::ServerUnaryReactor* AdminService::Serve(grpc::CallbackServerContext* context,
                                              const google::protobuf::Message& request, Handler handler) {
  auto* reactor = context->DefaultReactor();
  const grpc::Status s = Admit(context, request);
  reactor->Finish(Bounded(s.ok() ? handler() : s));
  return reactor;
}

void AdminService::Fill(const ModelView& view, autouvm::v1::ModelStatus* out) const {
  const ServedModel& m = *view.model;
  out->set_name(m.name);
  out->set_backend(config_->backend);
  out->set_max_batch(static_cast<uint32_t>(m.settings.max_batch));
  out->set_max_queue(static_cast<uint32_t>(m.settings.max_queue));
  switch (view.state) {
    case ModelState::kLoading:
      out->set_state(autouvm::v1::MODEL_STATE_LOADING);
      return;
    case ModelState::kUnloading:
      out->set_state(autouvm::v1::MODEL_STATE_UNLOADING);
      return;
    case ModelState::kFailed:
      out->set_state(autouvm::v1::MODEL_STATE_FAILED);
      out->set_error(view.error);
      return;
    case ModelState::kReady:
      out->set_state(autouvm::v1::MODEL_STATE_READY);
      break;
  }
  const engine::ModelConfig& c = m.config;
  auto* info = out->mutable_info();
  info->set_name(c.name);
  info->set_architecture(c.architecture);
  info->set_vocab_size(c.vocab_size);
  info->set_dim(c.dim);
  info->set_n_layers(c.n_layers);
  info->set_n_heads(c.n_heads);
  info->set_n_kv_heads(c.n_kv_heads);
  info->set_ffn_dim(c.ffn_dim);
  info->set_max_seq(c.max_seq);
  info->set_dtype(c.dtype);
  info->set_tokenizer(c.tokenizer);
  info->set_bos_id(c.bos_id);
  info->set_eos_id(c.eos_id);
  info->set_parameters(m.runner->parameter_count());
  info->set_parameter_bytes(m.runner->parameter_bytes());
  out->set_kv_cache_bytes(m.runner->kv_cache_bytes());
  const engine::SchedulerStats stats = m.scheduler->Stats();
  out->set_active_requests(stats.active);
  out->set_queued_requests(stats.queued);
  out->set_requests_total(stats.requests_total);
  out->set_tokens_generated_total(stats.tokens_generated_total);
  out->set_decode_steps_total(stats.decode_steps_total);
  out->set_decode_rows_total(stats.batched_rows_total);
  out->set_prefill_passes_total(stats.prefill_passes_total);
  out->set_prefill_rows_total(stats.prefill_rows_total);
  out->set_mixed_passes_total(stats.mixed_passes_total);
  out->set_turn_wait_seconds(stats.turn_wait_seconds_total);
  out->set_prefill_pass_seconds(stats.prefill_pass_seconds_total);
  out->set_decode_pass_seconds(stats.decode_pass_seconds_total);
  out->set_mixed_pass_seconds(stats.mixed_pass_seconds_total);
  if (m.session != nullptr) {
    const profiler::SessionStats ss = m.session->stats();
    out->set_passes_own_plan(static_cast<uint64_t>(ss.own));
    out->set_passes_nearest_plan(static_cast<uint64_t>(ss.nearest));
    out->set_passes_no_plan(static_cast<uint64_t>(ss.none));
  }
  if (m.graphs_on) {
    const engine::StepGraphStats g = m.runner->step_graph_stats();
    auto* x = out->mutable_step_graphs();
    x->set_graphs(static_cast<uint64_t>(g.graphs));
    x->set_captures(static_cast<uint64_t>(g.captures));
    x->set_capture_failures(static_cast<uint64_t>(g.capture_failures));
    x->set_staged_captures(static_cast<uint64_t>(g.staged_captures));
    x->set_staged_replays(static_cast<uint64_t>(g.staged_replays));
    x->set_packed_captures(static_cast<uint64_t>(g.packed_captures));
    x->set_packed_replays(static_cast<uint64_t>(g.packed_replays));
    x->set_recaptures(static_cast<uint64_t>(g.recaptures));
    x->set_replays(static_cast<uint64_t>(g.replays));
    x->set_eager_steps(static_cast<uint64_t>(g.eager_steps));
    x->set_capture_seconds(g.capture_seconds);
    x->set_bytes(g.bytes);
    x->set_last_error(g.last_error);
  }
  profiles_->FillModelStatus(m, out);
  if (m.execution != nullptr) {
    const profiler::ExecutionStats e = m.execution->stats();
    auto* x = out->mutable_execution();
    x->set_backend(e.backend);
    x->set_following(e.following);
    x->set_followed_iterations(static_cast<uint64_t>(e.followed_iterations));
    x->set_abandoned_iterations(static_cast<uint64_t>(e.abandoned_iterations));
    x->set_plan_switches(static_cast<uint64_t>(e.plan_switches));
    x->set_plan_switch_seconds(e.plan_switch_seconds);
    x->set_prefetched_bytes(e.prefetched_bytes);
    x->set_evicted_bytes(e.evicted_bytes);
    x->set_resident_bytes(e.resident_bytes);
    x->set_staged_bytes(e.staged_bytes);
    x->set_host_copy_bytes(e.host_copy_bytes);
    x->set_in_place_bytes(e.in_place_bytes);
    x->set_displaced_bytes(e.displaced_bytes);
    x->set_in_place_read_bytes(e.in_place_read_bytes);
    x->set_peak_resident_bytes(e.peak_resident_bytes);
    x->set_sleeps(e.sleeps);
    x->set_wakes(e.wakes);
    x->set_asleep(e.asleep);
    x->set_last_wake_seconds(e.last_wake_seconds);
    x->set_last_error(e.last_error);
    x->set_gpu_fault_groups(e.counters.gpu_fault_groups);
    x->set_h2d_bytes(e.counters.h2d_total());
    x->set_coded_bytes(e.counters.coded_bytes);
    x->set_decoded_bytes(e.counters.decoded_bytes);
    x->set_decode_seconds(static_cast<double>(e.counters.decode_ns) / 1e9);
    x->set_d2h_bytes(e.counters.d2h_total());
    x->set_evictions(e.counters.evictions);
    x->set_sampled_iterations(static_cast<uint64_t>(e.sampled_iterations));
    x->set_reclassified_ops(static_cast<uint64_t>(e.reclassified_ops));
    x->set_repinned_bytes(e.repinned_bytes);
  }
}

grpc::ServerUnaryReactor* AdminService::ListModels(grpc::CallbackServerContext* context,
                                                   const autouvm::v1::ListModelsRequest* request,
                                                   autouvm::v1::ListModelsResponse* response) {
  return Serve(context, *request, [&] {
    for (const ModelView& view : models_->List()) Fill(view, response->add_models());
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* AdminService::GetModelStatus(grpc::CallbackServerContext* context,
                                                       const autouvm::v1::GetModelStatusRequest* request,
                                                       autouvm::v1::ModelStatus* response) {
  return Serve(context, *request, [&] {
    const auto view = models_->Lookup(request->model());
    if (!view.ok()) return ToGrpc(view.status());
    Fill(*view, response);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* AdminService::GetServerStatus(grpc::CallbackServerContext* context,
                                                        const autouvm::v1::GetServerStatusRequest* request,
                                                        autouvm::v1::ServerStatus* response) {
  return Serve(context, *request, [&] {
    response->set_version(facts_.version);
    response->set_backend(config_->backend);
    response->set_gpu(config_->gpu);
    response->set_profile_store(facts_.profile_store);
    for (const std::string& d : facts_.health_details) response->add_health_details(d);
    if (models_->loaded() && models_->List().empty()) {
      std::error_code ec;
      response->add_health_details(
          absl::StrCat("no model in the repository ", std::filesystem::absolute(config_->model_repository, ec).string(),
                       ": health stays NOT_SERVING until one is added and loaded (Admin LoadModel)"));
    }
    response->set_admin_auth(!facts_.admin_token.empty());
    response->set_metrics_address(facts_.metrics_address);
    if (facts_.repository) response->set_corrupt_profiles_total(facts_.repository->corrupt_reads());
    if (facts_.jobs) {
      response->set_identity_mismatches_total(facts_.jobs->identity_mismatches());
      response->set_mismatched_ops_total(facts_.jobs->mismatched_ops());
    }
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* AdminService::Reprofile(grpc::CallbackServerContext* context,
                                                  const autouvm::v1::ReprofileRequest* request,
                                                  autouvm::v1::ReprofileResponse* response) {
  return Serve(context, *request, [&] { return profiles_->Reprofile(*request, response); });
}

grpc::ServerUnaryReactor* AdminService::ListProfiles(grpc::CallbackServerContext* context,
                                                     const autouvm::v1::ListProfilesRequest* request,
                                                     autouvm::v1::ListProfilesResponse* response) {
  return Serve(context, *request, [&] { return profiles_->List(*request, response); });
}

grpc::ServerUnaryReactor* AdminService::GetProfile(grpc::CallbackServerContext* context,
                                                   const autouvm::v1::GetProfileRequest* request,
                                                   autouvm::v1::GetProfileResponse* response) {
  return Serve(context, *request, [&] { return profiles_->Get(*request, response); });
}

grpc::ServerUnaryReactor* AdminService::DeleteProfile(grpc::CallbackServerContext* context,
                                                      const autouvm::v1::DeleteProfileRequest* request,
                                                      autouvm::v1::DeleteProfileResponse* response) {
  return Serve(context, *request, [&] { return profiles_->Delete(*request, response); });
}

grpc::ServerUnaryReactor* AdminService::ExportProfiles(grpc::CallbackServerContext* context,
                                                       const autouvm::v1::ExportProfilesRequest* request,
                                                       autouvm::v1::ProfileBundle* response) {
  return Serve(context, *request, [&] { return profiles_->Export(*request, response); });
}

grpc::ServerUnaryReactor* AdminService::ImportProfiles(grpc::CallbackServerContext* context,
                                                       const autouvm::v1::ImportProfilesRequest* request,
                                                       autouvm::v1::ImportProfilesResponse* response) {
  return Serve(context, *request, [&] { return profiles_->Import(*request, response); });
}

}  // namespace autouvm::server
