// ModelSession: one served model's AutoUVM loop — what to do with each of its iterations: record it (a
// shape with no profile), check it against a stored profile, follow its plan, or run it plainly. The
// model's scheduler calls it around every forward pass (IterationHooks); it maps the iteration to its
// ProfileKey — {model digest, phase, shape bucket, GPU spec, device budget, policy} — and hands
// recordings and checks to the profiling jobs (shared by all models).
//
// The session has an observer of its own, given the model's named tensors, so every iteration of every
// model can be observed as its key needs, whatever the other models do (Note [One global callback],
// runtime/observer.cc): no model runs an iteration without its plan because another holds the observer.
//
// With a ModelExecution, an iteration whose key has a checked plan (policies paper and autouvm) follows
// it: the executor acts at the op boundaries the observer reports. An iteration that stops following
// part way (its ops differ from the plan's, or the backend failed) makes the key stale, so it is
// profiled again (once for a mismatch: a second makes the key unstable, Note [A shape whose ops move]);
// if it may have read a staged weight's discarded range, AfterIteration asks the scheduler to run it
// again, and that run follows no plan (it is recorded if the key records again).
//
//   ASSIGN_OR_RETURN(auto session, ModelSession::Create(identity, &jobs, runner->NamedTensors(),
//                                                       std::move(execution)));   // execution may be null
//   options.hooks = session.get();                                                 // SchedulerOptions
//
// Thread-safety: the hooks are called on the model's scheduler thread; Key, identity and execution()'s
// stats may be used from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autouvm/v1/profile.pb.h"
#include "profiler/iteration_hooks.h"
#include "profiler/model_execution.h"
#include "profiler/profile_jobs.h"
#include "runtime/named_tensor.h"
#include "runtime/observer.h"

namespace autouvm::profiler {

// What a model's profile keys are made of, besides the shape.
struct ProfileIdentity {
  std::string model_digest;
  std::string gpu;
  int64_t device_budget_bytes = 0;
  std::string policy;
};

class ModelSession final : public IterationHooks, private runtime::OpSubscriber {
 public:
  // `jobs` outlives the session; `named` are the model's tensors (its observer is given their names);
  // `execution` (null: plans are not followed) is the session's.
  static absl::StatusOr<std::unique_ptr<ModelSession>> Create(ProfileIdentity identity, ProfileJobs* jobs,
                                                              const std::vector<runtime::NamedTensor>& named,
                                                              std::unique_ptr<ModelExecution> execution = nullptr);
  ~ModelSession() override;

  autouvm::v1::ProfileKey Key(IterationPhase phase, int batch, int64_t prompt_len) const;
  const ProfileIdentity& identity() const { return identity_; }
  ModelExecution* execution() const { return execution_.get(); }  // null when plans are not followed
  runtime::Observer* observer() const { return observer_.get(); }

  void BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) override;
  bool AfterIteration(const absl::Status& status) override;

 private:
  ModelSession(ProfileIdentity identity, ProfileJobs* jobs, std::unique_ptr<runtime::Observer> observer,
               std::unique_ptr<ModelExecution> execution);
  void OnOp(const runtime::OpEvent& op) override;
  // Begins following key_'s plan if it has a checked one; false if the iteration follows none.
  bool BeginFollowing();
  // Before an iteration that follows no plan; drop_key: key_'s profile is being replaced.
  void Unfollow(bool drop_key);

  enum class Mode { kNone, kRecord, kVerify, kFollow };
  const ProfileIdentity identity_;
  ProfileJobs* const jobs_;
  const std::unique_ptr<runtime::Observer> observer_;
  const std::unique_ptr<ModelExecution> execution_;
  // Plans read from the repository, by encoded key (scheduler thread only); dropped when the key is
  // recorded or checked again.
  std::map<std::string, std::shared_ptr<const PlanToFollow>> plans_;
  std::vector<runtime::OpSubscriber*> following_;  // the followed iteration's subscribers
  // The iteration in progress (scheduler thread only).
  Mode mode_ = Mode::kNone;
  autouvm::v1::ProfileKey key_;
  std::vector<std::string> kernels_;
  double started_ = 0;
  bool rerun_unfollowed_ = false;  // the next iteration runs again one whose result was untrusted
};

}  // namespace autouvm::profiler
