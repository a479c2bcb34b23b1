#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/driver_eviction.h"

namespace autouvm::runtime {

constexpr int64_t kStageAlignment = int64_t{2} << 20;  // a VA block

Executor::Executor(DeviceBackend* backend, const Plan& plan, const AccessTrace& trace,
                   std::unordered_map<std::string, TensorRange> ranges)
    : backend_(backend),
      ops_(static_cast<int64_t>(trace.ops.size())),
      budget_bytes_(plan.budget_bytes),
      footprint_bytes_(plan.pinned_bytes + plan.window_bytes),
      driver_evicts_(plan.driver_evicts),
      stage_(plan.staged && !plan.driver_evicts && backend->can_stage()),
      want_buffer_(plan.device_buffer && plan.staged && plan.window_bytes > 0),
      window_bytes_(plan.window_bytes),
      issue_at_(trace.ops.size()),
      needed_by_(trace.ops.size()),
      evict_after_(trace.ops.size()) {
  // Tensors with a range, in the order the trace names them, then any others by id.
  std::unordered_map<std::string, size_t> index;
  auto add = [&](const std::string& id) {
    auto it = ranges.find(id);
    if (it == ranges.end() || index.count(id)) return;
    index[id] = ranges_list_.size();
    ranges_list_.push_back(it->second);
    storage_bytes_.push_back(it->second.bytes);
    ids_.push_back(id);
  };
  for (const TensorUse& n : trace.named) add(n.id);
  // Note [KV pools by their live rows] (access_trace.cc): a pool's range is what the trace reached of it.
  const std::unordered_map<std::string, int64_t> reached = KvBytesReached(trace);
  for (size_t t = 0; t < ranges_list_.size(); ++t) {
    if (!IsKvCacheId(ids_[t])) continue;
    const auto it = reached.find(ids_[t]);
    ranges_list_[t].bytes = std::min(ranges_list_[t].bytes, it == reached.end() ? 0 : it->second);
  }
  std::vector<std::string> rest;
  for (const auto& [id, r] : ranges) {
    if (!index.count(id)) rest.push_back(id);
  }
  std::sort(rest.begin(), rest.end());
  for (const std::string& id : rest) add(id);
  on_device_.assign(ranges_list_.size(), false);
  staged_.assign(ranges_list_.size(), false);
  written_.assign(ranges_list_.size(), false);
  for (const OpRecord& op : trace.ops) {
    for (const TensorUse& w : op.writes) {
      if (auto it = index.find(w.id); it != index.end()) written_[it->second] = true;
    }
  }

  for (const std::string& id : plan.pinned) {
    if (auto it = index.find(id); it != index.end()) pinned_.push_back(it->second);
  }
  // What may be displaced: a pinned weight one op reads, at an intensity reading in place can serve.
  std::vector<int> readers(ranges_list_.size(), 0);
  std::vector<double> flops(ranges_list_.size(), 0);
  for (const OpRecord& op : trace.ops) {
    std::set<size_t> read;
    for (const TensorUse& u : op.reads) {
      if (auto it = index.find(u.id); it != index.end()) read.insert(it->second);
    }
    for (size_t t : read) {
      ++readers[t];
      flops[t] = op.flops;
    }
  }
  for (auto t = pinned_.rbegin(); t != pinned_.rend(); ++t) {
    const TensorRange& r = ranges_list_[*t];
    // Whole blocks only: moving a range that shares pages with pinned neighbours would move them too
    // (Note [Stage whole blocks]).
    if (IsWeightId(ids_[*t]) && !written_[*t] && readers[*t] == 1 && r.bytes > 0 && r.addr % kStageAlignment == 0 &&
        r.bytes % kStageAlignment == 0 && flops[*t] / static_cast<double>(r.bytes) <= kMaxRemoteFlopsPerByte) {
      displaceable_.push_back(*t);
    }
  }
  displaced_.assign(ranges_list_.size(), false);
  for (const std::string& id : plan.remote) {
    if (auto it = index.find(id); it != index.end()) remote_.push_back(it->second);
  }
  for (const std::string& id : plan.affinity) {
    if (auto it = index.find(id); it != index.end()) affinity_.push_back(it->second);
  }
  // Where each streamed tensor is fetched: an op it is fetched for needs it fresh; the use before that
  // fetch (cyclically) is its last use in the window, after which it is evicted.
  std::unordered_map<size_t, std::set<int64_t>> fetched_for;
  for (const Prefetch& p : plan.prefetches) {
    if (p.for_op < 0 || p.for_op >= ops_ || p.issue_at_op < 0 || p.issue_at_op >= ops_) continue;
    Fetch f;
    for (const std::string& id : p.tensors) {
      if (auto it = index.find(id); it != index.end()) {
        f.tensors.push_back(it->second);
        fetched_for[it->second].insert(p.for_op);
      }
    }
    if (f.tensors.empty()) continue;
    f.for_op = p.for_op;
    issue_at_[static_cast<size_t>(p.issue_at_op)].push_back(fetches_.size());
    needed_by_[static_cast<size_t>(p.for_op)].push_back(fetches_.size());
    fetches_.push_back(std::move(f));
  }
  fetch_order_.resize(fetches_.size());
  for (size_t f = 0; f < fetches_.size(); ++f) fetch_order_[f] = f;
  std::stable_sort(fetch_order_.begin(), fetch_order_.end(),
                   [&](size_t a, size_t b) { return fetches_[a].for_op < fetches_[b].for_op; });
  for (size_t k = 0; k < fetch_order_.size(); ++k) fetches_[fetch_order_[k]].order = k;
  slot_of_.assign(ranges_list_.size(), -1);
  if (driver_evicts_) return;  // the driver decides what leaves
  std::unordered_map<size_t, std::vector<int64_t>> uses;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const auto* list : {&trace.ops[i].reads, &trace.ops[i].writes}) {
      for (const TensorUse& u : *list) {
        auto it = index.find(u.id);
        if (it == index.end() || fetched_for.count(it->second) == 0) continue;
        auto& at = uses[it->second];
        if (at.empty() || at.back() != static_cast<int64_t>(i)) at.push_back(static_cast<int64_t>(i));
      }
    }
  }
  for (const auto& [tensor, at] : uses) {
    const std::set<int64_t>& fetch_points = fetched_for[tensor];
    for (size_t k = 0; k < at.size(); ++k) {
      const int64_t next = k + 1 < at.size() ? at[k + 1] : at[0];
      if (fetch_points.count(next)) evict_after_[static_cast<size_t>(at[k])].push_back(tensor);
    }
  }
}

void Executor::Count(size_t tensor, bool on_device) {
  if (on_device_[tensor] == on_device) return;
  on_device_[tensor] = on_device;
  resident_bytes_ += on_device ? ranges_list_[tensor].bytes : -ranges_list_[tensor].bytes;
  peak_resident_bytes_ = std::max(peak_resident_bytes_, resident_bytes_);
}

Executor::~Executor() { (void)Release(); }

// Streamed weights are staged where the plan and the backend can (Note [Staged streaming] in
// device_backend.h) and read in place otherwise; remote tensors are mapped for the device in host
// memory; pinned tensors are brought in once and never evicted by the executor.
//
// Note [Unstageable weights are read in place]: a streamed weight that cannot be staged (the backend
// cannot: CUDA before 13; or its range shares pages with other tensors and there is no device buffer,
// Note [Stage whole blocks]) used to be streamed read-mostly, on the understanding that a prefetch to
// the host drops a read-mostly range's device copy. On the H200 it does not (offload_bench's drop probe:
// after such a prefetch, reads of 1 GiB still take 0.3 ms and raise no faults), and the driver frees
// that memory only under its own pressure, which a software budget never creates: every such weight
// stayed on the device beyond the budget while the account said it had left. Instead it is mapped for
// the device in host memory, as the plan's remote tensors are (the link's rate for a weight read once
// per step, ../shared/gpu/NOTES.md: 51 GB/s), never fetched and never resident; in_place_bytes() says
// how much.
absl::Status Executor::Prepare() {
  static std::atomic<uint64_t> preparations{0};
  preparation_ = preparations.fetch_add(1) + 1;
  // Note [Stage whole blocks] holds for ranges staged into their own pages; through the device buffer
  // any weight of a block or more is staged (13B weights follow a 312.5 MiB embedding off the 2 MiB grid).
  const bool buffered = stage_ && want_buffer_ && backend_->can_stage_into() &&
                        (binding_ != nullptr || !backend_->stage_into_needs_binding());
  std::vector<bool> streamed(ranges_list_.size(), false);
  for (const Fetch& f : fetches_) {
    for (size_t t : f.tensors) streamed[t] = true;
  }
  // Note [Plans hand staged weights on]: the daemon switches plans between a request's prefill and its
  // decode steps; putting every staged weight back and staging it again at each switch cost a 7B
  // request at factor 2.0 seconds (synchronous copies of ~6.7 GiB each way, and their faults). A plan
  // released for the next one leaves its weights staged; this one keeps those it stages the same way
  // and puts back the others, before anything of its own is placed.
  // What another plan left staged and this one pins goes straight onto the device from its host copy
  // (Note [Host copies outlive staging] in device_backend.h).
  std::vector<bool> pinned(ranges_list_.size(), false);
  for (size_t t : pinned_) pinned[t] = true;
  using Staging = DeviceBackend::Staging;
  std::vector<bool> in_place(ranges_list_.size(), false);
  for (size_t t = 0; t < ranges_list_.size(); ++t) {
    const TensorRange& r = ranges_list_[t];
    Staging want = Staging::kNone;
    // A weight the trace writes is not staged: its host copy would go stale.
    if (!driver_evicts_ && streamed[t] && IsWeightId(ids_[t]) && !written_[t] && r.bytes > 0) {
      // Note [Stage whole blocks]: a discard acts on whole pages, so a range that shares one with
      // another tensor (small tensors packed by the allocator) is not staged; on the H200 such ranges
      // in a small model raised fault groups every step. Weights of 2 MiB multiples get their own
      // blocks. Through the device buffer the managed range is never read, so nothing need be
      // discarded: a host copy is kept beside it and its pages, which it may share with its
      // neighbours, stay on the host (the pinned tensors among those neighbours are brought back below).
      if (stage_ && r.addr % kStageAlignment == 0 && r.bytes % kStageAlignment == 0) {
        want = Staging::kDiscarded;
      } else if (buffered && r.bytes >= kStageAlignment) {
        want = Staging::kKept;
      }
    }
    const Staging have = backend_->StagingOf(r.addr);
    if (have != Staging::kNone && have != want) {
      RETURN_IF_ERROR(backend_->Unstage(r.addr, r.bytes, pinned[t] ? Location::kDevice : Location::kHost));
    }
    if (want == Staging::kDiscarded && have != want) RETURN_IF_ERROR(backend_->StageOut(r.addr, r.bytes));
    if (want == Staging::kKept && have != want) {
      RETURN_IF_ERROR(backend_->KeepHostCopy(r.addr, r.bytes));
      RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCopy));
    }
    staged_[t] = want != Staging::kNone;
    if (!driver_evicts_ && streamed[t] && IsWeightId(ids_[t]) && r.bytes > 0 && want == Staging::kNone) {
      // Note [Unstageable weights are read in place]
      RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kPreferredLocation, true, Location::kHost));
      // Whoever made it read-mostly before, its device duplicate goes now, with no copy back.
      RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kReadMostly, false, Location::kHost));
      RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kAccessedBy, true, Location::kDevice));
      RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCopy));
      in_place[t] = true;
      in_place_bytes_ += r.bytes;
    }
  }
  if (in_place_bytes_ > 0) {
    for (Fetch& f : fetches_) std::erase_if(f.tensors, [&](size_t t) { return in_place[t]; });
    for (auto& after : evict_after_) std::erase_if(after, [&](size_t t) { return in_place[t]; });
  }
  bool any_staged = false;
  for (size_t t = 0; t < staged_.size(); ++t) any_staged = any_staged || staged_[t];
  // Note [Plans hand the device buffer on]
  const DeviceBuffer handed = std::exchange(adopted_buffer_, DeviceBuffer());
  if (buffered && any_staged && handed.addr != 0 && handed.bytes == window_bytes_) {
    buffer_ = handed.addr;
    ++buffers_adopted_;
  } else {
    if (handed.addr != 0) RETURN_IF_ERROR(FreeBuffer(backend_, handed.addr));
    if (buffered && any_staged) {
      ASSIGN_OR_RETURN(buffer_, backend_->AllocateDevice(window_bytes_));
    }
  }
  for (size_t t : affinity_) {
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kPreferredLocation, true, Location::kDevice));
    if (eviction_ != nullptr) eviction_->Protect(ids_[t]);
  }
  for (size_t t : remote_) {
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kPreferredLocation, true, Location::kHost));
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kAccessedBy, true, Location::kDevice));
    RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCopy));
  }
  // KV rows in use beyond those the plan was made for (Note [KV pools follow the rows in use], executor_kv_rows.cc).
  RETURN_IF_ERROR(Displace());
  // Note [Plans hand pinned weights on]: in a model within its budget every plan pins every weight, yet
  // each switch between two of them (a burst's prefill, its mixed pass, its decode steps: one key each) asked
  // the driver to prefetch all of them again, 13 GiB already on the device for a 7B (Note [One plan owns
  // the residency], profiler/model_execution.h). A weight the plan released just before pinned and still
  // holds is counted as on the device without that. Should something else have evicted it meanwhile, the
  // runtime monitor finds it and Repin() brings it back, as for any pinned weight.
  std::set<std::pair<uint64_t, int64_t>> adopted;
  for (const TensorRange& r : adopted_) adopted.emplace(r.addr, r.bytes);
  adopted_.clear();
  // One call per tensor: adjacent tensors may lie in different allocations, and a prefetch may not
  // span two (cudaErrorInvalidValue).
  for (size_t t : pinned_) {
    const TensorRange& r = ranges_list_[t];
    if (r.bytes <= 0 || displaced_[t]) continue;
    if (!IsWeightId(ids_[t]) || !adopted.count({r.addr, r.bytes})) {
      RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
      prefetched_bytes_ += r.bytes;
    }
    Count(t, true);
  }
  prepared_ = true;
  return absl::OkStatus();
}

std::vector<TensorRange> Executor::PinnedOnDevice() const {
  std::vector<TensorRange> out;
  for (size_t t : pinned_) {
    if (on_device_[t] && !displaced_[t] && IsWeightId(ids_[t])) out.push_back(ranges_list_[t]);
  }
  return out;
}

absl::Status Executor::Repin(const std::vector<std::string>& ids) {
  bool any = false;
  for (size_t t : pinned_) {
    const TensorRange& r = ranges_list_[t];
    if (r.bytes <= 0 || displaced_[t] || std::find(ids.begin(), ids.end(), ids_[t]) == ids.end()) continue;
    RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
    repinned_bytes_ += r.bytes;
    any = true;
  }
  if (any) backend_->WaitEvent(Stream::kCompute, backend_->RecordEvent(Stream::kCopy));
  return absl::OkStatus();
}

int64_t Executor::staged_bytes() const {
  int64_t sum = 0;
  for (size_t t = 0; t < staged_.size(); ++t) sum += staged_[t] ? ranges_list_[t].bytes : 0;
  return sum;
}

// Note [Plans hand the device buffer on]: a plan switch used to free the device buffer and the next plan
// allocated one of the same size. Freeing it waited for both streams (its slots may still be read by the
// pass's kernels and written by the copies issued ahead), and cudaFree waits for the whole device: with
// several models on one GPU, a model's switch waited for the other models' passes in flight, up to a
// sweep each, holding the shared backend meanwhile (Note [Calls that wait], serialized_backend.h). On
// the H100, switches of two 7B models at factor 2.0 took 90 ms on average for one and 16 for the other,
// and of four such models with 8 streams each 1.7 s (bench/results/2026-12-07-two-and-four-models-h100.md,
// before this). So the buffer goes to the next plan instead where its window is the same size (a model's
// plans at one budget mostly have one window), and the host waits for nothing: the copy stream waits,
// on the device, for what both streams hold at the switch, so the new plan's copies overwrite no slot a
// kernel queued earlier still reads, and land after the copies (and their decodes) queued into it
// before. That wait also holds back the copies other models queue after it on the shared copy stream
// until the compute stream gets there; their passes' own copies inside graphs are on streams of their
// own. A graph keys on its preparation as well as the buffer's address (Note [Staged passes captured]),
// so none is replayed across the switch.
absl::StatusOr<Executor::DeviceBuffer> Executor::HandOnBuffer() {
  if (buffer_ == 0) return DeviceBuffer();
  if (absl::Status s = LetGoOfSlots(); !s.ok()) {
    (void)ReleaseBuffer();  // deliberately unchecked: the first error is the one to report
    return s;
  }
  backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCopy));  // the decodes into it, if coded
  backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCompute));
  const DeviceBuffer out{.addr = buffer_, .bytes = window_bytes_};
  buffer_ = 0;
  return out;
}

absl::Status Executor::FreeBuffer(DeviceBackend* backend, uint64_t addr) {
  absl::Status first = backend->Synchronize();
  if (absl::Status s = backend->FreeDevice(addr); !s.ok() && first.ok()) first = s;
  return first;
}

absl::Status Executor::LetGoOfSlots() {
  absl::Status first;
  for (size_t t = 0; t < slot_of_.size(); ++t) {
    if (slot_of_[t] < 0) continue;
    if (binding_ != nullptr) {
      if (absl::Status s = binding_->Unbind(ranges_list_[t].addr); !s.ok() && first.ok()) first = s;
    }
    if (absl::Status s = backend_->EndStageInto(ranges_list_[t].addr, ranges_list_[t].bytes); !s.ok() && first.ok()) {
      first = s;
    }
    slot_of_[t] = -1;
    Count(t, false);
  }
  buffer_state_ = BufferState();
  for (Fetch& f : fetches_) f.issued = false;
  next_ahead_ = 0;
  return first;
}

absl::Status Executor::ReleaseBuffer() {
  absl::Status first;
  if (adopted_buffer_.addr != 0) {  // adopted, never prepared
    first = FreeBuffer(backend_, std::exchange(adopted_buffer_, DeviceBuffer()).addr);
  }
  if (buffer_ == 0) return first;
  if (absl::Status s = LetGoOfSlots(); !s.ok() && first.ok()) first = s;
  if (absl::Status s = FreeBuffer(backend_, buffer_); !s.ok() && first.ok()) first = s;
  buffer_ = 0;
  return first;
}

absl::Status Executor::Release(Staged staged) {
  absl::Status first = ReleaseBuffer();
  // The next plan places displaced weights as it decides: they are not left preferring the host.
  for (size_t t = 0; t < displaced_.size(); ++t) {
    if (!displaced_[t]) continue;
    const TensorRange& r = ranges_list_[t];
    for (Advice a : {Advice::kPreferredLocation, Advice::kAccessedBy}) {
      if (absl::Status s = backend_->Advise(r.addr, r.bytes, a, false, Location::kDevice); !s.ok() && first.ok()) {
        first = s;
      }
    }
    displaced_[t] = false;
  }
  for (size_t t = 0; t < staged_.size(); ++t) {
    if (!staged_[t]) continue;
    const TensorRange& r = ranges_list_[t];
    absl::Status s = staged == Staged::kPutBack ? backend_->Unstage(r.addr, r.bytes, Location::kHost)
                     : on_device_[t]            ? backend_->Discard(r.addr, r.bytes, Stream::kCompute)  // brought in
                                                : absl::OkStatus();
    if (!s.ok() && first.ok()) first = s;
    staged_[t] = false;
    Count(t, false);
  }
  return first;
}

absl::Status Executor::Issue(Fetch& f) {
  if (time_copies_) f.copy_from = backend_->RecordTimedEvent(Stream::kCopy);
  for (size_t t : f.tensors) {
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(staged_[t] ? backend_->StageIn(r.addr, r.bytes, Stream::kCopy)
                               : backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += r.bytes;
    Count(t, true);
  }
  if (time_copies_) f.copy_to = backend_->RecordTimedEvent(Stream::kCopy);
  f.done = backend_->RecordEvent(Stream::kCopy);
  f.issued = true;
  return absl::OkStatus();
}

// Note [Streaming through a device buffer] (the executor's part): the buffer is used as a ring, in op
// order. A fetch goes where the last one ended, or back at the start when it does not fit before the
// end, over tensors whose last op has been launched: the copy stream waits for the compute stream's
// event after that op, and nothing else, so copies run as far ahead of the compute as the buffer
// allows — into the next iteration's first fetches at the end of one. A fetch whose space is still
// held when its op comes is an error (the plan's window was too small), and following stops.
bool Executor::InBuffer(const Fetch& f) const {
  if (buffer_ == 0) return false;
  for (size_t t : f.tensors) {
    if (!staged_[t]) return false;
  }
  return true;
}

bool Executor::Place(BufferState& state, int64_t bytes, int64_t* offset, EventId* wait, bool at_start) const {
  if (bytes > window_bytes_) return false;
  const int64_t at = !at_start && state.tail + bytes <= window_bytes_ ? state.tail : 0;
  std::vector<Slot> kept;
  for (const Slot& s : state.slots) {
    if (s.offset < at + bytes && at < s.offset + s.bytes) {
      if (s.released < 0) return false;
      *wait = std::max(*wait, s.released);
    } else {
      kept.push_back(s);
    }
  }
  state.slots = std::move(kept);
  state.tail = at + bytes;
  *offset = at;
  return true;
}

absl::StatusOr<bool> Executor::IssueIntoBuffer(Fetch& f, bool must) {
  BufferState next = buffer_state_;
  EventId wait = -1;
  std::vector<int64_t> offsets;
  for (size_t t : f.tensors) {
    int64_t at = 0;
    // Note [Staged passes captured] (executor_capture.cc): a periodic ring starts each pass at 0.
    const bool at_start = periodic_ring_ && f.order == 0 && t == f.tensors.front();
    if (!Place(next, ranges_list_[t].bytes, &at, &wait, at_start)) {
      if (!must) return false;
      return absl::ResourceExhaustedError(
          absl::StrCat("the device buffer of ", window_bytes_, " bytes has no room for ", ids_[t], " (",
                       ranges_list_[t].bytes, " bytes) when its op comes: the tensors before it are still in use"));
    }
    next.slots.push_back({t, at, ranges_list_[t].bytes, -1});
    offsets.push_back(at);
  }
  buffer_state_ = std::move(next);
  if (wait >= 0) backend_->WaitEvent(Stream::kCopy, wait);
  if (time_copies_) f.copy_from = backend_->RecordTimedEvent(Stream::kCopy);
  for (size_t k = 0; k < f.tensors.size(); ++k) {
    const size_t t = f.tensors[k];
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(backend_->StageInto(r.addr, r.bytes, buffer_ + static_cast<uint64_t>(offsets[k]), Stream::kCopy));
    slot_of_[t] = offsets[k];
    prefetched_bytes_ += r.bytes;
    Count(t, true);
  }
  if (time_copies_) f.copy_to = backend_->RecordTimedEvent(Stream::kCopy);
  f.done = backend_->RecordEvent(Stream::kCopy);
  f.issued = true;
  return true;
}

absl::Status Executor::IssueAhead() {
  for (size_t k = 0; k < fetch_order_.size(); ++k) {
    Fetch& f = fetches_[fetch_order_[next_ahead_]];
    if (f.issued || !InBuffer(f)) return absl::OkStatus();  // a full turn ahead, or left to its issue point
    for (size_t t : f.tensors) {
      if (on_device_[t]) return absl::OkStatus();  // still there from an earlier use: after its eviction
    }
    ASSIGN_OR_RETURN(bool issued, IssueIntoBuffer(f, /*must=*/false));
    if (!issued) return absl::OkStatus();
    next_ahead_ = (next_ahead_ + 1) % fetch_order_.size();
  }
  return absl::OkStatus();
}

// Note [Copies behind the compute stream]: the thread that launches ops runs ahead of the GPU, so a
// fetch issued "at op i" on the CPU could start long before op i runs, ahead of the evictions queued
// on the compute stream before it, and put more on the device than the plan allows. The copy stream
// therefore waits for the compute stream to reach op i before the fetches issued there.
absl::Status Executor::BeforeOp(int64_t index) {
  if (index < 0 || index >= ops_) return absl::OkStatus();  // an op the plan does not know: left to the driver
  if (time_copies_ && index == 0) pass_from_ = backend_->RecordTimedEvent(Stream::kCompute);
  if (index == 0) BeginPass();
  std::vector<size_t> here;  // fetches issued at their issue point (those not through the buffer)
  for (size_t f : issue_at_[static_cast<size_t>(index)]) {
    if (!InBuffer(fetches_[f]) && !fetches_[f].issued) here.push_back(f);
  }
  if (!here.empty()) {
    if (eviction_ != nullptr) {  // room for what is fetched here, made first on the compute stream
      for (size_t f : here) {
        for (size_t t : fetches_[f].tensors) RETURN_IF_ERROR(eviction_->Prefetched(ids_[t]));
      }
    }
    backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCompute));
    for (size_t f : here) RETURN_IF_ERROR(Issue(fetches_[f]));
  }
  for (size_t f : needed_by_[static_cast<size_t>(index)]) {
    Fetch& fetch = fetches_[f];
    // Its issue point was in the previous iteration and there was none (the first iteration), or the
    // buffer had no room for it before: now.
    if (!fetch.issued) {
      RETURN_IF_ERROR(InBuffer(fetch) ? IssueIntoBuffer(fetch, /*must=*/true).status() : Issue(fetch));
      ++fetch_counts_.at_op;
    } else {
      ++fetch_counts_.ahead;
    }
    if (time_copies_) {
      const EventId before = backend_->RecordTimedEvent(Stream::kCompute);
      backend_->WaitEvent(Stream::kCompute, fetch.done);
      timed_fetches_.push_back({fetch.copy_from, fetch.copy_to, before, backend_->RecordTimedEvent(Stream::kCompute)});
    } else {
      backend_->WaitEvent(Stream::kCompute, fetch.done);
    }
    fetch.issued = false;  // the next iteration issues it again
    if (fetch_order_[next_ahead_] == f) next_ahead_ = (fetch.order + 1) % fetch_order_.size();
    if (binding_ == nullptr) continue;
    for (size_t t : fetch.tensors) {
      if (slot_of_[t] >= 0) {
        RETURN_IF_ERROR(binding_->Bind(ranges_list_[t].addr, buffer_ + static_cast<uint64_t>(slot_of_[t])));
      }
    }
  }
  if (buffer_ != 0) RETURN_IF_ERROR(IssueAhead());
  // The op's other tensors fault in; under an emulated driver, room is made for them first.
  if (eviction_ != nullptr) RETURN_IF_ERROR(eviction_->BeforeOp(index));
  return absl::OkStatus();
}

// Note [Evictions on the compute stream]: a streamed tensor is dropped once the op that last needs it
// has run. Queued on the copy stream behind an event of that op, the drop held every later fetch until
// the op finished, so the copy stream idled through each such op's compute (1.6x the link floor in
// bench/results/2026-11-29-autouvm-sim-executor.md); queued on the compute stream it is ordered after
// the op for free, and a read-mostly drop costs little there (no copy back). A staged tensor is
// discarded there (3.4 ms of the stream per GiB on the H200, nothing copied back).
absl::Status Executor::AfterOp(int64_t index) {
  if (index < 0 || index >= ops_) return absl::OkStatus();
  if (time_copies_ && index == ops_ - 1) pass_to_ = backend_->RecordTimedEvent(Stream::kCompute);
  EventId released = -1;
  for (size_t t : evict_after_[static_cast<size_t>(index)]) {
    const TensorRange& r = ranges_list_[t];
    if (slot_of_[t] >= 0) {  // its space in the buffer is free once this op has run
      if (binding_ != nullptr) RETURN_IF_ERROR(binding_->Unbind(r.addr));
      RETURN_IF_ERROR(backend_->EndStageInto(r.addr, r.bytes));
      if (released < 0) released = backend_->RecordEvent(Stream::kCompute);
      for (Slot& s : buffer_state_.slots) {
        if (s.tensor == t && s.released < 0) s.released = released;
      }
      slot_of_[t] = -1;
    } else {
      RETURN_IF_ERROR(staged_[t] ? backend_->Discard(r.addr, r.bytes, Stream::kCompute)
                                 : backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCompute));
    }
    evicted_bytes_ += r.bytes;
    Count(t, false);
  }
  if (released >= 0) RETURN_IF_ERROR(IssueAhead());
  if (index == ops_ - 1) EndPass();
  return absl::OkStatus();
}

void Executor::AbandonIteration() {
  pass_ = PassRecord();  // Note [Staged passes captured]: a pass cut short repeats nothing
  last_pass_ = PassRecord();
  for (Fetch& f : fetches_) f.issued = false;
  next_ahead_ = 0;
  if (buffer_ == 0) return;
  // Whatever is in the buffer is dropped once the ops launched so far have run; errors are the next
  // iteration's to meet (its binds and copies go through the same calls).
  for (size_t t = 0; t < slot_of_.size(); ++t) {
    if (slot_of_[t] < 0) continue;
    if (binding_ != nullptr) (void)binding_->Unbind(ranges_list_[t].addr);
    (void)backend_->EndStageInto(ranges_list_[t].addr, ranges_list_[t].bytes);
    slot_of_[t] = -1;
    Count(t, false);
  }
  const EventId done = backend_->RecordEvent(Stream::kCompute);
  for (Slot& s : buffer_state_.slots) s.released = done;
}

}  // namespace autouvm::runtime
