// Executor: follows a profiler Plan at the op boundaries of an iteration, through a DeviceBackend —
// pinned tensors kept on the device, streamed ones prefetched on the copy stream ahead of the op that
// needs them (the compute stream waits on their events) and evicted after their last use before their
// next fetch, on the compute stream (Note [Evictions on the compute stream]). Streamed weights are
// staged where the plan says so and the backend can (kept as host copies outside managed memory, copied
// in and discarded: Note [Staged streaming], device_backend.h) — through one device buffer the model's
// tensors are bound to for their ops where the plan asks (Note [Streaming through a device buffer]) —
// else marked read-mostly. Remote tensors stay in
// host memory, mapped for the GPU to read in place (preferred location host, accessed by the device).
//
//   Executor ex(backend, plan, trace, ranges);       // ranges: where each tensor the plan names lives
//   RETURN_IF_ERROR(ex.Prepare());                    // once: advice, pinned tensors in
//   for each op i: RETURN_IF_ERROR(ex.BeforeOp(i)); launch op i; RETURN_IF_ERROR(ex.AfterOp(i));
//
// Tensors without a range (activations, which the allocator places anew) are left to the driver.
// On a model run through the Observer, a PlanFollower (below) calls BeforeOp/AfterOp at each leaf op.
// Not thread-safe: one iteration's thread drives it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"
#include "runtime/observer.h"
#include "runtime/plan.h"
#include "runtime/tensor_binding.h"

namespace autouvm::runtime {
class DriverEviction;
}

namespace autouvm::runtime {

struct TensorRange {
  uint64_t addr = 0;
  int64_t bytes = 0;
};

class Executor {
 public:
  Executor(DeviceBackend* backend, const Plan& plan, const AccessTrace& trace,
           std::unordered_map<std::string, TensorRange> ranges);
  ~Executor();  // Release()s, ignoring its errors
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // A plan that leaves eviction to the driver (`paper`) under a software budget on a card that is not
  // really oversubscribed: the emulated driver evicts for the executor's fetches and the ops' faults.
  // Call before Prepare(); `eviction` outlives the executor.
  void set_driver_eviction(DriverEviction* eviction) { eviction_ = eviction; }
  // Where a plan streams through a device buffer (Plan.device_buffer) on a backend whose model reads it
  // only through a binding (CUDA): the model's tensors. Without one there, staged weights are copied
  // into their own managed range instead. Call before Prepare(); `binding` outlives the executor.
  void set_binding(TensorBinding* binding) { binding_ = binding; }

  // Pinned weights the plan released just before this one (the same model's) still holds on the device
  // (its PinnedOnDevice()): Prepare() counts those this plan pins too as on the device, without asking
  // the backend to move them (Note [Plans hand pinned weights on], executor.cc). Call before Prepare().
  void AdoptPinned(const std::vector<TensorRange>& on_device) { adopted_ = on_device; }
  // The pinned weights this executor has on the device now (neither displaced nor evicted by it).
  std::vector<TensorRange> PinnedOnDevice() const;
  // Note [Plans hand the device buffer on] (executor.cc): the device buffer given up for the plan
  // prepared next (the same model's) instead of freed, with nothing for the host to wait for; {} when
  // there is none. Its slots are let go; the copy stream's later work comes after all that both streams
  // hold now. On an error the buffer is freed as Release() would.
  struct DeviceBuffer {
    uint64_t addr = 0;
    int64_t bytes = 0;
  };
  absl::StatusOr<DeviceBuffer> HandOnBuffer();
  // Frees a device buffer once both of `backend`'s streams are done with it: the host waits.
  static absl::Status FreeBuffer(DeviceBackend* backend, uint64_t addr);
  // Takes a buffer HandOnBuffer() gave up: Prepare() streams through it where this plan's window is of
  // its size, and frees it otherwise (as does Release(), unprepared). Call before Prepare().
  void AdoptBuffer(DeviceBuffer buffer) { adopted_buffer_ = buffer; }
  // Buffers Prepare() took from the plan before (AdoptBuffer) instead of allocating one: 0 or 1.
  int64_t buffers_adopted() const { return buffers_adopted_; }
  // Tensors another plan left staged (Release(kKeepStaged)) are adopted where this plan stages them
  // the same way, and put back in managed memory where it does not (Note [Plans hand staged weights on]).
  absl::Status Prepare();
  // Puts the tensors Prepare() staged back in managed memory (on the host), so the model runs without
  // the plan afterwards — or, with kKeepStaged, leaves them staged for the plan prepared next, which
  // must follow at once; the first error, after trying them all.
  enum class Staged { kPutBack, kKeepStaged };
  absl::Status Release(Staged staged = Staged::kPutBack);
  absl::Status BeforeOp(int64_t index);
  absl::Status AfterOp(int64_t index);
  // After an iteration that stopped following the plan part way: the next one starts afresh.
  void AbandonIteration();
  // Brings back pinned tensors that something else evicted (the RuntimeMonitor names them): prefetched
  // on the copy stream, and the compute stream waits for them. Ids the plan does not pin are ignored.
  absl::Status Repin(const std::vector<std::string>& ids);
  // The model's KV pools hold `live_rows` rows in use of their `pool_rows` (Note [KV pools follow the
  // rows in use], executor_kv_rows.cc): before Prepare() it sets where each pool's range ends; after, before an
  // iteration, the rows a pinned or fetched pool grew by come onto the device on the copy stream (the
  // compute stream waits for them), and pinned weights are read in place instead, last pinned first,
  // while the plan's footprint would exceed its budget.
  absl::Status SetKvRows(int64_t live_rows, int64_t pool_rows);
  // Bytes of pinned weights SetKvRows() made read in place (also in in_place_bytes()).
  int64_t displaced_bytes() const { return displaced_bytes_; }
  int64_t repinned_bytes() const { return repinned_bytes_; }

  // Whether BeforeOp/AfterOp do anything: a plan that pins or reads in place everything needs no
  // op boundaries after Prepare().
  bool follows_ops() const {
    return std::any_of(fetches_.begin(), fetches_.end(), [](const Fetch& f) { return !f.tensors.empty(); });
  }
  // Whether streamed weights are staged (the plan asks for it and the backend can), and the bytes of
  // those Prepare() staged that Release() has not put back.
  bool stages() const { return stage_; }
  // Whether staged weights go through the device buffer (decided by Prepare()).
  bool uses_device_buffer() const { return buffer_ != 0; }
  int64_t staged_bytes() const;
  int64_t prefetched_bytes() const { return prefetched_bytes_; }
  int64_t evicted_bytes() const { return evicted_bytes_; }
  // Bytes of weights read in place from host memory: streamed ones Prepare() could not stage (Note
  // [Unstageable weights are read in place], executor.cc) and pinned ones displaced by KV rows.
  int64_t in_place_bytes() const { return in_place_bytes_; }
  // The named bytes the executor has placed on the device and not yet evicted (pinned, and streamed
  // tensors between their fetch and their eviction), now and at most since Prepare().
  int64_t resident_bytes() const { return resident_bytes_; }
  // Fetches issued since the last call: ahead of their op (at their issue point, or into the device
  // buffer as soon as it had room) and at their op (the compute stream waits for the whole copy there:
  // the copy did not overlap the compute before it). For the daemon's debug line, a pass at a time.
  // With set_time_copies(true), also the device's times over the fetches the pass used (seconds; -1:
  // not timed): the copy stream busy with their copies, from the first copy's start to the last one's
  // end, the compute stream held waiting for them, and the compute stream from the first op to the last.
  struct FetchCounts {
    int64_t ahead = 0, at_op = 0;
    double copying_s = -1, copy_span_s = -1, waited_s = -1, pass_s = -1;
    // Weights the pass read in place from host memory: the plan's (Plan.remote) and in_place_bytes().
    int64_t in_place_bytes = 0;
  };
  FetchCounts TakeFetchCounts();
  // Times the fetches with events on both streams (TakeFetchCounts): a diagnostic, off by default.
  void set_time_copies(bool on) { time_copies_ = on; }

  // Note [Staged passes captured] (executor_capture.cc): a pass through the device buffer issued as a
  // CUDA graph. With a periodic ring (set before Prepare()) every pass starts the buffer at 0, so that
  // passes from the same state issue the same copies into the same places.
  void set_periodic_ring(bool on) { periodic_ring_ = on; }
  // A key of the state the next pass starts from, which decides all it will issue, bind and wait for
  // (the plan's fetches, the buffer's base and slots, what is issued ahead): 0 when its passes cannot be
  // captured (a fetch outside the device buffer or none at all, timed copies, an emulated driver, no
  // periodic ring).
  uint64_t PassKey() const;
  // Whether the pass about to start would issue what the last one did: the last pass ran whole, from a
  // state of this key, and ended in it again.
  bool PassRepeats() const;
  // The pass just captured (its calls into the backend made in the capture) was then launched: the
  // events the executor holds, the graph's, are replaced by one recorded after its launch.
  void AfterCapture();
  // A pass ran as the replay of a graph captured from this state (PassRepeats() was true): it is
  // counted as the captured pass was, its copies' bytes told to the backend (CountReplayedStaging), and
  // its events replaced as by AfterCapture(). FAILED_PRECONDITION when the passes do not repeat.
  absl::Status Replayed();
  int64_t peak_resident_bytes() const { return peak_resident_bytes_; }

 private:
  struct Fetch {
    std::vector<size_t> tensors;  // into ranges_list_
    int64_t for_op = 0;
    size_t order = 0;  // its place in fetch_order_
    EventId done = 0;
    bool issued = false;
    EventId copy_from = -1, copy_to = -1;  // timed events around its copies (set_time_copies)
  };
  absl::Status Issue(Fetch& f);
  void Count(size_t tensor, bool on_device);
  // Pinned bytes (on the device, or to be pinned by Prepare()) plus the plan's window, over its budget.
  int64_t Overshoot() const;
  // Reads pinned weights in place until the footprint is within the budget (NextToDisplace).
  absl::Status Displace();
  // Of displaceable_, the index of the weight Displace() takes next when `over` bytes are over the
  // budget (Note [Displace the fewest bytes]); displaceable_.size() where none is left.
  size_t NextToDisplace(int64_t over) const;
  // The device buffer (Note [Streaming through a device buffer]): where a tensor of `bytes` would go
  // next, or -1 while the space is still held by a tensor whose last op has not been launched.
  struct Slot {
    size_t tensor = 0;
    int64_t offset = 0, bytes = 0;
    EventId released = -1;
  };
  struct BufferState {
    std::vector<Slot> slots;  // oldest first
    int64_t tail = 0;         // where the next tensor goes if it fits before the end
  };
  bool InBuffer(const Fetch& f) const;  // every tensor of it is staged and the buffer is in use
  // Places `bytes` in `state` (Note [Streaming through a device buffer]): at its tail, or at 0 when it
  // does not fit there, over the slots whose tensors' last ops were launched (the latest of their
  // events goes to `wait`); false while a slot it needs is still held.
  // `at_start`: at 0 whatever the tail (Note [Staged passes captured]).
  bool Place(BufferState& state, int64_t bytes, int64_t* offset, EventId* wait, bool at_start = false) const;
  // Issues `f` into the buffer; false (nothing issued) when there is no room yet, an error when `must`.
  absl::StatusOr<bool> IssueIntoBuffer(Fetch& f, bool must);
  absl::Status IssueAhead();  // as many fetches, in op order, as the buffer has room for
  absl::Status ReleaseBuffer();
  // The buffer's tensors unbound and no longer counted on the device; nothing issued into it.
  absl::Status LetGoOfSlots();

  DeviceBackend* const backend_;
  const int64_t ops_;
  std::vector<TensorRange> ranges_list_;  // every tensor with a range, in the order named
  std::vector<std::string> ids_;          // parallel to ranges_list_
  std::vector<bool> on_device_;           // parallel: placed on the device by the executor
  std::vector<size_t> pinned_;
  std::vector<size_t> remote_;
  std::vector<size_t> affinity_;
  std::vector<int64_t> storage_bytes_;  // parallel to ranges_list_: each tensor's whole range
  // Pinned weights that one op reads at a low intensity (kMaxRemoteFlopsPerByte, runtime/plan.h), never written: the
  // ones a growing KV cache may displace, last pinned first; and those it has.
  std::vector<size_t> displaceable_;
  std::vector<bool> displaced_;  // parallel to ranges_list_
  const int64_t budget_bytes_;
  const int64_t footprint_bytes_;  // what the plan was made to hold: its pins and window
  bool prepared_ = false;
  bool warned_over_ = false;  // Displace() found nothing left to read in place
  const bool driver_evicts_;
  const bool stage_;
  std::vector<bool> written_;  // parallel to ranges_list_: some op of the trace writes it
  std::vector<bool> staged_;   // parallel to ranges_list_: staged by Prepare() and not released
  TensorBinding* binding_ = nullptr;
  // The device buffer: the plan asks for one of window_bytes; its base (0: none); the tensors in it,
  // each with its offset and, once its last op is launched, the compute-stream event after which its
  // space may be written again; the fetches in op order and the next to issue ahead.
  const bool want_buffer_;
  const int64_t window_bytes_;
  uint64_t buffer_ = 0;
  DeviceBuffer adopted_buffer_;  // AdoptBuffer's, until Prepare() or Release()
  int64_t buffers_adopted_ = 0;
  // Which preparation this is, of every executor's in the process (Note [Staged passes captured]: a
  // graph's copies read the host copies and fill the buffer this preparation made).
  uint64_t preparation_ = 0;
  BufferState buffer_state_;
  std::vector<int64_t> slot_of_;  // parallel to ranges_list_: offset in the buffer, -1 when not in it
  std::vector<size_t> fetch_order_;
  size_t next_ahead_ = 0;
  DriverEviction* eviction_ = nullptr;
  std::vector<Fetch> fetches_;
  std::vector<std::vector<size_t>> issue_at_;     // per op: fetches to issue when it starts
  std::vector<std::vector<size_t>> needed_by_;    // per op: fetches it must wait for
  std::vector<std::vector<size_t>> evict_after_;  // per op: streamed tensors done with
  std::vector<TensorRange> adopted_;              // AdoptPinned's, until Prepare()
  int64_t prefetched_bytes_ = 0;
  int64_t evicted_bytes_ = 0;
  int64_t in_place_bytes_ = 0;
  int64_t repinned_bytes_ = 0;
  int64_t displaced_bytes_ = 0;
  int64_t resident_bytes_ = 0;
  int64_t peak_resident_bytes_ = 0;
  FetchCounts fetch_counts_;
  bool time_copies_ = false;
  // Per fetch used this pass: its copy's timed events, and the compute stream's around its wait.
  std::vector<std::array<EventId, 4>> timed_fetches_;
  EventId pass_from_ = -1, pass_to_ = -1;  // the compute stream at the first op and after the last

  // Note [Staged passes captured]: the pass in progress and the last whole one — the keys of the state
  // each started from and ended in, and what it counted.
  struct PassRecord {
    uint64_t start = 0, end = 0;
    int64_t prefetched = 0, evicted = 0, ahead = 0, at_op = 0;
    DeviceBackend::StagingTally staging;  // the backend's StageInto tally (at BeginPass; the pass's after)
    bool whole = false;
  };
  void BeginPass();  // at the first op
  void EndPass();    // after the last
  void ReplaceEvents();
  bool periodic_ring_ = false;
  PassRecord pass_, last_pass_;
};

// Drives an Executor from the Observer's op boundaries during observed iterations, checking each op
// against the kernel the plan was made for. On the first op that differs (another op sequence than
// the profiled one), or a backend error, it stops following for the rest of the iteration: staged
// weights go back to managed memory and the ops left fault as without a plan. Counted in mismatches(); the caller
// re-profiles the key.
//
//   PlanFollower follower(&executor, trace);
//   observer->AddSubscriber(&follower);
//   observer->BeginIteration(IterationMode::kObserve); forward(); observer->EndIteration();
//   absl::Status why = follower.EndIteration();   // OK if the whole iteration followed the plan
class PlanFollower final : public OpSubscriber {
 public:
  PlanFollower(Executor* executor, const AccessTrace& trace);

  void BeforeOp(int64_t index) override;
  void OnOp(const OpEvent& op) override;
  // Why following stopped in the iteration that ended (FAILED_PRECONDITION naming the first op that
  // differs, or the backend's error); ready for the next iteration.
  absl::Status EndIteration();

  int64_t mismatches() const { return mismatches_; }
  int64_t ops_followed() const { return ops_followed_; }
  // Note [Staged passes captured] (executor_capture.cc): the iteration ran as a graph's replay — no op was
  // seen, and it followed the plan as the captured pass did.
  void Replayed();
  // The iteration's pass did not run (its capture failed): following stops for it with `why`, staged
  // weights left as they are (nothing read them).
  void Abandon(absl::Status why);
  // Of the iteration in progress, once its last op has run: OK when it followed every op of the plan;
  // else why not (why following stopped, or how many of the plan's ops it followed). Note [Staged passes
  // captured]: a capture is kept only where this holds.
  absl::Status Followed() const;
  // Of the iteration that ended last: the ops that differed from the plan's, position by position (those
  // past the shorter of the two sequences included; 0 when the two agree or the backend stopped it), and
  // the longer sequence's length.
  int64_t last_differing_ops() const { return last_differing_ops_; }
  int64_t last_ops_compared() const { return last_ops_compared_; }

 private:
  void Stop(absl::Status why);  // and put staged weights back (Note [Stopping with staged weights])

  Executor* const executor_;
  std::vector<std::string> kernels_;  // the plan's op sequence
  bool stopped_ = false;
  absl::Status status_;
  int64_t mismatches_ = 0;
  int64_t ops_followed_ = 0;
  int64_t ops_seen_ = 0;       // in the iteration in progress
  int64_t differing_ops_ = 0;  // in the iteration in progress
  int64_t last_differing_ops_ = 0;
  int64_t last_ops_compared_ = 0;
};

}  // namespace autouvm::runtime
