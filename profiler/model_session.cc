#include "profiler/model_session.h"

#include <chrono>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  // An iteration recorded while it follows another shape's plan may read weights through their buffers.
  if (execution != nullptr) observer->ResolveBoundStorage(execution->binding());
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

void ModelSession::DropOwnPlan() {
  if (execution_ == nullptr) return;
  const std::string key = EncodeKey(key_);
  plans_.erase(key);
  if (absl::Status s = execution_->Drop(key); !s.ok()) {
    AUTOUVM_LOG(WARNING) << "executor: releasing the followed plan: " << s.message();
  }
}

void ModelSession::Suspend() {
  if (execution_ == nullptr) return;
  // The iteration reads the model's own weights: a plan that stages gives them back first.
  if (absl::Status s = execution_->Suspend(); !s.ok()) {
    AUTOUVM_LOG(WARNING) << "executor: releasing the followed plan: " << s.message();
  }
}

bool ModelSession::BeginFollowing(const autouvm::v1::ProfileKey& plan_key, bool borrowed) {
  // `stock` is the driver alone, by definition.
  if (execution_ == nullptr || identity_.policy == "stock") return false;
  const std::string key = EncodeKey(plan_key);
  auto it = plans_.find(key);
  const int64_t generation = jobs_->PlanGeneration(plan_key);
  if (it != plans_.end() && generations_[key] != generation) {
    // Note [Plans made again with the coded sizes]: the key's plan was replaced. What the old one staged
    // stays staged, for the new one to adopt.
    if (absl::Status s = execution_->Drop(key); !s.ok()) {
      AUTOUVM_LOG(WARNING) << "executor: releasing the plan made again: " << s.message();
    }
    plans_.erase(it);
    it = plans_.end();
  }
  if (it == plans_.end()) {
    auto plan = jobs_->ReadPlan(plan_key);
    if (!plan.ok()) return false;  // not ready or not checked yet (NOT_FOUND), or damaged (now stale)
    it = plans_.emplace(key, std::make_shared<const PlanToFollow>(std::move(*plan))).first;
    generations_[key] = generation;
  }
  auto subscribers = execution_->Begin(key, it->second);
  if (!subscribers.ok()) {
    const absl::Status& s = subscribers.status();
    plans_.erase(it);
    if (borrowed) {
      refused_[EncodeKey(key_)].insert(key);
    } else {
      // A plan that cannot be prepared here (the backend refused) fails its key: profiling it again would
      // make the same plan, so the shape is served without one until an admin Reprofile.
      jobs_->Fail(plan_key, absl::StrCat("its plan could not be prepared: ", s.message()));
    }
    return false;
  }
  following_ = std::move(*subscribers);
  for (runtime::OpSubscriber* sub : following_) observer_->AddSubscriber(sub);
  plan_key_ = key;
  borrowed_ = borrowed;
  return true;
}

// Note [Planned from the nearest profile]: a shape's first iterations come before its profile — the one
// recorded, those while it is analysed, a stored profile's check after a restart — and a shape whose plan
// stopped part way is profiled again. Run without a plan, such an iteration faults its weights in at a
// fraction of the link's rate and leaves them on the device past the budget (issue 26: a 7B's first
// 512-token prompt at factor 1.5-2.0 took 3.8-6.0 s on the H200, 3.6-7.6 sweeps warm). Plans of one phase differ across
// shapes in their activations and the KV rows they reach, not in which weights are read in which order, so such an
// iteration follows the plan of the nearest shape of its phase that has one (ProfileJobs::NearestPlanned: buckets
// closest on a log scale, the larger at a tie, whose plan leaves more of the budget to activations), while it is
// recorded or checked for its own. A borrowed plan whose ops stop agreeing part way serves the rest of
// the iteration without hints, as an own plan's would, and lends to that shape no more; it is not made
// stale (its own shape's iterations run its ops). Only a model's very first shape of a phase runs with no
// plan, until its analysis ends. Re-profiling cannot loop: a key records on first sight, again after its first
// mismatch, and never after its second (Note [A shape whose ops move]); following a borrowed plan records nothing.
bool ModelSession::FollowNearest() {
  const std::string self = EncodeKey(key_);
  const auto refused = refused_.find(self);
  static const std::set<std::string> kNone;
  std::optional<autouvm::v1::ProfileKey> nearest =
      jobs_->NearestPlanned(key_, refused == refused_.end() ? kNone : refused->second);
  // A nearest key whose plan cannot be read now (made stale meanwhile) lends nothing this time.
  return nearest.has_value() && BeginFollowing(*nearest, /*borrowed=*/true);
}

void ModelSession::Sleep() {
  if (execution_ == nullptr || execution_->asleep()) return;
  const double started = Seconds();
  if (absl::Status s = execution_->Sleep(); !s.ok()) {
    AUTOUVM_LOG(WARNING) << "executor: putting the model to sleep: " << s.message();
    return;
  }
  if (!execution_->asleep()) return;  // no budget to keep: nothing was given back
  const ExecutionStats e = execution_->stats();
  AUTOUVM_LOG(INFO) << "model " << identity_.model_digest.substr(0, 12) << " asleep: " << e.resident_bytes
                    << " bytes kept on the device, " << e.in_place_bytes << " on the host ("
                    << absl::StrFormat("%.1f", 1e3 * (Seconds() - started)) << " ms)";
}

void ModelSession::BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) {
  pass_started_ = Seconds();
  waking_ = execution_ != nullptr && execution_->asleep();
  if (waking_) switches_before_wake_ = execution_->stats().plan_switches;
  pass_outcome_.clear();
  mode_ = Mode::kNone;
  plan_key_.clear();
  borrowed_ = false;
  key_ = Key(phase, batch, prompt_len);
  // The run again of an iteration whose result could not be trusted follows nothing: an unstable key
  // keeps its plan (Note [A shape whose ops move]), which would stop at the same op again.
  const bool rerun = rerun_unfollowed_;
  rerun_unfollowed_ = false;
  rerunning_ = rerun;
  if (rerun) {
    Suspend();
    none_.fetch_add(1);
    return;
  }
  runtime::Observer* obs = observer_.get();
  if (jobs_->ShouldRecord(key_)) {
    DropOwnPlan();
    mode_ = Mode::kRecord;
    started_ = Seconds();
    if (!FollowNearest()) Suspend();
    obs->BeginIteration(runtime::IterationMode::kRecord);
  } else if (jobs_->ShouldVerify(key_)) {
    DropOwnPlan();
    mode_ = Mode::kVerify;
    kernels_.clear();
    obs->AddSubscriber(this);
    if (!FollowNearest()) Suspend();
    obs->BeginIteration(runtime::IterationMode::kObserve);
  } else if (BeginFollowing(key_, /*borrowed=*/false) || FollowNearest()) {
    mode_ = Mode::kFollow;
    if (!following_.empty()) obs->BeginIteration(runtime::IterationMode::kObserve);
  } else {
    Suspend();
  }
  if (plan_key_.empty()) {
    none_.fetch_add(1);
  } else {
    (borrowed_ ? nearest_ : own_).fetch_add(1);
  }
}

bool ModelSession::Observed() const {
  // A followed plan with nothing to do per op runs unobserved (Note [Plans with nothing to do per op]).
  return mode_ != Mode::kNone && (mode_ != Mode::kFollow || !following_.empty());
}

// A run again is eager, as the pass it stands for was: captured, it would pay a capture in the step that
// already ran twice, and its graph (Note [Captured steps], engine/step_graphs.cc) would read weights the
// plan had left where its suspension put them.
bool ModelSession::PassMayBeCaptured() const { return !Observed() && !rerunning_; }

// Note [Staged passes captured] (runtime/executor_capture.cc): only an iteration that follows its plan
// and nothing else (a checked one gives its kernels to the check, a recorded one its trace).
uint64_t ModelSession::StagedCaptureKey() const {
  return mode_ == Mode::kFollow && !following_.empty() && execution_ != nullptr ? execution_->StagedCaptureKey() : 0;
}

absl::Status ModelSession::StagedCaptureHeld(uint64_t key) const {
  if (mode_ != Mode::kFollow || following_.empty() || execution_ == nullptr) {
    return absl::FailedPreconditionError("the pass followed no plan");
  }
  return execution_->StagedCaptureHeld(key);
}

void ModelSession::RanAsGraph(PassGraph how) {
  if (mode_ == Mode::kFollow && !following_.empty() && execution_ != nullptr) execution_->RanAsGraph(how);
}

bool ModelSession::EndFollowing(const absl::Status& status) {
  if (plan_key_.empty()) return false;
  runtime::Observer* obs = observer_.get();
  for (runtime::OpSubscriber* sub : following_) obs->RemoveSubscriber(sub);
  following_.clear();
  absl::Status followed = execution_->End();
  if (const runtime::Executor::FetchCounts f = execution_->last_fetch_counts(); f.ahead + f.at_op > 0) {
    pass_outcome_ = absl::StrCat(", fetches ", f.ahead, " ahead, ", f.at_op, " at their op, ", f.in_place_bytes,
                                 " bytes read in place");
    if (f.copying_s >= 0) {
      absl::StrAppend(&pass_outcome_,
                      absl::StrFormat(": copies %.2f ms over a span of %.2f ms, the compute waited "
                                      "%.2f ms for them, ops %.2f ms on the device",
                                      1e3 * f.copying_s, 1e3 * f.copy_span_s, 1e3 * f.waited_s, 1e3 * f.pass_s));
    }
  }
  // A failed iteration says nothing about the plan; one that ran other ops than the plan's does
  // (Note [A shape whose ops move], profiler/profile_jobs.cc).
  if (!followed.ok() && status.ok()) {
    const int64_t differing = execution_->last_differing_ops();
    absl::StrAppend(&pass_outcome_, ", stopped: ", followed.message());
    if (borrowed_) {
      AUTOUVM_LOG(INFO) << "executor: " << EncodeKey(key_) << " followed the plan of " << plan_key_
                        << " until it stopped (" << followed.message() << "); it borrows that plan no more";
      refused_[EncodeKey(key_)].insert(plan_key_);
    } else if (differing > 0) {
      const std::string detail =
          absl::StrCat(differing, " of ", execution_->last_ops_compared(), "; first: ", followed.message());
      if (jobs_->ReportMismatch(key_, differing, detail)) DropOwnPlan();
    } else {
      AUTOUVM_LOG(WARNING) << "executor: " << EncodeKey(key_) << ": " << followed.message() << "; profiling it again";
      jobs_->MarkStale(key_, absl::StrCat("an iteration did not follow its plan: ", followed.message()));
      DropOwnPlan();
    }
  }
  return execution_->last_iteration_untrusted();
}

// One debug line per pass, to line a slow step up with the plan it followed (or did not).
void ModelSession::LogPass(Mode mode, bool rerun) const {
  if (!base::LogEnabled(base::LogLevel::kDebug)) return;
  static constexpr const char* kModes[] = {"served", "recorded", "checked", "followed"};
  AUTOUVM_LOG(DEBUG) << "pass " << EncodeKey(key_) << ": " << kModes[static_cast<int>(mode)] << ", plan "
                     << (plan_key_.empty() ? "none" : absl::StrCat(borrowed_ ? "nearest " : "own ", plan_key_)) << ", "
                     << absl::StrFormat("%.1f", 1e3 * (Seconds() - pass_started_)) << " ms" << pass_outcome_
                     << (rerun ? "; its result is not trusted: run again" : "");
}

bool ModelSession::AfterIteration(const absl::Status& status) {
  if (waking_) {
    waking_ = false;
    const double took = Seconds() - pass_started_;
    execution_->Woke(took);
    std::string split = " (it followed no plan)";
    if (execution_->stats().plan_switches > switches_before_wake_) {
      const ModelExecution::SwitchTimes sw = execution_->last_switch();
      split = absl::StrFormat(
          ", of which its plan's switch %.1f ms (released in %.1f, advice lifted in %.1f, prepared in %.1f)",
          1e3 * (sw.release_s + sw.lift_s + sw.prepare_s), 1e3 * sw.release_s, 1e3 * sw.lift_s, 1e3 * sw.prepare_s);
    }
    AUTOUVM_LOG(INFO) << "model " << identity_.model_digest.substr(0, 12) << " woke: its first pass took "
                      << absl::StrFormat("%.1f", 1e3 * took) << " ms" << split;
  }
  if (mode_ == Mode::kNone) {
    LogPass(Mode::kNone, false);
    return false;
  }
  runtime::Observer* obs = observer_.get();
  runtime::AccessTrace trace = Observed() ? obs->EndIteration() : runtime::AccessTrace();
  if (mode_ == Mode::kVerify) obs->RemoveSubscriber(this);
  const Mode mode = mode_;
  mode_ = Mode::kNone;
  rerun_unfollowed_ = EndFollowing(status);
  if (mode == Mode::kFollow && !borrowed_ && status.ok() && !rerun_unfollowed_) HandCodedSizes();
  LogPass(mode, rerun_unfollowed_);
  plan_key_.clear();
  if (mode == Mode::kVerify) {
    // A failed iteration proves nothing about the profile either way: it stays ready, unchecked.
    if (status.ok()) jobs_->Verify(key_, std::move(kernels_));
  } else if (mode == Mode::kRecord) {
    if (!status.ok()) {
      jobs_->Fail(key_, absl::StrCat("the recorded iteration failed: ", status.message()));
    } else if (trace.ops.empty()) {
      jobs_->Fail(key_, "the recorded iteration ran no operator the observer could see");
    } else {
      // Note [Coded sizes in the trace]: the plan charges the weights the backend has coded by now at
      // their sizes.
      if (execution_ != nullptr) trace.coded_bytes = runtime::CodedBytesOfNamed(trace, execution_->CodedBytes());
      jobs_->Submit(key_, std::move(trace), Seconds() - started_);
    }
  }
  return rerun_unfollowed_;
}

void ModelSession::HandCodedSizes() {
  // Every so many passes: the coder takes seconds, and a look reads every weight's state on the backend.
  constexpr int64_t kCodedCheckEvery = 16;
  if (jobs_->coded_ratio() <= 0 || plan_key_.empty() || coded_handed_.count(plan_key_) > 0 ||
      coded_checks_++ % kCodedCheckEvery != 0) {
    return;
  }
  auto it = plans_.find(plan_key_);
  if (it == plans_.end()) return;
  const PlanToFollow& followed = *it->second;
  std::set<std::string> streamed;
  for (const runtime::Prefetch& f : followed.plan.prefetches) {
    for (const std::string& id : f.tensors) {
      if (runtime::IsWeightId(id)) streamed.insert(id);
    }
  }
  std::map<std::string, int64_t> coded = execution_->CodedBytes();
  bool known = true, same = true;
  for (const std::string& id : streamed) {
    auto c = coded.find(id);
    if (c == coded.end()) {
      known = false;
      break;
    }
    auto was = followed.trace.coded_bytes.find(id);
    same = same && was != followed.trace.coded_bytes.end() && was->second == c->second;
  }
  if (!known) return;  // the coder is not done with them yet
  coded_handed_.insert(plan_key_);
  if (!streamed.empty() && !same) jobs_->PlanAgain(key_, std::move(coded));
}

SessionStats ModelSession::stats() const { return {own_.load(), nearest_.load(), none_.load()}; }

void ModelSession::OnOp(const runtime::OpEvent& op) { kernels_.emplace_back(op.kernel); }

}  // namespace autouvm::profiler
