#include "runtime/executor.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/driver_eviction.h"
#include "runtime/status_macros.h"

namespace autouvm::runtime {

constexpr int64_t kStageAlignment = int64_t{2} << 20;  // a VA block

Executor::Executor(DeviceBackend* backend, const autouvm::v1::Plan& plan, const AccessTrace& trace,
                   std::unordered_map<std::string, TensorRange> ranges)
    : backend_(backend),
      ops_(static_cast<int64_t>(trace.ops.size())),
      driver_evicts_(plan.driver_evicts()),
      stage_(plan.staged() && !plan.driver_evicts() && backend->can_stage()),
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
    ids_.push_back(id);
  };
  for (const TensorUse& n : trace.named) add(n.id);
  std::vector<std::string> rest;
  for (const auto& [id, r] : ranges) {
    if (!index.count(id)) rest.push_back(id);
  }
  std::sort(rest.begin(), rest.end());
  for (const std::string& id : rest) add(id);
  on_device_.assign(ranges_list_.size(), false);
  staged_.assign(ranges_list_.size(), false);

  for (const std::string& id : plan.pinned()) {
    if (auto it = index.find(id); it != index.end()) pinned_.push_back(it->second);
  }
  for (const std::string& id : plan.remote()) {
    if (auto it = index.find(id); it != index.end()) remote_.push_back(it->second);
  }
  for (const std::string& id : plan.affinity()) {
    if (auto it = index.find(id); it != index.end()) affinity_.push_back(it->second);
  }
  // Where each streamed tensor is fetched: an op it is fetched for needs it fresh; the use before that
  // fetch (cyclically) is its last use in the window, after which it is evicted.
  std::unordered_map<size_t, std::set<int64_t>> fetched_for;
  for (const autouvm::v1::Prefetch& p : plan.prefetches()) {
    if (p.for_op() < 0 || p.for_op() >= ops_ || p.issue_at_op() < 0 || p.issue_at_op() >= ops_) continue;
    Fetch f;
    for (const std::string& id : p.tensors()) {
      if (auto it = index.find(id); it != index.end()) {
        f.tensors.push_back(it->second);
        fetched_for[it->second].insert(p.for_op());
      }
    }
    if (f.tensors.empty()) continue;
    issue_at_[static_cast<size_t>(p.issue_at_op())].push_back(fetches_.size());
    needed_by_[static_cast<size_t>(p.for_op())].push_back(fetches_.size());
    fetches_.push_back(std::move(f));
  }
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
// device_backend.h), read-mostly otherwise (the host copy stays valid, so dropping the device copy costs
// no copy back); remote tensors are mapped for the device in host memory; pinned tensors are brought
// in once and never evicted by the executor.
absl::Status Executor::Prepare() {
  std::vector<bool> streamed(ranges_list_.size(), false);
  for (const Fetch& f : fetches_) {
    for (size_t t : f.tensors) streamed[t] = true;
  }
  for (size_t t = 0; t < ranges_list_.size(); ++t) {
    const TensorRange& r = ranges_list_[t];
    if (driver_evicts_ || !streamed[t] || !IsWeightId(ids_[t]) || r.bytes <= 0) continue;
    // Note [Stage whole blocks]: a discard acts on whole pages, so a range that shares one with another
    // tensor (small tensors packed by the allocator) is not staged; on the H200 such ranges in a small
    // model raised fault groups every step. Weights of 2 MiB multiples get their own blocks.
    if (stage_ && r.addr % kStageAlignment == 0 && r.bytes % kStageAlignment == 0) {
      RETURN_IF_ERROR(backend_->StageOut(r.addr, r.bytes));
      staged_[t] = true;
    } else {
      RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kReadMostly, true));
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
  // One call per tensor: adjacent tensors may lie in different allocations, and a prefetch may not
  // span two (cudaErrorInvalidValue).
  for (size_t t : pinned_) {
    const TensorRange& r = ranges_list_[t];
    if (r.bytes <= 0) continue;
    RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += r.bytes;
    Count(t, true);
  }
  return absl::OkStatus();
}

absl::Status Executor::Repin(const std::vector<std::string>& ids) {
  bool any = false;
  for (size_t t : pinned_) {
    const TensorRange& r = ranges_list_[t];
    if (r.bytes <= 0 || std::find(ids.begin(), ids.end(), ids_[t]) == ids.end()) continue;
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

absl::Status Executor::Release() {
  absl::Status first;
  for (size_t t = 0; t < staged_.size(); ++t) {
    if (!staged_[t]) continue;
    if (absl::Status s = backend_->Unstage(ranges_list_[t].addr, ranges_list_[t].bytes); !s.ok() && first.ok()) {
      first = s;
    }
    staged_[t] = false;
    Count(t, false);
  }
  return first;
}

absl::Status Executor::Issue(Fetch& f) {
  for (size_t t : f.tensors) {
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(staged_[t] ? backend_->StageIn(r.addr, r.bytes, Stream::kCopy)
                               : backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += r.bytes;
    Count(t, true);
  }
  f.done = backend_->RecordEvent(Stream::kCopy);
  f.issued = true;
  return absl::OkStatus();
}

// Note [Copies behind the compute stream]: the thread that launches ops runs ahead of the GPU, so a
// fetch issued "at op i" on the CPU could start long before op i runs, ahead of the evictions queued
// on the compute stream before it, and put more on the device than the plan allows. The copy stream
// therefore waits for the compute stream to reach op i before the fetches issued there.
absl::Status Executor::BeforeOp(int64_t index) {
  if (index < 0 || index >= ops_) return absl::OkStatus();  // an op the plan does not know: left to the driver
  if (!issue_at_[static_cast<size_t>(index)].empty()) {
    if (eviction_ != nullptr) {  // room for what is fetched here, made first on the compute stream
      for (size_t f : issue_at_[static_cast<size_t>(index)]) {
        for (size_t t : fetches_[f].tensors) RETURN_IF_ERROR(eviction_->Prefetched(ids_[t]));
      }
    }
    backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCompute));
    for (size_t f : issue_at_[static_cast<size_t>(index)]) RETURN_IF_ERROR(Issue(fetches_[f]));
  }
  for (size_t f : needed_by_[static_cast<size_t>(index)]) {
    Fetch& fetch = fetches_[f];
    // Its issue point was in the previous iteration and there was none (the first iteration): now.
    if (!fetch.issued) RETURN_IF_ERROR(Issue(fetch));
    backend_->WaitEvent(Stream::kCompute, fetch.done);
    fetch.issued = false;  // the next iteration issues it again
  }
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
  for (size_t t : evict_after_[static_cast<size_t>(index)]) {
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(staged_[t] ? backend_->Discard(r.addr, r.bytes, Stream::kCompute)
                               : backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCompute));
    evicted_bytes_ += r.bytes;
    Count(t, false);
  }
  return absl::OkStatus();
}

void Executor::AbandonIteration() {
  for (Fetch& f : fetches_) f.issued = false;
}

PlanFollower::PlanFollower(Executor* executor, const AccessTrace& trace) : executor_(executor) {
  kernels_.reserve(trace.ops.size());
  for (const OpRecord& op : trace.ops) kernels_.push_back(op.kernel);
}

// Note [Stopping with staged weights]: a staged weight's managed range holds nothing until the executor
// brings it in, so ops left to the driver after following stops would read discarded pages, not fault
// the weight in. Stopping therefore puts every staged weight back in managed memory first (synchronous:
// ~1 s per GiB on the H200). The op whose kernel differed has already been launched and may have read
// such a range: the iteration's result is not to be trusted (its status says so).
void PlanFollower::Stop(absl::Status why) {
  stopped_ = true;
  if (executor_->stages()) {
    if (absl::Status released = executor_->Release(); !released.ok()) {
      why = absl::Status(why.code(),
                         absl::StrCat(why.message(), "; putting the staged weights back: ", released.message()));
    }
  }
  status_ = std::move(why);
}

void PlanFollower::BeforeOp(int64_t index) {
  if (stopped_) return;
  if (absl::Status s = executor_->BeforeOp(index); !s.ok()) Stop(s);
}

void PlanFollower::OnOp(const OpEvent& op) {
  if (stopped_) return;
  const size_t i = static_cast<size_t>(op.index);
  if (i >= kernels_.size() || kernels_[i] != op.kernel) {
    ++mismatches_;
    Stop(absl::FailedPreconditionError(absl::StrCat(
        "op ", op.index, " is ", std::string(op.kernel), ", the plan expected ",
        i < kernels_.size() ? kernels_[i]
                            : std::string("none (the plan has ") + std::to_string(kernels_.size()) + " ops)")));
    return;
  }
  if (absl::Status s = executor_->AfterOp(op.index); !s.ok()) {
    Stop(s);
    return;
  }
  ++ops_followed_;
}

absl::Status PlanFollower::EndIteration() {
  if (!stopped_ && ops_followed_ != static_cast<int64_t>(kernels_.size())) {
    ++mismatches_;
    Stop(absl::FailedPreconditionError(
        absl::StrCat("the iteration ran ", ops_followed_, " ops, the plan has ", kernels_.size())));
  }
  if (stopped_) executor_->AbandonIteration();
  absl::Status why = std::move(status_);
  status_ = absl::OkStatus();
  stopped_ = false;
  ops_followed_ = 0;
  return why;
}

}  // namespace autouvm::runtime
