#include "server/model_profiler.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "profiler/profile_key.h"

namespace autouvm::server {
namespace {

double Seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

ModelProfiler::ModelProfiler(ProfileIdentity identity, profiler::ProfileJobs* jobs, IterationObserver* observer)
    : identity_(std::move(identity)), jobs_(jobs), observer_(observer) {}

ModelProfiler::~ModelProfiler() = default;

autouvm::v1::ProfileKey ModelProfiler::Key(IterationPhase phase, int batch, int64_t prompt_len) const {
  const ProfileIdentity& id = identity_;
  if (phase == IterationPhase::kPrefill) {
    return profiler::PrefillKey(id.model_digest, batch, prompt_len, id.gpu, id.device_budget_bytes, id.policy);
  }
  return profiler::DecodeKey(id.model_digest, batch, id.gpu, id.device_budget_bytes, id.policy);
}

void ModelProfiler::BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) {
  mode_ = Mode::kNone;
  key_ = Key(phase, batch, prompt_len);
  // Another model's iteration holds the observer: this key is taken up at a later iteration.
  if (!observer_->TryAcquire()) return;
  runtime::Observer* obs = observer_->observer();
  if (jobs_->ShouldRecord(key_)) {
    mode_ = Mode::kRecord;
    started_ = Seconds();
    obs->BeginIteration(runtime::IterationMode::kRecord);
  } else if (jobs_->ShouldVerify(key_)) {
    mode_ = Mode::kVerify;
    kernels_.clear();
    obs->AddSubscriber(this);
    obs->BeginIteration(runtime::IterationMode::kObserve);
  } else {
    observer_->Release();
  }
}

void ModelProfiler::AfterIteration(const absl::Status& status) {
  if (mode_ == Mode::kNone) return;
  runtime::Observer* obs = observer_->observer();
  runtime::AccessTrace trace = obs->EndIteration();
  if (mode_ == Mode::kVerify) obs->RemoveSubscriber(this);
  observer_->Release();
  const Mode mode = mode_;
  mode_ = Mode::kNone;
  if (mode == Mode::kVerify) {
    // A failed iteration proves nothing about the profile either way: it stays ready, unchecked.
    if (status.ok()) jobs_->Verify(key_, std::move(kernels_));
    return;
  }
  if (!status.ok()) {
    jobs_->Fail(key_, absl::StrCat("the recorded iteration failed: ", status.message()));
  } else if (trace.ops.empty()) {
    jobs_->Fail(key_, "the recorded iteration ran no operator the observer could see");
  } else {
    jobs_->Submit(key_, std::move(trace), Seconds() - started_);
  }
}

void ModelProfiler::OnOp(const runtime::OpEvent& op) { kernels_.emplace_back(op.kernel); }

}  // namespace autouvm::server
