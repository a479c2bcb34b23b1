// UvmModel: the state the NVIDIA UVM driver keeps for managed memory, and what it does on a GPU access,
// a prefetch and an eviction — modelled page by page, without moving any data. The simulated backend
// charges time for the counters it produces (costs come with the GpuSpec calibration).
//
// What is modelled (kernel-open/nvidia-uvm of open-gpu-kernel-modules):
// - 2 MiB VA blocks of 64 KiB big pages; a page is on the GPU, and/or has a valid host copy.
// - A GPU access faults on every page it touches that is not on the GPU; faults are serviced in batches
//   of up to 256. Servicing migrates the faulted pages and whatever the density prefetcher adds: within
//   the faulting block, the largest aligned power-of-two region around a faulted page in which more than
//   51% of pages are resident or faulted is migrated whole (never crossing the block).
// - GPU memory is taken in 2 MiB chunks, one per block with pages on the GPU; when the device budget is
//   full, whole chunks are evicted, oldest allocated first (the driver's list is in allocation order, not
//   access order), never the block being serviced. Eviction copies back only pages without a valid host
//   copy: read-duplicated (read-mostly) pages are dropped for free.
// - Ranges marked remote (preferred location host, accessed by the GPU) are read over the link in place.
//
// Thread-safety: none; one model per simulated device, driven by one thread.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <vector>

#include "runtime/device_backend.h"

namespace autouvm::runtime::sim {

struct UvmModelConfig {
  int64_t device_capacity_bytes = 0;  // the device budget for managed memory
  int64_t page_bytes = 64 << 10;      // big page (uvm_va_block.h)
  int64_t block_bytes = 2 << 20;      // VA block
  double density_threshold = 0.51;    // uvm_perf_prefetch_threshold default, 51%
  int fault_batch_size = 256;         // uvm_perf_fault_batch_count default
};

// What the driver did, beyond the counters, for the cost model (runtime/sim/sim_backend.cc).
struct UvmWork {
  int64_t faulted_pages = 0;    // pages migrated to service faults (the density prefetcher's included)
  int64_t serviced_blocks = 0;  // VA blocks serviced for faults
  int64_t prefetch_blocks = 0;  // VA blocks a user prefetch moved pages of
  int64_t d2h_pages = 0;        // pages copied back to the host (eviction or prefetch), GPU-written ones
  int64_t d2h_clean_pages = 0;  // ... and ones the GPU has not written since they arrived
  int64_t dropped_pages = 0;    // device copies dropped without a copy
  int64_t populated_pages = 0;  // pages placed on the device with nothing to copy (Populate)
};

// One range a kernel touches. `entries_per_page`: fault-buffer entries the kernel raises for each page
// it touches that is not on the device (Note [H200 calibration], runtime/gpu_spec.cc).
struct GpuRange {
  uint64_t addr = 0;
  int64_t bytes = 0;
  bool write = false;
  double entries_per_page = 1;
};

class UvmModel {
 public:
  explicit UvmModel(UvmModelConfig config);

  // A managed allocation [base, base + bytes), its pages on the host. `base` must be block-aligned.
  void Allocate(uint64_t base, int64_t bytes);
  void Free(uint64_t base);

  // A kernel touches these ranges; its faults are pooled and serviced in batches.
  void Kernel(const std::vector<GpuRange>& ranges);
  // A kernel that touches one range.
  void GpuAccess(uint64_t addr, int64_t bytes, bool write) { Kernel({{addr, bytes, write, 1.0}}); }
  // To the host, a read-duplicated page keeps its device copy (the H200 does; only turning read
  // duplication off or the driver's eviction drops it).
  void Prefetch(uint64_t addr, int64_t bytes, Location to);
  // Turning read duplication off collapses each duplicated page to one copy, kept at `keep` (the range's
  // preferred location): kept on the host, the device copy is dropped without a copy back.
  void SetReadMostly(uint64_t addr, int64_t bytes, bool on, Location keep = Location::kDevice);
  void SetRemote(uint64_t addr, int64_t bytes, bool on);
  // Drops the device copies of the range without copying them back: all of them (`discard`: the contents
  // are no longer needed), or only those with a valid host copy (read duplicates).
  void DropDeviceCopies(uint64_t addr, int64_t bytes, bool discard);

  // Pages of the range placed on the device without a copy from the host (a prefetch of discarded
  // pages): they take device memory, as a migration would, and move no bytes; the device's copy is the
  // only one (what a staged copy then writes into them, Note [Staged streaming] in device_backend.h).
  void Populate(uint64_t addr, int64_t bytes);

  bool OnDevice(uint64_t addr) const;
  int64_t ResidentBytes(uint64_t addr, int64_t bytes);
  int64_t device_bytes() const { return device_pages_ * config_.page_bytes; }
  const UvmCounters& counters() const { return counters_; }
  const UvmWork& work() const { return work_; }

 private:
  struct Page {
    bool on_device = false;
    bool host_valid = true;
    bool read_mostly = false;
    bool remote = false;
    bool evicted = false;  // the driver evicted it and it has not come back since
    bool written = false;  // the GPU wrote it since it arrived on the device
  };
  struct Block {
    std::vector<Page> pages;
    int resident = 0;
    bool has_chunk = false;
    std::list<uint64_t>::iterator chunk;  // position in chunks_ when has_chunk
  };

  int pages_per_block() const { return static_cast<int>(config_.block_bytes / config_.page_bytes); }
  // Calls f(block_base, block, first_page, last_page) for each block overlapping the range.
  template <typename F>
  void ForEachBlock(uint64_t addr, int64_t bytes, F f);
  void EnterDevice(uint64_t base, Block& block, Page& page);  // room made, a chunk for its block, counted
  void MigrateToDevice(uint64_t base, Block& block, int page, MigrationCause cause);
  void MigrateToHost(Block& block, int page, MigrationCause cause);
  void DropPage(Block& block, int page);
  void LeaveDevice(Block& block, Page& page);
  void MakeRoom(uint64_t servicing_block, int pages);
  void EvictChunk(uint64_t base);
  void DensityPrefetch(uint64_t base, Block& block, const std::vector<bool>& faulted);

  UvmModelConfig config_;
  std::map<uint64_t, Block> blocks_;  // by block base address
  std::map<uint64_t, int64_t> allocations_;
  std::list<uint64_t> chunks_;  // blocks holding a GPU chunk, oldest first
  int64_t device_pages_ = 0;
  UvmCounters counters_;
  UvmWork work_;
};

}  // namespace autouvm::runtime::sim
