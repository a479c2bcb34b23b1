#include "profiler/profile_jobs.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "runtime/plan_proto.h"
#include "runtime/trace_proto.h"

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

namespace {
constexpr size_t kHistory = 32;
}  // namespace

ProfileJobs::ProfileJobs(ProfileRepository* repository, runtime::GpuSpec spec, const base::Clock* clock,
                         double coded_ratio)
    : repository_(repository), spec_(std::move(spec)), coded_ratio_(coded_ratio), clock_(clock), worker_([this] {
        Work();
      }) {}

ProfileJobs::~ProfileJobs() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

ProfileStatus& ProfileJobs::Set(const autouvm::v1::ProfileKey& key, ProfileState state, std::string reason) {
  auto [it, fresh] = status_.try_emplace(EncodeKey(key));
  ProfileStatus& s = it->second;
  if (fresh) {
    s.key = key;
    s.history.push_back({ProfileState::kUnprofiled, clock_->Now(), ""});
  }
  if (s.state != state || s.reason != reason) {
    if (s.history.size() >= kHistory) s.history.erase(s.history.begin());
    s.history.push_back({state, clock_->Now(), reason});
  }
  s.state = state;
  s.reason = std::move(reason);
  return s;
}

bool ProfileJobs::ShouldRecord(const autouvm::v1::ProfileKey& key) {
  const std::string k = EncodeKey(key);
  {
    absl::MutexLock lock(&mu_);
    auto it = status_.find(k);
    if (it != status_.end()) {
      if (it->second.state != ProfileState::kStale) return false;
      Set(key, ProfileState::kRecording, "");
      return true;
    }
    // First sight: the store is read outside the lock; a concurrent first request of the same key
    // meanwhile runs unrecorded.
    if (!looking_up_.insert(k).second) return false;
  }
  // A stored profile makes the key ready; a missing or damaged one is profiled (again).
  auto stored = repository_->Get(key);
  absl::MutexLock lock(&mu_);
  looking_up_.erase(k);
  if (stored.ok() && stored->has_value()) {
    Set(key, ProfileState::kReady, "found in the profile store").verified = false;
    return false;
  }
  if (!stored.ok()) {
    AUTOUVM_LOG(WARNING) << "profiler: " << stored.status().message() << "; profiling " << k << " again";
  }
  Set(key, ProfileState::kRecording, stored.ok() ? "" : std::string(stored.status().message()));
  return true;
}

void ProfileJobs::Submit(const autouvm::v1::ProfileKey& key, runtime::AccessTrace trace, double recording_seconds) {
  absl::MutexLock lock(&mu_);
  Set(key, ProfileState::kAnalyzing, "");
  queue_.push_back({key, Analyse{std::move(trace), recording_seconds}});
}

void ProfileJobs::Fail(const autouvm::v1::ProfileKey& key, const std::string& reason) {
  AUTOUVM_LOG(WARNING) << "profiler: " << EncodeKey(key) << " failed: " << reason;
  absl::MutexLock lock(&mu_);
  Set(key, ProfileState::kFailed, reason);
}

void ProfileJobs::MarkStale(const autouvm::v1::ProfileKey& key, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  ProfileStatus& s = Set(key, ProfileState::kStale, reason);
  s.mismatches = 0;
  s.unstable = false;
}

// Note [A shape whose ops move]: a key's profile names its ops by position and kernel id, so it serves
// only iterations that run the same ops. When they do not (Note [Identity check]), the key is profiled
// again once: a profile made by another libtorch, or before a model was edited in place, is replaced.
// A shape whose ops differ from one iteration to the next (libtorch picking another kernel by size
// within a prefill bucket, as aten::zero_ did: Note [Kernels that depend on size], runtime/observer.cc)
// would otherwise be profiled forever, every request of it served without its plan (426 re-profiles in
// a 5-minute soak). So a second mismatch makes the key unstable: it keeps the plan it has, which serves
// the iterations that run its ops (the others run as far as their ops agree, then without hints), is
// not recorded again until an operator asks (Reprofile), is logged once, and every mismatching
// iteration is still counted (autouvm_profile_mismatches_total; unstable keys in autouvm_profiles_unstable).
bool ProfileJobs::ReportMismatch(const autouvm::v1::ProfileKey& key, int64_t differing, const std::string& detail) {
  identity_mismatches_.fetch_add(1);
  mismatched_ops_.fetch_add(differing);
  const std::string k = EncodeKey(key);
  absl::MutexLock lock(&mu_);
  auto it = status_.find(k);
  if (it != status_.end() && it->second.unstable) return false;  // counted, not logged again
  const int32_t mismatches = it == status_.end() ? 1 : it->second.mismatches + 1;
  std::string what = absl::StrCat("ops differ from the profile (", detail, ")");
  if (mismatches < 2) {
    AUTOUVM_LOG(INFO) << "profiler: " << k << ": " << what << "; profiling it again";
    Set(key, ProfileState::kStale, std::move(what)).mismatches = mismatches;
    return true;
  }
  AUTOUVM_LOG(WARNING)
      << "profiler: " << k << ": " << what
      << " again: this shape runs other ops from one iteration to the next; it keeps its last plan and is"
         " not profiled again (further mismatches are counted in autouvm_profile_mismatches_total, not"
         " logged)";
  std::string reason = absl::StrCat("unstable: its ops differed from its profile twice (last: ", what,
                                    "); served by its last plan, not profiled again");
  ProfileStatus& s = it != status_.end() && it->second.state != ProfileState::kStale
                         ? Set(key, it->second.state, std::move(reason))
                         : Set(key, ProfileState::kFailed, std::move(reason));
  s.mismatches = mismatches;
  s.unstable = true;
  return false;
}

void ProfileJobs::Forget(const autouvm::v1::ProfileKey& key) {
  absl::MutexLock lock(&mu_);
  status_.erase(EncodeKey(key));
}

bool ProfileJobs::ShouldVerify(const autouvm::v1::ProfileKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = status_.find(EncodeKey(key));
  if (it == status_.end() || it->second.state != ProfileState::kReady || it->second.verified) return false;
  it->second.verified = true;  // claimed: one check per profile
  return true;
}

void ProfileJobs::Verify(const autouvm::v1::ProfileKey& key, std::vector<std::string> ops) {
  absl::MutexLock lock(&mu_);
  checking_.insert(EncodeKey(key));
  queue_.push_back({key, Check{std::move(ops)}});
}

absl::StatusOr<PlanToFollow> ProfileJobs::ReadPlan(const autouvm::v1::ProfileKey& key) {
  {
    absl::MutexLock lock(&mu_);
    auto it = status_.find(EncodeKey(key));
    if (it == status_.end() || it->second.state != ProfileState::kReady || !it->second.verified ||
        checking_.count(it->first) > 0) {
      return absl::NotFoundError(absl::StrCat(EncodeKey(key), ": no checked plan"));
    }
  }
  auto damaged = [&](const std::string& what) {
    std::string reason = absl::StrCat("reading its plan to follow: ", what);
    AUTOUVM_LOG(INFO) << "profiler: " << EncodeKey(key) << ": " << reason << "; profiling it again";
    absl::MutexLock lock(&mu_);
    Set(key, ProfileState::kStale, reason);
    return absl::DataLossError(absl::StrCat(EncodeKey(key), ": ", reason));
  };
  auto profile = repository_->Get(key);
  if (!profile.ok()) return damaged(std::string(profile.status().message()));
  auto plan_bytes = repository_->GetPlan(key);
  if (!plan_bytes.ok()) return damaged(std::string(plan_bytes.status().message()));
  if (!profile->has_value() || !plan_bytes->has_value()) return damaged("the profile or its plan is gone");
  autouvm::v1::Plan stored;
  if (!stored.ParseFromString(**plan_bytes)) return damaged("the stored plan does not parse");
  if (EncodeKey(stored.key()) != EncodeKey(key)) {
    return damaged(absl::StrCat("the stored plan was made for ", EncodeKey(stored.key())));
  }
  auto plan = runtime::FromProto(stored);
  if (!plan.ok()) return damaged(std::string(plan.status().message()));
  PlanToFollow out;
  out.plan = *std::move(plan);
  out.trace = runtime::FromProto((*profile)->trace());
  out.profile = std::move(**profile);
  out.profile.clear_trace();
  return out;
}

std::map<std::string, double> ProfileJobs::ProfilingSeconds() const {
  absl::MutexLock lock(&mu_);
  return profiling_seconds_;
}

std::optional<autouvm::v1::ProfileKey> ProfileJobs::NearestPlanned(const autouvm::v1::ProfileKey& key,
                                                                   const std::set<std::string>& excluded) const {
  auto log2 = [](int32_t n) { return std::log2(static_cast<double>(std::max(n, 1))); };
  const std::string self = EncodeKey(key);
  absl::MutexLock lock(&mu_);
  const ProfileStatus* best = nullptr;
  double best_distance = 0;
  bool best_larger = false;
  for (const auto& [k, s] : status_) {
    const autouvm::v1::ProfileKey& c = s.key;
    // An unstable key's plan does not even serve its own shape throughout.
    if (k == self || excluded.count(k) > 0 || s.state != ProfileState::kReady || !s.verified || s.unstable ||
        checking_.count(k) > 0) {
      continue;
    }
    if (c.phase() != key.phase() || c.model_digest() != key.model_digest() || c.gpu() != key.gpu() ||
        c.device_budget_bytes() != key.device_budget_bytes() || c.policy() != key.policy() ||
        c.schema_version() != key.schema_version()) {
      continue;
    }
    const double distance =
        std::abs(log2(c.batch()) - log2(key.batch())) + std::abs(log2(c.prompt_bucket()) - log2(key.prompt_bucket()));
    // A larger shape's plan leaves more of the budget to activations and KV rows than this one needs.
    const bool larger = c.batch() >= key.batch() && c.prompt_bucket() >= key.prompt_bucket();
    if (best == nullptr || distance < best_distance || (distance == best_distance && larger && !best_larger)) {
      best = &s;
      best_distance = distance;
      best_larger = larger;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->key;
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

// Note [Background priority]: the analysis competes with the serving threads for cores; on a machine
// with few of them (CI's 2), or where libtorch's threads spin on every core (the CPU backend), an
// analysis at normal priority slows the iterations served meanwhile by about its own length. The
// worker runs at nice 10 (Linux threads carry their own): about a tenth of a contended core, so it
// still finishes in tens of milliseconds under full load, and it takes idle cores at once. Nice 19
// (1.5%) starved it for hundreds of milliseconds behind 16 spinning threads on the GPU host.
void ProfileJobs::Work() {
  // Deliberately unchecked: a refused priority change leaves the worker at normal priority, which works.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  for (;;) {
    std::optional<Job> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, nothing left
      job.emplace(std::move(queue_.front()));
      queue_.pop_front();
      ++busy_;
    }
    if (auto* analyse = std::get_if<Analyse>(&job->work)) {
      RunAnalysis(job->key, *analyse);
    } else if (auto* again = std::get_if<Again>(&job->work)) {
      RunAgain(job->key, *again);
    } else {
      RunCheck(job->key, std::get<Check>(job->work));
    }
    absl::MutexLock lock(&mu_);
    if (std::holds_alternative<Check>(job->work)) checking_.erase(EncodeKey(job->key));
    --busy_;
  }
}

void ProfileJobs::RunAnalysis(const autouvm::v1::ProfileKey& key, Analyse& job) {
  const auto t0 = std::chrono::steady_clock::now();
  Analysis a = Analyze(key, job.trace, spec_, clock_->Now(), coded_ratio_);
  a.profile.set_profiling_seconds(job.recording_seconds +
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  absl::Status written = repository_->Put(a.profile, runtime::ToProto(a.plan, key).SerializeAsString());
  absl::MutexLock lock(&mu_);
  profiling_seconds_[key.model_digest()] += a.profile.profiling_seconds();
  // Marked stale or forgotten while it was analysed: the key records again rather than trust this one.
  auto it = status_.find(EncodeKey(key));
  if (it == status_.end() || it->second.state != ProfileState::kAnalyzing) return;
  if (written.ok()) {
    Set(key, ProfileState::kReady, "").verified = true;
  } else {
    AUTOUVM_LOG(ERROR) << "profiler: storing " << EncodeKey(key) << ": " << written.message();
    Set(key, ProfileState::kFailed, absl::StrCat("storing the profile: ", written.message()));
  }
}

// Note [Plans made again with the coded sizes]: a model's first shapes are recorded before any of its
// weights was staged, so their plans charge every streamed weight the planned coded ratio (Note [Coded
// sizes in the trace], runtime/access_trace.cc) — and those are the shapes it serves most (its warm-up
// plans prefill, mixed and decode at batch 1). Once the backend has coded what such a plan streams, the
// session hands the sizes here, and the plan is made again from the stored trace with them, on this thread
// as any analysis. The new profile replaces the old one whatever it plans (its trace now has the sizes, so
// this is done once per key, across restarts too); a different plan bumps the key's generation, which the
// session checks before following its plan.
void ProfileJobs::PlanAgain(const autouvm::v1::ProfileKey& key, std::map<std::string, int64_t> coded) {
  absl::MutexLock lock(&mu_);
  auto it = status_.find(EncodeKey(key));
  if (it == status_.end() || it->second.state != ProfileState::kReady) return;
  queue_.push_back({key, Again{std::move(coded)}});
}

int64_t ProfileJobs::PlanGeneration(const autouvm::v1::ProfileKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = generations_.find(EncodeKey(key));
  return it == generations_.end() ? 0 : it->second;
}

void ProfileJobs::RunAgain(const autouvm::v1::ProfileKey& key, const Again& job) {
  const auto t0 = std::chrono::steady_clock::now();
  auto stored = repository_->Get(key);
  auto plan_bytes = repository_->GetPlan(key);
  // Gone or damaged: ReadPlan finds out and says so; nothing to make again here.
  if (!stored.ok() || !stored->has_value() || !plan_bytes.ok() || !plan_bytes->has_value()) return;
  runtime::AccessTrace trace = runtime::FromProto((*stored)->trace());
  std::map<std::string, int64_t> sizes = runtime::CodedBytesOfNamed(trace, job.coded);
  if (sizes.empty() || sizes == trace.coded_bytes) return;
  trace.coded_bytes = std::move(sizes);
  Analysis a = Analyze(key, trace, spec_, clock_->Now(), coded_ratio_);
  const std::string plan = runtime::ToProto(a.plan, key).SerializeAsString();
  a.profile.set_profiling_seconds((*stored)->profiling_seconds() +
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const bool changed = plan != **plan_bytes;
  // Made stale, forgotten or recorded again meanwhile: what is recorded next replaces the profile.
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = status_.find(EncodeKey(key));
    return it != status_.end() && it->second.state == ProfileState::kReady;
  };
  {
    absl::MutexLock lock(&mu_);
    if (!ready()) return;
  }
  if (absl::Status written = repository_->Put(a.profile, plan); !written.ok()) {
    AUTOUVM_LOG(WARNING) << "profiler: storing " << EncodeKey(key) << " planned again: " << written.message()
                         << "; its plan stays as it was";
    return;
  }
  absl::MutexLock lock(&mu_);
  if (!ready()) return;
  profiling_seconds_[key.model_digest()] += a.profile.profiling_seconds() - (*stored)->profiling_seconds();
  if (!changed) return;
  ++generations_[EncodeKey(key)];
  plans_made_again_.fetch_add(1);
  Set(key, ProfileState::kReady, "planned again with its weights' coded sizes");
  AUTOUVM_LOG(INFO) << "profiler: " << EncodeKey(key) << " planned again with its weights' coded sizes";
}

// Note [Identity check]: a profile names ops by their position and kernel id ("aten::mm#3"). Every
// iteration of a key runs the same op sequence (ARCHITECTURE.md "Shapes"), so a profile that does not
// match the ops actually run — a libtorch upgrade that decomposes an op differently, a model file edited
// in place without a new digest — would mislead the executor. One observed iteration (op names only,
// no tensors: cheap) is compared with the profile off the serving thread; a mismatch is counted, with
// the ops that differ, and the key is made stale so the next iteration records a new profile.
void ProfileJobs::RunCheck(const autouvm::v1::ProfileKey& key, const Check& job) {
  auto stored = repository_->Get(key);
  if (!stored.ok() || !stored->has_value()) {
    absl::MutexLock lock(&mu_);
    Set(key, ProfileState::kStale,
        stored.ok() ? "the stored profile is gone"
                    : absl::StrCat("re-reading the profile: ", stored.status().message()));
    return;
  }
  const auto& ops = (*stored)->trace().ops();
  const size_t n = std::max(job.ops.size(), static_cast<size_t>(ops.size()));
  int64_t differ = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const std::string ran = i < job.ops.size() ? job.ops[i] : "(none)";
    const std::string want = i < static_cast<size_t>(ops.size()) ? ops[static_cast<int>(i)].kernel() : "(none)";
    if (ran == want) continue;
    if (differ++ == 0) first = absl::StrCat("op ", i, " ran ", ran, ", the profile has ", want);
  }
  if (differ == 0) {
    absl::MutexLock lock(&mu_);
    auto it = status_.find(EncodeKey(key));
    if (it != status_.end() && it->second.state == ProfileState::kReady) {
      Set(key, ProfileState::kReady, absl::StrCat("its ", n, " ops match a served iteration"));
    }
    return;
  }
  ReportMismatch(key, differ, absl::StrCat(differ, " of ", n, "; first: ", first));
}

}  // namespace autouvm::profiler
