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

namespace autouvm::runtime::sim {

struct UvmModelConfig {
  int64_t device_capacity_bytes = 0;  // the device budget for managed memory
  int64_t page_bytes = 64 << 10;      // big page (uvm_va_block.h)
  int64_t block_bytes = 2 << 20;      // VA block
  double density_threshold = 0.51;    // uvm_perf_prefetch_threshold default, 51%
  int fault_batch_size = 256;         // uvm_perf_fault_batch_count default
};

struct UvmCounters {
  int64_t faults = 0;  // pages faulted
  int64_t fault_batches = 0;
  int64_t h2d_fault_bytes = 0;            // migrated because they faulted
  int64_t h2d_driver_prefetch_bytes = 0;  // added by the density prefetcher
  int64_t h2d_user_prefetch_bytes = 0;    // moved by Prefetch(kDevice)
  int64_t d2h_eviction_bytes = 0;         // copied back by evictions
  int64_t d2h_user_prefetch_bytes = 0;    // moved by Prefetch(kHost)
  int64_t dropped_bytes = 0;              // evicted without a copy (valid host copy)
  int64_t evicted_chunks = 0;
  int64_t remote_read_bytes = 0;  // read in place over the link
};

enum class Location { kHost, kDevice };

class UvmModel {
 public:
  explicit UvmModel(UvmModelConfig config);

  // A managed allocation [base, base + bytes), its pages on the host. `base` must be block-aligned.
  void Allocate(uint64_t base, int64_t bytes);
  void Free(uint64_t base);

  // A kernel touches [addr, addr + bytes).
  void GpuAccess(uint64_t addr, int64_t bytes, bool write);
  void Prefetch(uint64_t addr, int64_t bytes, Location to);
  void SetReadMostly(uint64_t addr, int64_t bytes, bool on);
  void SetRemote(uint64_t addr, int64_t bytes, bool on);

  bool OnDevice(uint64_t addr) const;
  int64_t device_bytes() const { return device_pages_ * config_.page_bytes; }
  const UvmCounters& counters() const { return counters_; }

 private:
  struct Page {
    bool on_device = false;
    bool host_valid = true;
    bool read_mostly = false;
    bool remote = false;
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
  void MigrateToDevice(uint64_t base, Block& block, int page, int64_t* counter);
  void MigrateToHost(Block& block, int page, int64_t* copy_counter);
  void MakeRoom(uint64_t servicing_block, int pages);
  void EvictChunk(uint64_t base);
  void DensityPrefetch(uint64_t base, Block& block, const std::vector<bool>& faulted);

  UvmModelConfig config_;
  std::map<uint64_t, Block> blocks_;  // by block base address
  std::map<uint64_t, int64_t> allocations_;
  std::list<uint64_t> chunks_;  // blocks holding a GPU chunk, oldest first
  int64_t device_pages_ = 0;
  UvmCounters counters_;
};

}  // namespace autouvm::runtime::sim
