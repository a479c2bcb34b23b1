// ModelExecution: a served model's plans followed at its op boundaries — a runtime::Executor driven by a
// PlanFollower from the Observer — on the backend the daemon runs the model with. ModelSession decides
// (profiler/model_session.h) which iterations follow which plan; this class owns the executor and what
// it has done.
//
// On the CPU daemon the backend is a mirror: a SimBackend on the configured GpuSpec in which every named
// tensor of the model has a simulated managed range of its size, and every op of a followed iteration
// launches as the kernel its trace recorded over the named tensors it reads and writes (activations are
// device buffers there). The simulator then accounts what the plan would move and fault on that GPU, and
// the executor's code runs exactly as on CUDA. Over real memory (CUDA) the ranges are the tensors' own.
//
//   auto ex = ModelExecution::Mirror(spec, runner->NamedTensors(), {});   // CPU daemon
//   ASSIGN_OR_RETURN(auto subscribers, ex->Begin(key, plan));   // plan: shared_ptr<const PlanToFollow>
//   for (auto* s : subscribers) observer->AddSubscriber(s);     // in this order
//   forward ...
//   for (auto* s : subscribers) observer->RemoveSubscriber(s);
//   absl::Status followed = ex->End();                  // OK: the whole iteration followed the plan
//   ex->Suspend();                                      // before an iteration that follows no plan
//
// Note [One plan owns the residency]: the model's tensors have one placement at a time, so one plan —
// the key last followed — owns it. Following another key's plan releases the executor (its staged
// weights go back to managed memory, its pinned ones stay: Note [Plans hand pinned weights on],
// runtime/executor.cc) and prepares the new one: a plan switch, counted; a decode plan
// that reads in place and pins keeps its placement through iterations that follow nothing, a staged
// one is released before them (the model must read real weights).
//
// Note [Monitoring followed iterations]: one followed iteration in `monitor_every`, but none sooner than
// `monitor_min_interval_seconds` (runtime.monitor_min_interval_s, 5 s in the daemon) after the last, is timed op by
// op on the backend's compute stream (runtime::OpTimer over each op's own span: CUDA events, or the simulator's clock
// on the mirror), and a runtime::RuntimeMonitor compares each op with the class the profile gave it under the plan:
// an op planned compute- or HBM-bound that now waits as long as moving its pinned tensors over the link names them,
// and the executor brings them back at once (Executor::Repin: something else — another model, the driver — evicted
// them). Ops reclassified and bytes re-pinned are counted. After a switch the next iteration is due (the new plan is
// checked soon), not the one that carries the switch (the plan's pinned tensors still arriving), and the interval
// still holds: one timer serves every plan. A timed iteration waits for its work to finish on the GPU, and runs
// eagerly, op by op: on the H200 a 7B decode step at its budget took 50-110 ms timed against 9-10 ms as a CUDA
// graph, so one in 64 cost ~14% of the steps' time (bench/results/2026-12-03-step-graphs-h200.md), and since a
// burst of requests switches plans two or three times (prefill, mixed, decode), a timer made anew at each switch
// timed a pass per burst. Eviction by something else is found within seconds, and a fast model's steps are not
// taxed for it.
//
// Thread-safety: Begin, End and Suspend on the model's scheduler thread; stats() from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "profiler/iteration_hooks.h"
#include "profiler/profile_jobs.h"
#include "runtime/device_backend.h"
#include "runtime/driver_eviction.h"
#include "runtime/executor.h"
#include "runtime/gpu_spec.h"
#include "runtime/named_tensor.h"
#include "runtime/observer.h"
#include "runtime/op_timer.h"
#include "runtime/runtime_monitor.h"
#include "runtime/unplanned_placement.h"

namespace autouvm::runtime::sim {
class SimBackend;
}

namespace autouvm::profiler {

struct ExecutionStats {
  std::string backend;               // "sim" (the CPU daemon's mirror) or "cuda"
  std::string following;             // the encoded key whose plan owns the residency ("" for none)
  int64_t followed_iterations = 0;   // iterations that followed their plan from first op to last
  int64_t abandoned_iterations = 0;  // iterations that stopped following part way (mismatch or error)
  int64_t plan_switches = 0;         // executors prepared (Note [One plan owns the residency])
  double plan_switch_seconds = 0;    // their host time: releases, lifts and preparations (SwitchTimes), summed
  // Of those, switches whose plan streamed through the device buffer the plan before it had (Note [Plans
  // hand the device buffer on], runtime/executor.cc).
  int64_t buffers_handed_on = 0;
  int64_t prefetched_bytes = 0;
  int64_t evicted_bytes = 0;
  int64_t resident_bytes = 0;       // named bytes the executor holds on the device now
  int64_t peak_resident_bytes = 0;  // the most it has held, over every plan followed
  int64_t staged_bytes = 0;
  // Pinned host memory held for the model's weights' host copies: staged now or kept for the next plan
  // (Note [Host copies outlive staging], runtime/device_backend.h); as of the last switch.
  int64_t host_copy_bytes = 0;
  // Streamed weights the plan's executor could not stage, read in place instead (Note [Unstageable
  // weights are read in place], runtime/executor.cc).
  int64_t in_place_bytes = 0;
  // Of those, pinned weights read in place to make room for KV rows in use (Note [KV pools follow the
  // rows in use], runtime/executor_kv_rows.cc), by the plan followed now.
  int64_t displaced_bytes = 0;
  // The weights each pass that followed a plan read in place (the plan's own, Plan.remote, and
  // in_place_bytes), summed: what in-place reads moved over the link.
  int64_t in_place_read_bytes = 0;
  int64_t sampled_iterations = 0;  // timed op by op for the runtime monitor
  int64_t reclassified_ops = 0;    // ops whose measured class differed from the plan's, over the samples
  int64_t repinned_bytes = 0;      // pinned tensors brought back after the monitor found them gone
  std::string last_error;          // why the last abandoned iteration or failed switch did not follow
  // What the backend moved during this model's followed iterations, as of the last one's end and the
  // backend's counter_lag_s() (Note [Counters per model]).
  runtime::UvmCounters counters;
  // Note [A model asleep] (model_execution.cc): times the idle model gave its device memory back, times
  // a pass woke it, whether it sleeps now, and how long the pass that last woke it took (seconds).
  int64_t sleeps = 0;
  int64_t wakes = 0;
  bool asleep = false;
  double last_wake_seconds = 0;
};

struct ExecutionOptions {
  int64_t monitor_every = 64;  // time one followed iteration in this many for the runtime monitor; 0: never
  double monitor_min_interval_seconds = 0;  // and none sooner than this after the last timed one
  // Not null: the driver's eviction under a budget, emulated at op boundaries (runtime/driver_eviction.h),
  // for plans that leave eviction to the driver (`paper`). The benchmarks' stand-in for a card smaller
  // than the one they run on (bench/decode_harness.h); the daemon leaves it to the real driver. Not owned.
  runtime::DriverEviction* driver_eviction = nullptr;
  // The model's device budget, which its weights keep while no plan owns their residency (Note [The
  // budget from load], runtime/unplanned_placement.cc); 0: they stay wherever they are.
  int64_t budget_bytes = 0;
  // What an idle model keeps on the device while it sleeps (Note [A model asleep], model_execution.cc).
  int64_t sleep_keep_bytes = 0;
  // The model's decode steps run as CUDA graphs (runtime.cuda_graphs): those that follow a plan through
  // the device buffer may be captured with its copies (Note [Staged passes captured],
  // runtime/executor_capture.cc) — the executors keep a periodic ring and do not time their copies.
  bool capture_passes = false;
  // The mirror's staged copies cross coded at this ratio (runtime::sim::SimOptions::coded_ratio): the CPU
  // daemon's model of runtime.compress_streamed. Ignored over a device's own backend.
  double mirror_coded_ratio = 0;
  // A plan switch that takes this long or longer says where its time went, at INFO (Note [Slow switches],
  // model_execution.cc); the daemon's are a few ms.
  double slow_switch_seconds = 0.05;
};

class ModelExecution {
 public:
  // The CPU daemon's mirror on `spec` (see above). INVALID_ARGUMENT for an unusable spec.
  static absl::StatusOr<std::unique_ptr<ModelExecution>> Mirror(const runtime::GpuSpec& spec,
                                                                const std::vector<runtime::NamedTensor>& named,
                                                                ExecutionOptions options);
  // Over the model's own memory on `backend` (not owned; outlives this); `binding` (the runner's
  // NewTensorBinding; may be null) lets plans stream weights through a device buffer; `placement` is
  // where the weights were put as they were loaded (null: wherever they are, placed by the first
  // PlaceUnplanned()).
  static std::unique_ptr<ModelExecution> OnDevice(runtime::DeviceBackend* backend,
                                                  const std::vector<runtime::NamedTensor>& named,
                                                  ExecutionOptions options,
                                                  std::unique_ptr<runtime::TensorBinding> binding = nullptr,
                                                  std::unique_ptr<runtime::UnplannedPlacement> placement = nullptr);
  // With its model, before the model's memory is freed: what is staged is dropped, not put back, and the
  // host copies kept for the model's weights are freed.
  ~ModelExecution();

  // What plans bind the model's tensors through (null: none), for its observer (Observer::ResolveBoundStorage).
  const runtime::TensorBinding* binding() const { return binding_.get(); }

  // Makes `key`'s plan the one followed (switching to it if another owns the residency), ready for the
  // iteration about to run: the subscribers to add to the observer for it, in order — none when it
  // need not be observed (Note [Plans with nothing to do per op], model_execution.cc).
  absl::StatusOr<std::vector<runtime::OpSubscriber*>> Begin(const std::string& key,
                                                            std::shared_ptr<const PlanToFollow> plan);
  // After that iteration (its subscribers removed): why following stopped part way, OK if it did not.
  absl::Status End();
  // Whether the iteration End() just reported on may have read a staged weight's discarded range (it
  // stopped following a plan that stages): its result must not be used (Note [Stopping with staged
  // weights], runtime/executor.cc).
  bool last_iteration_untrusted() const { return untrusted_; }
  // Whether it stopped because its ops differed from the plan's: how many did, of how many (0 of 0 when
  // it followed, or stopped for another reason: the backend's).
  int64_t last_differing_ops() const { return differing_ops_; }
  int64_t last_ops_compared() const { return ops_compared_; }
  // Note [Staged passes captured]: for the iteration Begin() prepared, nonzero where it may run as a
  // graph with its plan's copies (observed for the plan alone, not timed, its executor's passes
  // repeating): the key of the plan and its state. Asked as the pass is launched.
  uint64_t StagedCaptureKey() const;
  // After the pass captured under `key` has run its last op (nothing of it ran on the device yet): OK
  // when it followed the plan through every op and ended in the state it started from, so that its graph
  // stands for every pass from that key; else why not, and the graph is not kept. ABORTED where the
  // backend's staging epoch moved since the key was asked (a coded copy finished during the capture): not
  // the pass's doing, so its next repeating state is worth capturing again.
  absl::Status StagedCaptureHeld(uint64_t key) const;
  // How that iteration used such a graph (before End()).
  void RanAsGraph(PassGraph how);
  // Its fetches, issued ahead of their ops and at them (Executor::TakeFetchCounts).
  runtime::Executor::FetchCounts last_fetch_counts() const { return fetch_counts_; }
  // Before an iteration that follows no plan: a plan that stages gives up the residency, what a dropped
  // plan left staged goes back to managed memory, and the weights take their unplanned placement.
  absl::Status Suspend();
  // Places the weights as they are while no plan owns the residency (Note [The budget from load],
  // runtime/unplanned_placement.cc), for the KV rows in use: at load, and by Suspend(). Nothing while a
  // plan owns it.
  absl::Status PlaceUnplanned();
  // Note [A model asleep]: the model has no request (no KV row in use): it gives its device memory back
  // down to options.sleep_keep_bytes — the plan lets go of the residency, the KV pools are dropped, the
  // weights keep at most that much on the device and the rest goes to the host. Whatever runs next wakes
  // it (the pass that does tells Woke()). Nothing without a budget to keep.
  absl::Status Sleep();
  bool asleep() const;
  bool can_sleep() const { return options_.budget_bytes > 0; }  // it has a budget to give back
  // The pass that woke the model took `seconds` (its plan's preparation, which brings its pinned weights
  // back at the link's rate, and its compute).
  void Woke(double seconds);
  // How long the last plan switch took: the release of the plan before, the lift of the unplanned
  // placement's advice, and the new plan's preparation (seconds; the waking pass's INFO line has them).
  struct SwitchTimes {
    double release_s = 0, lift_s = 0, prepare_s = 0;
  };
  SwitchTimes last_switch() const;
  // Forgets the plan of `key` if it owns the residency (its profile is being replaced); what it staged
  // stays staged for the next plan to adopt (Note [Plans hand staged weights on]) until Suspend.
  absl::Status Drop(const std::string& key);
  // The model's KV pools have `live_rows` of their `pool_rows` in use, for the iteration about to run
  // (its blocks taken): the followed plan places that much of them, and every plan prepared later
  // (Note [KV pools follow the rows in use], runtime/executor_kv_rows.cc). An error stops following the plan
  // for the iteration; End() reports it.
  void SetKvRows(int64_t live_rows, int64_t pool_rows);

  ExecutionStats stats() const;
  // The named bytes the followed plan's executor holds on the device now, and the most held over every
  // plan followed, up to this op (scheduler thread only; stats() has them as of the last End()).
  int64_t resident_bytes() const;
  int64_t peak_resident_bytes() const;
  // The backend the executor drives (the mirror's SimBackend on the CPU), and where it placed a named
  // tensor ("param:<name>"); null for an unknown id.
  runtime::DeviceBackend* backend() const { return backend_; }
  const runtime::TensorRange* range(const std::string& id) const;
  // The model's weights whose coded sizes the backend knows now, by id ("param:<name>"): the bytes each
  // crosses the link as when staged (Note [Coded sizes in the trace], runtime/access_trace.cc). Empty
  // where staged copies cross plain.
  std::map<std::string, int64_t> CodedBytes() const;

 private:
  class MirrorLauncher;
  ModelExecution(runtime::DeviceBackend* backend, std::unique_ptr<runtime::sim::SimBackend> sim,
                 std::unordered_map<std::string, runtime::TensorRange> ranges, ExecutionOptions options,
                 std::unique_ptr<runtime::UnplannedPlacement> placement);
  // A placement of `named`'s weights wherever they are now, on `backend`.
  static std::unique_ptr<runtime::UnplannedPlacement> PlacementOf(
      runtime::DeviceBackend* backend, const std::vector<runtime::NamedTensor>& named,
      const std::unordered_map<std::string, runtime::TensorRange>& ranges, int64_t budget_bytes,
      int64_t min_in_place_bytes);
  int64_t KvBytesInUse() const;  // of the pools' ranges, for the rows SetKvRows was last told of
  // The timed iteration that just ended, checked by the monitor; pinned tensors found gone come back.
  absl::Status Monitor(const std::vector<double>& op_seconds);
  // Folds its figures into the totals; kKeepStaged only when another plan is prepared at once
  // (Note [Plans hand staged weights on], runtime/executor.cc).
  // kKeepOpen: the counter window goes on through the switch (Note [Counters per model]).
  enum class Window { kClose, kKeepOpen };
  absl::Status ReleaseExecutor(runtime::Executor::Staged staged = runtime::Executor::Staged::kPutBack,
                               Window window = Window::kClose);
  // Puts back in managed memory whatever a released plan left staged that no plan holds now.
  absl::Status PutBackLeftovers();
  void AddDeliveredCounters();    // what the backend delivered since the last reading, the window left open
  void CloseCounterWindow();      // adds what the backend moved since the last reading, all of it, and closes
  int64_t HostCopyBytes() const;  // of the model's ranges, from the backend

  runtime::DeviceBackend* const backend_;
  const ExecutionOptions options_;
  std::unique_ptr<runtime::sim::SimBackend> sim_;  // the mirror, when there is one (backend_ points to it)
  const std::unordered_map<std::string, runtime::TensorRange> ranges_;
  std::unordered_map<std::string, uint64_t> where_;  // ranges_' addresses, for the mirror's kernels
  // The weights' placement while no plan owns the residency (scheduler thread only, after load).
  std::unique_ptr<runtime::UnplannedPlacement> placement_;

  // The plan owning the residency (scheduler thread only).
  std::string key_;
  std::shared_ptr<const PlanToFollow> plan_;
  std::unique_ptr<runtime::TensorBinding> binding_;  // outlives executor_, which binds through it
  std::unique_ptr<runtime::Executor> executor_;
  std::unique_ptr<runtime::PlanFollower> follower_;
  std::unique_ptr<MirrorLauncher> launcher_;
  // The monitor's clock, for every plan (null when monitor_every is 0), and its check of the plan followed.
  std::unique_ptr<runtime::OpTimer> timer_;
  std::unique_ptr<runtime::RuntimeMonitor> monitor_;
  bool timed_ = false;  // the iteration Begin() prepared is timed
  bool untrusted_ = false;
  int64_t kv_live_rows_ = 0, kv_pool_rows_ = 0;  // as of the last SetKvRows (0 of 0: never told)
  absl::Status kv_error_;                        // SetKvRows' for the iteration in progress
  int64_t differing_ops_ = 0;
  int64_t ops_compared_ = 0;
  runtime::Executor::FetchCounts fetch_counts_;
  bool op_by_op_ = false;           // the iteration Begin() prepared is observed op by op
  mutable uint64_t key_epoch_ = 0;  // the backend's StagingEpoch at the last StagedCaptureKey()
  // Note [Counters per model]: the counters at the open window's last reading.
  std::optional<runtime::UvmCounters> counters_before_;
  int64_t released_prefetched_ = 0;  // by executors released since
  int64_t released_evicted_ = 0;

  mutable absl::Mutex mu_;
  ExecutionStats stats_ ABSL_GUARDED_BY(mu_);  // as of the last End() or switch
  SwitchTimes last_switch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autouvm::profiler
