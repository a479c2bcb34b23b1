#include "profiler/model_session.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "profiler/profile_key.h"

namespace autouvm::profiler {
namespace {

double Seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

absl::StatusOr<std::unique_ptr<ModelSession>> ModelSession::Create(ProfileIdentity identity, ProfileJobs* jobs,
                                                                   const std::vector<runtime::NamedTensor>& named,
                                                                   std::unique_ptr<ModelExecution> execution) {
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Observer> observer, runtime::Observer::Create());
  for (const runtime::NamedTensor& t : named) {
    observer->NameTensor(reinterpret_cast<const void*>(t.addr), t.name, t.bytes);
  }
  return std::unique_ptr<ModelSession>(
      new ModelSession(std::move(identity), jobs, std::move(observer), std::move(execution)));
}

ModelSession::ModelSession(ProfileIdentity identity, ProfileJobs* jobs, std::unique_ptr<runtime::Observer> observer,
                           std::unique_ptr<ModelExecution> execution)
    : identity_(std::move(identity)), jobs_(jobs), observer_(std::move(observer)), execution_(std::move(execution)) {}

ModelSession::~ModelSession() = default;

autouvm::v1::ProfileKey ModelSession::Key(IterationPhase phase, int batch, int64_t prompt_len) const {
  const ProfileIdentity& id = identity_;
  if (phase == IterationPhase::kPrefill) {
    return PrefillKey(id.model_digest, batch, prompt_len, id.gpu, id.device_budget_bytes, id.policy);
  }
  if (phase == IterationPhase::kMixed) {
    return MixedKey(id.model_digest, batch, prompt_len, id.gpu, id.device_budget_bytes, id.policy);
  }
  return DecodeKey(id.model_digest, batch, id.gpu, id.device_budget_bytes, id.policy);
}

void ModelSession::Unfollow(bool drop_key) {
  if (execution_ == nullptr) return;
  absl::Status s;
  if (drop_key) {
    const std::string key = EncodeKey(key_);
    plans_.erase(key);
    s = execution_->Drop(key);
  }
  // The iteration reads the model's own weights: a plan that stages gives them back first.
  if (s.ok()) s = execution_->Suspend();
  if (!s.ok()) AUTOUVM_LOG(WARNING) << "executor: releasing the followed plan: " << s.message();
}

bool ModelSession::BeginFollowing() {
  // `stock` is the driver alone, by definition.
  if (execution_ == nullptr || identity_.policy == "stock") return false;
  const std::string key = EncodeKey(key_);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = jobs_->ReadPlan(key_);
    if (!plan.ok()) return false;  // not ready or not checked yet (NOT_FOUND), or damaged (now stale)
    it = plans_.emplace(key, std::make_shared<const PlanToFollow>(std::move(*plan))).first;
  }
  auto subscribers = execution_->Begin(key, *it->second);
  if (!subscribers.ok()) {
    const absl::Status& s = subscribers.status();
    // A plan that cannot be prepared here (the backend refused) fails its key: profiling it again would
    // make the same plan, so the shape is served without one until an admin Reprofile.
    plans_.erase(it);
    jobs_->Fail(key_, absl::StrCat("its plan could not be prepared: ", s.message()));
    return false;
  }
  following_ = std::move(*subscribers);
  for (runtime::OpSubscriber* sub : following_) observer_->AddSubscriber(sub);
  return true;
}

void ModelSession::BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) {
  mode_ = Mode::kNone;
  key_ = Key(phase, batch, prompt_len);
  // The run again of an iteration whose result could not be trusted follows nothing: an unstable key
  // keeps its plan (Note [A shape whose ops move]), which would stop at the same op again.
  const bool rerun = rerun_unfollowed_;
  rerun_unfollowed_ = false;
  if (rerun) {
    Unfollow(false);
    return;
  }
  runtime::Observer* obs = observer_.get();
  if (jobs_->ShouldRecord(key_)) {
    Unfollow(true);
    mode_ = Mode::kRecord;
    started_ = Seconds();
    obs->BeginIteration(runtime::IterationMode::kRecord);
  } else if (jobs_->ShouldVerify(key_)) {
    Unfollow(true);
    mode_ = Mode::kVerify;
    kernels_.clear();
    obs->AddSubscriber(this);
    obs->BeginIteration(runtime::IterationMode::kObserve);
  } else if (BeginFollowing()) {
    mode_ = Mode::kFollow;
    if (!following_.empty()) obs->BeginIteration(runtime::IterationMode::kObserve);
  } else {
    Unfollow(false);
  }
}

bool ModelSession::AfterIteration(const absl::Status& status) {
  if (mode_ == Mode::kNone) return false;
  runtime::Observer* obs = observer_.get();
  // A followed plan with nothing to do per op ran unobserved (Note [Plans with nothing to do per op]).
  const bool observed = mode_ != Mode::kFollow || !following_.empty();
  runtime::AccessTrace trace = observed ? obs->EndIteration() : runtime::AccessTrace();
  if (mode_ == Mode::kVerify) obs->RemoveSubscriber(this);
  const Mode mode = mode_;
  mode_ = Mode::kNone;
  if (mode == Mode::kFollow) {
    for (runtime::OpSubscriber* sub : following_) obs->RemoveSubscriber(sub);
    following_.clear();
    absl::Status followed = execution_->End();
    // A failed iteration says nothing about the plan; one that ran other ops than the plan's does
    // (Note [A shape whose ops move], profiler/profile_jobs.cc).
    if (!followed.ok() && status.ok()) {
      const int64_t differing = execution_->last_differing_ops();
      if (differing > 0) {
        const std::string detail =
            absl::StrCat(differing, " of ", execution_->last_ops_compared(), "; first: ", followed.message());
        if (jobs_->ReportMismatch(key_, differing, detail)) Unfollow(true);
      } else {
        AUTOUVM_LOG(WARNING) << "executor: " << EncodeKey(key_) << ": " << followed.message() << "; profiling it again";
        jobs_->MarkStale(key_, absl::StrCat("an iteration did not follow its plan: ", followed.message()));
        Unfollow(true);
      }
    }
    rerun_unfollowed_ = execution_->last_iteration_untrusted();
    return rerun_unfollowed_;
  }
  if (mode == Mode::kVerify) {
    // A failed iteration proves nothing about the profile either way: it stays ready, unchecked.
    if (status.ok()) jobs_->Verify(key_, std::move(kernels_));
    return false;
  }
  if (!status.ok()) {
    jobs_->Fail(key_, absl::StrCat("the recorded iteration failed: ", status.message()));
  } else if (trace.ops.empty()) {
    jobs_->Fail(key_, "the recorded iteration ran no operator the observer could see");
  } else {
    jobs_->Submit(key_, std::move(trace), Seconds() - started_);
  }
  return false;
}

void ModelSession::OnOp(const runtime::OpEvent& op) { kernels_.emplace_back(op.kernel); }

}  // namespace autouvm::profiler
