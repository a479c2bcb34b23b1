#include "engine/generation_frontend.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace autouvm::engine {
namespace {

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng;
}

std::string MakeRequestId() { return absl::StrCat("req-", absl::Hex(Rng()(), absl::kZeroPad16)); }

}  // namespace

GenerationCall::~GenerationCall() {
  if (entered_) frontend_->gate()->Exit();
}

absl::Status GenerationCall::Submit(GenerationRequest request, const FieldNames& names, GenerationSink* sink,
                                    const std::string& transport_defect) {
  ServingGate* gate = frontend_->gate();
  if (gate != nullptr) {
    if (!gate->TryEnter()) return absl::UnavailableError("the server is draining and accepts no new requests");
    entered_ = true;
  }
  if (!transport_defect.empty()) return absl::InvalidArgumentError(transport_defect);
  ASSIGN_OR_RETURN(const GenerationTarget target, frontend_->models()->ReadyTarget(request.model));
  model_ = target.name;
  model_alive_ = target.keep_alive;
  ASSIGN_OR_RETURN(GenerationParams params, ValidateRequest(request, target, frontend_->limits(), names, Rng()()));
  if (params.request_id.empty()) params.request_id = MakeRequestId();
  request_id_ = params.request_id;
  // From here the scheduler may finish the request at once (the sink's OnFinish before Submit returns).
  ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, target.scheduler->Submit(std::move(params), sink));
  absl::MutexLock lock(&mu_);
  handle_ = std::move(handle);
  if (cancelled_) handle_->Cancel();
  return absl::OkStatus();
}

void GenerationCall::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (handle_) handle_->Cancel();
}

}  // namespace autouvm::engine
