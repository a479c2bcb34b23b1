#include "profiler/profile_jobs.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "profiler/analysis.h"
#include "profiler/profile_key.h"

namespace autouvm::profiler {

std::string_view ProfileStateName(ProfileState state) {
  switch (state) {
    case ProfileState::kUnprofiled:
      return "unprofiled";
    case ProfileState::kRecording:
      return "recording";
    case ProfileState::kAnalyzing:
      return "analyzing";
    case ProfileState::kReady:
      return "ready";
    case ProfileState::kStale:
      return "stale";
    case ProfileState::kFailed:
      return "failed";
  }
  return "unknown";
}

ProfileJobs::ProfileJobs(ProfileRepository* repository, runtime::GpuSpec spec, const runtime::Clock* clock)
    : repository_(repository), spec_(std::move(spec)), clock_(clock), worker_([this] { Work(); }) {}

ProfileJobs::~ProfileJobs() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void ProfileJobs::Set(const autouvm::v1::ProfileKey& key, ProfileState state, std::string reason) {
  ProfileStatus& s = status_[EncodeKey(key)];
  s.key = key;
  s.state = state;
  s.reason = std::move(reason);
}

bool ProfileJobs::ShouldRecord(const autouvm::v1::ProfileKey& key) {
  const std::string k = EncodeKey(key);
  {
    absl::MutexLock lock(&mu_);
    auto it = status_.find(k);
    if (it != status_.end()) {
      const ProfileState s = it->second.state;
      if (s != ProfileState::kUnprofiled && s != ProfileState::kStale) return false;
      Set(key, ProfileState::kRecording, "");
      return true;
    }
    // First sight: claimed as recording while the store is read, so that a concurrent first request
    // of the same key does not record too.
    Set(key, ProfileState::kRecording, "");
  }
  // A stored profile makes the key ready; a missing or damaged one is profiled (again).
  auto stored = repository_->Get(key);
  absl::MutexLock lock(&mu_);
  if (stored.ok() && stored->has_value()) {
    Set(key, ProfileState::kReady, "");
    return false;
  }
  Set(key, ProfileState::kRecording, stored.ok() ? "" : std::string(stored.status().message()));
  return true;
}

void ProfileJobs::Submit(const autouvm::v1::ProfileKey& key, runtime::AccessTrace trace, double recording_seconds) {
  absl::MutexLock lock(&mu_);
  Set(key, ProfileState::kAnalyzing, "");
  queue_.push_back({key, std::move(trace), recording_seconds});
}

void ProfileJobs::Fail(const autouvm::v1::ProfileKey& key, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  Set(key, ProfileState::kFailed, reason);
}

void ProfileJobs::MarkStale(const autouvm::v1::ProfileKey& key, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  Set(key, ProfileState::kStale, reason);
}

ProfileStatus ProfileJobs::Status(const autouvm::v1::ProfileKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = status_.find(EncodeKey(key));
  if (it != status_.end()) return it->second;
  ProfileStatus unknown;
  unknown.key = key;
  return unknown;
}

std::vector<ProfileStatus> ProfileJobs::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<ProfileStatus> out;
  for (const auto& [k, s] : status_) out.push_back(s);
  return out;
}

void ProfileJobs::Drain() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && busy_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void ProfileJobs::Work() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    const auto t0 = std::chrono::steady_clock::now();
    autouvm::v1::Profile profile = Analyze(
        job.key, job.trace, spec_, [](const std::string&) { return false; }, clock_->Now());
    profile.set_profiling_seconds(job.recording_seconds +
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    absl::Status written = repository_->Put(profile, /*plan=*/"");
    absl::MutexLock lock(&mu_);
    if (written.ok()) {
      Set(job.key, ProfileState::kReady, "");
    } else {
      Set(job.key, ProfileState::kFailed, absl::StrCat("storing the profile: ", written.message()));
    }
    --busy_;
  }
}

}  // namespace autouvm::profiler
