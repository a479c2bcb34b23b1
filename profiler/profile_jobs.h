// ProfileJobs: the profiling life of every (model, shape) key — the first iteration of an unprofiled key
// is recorded while it is served, the recorded trace is analysed and planned on a background thread and
// written to the repository, and later iterations find the profile ready. Nothing here ever blocks the
// serving thread on analysis or storage.
//
//   if (jobs.ShouldRecord(key)) { observer->BeginIteration(); ...; jobs.Submit(key, observer->EndIteration(), s); }
//   else if (jobs.ShouldVerify(key)) { observe the iteration's op names; jobs.Verify(key, names); }
//   ProfileStatus s = jobs.Status(key);     // unprofiled, recording, analyzing, ready, stale, failed
//
// States: unprofiled → recording (ShouldRecord said yes) → analyzing (Submit) → ready, or failed with
// the reason (recording or analysis failed; the model keeps serving without hints). A key whose stored
// profile is found on first sight is ready at once (a restart does not re-profile); a damaged stored
// profile is counted and the key profiled again; MarkStale makes a key record again. A profile this
// process did not record itself (stored before a restart, imported) is verified once: the ops of one
// iteration are compared with the profile's, and a mismatch makes the key stale (Note [Identity check]);
// a second one makes it unstable, served by its last plan and not profiled again (ReportMismatch).
//
// Damaged stored profiles, failures and identity mismatches are logged to stderr ("autouvmd: profiler:").
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "autouvm/v1/profile.pb.h"
#include "base/clock.h"
#include "profiler/profile_repository.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"
#include "runtime/plan.h"

namespace autouvm::profiler {

enum class ProfileState { kUnprofiled, kRecording, kAnalyzing, kReady, kStale, kFailed };
std::string_view ProfileStateName(ProfileState state);

struct StateChange {
  ProfileState state;
  absl::Time at;
  std::string reason;
};

struct ProfileStatus {
  autouvm::v1::ProfileKey key;
  ProfileState state = ProfileState::kUnprofiled;
  std::string reason;                // why it failed, or why it is stale
  std::vector<StateChange> history;  // this process's transitions, oldest first (the last 32)
  bool verified = false;             // recorded here, or its ops checked against an iteration
  int32_t mismatches = 0;            // iterations whose ops differed from its profile, in this process
  // Its ops differed twice: it is profiled no more and keeps its last plan (Note [A shape whose ops move]).
  bool unstable = false;
};

// A stored plan and the trace it was made from: what a runtime::Executor follows; and the profile's op
// classes under the plan, what a runtime::RuntimeMonitor checks the ops' times against.
struct PlanToFollow {
  runtime::Plan plan;
  runtime::AccessTrace trace;
  autouvm::v1::Profile profile;  // its trace cleared (`trace` holds it)
};

class ProfileJobs {
 public:
  // `coded_ratio`: what staged weights cross the link as, for the plans (PlanOptions::coded_ratio).
  ProfileJobs(ProfileRepository* repository, runtime::GpuSpec spec, const base::Clock* clock, double coded_ratio = 0);
  ~ProfileJobs();  // finishes the work already submitted, then stops the worker

  // True exactly once for a key that needs a profile: the caller records the iteration it is about to
  // run and hands the trace to Submit (or reports Fail). Looks the key up in the repository on first
  // sight (a cheap point read).
  bool ShouldRecord(const autouvm::v1::ProfileKey& key);
  void Submit(const autouvm::v1::ProfileKey& key, runtime::AccessTrace trace, double recording_seconds);
  void Fail(const autouvm::v1::ProfileKey& key, const std::string& reason);
  // The key records again at its next iteration; its stored profile stays until the new one replaces it.
  // An unstable key is given its chance again (an operator's Reprofile).
  void MarkStale(const autouvm::v1::ProfileKey& key, const std::string& reason);
  // Forgets what this process knows of the key: the next ShouldRecord reads the store again (after a
  // profile was deleted or imported).
  void Forget(const autouvm::v1::ProfileKey& key);

  // True exactly once for a ready key whose profile this process has not checked: the caller observes
  // the iteration it is about to run and hands its op names (in order) to Verify, which compares them
  // with the stored profile's on the background thread.
  bool ShouldVerify(const autouvm::v1::ProfileKey& key);
  void Verify(const autouvm::v1::ProfileKey& key, std::vector<std::string> ops);
  // An iteration of `key` ran other ops than its profile (`differing` of them; `detail`, such as "3 of
  // 1691; first: op 7 ran aten::zero_#0, the profile has aten::fill_#0", says which): a
  // followed iteration stopped at an op the plan did not expect, or Verify's check failed. Counted in
  // identity_mismatches() and mismatched_ops(). The first time the key records again; from its second
  // it is unstable: profiled no more, served by the plan it has, logged once (Note [A shape whose ops
  // move]). True if the key records again.
  bool ReportMismatch(const autouvm::v1::ProfileKey& key, int64_t differing, const std::string& detail);

  // The key with a checked plan (what ReadPlan reads) nearest to `key`: the same model, phase, GPU,
  // budget, policy and schema, its batch and prompt buckets closest on a log scale, the larger at a tie
  // (Note [Planned from the nearest profile], profiler/model_session.cc). Never `key` itself nor a key
  // in `excluded` (encoded keys); nullopt when there is none.
  std::optional<autouvm::v1::ProfileKey> NearestPlanned(const autouvm::v1::ProfileKey& key,
                                                        const std::set<std::string>& excluded) const;
  // Note [Plans made again with the coded sizes] (profile_jobs.cc): makes a ready key's plan again from its
  // stored trace with its weights' coded sizes (`coded`, by id: ModelExecution::CodedBytes), on the
  // background thread, and stores it in place of the old one. Where the plan differs, the key's
  // PlanGeneration goes up, so that a session holding the old plan reads it again. Nothing where the key is
  // not ready, or its trace has these sizes already.
  void PlanAgain(const autouvm::v1::ProfileKey& key, std::map<std::string, int64_t> coded);
  // How many times PlanAgain has replaced the key's plan by a different one in this process.
  int64_t PlanGeneration(const autouvm::v1::ProfileKey& key) const;
  int64_t plans_made_again() const { return plans_made_again_.load(); }  // of every key: plans replaced
  double coded_ratio() const { return coded_ratio_; }                    // the one the constructor took
  ProfileStatus Status(const autouvm::v1::ProfileKey& key) const;
  // The stored plan of a ready key this process recorded or has checked, read from the repository:
  // NOT_FOUND while the key is not ready, unchecked or being checked; DATA_LOSS if what is stored is
  // damaged (the key is then made stale).
  absl::StatusOr<PlanToFollow> ReadPlan(const autouvm::v1::ProfileKey& key);
  std::vector<ProfileStatus> All() const;
  // Iterations whose ops differed from their profile, and the ops that differed in them.
  int64_t identity_mismatches() const { return identity_mismatches_.load(); }
  int64_t mismatched_ops() const { return mismatched_ops_.load(); }
  // Seconds spent recording and analysing profiles in this process, by model digest.
  std::map<std::string, double> ProfilingSeconds() const;
  // Blocks until every submitted analysis and verification has finished (for tests and shutdown).
  void Drain();

 private:
  struct Analyse {
    runtime::AccessTrace trace;
    double recording_seconds = 0;
  };
  struct Check {
    std::vector<std::string> ops;
  };
  struct Again {
    std::map<std::string, int64_t> coded;
  };
  struct Job {
    autouvm::v1::ProfileKey key;
    std::variant<Analyse, Check, Again> work;
  };
  void Work();
  void RunAnalysis(const autouvm::v1::ProfileKey& key, Analyse& job);
  void RunCheck(const autouvm::v1::ProfileKey& key, const Check& job);
  void RunAgain(const autouvm::v1::ProfileKey& key, const Again& job);
  ProfileStatus& Set(const autouvm::v1::ProfileKey& key, ProfileState state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ProfileRepository* const repository_;
  const runtime::GpuSpec spec_;
  const double coded_ratio_;
  const base::Clock* const clock_;
  std::atomic<int64_t> identity_mismatches_{0};
  std::atomic<int64_t> mismatched_ops_{0};
  std::atomic<int64_t> plans_made_again_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, ProfileStatus> status_ ABSL_GUARDED_BY(mu_);      // by encoded key
  std::set<std::string> looking_up_ ABSL_GUARDED_BY(mu_);                 // first sight, store being read
  std::set<std::string> checking_ ABSL_GUARDED_BY(mu_);                   // Verify queued or running
  std::map<std::string, double> profiling_seconds_ ABSL_GUARDED_BY(mu_);  // by model digest
  std::map<std::string, int64_t> generations_ ABSL_GUARDED_BY(mu_);       // PlanGeneration, by encoded key
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace autouvm::profiler
