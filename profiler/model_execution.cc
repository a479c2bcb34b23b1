#include "profiler/model_execution.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "runtime/sim/sim_backend.h"
#include "runtime/sim/trace_replay.h"

namespace autouvm::profiler {
namespace {

std::string Id(const runtime::NamedTensor& t) { return absl::StrCat("param:", t.name); }

}  // namespace

// Launches each op of a followed iteration on the mirror as the kernel its trace recorded. Added to the
// observer before the PlanFollower, so that an op's kernel runs after the executor's BeforeOp (its
// fetches waited for) and before its AfterOp (its evictions).
class ModelExecution::MirrorLauncher final : public runtime::OpSubscriber {
 public:
  MirrorLauncher(runtime::sim::SimBackend* sim, const runtime::AccessTrace* trace,
                 const std::unordered_map<std::string, uint64_t>* where)
      : sim_(sim), trace_(trace), where_(where) {}

  void OnOp(const runtime::OpEvent& op) override {
    const size_t i = static_cast<size_t>(op.index);
    // An op the trace does not know: the follower stops at it, and the mirror cannot say what it touches.
    if (i >= trace_->ops.size() || trace_->ops[i].kernel != op.kernel) return;
    sim_->Launch(runtime::sim::TraceKernel(trace_->ops[i], *where_), runtime::Stream::kCompute,
                 sim_->spec().framework_op_s);
  }

 private:
  runtime::sim::SimBackend* const sim_;
  const runtime::AccessTrace* const trace_;
  const std::unordered_map<std::string, uint64_t>* const where_;
};

ModelExecution::ModelExecution(runtime::DeviceBackend* backend, std::unique_ptr<runtime::sim::SimBackend> sim,
                               std::unordered_map<std::string, runtime::TensorRange> ranges, ExecutionOptions options,
                               std::unique_ptr<runtime::UnplannedPlacement> placement)
    : backend_(backend),
      options_(options),
      sim_(std::move(sim)),
      ranges_(std::move(ranges)),
      placement_(std::move(placement)) {
  for (const auto& [id, r] : ranges_) where_[id] = r.addr;
  if (options_.monitor_every > 0) {
    timer_ = std::make_unique<runtime::OpTimer>(backend_, options_.monitor_every, runtime::OpTimer::Span::kOwn,
                                                options_.monitor_min_interval_seconds);
  }
  stats_.backend = std::string(backend_->kind());
  if (placement_->applied()) {  // placed as it was loaded
    stats_.resident_bytes = placement_->kept_bytes();
    stats_.peak_resident_bytes = stats_.resident_bytes;
    stats_.in_place_bytes = placement_->in_place_bytes();
  }
}

std::unique_ptr<runtime::UnplannedPlacement> ModelExecution::PlacementOf(
    runtime::DeviceBackend* backend, const std::vector<runtime::NamedTensor>& named,
    const std::unordered_map<std::string, runtime::TensorRange>& ranges, int64_t budget_bytes,
    int64_t min_in_place_bytes) {
  auto placement = std::make_unique<runtime::UnplannedPlacement>(backend, budget_bytes, min_in_place_bytes);
  for (const runtime::NamedTensor& t : named) {
    const std::string id = Id(t);
    if (!runtime::IsWeightId(id)) continue;
    const runtime::TensorRange& r = ranges.at(id);
    placement->Add(r.addr, r.bytes);
  }
  return placement;
}

absl::StatusOr<std::unique_ptr<ModelExecution>> ModelExecution::Mirror(const runtime::GpuSpec& spec,
                                                                       const std::vector<runtime::NamedTensor>& named,
                                                                       ExecutionOptions options) {
  // The mirror holds what the model holds whatever the card's size: the executor keeps the device
  // budget, and a model larger than the card is what the daemon is for.
  ASSIGN_OR_RETURN(auto sim,
                   runtime::sim::SimBackend::Create(
                       {.spec = spec, .allow_oversubscription = true, .coded_ratio = options.mirror_coded_ratio}));
  std::unordered_map<std::string, runtime::TensorRange> ranges;
  for (const runtime::NamedTensor& t : named) {
    ASSIGN_OR_RETURN(uint64_t addr, sim->AllocateManaged(t.bytes));
    ranges[Id(t)] = {addr, t.bytes};
  }
  runtime::DeviceBackend* backend = sim.get();
  // Every tensor has a range of its own on the mirror: none shares a VA block (Note [The budget from load]).
  auto placement = PlacementOf(backend, named, ranges, options.budget_bytes, /*min_in_place_bytes=*/0);
  return std::unique_ptr<ModelExecution>(
      new ModelExecution(backend, std::move(sim), std::move(ranges), options, std::move(placement)));
}

std::unique_ptr<ModelExecution> ModelExecution::OnDevice(runtime::DeviceBackend* backend,
                                                         const std::vector<runtime::NamedTensor>& named,
                                                         ExecutionOptions options,
                                                         std::unique_ptr<runtime::TensorBinding> binding,
                                                         std::unique_ptr<runtime::UnplannedPlacement> placement) {
  std::unordered_map<std::string, runtime::TensorRange> ranges;
  for (const runtime::NamedTensor& t : named) ranges[Id(t)] = {t.addr, t.bytes};
  if (placement == nullptr) {
    placement =
        PlacementOf(backend, named, ranges, options.budget_bytes, runtime::UnplannedPlacement::kSharedBlockBytes);
  }
  std::unique_ptr<ModelExecution> self(
      new ModelExecution(backend, nullptr, std::move(ranges), options, std::move(placement)));
  self->binding_ = std::move(binding);
  return self;
}

ModelExecution::~ModelExecution() {
  // Deliberately unchecked: at teardown there is no one left to tell; the executor's destructor would
  // ignore the same error. The model is being unloaded (its runner, destroyed next, frees its memory):
  // what is staged is dropped, not put back (seconds for a 7B's streamed part, at ~2 GB/s), and the
  // host copies kept for its weights (Note [Host copies outlive staging]) go before its memory does,
  // since another model's tensors may come to lie at their addresses.
  (void)ReleaseExecutor(runtime::Executor::Staged::kKeepStaged);
  for (const auto& [id, r] : ranges_) {
    (void)backend_->ForgetHostCopies(r.addr, r.bytes, runtime::DeviceBackend::WhenStaged::kDrop);
  }
}

int64_t ModelExecution::HostCopyBytes() const {
  int64_t sum = 0;
  for (const auto& [id, r] : ranges_) sum += backend_->HostCopyBytesWithin(r.addr, r.bytes);
  return sum;
}

absl::Status ModelExecution::PutBackLeftovers() {
  absl::Status first;
  for (const auto& [id, r] : ranges_) {
    if (backend_->StagingOf(r.addr) == runtime::DeviceBackend::Staging::kNone) continue;
    if (absl::Status s = backend_->Unstage(r.addr, r.bytes, runtime::Location::kHost); !s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status ModelExecution::ReleaseExecutor(runtime::Executor::Staged staged, Window window) {
  if (executor_ == nullptr) return absl::OkStatus();
  absl::Status released = executor_->Release(staged);
  if (window == Window::kClose) CloseCounterWindow();  // what the release moved belongs to this model
  const int64_t host_copies = HostCopyBytes();
  {
    absl::MutexLock lock(&mu_);
    stats_.host_copy_bytes = host_copies;
    released_prefetched_ += executor_->prefetched_bytes();
    released_evicted_ += executor_->evicted_bytes();
    stats_.prefetched_bytes = released_prefetched_;
    stats_.evicted_bytes = released_evicted_;
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, executor_->peak_resident_bytes());
    stats_.resident_bytes = 0;
    stats_.staged_bytes = 0;
    stats_.in_place_bytes = 0;
    stats_.displaced_bytes = 0;
    stats_.following.clear();
  }
  follower_.reset();
  launcher_.reset();
  monitor_.reset();
  executor_.reset();
  plan_.reset();
  key_.clear();
  return released;
}

absl::StatusOr<std::vector<runtime::OpSubscriber*>> ModelExecution::Begin(const std::string& key,
                                                                          std::shared_ptr<const PlanToFollow> plan) {
  untrusted_ = false;
  differing_ops_ = 0;
  ops_compared_ = 0;
  // Note [Counters per model]: the backend's counters are the device's (on CUDA one backend serves every
  // model), so each model counts what moved while its window was open: from the start of a followed
  // iteration (before a switch's preparation) through the iterations and plan switches that follow, to
  // an abandoned iteration or a release of the plan that no other plan follows at once (Drop, Suspend,
  // Sleep, unload). Each iteration's end adds what was delivered since the last reading, so the totals
  // are current to the backend's counter_lag_s(); the window's close waits for every record. On CUDA
  // an exact reading forces a CUPTI flush (10-20 ms: Note [Counters without waiting],
  // runtime/cuda/cupti_counters.h), so none is taken on the way of a pass or a switch.
  if (!counters_before_.has_value()) {
    auto before = backend_->DeliveredCounters();
    if (before.ok()) counters_before_ = *before;
  }
  const bool switching = key != key_ || executor_ == nullptr;
  if (switching) {
    const absl::Time started = absl::Now();
    const std::string before = key_;
    // Note [Plans hand pinned weights on] (runtime/executor.cc).
    std::vector<runtime::TensorRange> pinned;
    if (executor_ != nullptr) pinned = executor_->PinnedOnDevice();
    // Note [Plans hand the device buffer on] (runtime/executor.cc).
    absl::StatusOr<runtime::Executor::DeviceBuffer> buffer = runtime::Executor::DeviceBuffer();
    if (executor_ != nullptr) buffer = executor_->HandOnBuffer();
    absl::Status s = ReleaseExecutor(runtime::Executor::Staged::kKeepStaged, Window::kKeepOpen);
    if (!buffer.ok()) s = buffer.status();
    const absl::Time released = absl::Now();
    // The plan places the weights its own way (Note [The budget from load], runtime/unplanned_placement.cc).
    if (s.ok()) s = placement_->Lift();
    const absl::Time lifted = absl::Now();
    if (s.ok()) {
      plan_ = std::move(plan);
      executor_ = std::make_unique<runtime::Executor>(backend_, plan_->plan, plan_->trace, ranges_);
      executor_->set_binding(binding_.get());
      // The pass's debug line says how its copies and compute overlapped (timed events on both streams),
      // but for passes that may be captured (Note [Staged passes captured]: a graph times nothing).
      executor_->set_time_copies(base::LogEnabled(base::LogLevel::kDebug) && !options_.capture_passes);
      executor_->set_periodic_ring(options_.capture_passes);
      if (options_.driver_eviction != nullptr) executor_->set_driver_eviction(options_.driver_eviction);
      executor_->AdoptPinned(pinned);
      executor_->AdoptBuffer(*std::exchange(buffer, runtime::Executor::DeviceBuffer()));
      s = executor_->SetKvRows(kv_live_rows_, kv_pool_rows_);
      if (s.ok()) s = executor_->Prepare();
      if (!s.ok()) s = absl::Status(s.code(), absl::StrCat("preparing the plan of ", key, ": ", s.message()));
    }
    if (buffer.ok() && buffer->addr != 0) {                         // the release or the lift failed: no plan took it
      (void)runtime::Executor::FreeBuffer(backend_, buffer->addr);  // deliberately unchecked, as below
    }
    if (!s.ok()) {
      // Deliberately unchecked: the preparation's error is the one to report; what the release says
      // after it adds nothing the caller can act on. What the plan before left staged goes back too.
      (void)ReleaseExecutor();
      (void)PutBackLeftovers();
      absl::MutexLock lock(&mu_);
      stats_.last_error = std::string(s.message());
      return s;
    }
    key_ = key;
    follower_ = std::make_unique<runtime::PlanFollower>(executor_.get(), plan_->trace);
    if (sim_ != nullptr) launcher_ = std::make_unique<MirrorLauncher>(sim_.get(), &plan_->trace, &where_);
    if (timer_ != nullptr) {
      monitor_ = std::make_unique<runtime::RuntimeMonitor>(plan_->trace, plan_->profile, plan_->plan, backend_->spec(),
                                                           runtime::RuntimeMonitor::Options());
      // The new plan is checked soon, but not by this iteration, which carries its preparation (its pinned
      // tensors still arriving), nor sooner than the interval after the last check (Note [Monitoring
      // followed iterations]).
      timer_->TimeNextWhenDue();
    }
    const int64_t host_copies = HostCopyBytes();
    const SwitchTimes times = {.release_s = absl::ToDoubleSeconds(released - started),
                               .lift_s = absl::ToDoubleSeconds(lifted - released),
                               .prepare_s = absl::ToDoubleSeconds(absl::Now() - lifted)};
    const double switch_s = times.release_s + times.lift_s + times.prepare_s;
    int64_t kept = 0;
    for (const runtime::TensorRange& r : pinned) kept += r.bytes;
    if (switch_s >= options_.slow_switch_seconds) {
      // Note [Slow switches]: a switch is a few ms when the plans hand their weights and buffer on
      // (bench/results/2026-12-04-plan-switches-h200.md). One that is not runs before its pass and adds
      // to the request's TTFT, and the debug line that splits it is off in production: so a slow one
      // says at INFO where its time went — the plan before released (it waited for the device: Note
      // [Plans hand the device buffer on], runtime/executor.cc), the new one's preparation, the bytes it
      // brought in, and the host copies it made (a plan's first preparation: docs/profiling.md).
      int64_t copies_before = 0;
      {
        absl::MutexLock lock(&mu_);
        copies_before = stats_.host_copy_bytes;
      }
      AUTOUVM_LOG(INFO) << "plan switch to " << key << " took " << absl::StrFormat("%.1f", 1e3 * switch_s)
                        << " ms: released in " << absl::StrFormat("%.1f", 1e3 * times.release_s)
                        << ", advice lifted in " << absl::StrFormat("%.1f", 1e3 * times.lift_s) << ", prepared in "
                        << absl::StrFormat("%.1f", 1e3 * times.prepare_s) << "; " << kept
                        << " pinned bytes handed on, the device buffer "
                        << (executor_->buffers_adopted() > 0  ? "handed on"
                            : executor_->uses_device_buffer() ? "made anew"
                                                              : "not used")
                        << ", " << executor_->prefetched_bytes() << " bytes brought in, "
                        << std::max<int64_t>(0, host_copies - copies_before) << " bytes of new host copies";
    }
    if (base::LogEnabled(base::LogLevel::kDebug)) {
      AUTOUVM_LOG(DEBUG) << "executor: the plan of " << key << " follows " << (before.empty() ? "none" : before)
                         << ": released in " << absl::StrFormat("%.2f", 1e3 * times.release_s) << " ms, prepared in "
                         << absl::StrFormat("%.2f", 1e3 * (times.lift_s + times.prepare_s)) << " ms, " << kept
                         << " pinned bytes handed on"
                         << (executor_->buffers_adopted() > 0 ? " with the device buffer" : "") << ", "
                         << executor_->prefetched_bytes() << " prefetched; it pins " << plan_->plan.pinned_bytes
                         << ", stages " << plan_->plan.streamed_bytes << " in " << plan_->plan.prefetches.size()
                         << " fetches through a window of " << plan_->plan.window_bytes << ", reads "
                         << plan_->plan.remote_bytes << " in place";
    }
    absl::MutexLock lock(&mu_);
    last_switch_ = times;
    ++stats_.plan_switches;
    stats_.buffers_handed_on += executor_->buffers_adopted();
    stats_.plan_switch_seconds += switch_s;
    stats_.following = key;
    stats_.host_copy_bytes = host_copies;
    // What the preparation placed, before any iteration ends.
    stats_.resident_bytes = executor_->resident_bytes();
    stats_.staged_bytes = executor_->staged_bytes();
    stats_.in_place_bytes = executor_->in_place_bytes();
    stats_.displaced_bytes = executor_->displaced_bytes();
  }
  // Note [Plans with nothing to do per op]: a plan that pins or reads in place everything (a model
  // within its budget) does nothing at op boundaries once prepared; observing each op to follow it
  // would only cost host time, which is what such a step is made of (0.5-12 µs per op on the CPU,
  // bench/results/2026-11-29-observer-cpu.md; a 7B decode step has 1691 ops). Such iterations are not
  // observed unless the monitor times them or the mirror runs them.
  timed_ = false;
  if (timer_ != nullptr && !switching) {
    timer_->BeginIteration();
    timed_ = timer_->timing();
  }
  op_by_op_ = executor_->follows_ops() || launcher_ != nullptr || timed_;
  std::vector<runtime::OpSubscriber*> subscribers;
  if (!op_by_op_) return subscribers;
  // In this order: an op's mark before the follower's waits (a wait counts to the op it delays), its
  // kernel on the mirror between the follower's BeforeOp and AfterOp.
  if (launcher_ != nullptr) subscribers.push_back(launcher_.get());
  if (timed_) subscribers.push_back(timer_.get());
  subscribers.push_back(follower_.get());
  return subscribers;
}

void ModelExecution::SetKvRows(int64_t live_rows, int64_t pool_rows) {
  kv_live_rows_ = live_rows;
  kv_pool_rows_ = pool_rows;
  if (executor_ == nullptr) return;
  if (absl::Status s = executor_->SetKvRows(live_rows, pool_rows); !s.ok() && kv_error_.ok()) {
    kv_error_ = absl::Status(s.code(), absl::StrCat("placing the KV rows in use: ", s.message()));
  }
}

absl::Status ModelExecution::End() {
  absl::Status why = op_by_op_ ? follower_->EndIteration() : absl::OkStatus();
  if (why.ok() && !kv_error_.ok()) why = kv_error_;
  kv_error_ = absl::OkStatus();
  differing_ops_ = op_by_op_ ? follower_->last_differing_ops() : 0;
  ops_compared_ = op_by_op_ ? follower_->last_ops_compared() : 0;
  fetch_counts_ = executor_->TakeFetchCounts();
  const int64_t read_in_place = fetch_counts_.in_place_bytes;
  untrusted_ = !why.ok() && executor_->stages();
  if (timed_) {
    timed_ = false;
    auto seconds = timer_->EndIteration();
    absl::Status monitored = seconds.ok() ? absl::OkStatus() : seconds.status();
    // Only an iteration that followed its plan to the end is what the profile describes.
    if (monitored.ok() && why.ok() && !seconds->empty()) monitored = Monitor(*seconds);
    if (!monitored.ok() && why.ok()) why = monitored;
  }
  if (why.ok()) {
    AddDeliveredCounters();
  } else {
    CloseCounterWindow();
  }
  absl::MutexLock lock(&mu_);
  if (why.ok()) {
    ++stats_.followed_iterations;
  } else {
    ++stats_.abandoned_iterations;
    stats_.last_error = std::string(why.message());
  }
  stats_.prefetched_bytes = released_prefetched_ + executor_->prefetched_bytes();
  stats_.evicted_bytes = released_evicted_ + executor_->evicted_bytes();
  stats_.resident_bytes = executor_->resident_bytes();
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, executor_->peak_resident_bytes());
  stats_.staged_bytes = executor_->staged_bytes();
  stats_.in_place_bytes = executor_->in_place_bytes();
  stats_.displaced_bytes = executor_->displaced_bytes();
  stats_.in_place_read_bytes += read_in_place;
  return why;
}

uint64_t ModelExecution::StagedCaptureKey() const {
  if (!options_.capture_passes || executor_ == nullptr || !op_by_op_ || timed_ || !kv_error_.ok()) return 0;
  if (!executor_->PassRepeats()) return 0;
  key_epoch_ = backend_->StagingEpoch();
  // The plan's key too: another plan's executor may come to the same state (its buffer where this one's was).
  const uint64_t key = executor_->PassKey() ^ (std::hash<std::string>{}(key_)*0x9e3779b97f4a7c15ull);
  return key == 0 ? 1 : key;
}

absl::Status ModelExecution::StagedCaptureHeld(uint64_t key) const {
  if (follower_ == nullptr) return absl::FailedPreconditionError("no plan was followed");
  RETURN_IF_ERROR(follower_->Followed());
  if (const uint64_t epoch = backend_->StagingEpoch(); key != 0 && epoch != key_epoch_) {
    return absl::AbortedError(absl::StrCat("a coded host copy was finished during the capture (staging epoch ",
                                           key_epoch_, ", then ", epoch, "): its state is captured again"));
  }
  if (key == 0 || StagedCaptureKey() != key) {
    return absl::FailedPreconditionError("the captured pass did not end in the state it started from");
  }
  return absl::OkStatus();
}

void ModelExecution::RanAsGraph(PassGraph how) {
  if (executor_ == nullptr || follower_ == nullptr) return;
  switch (how) {
    case PassGraph::kNone:
      return;
    case PassGraph::kCaptured:
      executor_->AfterCapture();
      return;
    case PassGraph::kReplayed:
      follower_->Replayed();
      if (absl::Status s = executor_->Replayed(); !s.ok()) follower_->Abandon(s);
      return;
    case PassGraph::kCaptureFailed:
      // Nothing ran: the executor starts afresh and the pass runs again (last_iteration_untrusted: a pass
      // is captured only through the device buffer, so its plan stages).
      follower_->Abandon(absl::AbortedError("the pass's capture as a CUDA graph failed; it runs again eagerly"));
      return;
  }
}

void ModelExecution::AddDeliveredCounters() {
  if (!counters_before_.has_value()) return;
  auto now = backend_->DeliveredCounters();
  if (!now.ok()) return;
  absl::MutexLock lock(&mu_);
  stats_.counters += *now - *counters_before_;
  counters_before_ = *now;
}

void ModelExecution::CloseCounterWindow() {
  if (!counters_before_.has_value()) return;
  auto now = backend_->ReadCounters();
  if (now.ok()) {
    absl::MutexLock lock(&mu_);
    stats_.counters += *now - *counters_before_;
  }
  counters_before_.reset();
}

absl::Status ModelExecution::Monitor(const std::vector<double>& op_seconds) {
  const std::vector<runtime::Reclassified> changed = monitor_->Observe(op_seconds);
  std::vector<std::string> missing;
  for (const runtime::Reclassified& r : changed) missing.insert(missing.end(), r.missing.begin(), r.missing.end());
  const int64_t repinned_before = executor_->repinned_bytes();
  absl::Status s = missing.empty() ? absl::OkStatus() : executor_->Repin(missing);
  absl::MutexLock lock(&mu_);
  ++stats_.sampled_iterations;
  stats_.reclassified_ops += static_cast<int64_t>(changed.size());
  stats_.repinned_bytes += executor_->repinned_bytes() - repinned_before;
  return s;
}

std::map<std::string, int64_t> ModelExecution::CodedBytes() const {
  std::map<std::string, int64_t> out;
  for (const auto& [id, r] : ranges_) {
    if (!runtime::IsWeightId(id)) continue;
    if (std::optional<int64_t> n = backend_->CodedBytes(r.addr); n.has_value()) out[id] = *n;
  }
  return out;
}

const runtime::TensorRange* ModelExecution::range(const std::string& id) const {
  auto it = ranges_.find(id);
  return it == ranges_.end() ? nullptr : &it->second;
}

absl::Status ModelExecution::Suspend() {
  // A plan that pins and reads in place keeps its placement through the iteration: within its budget,
  // every weight readable.
  if (executor_ != nullptr && !executor_->stages()) return absl::OkStatus();
  RETURN_IF_ERROR(executor_ != nullptr ? ReleaseExecutor() : PutBackLeftovers());
  return PlaceUnplanned();
}

int64_t ModelExecution::KvBytesInUse() const {
  if (kv_pool_rows_ <= 0) return 0;
  int64_t sum = 0;
  for (const auto& [id, r] : ranges_) {
    if (runtime::IsKvCacheId(id)) sum += r.bytes / kv_pool_rows_ * std::clamp<int64_t>(kv_live_rows_, 0, kv_pool_rows_);
  }
  return sum;
}

absl::Status ModelExecution::PlaceUnplanned() {
  if (executor_ != nullptr) return absl::OkStatus();
  const int64_t kv = KvBytesInUse();
  RETURN_IF_ERROR(placement_->Apply(kv));
  if (!placement_->applied()) return absl::OkStatus();  // no budget to keep
  absl::MutexLock lock(&mu_);
  stats_.resident_bytes = placement_->kept_bytes() + kv;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  stats_.in_place_bytes = placement_->in_place_bytes();
  return absl::OkStatus();
}

// Note [A model asleep]: a model with no request still holds its plan's pinned weights and its KV pools
// on the device, memory the other models on the GPU could use (issue 28: vLLM's sleep mode frees it on
// command; here a model idle for models.<name>.idle_sleep gives it back by itself). Its scheduler calls
// Sleep() on its own thread once it has had nothing to run for that long: the plan releases the
// residency; the KV pools, no sequence holding a row of them, are discarded (moved to the host where the
// backend cannot discard); the weights keep at most models.<name>.sleep_floor on the device, in the
// order they came (the first layers, which the waking pass needs first). What the plan staged stays
// staged (its host copies hold it); the rest is staged out as host copies where the backend stages (Note
// [Weights asleep as host copies], runtime/unplanned_placement.cc), else moved to the host. No advice is
// set either way: a pass that follows no plan puts them back and reads them in place once Apply() has
// advised them, and a plan places them its own way with no advice to lift first (lifting it cost two
// calls a weight on ranges the device had mapped, on the waking pass's way). The pass that comes next
// wakes it as any pass after a release does: its plan is prepared again, copying the pinned weights back
// at the link's rate; that pass's time is the wake's, and its INFO line says how much of it the plan's
// switch took. A sleeping model still serves every request: it only starts from less.
absl::Status ModelExecution::Sleep() {
  if (options_.budget_bytes <= 0) return absl::OkStatus();
  // What the plan staged stays staged (Note [Plans hand staged weights on], runtime/executor.cc): its
  // managed range holds nothing on the device, its host copy everything, and the waking plan adopts it.
  // Putting it back first was most of a sleep (1.8-5.5 s for the H200's 7B at factor 2.0, a synchronous
  // copy on the host at ~2 GB/s) and held the backend the other models share for as long
  // (bench/results/2026-12-07-two-models-wake-and-staged-graphs-h200.md). A pass that follows no plan puts
  // it back first (Suspend), as after a Drop.
  absl::Status s = ReleaseExecutor(runtime::Executor::Staged::kKeepStaged);
  for (const auto& [id, r] : ranges_) {
    if (!runtime::IsKvCacheId(id)) continue;
    absl::Status dropped = backend_->Discard(r.addr, r.bytes, runtime::Stream::kCompute);
    if (dropped.code() == absl::StatusCode::kUnimplemented) {
      dropped = backend_->Prefetch(r.addr, r.bytes, runtime::Location::kHost, runtime::Stream::kCompute);
    }
    if (s.ok()) s = dropped;
  }
  if (s.ok()) s = placement_->Shrink(options_.sleep_keep_bytes);
  if (s.ok()) s = backend_->Synchronize();
  const int64_t host_copies = HostCopyBytes();  // with those the sleep made
  absl::MutexLock lock(&mu_);
  stats_.host_copy_bytes = host_copies;
  if (!s.ok()) {
    stats_.last_error = absl::StrCat("putting the model to sleep: ", s.message());
    return s;
  }
  stats_.resident_bytes = placement_->kept_bytes();
  stats_.in_place_bytes = placement_->in_place_bytes();
  stats_.asleep = true;
  ++stats_.sleeps;
  return absl::OkStatus();
}

ModelExecution::SwitchTimes ModelExecution::last_switch() const {
  absl::MutexLock lock(&mu_);
  return last_switch_;
}

bool ModelExecution::asleep() const {
  absl::MutexLock lock(&mu_);
  return stats_.asleep;
}

void ModelExecution::Woke(double seconds) {
  absl::MutexLock lock(&mu_);
  if (!stats_.asleep) return;
  stats_.asleep = false;
  ++stats_.wakes;
  stats_.last_wake_seconds = seconds;
}

absl::Status ModelExecution::Drop(const std::string& key) {
  if (key != key_) return absl::OkStatus();
  // A shape recorded again follows the nearest plan meanwhile, often the one whose weights are staged
  // now: putting them back first took seconds on the H200 (a synchronous copy on the host).
  return ReleaseExecutor(runtime::Executor::Staged::kKeepStaged);
}

int64_t ModelExecution::resident_bytes() const {
  if (executor_ != nullptr) return executor_->resident_bytes();
  return placement_->applied() ? placement_->kept_bytes() + KvBytesInUse() : 0;
}

int64_t ModelExecution::peak_resident_bytes() const {
  const int64_t now = executor_ != nullptr ? executor_->peak_resident_bytes() : resident_bytes();
  absl::MutexLock lock(&mu_);
  return std::max(now, stats_.peak_resident_bytes);
}

ExecutionStats ModelExecution::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace autouvm::profiler
