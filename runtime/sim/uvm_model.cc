#include "runtime/sim/uvm_model.h"

#include <algorithm>
#include <cassert>

namespace autouvm::runtime::sim {

UvmModel::UvmModel(UvmModelConfig config) : config_(config) {}

void UvmModel::Allocate(uint64_t base, int64_t bytes) {
  allocations_[base] = bytes;
  const uint64_t end = base + static_cast<uint64_t>(bytes);
  for (uint64_t b = base; b < end; b += config_.block_bytes) blocks_[b].pages.resize(pages_per_block());
}

void UvmModel::Free(uint64_t base) {
  auto it = allocations_.find(base);
  if (it == allocations_.end()) return;
  const uint64_t end = base + static_cast<uint64_t>(it->second);
  for (uint64_t b = base; b < end; b += config_.block_bytes) {
    Block& block = blocks_[b];
    device_pages_ -= block.resident;
    if (block.has_chunk) chunks_.erase(block.chunk);
    blocks_.erase(b);
  }
  allocations_.erase(it);
}

template <typename F>
void UvmModel::ForEachBlock(uint64_t addr, int64_t bytes, F f) {
  if (bytes <= 0) return;
  const uint64_t page = static_cast<uint64_t>(config_.page_bytes);
  const uint64_t block_size = static_cast<uint64_t>(config_.block_bytes);
  const uint64_t end = addr + static_cast<uint64_t>(bytes);
  for (uint64_t b = addr / block_size * block_size; b < end; b += block_size) {
    auto it = blocks_.find(b);
    if (it == blocks_.end()) continue;  // not managed memory
    const uint64_t lo = std::max(addr, b), hi = std::min(end, b + block_size);
    f(b, it->second, static_cast<int>((lo - b) / page), static_cast<int>((hi - 1 - b) / page));
  }
}

void UvmModel::MigrateToDevice(uint64_t base, Block& block, int page, int64_t* counter) {
  Page& p = block.pages[page];
  if (p.on_device) return;
  MakeRoom(base, 1);
  p.on_device = true;
  if (!p.read_mostly) p.host_valid = false;  // migrated, not duplicated
  if (block.resident++ == 0) {
    block.has_chunk = true;
    block.chunk = chunks_.insert(chunks_.end(), base);
  }
  ++device_pages_;
  *counter += config_.page_bytes;
}

void UvmModel::MigrateToHost(Block& block, int page, int64_t* copy_counter) {
  Page& p = block.pages[page];
  if (!p.on_device) return;
  if (p.host_valid) {
    counters_.dropped_bytes += config_.page_bytes;
  } else {
    *copy_counter += config_.page_bytes;
    p.host_valid = true;
  }
  p.on_device = false;
  --device_pages_;
  if (--block.resident == 0 && block.has_chunk) {
    chunks_.erase(block.chunk);
    block.has_chunk = false;
  }
}

void UvmModel::MakeRoom(uint64_t servicing_block, int pages) {
  const int64_t capacity = config_.device_capacity_bytes / config_.page_bytes;
  while (device_pages_ + pages > capacity) {
    auto victim = std::find_if(chunks_.begin(), chunks_.end(), [&](uint64_t b) { return b != servicing_block; });
    if (victim == chunks_.end()) return;  // only the block being serviced is left: it overflows
    EvictChunk(*victim);
  }
}

void UvmModel::EvictChunk(uint64_t base) {
  Block& block = blocks_.at(base);
  for (int p = 0; p < pages_per_block(); ++p) MigrateToHost(block, p, &counters_.d2h_eviction_bytes);
  ++counters_.evicted_chunks;
}

void UvmModel::DensityPrefetch(uint64_t base, Block& block, const std::vector<bool>& faulted) {
  // One decision per servicing, from what is resident (the faulted pages included) before any of it.
  const int n = pages_per_block();
  std::vector<bool> occupied(n), prefetch(n, false);
  for (int q = 0; q < n; ++q) occupied[q] = block.pages[q].on_device;
  for (int p = 0; p < n; ++p) {
    if (!faulted[p]) continue;
    // The largest aligned region around p that is more than `density_threshold` occupied.
    for (int size = n; size >= 2; size /= 2) {
      const int start = p / size * size;
      const int count = static_cast<int>(std::count(occupied.begin() + start, occupied.begin() + start + size, true));
      if (count > config_.density_threshold * size) {
        std::fill(prefetch.begin() + start, prefetch.begin() + start + size, true);
        break;
      }
    }
  }
  for (int q = 0; q < n; ++q) {
    if (prefetch[q]) MigrateToDevice(base, block, q, &counters_.h2d_driver_prefetch_bytes);
  }
}

void UvmModel::GpuAccess(uint64_t addr, int64_t bytes, bool write) {
  int64_t faults = 0;
  ForEachBlock(addr, bytes, [&](uint64_t base, Block& block, int first, int last) {
    std::vector<bool> faulted(pages_per_block(), false);
    bool any = false;
    for (int p = first; p <= last; ++p) {
      Page& page = block.pages[p];
      if (page.on_device) {
        if (write) page.host_valid = false;
      } else if (page.remote) {
        counters_.remote_read_bytes += config_.page_bytes;
      } else {
        faulted[p] = any = true;
        ++faults;
      }
    }
    if (!any) return;
    for (int p = first; p <= last; ++p) {
      if (!faulted[p]) continue;
      MigrateToDevice(base, block, p, &counters_.h2d_fault_bytes);
      if (write) block.pages[p].host_valid = false;
    }
    DensityPrefetch(base, block, faulted);
  });
  counters_.faults += faults;
  counters_.fault_batches += (faults + config_.fault_batch_size - 1) / config_.fault_batch_size;
}

void UvmModel::Prefetch(uint64_t addr, int64_t bytes, Location to) {
  ForEachBlock(addr, bytes, [&](uint64_t base, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) {
      if (to == Location::kDevice) {
        MigrateToDevice(base, block, p, &counters_.h2d_user_prefetch_bytes);
      } else {
        MigrateToHost(block, p, &counters_.d2h_user_prefetch_bytes);
      }
    }
  });
}

void UvmModel::SetReadMostly(uint64_t addr, int64_t bytes, bool on) {
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) block.pages[p].read_mostly = on;
  });
}

void UvmModel::SetRemote(uint64_t addr, int64_t bytes, bool on) {
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) block.pages[p].remote = on;
  });
}

bool UvmModel::OnDevice(uint64_t addr) const {
  const uint64_t block_size = static_cast<uint64_t>(config_.block_bytes);
  auto it = blocks_.find(addr / block_size * block_size);
  if (it == blocks_.end()) return false;
  return it->second.pages[(addr % block_size) / static_cast<uint64_t>(config_.page_bytes)].on_device;
}

}  // namespace autouvm::runtime::sim
