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
// it: the executor acts at the op boundaries the observer reports. An iteration whose key has none yet
// (being recorded, analysed, verified, or profiled again) follows the plan of the nearest key of its
// phase that has one (Note [Planned from the nearest profile]). An iteration that stops following its
// own plan part way (its ops differ from the plan's, or the backend failed) makes the key stale, so it
// is profiled again (once for a mismatch: a second makes the key unstable, Note [A shape whose ops
// move]); one that stops following a borrowed plan makes that plan not lend to its key again. If it
// may have read a staged weight's discarded range, AfterIteration asks the scheduler to run it again,
// and that run follows no plan (it is recorded if the key records again).
//
//   ASSIGN_OR_RETURN(auto session, ModelSession::Create(identity, &jobs, runner->NamedTensors(),
//                                                       std::move(execution)));   // execution may be null
//   options.hooks = session.get();                                                 // SchedulerOptions
//
// Thread-safety: the hooks are called on the model's scheduler thread; Key, identity and execution()'s
// stats may be used from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
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

// Iterations by the plan they followed (from any thread).
struct SessionStats {
  int64_t own = 0;      // their key's own plan
  int64_t nearest = 0;  // the nearest key's plan: their key had none yet
  int64_t none = 0;     // no plan: none of their phase existed, or a run again after an untrusted one
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
  SessionStats stats() const;

  void BeforeIteration(IterationPhase phase, int batch, int64_t prompt_len) override;
  // A pass that follows a plan with nothing to do per op, or follows none unobserved.
  bool PassMayBeCaptured() const override;
  uint64_t StagedCaptureKey() const override;
  absl::Status StagedCaptureHeld(uint64_t key) const override;
  void RanAsGraph(PassGraph how) override;
  bool AfterIteration(const absl::Status& status) override;
  // Note [A model asleep] (profiler/model_execution.cc): the execution gives the device memory back; the
  // next pass wakes it and is timed as its wake.
  void Sleep() override;

 private:
  ModelSession(ProfileIdentity identity, ProfileJobs* jobs, std::unique_ptr<runtime::Observer> observer,
               std::unique_ptr<ModelExecution> execution);
  void OnOp(const runtime::OpEvent& op) override;
  // Begins following `plan_key`'s plan (key_'s own, or borrowed for it) if it has a checked one; false
  // if the iteration follows none.
  bool BeginFollowing(const autouvm::v1::ProfileKey& plan_key, bool borrowed);
  // Begins following the plan of the key nearest to key_ that lends to it; false if there is none.
  bool FollowNearest();
  // After the iteration: ends following the plan begun; true if the result cannot be trusted.
  bool EndFollowing(const absl::Status& status);
  // key_'s profile is being replaced: its plan is forgotten (what it staged stays, for the next plan).
  void DropOwnPlan();
  // After a pass that followed key_'s own plan: once the backend has coded every weight the plan streams,
  // their sizes go to the jobs, which make the plan again with them (Note [Plans made again with the coded
  // sizes], profile_jobs.cc), once per key.
  void HandCodedSizes();
  // Before an iteration that follows no plan.
  void Suspend();
  // Whether the observer watches the iteration in progress (recorded, checked, or following a plan that
  // acts at op boundaries).
  bool Observed() const;

  enum class Mode { kNone, kRecord, kVerify, kFollow };
  void LogPass(Mode mode, bool rerun) const;
  const ProfileIdentity identity_;
  ProfileJobs* const jobs_;
  const std::unique_ptr<runtime::Observer> observer_;
  const std::unique_ptr<ModelExecution> execution_;
  // Plans read from the repository, by encoded key (scheduler thread only); dropped when the key is
  // recorded or checked again.
  std::map<std::string, std::shared_ptr<const PlanToFollow>> plans_;
  std::map<std::string, int64_t> generations_;     // of each plan in plans_ (ProfileJobs::PlanGeneration)
  std::set<std::string> coded_handed_;             // keys HandCodedSizes is done with
  int64_t coded_checks_ = 0;                       // HandCodedSizes' calls, to look every kCodedCheckEvery
  std::vector<runtime::OpSubscriber*> following_;  // the followed iteration's subscribers
  // Keys whose plan stopped part way in an iteration of another key, by that key: they lend it no more.
  std::map<std::string, std::set<std::string>> refused_;
  // The iteration in progress (scheduler thread only).
  Mode mode_ = Mode::kNone;
  autouvm::v1::ProfileKey key_;
  std::vector<std::string> kernels_;
  double started_ = 0;
  double pass_started_ = 0;
  std::string pass_outcome_;       // how following ended, for LogPass
  bool rerun_unfollowed_ = false;  // the next iteration runs again one whose result was untrusted
  bool rerunning_ = false;         // the iteration in progress is such a run again
  // The plan the iteration follows: its key ("" for none), and whether it is another key's.
  std::string plan_key_;
  bool borrowed_ = false;
  bool waking_ = false;               // the pass in progress is the first since the model went to sleep
  int64_t switches_before_wake_ = 0;  // the execution's plan switches when that pass began
  std::atomic<int64_t> own_{0}, nearest_{0}, none_{0};
};

}  // namespace autouvm::profiler
