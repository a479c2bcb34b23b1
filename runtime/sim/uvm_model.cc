#include "runtime/sim/uvm_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>

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

void UvmModel::EnterDevice(uint64_t base, Block& block, Page& p) {
  MakeRoom(base, 1);
  p.on_device = true;
  p.evicted = false;
  if (block.resident++ == 0) {
    block.has_chunk = true;
    block.chunk = chunks_.insert(chunks_.end(), base);
  }
  ++device_pages_;
}

void UvmModel::MigrateToDevice(uint64_t base, Block& block, int page, MigrationCause cause) {
  Page& p = block.pages[page];
  if (p.on_device) return;
  if (p.evicted && cause != MigrationCause::kUserPrefetch) ++counters_.thrashing;
  EnterDevice(base, block, p);
  if (!p.read_mostly) p.host_valid = false;  // migrated, not duplicated
  counters_.h2d_bytes[static_cast<int>(cause)] += config_.page_bytes;
}

void UvmModel::MigrateToHost(Block& block, int page, MigrationCause cause) {
  Page& p = block.pages[page];
  if (!p.on_device) return;
  if (p.host_valid) {
    DropPage(block, page);
    return;
  }
  counters_.d2h_bytes[static_cast<int>(cause)] += config_.page_bytes;
  ++(p.written ? work_.d2h_pages : work_.d2h_clean_pages);
  LeaveDevice(block, p);
}

void UvmModel::DropPage(Block& block, int page) {
  Page& p = block.pages[page];
  if (!p.on_device) return;
  counters_.dropped_bytes += config_.page_bytes;
  ++work_.dropped_pages;
  LeaveDevice(block, p);
}

void UvmModel::LeaveDevice(Block& block, Page& p) {
  p.host_valid = true;  // copied back, or dropped with a valid (or no longer needed) host copy
  p.on_device = false;
  p.written = false;
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
  for (int p = 0; p < pages_per_block(); ++p) {
    if (block.pages[p].on_device) block.pages[p].evicted = true;
    MigrateToHost(block, p, MigrationCause::kEviction);
  }
  ++counters_.evictions;
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
    if (prefetch[q]) MigrateToDevice(base, block, q, MigrationCause::kDriverPrefetch);
  }
}

void UvmModel::Kernel(const std::vector<GpuRange>& ranges) {
  // Faults are taken in the order the kernel touches pages and serviced a batch at a time (up to
  // fault_batch_size entries), block by block, so that the density prefetcher sees all of a block's
  // faults in the batch, and pages evicted by one batch fault again if the kernel touches them later.
  struct Pending {
    std::vector<bool> faulted;
    std::vector<bool> written;
  };
  std::map<uint64_t, Pending> batch;
  double batch_entries = 0, entries = 0;
  auto service = [&] {
    if (batch.empty()) return;
    ++counters_.gpu_fault_groups;
    for (auto& [base, pend] : batch) {
      Block& block = blocks_.at(base);
      ++work_.serviced_blocks;
      const int64_t before = counters_.h2d(MigrationCause::kDriverPrefetch);
      for (int p = 0; p < pages_per_block(); ++p) {
        if (!pend.faulted[p]) continue;
        ++work_.faulted_pages;
        MigrateToDevice(base, block, p, MigrationCause::kFault);
        if (pend.written[p]) block.pages[p].host_valid = false, block.pages[p].written = true;
      }
      DensityPrefetch(base, block, pend.faulted);
      work_.faulted_pages += (counters_.h2d(MigrationCause::kDriverPrefetch) - before) / config_.page_bytes;
    }
    batch.clear();
    batch_entries = 0;
  };
  for (const GpuRange& r : ranges) {
    ForEachBlock(r.addr, r.bytes, [&](uint64_t base, Block& block, int first, int last) {
      for (int p = first; p <= last; ++p) {
        Page& page = block.pages[p];
        if (page.on_device) {
          if (r.write) page.host_valid = false, page.written = true;
          continue;
        }
        if (page.remote) {
          counters_.remote_bytes += config_.page_bytes;
          continue;
        }
        Pending& pend = batch[base];
        if (pend.faulted.empty()) {
          pend.faulted.assign(pages_per_block(), false);
          pend.written.assign(pages_per_block(), false);
        }
        pend.written[p] = pend.written[p] || r.write;
        if (pend.faulted[p]) continue;
        pend.faulted[p] = true;
        batch_entries += r.entries_per_page;
        entries += r.entries_per_page;
        if (batch_entries >= config_.fault_batch_size) service();
      }
    });
  }
  service();
  counters_.gpu_faults += static_cast<int64_t>(std::llround(entries));
}

void UvmModel::Prefetch(uint64_t addr, int64_t bytes, Location to) {
  ForEachBlock(addr, bytes, [&](uint64_t base, Block& block, int first, int last) {
    bool moved = false;
    for (int p = first; p <= last; ++p) {
      const Page& page = block.pages[p];
      if (to == Location::kDevice) {
        moved = moved || !page.on_device;
        MigrateToDevice(base, block, p, MigrationCause::kUserPrefetch);
      } else if (!(page.read_mostly && page.host_valid)) {
        moved = moved || page.on_device;
        MigrateToHost(block, p, MigrationCause::kUserPrefetch);
      }
      // else: a read-mostly page whose host copy is valid keeps its device copy as well (on the H200,
      // reads after such a prefetch stay at HBM speed and raise no faults: offload_bench's drop probe).
    }
    if (moved) ++work_.prefetch_blocks;
  });
}

void UvmModel::Populate(uint64_t addr, int64_t bytes) {
  ForEachBlock(addr, bytes, [&](uint64_t base, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) {
      Page& page = block.pages[p];
      if (page.on_device) continue;
      EnterDevice(base, block, page);
      page.host_valid = false;
      ++work_.populated_pages;
    }
  });
}

void UvmModel::SetReadMostly(uint64_t addr, int64_t bytes, bool on, Location keep) {
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) {
      Page& page = block.pages[p];
      if (!on && page.read_mostly && page.on_device && page.host_valid) {
        if (keep == Location::kHost) {
          DropPage(block, p);
        } else {
          page.host_valid = false;
        }
      }
      page.read_mostly = on;
    }
  });
}

void UvmModel::SetRemote(uint64_t addr, int64_t bytes, bool on) {
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) block.pages[p].remote = on;
  });
}

void UvmModel::DropDeviceCopies(uint64_t addr, int64_t bytes, bool discard) {
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) {
      if (discard || block.pages[p].host_valid) DropPage(block, p);
    }
  });
}

int64_t UvmModel::ResidentBytes(uint64_t addr, int64_t bytes) {
  int64_t pages = 0;
  ForEachBlock(addr, bytes, [&](uint64_t, Block& block, int first, int last) {
    for (int p = first; p <= last; ++p) pages += block.pages[p].on_device ? 1 : 0;
  });
  return pages * config_.page_bytes;
}

bool UvmModel::OnDevice(uint64_t addr) const {
  const uint64_t block_size = static_cast<uint64_t>(config_.block_bytes);
  auto it = blocks_.find(addr / block_size * block_size);
  if (it == blocks_.end()) return false;
  return it->second.pages[(addr % block_size) / static_cast<uint64_t>(config_.page_bytes)].on_device;
}

}  // namespace autouvm::runtime::sim
