// Pinned host memory for the host copies of staged weights (Note [Host copies' memory],
// pinned_host.cc): huge-page mappings registered with CUDA, filled and copied by several CPU threads.
//
//   ASSIGN_OR_RETURN(PinnedHost copy, AllocatePinnedHost(bytes));
//   ParallelCopy(copy.ptr, from, bytes);
//   FreePinnedHost(copy.ptr, copy.mapped);
//
// Thread-safety: stateless functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace autouvm::runtime::cuda {

inline constexpr size_t kHugePage = size_t{2} << 20;

inline size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Runs work(offset, length) over [0, bytes) in up to eight threads of at least 16 MiB each (the caller's
// thread alone below 32 MiB); the parts start on 2 MiB boundaries.
template <typename Work>
void InParallel(size_t bytes, Work work) {
  const size_t threads = std::clamp<size_t>(bytes / (size_t{16} << 20), 1, 8);
  if (threads == 1) {
    work(size_t{0}, bytes);
    return;
  }
  const size_t part = RoundUp(bytes / threads, kHugePage);
  std::vector<std::thread> workers;
  for (size_t k = 0; k * part < bytes; ++k) {
    workers.emplace_back(work, k * part, std::min(part, bytes - k * part));
  }
  for (std::thread& w : workers) w.join();
}

struct PinnedHost {
  void* ptr = nullptr;
  size_t mapped = 0;  // the mapping's length: bytes rounded up to huge pages
};

// RESOURCE_EXHAUSTED or INTERNAL saying what failed (the mapping or its registration with CUDA).
absl::StatusOr<PinnedHost> AllocatePinnedHost(int64_t bytes);
void FreePinnedHost(void* ptr, size_t mapped);
// memcpy in up to eight threads (InParallel).
void ParallelCopy(void* to, const void* from, size_t bytes);

}  // namespace autouvm::runtime::cuda
