// The probes offload_bench runs before its measurements (GPU host only): what the UVM driver does with
// the calls the executor makes, how fast the link is by each way across it, whether a streamed weight's
// device copy can be dropped, and whether the model's compute slows pinned copies. Each prints one line
// (or a few) and returns an error only if a CUDA call it needs fails. Residency is read from timing or
// CUPTI, since cudaMemGetInfo does not count managed memory.
//
//   RETURN_IF_ERROR(ProbeDriver(backend));  RETURN_IF_ERROR(ProbeLink(backend));
//
// Not thread-safe: call from the thread that owns the CUDA context and the current torch stream.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "bench/decode_harness.h"
#include "runtime/device_backend.h"

namespace autouvm::bench {

// A 1 GiB read-mostly range: how long a prefetch to the device holds the calling thread, whether a
// prefetch back to the host frees device memory, what "preferred location host + unset read-mostly" costs.
absl::Status ProbeDriver(runtime::DeviceBackend* backend);
// How long a 1 GiB prefetch each way holds the calling thread when its stream has nothing pending, and
// when it is queued behind work (Note [Prefetches hold the host]).
absl::Status ProbeQueuedPrefetch(runtime::DeviceBackend* backend);
// Pinned copies (one call; five buffers; five beside small kernels), a managed prefetch, a remote-mapped
// read, and prefetches of a range already on the device (per call of 2 and 64 MiB).
absl::Status ProbeLink(runtime::DeviceBackend* backend);
// Three ways of dropping a streamed weight's device copy, each timed with the reads after it.
absl::Status ProbeDrop(runtime::DeviceBackend* backend);
// A streamed weight kept as a pinned host copy and brought into its managed range by a copy engine:
// discard the range (its device copy dropped, nothing copied back), then populate it on the device and
// copy the pinned bytes in, or copy them in directly. Times each step, checks the bytes, counts migrations.
absl::Status ProbeStaged(runtime::DeviceBackend* backend);
// The executor's pattern on staged tensors: 3 GiB as 24 staged tensors of 128 MiB, each read by a kernel
// once brought in, two in flight; the discard on the compute stream after the read, or on the copy stream
// before the next copy. Prints GB/s and the calling thread's time in the calls.
absl::Status ProbeStagedRing(runtime::DeviceBackend* backend);
// Four ways of filling a pinned host copy from 1 GiB of managed memory on the host, and four of
// putting it back there (what Unstage to the host does), GB/s of each.
absl::Status ProbeHostCopyFill(runtime::DeviceBackend* backend);
// What 1 GiB of pinned host memory for a host copy costs to make: cudaHostAlloc, or mmap + memset +
// cudaHostRegister with and without transparent huge pages (touched by one thread or eight); and how
// fast copies into and out of each run.
absl::Status ProbeHostCopyAlloc(runtime::DeviceBackend* backend);
// A plan's first preparation in the backend's own calls: 64 ranges of 128 MiB on the host given host
// copies by StageOut; GB/s, per-range times, and the huge pages the copies got.
absl::Status ProbeHostCopyMany(runtime::DeviceBackend* backend);
// The emulated driver eviction's traffic: 4 GiB moved to the host and back eight times by 64 MiB
// prefetches, the last four trips after 3 s idle; GB/s of each trip.
absl::Status ProbeEvictionCycles(runtime::DeviceBackend* backend);
// Does where a page got its device memory from matter to kernels? 2 GiB put on the device by prefetches
// and 2 GiB faulted in by kernels, then read by reductions: GB/s of each.
absl::Status ProbePlacement(runtime::DeviceBackend* backend);
// 1 GiB of pinned copies alone and beside resident decode steps of `m` at position `pos`.
absl::Status ProbeCopyBesideDecode(DecodeModel& m, const std::vector<int64_t>& first_tokens, int64_t pos);

}  // namespace autouvm::bench
