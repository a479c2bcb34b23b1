#include "runtime/cuda/pinned_host.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace autouvm::runtime::cuda {

// Note [Host copies' memory]: a plan's first preparation makes a pinned host copy of every weight it
// stages (10.9 GiB for the 13B at factor 1.75), and that took 3-11 s. bench/offload_bench's host-alloc
// and host-copy probes on the H200 host (1 GiB, 2026-11-30): cudaHostAlloc 392 ms (+104 ms to free);
// anonymous memory with transparent huge pages (madvise), touched and cudaHostRegister'ed, 194 ms
// (22 ms to free; 4 KiB pages: 679 / 75 ms); copies into and out of either at 55 GB/s. Filling the copy
// from managed memory on the host: cudaMemcpy 4.3 GB/s, one CPU thread's memcpy 9.2 GB/s, eight 31 GB/s.
// So host copies are huge-page mappings registered with CUDA, and a copy whose managed range is on the
// host (where it was last prefetched) and is dropped right after (StageOut) is filled by CPU threads;
// any other (a range on the device, or one KeepHostCopy leaves where it is, which a CPU read would
// migrate) by cudaMemcpy, which reads it where it is. Most of the 194 ms is the kernel zeroing fresh
// pages as they are first touched (186 ms of it in one thread, 44 ms in eight; the host-alloc probe,
// bench/results/2026-11-30-stock-faults-h200.md), so eight threads
// touch the mapping before cudaHostRegister pins it.
absl::StatusOr<PinnedHost> AllocatePinnedHost(int64_t bytes) {
  const size_t body = RoundUp(static_cast<size_t>(bytes), kHugePage);
  const size_t len = body + kHugePage;  // room to start on a huge page boundary
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap of ", len, " bytes (a staged tensor's host copy): ", std::strerror(errno)));
  }
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t start = RoundUp(b, kHugePage);
  if (start > b) munmap(base, start - b);
  if (const size_t tail = len - (start - b) - body; tail > 0) munmap(reinterpret_cast<void*>(start + body), tail);
  void* ptr = reinterpret_cast<void*>(start);
  madvise(ptr, body, MADV_HUGEPAGE);  // best effort: without it the pages are 4 KiB, slower to pin
  // The kernel zeroes each page on first touch; cudaHostRegister would fault them in one thread.
  InParallel(body, [ptr](size_t at, size_t n) {
    for (size_t off = 0; off < n; off += 4096) static_cast<volatile char*>(ptr)[at + off] = 0;
  });
  if (cudaError_t e = cudaHostRegister(ptr, body, cudaHostRegisterDefault); e != cudaSuccess) {
    cudaGetLastError();
    munmap(ptr, body);
    return absl::InternalError(
        absl::StrCat("cudaHostRegister of ", body, " bytes (a staged tensor's host copy): ", cudaGetErrorString(e)));
  }
  return PinnedHost{ptr, body};
}

void FreePinnedHost(void* ptr, size_t mapped) {
  // Errors ignored: the mapping goes either way.
  cudaHostUnregister(ptr);
  munmap(ptr, mapped);
}

void ParallelCopy(void* to, const void* from, size_t bytes) {
  InParallel(bytes, [=](size_t at, size_t n) {
    std::memcpy(static_cast<char*>(to) + at, static_cast<const char*>(from) + at, n);
  });
}

}  // namespace autouvm::runtime::cuda
