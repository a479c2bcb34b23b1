// ModelProfiler: one served model's link to the profiler. The scheduler calls it around every iteration
// (IterationHooks); it maps the iteration to its ProfileKey — {model digest, phase, shape bucket, GPU
// spec, device budget, policy} — and, when the profiling jobs ask for it, records the iteration through
// the process's Observer (or observes its op names to check a stored profile) and hands the result over.
// It never waits: if another model holds the observer, this iteration runs unobserved and the key is
// taken up at a later one.
//
// With a ModelExecution, an iteration whose key has a checked plan (policies paper and autouvm) follows
// it: the executor acts at the op boundaries the observer reports. An iteration that stops following
// part way (its ops differ from the plan's, or the backend failed) makes the key stale, so it is
// profiled again (once for a mismatch: a second makes the key unstable, Note [A shape whose ops move]);
// if it may have read a staged weight's discarded range, AfterIteration asks the scheduler to run it
// again, and that run follows no plan (it is recorded if the key records again).
//
//   IterationObserver observer(std::move(obs));                        // one per process (the daemon's)
//   ModelProfiler profiler(identity, &jobs, &observer, execution);     // one per model; execution may be null
//   options.hooks = &profiler;                                         // SchedulerOptions
//
// Thread-safety: the hooks are called on the model's scheduler thread; Key may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "autouvm/v1/profile.pb.h"
#include "engine/scheduler.h"
#include "profiler/profile_jobs.h"
#include "runtime/observer.h"
#include "server/model_execution.h"

namespace autouvm::server {

// The process's Observer, lent to one iteration at a time (its recording state is not per thread).
class IterationObserver {
 public:
  explicit IterationObserver(std::unique_ptr<runtime::Observer> observer) : observer_(std::move(observer)) {}
  runtime::Observer* observer() const { return observer_.get(); }
  bool TryAcquire() { return mu_.TryLock(); }
  void Release() { mu_.Unlock(); }

 private:
  std::unique_ptr<runtime::Observer> observer_;
  absl::Mutex mu_;
};

// What a model's profile keys are made of, besides the shape.
struct ProfileIdentity {
  std::string model_digest;
  std::string gpu;
  int64_t device_budget_bytes = 0;
  std::string policy;
};

class ModelProfiler final : public engine::IterationHooks, private runtime::OpSubscriber {
 public:
  // `execution` (may be null: plans are not followed) outlives the profiler.
  ModelProfiler(ProfileIdentity identity, profiler::ProfileJobs* jobs, IterationObserver* observer,
                ModelExecution* execution = nullptr);
  ~ModelProfiler() override;

  autouvm::v1::ProfileKey Key(engine::IterationPhase phase, int batch, int64_t prompt_len) const;
  const ProfileIdentity& identity() const { return identity_; }

  void BeforeIteration(engine::IterationPhase phase, int batch, int64_t prompt_len) override;
  bool AfterIteration(const absl::Status& status) override;

 private:
  void OnOp(const runtime::OpEvent& op) override;
  // Begins following key_'s plan if it has a checked one; false if the iteration follows none.
  bool BeginFollowing();
  // Before an iteration that follows no plan; drop_key: key_'s profile is being replaced.
  void Unfollow(bool drop_key);

  enum class Mode { kNone, kRecord, kVerify, kFollow };
  const ProfileIdentity identity_;
  profiler::ProfileJobs* const jobs_;
  IterationObserver* const observer_;
  ModelExecution* const execution_;
  // Plans read from the repository, by encoded key (scheduler thread only); dropped when the key is
  // recorded or checked again.
  std::map<std::string, std::shared_ptr<const profiler::PlanToFollow>> plans_;
  std::vector<runtime::OpSubscriber*> following_;  // the followed iteration's subscribers
  // The iteration in progress (scheduler thread only).
  Mode mode_ = Mode::kNone;
  autouvm::v1::ProfileKey key_;
  std::vector<std::string> kernels_;
  double started_ = 0;
  bool rerun_unfollowed_ = false;  // the next iteration runs again one whose result was untrusted
};

}  // namespace autouvm::server
