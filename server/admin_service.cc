#include "server/admin_service.h"

#include "absl/strings/str_cat.h"

namespace autouvm::server {

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
    case ModelState::kFailed:
      out->set_state(autouvm::v1::MODEL_STATE_FAILED);
      out->set_error(view.error);
      return;
    case ModelState::kReady:
      out->set_state(autouvm::v1::MODEL_STATE_READY);
      break;
  }
  const ModelConfig& c = m.config;
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
  const SchedulerStats stats = m.scheduler->Stats();
  out->set_active_requests(stats.active);
  out->set_queued_requests(stats.queued);
  out->set_requests_total(stats.requests_total);
  out->set_tokens_generated_total(stats.tokens_generated_total);
  out->set_decode_steps_total(stats.decode_steps_total);
  out->set_decode_rows_total(stats.batched_rows_total);
}

grpc::ServerUnaryReactor* AdminService::ListModels(grpc::CallbackServerContext* context,
                                                   const autouvm::v1::ListModelsRequest* /*request*/,
                                                   autouvm::v1::ListModelsResponse* response) {
  for (const ModelView& view : models_->List()) Fill(view, response->add_models());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetModelStatus(grpc::CallbackServerContext* context,
                                                       const autouvm::v1::GetModelStatusRequest* request,
                                                       autouvm::v1::ModelStatus* response) {
  auto* reactor = context->DefaultReactor();
  if (request->model().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model: must be set"));
    return reactor;
  }
  const ModelView view = models_->Find(request->model());
  if (view.model == nullptr) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("model '", request->model(), "' is not served")));
    return reactor;
  }
  Fill(view, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace autouvm::server
