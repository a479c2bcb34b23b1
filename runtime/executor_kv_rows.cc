// Executor, its part that follows the KV pools' rows in use (Note [KV pools follow the rows in use]):
// placing the rows a pool grew by, and reading pinned weights in place to make room for them.
#include <algorithm>
#include <vector>

#include "base/log.h"
#include "base/status_macros.h"
#include "runtime/executor.h"

namespace autouvm::runtime {

// Note [KV pools follow the rows in use]: a sequence takes its KV blocks as it grows, lowest first
// (Note [Block KV cache], engine/kv_blocks.cc), so the rows in use are a prefix of each pool that grows
// through a batch's life. A plan was made for the rows its profiled iteration reached (Note [KV pools by
// their live rows], access_trace.cc); the executor is told the rows in use before each iteration and
// places that much of each pool the plan pins or fetches: the rows a pinned pool grew by are prefetched
// before the iteration's first op, where the device's first touch used to fault them in one group at a
// time (48341 fault groups over a batch growing 1 -> 64 on the H200's 7B, whose passes followed plans
// made for fewer rows). Rows that fall out of use stay where they are until the plan is released: the
// next sequences take those blocks first. The rows are real device memory, so what they add is taken
// from the pinned weights: while the plan's pins and window would exceed its budget, the weights last
// pinned that one op reads at a low intensity (a decode step's matrix-vector products) are read in
// place from host memory instead (Note [Unstageable weights are read in place], executor.cc), which
// moves each of their bytes over the link once a step, as streaming them would. Taking every sequence's blocks for
// its whole length at admission (what the rows of a plan once had to cover) held a burst's last rows
// on the device from its first step: a 16-request burst of the 7B decoded at 0.79 of 16 / sweep, its
// pool's 1.15 GB taken from the pins from the start where the rows in use average half of it.
int64_t Executor::Overshoot() const {
  if (budget_bytes_ <= 0) return 0;
  int64_t pinned = 0;
  for (size_t t : pinned_) {
    if (!displaced_[t] && (on_device_[t] || !prepared_)) pinned += ranges_list_[t].bytes;
  }
  // A plan made over its budget (a model whose pins alone exceed it) is not made smaller here.
  return pinned + window_bytes_ - std::max(budget_bytes_, footprint_bytes_);
}

// Note [Displace the fewest bytes]: a displaced weight crosses the link every step from then on, beside
// the plan's staged copies, and holds its op while it does. Taking the weights in displaceable_'s order
// alone displaced the 7B's 250 MiB output projection for a few 8 MiB KV blocks at factor 1.1 on an H100:
// 262 MB read in place a step on top of 608 MB staged, the link saturated (55 GB/s by nvidia-smi dmon)
// and the step 1.45 times what the staged bytes alone take. So each weight taken is the smallest one
// that covers what is still over, or, where none does, the largest (then the next); ties in that order.
size_t Executor::NextToDisplace(int64_t over) const {
  size_t best = displaceable_.size();
  int64_t best_bytes = 0;
  for (size_t i = 0; i < displaceable_.size(); ++i) {
    const size_t t = displaceable_[i];
    if (displaced_[t] || (prepared_ && !on_device_[t])) continue;
    const int64_t b = ranges_list_[t].bytes;
    const bool covers = b >= over, best_covers = best_bytes >= over;
    if (best == displaceable_.size() || (covers && (!best_covers || b < best_bytes)) ||
        (!covers && !best_covers && b > best_bytes)) {
      best = i;
      best_bytes = b;
    }
  }
  return best;
}

absl::Status Executor::Displace() {
  for (int64_t over = Overshoot(); over > 0; over = Overshoot()) {
    const size_t i = NextToDisplace(over);
    if (i == displaceable_.size()) break;
    const size_t t = displaceable_[i];
    const TensorRange& r = ranges_list_[t];
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kPreferredLocation, true, Location::kHost));
    RETURN_IF_ERROR(backend_->Advise(r.addr, r.bytes, Advice::kAccessedBy, true, Location::kDevice));
    // Behind the ops already launched (the last iteration's reads), ahead of the next ones.
    if (on_device_[t]) {
      RETURN_IF_ERROR(backend_->Prefetch(r.addr, r.bytes, Location::kHost, Stream::kCompute));
      evicted_bytes_ += r.bytes;
      Count(t, false);
    }
    displaced_[t] = true;
    displaced_bytes_ += r.bytes;
    in_place_bytes_ += r.bytes;
  }
  if (const int64_t over = Overshoot(); over > 0 && !warned_over_) {
    warned_over_ = true;
    AUTOUVM_LOG(DEBUG) << "the KV rows in use put the plan " << over << " bytes over its budget of " << budget_bytes_
                       << " bytes: no pinned weight is left that can be read in place";
  }
  return absl::OkStatus();
}

absl::Status Executor::SetKvRows(int64_t live_rows, int64_t pool_rows) {
  if (pool_rows <= 0 || driver_evicts_) return absl::OkStatus();  // `paper`: the driver places everything
  live_rows = std::clamp<int64_t>(live_rows, 0, pool_rows);
  struct Growth {
    size_t tensor;
    int64_t from, to;
  };
  std::vector<Growth> grown;  // pools on the device whose rows in use grew
  for (size_t t = 0; t < ranges_list_.size(); ++t) {
    if (!IsKvCacheId(ids_[t])) continue;
    TensorRange& r = ranges_list_[t];
    const int64_t want = storage_bytes_[t] / pool_rows * live_rows;
    if (!on_device_[t]) {  // placed by its next fetch, or by Prepare()
      r.bytes = want;
    } else if (want > r.bytes) {
      grown.push_back({t, r.bytes, want});
      r.bytes = want;
    }
  }
  if (!prepared_ || grown.empty()) return absl::OkStatus();
  // Room first, on the compute stream behind the last iteration's ops; the new rows after it.
  RETURN_IF_ERROR(Displace());
  backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCompute));
  for (const Growth& g : grown) {
    const TensorRange& r = ranges_list_[g.tensor];
    RETURN_IF_ERROR(
        backend_->Prefetch(r.addr + static_cast<uint64_t>(g.from), g.to - g.from, Location::kDevice, Stream::kCopy));
    prefetched_bytes_ += g.to - g.from;
    resident_bytes_ += g.to - g.from;
  }
  peak_resident_bytes_ = std::max(peak_resident_bytes_, resident_bytes_);
  backend_->WaitEvent(Stream::kCompute, backend_->RecordEvent(Stream::kCopy));
  return absl::OkStatus();
}

}  // namespace autouvm::runtime
