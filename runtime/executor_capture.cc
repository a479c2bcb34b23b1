// Executor, its passes as CUDA graphs: the state a pass starts from, whether passes repeat, and a
// replayed pass's counts (Note [Staged passes captured]).
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/executor.h"

namespace autouvm::runtime {

// Note [Staged passes captured]: issue 29. A model just over its budget streams a little of its weights
// per step, and the rest of its step is the host's dispatch: 1691 ops for a 7B, ~6 ms by a graph against
// ~13 ms eagerly. So a decode pass that follows a plan through the device buffer (Note [Streaming
// through a device buffer]) is captured as one graph with its copies:
// - What the executor issues at op boundaries during the capture goes into the graph: the copies into
//   the buffer on a copy stream forked from the capture stream and joined back at its end, the events
//   between them as the graph's edges (DeviceBackend::BeginCapture). A prefetch, an advice, a discard
//   cannot be captured, so only a plan whose every fetch goes through the buffer is (PassKey() is 0 for
//   the others), and the copies' timing is off for it.
// - A graph repeats the addresses it was captured with: the buffer's tensors' binds and the places of
//   the copies. The ring's placement carried over from pass to pass would place each pass elsewhere
//   (its tail moves by the pass's bytes modulo the buffer), so with a periodic ring the pass's first
//   fetch goes at 0 (set_periodic_ring). The host-side logic is deterministic, so a pass is decided by
//   the state it starts from — the slots held and released, the fetches issued ahead, the binds, the
//   tensors' sizes (KV pools grow), the preparation — whose key PassKey() is. The preparation is in it
//   because a graph's copies read the host copies and fill the buffer that preparation made: a plan
//   switched away and back (each request's prefill and decode) may stage from new ones. Without it the
//   H200's daemon died (SIGSEGV on a thread not its own) at the first pass of a bucket whose graph was
//   captured in the request before, replayed from a key that matched. A pass is captured only when the last one
//   started and ended in the state of this one's key (PassRepeats()): it will end there too, and every
//   replay from that state does what the captured pass did. The first pass after a plan's preparation
//   issues nothing ahead, the second starts from what the first issued: the third is the first captured.
// - Waits on events recorded before the capture are left out of it: a replay starts after the work
//   queued on both streams before it (runtime/cuda/compute_device.cc), so those events have completed.
//   The events the executor then holds were recorded in the capture; a captured or replayed pass
//   replaces them with one recorded after its launch (ReplaceEvents), and the backend's streams wait
//   for the graph before their next work.
// - A replay makes no call here: Replayed() adds the captured pass's counts and its copies' bytes.
// - The copies the pass issues ahead for the next one are in its graph, which ends with them. The host
//   waits for the logits' copy only (ComputeDevice::MarkCapturedOutputs: an event node of the graph), so
//   those copies overlap its sampling and the next launch as an eager pass's do; the next graph starts
//   after them.
// - The captured pass must run the ops its plan was recorded from. So every observed step of a bucket the
//   graphs take runs the staged pass's ops, eagerly until its state repeats (engine/step_graphs.h,
//   RunStaged: the input copied from pinned memory, the logits copied back to it). A graph's views of the
//   KV pools are the whole pools, an eager pass's their rows in use; the ops are the same (Note [Staged
//   graphs read the whole pools], engine/step_graphs.cc).
// - A capture is kept only where its pass followed the plan to its last op and ended in the state of its
//   key (IterationHooks::StagedCaptureHeld); else it counts as a capture failure and the pass runs again
//   eagerly. The first run on the H100 had neither: its captured passes began with an op the eager step
//   did not have (aten::is_pinned, of the copy from pinned memory), their follower stopped at op 0, and
//   the graphs were kept — without a single copy of the executor's (the CUPTI trace of
//   bench/results/2026-12-06-staged-graphs-h100.md: no host-to-device copy in any graph), so each replay
//   read the streamed weights from host memory where they lay, 11-49% slower than eagerly. libtorch asks
//   aten::is_pinned of a host copy's source only while capturing: the observer counts it as bookkeeping
//   (Note [Leaf ops], runtime/observer.cc). A capture that is not kept ran nothing, so its pass always
//   runs again (ModelExecution's last_iteration_untrusted), eagerly: a run again is never captured, not
//   even as a resident graph (ModelSession::PassMayBeCaptured).
uint64_t Executor::PassKey() const {
  if (!periodic_ring_ || buffer_ == 0 || time_copies_ || eviction_ != nullptr || !follows_ops()) return 0;
  std::vector<int64_t> state;
  state.reserve(4 * fetches_.size() + 4 * buffer_state_.slots.size() + 8);
  for (const Fetch& f : fetches_) {
    if (f.tensors.empty()) continue;
    if (!InBuffer(f)) return 0;
    state.push_back(f.issued ? 1 : 0);
    for (size_t t : f.tensors) {
      state.push_back(static_cast<int64_t>(t));
      state.push_back(ranges_list_[t].bytes);
      state.push_back(slot_of_[t]);
    }
  }
  state.push_back(static_cast<int64_t>(buffer_));
  state.push_back(static_cast<int64_t>(preparation_));
  state.push_back(window_bytes_);
  // The form the host copies cross in (Note [Coded copies captured], runtime/cuda/cuda_backend_capture.cc).
  state.push_back(static_cast<int64_t>(backend_->StagingEpoch()));
  state.push_back(buffer_state_.tail);
  state.push_back(static_cast<int64_t>(next_ahead_));
  for (const Slot& s : buffer_state_.slots) {
    state.push_back(static_cast<int64_t>(s.tensor));
    state.push_back(s.offset);
    state.push_back(s.bytes);
    state.push_back(s.released >= 0 ? 1 : 0);
  }
  for (size_t t = 0; t < displaced_.size(); ++t) {
    if (displaced_[t]) state.push_back(-static_cast<int64_t>(t) - 1);
  }
  // FNV-1a over the values' bytes; 0 is kept for "cannot be captured".
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : state) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<uint64_t>(v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h == 0 ? 1 : h;
}

bool Executor::PassRepeats() const {
  const uint64_t key = PassKey();
  return key != 0 && last_pass_.whole && last_pass_.start == key && last_pass_.end == key;
}

void Executor::BeginPass() {
  pass_ = PassRecord();
  pass_.start = PassKey();
  pass_.prefetched = prefetched_bytes_;
  pass_.evicted = evicted_bytes_;
  pass_.ahead = fetch_counts_.ahead;
  pass_.at_op = fetch_counts_.at_op;
  pass_.staging = backend_->StagingSoFar();
}

void Executor::EndPass() {
  if (pass_.start == 0) {
    last_pass_ = PassRecord();
    return;
  }
  const DeviceBackend::StagingTally now = backend_->StagingSoFar();
  last_pass_ = {.start = pass_.start,
                .end = PassKey(),
                .prefetched = prefetched_bytes_ - pass_.prefetched,
                .evicted = evicted_bytes_ - pass_.evicted,
                .ahead = fetch_counts_.ahead - pass_.ahead,
                .at_op = fetch_counts_.at_op - pass_.at_op,
                .staging = {.link = now.link - pass_.staging.link,
                            .coded = now.coded - pass_.staging.coded,
                            .decoded = now.decoded - pass_.staging.decoded},
                .whole = true};
  pass_ = PassRecord();
}

void Executor::ReplaceEvents() {
  const EventId after = backend_->RecordEvent(Stream::kCompute);
  for (Slot& s : buffer_state_.slots) {
    if (s.released >= 0) s.released = after;
  }
  for (Fetch& f : fetches_) {
    if (f.issued) f.done = after;
  }
}

void Executor::AfterCapture() { ReplaceEvents(); }

absl::Status Executor::Replayed() {
  if (!PassRepeats()) {
    return absl::FailedPreconditionError(
        "a pass was replayed from a state the executor's passes do not repeat (Note [Staged passes captured])");
  }
  prefetched_bytes_ += last_pass_.prefetched;
  evicted_bytes_ += last_pass_.evicted;
  fetch_counts_.ahead += last_pass_.ahead;
  fetch_counts_.at_op += last_pass_.at_op;
  backend_->CountReplayedStaging(last_pass_.staging);
  ReplaceEvents();
  return absl::OkStatus();
}

}  // namespace autouvm::runtime
