// ProfileJobs: the profiling life of every (model, shape) key — the first iteration of an unprofiled key
// is recorded while it is served, the recorded trace is analysed on a background thread and written to
// the repository, and later iterations find the profile ready. Nothing here ever blocks the serving
// thread on analysis or storage.
//
//   if (jobs.ShouldRecord(key)) { observer->BeginIteration(); ...; jobs.Submit(key, observer->EndIteration(), s); }
//   ProfileStatus s = jobs.Status(key);     // unprofiled, recording, analyzing, ready, stale, failed
//
// States: unprofiled → recording (ShouldRecord said yes) → analyzing (Submit) → ready, or failed with
// the reason (recording or analysis failed; the model keeps serving without hints). A key whose stored
// profile is found on first sight is ready at once (a restart does not re-profile); a damaged stored
// profile is counted and the key profiled again; MarkStale makes a ready key record again.
// Until the planner exists, profiles are classified against stock residency: nothing pinned.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "autouvm/v1/profile.pb.h"
#include "profiler/profile_repository.h"
#include "runtime/access_trace.h"
#include "runtime/clock.h"
#include "runtime/gpu_spec.h"

namespace autouvm::profiler {

enum class ProfileState { kUnprofiled, kRecording, kAnalyzing, kReady, kStale, kFailed };
std::string_view ProfileStateName(ProfileState state);

struct ProfileStatus {
  autouvm::v1::ProfileKey key;
  ProfileState state = ProfileState::kUnprofiled;
  std::string reason;  // why it failed, or why it is stale
};

class ProfileJobs {
 public:
  ProfileJobs(ProfileRepository* repository, runtime::GpuSpec spec, const runtime::Clock* clock);
  ~ProfileJobs();  // finishes the analyses already submitted, then stops the worker

  // True exactly once for a key that needs a profile: the caller records the iteration it is about to
  // run and hands the trace to Submit (or reports Fail). Looks the key up in the repository on first
  // sight (a cheap point read).
  bool ShouldRecord(const autouvm::v1::ProfileKey& key);
  void Submit(const autouvm::v1::ProfileKey& key, runtime::AccessTrace trace, double recording_seconds);
  void Fail(const autouvm::v1::ProfileKey& key, const std::string& reason);
  // The key records again at its next iteration; its stored profile stays until the new one replaces it.
  void MarkStale(const autouvm::v1::ProfileKey& key, const std::string& reason);

  ProfileStatus Status(const autouvm::v1::ProfileKey& key) const;
  std::vector<ProfileStatus> All() const;
  // Blocks until every submitted analysis has finished (for tests and shutdown).
  void Drain();

 private:
  struct Job {
    autouvm::v1::ProfileKey key;
    runtime::AccessTrace trace;
    double recording_seconds = 0;
  };
  void Work();
  void Set(const autouvm::v1::ProfileKey& key, ProfileState state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ProfileRepository* const repository_;
  const runtime::GpuSpec spec_;
  const runtime::Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, ProfileStatus> status_ ABSL_GUARDED_BY(mu_);  // by encoded key
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace autouvm::profiler
