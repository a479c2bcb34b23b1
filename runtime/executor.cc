#include "runtime/executor.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "runtime/status_macros.h"

namespace autouvm::runtime {

Executor::Executor(DeviceBackend* backend, const autouvm::v1::Plan& plan, const AccessTrace& trace,
                   std::unordered_map<std::string, TensorRange> ranges)
    : backend_(backend),
      ops_(static_cast<int64_t>(trace.ops.size())),
      ranges_(std::move(ranges)),
      issue_at_(trace.ops.size()),
      needed_by_(trace.ops.size()),
      evict_after_(trace.ops.size()) {
  auto range = [&](const std::string& id) -> const TensorRange* {
    auto it = ranges_.find(id);
    return it == ranges_.end() ? nullptr : &it->second;
  };
  for (const std::string& id : plan.pinned()) {
    if (range(id) != nullptr) pinned_.push_back(id);
  }
  // Where each streamed tensor is fetched: an op it is fetched for needs it fresh; the use before that
  // fetch (cyclically) is its last use in the window, after which it is evicted.
  std::unordered_map<std::string, std::set<int64_t>> fetched_for;
  for (const autouvm::v1::Prefetch& p : plan.prefetches()) {
    if (p.for_op() < 0 || p.for_op() >= ops_ || p.issue_at_op() < 0 || p.issue_at_op() >= ops_) continue;
    Fetch f;
    for (const std::string& id : p.tensors()) {
      if (const TensorRange* r = range(id)) {
        f.ranges.push_back(r);
        fetched_for[id].insert(p.for_op());
      }
    }
    if (f.ranges.empty()) continue;
    issue_at_[static_cast<size_t>(p.issue_at_op())].push_back(fetches_.size());
    needed_by_[static_cast<size_t>(p.for_op())].push_back(fetches_.size());
    fetches_.push_back(std::move(f));
  }
  std::unordered_map<std::string, std::vector<int64_t>> uses;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const auto* list : {&trace.ops[i].reads, &trace.ops[i].writes}) {
      for (const TensorUse& u : *list) {
        if (fetched_for.count(u.id) == 0) continue;
        auto& at = uses[u.id];
        if (at.empty() || at.back() != static_cast<int64_t>(i)) at.push_back(static_cast<int64_t>(i));
      }
    }
  }
  for (const auto& [id, at] : uses) {
    const std::set<int64_t>& fetch_points = fetched_for[id];
    for (size_t k = 0; k < at.size(); ++k) {
      const int64_t next = k + 1 < at.size() ? at[k + 1] : at[0];
      if (fetch_points.count(next)) evict_after_[static_cast<size_t>(at[k])].push_back(range(id));
    }
  }
}

// Weights are read-mostly (the host copy stays valid, so dropping the device copy costs no copy back);
// pinned tensors are brought in once and never evicted by the executor.
absl::Status Executor::Prepare() {
  for (const auto& [id, r] : ranges_) {
    if (absl::StartsWith(id, "param:") && !absl::StartsWith(id, "param:kv_cache")) {
      RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kReadMostly, true));
    }
  }
  for (const std::string& id : pinned_) {
    const TensorRange& r = ranges_.at(id);
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kPreferredLocation, true, Location::kDevice));
    RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += r.bytes;
  }
  return absl::OkStatus();
}

absl::Status Executor::Issue(Fetch& f) {
  for (const TensorRange* r : f.ranges) {
    RETURN_IF_ERROR(backend_->Prefetch(r->addr, r->bytes, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += r->bytes;
  }
  f.done = backend_->RecordEvent(Stream::kCopy);
  f.issued = true;
  return absl::OkStatus();
}

absl::Status Executor::BeforeOp(int64_t index) {
  if (index < 0 || index >= ops_) return absl::OkStatus();  // an op the plan does not know: left to the driver
  for (size_t f : issue_at_[static_cast<size_t>(index)]) RETURN_IF_ERROR(Issue(fetches_[f]));
  for (size_t f : needed_by_[static_cast<size_t>(index)]) {
    Fetch& fetch = fetches_[f];
    // Its issue point was in the previous iteration and there was none (the first iteration): now.
    if (!fetch.issued) RETURN_IF_ERROR(Issue(fetch));
    backend_->WaitEvent(Stream::kCompute, fetch.done);
    fetch.issued = false;  // the next iteration issues it again
  }
  return absl::OkStatus();
}

// Note [Evictions on the compute stream]: a streamed tensor is dropped once the op that last needs it
// has run. Queued on the copy stream behind an event of that op, the drop held every later fetch until
// the op finished, so the copy stream idled through each such op's compute (1.6x the link floor in
// bench/results/2026-11-29-autouvm-sim-executor.md); queued on the compute stream it is ordered after
// the op for free, and a read-mostly drop costs little there (no copy back).
absl::Status Executor::AfterOp(int64_t index) {
  if (index < 0 || index >= ops_ || evict_after_[static_cast<size_t>(index)].empty()) return absl::OkStatus();
  for (const TensorRange* r : evict_after_[static_cast<size_t>(index)]) {
    RETURN_IF_ERROR(backend_->Prefetch(r->addr, r->bytes, Location::kHost, Stream::kCompute));
    evicted_bytes_ += r->bytes;
  }
  return absl::OkStatus();
}

}  // namespace autouvm::runtime
