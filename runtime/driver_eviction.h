// DriverEviction: the UVM driver's eviction, emulated under a software device budget, for the policies
// that leave residency to the driver (stock, paper). The card here is far larger than any budget we
// study (../shared/gpu/NOTES.md: never oversubscribe it), so the driver would never evict by itself;
// this does what it would: before each op, the named tensors the op touches that are not on the device
// will be faulted in, and when they do not fit, the resident 2 MiB chunks (of other tensors) whose GPU
// memory was allocated first — the driver keeps its chunks in allocation order, not access order, as
// the simulator does (runtime/sim/uvm_model.h) — are first migrated back to the host, on the compute
// stream, where the faulting kernel would wait for the driver's eviction.
//
//   DriverEviction ev(backend, trace, ranges, budget_bytes);
//   for each op i: RETURN_IF_ERROR(ev.BeforeOp(i)); launch op i;
//   ev.Prefetched(id);   // a policy that prefetched a tensor itself (paper): it is resident now
//
// Not thread-safe: one iteration's thread drives it.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"
#include "runtime/executor.h"

namespace autouvm::runtime {

class DriverEviction {
 public:
  static constexpr int64_t kChunkBytes = 2 << 20;

  DriverEviction(DeviceBackend* backend, const AccessTrace& trace,
                 const std::unordered_map<std::string, TensorRange>& ranges, int64_t budget_bytes);

  absl::Status BeforeOp(int64_t index);
  // Makes room for, and counts as resident, a tensor a policy brings in itself.
  absl::Status Prefetched(const std::string& id);
  // A tensor advised to stay on the device (preferred location): evicted only when nothing else is left.
  void Protect(const std::string& id);

  int64_t resident_bytes() const { return resident_bytes_; }
  int64_t peak_resident_bytes() const { return peak_resident_bytes_; }
  int64_t evicted_bytes() const { return evicted_bytes_; }

 private:
  struct Chunk {
    uint64_t addr;
    int64_t bytes;
    size_t tensor;
    bool resident = false;
  };
  std::vector<bool> protected_;  // per tensor
  absl::Status BringIn(const std::vector<size_t>& tensors);

  DeviceBackend* const backend_;
  const int64_t budget_;
  std::unordered_map<std::string, size_t> index_;     // tensor id → its number, in allocation order
  std::vector<std::pair<size_t, size_t>> chunks_of_;  // tensor → [first, last) in chunks_
  std::vector<Chunk> chunks_;                         // every tensor's chunks, in address order per tensor
  std::vector<std::vector<size_t>> touches_;          // per op: tensors it reads or writes
  std::list<size_t> order_;                           // resident chunks, the first to get GPU memory first
  int64_t resident_bytes_ = 0;
  int64_t peak_resident_bytes_ = 0;
  int64_t evicted_bytes_ = 0;
};

}  // namespace autouvm::runtime
