// Time to first token under a device budget (offload_bench --ttft-prompt N, GPU host only): one
// prompt of N tokens prefilled into slot 0, the model's weights beyond the budget kept off the device
// by each policy, as in the decode runs — stock and paper with the driver's eviction emulated, autouvm
// following the profiler's plan for the prefill's own trace, explicit offloading's copies.
//
//   RETURN_IF_ERROR(RunTtft(m, backend, observer, spec, {.prompt_len = 512, .factors = {1.5, 2.0},
//                                                         .policies = {"stock", "autouvm"}}, nullptr));
//
// Prints one table row per factor and policy: the first prefill (everything on the host before it, the
// policy's preparation included), the median of the later ones (a request arriving while the model
// runs under the budget), the link floor, the simulator's prediction and what crossed the link.
// Not thread-safe: the thread that owns the CUDA context and the current torch stream runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/decode_harness.h"
#include "bench/explicit_offload.h"
#include "runtime/device_backend.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"

namespace autouvm::bench {

struct TtftOptions {
  int64_t prompt_len = 512;
  std::vector<double> factors;
  std::vector<std::string> policies;  // stock, paper-prefetch, paper-pin, paper, autouvm, explicit
  int repeats = 4;                    // prefills per run; the first is the cold one
  // Also time the last prefill of each run op by op: GPU time of the ops that read streamed (or
  // offloaded) weights, which includes their waits for the copies, against the others.
  bool op_times = false;
};

// `m` must hold a KV cache of at least prompt_len positions; `arena` is needed for explicit only.
absl::Status RunTtft(DecodeModel& m, runtime::DeviceBackend* backend, runtime::Observer* observer,
                     const runtime::GpuSpec& spec, const TtftOptions& options, PinnedArena* arena);

}  // namespace autouvm::bench
