// GpuSpec: what a GPU, its link to the host and the UVM driver on that host can do — the roofs the
// profiler classifies ops against and the costs the simulated backend charges. Every figure is a
// physical quantity with its source beside it in gpu_spec.cc (a measurement in shared/gpu/NOTES.md, a
// datasheet, or the driver source); none is tuned per scenario.
//
//   ASSIGN_OR_RETURN(GpuSpec spec, FindGpuSpec("h200-pcie5"));
//   ASSIGN_OR_RETURN(std::vector<GpuSpec> more, ParseGpuSpecs(yaml_text));  // user-defined specs
//
// Plain values; the built-in table is immutable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace autouvm::runtime {

// What the UVM driver charges on a host (runtime/sim/sim_backend.h: Note [The cost model]).
struct UvmCosts {
  double fault_batch_s = 0;    // fixed cost of servicing one batch of GPU faults
  double fault_entry_s = 0;    // per fault-buffer entry (fetched, sorted, de-duplicated)
  double fault_page_s = 0;     // per 64 KiB page migrated on a fault, besides the copy itself
  double fault_block_s = 0;    // per 2 MiB VA block serviced (lock, chunk, mapping, TLB)
  double prefetch_call_s = 0;  // per cudaMemPrefetchAsync call
  // Fraction of a prefetch to the device, issued to a stream with nothing pending, during which the
  // calling thread is held (the call returns only when most of the transfer is done): the host issues
  // nothing else meanwhile. Queued behind work, a prefetch returns at once.
  double prefetch_host_hold = 0;
  // A prefetch whose range is already where it is sent (nothing moves): per call, per 2 MiB block it
  // checks (the stream's time), and per block of the calling thread's time.
  double prefetch_resident_call_s = 0;
  double prefetch_resident_block_s = 0;
  double prefetch_resident_host_block_s = 0;
  double prefetch_block_s = 0;    // per 2 MiB block a prefetch migrates, besides the copy
  double d2h_page_s = 0;          // per 64 KiB page the GPU wrote migrated to the host, besides the copy
  double d2h_clean_page_s = 0;    // per page migrated to the host that the GPU did not write
  double drop_block_s = 0;        // per 2 MiB block whose device copy is dropped (no copy)
  double remote_bytes_per_s = 0;  // device reads of host memory mapped in place (zero-copy)
  // ... by matrix products (GEMV/GEMM kernels reach less of the link than a streaming read); 0: as above.
  double remote_matrix_bytes_per_s = 0;
  // Staged streaming (Note [Staged streaming], device_backend.h): pinned copies into a managed range,
  // per 2 MiB block populated on the device before them, per block discarded after use. A rate of 0:
  // the platform cannot stage, and the planner reads such weights in place instead.
  double staged_copy_bytes_per_s = 0;
  double populate_block_s = 0;
  double discard_block_s = 0;
};

struct GpuSpec {
  std::string name;
  std::string description;
  int64_t memory_bytes = 0;     // device memory
  double hbm_bytes_per_s = 0;   // device memory bandwidth
  double peak_flops = 0;        // dense bf16 tensor-core FLOP/s
  double link_bytes_per_s = 0;  // host↔device copy roof (pinned memory), each direction
  double kernel_launch_s = 0;   // per kernel on the GPU, besides its roofline time
  // Host time the framework (TorchScript's interpreter, the Observer installed) spends issuing one op;
  // kernels run asynchronously, so a step is bound by this when its kernels are shorter.
  double framework_op_s = 0;
  // The GPU decoder of exponent-coded weights (runtime/cuda/weight_decode.h): bf16 bytes out per second,
  // beside the copies (runtime.compress_streamed); 0: not measured for this GPU.
  double decode_bytes_per_s = 0;
  UvmCosts uvm;
};

// The built-in specs: h200-pcie5 (calibrated on the H200 host), h100-pcie5, a100-pcie4, rtx3060-pcie4.
const std::vector<GpuSpec>& BuiltinGpuSpecs();
// A built-in spec by name; NOT_FOUND listing the known names.
absl::StatusOr<GpuSpec> FindGpuSpec(std::string_view name);
// `spec` with pages migrated to the host (written by the GPU or not) at `bytes_per_s` whole, the rest
// unchanged. The H200 host's device-to-host rate moved between 8.7 and 20 GB/s from one process to the
// next (bench/results/2026-11-30-paper-transfers-h200.md); a benchmark that measured it in a step asks
// what the simulator predicts at that rate. A rate at or above the link's leaves the copy alone.
GpuSpec WithDeviceToHostRate(GpuSpec spec, double bytes_per_s);
// Specs from YAML: a list under `gpus:`, each with a `name`, optionally `base: <built-in name>` whose
// figures it starts from, and any of the fields in docs/gpu-specs.md. INVALID_ARGUMENT naming the
// entry and key for anything malformed.
absl::StatusOr<std::vector<GpuSpec>> ParseGpuSpecs(std::string_view yaml);

}  // namespace autouvm::runtime
