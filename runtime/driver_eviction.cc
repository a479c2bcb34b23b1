#include "runtime/driver_eviction.h"

#include <algorithm>

#include "base/status_macros.h"

namespace autouvm::runtime {

DriverEviction::DriverEviction(DeviceBackend* backend, const AccessTrace& trace,
                               const std::unordered_map<std::string, TensorRange>& ranges, int64_t budget_bytes)
    : backend_(backend), budget_(budget_bytes), touches_(trace.ops.size()) {
  for (const TensorUse& n : trace.named) {
    auto it = ranges.find(n.id);
    if (it == ranges.end() || index_.count(n.id)) continue;
    const size_t t = chunks_of_.size();
    index_[n.id] = t;
    const size_t first = chunks_.size();
    for (int64_t off = 0; off < it->second.bytes; off += kChunkBytes) {
      chunks_.push_back(
          {it->second.addr + static_cast<uint64_t>(off), std::min(kChunkBytes, it->second.bytes - off), t});
    }
    chunks_of_.push_back({first, chunks_.size()});
  }
  protected_.assign(chunks_of_.size(), false);
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    for (const auto* list : {&trace.ops[i].reads, &trace.ops[i].writes}) {
      for (const TensorUse& u : *list) {
        auto it = index_.find(u.id);
        if (it == index_.end()) continue;
        auto& v = touches_[i];
        if (std::find(v.begin(), v.end(), it->second) == v.end()) v.push_back(it->second);
      }
    }
  }
}

absl::Status DriverEviction::BeforeOp(int64_t index) {
  if (index < 0 || index >= static_cast<int64_t>(touches_.size())) return absl::OkStatus();
  return BringIn(touches_[static_cast<size_t>(index)]);
}

absl::Status DriverEviction::Prefetched(const std::string& id) {
  auto it = index_.find(id);
  if (it == index_.end()) return absl::OkStatus();
  return BringIn({it->second});
}

void DriverEviction::Protect(const std::string& id) {
  if (auto it = index_.find(id); it != index_.end()) protected_[it->second] = true;
}

absl::Status DriverEviction::BringIn(const std::vector<size_t>& tensors) {
  int64_t need = 0;
  for (size_t t : tensors) {
    for (size_t c = chunks_of_[t].first; c < chunks_of_[t].second; ++c) {
      if (!chunks_[c].resident) need += chunks_[c].bytes;
    }
  }
  if (need == 0) return absl::OkStatus();
  // Oldest GPU allocation first, skipping the tensors this op needs; adjacent chunks of one tensor go
  // back in one call (not of two: tensors adjacent in addresses may lie in two allocations, and one
  // prefetch cannot span those).
  uint64_t run_addr = 0;
  int64_t run_bytes = 0;
  size_t run_tensor = 0;
  auto flush = [&]() -> absl::Status {
    if (run_bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(backend_->Prefetch(run_addr, run_bytes, Location::kHost, Stream::kCompute));
    evicted_bytes_ += run_bytes;
    run_bytes = 0;
    return absl::OkStatus();
  };
  // Protected chunks only once the others are gone.
  for (const bool take_protected : {false, true}) {
    for (auto it = order_.begin(); it != order_.end() && resident_bytes_ + need > budget_;) {
      Chunk& chunk = chunks_[*it];
      if (std::find(tensors.begin(), tensors.end(), chunk.tensor) != tensors.end() ||
          protected_[chunk.tensor] != take_protected) {
        ++it;
        continue;
      }
      if (run_bytes != 0 && (run_tensor != chunk.tensor || run_addr + static_cast<uint64_t>(run_bytes) != chunk.addr)) {
        RETURN_IF_ERROR(flush());
      }
      if (run_bytes == 0) run_addr = chunk.addr, run_tensor = chunk.tensor;
      run_bytes += chunk.bytes;
      chunk.resident = false;
      resident_bytes_ -= chunk.bytes;
      it = order_.erase(it);
    }
    RETURN_IF_ERROR(flush());
  }
  for (size_t t : tensors) {
    for (size_t c = chunks_of_[t].first; c < chunks_of_[t].second; ++c) {
      if (chunks_[c].resident) continue;
      chunks_[c].resident = true;
      order_.push_back(c);
      resident_bytes_ += chunks_[c].bytes;
    }
  }
  peak_resident_bytes_ = std::max(peak_resident_bytes_, resident_bytes_);
  return absl::OkStatus();
}

}  // namespace autouvm::runtime
