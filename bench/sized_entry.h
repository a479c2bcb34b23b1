// GPU host only: a bench model entry for the daemon, written to its repository and sized as the daemon
// will load it (weights generated on the GPU, a KV cache for `max_batch` requests), so that a bench can
// set the daemon's device budget from it.
//
//   const EntrySize size = WriteSizedEntry(config, repo, streams, spec);    // Die()s on an error
//   const int64_t budget = static_cast<int64_t>(size.named_bytes / factor);
//
// The sizing runs in a forked child: what its CUDA context and allocator hold goes with it, so the
// daemon's residency is all the card shows, and the bench starts no torch threads before it forks the
// daemon. Call from main() before any other thread runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "engine/model_config.h"
#include "runtime/gpu_spec.h"

namespace autouvm::bench {

struct EntrySize {
  int64_t named_bytes = 0;   // every named tensor: weights and the KV cache
  int64_t weight_bytes = 0;  // the parameters alone
};

// Writes `config`'s entry under `repo` (weights generated at load from config.generated_weights_seed)
// and sizes it on CUDA with `spec`.
EntrySize WriteSizedEntry(const engine::ModelConfig& config, const std::string& repo, int max_batch,
                          const runtime::GpuSpec& spec);

// Runs `work` in a forked child (which may use CUDA; the parent then holds nothing of it) and hands back
// its two figures; Die()s if it failed.
std::pair<int64_t, int64_t> InChild(const std::function<std::pair<int64_t, int64_t>()>& work);

// The device's memory bandwidth as a model's kernels meet it: bytes read and written per second by
// device-to-device copies of a 2 GiB tensor in managed memory resident on the GPU (in a forked child).
double MeasureHbmBytesPerS(const runtime::GpuSpec& spec);

// The link's rate host to device as the staged copies meet it: bytes per second of copies of a 1 GiB
// pinned host tensor onto the GPU (in a forked child).
double MeasureLinkBytesPerS(const runtime::GpuSpec& spec);

}  // namespace autouvm::bench
